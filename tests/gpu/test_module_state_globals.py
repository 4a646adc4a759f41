"""The module-global reader (gpu/module_state.py's module_globals), without a GPU: which globals a
CUBIN holds, read from its symbol table."""
from __future__ import annotations

import pytest

from kernel_forge.gpu.module_state import module_globals
from kernel_forge.gpu.nvrtc import compile_source


GLOBALS = r"""
__device__ float g_cache[1024];
__device__ int g_counter = 5;
static __device__ int s_static;
namespace { __device__ int anon_var[3]; }
namespace ns { __device__ double ns_var = 1.5; }
__constant__ float c_table[4] = {1, 2, 3, 4};
extern "C" __global__ void k(float* out) {
    out[0] = g_cache[0] + g_counter + s_static + anon_var[1] + ns::ns_var + c_table[1];
    g_counter++; s_static++; anon_var[1]++;
}
"""


def test_module_globals_lists_every_writable_global_of_a_cubin_and_no_constants():
    cubin = compile_source(GLOBALS, arch="sm_90", use_cache=False).cubin
    found, sections = module_globals(cubin)
    by_name = {g.name: g for g in found}
    assert by_name["g_cache"].size == 4096 and by_name["g_cache"].section == ".nv.global"
    assert by_name["g_counter"].size == 4 and by_name["g_counter"].section == ".nv.global.init"
    assert by_name["s_static"].size == 4
    assert by_name["_ZN2ns6ns_varE"].size == 8 and by_name["_ZN2ns6ns_varE"].section == ".nv.global.init"
    assert any(n.endswith("anon_varE") and g.size == 12 for n, g in by_name.items())
    assert "c_table" not in by_name                  # __constant__ memory is read-only to kernels
    sizes = {s.name: s.size for s in sections}
    assert sizes[".nv.global"] >= 4096 + 4 + 12 and sizes[".nv.global.init"] >= 12
    # offsets lie inside their sections and do not overlap
    for sec in sections:
        members = sorted((g for g in found if g.section == sec.name), key=lambda g: g.offset)
        for a, b in zip(members, members[1:]):
            assert a.offset + a.size <= b.offset
        assert members[-1].offset + members[-1].size <= sec.size


def test_a_kernel_without_globals_has_none():
    cubin = compile_source('extern "C" __global__ void k(float* o) { o[0] = 1.f; }', arch="sm_90",
                           use_cache=False).cubin
    assert module_globals(cubin) == ([], [])


def test_module_globals_refuses_what_is_not_a_cubin():
    with pytest.raises(ValueError, match="ELF"):
        module_globals(b"not an elf file at all, just bytes" * 4)
