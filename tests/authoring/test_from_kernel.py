"""``kforge init``: a new task from a kernel file or a signature, round trips through validate."""
from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from kernel_forge.app.cli import cli
from kernel_forge.authoring.from_kernel import build_manifest, init_task
from kernel_forge.model.signature import parse_signature
from kernel_forge.model.task import load_task

try:
    import cuda.bindings.nvrtc  # noqa: F401
    HAS_NVRTC = True
except ImportError:
    HAS_NVRTC = False

SAXPY = ("// y = a*x + y\n"
         'extern "C" __global__ void saxpy(const float* __restrict__ x, float* y, float a, int n)\n'
         "{\n"
         "    int i = blockIdx.x * blockDim.x + threadIdx.x;\n"
         "    if (i < n) y[i] = a * x[i];\n"
         "}\n")
SAXPY_REFERENCE = "def reference(x, y, a, n):\n    y[...] = a * x\n"


@pytest.fixture
def kforge():
    runner = CliRunner()
    return lambda *a: runner.invoke(cli, [str(x) for x in a], catch_exceptions=False)


def hashes(folder: Path) -> dict[str, str]:
    return {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(folder.iterdir()) if p.is_file()}


def test_roles_are_guessed_from_the_types():
    sig = parse_signature('extern "C" __global__ void f(const half* x, const int* idx, __nv_bfloat16* out, '
                          'float scale, int rows, int cols)')
    manifest, guesses, todo = build_manifest("f", sig, has_launch=False)
    args = manifest["args"]
    assert args["x"] == {"shape": ["rows"], "init": "normal"}
    assert args["idx"] == {"shape": ["rows"], "init": {"kind": "randint", "low": -100, "high": 100}}
    assert args["out"] == {"shape": ["rows"], "output": True}
    assert (args["scale"], args["rows"], args["cols"]) == (1.0, "rows", "cols")
    assert [c["vars"] for c in manifest["cases"]] == [{"rows": 37, "cols": 37}, {"rows": 512, "cols": 512},
                                                      {"rows": 263, "cols": 263}]
    assert manifest["tolerance"] == {"atol": 1e-2, "rtol": 1e-2}          # a 16-bit output
    assert manifest["launch"] == {"grid": ["cdiv(rows, 256)"], "block": [256]}
    assert any("x: const float16* x -> input" in g for g in guesses)
    assert any("the case sizes of rows, cols" in t for t in todo)
    assert any("the value of scale" in t for t in todo)


def test_init_from_a_kernel_file_then_validate_round_trip(kforge, tmp_path):
    src = tmp_path / "saxpy.cu"
    src.write_text(SAXPY)
    r = kforge("init", "saxpy", "--from", src, "--dir", tmp_path)
    assert r.exit_code == 0, r.output
    assert f"wrote {tmp_path / 'saxpy.json'}" in r.output and f"wrote {tmp_path / 'saxpy_reference.py'}" in r.output
    assert f"wrote {tmp_path / 'saxpy.cu'}" not in r.output              # the kernel stays where it is
    assert src.read_text() == SAXPY
    assert "guessed: x: const float32* x -> input" in r.output
    assert "guessed: y: float32* y -> output" in r.output
    assert "guessed: n: int32 n -> size variable n" in r.output
    assert "the reference is still a stub" in r.output
    assert "to fill in:" in r.output and "saxpy_reference.py, reference() must write y in place from x" in r.output

    task = load_task(tmp_path / "saxpy.json")
    assert task.initial == src.resolve() and [c.role for c in task.cases] == ["correctness", "performance", "holdout"]

    r = kforge("validate", "--no-compile", tmp_path / "saxpy.json")           # the stub, reported as the task's error
    assert r.exit_code == 2
    assert (f"FAIL {tmp_path / 'saxpy.json'}: $.reference: reference saxpy_reference.py:reference on case 'small' "
            "is not implemented yet: fill in reference() in saxpy_reference.py") in r.stderr

    (tmp_path / "saxpy_reference.py").write_text(SAXPY_REFERENCE)
    r = kforge("validate", "--no-compile", tmp_path / "saxpy.json")
    assert r.exit_code == 0, r.output
    assert "ok   " in r.stdout


def test_init_twice_refuses_and_changes_nothing(kforge, tmp_path):
    sig = 'extern "C" __global__ void scale(const float* x, float* y, int n)'
    assert kforge("init", "scale", "--signature", sig, "--dir", tmp_path).exit_code == 0
    (tmp_path / "scale_reference.py").write_text("def reference(x, y, n):\n    y[...] = 2 * x\n")
    before = hashes(tmp_path)
    r = kforge("init", "scale", "--signature", sig, "--dir", tmp_path)
    assert r.exit_code == 2
    assert "scale.json, " in r.stderr and "already exist; nothing was written" in r.stderr and "--force" in r.stderr
    assert hashes(tmp_path) == before


def test_init_force_overwrites(kforge, tmp_path):
    sig = 'extern "C" __global__ void scale(const float* x, float* y, int n)'
    assert kforge("init", "scale", "--signature", sig, "--dir", tmp_path).exit_code == 0
    (tmp_path / "scale.json").write_text("{}")
    r = kforge("init", "scale", "--signature", sig.replace("int n", "int count"), "--dir", tmp_path, "--force")
    assert r.exit_code == 0, r.output
    data = json.loads((tmp_path / "scale.json").read_text())
    assert data["args"]["count"] == "count" and data["args"]["x"]["shape"] == ["count"]
    assert "int count" in (tmp_path / "scale.cu").read_text()


def test_a_refusal_writes_none_of_the_files(kforge, tmp_path):
    (tmp_path / "scale_reference.py").write_text("# mine\n")
    r = kforge("init", "scale", "--signature", 'extern "C" __global__ void scale(float* y, int n)', "--dir", tmp_path)
    assert r.exit_code == 2 and "scale_reference.py already exists" in r.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["scale_reference.py"]


@pytest.mark.skipif(not HAS_NVRTC, reason="needs NVRTC")
def test_the_signature_stub_kernel_compiles(tmp_path):
    res = init_task("relu", tmp_path, signature='extern "C" __global__ void relu(const float* x, float* y, long long n)')
    assert res.valid, res.status
    assert "the kernel body in" in " ".join(res.todo)
    text = (tmp_path / "relu.cu").read_text()
    assert "if (i >= n) return;" in text and "TODO: compute y[i]" in text


def test_init_keeps_the_kernels_own_launch(tmp_path):
    src = tmp_path / "k.cu"
    src.write_text("// kforge: grid = [cdiv(n, B)]\n// kforge: block = [B]\n// kforge: tune B = [128, 256]\n"
                   + SAXPY.replace("saxpy", "axpy"))
    res = init_task("axpy", tmp_path / "task", from_file=src, validate=False)
    data = json.loads((tmp_path / "task" / "axpy.json").read_text())
    assert "launch" not in data
    assert (tmp_path / "task" / "axpy.cu").read_text() == src.read_text()
    assert res.written == [tmp_path / "task" / n for n in ("axpy.json", "axpy_reference.py", "axpy.cu")]


BRIGHTEN = ('extern "C" __global__ void brighten(const uchar4* __restrict__ src, uchar4* dst, int n, float gain)\n'
            "{\n"
            "    int i = blockIdx.x * blockDim.x + threadIdx.x;\n"
            "    if (i >= n) return;\n"
            "    uchar4 p = src[i];\n"
            "    dst[i] = make_uchar4(min(255.f, p.x * gain), min(255.f, p.y * gain), min(255.f, p.z * gain), p.w);\n"
            "}\n")
BRIGHTEN_REFERENCE = ("import numpy as np\n\n\ndef reference(src, dst, n, gain):\n"
                      "    dst[..., :3] = np.minimum(255.0, src[..., :3] * gain).astype(np.uint8)\n"
                      "    dst[..., 3] = src[..., 3]\n")


def test_a_kernel_of_vector_pointers_gets_a_task_whose_reference_sees_the_lanes(kforge, tmp_path):
    """uchar4 pixels: the manifest counts vectors, the cost counts their bytes, and the reference's arrays
    carry the lanes as a last axis, which it indexes as the kernel does .x .y .z .w."""
    src = tmp_path / "brighten.cu"
    src.write_text(BRIGHTEN)
    r = kforge("init", "brighten", "--from", src, "--dir", tmp_path)
    assert r.exit_code == 0, r.output
    assert ("guessed: src: const uchar4* src -> input, shape [\"n\"], init {\"kind\": \"randint\", \"low\": 0, "
            "\"high\": 100} (the shape counts uchar4s; the reference sees uint8 values with a last axis of 4") in r.output
    assert "last axis (src: uchar4, uint8 x 4, dst: uchar4, uint8 x 4" in (tmp_path / "brighten_reference.py").read_text()
    manifest = json.loads((tmp_path / "brighten.json").read_text())
    assert manifest["cost"] == {"bytes": "4*n + 4*n"}
    (tmp_path / "brighten_reference.py").write_text(BRIGHTEN_REFERENCE)
    r = kforge("validate", "--no-compile", tmp_path / "brighten.json")
    assert r.exit_code == 0, r.output
    task = load_task(tmp_path / "brighten.json")
    case = task.case("small")
    assert task.shape(task.arg("dst"), case) == (1037, 4) and task.buffer_bytes(case) == {"src": 4148, "dst": 4148}
    assert "shape [n] of uchar4 (the reference's array: uint8, a last axis of 4)" in task.arg("src").shape_text()


def test_a_kernel_of_cpp_linkage_is_set_up_as_written_and_a_template_gets_what_to_write(kforge, tmp_path):
    src = tmp_path / "k.cu"
    src.write_text("__global__ void scale2(float* out, const float* inp, int N);\n"
                   "__global__ void scale2(float* out, const float* inp, int N)\n{\n"
                   "    int i = blockIdx.x * blockDim.x + threadIdx.x;\n    if (i < N) out[i] = 2.0f * inp[i];\n}\n"
                   "template <int B>\n__global__ void tiled(float* p) { p[threadIdx.x] = B; }\n")
    r = kforge("init", "scale2", "--from", src, "--dir", tmp_path)
    assert r.exit_code == 0, r.output
    assert load_task(tmp_path / "scale2.json").signature.text == "__global__ void scale2(float* out, const float* inp, int N)"
    r = CliRunner().invoke(cli, ["init", "tiled", "--from", str(src), "--dir", str(tmp_path / "t")])
    assert r.exit_code == 2 and "kernel tiled is a template whose 'int B' has no default" in r.output
    assert "add a line `// kforge: instance tiled<...>`" in r.output
    assert "Traceback" not in r.output and not (tmp_path / "t").exists()
