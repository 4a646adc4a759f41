"""Includes are an allow-list (issue #35 S1/S2): a kernel reaches the CUDA toolkit's and CCCL's
headers and the task's named headers, nothing else, however the include is spelled.  NVRTC runs
here without a GPU.  Every refusal names the kernel line or the file; the secret never appears
in a message, a log or the compile cache.  The task's headers checked at load and when read
(no NVRTC): tests/model/test_headers.py."""
from __future__ import annotations

import os
from pathlib import Path

import pytest

pytest.importorskip("cuda.bindings.nvrtc", reason="cuda-bindings (the [cu13]/[cu12] extra) not installed")

from kernel_forge.common import includes  # noqa: E402
from kernel_forge.common.errors import CompileError, IncludeRefused  # noqa: E402
from kernel_forge.gpu import nvrtc  # noqa: E402
from kernel_forge.gpu.nvrtc import compile_source  # noqa: E402
from kernel_forge.model.task import load_task  # noqa: E402
from tests.support.task_folders import task_with_headers

ROOT = Path(__file__).resolve().parents[2]
SECRET = "TOPSECRET_k3y_9f2c"
ENTRY = 'extern "C" __global__ void k(int* out) { out[0] = 1; }\n'


@pytest.fixture
def world(tmp_path, monkeypatch):
    """A working folder with a .env, a secret outside it, a compile cache of its own."""
    work, outside = tmp_path / "work", tmp_path / "outside"
    work.mkdir()
    outside.mkdir()
    (work / ".env").write_text(SECRET + "\n")
    (outside / "token.txt").write_text(SECRET + "\n")
    (outside / "numbers.txt").write_text("11, 22, 33\n")       # compiles cleanly into an initialiser
    monkeypatch.chdir(work)
    monkeypatch.setenv("KFORGE_CACHE_DIR", str(tmp_path / "cache"))
    return {"work": work, "outside": outside, "cache": tmp_path / "cache"}


def refused(source: str, **kw) -> IncludeRefused:
    with pytest.raises(IncludeRefused) as info:
        compile_source(source, arch="sm_90", **kw)
    exc = info.value
    assert SECRET not in str(exc) and SECRET not in exc.log
    return exc


def no_secret_in(folder: Path) -> None:
    for p in folder.rglob("*") if folder.exists() else ():
        if p.is_file():
            assert SECRET.encode() not in p.read_bytes(), p


# -- the spellings of issue #35 -------------------------------------------------------------------

def test_a_digraph_include_of_a_file_outside_the_task_folder_is_refused_naming_the_line(world):
    token = world["outside"] / "token.txt"
    exc = refused(f'__device__ int leak[] = {{\n%:include "{token}"\n}};\n' + ENTRY)
    assert exc.lines == (2,) and "line 2" in str(exc) and str(token) in str(exc)
    no_secret_in(world["cache"])


def test_an_include_named_by_a_macro_is_refused(world):
    token = world["outside"] / "token.txt"
    exc = refused(f'#define WHERE "{token}"\n__device__ int leak[] = {{\n#include WHERE\n}};\n' + ENTRY)
    assert exc.lines == (3,) and "macro" in str(exc)


def test_an_include_split_by_a_line_continuation_is_refused(world):
    token = world["outside"] / "token.txt"
    exc = refused(f'__device__ int leak[] = {{\n#inc\\\nlude "{token}"\n}};\n' + ENTRY)
    assert "line 3" in str(exc) and str(token) in str(exc)


def test_an_include_inside_a_macro_argument_is_refused(world):
    """NVRTC folds the file into the macro's expansion, so its words would be reported at the kernel's
    own line (where no record of what NVRTC opened can tell): the text check must stop it."""
    token = world["outside"] / "token.txt"
    exc = refused(f'#define ID(x) x\n__device__ int leak[] = ID(\n{{\n#include "{token}"\n}});\n' + ENTRY)
    assert exc.lines == (4,)


def test_an_include_with_a_comment_between_its_words_across_lines_is_refused(world):
    token = world["outside"] / "token.txt"
    exc = refused(f'__device__ int leak[] = {{\n%:/*\n*/include "{token}"\n}};\n' + ENTRY)
    assert exc.lines == (3,)


def test_a_relative_include_of_dot_env_in_the_working_folder_is_refused(world):
    exc = refused('__device__ int leak[] = {\n#include ".env"\n};\n' + ENTRY)
    assert exc.lines == (2,) and str(world["work"] / ".env") in str(exc)


def test_a_relative_include_through_a_symlink_in_the_working_folder_is_refused(world):
    (world["work"] / "config.cuh").symlink_to(world["outside"] / "token.txt")
    exc = refused('#include "config.cuh"\n' + ENTRY)
    assert "link" in str(exc) and str(world["outside"] / "token.txt") in str(exc)


def test_an_angle_include_climbing_out_of_the_toolkit_folder_is_refused(world):
    exc = refused("#include <" + "../" * 30 + str(world["outside"] / "token.txt").lstrip("/") + ">\n" + ENTRY)
    assert exc.lines == (1,)


def test_has_include_of_a_file_outside_is_refused(world):
    exc = refused(f'#if __has_include("{world["outside"] / "token.txt"}")\n#endif\n' + ENTRY)
    assert exc.lines == (1,)


def test_a_define_steering_a_toolkit_headers_computed_include_is_refused(world):
    """thrust/mr/memory_resource.h does ``#include THRUST_MR_STD_MR_HEADER``: a kernel defining it
    would make a trusted header open any file."""
    exc = refused(f'#define THRUST_MR_STD_MR_HEADER "{world["outside"] / "token.txt"}"\n'
                  "#include <thrust/mr/memory_resource.h>\n" + ENTRY)
    assert exc.lines == (1,) and "THRUST_MR_STD_MR_HEADER" in str(exc)


# -- what NVRTC itself opened (the checks of the text switched off) -------------------------------

@pytest.fixture
def text_check_off(monkeypatch):
    monkeypatch.setattr(includes, "check_source", lambda *a, **k: [])


def test_a_file_nvrtc_opened_for_a_compile_that_succeeded_is_refused(world, text_check_off):
    """The numbers compile into the CUBIN: NVRTC's own record of the headers it processed refuses it."""
    numbers = world["outside"] / "numbers.txt"
    exc = refused(f'__device__ int leak[] = {{\n%:include "{numbers}"\n}};\n'
                  'extern "C" __global__ void k(int* out) { out[0] = leak[1]; }\n')
    assert str(numbers) in str(exc) and "NVRTC opened" in str(exc)
    assert not list(world["cache"].glob("*.cubin"))


def test_a_file_nvrtc_opened_for_a_compile_that_failed_is_refused_without_its_log(world, text_check_off):
    token = world["outside"] / "token.txt"
    exc = refused(f'__device__ int leak[] = {{\n%:include "{token}"\n}};\n' + ENTRY)
    assert str(token) in str(exc) and exc.log == ""


def test_a_toolkit_headers_computed_include_is_caught_by_what_nvrtc_opened(world, text_check_off):
    token = world["outside"] / "token.txt"
    exc = refused(f'#define THRUST_MR_STD_MR_HEADER "{token}"\n#include <thrust/mr/memory_resource.h>\n' + ENTRY)
    assert str(token) in str(exc)


def test_the_working_folder_is_not_searched_for_quoted_includes(world, text_check_off):
    """The program is named as a file in an empty private folder: ".env" is not found at all."""
    with pytest.raises(CompileError) as info:
        compile_source('#include ".env"\n' + ENTRY, arch="sm_90")
    assert 'cannot open source file ".env"' in info.value.log and SECRET not in info.value.log


# -- what stays allowed ---------------------------------------------------------------------------

def test_cuda_fp16_still_compiles(world):
    r = compile_source('#include <cuda_fp16.h>\nextern "C" __global__ void k(__half* x) '
                       "{ x[0] = __float2half(1.0f); }\n", arch="sm_90")
    assert r.cubin[:4] == b"\x7fELF"


def test_cub_still_compiles(world):
    r = compile_source("#include <cub/block/block_reduce.cuh>\n"
                       'extern "C" __global__ void k(float* x) {\n'
                       "  using R = cub::BlockReduce<float, 128>;\n"
                       "  __shared__ typename R::TempStorage t;\n"
                       "  float s = R(t).Sum(x[threadIdx.x]);\n"
                       "  if (threadIdx.x == 0) x[0] = s;\n}\n", arch="sm_90")
    assert r.cubin[:4] == b"\x7fELF"


@pytest.mark.parametrize("header", ["cooperative_groups.h", "mma.h", "cuda/barrier"])
def test_toolkit_headers_that_include_beside_themselves_still_compile(world, header):
    """cooperative_groups.h and mma.h include files by a name relative to their own folder."""
    r = compile_source(f"#include <{header}>\n" + ENTRY, arch="sm_90")
    assert r.cubin[:4] == b"\x7fELF"


def test_an_include_in_a_comment_naming_no_file_is_left_alone(world):
    r = compile_source('// #include "not_there.cuh" was tried once\n' + ENTRY, arch="sm_90")
    assert r.cubin[:4] == b"\x7fELF"


# -- the task's own headers -----------------------------------------------------------------------


def test_a_header_the_manifest_names_compiles_by_its_name(world, tmp_path):
    manifest = task_with_headers(tmp_path, ["common.cuh"])
    (manifest.parent / "common.cuh").write_text("__device__ __forceinline__ int seven() { return 7; }\n")
    task = load_task(manifest)
    assert task.headers == ("common.cuh",)
    r = compile_source('#include "common.cuh"\nextern "C" __global__ void k(int* o) { o[0] = seven(); }\n',
                       arch="sm_90", headers=task.header_sources())
    assert r.cubin[:4] == b"\x7fELF"


def test_a_task_header_including_a_file_outside_is_refused(world):
    exc = refused('#include "common.cuh"\n' + ENTRY,
                  headers={"common.cuh": f'#include "{world["outside"] / "token.txt"}"\n'})
    assert str(exc).startswith("common.cuh: line 1")


# -- the log, cut to the kernel's own lines -------------------------------------------------------

def test_a_message_about_a_line_outside_the_kernel_does_not_carry_that_lines_text(world):
    """An error inside a task header: its place and message stay, the header's text does not."""
    body = "__device__ int broken_here = undefined_name_zz;\n"
    with pytest.raises(CompileError) as info:
        compile_source('#include "common.cuh"\n' + ENTRY, arch="sm_90", headers={"common.cuh": body})
    log = info.value.log
    assert "common.cuh(1): error" in log
    assert "broken_here" not in log           # the quoted line of the header is cut


def test_the_kernels_own_lines_stay_in_the_log(world):
    with pytest.raises(CompileError) as info:
        compile_source('extern "C" __global__ void k(int* o) { o[0] = missing_one; }\n', arch="sm_90")
    assert "missing_one" in info.value.log and info.value.lines == (1,)


def test_the_dependency_record_lists_nested_toolkit_headers(world, tmp_path):
    """--fdevice-time-trace names every header NVRTC processed, nested ones included."""
    trace = tmp_path / "trace"
    trace.mkdir()
    nvrtc_mod = nvrtc._nvrtc()
    src = "#include <cub/block/block_reduce.cuh>\n" + ENTRY
    from kernel_forge.gpu import prelude

    # the options pre-include the prelude (nvcc's implicit names), handed over in memory as compile_source does
    prog = nvrtc._check(nvrtc_mod.nvrtcCreateProgram(src.encode(), b"kernel.cu", *prelude.headers()), "create")
    try:
        err, _log = nvrtc._compile(nvrtc_mod, prog, nvrtc.build_options("sm_90"), str(trace))
    finally:
        nvrtc_mod.nvrtcDestroyProgram(prog)
    assert err == nvrtc_mod.nvrtcResult.NVRTC_SUCCESS
    files = includes.opened_files(str(trace))
    assert files and any(f.endswith("cub/block/block_reduce.cuh") for f in files)
    assert any(f.endswith("cub/util_namespace.cuh") for f in files)
    assert all(os.path.isabs(f) or f in (includes.BUILTIN, prelude.NAME) for f in files)


def test_an_error_inside_a_toolkit_header_names_the_kernel_line_that_reached_it_not_the_headers_text(world):
    src = ("#include <cub/block/block_reduce.cuh>\n"
           "struct NoAdd { int v; };\n"
           'extern "C" __global__ void k(int* x) {\n'
           "  using R = cub::BlockReduce<NoAdd, 128>;\n"
           "  __shared__ typename R::TempStorage t;\n"
           "  x[0] = R(t).Sum(NoAdd{1}).v;\n"
           "}\n")
    with pytest.raises(CompileError) as info:
        compile_source(src, arch="sm_90")
    exc = info.value
    assert exc.lines[:1] == (6,) and "line 6:" in str(exc) and "x[0] = R(t).Sum(NoAdd{1}).v;" in str(exc)
    assert "at line 6 of kernel.cu" in exc.log
    assert "operator()(_T1&& __t" not in exc.log        # the note's quoted header line is cut


def test_the_tasks_hash_covers_its_headers(world, tmp_path):
    """A run resumes only against the task it started with: a changed header is a changed task."""
    manifest = task_with_headers(tmp_path, ["common.cuh"])
    (manifest.parent / "common.cuh").write_text("#define SCALE 1\n")
    before = load_task(manifest).hash()
    (manifest.parent / "common.cuh").write_text("#define SCALE 2\n")
    assert load_task(manifest).hash() != before


# -- the kernel library's shared headers (kforge/FILE) -----------------------------------------------

def test_a_kernel_includes_a_library_header_by_its_kforge_name(world):
    r = compile_source('#include "kforge/tf32_mma.cuh"\n'
                       'extern "C" __global__ void k(unsigned* o, const float* x) { o[0] = kf_tf32(x[0]); }\n',
                       arch="sm_90")
    assert r.cubin[:4] == b"\x7fELF" and "cvt.rna.tf32.f32" in r.ptx
    no_secret_in(world["cache"])


def test_a_library_header_name_the_library_does_not_hold_fails_naming_the_line(world):
    with pytest.raises(CompileError) as info:
        compile_source('// a kernel\n#include "kforge/missing.cuh"\n' + ENTRY, arch="sm_90")
    assert 'line 2: cannot open source file "kforge/missing.cuh"' in str(info.value)


def test_a_kernel_naming_no_library_header_gets_none(world):
    assert nvrtc.with_library_headers(ENTRY, {"common.cuh": "int x;"}) == {"common.cuh": "int x;"}
    got = nvrtc.with_library_headers('#include "kforge/tf32_mma.cuh"\n' + ENTRY)
    assert "kforge/tf32_mma.cuh" in got and "mma.sync.aligned.m16n8k8" in got["kforge/tf32_mma.cuh"]


def test_a_cudart_wheel_without_crt_borrows_the_toolkits_crt_folder(tmp_path, monkeypatch):
    """CUDA 13's mma.h includes crt/mma.h: where the header folders found hold no crt/ (a framework's
    venv with cudart but not the crt wheel), the cccl folder's parent or $CUDA_HOME/include that holds
    it is added to the include path; where one holds crt/ nothing is added."""
    from kernel_forge.gpu.nvrtc import _crt_dir

    wheel, toolkit, home = tmp_path / "wheel" / "include", tmp_path / "cuda" / "include", tmp_path / "home" / "include"
    for d in (wheel, toolkit / "cccl", home / "crt"):
        d.mkdir(parents=True)
    (home / "crt" / "mma.h").write_text("")
    monkeypatch.delenv("CUDA_PATH", raising=False)
    monkeypatch.setenv("CUDA_HOME", str(home.parent))
    assert _crt_dir([str(wheel), str(toolkit / "cccl")]) == str(home)          # only $CUDA_HOME has it
    (toolkit / "crt").mkdir()
    (toolkit / "crt" / "mma.h").write_text("")
    assert _crt_dir([str(wheel), str(toolkit / "cccl")]) == str(toolkit)       # the cccl folder's parent first
    (wheel / "crt").mkdir()
    assert _crt_dir([str(wheel), str(toolkit / "cccl")]) is None               # the wheel's own crt/: nothing added
