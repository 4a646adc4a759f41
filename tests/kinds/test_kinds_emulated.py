"""Bound patterns run on the host: the CUDA emulation of tests/support/host_emulation.py (a fiber
per CUDA thread, AddressSanitizer on exact-size buffers) runs each bound pattern on its
task's correctness and holdout cases and on sizes that reach its other paths, at its default
setting (what the tuner gates first) and at a second setting, and compares with the reference
under the task's tolerance.  float, float16 and bfloat16 storage.  A kind with several bound patterns
(fp32 GEMM: SIMT and split-precision TF32) runs each; a pattern named in SECOND gets its own second setting."""
from __future__ import annotations

from pathlib import Path

import pytest

from kernel_forge.kinds import identify
from kernel_forge.kinds.bind import instantiate
from kernel_forge.model.candidate import parse_candidate
from kernel_forge.model.task import Case, load_task
from kernel_forge.search.bound import gate_source

from tests.support import host_emulation as emu

ROOT = Path(__file__).resolve().parents[2]
DATA = ROOT / "tests" / "data" / "kinds"

#: what the bound patterns use beyond the templates' emulation
EXTRA = r'''
template <class T> T emu_warp_read(T v, int src)       // every lane writes v, then reads lane src's
{
    const int t = emu_tid(), w = t / 32, l = t % 32;
    uint64_t bits = 0;
    std::memcpy(&bits, &v, sizeof(T));
    emu_warp_slot[w][l] = bits;
    emu_warp_bar[w]->arrive_and_wait();
    bits = emu_warp_slot[w][src];
    emu_warp_bar[w]->arrive_and_wait();
    T r;
    std::memcpy(&r, &bits, sizeof(T));
    return r;
}
template <class T> T __shfl_up_sync(unsigned int, T v, int delta, int = 32)
{
    const int l = emu_tid() % 32;
    return emu_warp_read(v, l >= delta ? l - delta : l);
}
template <class T> T __shfl_sync(unsigned int, T v, int src, int = 32) { return emu_warp_read(v, src & 31); }
template <class T> T atomicExch(T* p, T v)
{
    std::lock_guard<std::mutex> g(emu_atomic_mu);
    T old = *p;
    *p = v;
    return old;
}
struct alignas(8) uint2 { unsigned int x, y; };
inline uint2 make_uint2(unsigned int x, unsigned int y) { return {x, y}; }
struct alignas(16) double2 { double x, y; };
struct alignas(16) longlong2 { long long x, y; };
inline double2 make_double2(double x, double y) { return {x, y}; }
'''

#: ggml's pool2d task's window, stride and padding (its manifest's defaults)
POOL_3S2P1 = {"kh": 3, "kw": 3, "sh": 2, "sw": 2, "ph": 1, "pw": 1}
F16_SECOND = {"BM": 64, "BN": 64, "BK": 64, "WM": 32, "WN": 32, "STAGES": 2}

#: task file -> (a second setting, extra cases that reach other paths)
TASKS = {
    DATA / "llmc_layernorm.json": ({"WPR": 2, "RPB": 1, "ITEMS": 1, "STREAM": 0},
                                   [{"N": 5, "C": 1000}, {"N": 7, "C": 36}, {"N": 3, "C": 5}]),
    # the weight as its difference from one: 4-wide (cols % 4 == 0) and one at a time
    DATA / "gemma_rmsnorm.json": ({"WPR": 2, "RPB": 1, "ITEMS": 2, "STREAM": 0}, [{"rows": 3, "cols": 256}, {"rows": 2, "cols": 33}]),
    DATA / "fused_add_rmsnorm_f16.json": ({"WPR": 1, "RPB": 2, "ITEMS": 1, "STREAM": 0},    # rows streamed twice
                                          [{"T": 2, "H": 1030}, {"T": 3, "H": 37}]),
    DATA / "modulate.json": ({"BLOCK": 128, "VPT": 1, "STREAM": 0}, [{"N": 5}, {"N": 1030}]),      # (x * z) / N in place
    # probe 5: rows only in the launch (a block per row, the count from gridDim.x), 4 at a time and not;
    # uint4 segments of 4 and 1024 values; a 4-D scan's three outer sizes; the interior of tiny images
    DATA / "argmax_f32.json": ({"WPR": 2, "RPB": 2}, [{"nrows": 3, "ncols": 1024}, {"nrows": 2, "ncols": 5}]),
    DATA / "reduce_rows_f32.json": ({"WPR": 2, "RPB": 2}, [{"nrows": 5, "ncols": 64}, {"nrows": 3, "ncols": 7}]),
    DATA / "norm_f32.json": ({"WPR": 2, "RPB": 1, "ITEMS": 1, "STREAM": 1}, [{"ns": 1, "nc": 2, "nr": 3, "ncols": 900, "s01": 900, "s02": 2700, "s03": 5400}]),
    DATA / "scanExclusiveShared.json": ({"RPB": 2, "ITEMS": 1}, [{"B": 256, "L": 4}, {"B": 2, "L": 1024}]),
    DATA / "cumsum_kernel.json": ({"RPB": 2, "ITEMS": 8}, [{"ne00": 300, "ne01": 2, "ne02": 3, "ne03": 2, "s00": 1, "s01": 300, "s02": 600, "s03": 1800,
                                                             "s0": 1, "s1": 300, "s2": 600, "s3": 1800}]),
    DATA / "convolution2D_kernel.json": ({"BX": 32, "BY": 8}, [{"ni": 3, "nj": 3}, {"ni": 70, "nj": 40}]),
    DATA / "act_and_mul_kernel.json": ({"BLOCK": 128, "VPT": 1, "STREAM": 0}, [{"T": 2, "d": 8}, {"T": 3, "d": 37}]),
    # along a middle axis: 4 values at a time (D = 8) and one (D = 3), a left size of 3
    DATA / "is_u32_f32.json": ({"TPR": 32, "RPB": 2}, [{"L": 3, "S": 9, "I": 4, "D": 8}, {"L": 2, "S": 5, "I": 7, "D": 3}]),
    # 256 columns that no parameter carries (a compile-time size in the shape)
    DATA / "mergeHistogram256Kernel.json": ({"BX": 64, "BY": 4, "SPLIT": 1}, [{"count": 3}, {"count": 70}]),
    DATA / "extract.json": ({"BLOCK": 128, "VPT": 1, "STREAM": 0}, [{"Nr": 1, "Nc": 3}, {"Nr": 41, "Nc": 100}]),
    # padded windows at every edge, an output row past one block's columns, a single row of outputs
    DATA / "pool2d_nchw_kernel.json": ({"BLOCK": 64, "VPT": 4}, [{"NC": 2, "ih": 5, "iw": 300, **POOL_3S2P1}, {"NC": 1, "ih": 3, "iw": 4, **POOL_3S2P1}]),
    DATA / "column_norms.json": ({"BX": 64, "BY": 4, "SPLIT": 1}, [{"m": 1, "n": 5}, {"m": 70, "n": 33}]),
    # two warps a row (shared-memory combine), 4 at a time and one at a time
    DATA / "soft_max_back_f32.json": ({"WPR": 2, "RPB": 2}, [{"nrows": 3, "ncols": 256}, {"nrows": 5, "ncols": 7}]),
    # a bias before the norm: in place, 4 at a time and one at a time, streamed twice (the sum read back or not)
    DATA / "generalAddBiasResidualPostLayerNorm.json": ({"WPR": 1, "RPB": 2, "ITEMS": 1, "STREAM": 0},
                                                        [{"m": 3, "n": 900}, {"m": 2, "n": 37}]),
    DATA / "cuApplyLayerNorm.json": ({"WPR": 1, "RPB": 2, "ITEMS": 1, "STREAM": 1},
                                     [{"R": 3, "D": 900, "TY": 1}, {"R": 2, "D": 37, "TY": 1}]),
    # a share of a vocabulary: zeros outside it, 4 at a time and one at a time
    DATA / "lookup_kernel.json": ({"TPR": 32, "RPB": 2}, [{"T": 9, "D": 4100, "V": 10, "off": 1000}]),
    # a keep-mask shared by the heads: rows 4 at a time and one at a time, two warps a row
    DATA / "softmax_kernel.json": ({"WPR": 2, "RPB": 1, "ITEMS": 1, "STREAM": 0}, [{"B": 2, "H": 3, "T": 256}]),
    # biases added as heads are permuted: 16 bytes at a time (a run of 4 floats) and value by value (5)
    DATA / "add_fusedQKV_bias_transpose_kernel.json": ({"TX": 8, "TYB": 8, "RPT": 1}, [{"B": 1, "S": 3, "N": 2, "H": 5}]),
    DATA / "bias_transpose_heads.json": ({"TX": 8, "TYB": 8, "RPT": 4}, [{"B": 1, "S": 33, "N": 3, "H": 4}]),
    # a max pooling with its indices: padded edges on both sides, a plane of one row of windows
    DATA / "max_pool_forward_nchw.json": ({"BLOCK": 64, "VPT": 4}, [{"N": 1, "C": 2, "H": 2, "W": 130}]),
    # per-token int8 quantization: two warps a row, 4 values a load and one at a time
    DATA / "dynamic_scaled_int8_quant_kernel.json": ({"WPR": 2, "RPB": 2}, [{"T": 3, "H": 1024}, {"T": 2, "H": 5}]),
    # two outputs of one pass: the 16-byte tiles and the tail; a bias of 13 values (one value at a time)
    DATA / "sincos_kernel.json": ({"BLOCK": 128, "VPT": 1, "STREAM": 0}, [{"n": 1030}]),
    DATA / "bias_gelu_keep_pre.json": ({"BLOCK": 128, "VPT": 2, "STREAM": 2}, [{"rows": 40, "cols": 64}]),
    # the values beside the indices: two warps a row, 4 at a time and one at a time
    DATA / "row_max_idx.json": ({"WPR": 2, "RPB": 2}, [{"R": 3, "C": 1024}]),
    # a convolution layer's bias and ReLU after the taps
    DATA / "conv3x3_bias_relu.json": ({"BX": 16, "BY": 4, "RY": 2}, [{"H": 5, "W": 130}]),
    # scaled chains: 16-byte tiles (cols % 4 == 0) and one value at a time
    DATA / "residual_scaled_gelu.json": ({"BLOCK": 128, "VPT": 2, "STREAM": 0}, [{"R": 40, "C": 64}]),
    DATA / "scale_shift_relu_nhwc.json": ({"BLOCK": 128, "VPT": 1, "STREAM": 1}, [{"P": 70, "C": 36}]),
    # the whole array's scan and its count: one tile, several (the total from the last)
    DATA / "offsets_and_count.json": ({"BLOCK": 128, "ITEMS": 8}, [{"n": 1}, {"n": 3000}]),
    # weights summed by bin: per-warp copies in shared memory, and one per block
    DATA / "weighted_bincount.json": ({"BLOCK": 128, "UNROLL": 1, "BPS": 2, "WARP_COPIES": 0}, [{"N": 3001, "B": 64}]),
    # masks of flags: a row of 1030 keys (4 at a time, streamed twice at ITEMS 1) and one of 17 (one at a time)
    DATA / "masked_softmax_flags.json": ({"WPR": 2, "RPB": 1, "ITEMS": 1, "STREAM": 0}, [{"B": 1, "H": 2, "T": 1032}]),
    DATA / "softmax_rsqrt_padding.json": ({"WPR": 1, "RPB": 2, "ITEMS": 2, "STREAM": 1}, [{"B": 2, "H": 1, "T": 5, "D": 16}]),
    DATA / "softmax_const_scale.json": ({"WPR": 2, "RPB": 2, "ITEMS": 1, "STREAM": 0}, [{"R": 3, "C": 1030}]),
    # three operands; a suffix sum over several tiles; scaled rows 16 bytes at a time and one at a time
    DATA / "addcmul_kernel.json": ({"BLOCK": 128, "VPT": 1, "STREAM": 0}, [{"N": 1030}]),
    DATA / "reverse_cumsum.json": ({"BLOCK": 128, "ITEMS": 8}, [{"N": 1}, {"N": 5000}]),
    DATA / "embedding_scaled.json": ({"TPR": 32, "RPB": 2}, [{"N": 3, "D": 1024}]),
    # tiles of 512 with their totals: the last tile short, one tile, tiles of a lane's items and not
    DATA / "prescan.json": ({"RPB": 2, "ITEMS": 1}, [{"n": 1}, {"n": 512}, {"n": 2049}]),
    DATA / "row_sums_grid.json": ({"WPR": 2, "RPB": 2}, [{"rows": 5, "cols": 64}, {"rows": 3, "cols": 7}]),   # rows from gridDim.x
    DATA / "fused_residual_bf16.json": ({"WPR": 2, "RPB": 1, "ITEMS": 1, "STREAM": 1}, [{"N": 3, "C": 900}]),
    DATA / "fused_residual_layernorm.json": ({"WPR": 2, "RPB": 1, "ITEMS": 1, "STREAM": 1},
                                             [{"N": 3, "C": 900}, {"N": 4, "C": 5}]),
    DATA / "dot_product.json": ({"BLOCK": 128, "ACC": 2, "BPS": 2}, [{"n": 1}, {"n": 5000}]),    # x * w summed
    DATA / "gemv_rowmajor.json": ({"WPR": 2, "RPB": 2}, [{"m": 3, "n": 64}, {"m": 9, "n": 7}]),  # rows times a vector
    DATA / "relu_backward.json": ({"BLOCK": 128, "VPT": 1, "STREAM": 0}, [{"n": 1}, {"n": 4101}]),
    DATA / "llmc_unpermute.json": ({"TX": 8, "TYB": 8, "RPT": 4},    # runs of 16-byte multiples, then not
                                   [{"B": 1, "N": 40, "NH": 2, "d": 4}, {"B": 2, "N": 3, "NH": 3, "d": 5}]),
    DATA / "llmc_permute.json": ({"TX": 8, "TYB": 8, "RPT": 4},       # q, k, v from one input: 16-byte runs, then not
                                 [{"B": 2, "N": 9, "NH": 2, "d": 8}, {"B": 1, "N": 4, "NH": 3, "d": 3}]),
    DATA / "swap_axes_5d.json": ({"TX": 8, "TYB": 8, "RPT": 1}, [{"A": 1, "R": 2, "M": 3, "C": 20, "I": 8}]),
    DATA / "scaled_softmax_f16.json": ({"WPR": 2, "RPB": 1, "ITEMS": 1, "STREAM": 0}, [{"rows": 3, "cols": 1200}]),
    DATA / "l2_normalize.json": ({"WPR": 1, "RPB": 1, "ITEMS": 1, "STREAM": 0}, [{"rows": 2, "cols": 300}]),
    DATA / "row_argmax.json": ({"WPR": 2, "RPB": 2}, [{"rows": 3, "vocab": 1024}, {"rows": 2, "vocab": 5}]),
    DATA / "index_copy.json": ({"TPR": 32, "RPB": 2}, [{"tokens": 3, "width": 5}, {"tokens": 5, "width": 64},
                                                       {"tokens": 4, "width": 800}]),
    DATA / "gelu_backward.json": ({"BLOCK": 128, "VPT": 1, "STREAM": 0}, [{"N": 1}, {"N": 4101}]),
    DATA / "causal_softmax.json": ({"WPR": 2, "RPB": 1, "ITEMS": 1, "STREAM": 0}, [{"N": 2, "T": 300}, {"N": 1, "T": 7}]),
    DATA / "batched_transpose.json": ({"BR": 4, "TY": 2}, [{"batch": 2, "rows": 70, "cols": 3}]),
    # a middle axis between the swapped groups: tiles of strided rows, partial at both edges
    DATA / "llmc_permute4d.json": ({"BR": 4, "TY": 2}, [{"dim1": 1, "dim2": 1, "dim3": 1, "dim4": 1},
                                                        {"dim1": 2, "dim2": 35, "dim3": 3, "dim4": 40}]),
    # strided views: rows ld apart, 4 at a time (cols and ld % 4 == 0) and one at a time (ld or cols odd)
    # rows only the launch carries: a block per row (ROWS * RPB / RPB), the count read back from gridDim
    DATA / "rmsnorm_rows_in_grid.json": ({"WPR": 2, "RPB": 4, "ITEMS": 1, "STREAM": 0}, [{"batch": 3, "d": 40},
                                                                                      {"batch": 9, "d": 1030}]),
    DATA / "layernorm_ld.json": ({"WPR": 2, "RPB": 2, "ITEMS": 1, "STREAM": 0}, [{"M": 3, "N": 64, "ldx": 68},
                                                                               {"M": 5, "N": 30, "ldx": 33}]),
    DATA / "rms_norm_strided.json": ({"WPR": 1, "RPB": 2, "ITEMS": 1, "STREAM": 1}, [{"nt": 3, "hs": 64, "st": 192},
                                                                                    {"nt": 4, "hs": 9, "st": 11}]),
    DATA / "softmax_ld.json": ({"WPR": 2, "RPB": 2, "ITEMS": 1, "STREAM": 0}, [{"N": 3, "C": 1500, "ld": 1504},
                                                                             {"N": 5, "C": 64, "ld": 65}]),
    DATA / "row_max_ld.json": ({"WPR": 2, "RPB": 2}, [{"rows": 3, "cols": 64, "ld": 72}, {"rows": 9, "cols": 8, "ld": 9}]),
    DATA / "llmc_softmax.json": ({"WPR": 2, "RPB": 2, "ITEMS": 1, "STREAM": 0}, [{"N": 3, "C": 1500}, {"N": 5, "C": 64}]),
    DATA / "log_softmax_bf16.json": ({"WPR": 1, "RPB": 2, "ITEMS": 1, "STREAM": 1},
                                     [{"rows": 3, "cols": 600}, {"rows": 2, "cols": 7}]),
    DATA / "blur3x3.json": ({"BX": 16, "BY": 4, "RY": 8}, [{"h": 3, "w": 3}, {"h": 40, "w": 17}]),
    DATA / "gaussian7x7.json": ({"BX": 16, "BY": 4, "RY": 2}, [{"H": 7, "W": 9}, {"H": 30, "W": 21}]),
    DATA / "maxpool2x2.json": ({"BLOCK": 64, "VPT": 1}, [{"N": 1, "C": 2, "H": 3, "W": 300}]),
    DATA / "avgpool3x3.json": ({"BLOCK": 64, "VPT": 4}, [{"width": 3, "height": 3}, {"width": 800, "height": 7}]),
    DATA / "absmax_f16.json": ({"BLOCK": 128, "ACC": 2, "BPS": 2}, [{"n": 1}, {"n": 5003}]),
    DATA / "row_sumsq.json": ({"WPR": 2, "RPB": 2}, [{"rows": 3, "cols": 64}, {"rows": 5, "cols": 7}]),
    DATA / "gemv_t.json": ({"BX": 32, "BY": 4, "SPLIT": 4}, [{"m": 70, "n": 33}, {"m": 3, "n": 5}]),
    # doubles and ints down the columns: slices of 4 rows and the tail, one slice per block
    DATA / "column_sums_f64.json": ({"BX": 32, "BY": 4, "SPLIT": 4}, [{"m": 70, "n": 33}, {"m": 3, "n": 5}]),
    DATA / "column_max_i32.json": ({"BX": 64, "BY": 2, "SPLIT": 1}, [{"rows": 70, "cols": 33}, {"rows": 1, "cols": 5}]),
    DATA / "int8_quant.json": ({"BLOCK": 128, "VPT": 1, "STREAM": 0}, [{"n": 1}, {"n": 4101}]),
    DATA / "int8_dequant.json": ({"BLOCK": 128, "VPT": 2, "STREAM": 1}, [{"n": 3}, {"n": 4101}]),
    DATA / "sobel_x_reflect101.json": ({"BX": 16, "BY": 4, "RY": 2}, [{"rows": 4, "cols": 5}, {"rows": 33, "cols": 40}]),
    DATA / "laplace_periodic.json": ({"BX": 16, "BY": 4, "RY": 2}, [{"ny": 4, "nx": 5}, {"ny": 33, "nx": 40}]),
    DATA / "conv5x5.json": ({"BX": 32, "BY": 2, "RY": 1}, [{"H": 5, "W": 6}, {"H": 33, "W": 40}]),
    # rows added where their index says, indices repeating: 4 values an atomic step, then one at a time
    DATA / "scatter_add_rows.json": ({"TPR": 32, "RPB": 2}, [{"E": 9, "F": 5, "N": 3}, {"E": 50, "F": 800, "N": 7}]),
    DATA / "llmc_encoder_backward.json": ({"TPR": 32, "RPB": 2}, [{"B": 2, "T": 3, "C": 5, "V": 4},     # + dwpe[t]
                                                                    {"B": 3, "T": 4, "C": 800, "V": 6}]),
    DATA / "embedding.json": ({"TPR": 32, "RPB": 2}, [{"n": 9, "dim": 33}, {"n": 4, "dim": 512}]),
    DATA / "encoder_wpe_max_t.json": ({"TPR": 32, "RPB": 2}, [{"B": 2, "T": 3, "C": 33, "maxT": 9}]),
    DATA / "bias_gelu_residual.json": ({"BLOCK": 128, "VPT": 1, "STREAM": 0},
                                       [{"rows": 3, "cols": 4}, {"rows": 40, "cols": 256}]),
    # channels along the middle axis: spatial % 4 == 0 shares a channel per 4 values, 17 and 33 do not
    # rows in registers (V = 50) and streamed twice past ITEMS * 4 * 32 values (V = 700)
    DATA / "scaled_masked_softmax.json": ({"WPR": 2, "RPB": 1, "ITEMS": 1, "STREAM": 0}, [{"rows": 3, "keys": 64}, {"rows": 2, "keys": 700}]),
    # a bias row per batch (4 at a time: T % 4 == 0; one at a time) and per position, in place and not
    DATA / "attn_softmax_mask.json": ({"WPR": 1, "RPB": 2, "ITEMS": 1, "STREAM": 0},
                                      [{"B": 2, "NH": 2, "T": 8}, {"B": 3, "NH": 1, "T": 5}]),
    DATA / "attn_softmax_posbias.json": ({"WPR": 2, "RPB": 1, "ITEMS": 1, "STREAM": 1}, [{"BH": 3, "T": 64}, {"BH": 2, "T": 7}]),
    # a group norm: a row of 3 channels of 36 values (4 at a time), of 5 of 9 (one at a time), streamed twice
    DATA / "group_norm_nchw.json": ({"WPR": 2, "RPB": 1, "ITEMS": 1, "STREAM": 0},
                                    [{"N": 2, "C": 12, "HW": 36, "G": 4}, {"N": 1, "C": 10, "HW": 9, "G": 2},
                                     {"N": 2, "C": 4, "HW": 300, "G": 2}]),
    DATA / "instance_norm.json": ({"WPR": 1, "RPB": 2, "ITEMS": 2, "STREAM": 1},
                                  [{"N": 2, "C": 3, "H": 4, "W": 8}, {"N": 1, "C": 2, "H": 5, "W": 7}]),
    # 1-D convolutions: one tap, a mask past the staged 65 (read from global memory), the valid mode's
    # short output, rows of a batch (clamped ends), tiles past the row's end
    DATA / "convolution_1D_basic_kernel.json": ({"BLOCK": 64, "VPT": 2}, [{"width": 1, "mask": 1}, {"width": 500, "mask": 67},
                                                                          {"width": 300, "mask": 3}]),
    DATA / "smooth_rows.json": ({"BLOCK": 64, "VPT": 1}, [{"rows": 2, "n": 3}, {"rows": 3, "n": 200}]),
    # down columns: planes, a block's rows past the plane's end, columns past the last block's, taps
    # past a chunk (K = 70: 64, then 6); cuda-samples' column and row passes (17 constant taps)
    DATA / "vertical_conv.json": ({"BX": 16, "BY": 4, "RY": 2}, [{"P": 2, "H": 9, "W": 20, "K": 3},
                                                                 {"P": 1, "H": 150, "W": 17, "K": 70}]),
    ROOT / "bench" / "wild" / "cs_convolution_cols" / "cs_convolution_cols.json": (
        {"BX": 16, "BY": 4, "RY": 8}, [{"W": 16, "H": 64}, {"W": 40, "H": 70}]),
    ROOT / "bench" / "wild" / "cs_convolution_rows" / "cs_convolution_rows.json": (
        {"BLOCK": 64, "VPT": 1}, [{"W": 128, "H": 4}, {"W": 300, "H": 3}]),
    DATA / "correlate_valid.json": ({"BLOCK": 64, "VPT": 8}, [{"n": 4, "k": 4}, {"n": 1000, "k": 31}, {"n": 600, "k": 80}]),
    # output rows past one block's columns (W = 300: 600 > 128 * 4) and a single plane of one pixel
    DATA / "upsample_nearest2x.json": ({"BLOCK": 128, "VPT": 4}, [{"N": 1, "C": 2, "H": 3, "W": 300},
                                                                   {"N": 1, "C": 1, "H": 1, "W": 1}]),
    # chunks of 5 (the unrolled walk and its tail) and an empty last chunk (rows 9 over 4 threads)
    DATA / "column_cumsum.json": ({"TI": 32, "TY": 4, "UNROLL": 4}, [{"rows": 9, "cols": 40}, {"rows": 300, "cols": 3}]),
    # each pixel's class: the unrolled loop and its tail, positions past the last block's
    DATA / "seg_argmax_nchw.json": ({"TI": 64, "TY": 2, "UNROLL": 2}, [{"N": 2, "C": 3, "HW": 35}, {"N": 1, "C": 41, "HW": 70}]),
    # over the middle axis: positions past the last block's, the unrolled loop and its tail (C = 3, 9, 40)
    DATA / "seg_softmax_nchw.json": ({"TI": 32, "TY": 2, "UNROLL": 2},
                                     [{"N": 2, "C": 3, "H": 5, "W": 7}, {"N": 1, "C": 40, "H": 3, "W": 25}]),
    DATA / "column_log_softmax.json": ({"TI": 64, "TY": 4, "UNROLL": 8}, [{"rows": 9, "cols": 70}, {"rows": 300, "cols": 3}]),
    DATA / "cross_entropy_logits.json": ({"WPR": 1, "RPB": 2, "ITEMS": 1, "STREAM": 0}, [{"B": 3, "V": 50}, {"B": 4, "V": 700}]),
    DATA / "saxpby.json": ({"BLOCK": 128, "VPT": 2, "STREAM": 0}, [{"n": 3}, {"n": 4101}]),
    DATA / "exp_scale.json": ({"BLOCK": 128, "VPT": 4, "STREAM": 1}, [{"n": 3}, {"n": 4101}]),
    DATA / "clamp_range.json": ({"BLOCK": 128, "VPT": 1, "STREAM": 1}, [{"n": 3}, {"n": 4101}]),
    DATA / "masked_fill_u8.json": ({"BLOCK": 128, "VPT": 2, "STREAM": 0}, [{"n": 5}, {"n": 4100}]),
    # (x - w)^2 summed: 16 bytes a load, then the tail; each row's root (4 at a time, not); to one vector
    DATA / "mse_loss.json": ({"BLOCK": 128, "ACC": 2, "BPS": 2}, [{"n": 1}, {"n": 5001}]),
    DATA / "row_l2_norms.json": ({"WPR": 2, "RPB": 2}, [{"rows": 3, "cols": 64}, {"rows": 9, "cols": 7}]),
    DATA / "dist_to_center.json": ({"WPR": 1, "RPB": 2}, [{"n": 3, "dim": 64}, {"n": 4, "dim": 33}]),
    DATA / "softmax_temperature.json": ({"WPR": 2, "RPB": 1, "ITEMS": 1, "STREAM": 0}, [{"R": 3, "V": 1200}]),
    DATA / "relu_add.json": ({"BLOCK": 128, "VPT": 1, "STREAM": 0}, [{"n": 3}, {"n": 4101}]),
    DATA / "scale_shift.json": ({"BLOCK": 128, "VPT": 2, "STREAM": 2}, [{"n": 3}, {"n": 4101}]),
    DATA / "divide_by.json": ({"BLOCK": 128, "VPT": 1, "STREAM": 1}, [{"n": 3}, {"n": 4101}]),
    DATA / "linear_vec.json": ({"WPR": 2, "RPB": 2}, [{"O": 3, "I": 64}, {"O": 9, "I": 7}]),     # + b a row
    DATA / "nll_ignore_index.json": ({"BLOCK": 64, "RPT": 2, "NC": 1}, [{"n": 1, "C": 32}, {"n": 700, "C": 33}]),
    # borders: kept (2-D, down columns) and 0 (1-D), past a block's tile and on small images
    DATA / "jacobi_sweep.json": ({"BX": 16, "BY": 2, "RY": 2}, [{"nx": 3, "ny": 3}, {"nx": 40, "ny": 21}]),
    DATA / "heat_step.json": ({"BLOCK": 64, "VPT": 2}, [{"n": 3}, {"n": 700}]),
    DATA / "smooth9_f64.json": ({"BX": 16, "BY": 2, "RY": 2}, [{"nx": 3, "ny": 3}, {"nx": 40, "ny": 21}]),      # in double
    DATA / "heat1d_f64.json": ({"BLOCK": 64, "VPT": 2}, [{"n": 3}, {"n": 700}]),
    DATA / "vertical_diffuse.json": ({"BX": 16, "BY": 4, "RY": 2}, [{"H": 5, "W": 3}, {"H": 70, "W": 20}]),
    DATA / "softmax_vector.json": ({"WPR": 4, "RPB": 1, "ITEMS": 1, "STREAM": 0}, [{"n": 3}, {"n": 5000}]),   # one row
    # double storage computed in double: in place (daxpy), a map (the tanh GELU); pairs, then the tail
    DATA / "daxpy.json": ({"BLOCK": 128, "VPT": 1}, [{"n": 1}, {"n": 4101}]),
    # integers summed exactly: 4 at a time then the tail, one partial per block (int32 into int);
    # each row's into int64, 4 at a time (cols % 4 == 0) and one at a time
    DATA / "int_sum.json": ({"BLOCK": 128, "ACC": 2, "BPS": 2}, [{"n": 3}, {"n": 5003}]),
    # a predicate counted exactly: > a parameter into an int, >= 0 into an unsigned long long
    DATA / "count_above.json": ({"BLOCK": 128, "ACC": 2, "BPS": 2}, [{"n": 3}, {"n": 5003}]),
    DATA / "count_nonneg.json": ({"BLOCK": 64, "ACC": 1, "BPS": 2}, [{"len": 1}, {"len": 4099}]),
    # integer maps, exact: 16-byte vectors then the tail (4 int32 or 2 int64 a vector), wrapping sums and products
    DATA / "int_add.json": ({"BLOCK": 64, "VPT": 2}, [{"n": 3}, {"n": 1031}]),
    DATA / "scale_i64.json": ({"BLOCK": 64, "VPT": 1}, [{"count": 1}, {"count": 517}]),
    DATA / "xor_u32.json": ({"BLOCK": 128, "VPT": 4}, [{"n": 5}, {"n": 4099}]),
    DATA / "abs_i32.json": ({"BLOCK": 64, "VPT": 2}, [{"n": 2}, {"n": 1030}]),
    DATA / "row_sums_i32.json": ({"WPR": 2, "RPB": 2}, [{"rows": 3, "cols": 64}, {"rows": 9, "cols": 7}]),
    # pointers to float4 and half2: the size is the vectors times the lanes (1 and 1025 vectors)
    DATA / "scale_bias_float4.json": ({"BLOCK": 128, "VPT": 2, "STREAM": 0}, [{"n4": 1}, {"n4": 1025}]),
    DATA / "silu_half2.json": ({"BLOCK": 128, "VPT": 1, "STREAM": 1}, [{"n2": 1}, {"n2": 1025}]),
    DATA / "gelu_f64.json": ({"BLOCK": 128, "VPT": 2}, [{"n": 3}, {"n": 2051}]),
    DATA / "ddot.json": ({"BLOCK": 128, "ACC": 2, "BPS": 2}, [{"n": 1}, {"n": 5001}]),    # accumulated in double
    DATA / "dgemv.json": ({"WPR": 2, "RPB": 2}, [{"M": 3, "N": 64}, {"M": 9, "N": 7}]),     # 4 at a time, then one
    DATA / "dsum.json": ({"BLOCK": 128, "ACC": 2, "BPS": 2}, [{"n": 3}, {"n": 70001}]),
    DATA / "gather_dim1.json": ({"BLOCK": 64, "RPT": 2, "NC": 0}, [{"R": 1, "C": 40, "K": 2}, {"R": 30, "C": 45, "K": 7}]),
    DATA / "where_select.json": ({"BLOCK": 128, "VPT": 1, "STREAM": 1}, [{"n": 5}, {"n": 4100}]),   # bool, 4 a load
    DATA / "add_channel_bias.json": ({"BLOCK": 128, "VPT": 2, "STREAM": 0},
                                     [{"batch": 2, "channels": 5, "spatial": 256}, {"batch": 3, "channels": 5, "spatial": 33}]),
    DATA / "batchnorm_relu_nchw.json": ({"BLOCK": 128, "VPT": 1, "STREAM": 2},
                                        [{"N": 2, "C": 3, "HW": 256}, {"N": 2, "C": 6, "HW": 17}]),
    DATA / "exclusive_scan.json": ({"BLOCK": 128, "ITEMS": 8}, [{"n": 1}, {"n": 4099}, {"n": 100000}]),
    DATA / "compact_offsets.json": ({"BLOCK": 128, "ITEMS": 8}, [{"n": 1}, {"n": 4099}, {"n": 100000}]),
    DATA / "row_cumsum_i64.json": ({"RPB": 1, "ITEMS": 1}, [{"rows": 1, "cols": 1}, {"rows": 5, "cols": 129}]),
    # over the middle axis: one matrix per grid z; SPLIT 4 keeps a partial per slice, matrix and column
    DATA / "channel_mean_nchw.json": ({"BX": 32, "BY": 4, "SPLIT": 4}, [{"N": 3, "C": 9, "HW": 40}, {"N": 2, "C": 130, "HW": 5}]),
    # a channel's values in N runs of HW: 4 at a time (HW = 64) and one at a time (33)
    DATA / "conv_bias_grad.json": ({"WPR": 2, "RPB": 2}, [{"N": 3, "C": 5, "HW": 64}, {"N": 4, "C": 3, "HW": 33}]),
    DATA / "bias_backward.json": ({"BX": 64, "BY": 4, "SPLIT": 1}, [{"B": 1, "T": 1, "OC": 5}, {"B": 4, "T": 333, "OC": 70}]),
    DATA / "nchw_to_nhwc.json": ({"BR": 32, "TY": 4}, [{"N": 2, "C": 3, "H": 5, "W": 7}, {"N": 2, "C": 40, "H": 6, "W": 11}]),
    DATA / "transpose_coalesced.json": ({"BR": 32, "TY": 4}, [{"width": 1, "height": 1}, {"width": 64, "height": 130}]),
    DATA / "dtranspose.json": ({"BR": 4, "TY": 2}, [{"rows": 1, "cols": 1}, {"rows": 130, "cols": 64}]),
    DATA / "reduce_max.json": ({"BLOCK": 128, "ACC": 2, "BPS": 2}, [{"n": 1}, {"n": 5}, {"n": 70001}]),
    DATA / "matmul_forward.json": ({"BM": 64, "BN": 64, "BK": 8, "WM": 32, "WN": 32, "TM": 4, "TN": 8, "MINB": 1},
                                   [{"B": 1, "T": 3, "C": 7, "OC": 5}, {"B": 2, "T": 40, "C": 64, "OC": 132}]),
    ROOT / "manifests" / "matmul_f32.json": ({"BM": 64, "BN": 64, "BK": 8, "WM": 32, "WN": 32, "TM": 4, "TN": 8,
                                              "MINB": 1}, [{"m": 67, "n": 36, "k": 44}]),
    DATA / "letter_histogram.json": ({"BLOCK": 128, "UNROLL": 2, "BPS": 2, "WARP_COPIES": 1},
                                     [{"length": 1}, {"length": 5000}]),     # 16 bytes a load, then the tail
    # real values in bins of a range: 16 bytes a load then the tail; bins past the launch's shared memory
    DATA / "histc_f32.json": ({"BLOCK": 128, "UNROLL": 2, "BPS": 2, "WARP_COPIES": 1},
                              [{"n": 3, "nbins": 1}, {"n": 5001, "nbins": 7}, {"n": 2003, "nbins": 20000}]),
    DATA / "unit_histogram.json": ({"BLOCK": 128, "UNROLL": 1, "BPS": 2, "WARP_COPIES": 0},
                                   [{"size": 1}, {"size": 4999}]),
    DATA / "byte_histogram.json": ({"BLOCK": 128, "UNROLL": 1, "BPS": 2, "WARP_COPIES": 0},
                                   [{"size": 1}, {"size": 37}, {"size": 5003}]),
    # a `long size` (64-bit here): counts added to a zeroed histogram
    DATA / "histo_kernel.json": ({"BLOCK": 128, "UNROLL": 2, "BPS": 2, "WARP_COPIES": 1}, [{"n": 1}, {"n": 5003}]),
    DATA / "hist_mod.json": ({"BLOCK": 128, "UNROLL": 4, "BPS": 2, "WARP_COPIES": 1},
                             [{"n": 3, "nb": 1}, {"n": 2000, "nb": 20000}, {"n": 999, "nb": 5}]),
    DATA / "cumsum_rows.json": ({"RPB": 1, "ITEMS": 1}, [{"rows": 1, "cols": 1}, {"rows": 5, "cols": 129},
                                                         {"rows": 3, "cols": 3000}]),
    ROOT / "bench" / "wild" / "llmc_bias_backward" / "llmc_bias_backward.json": (   # dbias += (accumulates)
        {"BX": 64, "BY": 4, "SPLIT": 1}, [{"B": 1, "T": 1, "OC": 5}, {"B": 3, "T": 111, "OC": 70}]),
    ROOT / "bench" / "wild" / "cs_reduction" / "cs_reduction.json": (   # a sum per 512 values, the last short
        {"WPR": 4, "RPB": 1}, [{"n": 1}, {"n": 512}, {"n": 1537}, {"n": 2050}]),
    ROOT / "bench" / "wild" / "llmc_encoder" / "llmc_encoder.json": (   # wte[token] + wpe[t]
        {"TPR": 32, "RPB": 2}, [{"B": 1, "T": 1, "C": 5, "V": 50}, {"B": 3, "T": 5, "C": 64, "V": 50},
                                {"B": 2, "T": 3, "C": 800, "V": 50}]),    # 4 vectors a step, then the rest
    DATA / "box_rows.json": ({"BX": 64, "ITEMS": 1}, [{"width": 1, "height": 1, "radius": 1},
                                                       {"width": 300, "height": 3, "radius": 20}]),
    ROOT / "bench" / "wild" / "cs_boxfilter_y" / "cs_boxfilter_y.json": (
        # VEC = 4 by default: 4 columns a load where w % 4 == 0 (w = 68: a block's last columns past
        # the edge), one at a time where not (w = 5, 70); the second setting one column a thread
        {"BX": 64, "SEG": 32, "VEC": 1}, [{"w": 5, "h": 3, "r": 2}, {"w": 70, "h": 100, "r": 1},
                                          {"w": 68, "h": 50, "r": 4}]),
    DATA / "sgemm_tn.json": ({"BM": 64, "BN": 64, "BK": 8, "WM": 32, "WN": 32, "TM": 4, "TN": 8, "MINB": 1},
                             [{"m": 67, "n": 36, "k": 44}, {"m": 5, "n": 3, "k": 1}, {"m": 130, "n": 70, "k": 21}]),
    ROOT / "manifests" / "vector_add.json": ({"BLOCK": 128, "VPT": 2, "STREAM": 0}, [{"n": 1}, {"n": 4101}]),
    ROOT / "manifests" / "layernorm.json": ({"WPR": 4, "RPB": 1, "ITEMS": 2, "STREAM": 1},
                                            [{"rows": 2, "cols": 3000}, {"rows": 9, "cols": 1024}]),
    ROOT / "bench" / "wild" / "llmc_crossentropy" / "llmc_crossentropy.json": (   # -log(probs[r, targets[r]])
        {"BLOCK": 64, "RPT": 8, "NC": 0}, [{"B": 1, "T": 1, "V": 33}, {"B": 3, "T": 250, "V": 40}]),   # targets < 33
    DATA / "nll_bf16.json": ({"BLOCK": 64, "RPT": 2, "NC": 0}, [{"n": 1, "classes": 17}, {"n": 700, "classes": 20}]),
    ROOT / "bench" / "wild" / "llmc_adamw" / "llmc_adamw.json": (   # whole 16-byte tiles, then the scalar tail
        {"BLOCK": 128, "VPT": 1, "STREAM": 0}, [{"n": 1}, {"n": 2048}, {"n": 4101}]),
    DATA / "adamw_torch.json": ({"BLOCK": 128, "VPT": 4, "STREAM": 0}, [{"n": 3}, {"n": 2561}]),
    DATA / "adamw_master.json": ({"BLOCK": 128, "VPT": 1, "STREAM": 0}, [{"n": 5}, {"n": 1029}]),   # a master and its copy
    DATA / "sgd_momentum.json": ({"BLOCK": 128, "VPT": 1, "STREAM": 0}, [{"n": 2}, {"n": 4099}]),
    # 16-bit GEMMs (gemm_f16): B transposed with a bias, fp16; A transposed with alpha and beta, bf16;
    # the bundled fp16 task.  Rows of a multiple of 8 values reach cp.async, the others the gather;
    # BK = 64 swizzles a transposed B's rows of 8 chunks, BK = 32 those of 4
    DATA / "linear_f16.json": (F16_SECOND, [{"B": 1, "T": 3, "C": 7, "OC": 5}, {"B": 2, "T": 40, "C": 64, "OC": 136}]),
    # the activation in the epilogue: relu on the tensor cores (fp16), the tanh GELU after an fp32 SIMT product
    DATA / "linear_bias_relu_f16.json": (F16_SECOND, [{"M": 3, "N": 5, "K": 7}, {"M": 80, "N": 136, "K": 64}]),
    DATA / "fc_gelu.json": ({"BM": 64, "BN": 64, "BK": 8, "WM": 32, "WN": 32, "TM": 4, "TN": 8, "MINB": 1},
                            [{"M": 67, "N": 36, "K": 44}, {"M": 5, "N": 3, "K": 1}]),
    DATA / "attn_scores_f16.json": (F16_SECOND, [{"BH": 2, "T": 70, "D": 16}]),    # a batch on the grid's z
    DATA / "bmm_f32.json": ({"BM": 64, "BN": 64, "BK": 8, "WM": 32, "WN": 32, "TM": 4, "TN": 8, "MINB": 1},
                            [{"batch": 2, "M": 67, "N": 36, "K": 12}]),
    DATA / "hgemm_tn_bf16.json": (F16_SECOND, [{"m": 5, "n": 3, "k": 1}, {"m": 130, "n": 72, "k": 40},
                                               {"m": 136, "n": 70, "k": 48}]),
    DATA / "swiglu_bf16.json": ({"BLOCK": 128, "VPT": 1, "STREAM": 0}, [{"n": 1}, {"n": 4101}]),   # silu(gate) * up
    DATA / "silu_and_mul_f16.json": ({"BLOCK": 128, "VPT": 2, "STREAM": 0},        # halves of rows: 16-byte path
                                     [{"T": 1, "d": 1}, {"T": 3, "d": 1028}, {"T": 9, "d": 517}]),   # and not
    # rotary embeddings: groups of 2 or 4 pairs (16-byte vectors), then one pair at a time (d / 2 odd);
    # by span (candle), by period and heads (llm.c, candle's rope_thd), (cos, sin) pairs, full tables in place
    DATA / "rope_candle.json": ({"BLOCK": 128, "VPT": 1, "STREAM": 0}, [{"BH": 2, "T": 3, "D": 6}, {"BH": 3, "T": 5, "D": 16}]),
    DATA / "rope_i_candle.json": ({"BLOCK": 64, "VPT": 4, "STREAM": 1}, [{"BH": 2, "T": 3, "D": 2}, {"BH": 3, "T": 40, "D": 8}]),
    DATA / "rope_thd_bf16.json": ({"BLOCK": 128, "VPT": 2, "STREAM": 0}, [{"B": 1, "T": 3, "H": 2, "D": 6},
                                                                        {"B": 2, "T": 5, "H": 3, "D": 24}]),
    DATA / "rope_llmc.json": ({"BLOCK": 64, "VPT": 1, "STREAM": 0}, [{"B": 1, "T": 3, "NH": 2, "HS": 2},
                                                                    {"B": 2, "T": 7, "NH": 3, "HS": 8}]),
    # by a positions buffer, a block per token: vLLM's query and key (partial rot_dim, then the whole head;
    # rot / 2 odd: one pair at a time), GPT-J pairs with split tables
    DATA / "vllm_rotary_f16.json": ({"BLOCK": 64, "VPT": 1}, [{"T": 3, "NH": 2, "NKV": 1, "D": 24, "R": 12, "P": 9},
                                                              {"T": 2, "NH": 5, "NKV": 3, "D": 16, "R": 16, "P": 4}]),
    DATA / "rope_gptj_positions.json": ({"BLOCK": 64, "VPT": 4}, [{"T": 2, "H": 2, "D": 6, "P": 5},
                                                                   {"T": 3, "H": 40, "D": 8, "P": 7}]),
    DATA / "rope_theta.json": ({"BLOCK": 64, "VPT": 1, "STREAM": 0}, [{"S": 3, "H": 2, "D": 6, "OFF": 0},
                                                                     {"S": 40, "H": 3, "D": 8, "OFF": 7}]),   # computed angles
    DATA / "rope_neox_inplace.json": ({"BLOCK": 128, "VPT": 4, "STREAM": 1}, [{"B": 1, "S": 3, "D": 6}, {"B": 2, "S": 9, "D": 40}]),
    # cross-entropy's gradient: 16-byte groups (V % 4 == 0) and one value at a time, added to dlogits
    # (llm.c) or written, ignored targets' rows 0, column tiles past the row's end
    DATA / "llmc_xent_backward.json": ({"BLOCK": 128, "VPT": 1, "STREAM": 0}, [{"B": 1, "T": 2, "V": 5},
                                                                              {"B": 2, "T": 3, "V": 1100}]),
    DATA / "xent_grad_mean_f16.json": ({"BLOCK": 64, "VPT": 4, "STREAM": 1}, [{"N": 20, "C": 3}, {"N": 7, "C": 1028}]),
    ROOT / "manifests" / "matmul_f16.json": (F16_SECOND, [{"m": 67, "n": 72, "k": 48}, {"m": 130, "n": 136, "k": 104}]),
}
IDS = [p.stem for p in TASKS]
#: the second setting of the bound patterns that have other tunables than their kind's first
SECOND = {"gemm_tf32x3": {"BM": 64, "BN": 128, "BK": 32, "WM": 32, "WN": 32, "STAGES": 2},
          # the wgmma GEMM: two 64-row tiles in one warpgroup, 64 columns, no batch left in flight
          "gemm_f16_wg": {"BN": 64, "WGS": 1, "MT": 2, "STAGES": 2, "INFLIGHT": 0},
          # the split-TF32 wgmma GEMM: one warpgroup, 64 columns, two stages
          "gemm_tf32x3_wg": {"BN": 64, "WGS": 1, "STAGES": 2, "GROUP": 4}}


@pytest.mark.slow
@pytest.mark.parametrize("path", list(TASKS), ids=IDS)
def test_the_bound_pattern_matches_the_reference_under_emulation(path, tmp_path, monkeypatch):
    if emu.host_compiler() is None:
        pytest.skip("no C++20 host compiler that builds the emulation")
    monkeypatch.setattr(emu, "EMU_TEMPLATE_EXTRA", emu.EMU_TEMPLATE_EXTRA + EXTRA)
    task = load_task(path)
    second, sizes = TASKS[path]
    cases = [c for c in task.cases if c.role != "performance"]
    cases += [Case(f"emu{i}", "correctness", v, 1000 + i) for i, v in enumerate(sizes)]
    problems = []
    for bound in instantiate(task, identify(task).match):
        cand = parse_candidate(gate_source(bound.source), name=bound.label)
        other = SECOND.get(bound.pattern, second)
        for i, setting in enumerate((dict(cand.defines), {**cand.defines, **other})):
            pinned = cand.with_defines(setting)
            work = tmp_path / f"{bound.pattern}{i}"
            exe = emu.emu_build(task, pinned, setting, work)
            for case in cases if i == 0 else cases[-len(sizes):]:
                problems += [f"{bound.label}: {p}" for p in emu.emu_run(task, pinned, setting, exe, case, work)]
    assert not problems, "\n".join(problems[:6])
