"""kernel_forge.common.static_rules: forbidden source found by a text scan, with the right line."""
from __future__ import annotations

from pathlib import Path

import pytest

from kernel_forge.common.static_rules import RULES, Finding, check, strip_comments_and_strings

MANIFESTS = Path(__file__).resolve().parents[2] / "manifests"


def rules_at(source: str) -> list[tuple[str, int]]:
    return [(f.rule, f.line) for f in check(source)]


def kernel(*body_lines: str, prefix: str = "") -> str:
    """A kernel whose body lines start at line 3 (line 4 after a one-line prefix, ...)."""
    head = prefix + 'extern "C" __global__ void k(float* a, int n)\n{\n'
    return head + "".join(f"    {l}\n" for l in body_lines) + "}\n"


# -- each rule, on the right line ------------------------------------------------------------

@pytest.mark.parametrize("line, rule", [
    ("#include <cublas_v2.h>", "vendor_library"),
    ('#include "cublasLt.h"', "vendor_library"),
    ("# include <cudnn.h>", "vendor_library"),
    ("#include <cufft.h>", "vendor_library"),
    ("#include <cusparse.h>", "vendor_library"),
    ("#include <cusolverDn.h>", "vendor_library"),
    ("#include <nccl.h>", "vendor_library"),
    ('#include "../secret.h"', "include_path"),
    ('#include "sub/../x.h"', "include_path"),
    ("#include </etc/passwd>", "include_path"),
    ('#include "C:\\x.h"', "include_path"),
])
def test_include_rules(line, rule):
    src = "// a kernel\n" + line + "\n" + kernel("a[0] = 1.0f;")
    assert rules_at(src) == [(rule, 2)]


@pytest.mark.parametrize("stmt, rule", [
    ("cublasSgemm(h, 1);", "vendor_call"),
    ("cudnnCreate(&h);", "vendor_call"),
    ("cufftExecC2C(p, a, a, 1);", "vendor_call"),
    ("ncclAllReduce(a, a, n);", "vendor_call"),
    ("child<<<1, 32>>>(a);", "device_launch"),
    ("child <<< grid, block >>> (a);", "device_launch"),
    ("cudaMalloc(&p, 4);", "runtime_api"),
    ("cudaMallocAsync(&p, 4, 0);", "runtime_api"),
    ("cudaFree(p);", "runtime_api"),
    ("cudaMemcpyAsync(d, s, n, k);", "runtime_api"),
    ("cudaMemset(a, 0, n);", "runtime_api"),
    ("cudaDeviceSynchronize();", "runtime_api"),
    ("cudaStreamCreateWithFlags(&s, 0);", "runtime_api"),
    ("cudaLaunchKernel(f, 1, 1, 0, 0, 0);", "runtime_api"),
    ("cudaGraphLaunch(g, 0);", "runtime_api"),
    ("cudaEventRecord(e);", "runtime_api"),
    ('asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));', "timer"),
    ('asm volatile("mov.u32 %0, %%globaltimer_lo;" : "=r"(t));', "timer"),
    ('asm("mov.u32 %0, %%clock;" : "=r"(c));', "timer"),
    ('asm("mov.u64 %0, %%clock64;" : "=l"(c));', "timer"),
    ("t = globaltimer;", "timer"),
    ('FILE* f = fopen("x", "r");', "host_code"),
    ('system("ls");', "host_code"),
    ('const char* h = getenv("HOME");', "host_code"),
    ('void* l = dlopen("libc.so", 0);', "host_code"),
    ('popen("ls", "r");', "host_code"),
    ("float* p = (float*)malloc(64);", "device_heap"),
    ("free(p);", "device_heap"),
    ("p = (float*)realloc(p, 8);", "device_heap"),
    ("float* q = new float[4];", "device_heap"),
    ("Cache* c = new Cache;", "device_heap"),
    ("delete[] q;", "device_heap"),
    ("static __managed__ int g_calls;", "managed_memory"),
])
def test_statement_rules(stmt, rule):
    src = kernel("int i = threadIdx.x;", stmt, "a[i] = 0.0f;", prefix="#include <cuda_fp16.h>\n")
    assert rules_at(src) == [(rule, 5)]
    (f,) = check(src)
    assert f.text == "    " + stmt
    assert str(f) == f"line 5: {f.message} ({rule}): {stmt}"


@pytest.mark.parametrize("stmt", [
    "a[0] = n << 2 << 3;",
    "a[0] = n >> 1;",
    "bool b = n < 3 && n > 1;",
    "mysystem(1);",
    "my_cudaMalloc(1);",
    "cuda_Malloc(a);",
    "cudaGetDeviceCount(&n);",
    "float clock = 1.0f;",
    "a[0] = clockrate;",
    "int cublas = 3;",
    "int new_value = renew + 1;",
    "freed(a); my_malloc(4); free_list(a);",
    "struct S { S(const S&) = delete; S& operator=(const S&) =delete; };",
    "int managed = 1;",
])
def test_lookalikes_do_not_fire(stmt):
    assert check(kernel(stmt)) == []


def test_lines_counted_through_block_comments_and_several_findings():
    src = ("/* a block comment\n"
           "   spanning lines\n"
           "*/\n"
           "#include <cufft.h>\n"
           + kernel("cudaMalloc(&p, 4);", "a[0] = 1;", "k2<<<1,1>>>(a); cudaFree(p);"))
    assert rules_at(src) == [("vendor_library", 4), ("runtime_api", 7), ("device_launch", 9),
                             ("runtime_api", 9)]


# -- comments and strings ----------------------------------------------------------------------

@pytest.mark.parametrize("text", [
    "// cudaMalloc(&p, 4); k<<<1,1>>>(a); fopen(\"x\")",
    "/* cublasSgemm(h); */",
    "/* multi\n   cudaFree(p);\n   %globaltimer */",
    "// #include <cublas_v2.h>",
    "// asm(\"mov.u64 %0, %%globaltimer;\")",
    "/* #include \"../x.h\" */",
])
def test_comments_do_not_trigger(text):
    assert check(kernel("a[0] = 1.0f;", prefix=text + "\n")) == []


@pytest.mark.parametrize("stmt", [
    'const char* s = "cudaMalloc( and <<< and fopen( and cublasSgemm(";',
    'printf("k<<<1,1>>>()\\n");',
    'printf("cudaFree(p) \\" system(\\"x\\")");',
    "char c = '\"'; a[0] = 1.0f;",
    "char c = '<';",
])
def test_string_literals_do_not_trigger(stmt):
    assert check(kernel(stmt)) == []


def test_code_after_a_quote_char_literal_is_still_checked():
    assert rules_at(kernel("char q = '\"'; cudaFree(p);")) == [("runtime_api", 3)]
    assert rules_at(kernel("char q = '\\''; cudaFree(p);")) == [("runtime_api", 3)]


def test_timer_rule_sees_inline_asm_strings():
    assert rules_at(kernel('asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));')) == [("timer", 3)]
    # the timer rule looks into every string (inline asm lives in strings), not only asm()
    assert rules_at(kernel('const char* s = "%globaltimer";')) == [("timer", 3)]


def test_digit_separator_does_not_hide_code():
    assert rules_at(kernel("int x = 1'000; cudaMalloc(&p, 4);")) == [("runtime_api", 3)]


def test_digit_separator_keeps_line_numbers():
    src = kernel("int x = 1'000;", "a[0] = 1.0f;", "cudaMalloc(&p, 4);")
    assert [(f.rule, f.line, f.text.strip()) for f in check(src)] == \
        [("runtime_api", 5, "cudaMalloc(&p, 4);")]


def test_strip_keeps_newlines_columns_and_include_paths():
    src = ('#include "my.h" // c\n'
           'int a = 1; /* x\ny */ const char* s = "abc";\n'
           "char c = 'z';\n")
    out = strip_comments_and_strings(src)
    assert out.count("\n") == src.count("\n")
    assert len(out) == len(src)
    lines = out.splitlines()
    assert lines[0] == '#include "my.h"     '
    assert lines[2] == '     const char* s = "   ";'
    assert lines[3] == "char c = ' ';"
    kept = strip_comments_and_strings(src, keep_strings=True)
    assert kept.splitlines()[2] == '     const char* s = "abc";'


def test_unterminated_comment_hides_the_rest():
    assert strip_comments_and_strings("a /* never closed\nb") == "a                \n "
    assert check("int a;\n/* never closed\ncudaFree(p);\n") == []


def test_finding_fields():
    assert check("int a;\n  cudaFree(p);\n") == [
        Finding("runtime_api", 2, "  cudaFree(p);", "calls the CUDA runtime from the kernel (streams, memory, launches)")]


# -- bundled kernels ---------------------------------------------------------------------------

@pytest.mark.parametrize("path", sorted(MANIFESTS.glob("*.cu")), ids=lambda p: p.stem)
def test_bundled_kernels_are_clean(path):
    assert check(path.read_text()) == []


def test_bundled_kernels_exist():
    assert len(list(MANIFESTS.glob("*.cu"))) >= 8


def test_every_rule_has_a_message():
    names = [r for r, _, _ in RULES]
    assert len(names) == len(set(names))
    assert set(names) == {"vendor_library", "vendor_call", "device_launch", "runtime_api", "timer",
                          "include_path", "computed_include", "host_code", "device_heap", "managed_memory"}
