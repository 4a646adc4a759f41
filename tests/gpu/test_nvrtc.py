"""kernel_forge.gpu.nvrtc: compiling to CUBIN without a GPU, the compile cache, compile errors."""
from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

pytest.importorskip("cuda.bindings.nvrtc", reason="cuda-bindings (the [cu13]/[cu12] extra) not installed")

from kernel_forge.common.errors import CompileError  # noqa: E402
from kernel_forge.gpu import nvrtc  # noqa: E402
from kernel_forge.gpu.nvrtc import build_options, cache_dir, compile_source, error_lines, nvrtc_version, parse_resources, supported_archs

ROOT = Path(__file__).resolve().parents[2]
VECTOR_ADD = (ROOT / "manifests" / "vector_add.cu").read_text()
ELF = b"\x7fELF"

DEFINED = ("#ifndef BLOCK\n"
           "#error BLOCK is not defined\n"
           "#endif\n"
           'extern "C" __global__ void k(float* a) { a[threadIdx.x] = BLOCK * 2.0f; }\n')

BROKEN = ('extern "C" __global__ void k(float* a)\n'
          "{\n"
          "  int x = undefined_thing + 1;\n"
          "  a[0] = x;\n"
          "}\n")


@pytest.fixture
def fresh_cache(tmp_path, monkeypatch) -> Path:
    d = tmp_path / "cache"
    monkeypatch.setenv("KFORGE_CACHE_DIR", str(d))
    return d


def test_version_and_archs():
    assert re.fullmatch(r"\d+\.\d+", nvrtc_version())
    archs = supported_archs()
    assert 80 in archs and 90 in archs
    assert archs == sorted(archs)


@pytest.mark.parametrize("arch", ["sm_80", "sm_90"])
def test_compile_returns_cubin(arch, fresh_cache):
    r = compile_source(VECTOR_ADD, arch=arch)
    assert r.cubin[:4] == ELF
    assert len(r.cubin) > 1000
    assert r.cached is False
    assert r.arch == arch
    assert f"--gpu-architecture={ {'sm_90': 'sm_90a'}.get(arch, arch)}" in r.options     # Hopper: its feature target
    assert r.nvrtc_version == nvrtc_version()
    assert isinstance(r.resources["registers"], int) and 1 <= r.resources["registers"] <= 255
    assert r.resources.get("spill_stores", 0) == 0
    assert "Used" in r.log and "registers" in r.log
    j = r.to_json()
    assert j["cubin_bytes"] == len(r.cubin) and j["cached"] is False and j["arch"] == arch
    json.dumps(j)


def test_different_archs_give_different_cubins(fresh_cache):
    a = compile_source(VECTOR_ADD, arch="sm_80").cubin
    b = compile_source(VECTOR_ADD, arch="sm_90").cubin
    assert a != b


def test_cache_hit_on_second_call(fresh_cache):
    first = compile_source(VECTOR_ADD, arch="sm_90")
    assert first.cached is False
    files = sorted(p.name for p in fresh_cache.iterdir())
    assert len(files) == 2
    assert files[0].endswith(".cubin") and files[1].endswith(".json")
    assert files[0][:-6] == files[1][:-5] and re.fullmatch(r"[0-9a-f]{64}", files[0][:-6])
    second = compile_source(VECTOR_ADD, arch="sm_90")
    assert second.cached is True
    assert second.cubin == first.cubin
    assert second.resources == first.resources
    assert second.log == first.log


def test_use_cache_false_neither_reads_nor_writes(fresh_cache):
    r = compile_source(VECTOR_ADD, arch="sm_90", use_cache=False)
    assert r.cached is False
    assert not fresh_cache.exists() or not any(fresh_cache.iterdir())
    compile_source(VECTOR_ADD, arch="sm_90")
    again = compile_source(VECTOR_ADD, arch="sm_90", use_cache=False)
    assert again.cached is False and again.cubin[:4] == ELF


def test_damaged_cache_entry_is_recompiled(fresh_cache):
    first = compile_source(VECTOR_ADD, arch="sm_90")
    (meta,) = fresh_cache.glob("*.json")
    meta.write_text("{not json")
    again = compile_source(VECTOR_ADD, arch="sm_90")
    assert again.cached is False
    assert again.cubin == first.cubin
    assert compile_source(VECTOR_ADD, arch="sm_90").cached is True


def test_cache_dir_follows_environment(fresh_cache):
    assert cache_dir() == fresh_cache


def test_defines_change_the_cubin(fresh_cache):
    a = compile_source(DEFINED, arch="sm_90", defines={"BLOCK": 128})
    b = compile_source(DEFINED, arch="sm_90", defines={"BLOCK": 256})
    assert a.cubin[:4] == ELF and b.cubin[:4] == ELF
    assert a.cubin != b.cubin
    assert "-DBLOCK=128" in a.options and "-DBLOCK=256" in b.options
    c = compile_source(DEFINED, arch="sm_90", defines={"BLOCK": 128})
    assert c.cached is True and c.cubin == a.cubin


def test_missing_define_is_a_compile_error(fresh_cache):
    with pytest.raises(CompileError) as ei:
        compile_source(DEFINED, arch="sm_90")
    assert "kernel.cu(2): catastrophic error: #error directive: BLOCK is not defined" in ei.value.log


@pytest.mark.parametrize("source, line, text", [
    (DEFINED, 2, "BLOCK is not defined"),
    ('#include <no_such_header.h>\nextern "C" __global__ void k() {}\n', 1,
     'cannot open source file "no_such_header.h"'),
], ids=["error-directive", "missing-include"])
def test_catastrophic_error_names_the_line(fresh_cache, source, line, text):
    with pytest.raises(CompileError) as ei:
        compile_source(source, arch="sm_90")
    assert ei.value.lines == (line,)
    assert f"line {line}: " in str(ei.value) and text in str(ei.value)


def test_compile_error_names_the_line(fresh_cache):
    with pytest.raises(CompileError) as ei:
        compile_source(BROKEN, arch="sm_90", file_label="bad.cu")
    exc = ei.value
    assert exc.lines == (3,)
    msg = str(exc)
    assert msg.startswith('bad.cu: NVRTC could not compile it: line 3: identifier "undefined_thing" is undefined')
    assert "\n       3 |   int x = undefined_thing + 1;" in msg
    assert "bad.cu(3): error" in exc.log
    assert exc.exit_code == 2
    assert not fresh_cache.exists() or not any(fresh_cache.glob("*.cubin"))


def test_compile_error_lists_every_error_line(fresh_cache):
    src = ('extern "C" __global__ void k(float* a)\n{\n  a[0] = nope1;\n\n  a[1] = nope2;\n}\n')
    with pytest.raises(CompileError) as ei:
        compile_source(src, arch="sm_80")
    assert ei.value.lines == (3, 5)
    assert "line 3: " in str(ei.value) and "kernel.cu:" in str(ei.value)


@pytest.mark.parametrize("arch", ["compute_90", "90", "sm90", "", "sm_90 --foo", "SM_90"])
def test_malformed_arch_is_refused_before_nvrtc(arch):
    with pytest.raises(CompileError) as ei:
        compile_source(VECTOR_ADD, arch=arch)
    assert str(ei.value).startswith(f"arch must look like sm_90 (got {arch!r})")


@pytest.mark.parametrize("arch", ["sm_9", "sm_1000"])
def test_unknown_arch_is_a_compile_error(arch, fresh_cache):
    with pytest.raises(CompileError) as ei:
        compile_source(VECTOR_ADD, arch=arch)
    assert "--gpu-architecture" in str(ei.value)


def test_fp16_and_bf16_headers_compile(fresh_cache):
    src = ("#include <cuda_fp16.h>\n#include <cuda_bf16.h>\n"
           'extern "C" __global__ void k(__half* h, __nv_bfloat16* b, int n)\n'
           "{\n"
           "    int i = blockIdx.x * blockDim.x + threadIdx.x;\n"
           "    if (i < n) { h[i] = __float2half(__half2float(h[i]) * 2.0f);\n"
           "                 b[i] = __float2bfloat16(__bfloat162float(b[i]) + 1.0f); }\n"
           "}\n")
    r = compile_source(src, arch="sm_90")
    assert r.cubin[:4] == ELF
    assert "registers" in r.resources


@pytest.mark.parametrize("path", sorted((ROOT / "manifests").glob("*.cu")), ids=lambda p: p.stem)
def test_bundled_kernels_compile_for_sm_90(path):
    assert compile_source(path.read_text(), arch="sm_90").cubin[:4] == ELF


# -- pure helpers ------------------------------------------------------------------------------

def test_build_options():
    opts = build_options("sm_90", {"B": 2, "A": 1.5}, ("-DEXTRA",), lineinfo=False)
    assert opts[:3] == ("--gpu-architecture=sm_90a", "--std=c++17", "--ptxas-options=-v")
    assert opts[3].startswith("--pre-include=kforge_prelude_")       # nvcc's implicit names (gpu/prelude.py)
    rest = [o for o in opts[4:] if o != "--no-cache"]
    assert "-lineinfo" not in opts
    assert rest[:3] == ["-DA=1.5", "-DB=2", "-DEXTRA"]
    assert all(o.startswith("--include-path=") for o in rest[3:])
    assert "-lineinfo" in build_options("sm_80")


def test_nvrtc_is_told_not_to_serve_from_the_drivers_cache_where_it_could():
    """From 12.9 NVRTC may take a CUBIN from the driver's compute cache, skipping ptxas and its
    ``-v`` report (found on the H200: a cache hit there gave ``resources == {}``)."""
    major, minor = (int(x) for x in nvrtc_version().split("."))
    assert ("--no-cache" in build_options("sm_90")) == ((major, minor) >= (12, 9))


def test_a_cached_entry_without_ptxas_figures_is_compiled_again(fresh_cache):
    """An entry whose log has no ptxas report would hide registers and spills from every later
    evaluation: it is replaced, not served.  (The entries NVRTC's driver cache emptied were made
    without --no-cache, under other keys; this guards the key the compile uses now.)"""
    first = compile_source(VECTOR_ADD, arch="sm_90")
    (meta,) = fresh_cache.glob("*.json")
    meta.write_text(json.dumps({"log": "", "resources": {}}))
    again = compile_source(VECTOR_ADD, arch="sm_90")
    assert again.cached is False and again.resources == first.resources and again.resources["registers"] > 0
    assert json.loads(meta.read_text())["resources"] == first.resources
    assert compile_source(VECTOR_ADD, arch="sm_90").cached is True


@pytest.mark.gpu
def test_every_compile_reports_its_registers_with_the_driver_loaded(fresh_cache):
    """With a driver present NVRTC can use its compute cache: the second of two identical
    compiles (ours not cached) must still carry ptxas's report."""
    source = VECTOR_ADD + f"\n// {fresh_cache}\n"          # new to the driver's cache on this machine
    runs = [compile_source(source, arch="sm_90", use_cache=False) for _ in range(3)]
    assert all(r.resources.get("registers", 0) > 0 for r in runs), [r.log for r in runs]


def test_parse_resources():
    log = ("ptxas info    : Compiling entry function 'k' for 'sm_90'\n"
           "ptxas info    : Function properties for k\n"
           "    24 bytes stack frame, 8 bytes spill stores, 12 bytes spill loads\n"
           "ptxas info    : Used 40 registers, used 1 barriers, 4096 bytes smem, 380 bytes cmem[0]\n")
    assert parse_resources(log) == {"registers": 40, "spill_stores": 8, "spill_loads": 12,
                                    "smem": 4096, "stack": 24}
    assert parse_resources("") == {}


def test_error_lines():
    log = ('kernel.cu(7): error: identifier "x" is undefined\n'
           "kernel.cu(9): warning #177-D: variable \"y\" was declared but never referenced\n"
           "kernel.cu(12): error: expected a \";\"\n")
    assert error_lines(log) == [(7, 'identifier "x" is undefined'), (12, 'expected a ";"')]


def test_cache_key_ignores_include_paths():
    a = nvrtc._cache_key("src", ("--gpu-architecture=sm_90", "--include-path=/a"), "13.0")
    b = nvrtc._cache_key("src", ("--gpu-architecture=sm_90", "--include-path=/b"), "13.0")
    c = nvrtc._cache_key("src", ("--gpu-architecture=sm_90",), "13.1")
    d = nvrtc._cache_key("src2", ("--gpu-architecture=sm_90",), "13.0")
    assert a == b
    assert len({a, c, d}) == 3


def test_a_compile_carries_its_ptx_and_a_cached_entry_without_it_is_compiled_again(fresh_cache):
    """The compiled-code rules read the PTX of the same compile; an entry cached before it was kept
    would let a kernel through them unread."""
    first = compile_source(VECTOR_ADD, arch="sm_90")
    assert ".entry" in first.ptx and ".target sm_90" in first.ptx and "ptx" not in first.to_json()
    (meta,) = fresh_cache.glob("*.json")
    meta.write_text(json.dumps({"log": first.log, "resources": first.resources}))
    again = compile_source(VECTOR_ADD, arch="sm_90")
    assert again.cached is False and again.ptx == first.ptx
    served = compile_source(VECTOR_ADD, arch="sm_90")
    assert served.cached is True and served.ptx == first.ptx
