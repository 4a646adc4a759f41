"""The tasks bundled in manifests/: they load, their naive kernels compile cleanly and match the
declared signature, and their Python references are right (checked against independent
plain-Python loops on tiny cases).  CPU only: nothing here launches a kernel."""
from __future__ import annotations

import inspect
import math
from functools import lru_cache
from pathlib import Path

import numpy as np
import pytest

from kernel_forge.model.candidate import parse_candidate
from kernel_forge.model.inputs import generate, host_values
from kernel_forge.model.references import load_callable
from kernel_forge.model.reference_process import run_python_reference
from kernel_forge.model.signature import check_matches, find_entry
from kernel_forge.model.task import Case, load_task

ROOT = Path(__file__).resolve().parents[2]
MANIFESTS = ROOT / "manifests"

EXPECTED_TASKS = ("vector_add", "matmul_f32", "softmax_rows", "reduce_sum", "layernorm",
                  "transpose", "histogram", "gelu_bf16", "matmul_f16")
ALL_MANIFESTS = sorted(p.stem for p in MANIFESTS.glob("*.json"))
ARCHS = ("sm_80", "sm_90")
MAX_BUFFER_BYTES = 1 << 30


@lru_cache(maxsize=None)
def task_of(name: str):
    return load_task(MANIFESTS / f"{name}.json")


def small_cases(task):
    return task.cases_with("correctness", "holdout")


# -- manifests ------------------------------------------------------------------------------

def test_expected_tasks_are_bundled():
    missing = set(EXPECTED_TASKS) - set(ALL_MANIFESTS)
    assert not missing, f"manifests missing: {sorted(missing)}"


@pytest.mark.parametrize("name", ALL_MANIFESTS)
def test_manifest_loads(name):
    task = task_of(name)
    assert task.name == name
    assert task.initial == (MANIFESTS / f"{name}.cu").resolve()
    assert task.raw.get("$schema") == "../kernel_forge/schemas/manifest.schema.json"
    assert task.reference.kind == "python"
    assert task.launch is not None, "the naive kernel relies on the manifest's launch"
    assert task.flops is not None and task.bytes is not None


@pytest.mark.parametrize("name", ALL_MANIFESTS)
def test_cases_cover_the_roles(name):
    task = task_of(name)
    assert len(task.cases_with("correctness")) >= 1
    assert len(task.cases_with("performance")) >= 2
    holdouts = task.cases_with("holdout")
    assert len(holdouts) >= 1
    others = [c.vars for c in task.cases if c.role != "holdout"]
    for h in holdouts:
        assert h.vars not in others, f"holdout {h.name} repeats the sizes of another case"
    for c in task.cases_with("correctness"):
        assert any(isinstance(v, int) and v % 32 for v in c.vars.values()), \
            f"correctness case {c.name} has no awkward (non multiple of 32) size"


@pytest.mark.parametrize("name", ALL_MANIFESTS)
def test_launch_and_buffers_fit_every_case(name):
    task = task_of(name)
    for case in task.cases:
        grid, block, smem = task.launch.resolve(case.vars)
        assert all(d >= 1 for d in grid + block)
        assert block[0] * block[1] * block[2] <= 1024
        assert grid[0] < 2 ** 31 and grid[1] <= 65535 and grid[2] <= 65535
        assert smem == 0
        for arg in task.args:
            if arg.is_buffer:
                nbytes = math.prod(task.shape(arg, case)) * arg.param.dtype.itemsize
                assert nbytes <= MAX_BUFFER_BYTES, f"{arg.name} in {case.name}: {nbytes} bytes"
        flops, nbytes = task.cost(case)
        assert flops is not None and nbytes is not None and nbytes > 0


# -- initial kernels ----------------------------------------------------------------------------

@pytest.mark.parametrize("name", ALL_MANIFESTS)
def test_initial_kernel_matches_the_signature(name):
    task = task_of(name)
    source = task.initial.read_text(encoding="utf-8")
    found = find_entry(source, task.name)
    assert found is not None, f"{task.initial} does not define {task.name}"
    sig, _line = found
    check_matches(task.signature, sig)
    assert sig.text == task.signature.text
    candidate = parse_candidate(source, name=str(task.initial))
    assert candidate.launch is None and not candidate.tunables and not candidate.defines, \
        "initial kernels carry no kforge header: they use the manifest's launch"


@pytest.mark.parametrize("arch", ARCHS)
@pytest.mark.parametrize("name", ALL_MANIFESTS)
def test_initial_kernel_compiles_without_warnings(name, arch, tmp_path, monkeypatch):
    pytest.importorskip("cuda.bindings.nvrtc")
    from kernel_forge.gpu.nvrtc import compile_source

    monkeypatch.setenv("KFORGE_CACHE_DIR", str(tmp_path))
    task = task_of(name)
    result = compile_source(task.initial.read_text(encoding="utf-8"), arch=arch, use_cache=False,
                            file_label=task.initial.name)
    assert result.cubin
    assert "warning" not in result.log.lower(), result.log
    assert result.resources.get("spill_stores", 0) == 0


# -- references and baselines ----------------------------------------------------------------

@pytest.mark.parametrize("name", ALL_MANIFESTS)
def test_callables_take_the_kernel_parameters(name):
    task = task_of(name)
    for ref in (task.reference, *task.baselines.values()):
        fn = load_callable(ref)  # baselines import cupy lazily, so this works without a GPU
        params = list(inspect.signature(fn).parameters)
        assert params == list(task.signature.names), f"{ref.describe()}: {params}"


@pytest.mark.parametrize("name", ALL_MANIFESTS)
def test_reference_runs_on_small_cases(name):
    task = task_of(name)
    for case in small_cases(task):
        inputs = generate(task, case, seed=1)
        out = run_python_reference(task, inputs)
        assert set(out) == {a.name for a in task.outputs}
        for arg in task.outputs:
            values = np.asarray(out[arg.name], dtype=np.float64)
            assert values.shape == task.shape(arg, case)
            assert np.all(np.isfinite(values)), f"{case.name}: {arg.name} is not finite"
            if values.size > 1:
                assert np.ptp(values) > 0, f"{case.name}: {arg.name} is constant"
            else:
                assert values.flat[0] != 0, f"{case.name}: {arg.name} is zero"


@pytest.mark.parametrize("name", ALL_MANIFESTS)
def test_signed_float_inputs_have_negative_values(name):
    task = task_of(name)
    case = task.cases_with("correctness")[0]
    inputs = generate(task, case, seed=1)
    for arg in task.args:
        if not arg.is_buffer or arg.output or arg.param.dtype.kind != "float":
            continue
        values = host_values(arg, inputs.buffers[arg.name])
        assert values.min() < 0 < values.max(), f"{arg.name} is not signed in case {case.name}"


def test_histogram_inputs_fall_outside_the_bins():
    task = task_of("histogram")
    for case in small_cases(task):
        x = generate(task, case, seed=1).buffers["x"]
        nbins = case.vars["nbins"]
        assert (x < 0).any() and (x >= nbins).any()
        assert ((x >= 0) & (x < nbins)).any()


# -- references against independent plain-Python loops ----------------------------------------

def _loops_vector_add(v, s):
    return {"c": [float(np.float32(v["a"][i] + v["b"][i])) for i in range(s["n"])]}


def _loops_matmul(v, s):
    m, n, k = s["m"], s["n"], s["k"]
    a, b = v["a"].reshape(m, k), v["b"].reshape(k, n)
    c = [[math.fsum(float(a[i, p]) * float(b[p, j]) for p in range(k)) for j in range(n)]
         for i in range(m)]
    return {"c": c}


def _loops_softmax(v, s):
    rows, cols = s["rows"], s["cols"]
    x = v["x"].reshape(rows, cols)
    y = []
    for r in range(rows):
        mx = max(float(t) for t in x[r])
        e = [math.exp(float(t) - mx) for t in x[r]]
        total = math.fsum(e)
        y.append([t / total for t in e])
    return {"y": y}


def _loops_reduce_sum(v, s):
    return {"out": [math.fsum(float(t) for t in v["x"])]}


def _loops_layernorm(v, s):
    rows, cols, eps = s["rows"], s["cols"], s["eps"]
    x = v["x"].reshape(rows, cols)
    y = []
    for r in range(rows):
        row = [float(t) for t in x[r]]
        mean = math.fsum(row) / cols
        var = math.fsum((t - mean) ** 2 for t in row) / cols
        inv = 1.0 / math.sqrt(var + eps)
        y.append([(row[j] - mean) * inv * float(v["gamma"][j]) + float(v["beta"][j])
                  for j in range(cols)])
    return {"y": y}


def _loops_transpose(v, s):
    rows, cols = s["rows"], s["cols"]
    x = v["x"].reshape(rows, cols)
    return {"y": [[float(x[r, c]) for r in range(rows)] for c in range(cols)]}


def _loops_histogram(v, s):
    bins = [0] * s["nbins"]
    for t in v["x"]:
        if 0 <= int(t) < s["nbins"]:
            bins[int(t)] += 1
    return {"bins": bins}


def _gelu(t):
    return 0.5 * t * (1.0 + math.tanh(math.sqrt(2.0 / math.pi) * (t + 0.044715 * t ** 3)))


def _loops_gelu(v, s):
    return {"y": [_gelu(float(t)) for t in v["x"]]}


# task -> (tiny case variables, independent implementation, rtol, atol)
INDEPENDENT = {
    "vector_add": ({"n": 53}, _loops_vector_add, 0.0, 0.0),
    "matmul_f32": ({"m": 5, "n": 7, "k": 9}, _loops_matmul, 1e-6, 1e-6),
    # the reference rounds C to float16 once: half an fp16 ulp (2^-11 relative) from the exact sum
    "matmul_f16": ({"m": 5, "n": 7, "k": 9}, _loops_matmul, 2.0 ** -11, 1e-6),
    "softmax_rows": ({"rows": 4, "cols": 9}, _loops_softmax, 1e-6, 1e-12),
    "reduce_sum": ({"n": 41}, _loops_reduce_sum, 1e-6, 1e-6),
    "layernorm": ({"rows": 4, "cols": 11}, _loops_layernorm, 1e-6, 1e-6),
    "transpose": ({"rows": 5, "cols": 3}, _loops_transpose, 0.0, 0.0),
    "histogram": ({"n": 3000, "nbins": 300}, _loops_histogram, 0.0, 0.0),
    "gelu_bf16": ({"n": 61}, _loops_gelu, 1e-6, 1e-7),
}


def _tiny_case(task, variables: dict) -> Case:
    merged = dict(task.raw.get("defaults", {}))
    merged.update(variables)
    return Case("tiny_independent", "correctness", merged, index=0)


def test_every_bundled_task_has_an_independent_check():
    assert set(ALL_MANIFESTS) <= set(INDEPENDENT)


@pytest.mark.parametrize("name", sorted(INDEPENDENT))
def test_reference_agrees_with_plain_loops(name):
    if name not in ALL_MANIFESTS:
        pytest.skip(f"{name} is not bundled")
    task = task_of(name)
    variables, loops, rtol, atol = INDEPENDENT[name]
    case = _tiny_case(task, variables)
    inputs = generate(task, case, seed=7)
    out = run_python_reference(task, inputs)
    values = {a.name: host_values(a, inputs.buffers[a.name]) for a in task.args if a.is_buffer}
    scalars = dict(inputs.scalars)
    expected = loops(values, scalars)
    for key, want in expected.items():
        want = np.asarray(want, dtype=np.float64).reshape(out[key].shape)
        got = np.asarray(out[key], dtype=np.float64)
        # the reference stores float32 outputs: allow one float32 rounding on top of rtol
        slack = np.finfo(np.float32).eps if out[key].dtype == np.float32 else 0.0
        np.testing.assert_allclose(got, want, rtol=rtol + slack, atol=atol)


def test_matmul_reference_float32_path_for_huge_products(monkeypatch):
    task = task_of("matmul_f32")
    fn = load_callable(task.reference)
    monkeypatch.setitem(fn.__globals__, "FLOAT32_ABOVE", 0)  # force the float32 BLAS branch
    case = _tiny_case(task, {"m": 6, "n": 5, "k": 17})
    inputs = generate(task, case, seed=3)
    out = run_python_reference(task, inputs)
    want = np.asarray(_loops_matmul(inputs.buffers, inputs.scalars)["c"])
    tol = task.tolerance
    np.testing.assert_allclose(out["c"], want, rtol=tol.rtol, atol=tol.atol)


def test_gelu_reference_handles_non_bf16_values():
    task = task_of("gelu_bf16")
    fn = load_callable(task.reference)
    x = np.array([-7.3, -1.0001, -1e-3, 0.0, 0.3333, 2.71828, 9.5], dtype=np.float32)
    y = np.zeros_like(x)
    fn(x=x, y=y, n=x.size)  # not bf16-exact: the direct float64 path
    np.testing.assert_allclose(y, [_gelu(float(t)) for t in x], rtol=1e-6, atol=1e-9)
    xb = (np.array([0x3F80, 0xC040, 0x0000, 0x4120], dtype=np.uint32) << 16).view(np.float32)
    yb = np.zeros_like(xb)
    fn(x=xb, y=yb, n=xb.size)  # bf16-exact: the table path
    np.testing.assert_allclose(yb, [_gelu(float(t)) for t in xb], rtol=1e-6, atol=1e-9)
