"""kernel_forge.model.task: loading manifests, and the messages (file + JSON path) for broken ones."""
from __future__ import annotations

import copy
import json
import shutil
from pathlib import Path

import pytest

from kernel_forge.common.errors import ManifestError
from kernel_forge.model.task import Tolerance, load_task

ROOT = Path(__file__).resolve().parents[2]
MANIFESTS = ROOT / "manifests"
BUNDLED = sorted(MANIFESTS.glob("*.json"))

BASE = {
    "name": "vector_add",
    "description": "c = a + b",
    "signature": 'extern "C" __global__ void vector_add(const float* a, const float* b, float* c, int n)',
    "reference": {"python": "vector_add.py:reference"},
    "baselines": {"cupy_add": {"python": "vector_add.py:cupy_add"}},
    "initial": "vector_add.cu",
    "args": {
        "a": {"shape": ["n"], "init": "normal"},
        "b": {"shape": ["n"], "init": {"kind": "uniform", "low": -2.0, "high": 2.0}},
        "c": {"shape": ["n"], "output": True},
        "n": "n",
    },
    "launch": {"grid": ["cdiv(n, 256)"], "block": [256]},
    "tolerance": {"atol": 1e-6, "rtol": 1e-6},
    "cost": {"flops": "n", "bytes": "12*n"},
    "cases": [
        {"name": "odd", "role": "correctness", "vars": {"n": 1003}},
        {"name": "tiny", "role": "correctness", "vars": {"n": 37}},
        {"name": "big", "role": "performance", "vars": {"n": 4096}},
        {"name": "hold", "role": "holdout", "vars": {"n": 777}},
    ],
}


@pytest.fixture
def make(tmp_path):
    shutil.copy(ROOT / "references" / "vector_add.py", tmp_path / "vector_add.py")
    shutil.copy(MANIFESTS / "vector_add.cu", tmp_path / "vector_add.cu")

    def _make(mutate=None, *, text: str | None = None, name: str = "task.json") -> Path:
        p = tmp_path / name
        if text is None:
            data = copy.deepcopy(BASE)
            if mutate:
                mutate(data)
            text = json.dumps(data, indent=2)
        p.write_text(text)
        return p

    return _make


def broken(make, mutate) -> tuple[ManifestError, Path]:
    p = make(mutate)
    with pytest.raises(ManifestError) as ei:
        load_task(p)
    exc = ei.value
    assert exc.file == str(p)
    assert str(exc).startswith(f"{p}: {exc.json_path}: ")
    assert exc.exit_code == 2
    return exc, p


# -- bundled manifests -------------------------------------------------------------------------

@pytest.mark.parametrize("path", BUNDLED, ids=lambda p: p.stem)
def test_bundled_manifest_loads(path):
    task = load_task(path)
    assert task.name == path.stem
    assert task.signature.name == path.stem
    assert task.path == path
    assert task.initial == (MANIFESTS / f"{path.stem}.cu").resolve()
    assert task.reference.kind == "python"
    assert task.reference.path.is_file()
    assert task.reference.path.suffix == ".py"
    assert [a.name for a in task.args] == list(task.signature.names)
    assert task.outputs, "every task checks at least one output"
    assert task.cases_with("performance")
    assert [c.index for c in task.cases] == list(range(len(task.cases)))
    assert len(task.hash()) == 64


def test_vector_add_details():
    task = load_task(MANIFESTS / "vector_add.json")
    assert [a.name for a in task.outputs] == ["c"]
    a, b, c, n = task.args
    assert a.is_buffer and a.init.kind == "normal" and not a.output
    assert b.init.kind == "uniform" and b.init.get("low") == -2.0 and b.init.get("high") == 2.0
    assert c.output and c.init is None and not c.in_out
    assert not n.is_buffer and n.value == "n"
    assert task.tolerance == Tolerance(1e-6, 1e-6)
    assert task.tolerance_for(c) == Tolerance(1e-6, 1e-6)
    tiny = task.case("tiny")
    assert tiny.role == "correctness" and tiny.vars == {"n": 37}
    assert task.shape(a, tiny) == (37,)
    assert task.scalar(n, tiny) == 37 and type(task.scalar(n, tiny)) is int
    assert task.cost(tiny) == (37.0, 444.0)
    assert task.launch.resolve(tiny.vars) == ((1, 1, 1), (256, 1, 1), 0)
    assert [x.name for x in task.cases_with("performance")] == ["n16M", "n64M"]
    assert task.baselines["cupy_add"].function == "cupy_add"
    assert task.reference.spec == "../references/vector_add.py:reference"
    with pytest.raises(KeyError):
        task.case("nope")
    with pytest.raises(KeyError):
        task.arg("nope")


def test_histogram_defaults_and_in_out():
    task = load_task(MANIFESTS / "histogram.json")
    bins = task.arg("bins")
    assert bins.output and bins.in_out and bins.init.kind == "zeros"
    assert task.case("odd").vars == {"nbins": 256, "n": 1000003}
    assert task.case("few_bins").vars["nbins"] == 3        # a case's vars override defaults
    assert task.tolerance == Tolerance(0, 0)               # allowed: integer output


def test_whole_float_case_vars_become_ints(make):
    p = make(lambda d: d["cases"][0]["vars"].__setitem__("n", 1003.0))
    v = load_task(p).case("odd").vars["n"]
    assert v == 1003 and type(v) is int


def test_per_output_tolerance_inherits(make):
    p = make(lambda d: d["args"]["c"].__setitem__("tolerance", {"rtol": 1e-3}))
    task = load_task(p)
    assert task.tolerance_for(task.arg("c")) == Tolerance(atol=1e-6, rtol=1e-3)


# -- hash ----------------------------------------------------------------------------------------

def test_hash_is_stable_and_follows_reference(make):
    p = make()
    h1 = load_task(p).hash()
    assert load_task(p).hash() == h1
    ref = p.parent / "vector_add.py"
    ref.write_text(ref.read_text() + "\n# changed\n")
    assert load_task(p).hash() != h1


def test_hash_follows_manifest_and_baselines(make, tmp_path):
    h1 = load_task(make()).hash()
    h2 = load_task(make(lambda d: d["cases"][0]["vars"].__setitem__("n", 1005))).hash()
    assert h1 != h2
    # a baseline in its own file: changing that file changes the hash too
    shutil.copy(ROOT / "references" / "vector_add.py", tmp_path / "base.py")
    p = make(lambda d: d.__setitem__("baselines", {"x": {"python": "base.py:cupy_add"}}))
    h3 = load_task(p).hash()
    (tmp_path / "base.py").write_text((tmp_path / "base.py").read_text() + "\n# changed\n")
    assert load_task(p).hash() != h3


# -- JSON / schema errors ----------------------------------------------------------------------

def test_invalid_json_reports_line_and_column(make):
    p = make(text='{\n  "name": "x",\n  "signature": oops\n}\n')
    with pytest.raises(ManifestError) as ei:
        load_task(p)
    assert str(ei.value) == f"{p}: $: invalid JSON at line 3, column 16: Expecting value"


def test_missing_manifest_file(tmp_path):
    p = tmp_path / "none.json"
    with pytest.raises(ManifestError) as ei:
        load_task(p)
    assert str(ei.value) == f"{p}: $: cannot read the manifest: No such file or directory"


def test_wrong_role(make):
    exc, _ = broken(make, lambda d: d["cases"][1].__setitem__("role", "warmup"))
    assert exc.json_path == "$.cases[1].role"
    assert "'warmup' is not one of ['correctness', 'performance', 'holdout']" in str(exc)


def test_missing_signature(make):
    exc, _ = broken(make, lambda d: d.pop("signature"))
    assert exc.json_path == "$"
    assert "'signature' is a required property" in str(exc)


def test_unknown_top_level_key(make):
    exc, _ = broken(make, lambda d: d.__setitem__("bogus", 1))
    assert exc.json_path == "$"
    assert "'bogus' was unexpected" in str(exc)


def test_non_numeric_case_var(make):
    exc, _ = broken(make, lambda d: d["cases"][2]["vars"].__setitem__("n", "big"))
    assert exc.json_path == "$.cases[2].vars.n"
    assert "'big' is not of type 'number'" in str(exc)


def test_bad_case_name(make):
    exc, _ = broken(make, lambda d: d["cases"][3].__setitem__("name", "has space"))
    assert exc.json_path == "$.cases[3].name"


def test_empty_shape(make):
    exc, _ = broken(make, lambda d: d["args"]["a"].__setitem__("shape", []))
    assert exc.json_path == "$.args.a.shape"


def test_negative_tolerance(make):
    exc, _ = broken(make, lambda d: d.__setitem__("tolerance", {"atol": -1}))
    assert exc.json_path == "$.tolerance.atol"


def test_bad_reference_spec(make):
    exc, _ = broken(make, lambda d: d.__setitem__("reference", {"python": "vector_add.py"}))
    assert exc.json_path.startswith("$.reference")


# -- meaning errors ------------------------------------------------------------------------------

def test_signature_that_does_not_parse(make):
    exc, _ = broken(make, lambda d: d.__setitem__(
        "signature", 'extern "C" __global__ void vector_add(float& a, float* c, int n)'))
    assert exc.json_path == "$.signature"
    assert "signature does not parse: references are not supported" in str(exc)


def test_name_differs_from_signature(make):
    exc, _ = broken(make, lambda d: d.__setitem__("name", "vec_add"))
    assert exc.json_path == "$.name"
    assert "name 'vec_add' differs from the kernel name 'vector_add' in the signature" in str(exc)


def test_unknown_arg(make):
    exc, _ = broken(make, lambda d: d["args"].__setitem__("zz", "n"))
    assert exc.json_path == "$.args.zz"
    assert "argument 'zz' is not a parameter of vector_add(a, b, c, n)" in str(exc)


def test_missing_arg_for_parameter(make):
    exc, _ = broken(make, lambda d: d["args"].pop("n"))
    assert exc.json_path == "$.args"
    assert "parameter 'int32 n' has no argument" in str(exc)
    assert exc.hint == 'add "n": "<expression>"'


def test_missing_buffer_arg_hint(make):
    exc, _ = broken(make, lambda d: d["args"].pop("b"))
    assert "parameter 'const float32* b' has no argument" in str(exc)
    assert exc.hint.startswith('add "b": {"shape"')


def test_const_output(make):
    exc, _ = broken(make, lambda d: d["args"]["a"].__setitem__("output", True))
    assert exc.json_path == "$.args.a.output"
    assert "const float32* a is const and cannot be an output" in str(exc)


def test_input_without_init(make):
    exc, _ = broken(make, lambda d: d["args"]["b"].pop("init"))
    assert exc.json_path == "$.args.b"
    assert "input buffer b needs an init" in str(exc)


def test_no_output(make):
    def m(d):
        d["signature"] = d["signature"].replace("float* c", "const float* c")
        d["args"]["c"] = {"shape": ["n"], "init": "zeros"}
    exc, _ = broken(make, m)
    assert exc.json_path == "$.args"
    assert 'no buffer is marked "output": true' in str(exc)


def test_scalar_given_as_buffer_and_buffer_as_scalar(make):
    exc, _ = broken(make, lambda d: d["args"].__setitem__("n", {"shape": [1]}))
    assert exc.json_path == "$.args.n"
    assert "int32 n is a scalar" in str(exc)
    exc, _ = broken(make, lambda d: d["args"].__setitem__("c", "n"))
    assert exc.json_path == "$.args.c"
    assert "float32* c is a pointer" in str(exc)


def test_no_performance_case(make):
    def m(d):
        for c in d["cases"]:
            if c["role"] == "performance":
                c["role"] = "correctness"
    exc, _ = broken(make, m)
    assert exc.json_path == "$.cases"
    assert 'at least one case needs role "performance"' in str(exc)


def test_duplicate_case_names(make):
    exc, _ = broken(make, lambda d: d["cases"][2].__setitem__("name", "odd"))
    assert exc.json_path == "$.cases[2].name"
    assert "case name 'odd' is used twice" in str(exc)


def test_shape_with_unknown_variable(make):
    exc, _ = broken(make, lambda d: d["args"]["a"].__setitem__("shape", ["n * q"]))
    assert exc.json_path == "$.args.a.shape"
    msg = str(exc)
    assert "unknown variable 'q' (known: n) in expression 'n * q'" in msg
    assert "(case 'odd', see $.cases[0].vars)" in msg


def test_shape_unknown_variable_only_in_one_case(make):
    def m(d):
        d["args"]["a"]["shape"] = ["n * k"]
        for c in d["cases"]:
            c["vars"]["k"] = 1
        del d["cases"][2]["vars"]["k"]
    exc, _ = broken(make, m)
    assert exc.json_path == "$.args.a.shape"
    assert "(case 'big', see $.cases[2].vars)" in str(exc)


def test_non_positive_shape(make):
    exc, _ = broken(make, lambda d: d["cases"][1]["vars"].__setitem__("n", 0))
    assert exc.json_path == "$.args.a.shape"
    assert "shape (0,) of a has a non-positive dimension in case 'tiny'" in str(exc)


def test_scalar_out_of_int32_range(make):
    exc, _ = broken(make, lambda d: d["cases"][3]["vars"].__setitem__("n", 2 ** 31))
    assert exc.json_path == "$.args.n"
    assert "n = 2147483648 does not fit int32 in case 'hold'" in str(exc)


def test_scalar_at_int32_limit_is_fine(make):
    def m(d):
        d["args"]["n"] = "2147483647"
    task = load_task(make(m))
    assert task.scalar(task.arg("n"), task.cases[0]) == 2 ** 31 - 1


def test_unsigned_scalar_cannot_be_negative(make):
    def m(d):
        d["signature"] = d["signature"].replace("int n", "unsigned int n")
        d["args"]["n"] = "n - 2000"
    exc, _ = broken(make, m)
    assert exc.json_path == "$.args.n"
    assert "n = -997 does not fit uint32 in case 'odd'" in str(exc)


def test_fractional_value_for_int_scalar_is_refused(make):
    # n = 1003 in case 'odd': n / 2 = 501.5 must not be truncated to 501
    exc, _ = broken(make, lambda d: d["args"].__setitem__("n", "n / 2"))
    assert exc.json_path == "$.args.n"
    assert "must be a whole number, got 501.5" in str(exc)
    assert "(case 'odd', see $.cases[0].vars)" in str(exc)
    exc, _ = broken(make, lambda d: d["args"].__setitem__("n", 2.5))
    assert exc.json_path == "$.args.n"
    assert "whole number, got 2.5" in str(exc)


def test_whole_float_for_int_scalar_is_accepted(make):
    task = load_task(make(lambda d: d["args"].__setitem__("n", "n / 1")))
    v = task.scalar(task.arg("n"), task.case("odd"))
    assert v == 1003 and type(v) is int


def test_zero_tolerance_for_float_output_is_a_warning_not_an_error(make):
    """A copy, a cast or a permute is bit-exact: tolerance 0 is allowed, and validate warns of it."""
    from kernel_forge.model.weak_cases import weak_case_warnings

    task = load_task(make(lambda d: d.__setitem__("tolerance", {"atol": 0, "rtol": 0})))
    warned = weak_case_warnings(task, run_reference=False)
    assert any(w.startswith("atol and rtol are both 0 for the floating-point output c: only a bit-exact kernel passes")
               for w in warned)
    assert not any("bit-exact" in w for w in weak_case_warnings(load_task(make()), run_reference=False))


def test_zero_tolerance_ok_when_float_output_overrides(make):
    def m(d):
        d["tolerance"] = {"atol": 0, "rtol": 0}
        d["args"]["c"]["tolerance"] = {"atol": 1e-6, "rtol": 1e-6}
    load_task(make(m))


def test_zero_per_output_tolerance_for_float_output_is_warned_of_for_that_output(make):
    from kernel_forge.model.weak_cases import weak_case_warnings

    task = load_task(make(lambda d: d["args"]["c"].__setitem__("tolerance", {"atol": 0, "rtol": 0})))
    assert any("both 0 for the floating-point output c" in w for w in weak_case_warnings(task, run_reference=False))
    # a partial override inherits the other zero from the task-wide tolerance
    def m(d):
        d["tolerance"] = {"atol": 0, "rtol": 0}
        d["args"]["c"]["tolerance"] = {"atol": 0}
    task = load_task(make(m))
    assert any("both 0 for the floating-point output c" in w for w in weak_case_warnings(task, run_reference=False))


def test_tolerance_that_accepts_anything(make):
    exc, _ = broken(make, lambda d: d["args"]["c"].__setitem__("tolerance", {"rtol": 2}))
    assert exc.json_path == "$.args.c.tolerance"
    assert "would accept almost anything" in str(exc)
    exc, _ = broken(make, lambda d: d.__setitem__("tolerance", {"atol": 1e3, "rtol": 0}))
    assert exc.json_path == "$.tolerance"


def test_missing_reference_file(make, tmp_path):
    exc, _ = broken(make, lambda d: d.__setitem__("reference", {"python": "nope.py:reference"}))
    assert exc.json_path == "$.reference.python"
    assert f"file not found: nope.py (looked in {tmp_path.resolve() / 'nope.py'})" in str(exc)


def test_missing_initial_file(make):
    exc, _ = broken(make, lambda d: d.__setitem__("initial", "nope.cu"))
    assert exc.json_path == "$.initial"
    assert "file not found: nope.cu" in str(exc)


def test_missing_baseline_file(make):
    exc, _ = broken(make, lambda d: d.__setitem__("baselines", {"vendor": {"python": "v.py:f"}}))
    assert exc.json_path == "$.baselines.vendor.python"


def test_cuda_baseline_is_refused(make):
    exc, _ = broken(make, lambda d: d.__setitem__("baselines", {"cu": {"cuda": "vector_add.cu"}}))
    assert exc.json_path == "$.baselines.cu"
    assert "baselines must be Python callables" in str(exc)


def test_missing_npy_file(make):
    exc, _ = broken(make, lambda d: d["args"]["b"].__setitem__("init", {"kind": "npy", "path": "x.npy"}))
    assert exc.json_path == "$.args.b.init.path"
    assert "file not found: x.npy" in str(exc)


@pytest.mark.parametrize("init, message", [
    ({"kind": "uniform", "low": 1, "high": 1}, "init uniform: low (1) must be below high (1)"),
    ({"kind": "randint", "low": 5, "high": 2}, "init randint: low (5) must be below high (2)"),
    ({"kind": "constant"}, "init kind 'constant' needs 'value'"),
    ({"kind": "npy"}, "init kind 'npy' needs 'path'"),
])
def test_bad_init(make, init, message):
    exc, _ = broken(make, lambda d: d["args"]["b"].__setitem__("init", init))
    assert exc.json_path == "$.args.b.init"
    assert message in str(exc)


def test_launch_with_unknown_variable(make):
    exc, _ = broken(make, lambda d: d["launch"].__setitem__("grid", ["cdiv(n, q)"]))
    assert exc.json_path == "$.launch"
    assert "unknown variable 'q'" in str(exc) and "(case 'odd')" in str(exc)


def test_negative_cost(make):
    exc, _ = broken(make, lambda d: d["cost"].__setitem__("flops", "-n"))
    assert exc.json_path == "$.cost.flops"
    assert "flops = -1003.0 for case 'odd' must be a finite non-negative number" in str(exc)


def test_cost_with_unknown_variable(make):
    exc, _ = broken(make, lambda d: d["cost"].__setitem__("bytes", "4 * m"))
    assert exc.json_path == "$.cost.bytes"
    assert "unknown variable 'm'" in str(exc)


def test_a_byte_count_above_every_buffer_moved_once_is_capped_there(tmp_path):
    """llm.c's encoder once counted B*T*C reads of a 50-row table and of the position table each
    batch re-reads: 7.55e7 bytes, more than the 2.85e7 its buffers hold, so its expert kernel at the
    copy bandwidth "moved" 2.2x what the GPU can and was refused as implausible.  The bytes are
    capped at the footprint (an in/out buffer counts twice); a count below it is kept."""
    wild = ROOT / "bench" / "wild" / "llmc_encoder"
    data = json.loads((wild / "llmc_encoder.json").read_text())
    data["cost"]["bytes"] = "4*(B*T + 3*B*T*C)"
    data["reference"]["python"] = str(wild / "reference.py") + ":reference"
    data["initial"] = str(wild / "naive.cu")
    (tmp_path / "enc.json").write_text(json.dumps(data))
    task = load_task(tmp_path / "enc.json")
    gpt2 = task.case("gpt2")
    b, t, c, v = 8, 1024, 768, 50
    footprint = 4 * (b * t * c + b * t + v * c + t * c)
    assert task.footprint_bytes(gpt2) == footprint < 4 * (b * t + 3 * b * t * c)
    assert task.cost(gpt2) == (b * t * c, footprint)
    shipped = load_task(wild / "llmc_encoder.json")        # counts each row it touches once
    assert shipped.cost(gpt2)[1] == 4 * (b * t + b * t * c + t * c + v * c)
    hist = load_task(MANIFESTS / "histogram.json")
    case = hist.cases_with("performance")[0]
    inout = sum(n for name, n in hist.buffer_bytes(case).items() if hist.arg(name).in_out)
    assert inout > 0 and hist.footprint_bytes(case) == hist.case_bytes(case) + inout
    vec = load_task(MANIFESTS / "vector_add.json")
    n16 = vec.case("n16M")
    assert vec.cost(n16)[1] == 12 * 16777216 == vec.footprint_bytes(n16)


def test_a_void_pointer_in_the_manifests_signature_asks_for_the_type_its_buffer_holds(make):
    exc, _ = broken(make, lambda d: d.__setitem__(
        "signature", 'extern "C" __global__ void vector_add(const void* a, const float* b, float* c, int n)'))
    assert exc.json_path == "$.signature" and "`const void* a`" in str(exc)
    assert "const __half* a" in exc.hint


def test_init_parameters_may_be_expressions_of_the_case_s_variables(make):
    """Token ids below each case's vocabulary: ``"high": "V"``; evaluated per case, for the draw, the
    range check and the weak-case lint."""
    from kernel_forge.model.inputs import generate
    from kernel_forge.model.weak_cases import input_warnings

    def ids(d):
        d["signature"] = 'extern "C" __global__ void vector_add(const float* a, const int* b, float* c, int n)'
        d["args"]["b"]["init"] = {"kind": "randint", "low": 0, "high": "n // 2"}
    task = load_task(make(ids))
    for case in task.cases:
        drawn = generate(task, case, 7).buffers["b"]
        assert drawn.min() >= 0 and drawn.max() < case.vars["n"] // 2 and drawn.max() >= case.vars["n"] // 4
        assert not input_warnings(task, case)          # integer ids are non-negative by design: no sign warning
    exc, _ = broken(make, lambda d: d["args"]["b"].__setitem__("init", {"kind": "uniform", "low": "n", "high": 3}))
    assert exc.json_path == "$.args.b.init" and "must be below high (3) in case 'odd'" in str(exc)
    exc, _ = broken(make, lambda d: d["args"]["b"].__setitem__("init", {"kind": "constant", "value": "m + 1"}))
    assert exc.json_path == "$.args.b.init" and "'m'" in str(exc)
