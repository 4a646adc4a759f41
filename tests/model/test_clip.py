"""kernel_forge/model/clip.py: clipping a kernel's source for a prompt without losing its main loop."""
from __future__ import annotations

import re
from pathlib import Path

import pytest

from kernel_forge.model.clip import clip_kernel, clip_source, hot_loop, loops, mask

ROOT = Path(__file__).resolve().parents[2]
TEMPLATES = ROOT / "kernel_forge" / "kernels" / "gemm"     # the matmul_f32 templates of the library


def hot_text(src: str) -> str:
    loop = hot_loop(src)
    lines = src.splitlines()
    return "\n".join(lines[loop.first_line:loop.last_line + 1])


@pytest.mark.parametrize("name, head", [("matmul_f32_regblock.cu", "for (int t = 0; t < ntiles; ++t) {"),
                                        ("matmul_f32_tiled.cu", "for (int k0 = 0; k0 < k; k0 += TILE) {")])
def test_the_main_loop_of_a_real_sgemm_is_found_and_kept_whole(name, head):
    src = (TEMPLATES / name).read_text()
    loop = hot_text(src)
    assert loop.strip().startswith(head) and loop.rstrip().endswith("}")
    for limit in (len(loop) + 400, (len(loop) + len(src)) // 2):
        out = clip_kernel(src, limit)
        assert loop in out, (name, limit)
        assert "matmul_f32(const float* __restrict__ a" in out          # the entry point's signature
        assert "left out ..." in out
        others = [l for l in out.splitlines() if "left out" not in l]
        assert all(l in src.splitlines() for l in others)              # lines kept whole, never cut
    assert clip_kernel(src, len(src)) == src


def test_setup_is_clipped_first_and_said_where():
    src = (TEMPLATES / "matmul_f32_regblock.cu").read_text()
    out = clip_kernel(src, 3000)
    assert "before the main loop:" in out and len(out) < len(src)
    assert "fetch(0);" in out                                          # the lines right before the loop stay


def test_a_main_loop_larger_than_the_limit_keeps_its_hottest_inner_loop():
    src = (TEMPLATES / "matmul_f32_regblock.cu").read_text()
    outer = hot_text(src)
    out = clip_kernel(src, len(outer) - 200)
    assert outer not in out
    assert "for (int kk = 0; kk < BK; ++kk) {" in out and "acc[i][j] = fmaf(fa[i], fb[j], acc[i][j]);" in out


def test_loops_ignore_keywords_in_comments_and_strings_and_know_do_while():
    src = ('// for (;;) { not code }\nconst char* s = "while (1) {";\n__global__ void k(float* x) {\n'
           "  int i = 0;\n  do { x[i] = x[i] * 2.0f + 1.0f; i++; } while (i < 8);\n"
           "  for (int j = 0; j < 4; ++j) x[j] += 1.0f;\n}\n")
    found = loops(src)
    assert [(l.first_line, l.last_line) for l in found] == [(4, 4), (5, 5)]
    assert hot_loop(src).first_line == 4


def test_clip_source_keeps_head_and_tail_whole_lines():
    text = "\n".join(f"line {i:04d} " + "x" * 40 for i in range(500))
    out = clip_source(text, 3000)
    assert len(out) <= 3000 and out.startswith("line 0000") and out.endswith("x" * 40)
    assert re.search(r"// \.\.\. \d+ lines \(\d+ characters\) left out \.\.\.", out)
    assert all(l.startswith(("line ", "// ...")) and (l.endswith("x" * 40) or l.startswith("//")) for l in out.splitlines())
    assert clip_source("short", 10) == "short"


# -- what the loop search sees, and a kernel with no loop -----------------------------------------------

def test_mask_blanks_comments_and_string_contents_keeping_every_position():
    src = 'int a; // for (;;)\nchar* s = "while";\n/* do { */ x;'
    masked = mask(src)
    assert len(masked) == len(src) and masked.count("\n") == src.count("\n")
    assert masked.splitlines() == ["int a;" + " " * 12, 'char* s = "     ";', " " * 11 + "x;"]
    assert loops(src) == [] and hot_loop(src) is None


def test_a_kernel_without_a_loop_keeps_its_entry_point_and_head_and_counts_every_line_left_out():
    lines = ["#include <cuda_fp16.h>"] + [f"__device__ int h{i:02d}(int v) {{ return v + {i:02d}; }}" for i in range(40)]
    lines += ['extern "C" __global__ void k(int* o)', "{", "    o[0] = h01(2);", "}"]
    src = "\n".join(lines)
    out = clip_kernel(src, 800).splitlines()
    markers = [l for l in out if l.lstrip().startswith("// ...")]
    kept = [l for l in out if l not in markers]
    assert kept == [l for l in lines if l in kept]                         # whole lines, in their order
    assert kept[0] == "#include <cuda_fp16.h>" and 'extern "C" __global__ void k(int* o)' in kept
    left = [int(re.fullmatch(r"\s*// \.\.\. (\d+) lines? \(\d+ characters\) left out \.\.\.", m).group(1))
            for m in markers]
    assert markers and sum(left) + len(kept) == len(lines)                 # no "main loop" to place them by


def test_nested_loops_have_their_depth_and_the_hot_loop_is_the_outer_one_with_the_most_work():
    src = ("__global__ void k(float* x, int n) {\n"
           "  for (int i = 0; i < n; ++i) x[i] = 0.0f;\n"                              # one store: no work
           "  for (int i = 0; i < n; ++i) {\n"
           "    for (int j = 0; j < 4; ++j) x[i] = fmaf(x[i], 2.0f, 1.0f) * 0.5f;\n"
           "  }\n}\n")
    found = loops(src)
    assert [(l.first_line, l.last_line, l.depth) for l in found] == [(1, 1, 0), (2, 4, 0), (3, 3, 1)]
    assert found[0].work == 0 and found[1].work == found[2].work == 4 + 1   # an FMA (4) and a product; ++j is none
    assert (hot_loop(src).first_line, hot_loop(src).last_line) == (2, 4)
