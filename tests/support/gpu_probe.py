"""Whether a usable GPU is here (probed once), and which GPU a pytest-xdist worker is pinned to."""
from __future__ import annotations

from functools import lru_cache


def gpu_for_worker(worker: str | None, gpus: str | None) -> str | None:
    """The GPU a pytest-xdist worker (gw0, gw1, ...) gets from KFORGE_TEST_GPUS ("0,1,...")."""
    ids = [g.strip() for g in (gpus or "").split(",") if g.strip()]
    if not worker or not ids or not worker.startswith("gw") or not worker[2:].isdigit():
        return None
    return ids[int(worker[2:]) % len(ids)]


@lru_cache(maxsize=1)
def probe() -> tuple[bool, str]:
    """(a usable NVIDIA GPU and driver are here, why not); probed once per process."""
    try:
        from kernel_forge.gate.gate import probe_gpu
        probe_gpu()
        return True, ""
    except Exception as exc:  # noqa: BLE001
        return False, str(exc).splitlines()[0]


def gpu_present() -> bool:
    """Whether a usable NVIDIA GPU and driver are here (probed once)."""
    return probe()[0]
