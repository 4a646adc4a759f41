"""Module state for every kind of global a kernel can declare (kernel_forge/gpu/module_state.py).

Real NVRTC CUBINs (sm_90) of every kind: 8- and 16-byte aligned types, structs, arrays of any
size, static, namespaced, anonymous-namespace, function-scope static and templated globals,
initialised and zero-initialised, the libdevice tables a double-precision sine pulls in, and
``__constant__`` tables.  From each CUBIN's ELF facts (symbol offsets and sizes) the tests build
what ``cuModuleGetGlobal`` would report under several ways a driver may place globals, and check
that every range :func:`plan_ranges` would copy lies inside one symbol's reported range, hence
inside one allocation, and that every writable global is covered whole.

Issue 19's failure is the case the first version of module_state got wrong: a ``__device__
double`` array followed by an unsigned retirement counter.  The driver placed the two globals
apart, in the order they were looked up, each at its own alignment; the double array's size is a
multiple of that alignment, so the counter landed right behind it and the addresses looked like
the ELF's section layout.  The old code then copied the whole section in one call spanning two
allocations (CUDA_ERROR_INVALID_VALUE).  ``test_the_double_array_and_counter_looked_like_one_
section`` shows that coincidence on the real CUBIN; the planner never merges symbols.
"""
from __future__ import annotations

import random
from dataclasses import dataclass

import pytest

from kernel_forge.gpu.module_state import GLOBAL_SECTIONS, GlobalVar, module_globals, plan_ranges
from kernel_forge.gpu.nvrtc import compile_source

KERNEL = 'extern "C" __global__ void k(float* out, int n) {{\n{body}\n}}\n'

#: name -> (declarations, kernel body using them): one CUBIN per kind of global
KINDS = {
    "double_array_and_counter": (
        "__device__ double g_partial[64];\n__device__ unsigned int g_retired = 0;",
        "g_partial[blockIdx.x % 64] = out[0];\n__threadfence();\n"
        "if (atomicInc(&g_retired, gridDim.x) == gridDim.x - 1) { double s = 0; "
        "for (int i = 0; i < 64; ++i) s += ((volatile double*)g_partial)[i]; out[0] = (float)s; }"),
    "double_array_4096_and_counter": (
        "__device__ double kf_partial[4096];\n__device__ unsigned int kf_count;",
        "kf_partial[threadIdx.x] += 1.0; if (atomicAdd(&kf_count, 1u) == 7u) out[0] = (float)kf_partial[1];"),
    "odd_double_array_and_counter": (
        "__device__ double g_d[65];\n__device__ unsigned int g_c;",
        "g_d[threadIdx.x % 65] += out[1]; atomicAdd(&g_c, 1u); out[0] = (float)g_d[3];"),
    "float_array_and_counter": (
        "__device__ float g_partial[1024];\n__device__ unsigned int g_arrived = 0;",
        "g_partial[blockIdx.x] = out[0]; if (atomicAdd(&g_arrived, 1u) == gridDim.x - 1) { out[0] = g_partial[0]; g_arrived = 0; }"),
    "aligned_8_and_16": (
        "__device__ long long g_ll = 5;\n__device__ double g_d;\n__device__ double2 g_d2;\n"
        "__device__ float4 g_f4[3];\nstruct alignas(16) V { float x, y, z, w; };\n__device__ V g_v[5];\n"
        "__device__ char g_c[3];\n__device__ short g_s;",
        "g_ll++; g_d += 1; g_d2.y += 1; g_f4[threadIdx.x % 3].w += 1; g_v[threadIdx.x % 5].z += 1; "
        "g_c[threadIdx.x % 3]++; g_s++; out[0] = (float)g_d + g_v[1].z + g_c[0] + g_s;"),
    "structs": (
        "struct S { double a; int b; char c; };\nstruct P { float x; S inner[2]; unsigned long long tag; };\n"
        "__device__ S g_s;\n__device__ S g_ss[3] = {{1.0, 2, 3}};\n__device__ P g_p[7];",
        "g_s.a += 1; g_ss[threadIdx.x % 3].b++; g_p[threadIdx.x % 7].inner[1].a += 2; g_p[0].tag++; "
        "out[0] = (float)(g_s.a + g_ss[1].b + g_p[2].inner[1].a);"),
    "arrays_of_any_size": (
        "__device__ float g_one[1];\n__device__ unsigned char g_bytes[37];\n__device__ int g_mid[1000];\n"
        "__device__ float g_big[1 << 20];\n__device__ double g_huge[1 << 23];",
        "g_one[0] += 1; g_bytes[threadIdx.x % 37]++; g_mid[threadIdx.x] += 2; g_big[threadIdx.x] += 3; "
        "g_huge[blockIdx.x] += 4; out[0] = g_one[0] + g_bytes[2] + g_mid[5] + g_big[7] + (float)g_huge[9];"),
    "static_namespaced_anonymous_function_static": (
        "static __device__ float s_static[7];\nnamespace ns { __device__ double g_ns[9]; "
        "namespace inner { __device__ int g_inner = 4; } }\nnamespace { __device__ float g_anon[2]; }",
        "static __device__ int fn_static; fn_static++; s_static[threadIdx.x % 7]++; ns::g_ns[threadIdx.x % 9]++; "
        "ns::inner::g_inner++; g_anon[threadIdx.x % 2]++; out[0] = s_static[1] + (float)ns::g_ns[2] + g_anon[1] + fn_static;"),
    "templated": (
        "template <int N> __device__ float g_tmpl[N];\ntemplate <typename T> __device__ T g_acc;",
        "g_tmpl<4>[threadIdx.x % 4]++; g_tmpl<8>[threadIdx.x % 8]++; g_acc<double> += 1; g_acc<int> += 2; "
        "out[0] = g_tmpl<4>[1] + g_tmpl<8>[2] + (float)g_acc<double> + g_acc<int>;"),
    "libdevice_tables": (
        "__device__ double g_x[32];",
        "g_x[threadIdx.x % 32] = sin(g_x[threadIdx.x % 32] + out[threadIdx.x]); out[0] = (float)g_x[1];"),
    "constant_tables": (
        "__constant__ float c_table[16] = {1, 2, 3};\n__constant__ double c_d[3];\n__device__ int g_n;",
        "g_n++; out[threadIdx.x] = c_table[threadIdx.x % 16] + (float)c_d[threadIdx.x % 3] + g_n;"),
}


@pytest.fixture(scope="module")
def cubins():
    return {name: compile_source(decls + "\n" + KERNEL.format(body=body), arch="sm_90",
                                 file_label=f"{name}.cu").cubin for name, (decls, body) in KINDS.items()}


# -- how a driver may place globals, from the ELF's facts ---------------------------------------

@dataclass(frozen=True)
class Placed:
    found: dict            #: name -> (pointer, bytes): what cuModuleGetGlobal reports
    allocations: list      #: [(lo, hi)]: the separate allocations the globals live in


def as_the_elf(symbols: list[GlobalVar]) -> Placed:
    """Each section in one allocation, symbols at their ELF offsets."""
    found, allocs, base = {}, [], 1 << 40
    for sec in sorted({g.section for g in symbols}):
        members = [g for g in symbols if g.section == sec]
        end = max(g.offset + g.size for g in members)
        for g in members:
            found[g.name] = (base + g.offset, g.size)
        allocs.append((base, base + end))
        base += (end + (1 << 21)) // (1 << 21) * (1 << 21) + (1 << 21)
    return Placed(found, allocs)


def one_by_one(symbols: list[GlobalVar], align: int, order=None) -> Placed:
    """Each global its own allocation, placed back to back in lookup order at ``align`` (what the
    driver did on the H200, lazily, for some alignment between 16 and 512 bytes)."""
    found, allocs, at = {}, [], 1 << 40
    for g in (order or symbols):
        at = (at + align - 1) // align * align
        found[g.name] = (at, g.size)
        allocs.append((at, at + g.size))
        at += g.size
    return Placed(found, allocs)


def scattered(symbols: list[GlobalVar], seed: int) -> Placed:
    rng = random.Random(seed)
    found, allocs = {}, []
    for i, g in enumerate(symbols):
        at = (1 << 40) + i * (1 << 30) + rng.randrange(0, 1 << 20) * 256
        found[g.name] = (at, g.size)
        allocs.append((at, at + g.size))
    return Placed(found, allocs)


def layouts(symbols: list[GlobalVar]) -> dict[str, Placed]:
    out = {"as the ELF": as_the_elf(symbols), "scattered": scattered(symbols, 1)}
    for align in (8, 16, 256, 512):
        out[f"one by one, align {align}"] = one_by_one(symbols, align)
        out[f"one by one reversed, align {align}"] = one_by_one(symbols, align, list(reversed(symbols)))
    return out


def check_plan(symbols: list[GlobalVar], placed: Placed) -> None:
    ranges = plan_ranges(symbols, placed.found)
    by_name = {r.label: r for r in ranges}
    for r in ranges:
        ptr, size = placed.found[r.label]
        assert ptr <= r.ptr and r.ptr + r.size <= ptr + size, (r, ptr, size)          # inside its symbol
        assert any(lo <= r.ptr and r.ptr + r.size <= hi for lo, hi in placed.allocations), r  # one allocation
    for g in symbols:                                 # every global covered, whole
        r = by_name[g.name]
        assert r.size == g.size and r.constant == g.constant, (g, r)
    # pristine offsets do not overlap
    spans = sorted((r.pristine, r.pristine + r.size) for r in ranges)
    assert all(a_hi <= b_lo for (_a, a_hi), (b_lo, _b) in zip(spans, spans[1:]))


@pytest.mark.parametrize("kind", sorted(KINDS))
def test_every_planned_copy_lies_inside_one_global_whatever_the_drivers_layout(kind, cubins):
    symbols, _sections = module_globals(cubins[kind], constants=True)
    assert symbols, kind
    for label, placed in layouts(symbols).items():
        try:
            check_plan(symbols, placed)
        except AssertionError as exc:
            raise AssertionError(f"{kind}, driver layout {label}: {exc}") from None


def test_every_kind_of_global_is_found_in_the_elf(cubins):
    names = {kind: {g.name for g in module_globals(c, constants=True)[0]} for kind, c in cubins.items()}
    assert {"g_partial", "g_retired"} <= names["double_array_and_counter"]
    assert {"g_ll", "g_d", "g_d2", "g_f4", "g_v", "g_c", "g_s"} <= names["aligned_8_and_16"]
    assert {"g_s", "g_ss", "g_p"} <= names["structs"]
    assert {"g_one", "g_bytes", "g_mid", "g_big", "g_huge"} <= names["arrays_of_any_size"]
    sn = names["static_namespaced_anonymous_function_static"]
    assert "s_static" in sn and "_ZN2ns4g_nsE" in sn and "_ZN2ns5inner7g_innerE" in sn
    assert any(n.endswith("g_anonE") for n in sn) and any("fn_static" in n for n in sn)
    assert {"_Z6g_tmplILi4EE", "_Z6g_tmplILi8EE"} <= names["templated"] and len(names["templated"]) == 4
    assert any(n.startswith("__cudart_") for n in names["libdevice_tables"])
    by = {g.name: g for g in module_globals(cubins["constant_tables"], constants=True)[0]}
    assert by["c_table"].constant and by["c_d"].constant and not by["g_n"].constant
    assert by["c_table"].section.startswith(".nv.constant") and by["g_n"].section in GLOBAL_SECTIONS
    # without constants=True the constant banks are not listed
    assert "c_table" not in {g.name for g in module_globals(cubins["constant_tables"])[0]}
    huge = next(g for g in module_globals(cubins["arrays_of_any_size"])[0] if g.name == "g_huge")
    assert huge.size == 8 << 23


def test_the_double_array_and_counter_looked_like_one_section(cubins):
    """Issue 19's root cause on the real CUBIN: placed one by one (lookup order, 16-512 byte
    alignment), the two globals' addresses minus their ELF offsets agree, so the old code took
    them for one allocation and copied the section whole, across two.  A float array behind a
    4-byte counter (offsets 0 and 4) never lines up, which is why float and int globals passed."""
    for kind, contiguous in (("double_array_and_counter", True), ("double_array_4096_and_counter", True),
                             ("float_array_and_counter", False)):
        symbols, sections = module_globals(cubins[kind])
        assert len(sections) == 1 and len(symbols) == 2
        for align in (16, 256, 512):
            placed = one_by_one(symbols, align)
            bases = {placed.found[g.name][0] - g.offset for g in symbols}
            assert (len(bases) == 1) is contiguous, (kind, align, bases)
            if contiguous:   # one copy of the section's size from that base spans both allocations
                base, size = bases.pop(), sections[0].size
                assert not any(lo <= base and base + size <= hi for lo, hi in placed.allocations)
            check_plan(symbols, placed)


def test_a_global_the_driver_does_not_report_is_not_copied_and_a_smaller_report_is_respected():
    syms = [GlobalVar("a", ".nv.global", 0, 64), GlobalVar("b", ".nv.global", 64, 8),
            GlobalVar("c", ".nv.constant3", 0, 16)]
    ranges = plan_ranges(syms, {"a": (1000, 32), "c": (5000, 16)})
    assert [(r.label, r.ptr, r.size, r.constant) for r in ranges] == [("a", 1000, 32, False), ("c", 5000, 16, True)]
    # two names at one address (an alias) are copied once
    assert len(plan_ranges(syms[:2], {"a": (1000, 64), "b": (1000, 64)})) == 1
