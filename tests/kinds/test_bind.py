"""kernel_forge/kinds/bind.py: bound patterns written for the task's own signature, and why one cannot be."""
from __future__ import annotations

from pathlib import Path

import pytest

from kernel_forge.kinds import KINDS, identify
from kernel_forge.kinds.bind import Unbindable, instantiate, kinds_with_patterns
from kernel_forge.kinds.match import Match
from kernel_forge.model.task import load_task

ROOT = Path(__file__).resolve().parents[2]
MANIFESTS = ROOT / "manifests"
DATA = ROOT / "tests" / "data" / "kinds"

#: layernorm's (x, gamma, beta, y, rows, cols, eps) as a layer norm's roles
LAYERNORM = {"x": "x", "y": "y", "weight": "gamma", "bias": "beta", "rows": "rows", "cols": "cols", "eps": "eps"}


def test_a_row_norm_is_one_file_ending_in_the_task_s_own_entry_point_with_its_parts_switched_on():
    [bound] = instantiate(load_task(MANIFESTS / "layernorm.json"), Match("row_norm", LAYERNORM, {"norm": "layer"}))
    src = bound.source
    assert (bound.pattern, bound.label) == ("row_norm", "bound_row_norm.cu") and "@@" not in src
    for line in ("#define KF_RMS 0", "#define KF_HAS_W 1", "#define KF_HAS_B 1", "#define KF_MEAN 0",
                 "#define KF_RSTD 0", "#define KF_ADD 0", "#define KF_SUM 0", "typedef float kf_x_t;", "typedef float kf_s_t;",
                 "// kforge: grid = [cdiv((rows), RPB), 1, 1]"):         # the launch in the manifest's sizes
        assert line in src.splitlines(), line
    assert src.endswith(
        'extern "C" __global__ void __launch_bounds__(KF_THREADS)\n'
        "layernorm(const float* x, const float* gamma, const float* beta, float* y, int rows, int cols, float eps)\n{\n"
        "    kf_row_norm(x, nullptr, nullptr, gamma, beta, y, nullptr, nullptr, nullptr, ((long long)(rows)), (int)((long long)(cols)), "
        "(float)(eps), (int)1LL, (int)1LL, (long long)(((long long)(cols))), nullptr);\n}\n")


def test_an_epsilon_no_parameter_carries_is_written_in_as_a_float_literal():
    task = load_task(MANIFESTS / "layernorm.json")
    [bound] = instantiate(task, Match("row_norm", {**LAYERNORM, "eps": None, "weight": None, "bias": None},
                                      {"norm": "rms", "eps": 1e-6}))
    assert {"#define KF_RMS 1", "#define KF_HAS_W 0", "#define KF_HAS_B 0"} <= set(bound.source.splitlines())
    assert "kf_row_norm(x, nullptr, nullptr, nullptr, nullptr, y, nullptr, nullptr, nullptr, ((long long)(rows)), " \
           "(int)((long long)(cols)), 1e-06f, (int)1LL, (int)1LL, (long long)(((long long)(cols))), nullptr);" in bound.source
    [half] = instantiate(task, Match("row_norm", {**LAYERNORM, "eps": None}, {"norm": "layer", "eps": 0.5}))
    assert "(int)((long long)(cols)), 0.5f, (int)1LL, (int)1LL, (long long)(((long long)(cols))), nullptr);" in half.source


def test_bf16_storage_brings_its_header_and_types_and_the_map_its_cuda_function():
    task = load_task(MANIFESTS / "gelu_bf16.json")
    [bound] = instantiate(task, Match("elementwise", {"x": "x", "y": "y", "n": "n"}, {"form": "map", "act": "gelu_tanh"}))
    lines = bound.source.splitlines()
    assert "#include <cuda_bf16.h>" in lines and "#define KF_BF16 1" in lines
    assert "typedef __nv_bfloat16 kf_x_t;" in lines and "typedef __nv_bfloat16 kf_y_t;" in lines
    assert "typedef float kf_z_t;" in lines and "#define KF_HAS_Z 0" in lines       # no second operand
    assert "    v = 0.5f * v * (1.0f + tanhf(0.7978845608028654f * (v + 0.044715f * v * v * v)));" in lines
    assert ("    kf_elementwise(x, nullptr, nullptr, nullptr, y, ((long long)(n)), 1LL, 1.0f, 0.0f, "
            "kf_chan{nullptr, nullptr, nullptr, nullptr, 0.0f, 1LL}, nullptr, nullptr);") in lines


def test_a_binding_that_cannot_be_written_says_what_is_missing_or_unsupported():
    layernorm = load_task(MANIFESTS / "layernorm.json")
    with pytest.raises(Unbindable, match="^the binding has no y$"):
        instantiate(layernorm, Match("row_norm", {k: v for k, v in LAYERNORM.items() if k != "y"}, {"norm": "layer"}))
    with pytest.raises(Unbindable, match=r"^no kernel parameter carries the cols \(a size the kernel must be given\)$"):
        instantiate(layernorm, Match("row_softmax", {"x": "x", "y": "y", "rows": "rows", "cols": None}, {}))
    # rows no parameter carries come from the launch: a block per row, the count read back from gridDim
    (bound,) = instantiate(layernorm, Match("row_softmax", {"x": "x", "y": "y", "rows": None, "cols": "cols"}, {}))
    assert "(long long)gridDim.x" in bound.source and "// kforge: grid = [cdiv((((rows) * (cols)) // ((cols))) * RPB, RPB)" \
        in bound.source


def test_every_kind_identification_can_name_has_a_bound_pattern():
    assert sorted(kinds_with_patterns()) == sorted(KINDS)


# -- moved from test_kinds.py: what instantiate writes for identified tasks ------------------------------

@pytest.mark.parametrize("name", ["matmul_forward", "sgemm_tn"])
def test_an_fp32_gemm_gets_the_split_tf32_tensor_core_patterns_beside_the_simt_one(name):
    from kernel_forge.model.candidate import parse_candidate
    from kernel_forge.model.limits import needed_target

    task = load_task(DATA / f"{name}.json")
    bounds = instantiate(task, identify(task).match)
    assert [b.label for b in bounds] == ["bound_gemm.cu", "bound_gemm_tf32x3.cu", "bound_gemm_tf32x3_wg.cu"]
    tf, wg = bounds[1].source, bounds[2].source
    assert "mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32" in tf and "kf_split(" in tf
    # Hopper's warpgroup MMA, A split in registers, B staged into K-major hi and lo tiles from either layout
    assert "wgmma.mma_async.sync.aligned.m64n" in wg and "k8.f32.tf32.tf32" in wg and "kf_split(" in wg
    assert "kf_tf32x3_wg_mainloop<BN, WGS, STAGES, (bool)KF_TRANS_A, (bool)KF_TRANS_B>" in wg
    assert needed_target(wg) == "sm_90a" and needed_target(tf) is None
    trans = {"matmul_forward": ("0", "1"), "sgemm_tn": ("1", "0")}[name]
    for src, label, lo, hi in ((tf, bounds[1].label, 40, 200), (wg, bounds[2].label, 20, 60)):
        assert f"#define KF_TRANS_A {trans[0]}" in src and f"#define KF_TRANS_B {trans[1]}" in src
        cand = parse_candidate(src, name=label)
        assert cand.launch.shared_mem not in (0, "0") and lo <= len(cand.configurations()) <= hi


@pytest.mark.parametrize("name, trans, bf16", [("linear_f16", ("0", "1"), "0"), ("hgemm_tn_bf16", ("1", "0"), "1")])
def test_a_16_bit_gemm_gets_the_tensor_core_patterns_alone_with_its_operands_layout_and_type(name, trans, bf16):
    from kernel_forge.model.candidate import parse_candidate

    task = load_task(DATA / f"{name}.json")
    bound, wg = instantiate(task, identify(task).match)    # not the fp32 patterns: they read float operands
    assert (bound.label, wg.label) == ("bound_gemm_f16.cu", "bound_gemm_f16_wg.cu")
    # Hopper's warpgroup MMA: each operand staged as it lies, the instruction told which is transposed
    w = wg.source
    assert "wgmma.mma_async.sync.aligned.m64n" in w and "kf_wg_mainloop<BN, MT, WGS, STAGES, INFLIGHT, KF_TRANS_A, !KF_TRANS_B, (bool)KF_AB_BF16>" in w
    assert f"#define KF_TRANS_A {trans[0]}" in w and f"#define KF_TRANS_B {trans[1]}" in w
    assert f"#define KF_AB_BF16 {bf16}" in w and "needs sm_90a" in w and "ldmatrix" not in w.split("kf_gemm(")[1]
    assert 40 <= len(parse_candidate(w, name=wg.label).configurations()) <= 200
    src = bound.source
    mma = "bf16.bf16" if bf16 == "1" else "f16.f16"
    assert f"mma.sync.aligned.m16n8k16.row.col.f32.{mma}.f32" in src and "ldmatrix" in src
    assert f"#define KF_TRANS_A {trans[0]}" in src and f"#define KF_TRANS_B {trans[1]}" in src
    assert f"#define KF_AB_BF16 {bf16}" in src
    assert f"#define KF_HAS_BIAS {int(name == 'linear_f16')}" in src and f"#define KF_HAS_BETA {bf16}" in src
    cand = parse_candidate(src, name=bound.label)
    assert cand.launch.shared_mem not in (0, "0") and 40 <= len(cand.configurations()) <= 200


@pytest.mark.parametrize("weight, why", [
    ("float", "the bound gemm is float32 (SIMT FFMA or split TF32) or 16-bit (fp16 or bf16 on the tensor cores); "
              "a, b, c and bias are __half, float, __half, __half"),
    ("__nv_bfloat16", "the bound 16-bit gemm multiplies operands of one type: a and b are fp16 and bf16"),
    ("out:int", "the bound 16-bit gemm writes a floating-point c (and reads such a bias): c is int, bias __half")])
def test_a_gemm_of_mixed_operand_types_is_unbindable_saying_the_types(tmp_path, weight, why):
    from tests.support.kind_tasks import copy_task

    old, new = ("__half* out", "int* out") if weight == "out:int" else ("const __half* weight", f"const {weight}* weight")
    path = copy_task(tmp_path, "linear_f16", lambda d: d.update(signature=d["signature"].replace(old, new)))
    task = load_task(path)
    match = Match("gemm", {"a": "inp", "b": "weight", "c": "out", "bias": "bias", "m": "B*T", "n": "OC", "k": "C"},
                  {"trans_b": True})
    with pytest.raises(Unbindable) as e:
        instantiate(task, match)
    assert str(e.value) == why


def test_a_binding_no_pattern_can_be_written_for_says_why():
    task = load_task(MANIFESTS / "histogram.json")
    found = identify(task).match
    with pytest.raises(Unbindable, match="no bound pattern for kind sort"):
        instantiate(task, Match("sort", found.binding, {}))
    # a bin count that no parameter carries, and the output's shape is a size, not a number
    with pytest.raises(Unbindable, match=r"no kernel parameter carries the number of bins, and bins's shape \['nbins'\]"):
        instantiate(task, Match("histogram", {**found.binding, "nbins": None}, found.params))


@pytest.mark.parametrize("name, storage", [("byte_histogram", "unsigned char"), ("hist_mod", "int")])
def test_the_bound_histogram_counts_into_a_tally_it_moves_into_the_bins_so_no_zeroed_output_is_needed(name, storage):
    """hist_mod's counts are a pure output (poisoned by the gate): the pattern must overwrite every bin."""
    task = load_task(DATA / f"{name}.json")
    [bound] = instantiate(task, identify(task).match)
    assert f"typedef {storage} kf_x_t;" in bound.source
    assert ("typedef unsigned long long kf_count_t;" in bound.source) == (name == "hist_mod")
    assert ("#define KF_INDEX_MODULO 1" in bound.source) == (name == "hist_mod")
    assert "bins[b] = (kf_bins_t)(" in bound.source           # the last block writes every bin
    if name == "byte_histogram":                              # 256 bins: the output's own shape
        assert "kf_histogram(buffer, histo, ((long long)(size)), 256LL, 0.0, 0.0, nullptr)" in bound.source



def test_an_integer_prefix_sum_is_bound_exact_and_a_64_bit_whole_array_one_is_refused_by_name(tmp_path):
    """Integers are summed in y's own type (no float rounding); the whole-array scan passes tile
    sums between blocks in 32 bits, so an int64 y is refused with why, while a per-row one binds."""
    from tests.support.kind_tasks import copy_task

    task = load_task(DATA / "compact_offsets.json")
    [bound] = instantiate(task, identify(task).match)
    assert "typedef int kf_acc_t;" in bound.source and "#define KF_INT_SCAN 1" in bound.source

    def to_int64(data):
        data["signature"] = data["signature"].replace("int* offsets", "long long* offsets")

    wide = load_task(copy_task(tmp_path, "compact_offsets", to_int64))
    with pytest.raises(Unbindable, match="32-bit tile sums.*long long"):
        instantiate(wide, identify(wide).match)
    rows = load_task(DATA / "row_cumsum_i64.json")
    [bound] = instantiate(rows, identify(rows).match)
    assert bound.pattern == "scan_rows" and "typedef long long kf_acc_t;" in bound.source


@pytest.mark.slow
@pytest.mark.parametrize("name", ["sgemm_tn", "matmul_forward", "bmm_f32"])
def test_every_setting_of_the_bound_split_tf32_wgmma_gemm_compiles_without_spills(name):
    """Each operand layout (A transposed; B transposed with a bias; a batch) at every setting: the
    running and fresh accumulators, the A fragments and B's staging registers fit in 255."""
    pytest.importorskip("cuda.bindings.nvrtc")
    from kernel_forge.gpu.nvrtc import compile_source
    from kernel_forge.model.candidate import parse_candidate

    task = load_task(DATA / f"{name}.json")
    [wg] = [b for b in instantiate(task, identify(task).match) if b.pattern == "gemm_tf32x3_wg"]
    cand = parse_candidate(wg.source, name=wg.label)
    bad = []
    for d in cand.configurations():
        r = compile_source(cand.source, arch="sm_90", defines=d, file_label=wg.label)
        res = r.resources
        if not r.cubin or res.get("spill_stores", 0) + res.get("spill_loads", 0) or not 0 < res.get("registers", 0) <= 255:
            bad.append(f"{d}: {res} {r.log[-300:]}")
    assert not bad, "\n".join(bad[:5])
