"""A case's profiler summary read for the reader: in one shape whatever wrote it (the profiler
of :mod:`kernel_forge.gate.profiler`, a recorded run, an older summary), and its top warp
stalls as one line of text."""
from __future__ import annotations

__all__ = ["normalise_case", "stall_text"]


def normalise_case(summary: dict | None) -> dict | None:
    """A case's profile summary in :func:`summarise_row`'s shape, whatever wrote it: stalls given
    as plain names become ``{"reason", "share": None}``; an ``achieved_occupancy`` fraction
    becomes ``achieved_occupancy_pct``."""
    if not summary:
        return None
    out = dict(summary)
    if out.get("achieved_occupancy_pct") is None and isinstance(out.get("achieved_occupancy"), (int, float)):
        occ = float(out["achieved_occupancy"])
        out["achieved_occupancy_pct"] = occ * 100.0 if occ <= 1.0 else occ
    stalls = []
    for s in out.get("stalls") or []:
        if isinstance(s, str):
            stalls.append({"reason": s, "share": None})
        elif isinstance(s, dict) and s.get("reason"):
            stalls.append(s)
    out["stalls"] = stalls
    return out


def stall_text(stalls: list[dict], top: int = 4) -> str:
    """``long_scoreboard 51%, barrier 17%`` (a stall without a share is named alone)."""
    return ", ".join(s["reason"] + (f" {100 * s['share']:.0f}%" if isinstance(s.get("share"), (int, float)) else "")
                     for s in stalls[:top])
