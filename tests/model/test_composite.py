"""Several kernels in one file, one per shape (kernel_forge.model.composite): the composite's header
reads back, each member gets its own launch and constraints, each member compiles alone under
NVRTC, and the loop's hook proposes one only where different kernels win different cases."""
from __future__ import annotations

import math
from pathlib import Path

import pytest

from kernel_forge.common.errors import CandidateError
from kernel_forge.model.candidate import Launch, load_candidate, parse_candidate
from kernel_forge.model.composite import IMPL, compose
from kernel_forge.model.dispatch import problem
from kernel_forge.model.task import load_task
from kernel_forge.records.attempt import Attempt
from kernel_forge.search.dispatch_fit import COMPOSITE_DIRECTION, propose_composite

ROOT = Path(__file__).resolve().parents[2]
MATMUL = load_task(ROOT / "manifests" / "matmul_f32.json")
REGBLOCK = load_candidate(ROOT / "kernel_forge/kernels/gemm/matmul_f32_regblock.cu")
TF32WG = load_candidate(ROOT / "kernel_forge/kernels/gemm/gemm_tf32x3_wgmma.cu")
TILED = load_candidate(ROOT / "kernel_forge/kernels/gemm/matmul_f32_tiled.cu")


def test_each_member_runs_with_its_own_launch_and_only_its_own_constraints():
    comp = parse_candidate(compose([REGBLOCK, TF32WG], MATMUL.launch).render(), name="c.cu")
    assert comp.tunables[IMPL] == (0, 1)
    case = {"m": 4096, "n": 4096, "k": 4096}
    for i, member in enumerate((REGBLOCK, TF32WG)):
        setting = {**comp.defines, **member.defines, IMPL: i}
        assert comp.launch.resolve({**case, **setting}) == member.launch.resolve({**case, **member.defines})
        # the member's own default satisfies the composite's constraints; one that breaks its own does not
        assert comp.with_defines(setting).satisfies_constraints()
    # regblock's block-size constraint ((BM//TM)*(BN//TN) >= 64) binds member 0 only
    small = {**comp.defines, "BM": 32, "BN": 32, "TM": 8, "TN": 8}
    assert not comp.with_defines({**small, IMPL: 0}).satisfies_constraints()
    assert not load_candidate(ROOT / "kernel_forge/kernels/gemm/matmul_f32_regblock.cu").with_defines(small).satisfies_constraints()


def test_a_shared_tunable_lists_both_members_values_and_each_body_sits_behind_its_impl():
    comp = compose([REGBLOCK, TILED], MATMUL.launch)
    for k in set(REGBLOCK.tunables) & set(TILED.tunables):
        assert set(comp.tunables[k]) == set(REGBLOCK.tunables[k]) | set(TILED.tunables[k])
    src = comp.render()
    assert src.index(f"#if {IMPL} == 0") < src.index(f"#elif {IMPL} == 1") < src.rindex("#endif")
    assert src.count("// kforge: grid") == 1        # the members' headers are folded into one


def test_each_member_of_a_composite_compiles_alone_and_an_unknown_impl_stops_the_compile():
    pytest.importorskip("cuda.bindings.nvrtc")
    from kernel_forge.common.errors import CompileError
    from kernel_forge.gpu.nvrtc import compile_source

    comp = compose([REGBLOCK, TF32WG], MATMUL.launch)
    for i, member in enumerate((REGBLOCK, TF32WG)):
        r = compile_source(comp.source, arch="sm_90", defines={**member.defines, IMPL: i}, use_cache=False)
        alone = compile_source(member.source, arch="sm_90", defines=member.defines, use_cache=False)
        assert r.cubin and r.resources.get("registers") == alone.resources.get("registers")
    with pytest.raises(CompileError, match="names no kernel"):
        compile_source(comp.source, arch="sm_90", defines={**REGBLOCK.defines, IMPL: 2}, use_cache=False)


def test_members_that_cannot_share_a_file_are_refused_with_the_reason():
    with pytest.raises(CandidateError, match="two or more"):
        compose([REGBLOCK], MATMUL.launch)
    no_launch = parse_candidate("extern \"C\" __global__ void matmul() {}", name="bare.cu")
    with pytest.raises(CandidateError, match="no launch"):
        compose([REGBLOCK, no_launch], None)
    assert compose([REGBLOCK, no_launch], Launch(("cdiv(n, 16)",), (256,))).launch.grid[0] != 1
    coop = parse_candidate("// kforge: grid = [4]\n// kforge: block = [32]\n// kforge: cooperative = true\n"
                           "extern \"C\" __global__ void matmul() {}", name="coop.cu")
    with pytest.raises(CandidateError, match="cooperative"):
        compose([REGBLOCK, coop], MATMUL.launch)


# ------------------------------------------------------------------------------ the loop's hook

PERF = [c.name for c in MATMUL.cases_with("performance")]      # sq256, rect, large


def _attempt(id, label, defines, medians, band=0.005):
    cases = [{"name": n, "timing": {"median": medians[n], "p20": medians[n] * (1 - band),
                                    "p80": medians[n] * (1 + band)}} for n in PERF]
    return Attempt(id=id, iteration=1, proposer="tune", label=label, status="passed", defines=defines,
                   tunables={"x": [1]}, evaluation={"passed": True, "cases": cases},
                   score_us=math.exp(sum(math.log(medians[n]) for n in PERF) / len(PERF)))


def _reader(attempts_of):
    return lambda a: attempts_of[a.label].with_defines(a.defines)


#: the H100 figures of round 19: the SIMT regblock dispatch (7.95 / 9.45 / 3,099.6 µs) and the
#: split-TF32 wgmma kernel (23.50 / 28.12 / 2,366 µs)
SIMT = {"sq256": 7.95, "rect": 9.45, "large": 3099.6}
WGMMA = {"sq256": 23.50, "rect": 28.12, "large": 2366.0}


def test_where_a_tensor_core_kernel_wins_the_large_case_and_a_simt_one_the_small_the_hook_composes_them():
    small = {**REGBLOCK.defines, "BM": 32}
    attempts = [_attempt("a1", "matmul_f32_regblock.cu", REGBLOCK.defines, SIMT),
                _attempt("a2", "matmul_f32_regblock.cu", small, {k: v * 1.3 for k, v in SIMT.items()}),
                _attempt("a3", "gemm_tf32x3_wgmma.cu", TF32WG.defines, WGMMA)]
    read = _reader({"matmul_f32_regblock.cu": REGBLOCK, "gemm_tf32x3_wgmma.cu": TF32WG})
    p = propose_composite(attempts, MATMUL, candidate=read)
    assert p is not None and p.direction == COMPOSITE_DIRECTION and p.parent == "a1"
    cand = parse_candidate(p.source, name="composite.cu")
    assert problem(MATMUL, cand.dispatch) is None
    picks = {c.name: cand.dispatch.defines_for(c.vars)[IMPL] for c in MATMUL.cases_with("performance")}
    assert picks == {"sq256": 0, "rect": 0, "large": 1}
    chosen = {n: cand.dispatch.defines_for(c.vars) for n, c in ((c.name, c) for c in MATMUL.cases)}
    assert {k: v for k, v in chosen["sq256"].items() if k in REGBLOCK.tunables} == \
        {k: v for k, v in REGBLOCK.defines.items() if k in REGBLOCK.tunables}
    assert "predicted geomean" in p.rationale and "gemm_tf32x3_wgmma.cu" in p.rationale
    # once gated, the same composite is not proposed again
    again = Attempt(id="a4", iteration=1, proposer="tune", label=p.label, dispatch=cand.dispatch.to_json())
    assert propose_composite(attempts + [again], MATMUL, candidate=read) is None


def test_no_composite_where_one_kernel_wins_every_case_or_the_gain_is_within_the_floor():
    read = _reader({"matmul_f32_regblock.cu": REGBLOCK, "gemm_tf32x3_wgmma.cu": TF32WG})
    slower = {k: v * 1.1 for k, v in SIMT.items()}
    one = [_attempt("a1", "matmul_f32_regblock.cu", REGBLOCK.defines, SIMT),
           _attempt("a3", "gemm_tf32x3_wgmma.cu", TF32WG.defines, slower)]
    assert propose_composite(one, MATMUL, candidate=read) is None
    # the wgmma kernel 0.5 % faster on large only: the predicted gain is within the 1 % floor
    near = {**SIMT, "large": SIMT["large"] * 0.995, "sq256": 50.0, "rect": 50.0}
    two = [_attempt("a1", "matmul_f32_regblock.cu", REGBLOCK.defines, SIMT),
           _attempt("a3", "gemm_tf32x3_wgmma.cu", TF32WG.defines, near)]
    assert propose_composite(two, MATMUL, candidate=read) is None
    # a composite needs two or more performance cases
    assert propose_composite(two, load_task(ROOT / "manifests" / "vector_add.json"), candidate=read) is None
