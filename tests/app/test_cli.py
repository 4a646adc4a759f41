"""The kforge command line on a machine without a GPU: exit codes, messages, no tracebacks."""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from kernel_forge import __version__
from kernel_forge.app.cli import cli

from tests.support.gpu_probe import gpu_present  # noqa: F401  (used by skipif strings)

ROOT = Path(__file__).resolve().parents[2]
MANIFESTS = ROOT / "manifests"
BUNDLED = sorted(str(p.relative_to(ROOT)) for p in MANIFESTS.glob("*.json"))
SECRET = "sk-ant-secret123"

HAS_NVRTC = True
try:
    import cuda.bindings.nvrtc  # noqa: F401
except ImportError:
    HAS_NVRTC = False
needs_nvrtc = pytest.mark.skipif(not HAS_NVRTC, reason="cuda-bindings (NVRTC) not installed")


no_gpu = pytest.mark.skipif("gpu_present()", reason="a GPU is present; these check the no-GPU path")


@pytest.fixture
def run(monkeypatch):
    monkeypatch.chdir(ROOT)
    runner = CliRunner()

    def _run(*args, env=None):
        return runner.invoke(cli, list(args), env=env, catch_exceptions=False)

    return _run


@pytest.fixture
def broken_manifest(tmp_path) -> Path:
    shutil.copy(ROOT / "references" / "vector_add.py", tmp_path / "vector_add.py")
    shutil.copy(MANIFESTS / "vector_add.cu", tmp_path / "vector_add.cu")
    data = json.loads((MANIFESTS / "vector_add.json").read_text())
    data["reference"] = {"python": "vector_add.py:reference"}
    data["baselines"] = {}
    data.pop("templates", None)
    data["cases"][1]["role"] = "warmup"
    p = tmp_path / "broken.json"
    p.write_text(json.dumps(data, indent=2))
    return p


BROKEN_KERNEL = ("// kforge: grid = [1]\n"
                 "// kforge: block = [32]\n"
                 'extern "C" __global__ void k(float* a)\n'
                 "{\n"
                 "    a[0] = nope;\n"
                 "}\n")


def no_traceback(result):
    assert "Traceback" not in result.output
    assert "Traceback" not in (result.stderr or "")


# -- validate ----------------------------------------------------------------------------------

@pytest.mark.slow
def test_validate_bundled_manifests(run):
    r = run("validate", *BUNDLED)
    assert r.exit_code == 0, r.output
    for m in BUNDLED:
        name = Path(m).stem
        assert f"ok   {m}: {name} (" in r.stdout
    assert "ok   manifests/vector_add.json: vector_add (2 correctness, 2 performance, 1 holdout)" in r.stdout
    assert r.stderr == ""


def test_validate_broken_manifest(run, broken_manifest):
    r = run("validate", "manifests/softmax_rows.json", str(broken_manifest))
    assert r.exit_code == 2
    assert "ok   manifests/softmax_rows.json: softmax_rows" in r.stdout
    assert r.stderr.startswith(f"FAIL {broken_manifest}: $.cases[1].role: 'warmup' is not one of")
    no_traceback(r)


def test_validate_missing_file(run, tmp_path):
    r = run("validate", str(tmp_path / "none.json"))
    assert r.exit_code == 2
    assert f"FAIL {tmp_path / 'none.json'}: $: cannot read the manifest" in r.stderr


def test_validate_initial_kernel_signature_mismatch(run, broken_manifest):
    data = json.loads(broken_manifest.read_text())
    data["cases"][1]["role"] = "correctness"
    broken_manifest.write_text(json.dumps(data))
    cu = broken_manifest.parent / "vector_add.cu"
    cu.write_text(cu.read_text().replace("const float* a", "float* a"))
    r = run("validate", str(broken_manifest))
    assert r.exit_code == 2
    assert f"{broken_manifest}: $.initial: " in r.stderr
    assert "vector_add.cu:4: parameter 1 (a) drops `const`" in r.stderr


def test_validate_needs_an_argument(run):
    r = run("validate")
    assert r.exit_code == 2
    assert "Missing argument" in r.output


# -- compile -----------------------------------------------------------------------------------

@needs_nvrtc
def test_compile_vector_add(run, tmp_path):
    out = tmp_path / "k.cubin"
    r = run("compile", "manifests/vector_add.cu", "--arch", "sm_90", "-o", str(out))
    assert r.exit_code == 0, r.output
    assert r.stdout.startswith("compiled manifests/vector_add.cu for sm_90 (target sm_90a) with NVRTC ")
    regs = int(r.stdout.split(" registers")[0].rsplit(" ", 1)[-1])
    assert 1 <= regs <= 255
    assert f"wrote {out}" in r.stdout
    assert out.read_bytes()[:4] == b"\x7fELF"


@needs_nvrtc
def test_compile_cached_second_time(run, tmp_path, monkeypatch):
    monkeypatch.setenv("KFORGE_CACHE_DIR", str(tmp_path / "c"))
    first = run("compile", "manifests/vector_add.cu", "--arch", "sm_80")
    second = run("compile", "manifests/vector_add.cu", "--arch", "sm_80")
    assert first.exit_code == second.exit_code == 0
    assert "(cached)" not in first.stdout
    assert "(cached)" in second.stdout
    assert run("compile", "manifests/vector_add.cu", "--arch", "sm_80", "--no-cache").stdout.count("(cached)") == 0


@needs_nvrtc
def test_compile_broken_kernel(run, tmp_path):
    p = tmp_path / "bad.cu"
    p.write_text(BROKEN_KERNEL)
    r = run("compile", str(p), "--arch", "sm_90")
    assert r.exit_code == 2
    assert r.stderr.startswith('kforge: error: bad.cu: NVRTC could not compile it: line 5: '
                               'identifier "nope" is undefined')
    assert "   5 |     a[0] = nope;" in r.stderr
    no_traceback(r)


@needs_nvrtc
def test_compile_with_defines(run, tmp_path):
    p = tmp_path / "d.cu"
    p.write_text("// kforge: grid = [1]\n// kforge: block = [BLOCK]\n// kforge: tune BLOCK = [64, 128]\n"
                 "#if BLOCK != 128\n#error wrong BLOCK\n#endif\n"
                 'extern "C" __global__ void k(float* a) { a[threadIdx.x] = BLOCK; }\n')
    assert run("compile", str(p), "--arch", "sm_90", "-D", "BLOCK=128").exit_code == 0
    r = run("compile", str(p), "--arch", "sm_90")          # BLOCK defaults to 64
    assert r.exit_code == 2


@pytest.mark.parametrize("define", ["FOO", "=3", ""])
def test_compile_bad_define_syntax(run, define):
    r = run("compile", "manifests/vector_add.cu", "--arch", "sm_90", "--define", define)
    assert r.exit_code == 2
    assert r.stderr == f"kforge: error: --define {define!r}: expected NAME=VALUE\n"


def test_compile_bad_arch(run):
    r = run("compile", "manifests/vector_add.cu", "--arch", "compute_90")
    assert r.exit_code == 2
    assert "--arch 'compute_90': must be like sm_90, got 'compute_90'" in r.stderr     # the gate's own rule


def test_compile_missing_file(run, tmp_path):
    r = run("compile", str(tmp_path / "x.cu"), "--arch", "sm_90")
    assert r.exit_code == 2
    assert f"kforge: error: {tmp_path / 'x.cu'}: cannot read the kernel file" in r.stderr


def test_compile_bad_header(run, tmp_path):
    p = tmp_path / "h.cu"
    p.write_text("\n// kforge: gird = [1]\n")
    r = run("compile", str(p), "--arch", "sm_90")
    assert r.exit_code == 2
    assert f"kforge: error: {p}:2: unknown kforge header 'gird = [1]'" in r.stderr


# -- eval without a GPU (kforge doctor: test_doctor.py) ----------------------------------------

@no_gpu
def test_eval_without_gpu(run):
    r = run("eval", "manifests/vector_add.json", "--quick")
    assert r.exit_code == 3
    assert r.stderr.startswith("kforge: error: no usable NVIDIA GPU: ")
    for cmd in ("kforge validate", "kforge compile --arch sm_90", "kforge doctor"):
        assert cmd in r.stderr
    no_traceback(r)


def test_eval_broken_manifest_is_input_error(run, broken_manifest):
    r = run("eval", str(broken_manifest))
    assert r.exit_code == 2
    assert f"{broken_manifest}: $.cases[1].role" in r.stderr


def test_version(run):
    r = run("--version")
    assert r.exit_code == 0
    assert r.stdout.strip() == f"kforge, version {__version__}"


# -- real subprocesses -----------------------------------------------------------------------

def _subprocess(*args, env_extra=None):
    env = dict(os.environ)
    env.pop("KFORGE_DEBUG", None)
    env.update(env_extra or {})
    return subprocess.run([sys.executable, *args], cwd=ROOT, env=env, capture_output=True,
                          text=True, timeout=60)


def test_subprocess_validate_broken_no_traceback(broken_manifest):
    p = _subprocess("-m", "kernel_forge", "validate", str(broken_manifest))
    assert p.returncode == 2
    assert f"FAIL {broken_manifest}: $.cases[1].role" in p.stderr
    assert "Traceback" not in p.stderr + p.stdout


@no_gpu
def test_subprocess_eval_and_doctor_no_traceback():
    p = _subprocess("-m", "kernel_forge", "eval", "manifests/vector_add.json", "--quick")
    assert p.returncode == 3
    assert "kforge validate" in p.stderr
    assert "Traceback" not in p.stderr + p.stdout
    d = _subprocess("-m", "kernel_forge", "doctor", env_extra={"ANTHROPIC_API_KEY": SECRET})
    assert d.returncode == 3
    assert "LLM keys ANTHROPIC_API_KEY set" in d.stdout
    assert SECRET not in d.stdout + d.stderr
    assert "Traceback" not in d.stderr + d.stdout


def test_importing_does_not_load_gpu_libraries():
    p = _subprocess("-c", "import kernel_forge, sys; import kernel_forge.app.cli, kernel_forge.model.task, "
                    "kernel_forge.gate.gate; assert 'cupy' not in sys.modules and 'cuda.bindings' not in "
                    "sys.modules, sorted(m for m in sys.modules if m.startswith(('cupy', 'cuda')))")
    assert p.returncode == 0, p.stderr


def test_validate_checks_the_templates_signature(run, broken_manifest, tmp_path):
    data = json.loads(broken_manifest.read_text())
    data["cases"][1]["role"] = "correctness"
    (tmp_path / "t.cu").write_text("// kforge: grid = [1]\n// kforge: block = [32]\n"
                                   'extern "C" __global__ void vector_add(const float* a, const float* b, '
                                   "float* c, long long n) {}\n")
    data["templates"] = ["t.cu"]
    broken_manifest.write_text(json.dumps(data))
    r = run("validate", str(broken_manifest))
    assert r.exit_code == 2
    assert "$.templates[0]" in r.stderr and "parameter 4 (n)" in r.stderr


def test_the_cli_and_the_settings_import_neither_numpy_the_gate_nor_the_loop():
    """`kforge --help` builds every command's options from the settings declaration, so the
    command modules and the declaration must stay light: start-up pays for what they import."""
    heavy = {"numpy", "kernel_forge.gate.gate", "kernel_forge.search.loop"}
    code = ("import sys, kernel_forge.app.cli, kernel_forge.config.sections, kernel_forge.config.file, "
            "kernel_forge.config.schema; print(sorted(%r & set(sys.modules)))" % heavy)
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]))
    p = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stderr
    assert p.stdout.strip() == "[]", f"imported at start-up: {p.stdout.strip()}"
