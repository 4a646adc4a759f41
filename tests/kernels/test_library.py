"""The kernel library (kernel_forge/kernels/library.py): one place for every kernel kforge ships,
one way to name them, the headers they share, and the package data that installs them."""
from __future__ import annotations

import json
import re
from fnmatch import fnmatch
from pathlib import Path

import pytest

from kernel_forge.kernels import library
from kernel_forge.kinds import fit
from kernel_forge.kinds import KINDS as IDENTIFIED_KINDS
from kernel_forge.kinds import bind

ROOT = Path(__file__).resolve().parents[2]
LIBRARY = ROOT / "kernel_forge" / "kernels"
MANIFESTS = ROOT / "manifests"


def test_the_index_lists_every_kernel_file_once_under_its_kind():
    on_disk = {p.relative_to(LIBRARY).with_suffix("").as_posix() for p in LIBRARY.glob("*/*.cu")}
    names = [k.name for k in library.index()]
    assert sorted(names) == sorted(on_disk) and len(names) == len(set(names))
    stems = [k.stem for k in library.index()]
    assert len(stems) == len(set(stems)), "a stem names a kernel alone: it must be unique in the library"
    for k in library.index():
        assert library.NAME.fullmatch(k.name) and k.role in library.ROLES and k.technique
        assert k.kind in fit.KINDS or k.kind in IDENTIFIED_KINDS, k.name
        assert k.path == LIBRARY / k.kind / f"{k.stem}.cu" and k.file == f"{k.stem}.cu"
        if k.role == "bound":
            assert not k.task and "@@" in k.text(), f"{k.name}: a bound template has slots and no task"
        else:
            assert (MANIFESTS / f"{k.task}.json").is_file() and "@@" not in k.text(), k.name


def test_a_kernel_is_found_by_its_name_by_its_stem_and_by_its_file():
    k = library.by_name("gemm/gemm_simt_warptile")
    assert k is not None and k.role == "pattern" and k.task == "matmul_f32"
    assert library.by_name("gemm_simt_warptile") == k            # the name prompts and run records use
    assert library.of_path(k.path) == k and library.of_path(ROOT / "manifests" / "matmul_f32.cu") is None
    assert library.by_name("gemm/nothing") is None and library.by_name("row_norm/gemm_simt_warptile") is None


def test_the_binder_s_templates_are_the_library_s_bound_kernels():
    used = {first for first, _ in bind._WRITERS.values()} | {n for more in bind._MORE.values() for n in more}
    used |= {"box_filter/box_filter_x", "scan/scan_rows",          # a writer's choice by the kind's parameters
             "optimizer_step/optimizer_sgd", "gemm/gemm_f16", "gemm/gemm_f16_wg",   # ... and by the operands' type
             "elementwise/gated_halves", "transpose/permute_rows", "rope/rope_tokens",    # ... and by the form
             "row_reduction/row_argmax", "row_softmax/softmax_backward", "row_reduction/row_quant",
             "row_softmax/softmax_axis", "row_reduction/argmax_axis", "scan/scan_axis",      # ... and by the axis
             "stencil1d/stencil1d_cols", "elementwise/elementwise_f64", "elementwise/elementwise_int"}
    assert used == set(library.names("bound"))
    for name in used:
        assert library.by_name(name).kind in IDENTIFIED_KINDS


HEADERS = {"kforge/tf32_mma.cuh": ("kf_tf32(float x)", "kf_mma_tf32(float* d"),
           "kforge/cp_async.cuh": ("kf_cp_async16(void* smem", "kf_cp_async4(void* smem", "kf_cp_async_wait()"),
           "kforge/block_order.cuh": ("kf_grouped_block(int group",),
           "kforge/f16_mma.cuh": ("kf_mma_f16(float* d", "kf_mma_bf16(float* d", "kf_ldmatrix_x4(unsigned* r",
                                  "kf_ldmatrix_x4_trans(unsigned* r", "kf_swz(int r, int c)", "kf_gather8(const T* p",
                                  "kf_copy8(void* dst", "kf_store2_f16(__half* crow"),
           "kforge/wgmma.cuh": ("kf_wgmma_desc(unsigned saddr", "kf_wgmma_n64(float* d", "kf_wgmma_n128(float* d",
                                "kf_wgmma_n256(float* d", "void kf_fence_proxy_async()", "void kf_wgmma_wait()",
                                "kf_wg_load_k(unsigned char* dst", "kf_wg_load_mn(unsigned char* dst",
                                "void kf_wgmma_tf32(float* d"),
           "kforge/tf32x3_wgmma.cuh": ("int kf_sw32(int row, int col)", "void kf_tf32x3_wg_mainloop(float (&acc)"),
           "kforge/gemm_epilogue.cuh": ("void kf_epi(float acc, kf_c_t* __restrict__ crow", "float kf_epi_value(float acc"),
           "kforge/online_softmax.cuh": ("void kf_combine(float& m, float& s, float om, float os)",),
           "kforge/arg_pair.cuh": ("bool kf_before(float a, int ia, float b, int ib)", "void kf_take(float& v, int& i"),
           "kforge/edge_index.cuh": ("int kf_edge(int i, int n)",),
           "kforge/reduce_op.cuh": ("V kf_combine_op(V a, V b)", "kf_reduce_t kf_reduce_init()"),
           "kforge/rotate_pair.cuh": ("void kf_rotate_pair(float a, float b, float2 ca, float2 cb",),
           # for kernels brought from PyTorch (authoring/device_part.py includes it), not the templates
           "kforge/torch_compat.cuh": ("typedef __half Half;", "T WARP_SHFL_XOR(T value")}
USERS = {"gemm/gemm_tf32x3_mma": ("kforge/tf32_mma.cuh", "kforge/cp_async.cuh", "kforge/block_order.cuh"),
         "gemm/gemm_tf32x3": ("kforge/tf32_mma.cuh", "kforge/cp_async.cuh", "kforge/block_order.cuh",
                              "kforge/gemm_epilogue.cuh"),
         "gemm/gemm": ("kforge/gemm_epilogue.cuh",),
         "gemm/gemm_f16_mma": ("kforge/f16_mma.cuh", "kforge/cp_async.cuh", "kforge/block_order.cuh"),
         "gemm/gemm_f16": ("kforge/f16_mma.cuh", "kforge/cp_async.cuh", "kforge/block_order.cuh",
                           "kforge/gemm_epilogue.cuh"),
         "gemm/gemm_f16_wg": ("kforge/wgmma.cuh", "kforge/f16_mma.cuh", "kforge/cp_async.cuh", "kforge/block_order.cuh",
                              "kforge/gemm_epilogue.cuh"),
         "gemm/gemm_f16_wgmma": ("kforge/wgmma.cuh", "kforge/f16_mma.cuh", "kforge/cp_async.cuh", "kforge/block_order.cuh"),
         "gemm/gemm_tf32x3_wgmma": ("kforge/tf32_mma.cuh", "kforge/cp_async.cuh", "kforge/wgmma.cuh",
                                    "kforge/tf32x3_wgmma.cuh", "kforge/block_order.cuh"),
         "gemm/gemm_tf32x3_wg": ("kforge/tf32_mma.cuh", "kforge/cp_async.cuh", "kforge/wgmma.cuh",
                                 "kforge/tf32x3_wgmma.cuh", "kforge/block_order.cuh", "kforge/gemm_epilogue.cuh"),
         "row_softmax/row_softmax": ("kforge/online_softmax.cuh",),
         "row_softmax/softmax_axis": ("kforge/online_softmax.cuh",),
         "row_reduction/row_argmax": ("kforge/arg_pair.cuh",),
         "row_reduction/argmax_axis": ("kforge/arg_pair.cuh",),
         "stencil2d/stencil2d": ("kforge/edge_index.cuh",),
         "stencil1d/stencil1d": ("kforge/edge_index.cuh",),
         "reduction/reduction": ("kforge/reduce_op.cuh",),
         "row_reduction/row_reduction": ("kforge/reduce_op.cuh",),
         "column_reduction/column_reduction": ("kforge/reduce_op.cuh",),
         "rope/rope": ("kforge/rotate_pair.cuh",),
         "rope/rope_tokens": ("kforge/rotate_pair.cuh",)}


@pytest.mark.parametrize("name", USERS)
def test_the_mma_and_cp_async_wrappers_live_once_in_the_library_s_headers(name):
    assert set(library.headers()) == set(HEADERS)       # _io.cuh is the binder's, written into each bound kernel
    text, shown = library.by_name(name).text(), library.by_name(name).source()
    for header in USERS[name]:
        wrappers = HEADERS[header]
        assert all(w in library.headers()[header] for w in wrappers)
        assert f'#include "{header}"' in text
        assert not any(w in text for w in wrappers), f"{name} defines a wrapper {header} holds"
        assert f'"{header}"' not in shown and all(w in shown for w in wrappers)    # what a model is shown: whole


def test_a_bound_gemm_on_the_tensor_cores_is_written_whole_with_the_header_s_text(tmp_path):
    from kernel_forge.kinds.match import Match
    from kernel_forge.model.task import load_task

    task = load_task(MANIFESTS / "matmul_f32.json")
    match = Match("gemm", {"a": "a", "b": "b", "c": "c", "m": "m", "n": "n", "k": "k"}, {})
    bound = {b.label: b.source for b in bind.instantiate(task, match)}
    assert set(bound) == {"bound_gemm.cu", "bound_gemm_tf32x3.cu", "bound_gemm_tf32x3_wg.cu"}
    for name in ("gemm_tf32x3", "gemm_tf32x3_wg"):
        for header in USERS[f"gemm/{name}"]:              # a complete kernel, like _io.cuh's part
            assert f'"{header}"' not in bound[f"bound_{name}.cu"]
            assert library.headers()[header].rstrip("\n") in bound[f"bound_{name}.cu"]
        assert "@@" not in bound[f"bound_{name}.cu"]
    assert "kf_ld4" in bound["bound_gemm.cu"]


def test_the_package_data_holds_every_library_file():
    section = (ROOT / "pyproject.toml").read_text().split("[tool.setuptools.package-data]")[1]
    globs = re.findall(r'"([^"]+)"', re.search(r"kernel_forge\s*=\s*\[(.*?)\]", section, re.S).group(1))
    files = [p.relative_to(ROOT / "kernel_forge").as_posix() for p in LIBRARY.rglob("*")
             if p.is_file() and p.suffix != ".py" and "__pycache__" not in p.parts]
    assert files and [f for f in files if not any(fnmatch(f, g) for g in globs)] == []


def test_the_bundled_manifests_name_library_kernels_by_name():
    for manifest in sorted(MANIFESTS.glob("*.json")):
        for entry in json.loads(manifest.read_text()).get("templates", []):
            assert library.NAME.fullmatch(entry) and library.by_name(entry) is not None, (manifest.name, entry)


@pytest.mark.parametrize("text, kept", [('#include "kforge/unknown.cuh"\n', True), ('#include "common.cuh"\n', True),
                                        ('  #  include "kforge/tf32_mma.cuh"\n', False)])
def test_expand_writes_only_the_library_s_own_headers_in_place(text, kept):
    out = library.expand(text)
    assert (out == text) is kept
    if not kept:
        assert re.search(r"kf_mma_tf32", out)
