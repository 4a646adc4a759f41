"""The space of one tunable kernel (search/setting_space.py), over the real bundled templates:
its valid settings, what it counts as tried and gated, and its neighbourhoods."""
from __future__ import annotations

from pathlib import Path

from kernel_forge.model.candidate import load_candidate
from kernel_forge.search.setting_space import Space

ROOT = Path(__file__).resolve().parents[2]
REGBLOCK = ROOT / "kernel_forge" / "kernels" / "gemm" / "matmul_f32_regblock.cu"
TILED = ROOT / "kernel_forge" / "kernels" / "gemm" / "matmul_f32_tiled.cu"


def space(path=REGBLOCK) -> Space:
    return Space(load_candidate(path), path.name)


def test_a_space_lists_the_valid_settings_and_says_when_every_one_was_tried():
    sp = space()
    assert sp.count == 68 and sp.listed and sp.remaining() == 68 and not sp.exhausted()
    for i, d in enumerate(load_candidate(REGBLOCK).configurations()):
        sp.add(d, f"a{i:04d}", 100.0 + i, "passed" if i % 5 else "failed")
        assert sp.exhausted() == (i == 67)
    c = sp.counts()
    assert (c["settings"], c["gated"], c["failed"], c["passed"]) == (68, 68, 14, 54)
    assert c["best"] == "a0001" and c["best_us"] == 101.0


def test_a_setting_ruled_out_counts_as_tried_but_not_as_gated():
    sp = space(TILED)
    for i, d in enumerate(sp.untried()):
        sp.add(d, f"a{i:04d}", None, "ruled_out" if i == 0 else "passed")
    assert sp.exhausted()
    assert sp.counts()["ruled_out"] == 1 and sp.counts()["gated"] == sp.count - 1


def test_a_later_duplicate_of_a_gated_setting_keeps_its_verdict():
    """A setting gated, then proposed again and refused as a duplicate, was overwritten as ruled
    out (found while chasing the H200 run's tally, whose cause was its dispatch rules)."""
    sp = space(TILED)
    first, second, third = sp.untried()[:3]
    sp.add(first, "a0001", 50.0, "passed")
    sp.add(first, "a0009", None, "ruled_out")          # the duplicate comes after the verdict
    sp.add(second, "a0002", None, "pending")
    sp.add(second, "a0010", None, "ruled_out")
    sp.add(third, "a0003", None, "pending")
    sp.add(third, "a0011", 70.0, "failed")             # a resumed wait gets its verdict
    c = sp.counts()
    assert (c["gated"], c["passed"], c["failed"], c["pending"], c["ruled_out"]) == (2, 1, 1, 1, 0)
    assert c["best"] == "a0001" and sp.remaining() == sp.count - 3


def test_neighbours_are_valid_and_one_tunable_away():
    sp = space()
    d = dict(load_candidate(REGBLOCK).defines)
    for kind in ("adjacent", "hamming"):
        ns = sp.neighbours(d, kind=kind)
        assert ns and all(sp.valid(n) for n in ns)
        assert all(sum(n[k] != d[k] for k in sp.names) == 1 for n in ns)
    assert len(sp.neighbours(d, kind="hamming")) >= len(sp.neighbours(d, kind="adjacent"))
