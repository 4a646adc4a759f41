"""A gate for matmul_f32's templates with a known optimum: each setting scored by its distance from
:data:`OPT` (regblock at 50 µs), the rest of the scripted gate (tests/support/fakes.py) as it is."""
from __future__ import annotations

from kernel_forge.model.candidate import load_candidate

from tests.support.fakes import ScriptedGate
from tests.support.paths import ROOT

#: the regblock setting the landscape is lowest at
OPT = {"BM": 64, "BN": 32, "BK": 32, "TM": 4, "TN": 4, "MINB": 1}


class LandscapeGate(ScriptedGate):
    """The templates' settings scored by their distance (in steps of sorted values) from a
    known optimum: regblock at OPT 50 µs; every other template setting 150 µs and up."""

    def time_us(self, cand):
        if "WM" in cand.defines:                     # the warp-tiled pattern: slower than regblock's optimum
            return 150.0 + cand.defines["WM"] / 16
        if "TM" in cand.defines and "BM" in cand.defines:
            vals = load_candidate(ROOT / "kernel_forge" / "kernels" / "gemm" / "matmul_f32_regblock.cu").tunables
            dist = sum(abs(sorted(vals[n]).index(cand.defines[n]) - sorted(vals[n]).index(OPT[n])) for n in OPT)
            return 50.0 * (1 + 0.3 * dist)
        if "TILE" in cand.defines:
            return 150.0 + cand.defines["RPT"]
        return super().time_us(cand)
