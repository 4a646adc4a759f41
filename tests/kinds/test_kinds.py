"""kernel_forge/kinds: the operation read from the reference (kind, binding, parameters) for the
bundled tasks and for public signatures (tests/data/kinds), nothing matched for an operation of no
known kind, a stated kind checked, and the bound patterns instantiated for the task's own
signature, compiled with NVRTC for every storage type the kind allows.  Their gate runs on a GPU:
test_kinds_bound_gpu.py."""
from __future__ import annotations

import json
import re
import shutil
import time
from pathlib import Path

import pytest

from kernel_forge.kinds import KindMismatch, identify
from kernel_forge.kinds.bind import Unbindable, instantiate
from kernel_forge.model.task import load_task

ROOT = Path(__file__).resolve().parents[2]
MANIFESTS = ROOT / "manifests"
DATA = ROOT / "tests" / "data" / "kinds"

#: bundled task -> (kind, roles that must be bound as given, params that must hold)
BUNDLED = {
    "vector_add": ("elementwise", {"x": "a", "z": "b", "y": "c", "n": "n"}, {"form": "binary", "op": "add"}),
    "gelu_bf16": ("elementwise", {"x": "x", "y": "y"}, {"form": "map", "act": "gelu_tanh"}),
    "layernorm": ("row_norm", {"x": "x", "y": "y", "weight": "gamma", "bias": "beta", "rows": "rows", "cols": "cols",
                               "eps": "eps"}, {"norm": "layer"}),
    "softmax_rows": ("row_softmax", {"x": "x", "y": "y", "rows": "rows", "cols": "cols"}, {"log": False}),
    "reduce_sum": ("reduction", {"x": "x", "y": "out", "n": "n"}, {"op": "sum"}),
    "transpose": ("transpose", {"x": "x", "y": "y", "rows": "rows", "cols": "cols"}, {}),
    "histogram": ("histogram", {"x": "x", "bins": "bins", "n": "n", "nbins": "nbins"}, {"index": "ignore"}),
    "matmul_f32": ("gemm", {"a": "a", "b": "b", "c": "c", "m": "m", "n": "n", "k": "k"},
                   {"trans_a": False, "trans_b": False}),
}

#: public signatures and the new kinds (tests/data/kinds/NAME.json) -> (kind, roles, params)
PUBLIC = {
    "llmc_layernorm": ("row_norm", {"x": "inp", "y": "out", "weight": "weight", "bias": "bias", "mean": "mean",
                                    "rstd": "rstd", "rows": "N", "cols": "C", "eps": None},
                       {"norm": "layer", "eps": 1e-5}),
    "llmc_softmax": ("row_softmax", {"x": "inp", "y": "out", "rows": "N", "cols": "C"}, {"log": False}),
    "blur3x3": ("stencil2d", {"x": "x", "y": "y", "rows": "h", "cols": "w", "taps": None},
                {"k": 3, "edge": "clamp", "taps": [1 / 16, 2 / 16, 1 / 16, 2 / 16, 4 / 16, 2 / 16, 1 / 16, 2 / 16, 1 / 16]}),
    "conv5x5": ("stencil2d", {"x": "img", "y": "out", "taps": "filt", "rows": "H", "cols": "W"}, {"k": 5, "edge": "zero"}),
    "embedding": ("gather", {"y": "out", "index": "idx", "table": "table", "rows": "n", "cols": "dim"}, {}),
    "rmsnorm_f16": ("row_norm", {"x": "inp", "y": "out", "weight": "weight", "bias": None, "eps": "eps",
                                 "rows": "rows", "cols": "dim"}, {"norm": "rms"}),
    "bias_gelu_residual": ("elementwise", {"x": "x", "bias": "bias", "res": "res", "y": "out", "cols": "cols",
                                           "n": "rows*cols"}, {"form": "bias_act_res", "act": "gelu_erf"}),
    "exclusive_scan": ("scan", {"x": "in", "y": "out", "n": "n"}, {"exclusive": True, "per_row": False}),
    "bias_backward": ("column_reduction", {"x": "dout", "y": "dbias", "rows": "B*T", "cols": "OC"}, {"op": "sum"}),
    "log_softmax_bf16": ("row_softmax", {"x": "x", "y": "y", "rows": "rows", "cols": "cols"}, {"log": True}),
    "transpose_coalesced": ("transpose", {"x": "idata", "y": "odata", "rows": "height", "cols": "width"}, {}),
    "reduce_max": ("reduction", {"x": "in", "y": "out", "n": "n"}, {"op": "max", "axis": None}),
    "matmul_forward": ("gemm", {"a": "inp", "b": "weight", "c": "out", "bias": "bias", "m": "B*T", "n": "OC", "k": "C",
                                "alpha": None, "beta": None}, {"trans_a": False, "trans_b": True}),
    "byte_histogram": ("histogram", {"x": "buffer", "bins": "histo", "n": "size", "nbins": None}, {"index": "direct"}),
    "hist_mod": ("histogram", {"x": "v", "bins": "counts", "n": "n", "nbins": "nb"}, {"index": "modulo"}),
    "cumsum_rows": ("scan", {"x": "x", "y": "y", "rows": "rows", "cols": "cols"}, {"exclusive": False, "per_row": True}),
    "box_rows": ("box_filter", {"x": "src", "y": "dst", "rows": "height", "cols": "width", "radius": "radius"},
                 {"axis": "x", "edge": "zero", "norm": "sum"}),
    "sgemm_tn": ("gemm", {"a": "A", "b": "B", "c": "C", "m": "m", "n": "n", "k": "k", "alpha": "alpha", "beta": "beta",
                          "bias": None}, {"trans_a": True, "trans_b": False}),
}


def _check(found, kind, roles, params):
    m = found.match
    assert m is not None, found.why
    assert m.kind == kind, m.describe()
    for role, name in roles.items():
        assert m.binding.get(role) == name, (role, m.describe())
    for key, value in params.items():
        got = m.params.get(key)
        if isinstance(value, list):
            assert got == pytest.approx(value, abs=1e-6), key
        else:
            assert got == value, (key, m.describe())


@pytest.mark.parametrize("name", sorted(BUNDLED))
def test_every_bundled_task_is_identified_with_its_kind_and_binding(name):
    _check(identify(load_task(MANIFESTS / f"{name}.json")), *BUNDLED[name])


@pytest.mark.parametrize("name", sorted(PUBLIC))
def test_public_signatures_and_the_new_kinds_are_identified_with_their_binding(name):
    t0 = time.monotonic()
    found = identify(load_task(DATA / f"{name}.json"))
    _check(found, *PUBLIC[name])
    assert time.monotonic() - t0 < 5.0          # < ~1 s once the reference process is up; a cold start is slower


def test_a_reference_of_no_known_kind_is_nothing_matched_not_an_error():
    found = identify(load_task(DATA / "sort_rows.json"))
    assert found.match is None and "no kind" in found.why
    assert found.line().startswith("kind: nothing matched")


def _copy(tmp_path, name, edit=None, ref=None) -> Path:
    data = json.loads((DATA / f"{name}.json").read_text())
    shutil.copy(DATA / "refs.py", tmp_path / "refs.py")
    for cu in DATA.glob("*.cu"):
        shutil.copy(cu, tmp_path / cu.name)
    if ref is not None:
        (tmp_path / "refs.py").write_text((DATA / "refs.py").read_text() + "\n\n" + ref)
    if edit:
        edit(data)
    path = tmp_path / f"{name}.json"
    path.write_text(json.dumps(data))
    return path


def test_a_reference_that_writes_something_else_leaves_every_hypothesis_unmatched(tmp_path):
    ref = ("def noisy(out, inp, N, C):\n    import numpy as np\n"
           "    out[...] = np.random.default_rng(3).standard_normal(out.shape)\n")
    path = _copy(tmp_path, "llmc_softmax", lambda d: d.update(reference={"python": "refs.py:noisy"}), ref)
    assert identify(load_task(path)).match is None


def test_the_epsilon_is_read_off_the_reference_when_no_parameter_carries_it(tmp_path):
    ref = ("def ln6(out, mean, rstd, inp, weight, bias, N, C):\n    import numpy as np\n"
           "    x = inp.reshape(N, C).astype(np.float64); m = x.mean(1); v = x.var(1); s = 1 / np.sqrt(v + 1e-6)\n"
           "    out[...] = ((x - m[:, None]) * s[:, None] * weight + bias).reshape(out.shape); mean[...] = m; rstd[...] = s\n")
    path = _copy(tmp_path, "llmc_layernorm", lambda d: d.update(reference={"python": "refs.py:ln6"}), ref)
    assert identify(load_task(path)).match.params["eps"] == 1e-6


def test_a_stated_kind_skips_the_guess_and_is_still_checked(tmp_path):
    path = _copy(tmp_path, "llmc_softmax", lambda d: d.update(kind={"name": "row_softmax", "binding": {"x": "inp"}}))
    found = identify(load_task(path))
    assert found.match.source == "manifest" and found.match.binding["y"] == "out"
    assert "stated by the manifest" in found.line()
    wrong = _copy(tmp_path, "llmc_softmax", lambda d: d.update(kind={"name": "row_softmax", "params": {"log": True}}))
    with pytest.raises(KindMismatch, match="row_softmax"):
        identify(load_task(wrong))
    plain = _copy(tmp_path, "llmc_softmax", lambda d: d.update(kind="row_norm"))
    with pytest.raises(KindMismatch):
        identify(load_task(plain))


def test_validate_prints_the_kind_and_refuses_a_wrong_stated_kind_naming_its_json_path(tmp_path):
    from click.testing import CliRunner

    from kernel_forge.app.cli import cli

    res = CliRunner().invoke(cli, ["validate", "--no-compile", str(DATA / "llmc_layernorm.json")])
    assert res.exit_code == 0, res.output
    assert "kind: row_norm (x=inp, y=out, weight=weight, bias=bias, mean=mean, rstd=rstd, rows=N, cols=C" in res.output
    assert "bound patterns: bound_row_norm.cu" in res.output
    res = CliRunner().invoke(cli, ["validate", "--no-compile", str(DATA / "sort_rows.json")])
    assert res.exit_code == 0 and "kind: nothing matched" in res.output
    wrong = _copy(tmp_path, "llmc_softmax", lambda d: d.update(kind="gather"))
    res = CliRunner().invoke(cli, ["validate", "--no-compile", str(wrong)])
    assert res.exit_code == 2 and "$.kind" in res.output and "Traceback" not in res.output


# -- bound patterns ---------------------------------------------------------------------------------

BINDABLE = ["sgemm_tn", "llmc_layernorm", "llmc_softmax", "blur3x3", "conv5x5", "embedding", "rmsnorm_f16",
            "bias_gelu_residual", "exclusive_scan", "bias_backward", "log_softmax_bf16", "transpose_coalesced",
            "reduce_max", "matmul_forward", "byte_histogram", "hist_mod", "cumsum_rows", "box_rows"]
_TYPES = {"float": "float", "half": "__half", "bf16": "__nv_bfloat16"}


def _retyped(tmp_path, name: str, ctype: str) -> Path:
    """The manifest with every float buffer of the signature stored as ``ctype``."""
    def edit(d):
        d["signature"] = re.sub(r"\b(float|__half|__nv_bfloat16)\s*\*", ctype + "*", d["signature"])
        d["tolerance"] = {"atol": 3e-2, "rtol": 3e-2}
    return _copy(tmp_path, name, edit)


def _compiled(task, bound):
    from kernel_forge.gate import preflight
    from kernel_forge.model.candidate import parse_candidate
    from kernel_forge.model.signature import check_matches, find_entry
    from kernel_forge.search.bound import gate_source

    cand = parse_candidate(bound.source, name=bound.label)
    sig, _ = find_entry(bound.source, task.signature.name)
    check_matches(task.signature, sig)
    assert [p.text for p in sig.params] == [p.text for p in task.signature.params]
    preflight.check_kernel(task, cand, file=bound.label)         # static rules, launch on every case
    why = preflight.nvrtc_available()
    if why:
        pytest.skip(why)
    return preflight.compile_kernel(parse_candidate(gate_source(bound.source), name=bound.label), "sm_90",
                                    file=bound.label)


def test_a_reduction_that_adds_to_its_output_is_bound_to_add():
    """llm.c's matmul_backward_bias does dbias += the column sums: read as such, and the bound
    pattern adds to dbias instead of overwriting it (host emulation: test_kinds_emulated.py)."""
    task = load_task(ROOT / "bench" / "wild" / "llmc_bias_backward" / "llmc_bias_backward.json")
    found = identify(task)
    _check(found, "column_reduction", {"x": "dout", "y": "dbias", "rows": "B*T", "cols": "OC"},
           {"op": "sum", "accumulate": True})
    [bound] = instantiate(task, found.match)
    assert "#define KF_ACCUMULATE 1" in bound.source
    plain = identify(load_task(DATA / "bias_backward.json")).match      # the same sum, written over dbias
    assert "accumulate" not in plain.params
    assert "#define KF_ACCUMULATE 0" in instantiate(load_task(DATA / "bias_backward.json"), plain)[0].source


def test_a_sum_per_block_of_values_is_a_row_reduction_over_segments_the_last_one_short():
    """CUDA's classic reduction kernels write one sum per 2 * blockDim values (cuda-samples'
    reduction: g_odata has cdiv(n, 512) values); n need not be a multiple of the segment."""
    task = load_task(ROOT / "bench" / "wild" / "cs_reduction" / "cs_reduction.json")
    found = identify(task)
    _check(found, "row_reduction", {"x": "g_idata", "y": "g_odata", "n": "n"}, {"op": "sum", "segment": 512})
    [bound] = instantiate(task, found.match)
    assert "// kforge: grid = [cdiv(cdiv((n), 512), RPB), 1, 1]" in bound.source
    assert "kf_row_reduction(g_idata, g_odata, (((long long)(n)) + 511) / 512, 512LL, ((long long)(n)))" in bound.source


def test_a_gather_plus_a_row_by_position_is_a_gather_with_a_position_table():
    """llm.c's encoder_forward: out[b, t] = wte[inp[b, t]] + wpe[t]."""
    task = load_task(ROOT / "bench" / "wild" / "llmc_encoder" / "llmc_encoder.json")
    found = identify(task)
    _check(found, "gather", {"y": "out", "index": "inp", "table": "wte", "pos": "wpe", "period": "T", "rows": "B*T",
                             "cols": "C"}, {})
    [bound] = instantiate(task, found.match)
    assert "#define KF_HAS_POS 1" in bound.source and "kf_gather(inp, wte, wpe, out," in bound.source
    plain = identify(load_task(DATA / "embedding.json")).match
    assert "pos" not in plain.binding


def test_a_box_filter_down_the_columns_with_its_radius_a_parameter():
    """cuda-samples' boxFilter y pass: the mean of the 2r+1 pixels of a column, edges clamped."""
    task = load_task(ROOT / "bench" / "wild" / "cs_boxfilter_y" / "cs_boxfilter_y.json")
    found = identify(task)
    _check(found, "box_filter", {"x": "id", "y": "od", "rows": "h", "cols": "w", "radius": "r"},
           {"axis": "y", "edge": "clamp", "norm": "mean"})
    [bound] = instantiate(task, found.match)
    assert bound.label == "bound_box_filter_y.cu" and "#define KF_EDGE_CLAMP 1" in bound.source


@pytest.mark.parametrize("name", BINDABLE)
def test_every_bound_pattern_is_a_complete_kernel_with_the_task_s_own_signature_and_compiles(name):
    task = load_task(DATA / f"{name}.json")
    for bound in instantiate(task, identify(task).match):
        res = _compiled(task, bound)
        assert res.resources.get("spill_stores", 0) == 0, bound.label


@pytest.mark.parametrize("name", ["matmul_forward", "sgemm_tn"])
def test_an_fp32_gemm_gets_the_split_tf32_tensor_core_pattern_beside_the_simt_one(name):
    from kernel_forge.model.candidate import parse_candidate

    task = load_task(DATA / f"{name}.json")
    bounds = instantiate(task, identify(task).match)
    assert [b.label for b in bounds] == ["bound_gemm.cu", "bound_gemm_tf32x3.cu"]
    tf = bounds[1].source
    assert "mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32" in tf and "kf_split(" in tf
    trans = {"matmul_forward": ("0", "1"), "sgemm_tn": ("1", "0")}[name]
    assert f"#define KF_TRANS_A {trans[0]}" in tf and f"#define KF_TRANS_B {trans[1]}" in tf
    cand = parse_candidate(tf, name=bounds[1].label)
    assert cand.launch.shared_mem not in (0, "0") and 40 <= len(cand.configurations()) <= 200


@pytest.mark.parametrize("storage", sorted(_TYPES))
@pytest.mark.parametrize("name", ["llmc_layernorm", "llmc_softmax", "bias_gelu_residual", "blur3x3", "embedding",
                                  "cumsum_rows"])
def test_bound_patterns_compile_for_fp32_fp16_and_bf16_storage(tmp_path, name, storage):
    task = load_task(_retyped(tmp_path, name, _TYPES[storage]))
    found = identify(task)
    assert found.match is not None, found.why
    [bound] = instantiate(task, found.match)
    assert (f"typedef {_TYPES[storage]} kf_y_t;" in bound.source)
    _compiled(task, bound)


def test_a_binding_no_pattern_can_be_written_for_says_why():
    from kernel_forge.kinds.match import Match

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
        assert "kf_histogram(buffer, histo, ((long long)(size)), 256LL)" in bound.source


def test_the_tuner_gates_a_bound_pattern_at_its_default_setting_before_searching_its_settings(tmp_path):
    from kernel_forge.model.candidate import parse_candidate
    from kernel_forge.proposers.base import Exhausted, ProposalRequest
    from kernel_forge.search.bound import bound_templates, gate_label
    from kernel_forge.search.tuner import TuneProposer

    task = load_task(DATA / "llmc_layernorm.json")
    found = bound_templates(task, [], where=tmp_path)
    [path] = found.templates
    assert any(n.startswith("kind: row_norm") for n in found.notes)
    tuner = TuneProposer([], bound=found.templates)
    [first] = tuner.propose(ProposalRequest(system="", prompt="")).proposals
    pinned = parse_candidate(first.source, name="x")
    assert first.label == gate_label(path) and not pinned.tunables and pinned.defines == {
        "WPR": 1, "RPB": 4, "ITEMS": 8, "STREAM": 1}
    # it passed: the template with its tunables comes next
    [second] = tuner.propose(ProposalRequest(system="", prompt="", spent=[first.label], passed=[first.label])).proposals
    assert second.label == path.name and parse_candidate(second.source, name="y").tunables
    # it failed: the binding is dropped, and with nothing else left the tuner is done
    with pytest.raises(Exhausted):
        tuner.propose(ProposalRequest(system="", prompt="", spent=[first.label]))
