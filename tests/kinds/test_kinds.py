"""kernel_forge/kinds: the operation read from the reference (kind, binding, parameters) for the
bundled tasks and for public signatures (tests/data/kinds), nothing matched for an operation of no
known kind, a stated kind checked, and the bound patterns instantiated for the task's own
signature, compiled with NVRTC for every storage type the kind allows.  The source a bound pattern
is written as: test_bind.py; each kind's hypotheses on their own: test_linalg.py, test_maps.py,
test_rows.py, test_spatial.py; optimizer steps: test_optim.py.  Their gate runs on a GPU: test_kinds_bound_gpu.py."""
from __future__ import annotations

import re
import time
import json
from pathlib import Path

import numpy as np
import pytest

from kernel_forge.kinds import KindMismatch, identify
from kernel_forge.kinds.bind import Unbindable, instantiate
from kernel_forge.model.task import load_task

from tests.support.kind_tasks import check_match, copy_task

ROOT = Path(__file__).resolve().parents[2]
MANIFESTS = ROOT / "manifests"
DATA = ROOT / "tests" / "data" / "kinds"

#: bundled task -> (kind, roles that must be bound as given, params that must hold)
BUNDLED = {
    "vector_add": ("elementwise", {"x": "a", "z": "b", "y": "c", "n": "n"}, {"form": "binary", "op": "add"}),
    "gelu_bf16": ("elementwise", {"x": "x", "y": "y"}, {"form": "map", "act": "gelu_tanh"}),
    "layernorm": ("row_norm", {"x": "x", "y": "y", "weight": "gamma", "bias": "beta", "rows": "rows", "cols": "cols",
                               "eps": "eps"}, {"norm": "layer"}),
    "softmax_rows": ("row_softmax", {"x": "x", "y": "y", "rows": "rows", "cols": "cols"}, {"log": False}),
    "reduce_sum": ("reduction", {"x": "x", "y": "out", "n": "n"}, {"op": "sum"}),
    "transpose": ("transpose", {"x": "x", "y": "y", "rows": "rows", "cols": "cols"}, {}),
    "histogram": ("histogram", {"x": "x", "bins": "bins", "n": "n", "nbins": "nbins"}, {"index": "ignore"}),
    "matmul_f32": ("gemm", {"a": "a", "b": "b", "c": "c", "m": "m", "n": "n", "k": "k"},
                   {"trans_a": False, "trans_b": False}),
}

#: public signatures and the new kinds (tests/data/kinds/NAME.json) -> (kind, roles, params)
PUBLIC = {
    "llmc_layernorm": ("row_norm", {"x": "inp", "y": "out", "weight": "weight", "bias": "bias", "mean": "mean",
                                    "rstd": "rstd", "rows": "N", "cols": "C", "eps": None},
                       {"norm": "layer", "eps": 1e-5}),
    "llmc_softmax": ("row_softmax", {"x": "inp", "y": "out", "rows": "N", "cols": "C"}, {"log": False}),
    "blur3x3": ("stencil2d", {"x": "x", "y": "y", "rows": "h", "cols": "w", "taps": None},
                {"k": 3, "edge": "clamp", "taps": [1 / 16, 2 / 16, 1 / 16, 2 / 16, 4 / 16, 2 / 16, 1 / 16, 2 / 16, 1 / 16]}),
    "conv5x5": ("stencil2d", {"x": "img", "y": "out", "taps": "filt", "rows": "H", "cols": "W"}, {"k": 5, "edge": "zero"}),
    # the edge modes of OpenCV (BORDER_REFLECT_101) and of a periodic grid
    "sobel_x_reflect101": ("stencil2d", {"x": "src", "y": "dst", "rows": "rows", "cols": "cols", "taps": None},
                           {"k": 3, "edge": "reflect", "taps": [-1.0, 0.0, 1.0, -2.0, 0.0, 2.0, -1.0, 0.0, 1.0]}),
    "laplace_periodic": ("stencil2d", {"x": "u", "y": "out", "rows": "ny", "cols": "nx", "taps": None},
                         {"k": 3, "edge": "wrap", "taps": [0.0, 1.0, 0.0, 1.0, -4.0, 1.0, 0.0, 1.0, 0.0]}),
    "embedding": ("gather", {"y": "out", "index": "idx", "table": "table", "rows": "n", "cols": "dim"}, {}),
    # llm.c's position table as allocated: maxT rows, T of them used (the period a parameter, not wpe's rows)
    "encoder_wpe_max_t": ("gather", {"y": "out", "index": "inp", "table": "wte", "rows": "B*T", "cols": "C", "pos": "wpe",
                                     "period": "T"}, {}),
    # x read as a strided view: each row's first cols values, rows ldx apart (a BLAS ld, vLLM's input_stride)
    "layernorm_ld": ("row_norm", {"x": "x", "y": "y", "weight": "gamma", "bias": "beta", "rows": "M", "cols": "N",
                                  "eps": "eps", "ldx": "ldx"}, {"norm": "layer"}),
    "rms_norm_strided": ("row_norm", {"x": "input", "y": "out", "weight": "weight", "rows": "num_tokens",
                                      "cols": "hidden_size", "eps": "epsilon", "ldx": "input_stride"}, {"norm": "rms"}),
    "softmax_ld": ("row_softmax", {"x": "inp", "y": "out", "rows": "N", "cols": "C", "ldx": "ld"}, {"log": False}),
    "row_max_ld": ("row_reduction", {"x": "x", "y": "y", "rows": "rows", "cols": "cols", "ldx": "ld"}, {"op": "max"}),
    "rmsnorm_f16": ("row_norm", {"x": "inp", "y": "out", "weight": "weight", "bias": None, "eps": "eps",
                                 "rows": "rows", "cols": "dim"}, {"norm": "rms"}),
    "gemma_rmsnorm": ("row_norm", {"x": "x", "y": "y", "weight": "w", "bias": None, "eps": "eps", "rows": "rows",
                                   "cols": "cols"}, {"norm": "rms", "weight_offset": 1.0}),
    "bias_gelu_residual": ("elementwise", {"x": "x", "bias": "bias", "res": "res", "y": "out", "cols": "cols",
                                           "n": "rows*cols"}, {"form": "bias_act_res", "act": "gelu_erf"}),
    # per-channel vectors broadcast along the middle axis of an NCHW tensor
    # two scalars (BLAS axpby in place; torch.clamp) and a byte mask (torch.masked_fill)
    "exp_scale": ("elementwise", {"x": "x", "y": "y", "alpha": "s", "n": "n"}, {"form": "scale_act", "act": "exp"}),
    "saxpby": ("elementwise", {"x": "x", "z": "y", "y": "y", "alpha": "alpha", "beta": "beta", "n": "n"},
               {"form": "axpby"}),
    "clamp_range": ("elementwise", {"x": "x", "y": "y", "alpha": "min_val", "beta": "max_val", "n": "n"},
                    {"form": "clamp"}),
    # a mean squared error; each row's 2-norm (the root of a sum of squares); each row's squared distance to a vector
    "mse_loss": ("reduction", {"x": "pred", "w": "target", "y": "loss", "n": "n"},
                 {"op": "mean", "axis": None, "pre": "square", "product": "full", "diff": True}),
    "row_l2_norms": ("row_reduction", {"x": "x", "y": "norms", "rows": "rows", "cols": "cols"},
                     {"op": "sum", "pre": "square", "post": "sqrt"}),
    "dist_to_center": ("row_reduction", {"x": "points", "w": "center", "y": "dist", "rows": "n", "cols": "dim"},
                       {"op": "sum", "pre": "square", "product": "cols", "diff": True}),
    # softmax of x / a temperature; relu(a + b); a scale and a shift; x / a divisor; W x + b
    "softmax_temperature": ("row_softmax", {"x": "logits", "y": "probs", "rows": "rows", "cols": "vocab",
                                            "scale": "temperature"}, {"log": False, "divide": True}),
    "relu_add": ("elementwise", {"x": "a", "z": "b", "y": "out", "n": "n"}, {"form": "binary_act", "op": "add", "act": "relu"}),
    "scale_shift": ("elementwise", {"x": "x", "y": "y", "alpha": "scale", "beta": "shift", "n": "n"}, {"form": "affine"}),
    "divide_by": ("elementwise", {"x": "x", "y": "y", "alpha": "divisor", "n": "n"}, {"form": "scale", "divide": True}),
    "linear_vec": ("row_reduction", {"x": "W", "w": "x", "bias": "b", "y": "y", "rows": "out_features",
                                     "cols": "in_features"}, {"op": "sum", "product": "cols"}),
    # a negative log-likelihood whose negative (ignored) targets have a 0 loss
    "nll_ignore_index": ("row_pick", {"y": "loss", "index": "target", "table": "logp", "rows": "n", "cols": "classes"},
                         {"act": "neg", "ignored": "zero"}),
    # HPC stencils with a border left out: a Jacobi sweep (kept), a heat step (0 at the ends), a column smoothing (kept)
    "jacobi_sweep": ("stencil2d", {"x": "u", "y": "unew", "rows": "ny", "cols": "nx", "taps": None},
                     {"k": 3, "edge": "keep", "taps": [0, 0.25, 0, 0.25, 0, 0.25, 0, 0.25, 0]}),
    "heat_step": ("stencil1d", {"x": "u", "y": "unew", "taps": None, "rows": None, "cols": "n", "k": None},
                  {"k": 3, "edge": "clear", "flip": False, "taps": [0.2, 0.6, 0.2]}),
    # ... and in double, as HPC codes write them (computed in double: the taps to every digit)
    "smooth9_f64": ("stencil2d", {"x": "in", "y": "out", "rows": "ny", "cols": "nx", "taps": None},
                    {"k": 3, "edge": "keep", "taps": [1 / 9] * 9}),
    "heat1d_f64": ("stencil1d", {"x": "u", "y": "u_new", "taps": None, "rows": None, "cols": "n", "k": None},
                   {"k": 3, "edge": "keep", "flip": False, "taps": [0.25, 0.5, 0.25]}),
    "vertical_diffuse": ("stencil1d", {"x": "src", "y": "dst", "taps": None, "planes": None, "rows": "height",
                                       "cols": "width", "k": None},
                         {"k": 5, "edge": "keep", "flip": False, "axis": "cols",
                          "taps": [0.0625, 0.25, 0.375, 0.25, 0.0625]}),
    # the softmax of one vector: no parameter counts its one row
    "softmax_vector": ("row_softmax", {"x": "x", "y": "y", "rows": "1", "cols": "n"}, {"log": False}),
    # double storage: daxpy in place, a double GELU (bound as elementwise_f64, computed in double)
    "daxpy": ("elementwise", {"x": "x", "z": "y", "y": "y", "alpha": "a", "n": "n"}, {"form": "axpy"}),
    "gelu_f64": ("elementwise", {"x": "x", "y": "y", "n": "n"}, {"form": "map", "act": "gelu_tanh"}),
    # double reductions, accumulated in double: BLAS ddot, a sum with an unsigned count
    "ddot": ("reduction", {"x": "x", "w": "y", "y": "result", "n": "n"}, {"op": "sum", "axis": None, "product": "full"}),
    "dsum": ("reduction", {"x": "x", "y": "out", "n": "n"}, {"op": "sum", "axis": None}),
    "dgemv": ("row_reduction", {"x": "A", "w": "x", "y": "y", "rows": "m", "cols": "n"}, {"op": "sum", "product": "cols"}),
    # integers summed exactly into an integer: one atomicAdd-style total (zeroed first), each row's into int64
    "int_sum": ("reduction", {"x": "in", "y": "out", "n": "n"}, {"op": "sum", "axis": None}),
    # predicate counts: > a threshold parameter (an atomicAdd into a zeroed int), >= 0 into a 64-bit count
    "count_above": ("reduction", {"x": "x", "y": "count", "n": "n", "threshold": "threshold"},
                    {"op": "sum", "axis": None, "pred": "gt"}),
    "count_nonneg": ("reduction", {"x": "v", "y": "total", "n": "len"}, {"op": "sum", "axis": None, "pred": "ge", "t": 0.0}),
    # integer maps, exact: a wrapping int32 sum (CUDA by Example's add), an int64 scale, an unsigned xor, |x|
    "int_add": ("elementwise", {"y": "c", "n": "n", "x": "a", "z": "b"}, {"form": "binary", "op": "add", "int": True}),
    "scale_i64": ("elementwise", {"y": "y", "n": "count", "x": "x", "alpha": "k"}, {"form": "scale", "int": True}),
    "xor_u32": ("elementwise", {"y": "out", "n": "n", "x": "a", "z": "b"}, {"form": "binary", "op": "xor", "int": True}),
    "abs_i32": ("elementwise", {"y": "y", "n": "n", "x": "x"}, {"form": "map", "act": "abs", "int": True}),
    # two float scalars, a weight offset of 0 first: the eps is the one that acts as it (a rerun with each at 0.5)
    "rmsnorm_rows_in_grid": ("row_norm", {"x": "input", "y": "output", "weight": "weight", "bias": None, "mean": None,
                                          "rstd": None, "var": None, "rows": None, "cols": "d", "eps": "eps"},
                             {"norm": "rms"}),
    "rmsnorm_offset_first": ("row_norm", {"x": "input", "y": "output", "weight": "weight", "bias": None, "mean": None,
                                          "rstd": None, "var": None, "rows": "rows", "cols": "d", "eps": "eps"},
                             {"norm": "rms"}),
    "row_sums_i32": ("row_reduction", {"x": "mat", "y": "sums", "rows": "rows", "cols": "cols"}, {"op": "sum"}),
    # pointers to CUDA vector types (a count of vectors: the size is that count times the lanes)
    "scale_bias_float4": ("elementwise", {"x": "in4", "y": "out4", "alpha": "scale", "beta": "bias", "n": "n4*4"},
                          {"form": "affine"}),
    "silu_half2": ("elementwise", {"x": "inp", "y": "out", "n": "n2*2"}, {"form": "map", "act": "silu"}),
    # torch.gather along the last axis: k picks a row
    "gather_dim1": ("row_pick", {"y": "out", "index": "index", "table": "src", "rows": "rows", "cols": "cols", "picks": "k"},
                    {"act": "identity"}),
    # torch.where with a bool mask: the mask in the residual's place
    "where_select": ("elementwise", {"x": "a", "z": "b", "mask": "cond", "y": "out", "n": "n"}, {"form": "where"}),
    "masked_fill_u8": ("elementwise", {"x": "scores", "z": "mask", "y": "out", "alpha": "value", "n": "n"},
                       {"form": "masked_fill"}),
    "add_channel_bias": ("elementwise", {"x": "in", "bias": "bias", "y": "out", "cols": "channels", "inner": "spatial",
                                         "n": "batch*channels*spatial"},
                         {"form": "bias_act", "act": "identity", "broadcast": "channel"}),
    "batchnorm_relu_nchw": ("elementwise", {"x": "x", "y": "y", "mean": "running_mean", "var": "running_var",
                                            "scale": "weight", "offset": "bias", "eps": "eps", "cols": "C", "inner": "HW",
                                            "n": "N*C*HW"},
                            {"form": "batchnorm_act", "act": "relu", "broadcast": "channel"}),
    "exclusive_scan": ("scan", {"x": "in", "y": "out", "n": "n"}, {"exclusive": True, "per_row": False}),
    "bias_backward": ("column_reduction", {"x": "dout", "y": "dbias", "rows": "B*T", "cols": "OC"}, {"op": "sum"}),
    # each column's sum of doubles (combined in double), each column's largest int (exactly, in integers)
    "column_sums_f64": ("column_reduction", {"x": "A", "y": "colsum", "rows": "m", "cols": "n"}, {"op": "sum"}),
    "column_max_i32": ("column_reduction", {"x": "counts", "y": "best", "rows": "rows", "cols": "cols"}, {"op": "max"}),
    "channel_mean_nchw": ("column_reduction", {"x": "x", "y": "out", "rows": "C", "cols": "HW", "batch": "N"},
                          {"op": "mean"}),
    "conv_bias_grad": ("row_reduction", {"x": "dout", "y": "dbias", "rows": "C", "cols": "HW", "outer": "N"},
                       {"op": "sum"}),
    "scaled_masked_softmax": ("row_softmax", {"x": "scores", "y": "probs", "bias": "key_mask", "scale": "scale",
                                              "rows": "rows", "cols": "keys"}, {"log": False}),
    # a bias matrix broadcast: a key-padding mask per batch over its heads and queries (row r adds mask row
    # r / (NH*T)), a T x T position bias over every (batch, head) (row r adds bias row r % T)
    "attn_softmax_mask": ("row_softmax", {"x": "att", "y": "att", "bias": "mask", "scale": "scale", "rows": "B*NH*T",
                                          "cols": "T", "bias_group": "NH*T"}, {"log": False, "bias_rows": "div"}),
    "attn_softmax_posbias": ("row_softmax", {"x": "scores", "y": "probs", "bias": "bias", "rows": "BH*T", "cols": "T",
                                             "bias_group": "T"}, {"log": False, "bias_rows": "mod"}),
    "cross_entropy_logits": ("row_softmax", {"x": "logits", "y": "losses", "index": "targets", "rows": "B", "cols": "V"},
                             {"log": True, "xent": True}),
    "log_softmax_bf16": ("row_softmax", {"x": "x", "y": "y", "rows": "rows", "cols": "cols"}, {"log": True}),
    # 1-D convolutions: PMPP's mask of Mask_Width taps with zero ghost cells; a fitted [1, 2, 1] / 4 along
    # each row of a batch, the ends repeated; np.convolve's valid mode (the mask reversed, n - k + 1 outputs)
    "convolution_1D_basic_kernel": ("stencil1d", {"x": "N", "y": "P", "taps": "M", "rows": None, "cols": "Width",
                                                  "k": "Mask_Width"}, {"k": 7, "edge": "zero", "flip": False}),
    "smooth_rows": ("stencil1d", {"x": "src", "y": "dst", "taps": None, "rows": "rows", "cols": "n", "k": None},
                    {"k": 3, "edge": "clamp", "flip": False, "taps": [0.25, 0.5, 0.25]}),
    # a mask of ntaps down each column of a batch of planes, edges reflected
    "vertical_conv": ("stencil1d", {"x": "src", "y": "dst", "taps": "taps", "planes": "planes", "rows": "height",
                                    "cols": "width", "k": "ntaps"}, {"k": 5, "edge": "reflect", "flip": False, "axis": "cols"}),
    "correlate_valid": ("stencil1d", {"x": "signal", "y": "out", "taps": "kernel", "rows": None, "cols": "n", "k": "k"},
                        {"k": 4, "edge": "valid", "flip": True}),
    # nearest-neighbour upsampling by 2 of N x C planes
    "upsample_nearest2x": ("resample", {"x": "input", "y": "output", "planes": "N*C", "rows": "H", "cols": "W"},
                           {"scale": 2, "mode": "nearest"}),
    # a prefix sum down each column (dim=0)
    "column_cumsum": ("scan", {"x": "x", "y": "y", "axis": "rows", "inner": "cols", "outer": None},
                      {"exclusive": False, "dim": "middle"}),
    # argmax over the middle axis of N x C x HW: each pixel's class, int64
    "seg_argmax_nchw": ("row_reduction", {"x": "logits", "y": "labels", "axis": "C", "inner": "HW", "outer": "N"},
                        {"op": "argmax", "dim": "middle"}),
    # a group norm of N x C x HW (rows: a sample's group), weight and bias per channel; an instance norm
    "group_norm_nchw": ("row_norm", {"x": "x", "y": "y", "weight": "gamma", "bias": "beta", "mean": "mean", "rstd": "rstd",
                                     "outer": "N", "groups": "G", "channels": "C", "inner": "HW", "eps": "eps"},
                        {"norm": "layer", "group": True}),
    "instance_norm": ("row_norm", {"x": "input", "y": "output", "weight": "weight", "bias": "bias", "outer": "N",
                                   "groups": "C", "channels": "C", "inner": "H*W", "eps": "eps"},
                      {"norm": "layer", "group": True}),
    # over an axis that is not the last: dim=1 of NCHW (the pixels' classes) and dim=0 of a matrix
    "seg_softmax_nchw": ("row_softmax", {"x": "logits", "y": "probs", "axis": "C", "inner": "H*W", "outer": "N"},
                         {"log": False, "dim": "middle"}),
    "column_log_softmax": ("row_softmax", {"x": "in", "y": "out", "axis": "rows", "inner": "cols", "outer": None},
                           {"log": True, "dim": "middle"}),
    "transpose_coalesced": ("transpose", {"x": "idata", "y": "odata", "rows": "height", "cols": "width"}, {}),
    "dtranspose": ("transpose", {"x": "A", "y": "B", "rows": "rows", "cols": "cols"}, {}),      # doubles, as stored
    "reduce_max": ("reduction", {"x": "in", "y": "out", "n": "n"}, {"op": "max", "axis": None}),
    "matmul_forward": ("gemm", {"a": "inp", "b": "weight", "c": "out", "bias": "bias", "m": "B*T", "n": "OC", "k": "C",
                                "alpha": None, "beta": None}, {"trans_a": False, "trans_b": True}),
    "byte_histogram": ("histogram", {"x": "buffer", "bins": "histo", "n": "size", "nbins": None}, {"index": "direct"}),
    # CUDA by Example's signature: `long size` (the platform's long), counts added to a zeroed histogram
    "histo_kernel": ("histogram", {"x": "buffer", "bins": "histo", "n": "size", "nbins": None}, {"index": "direct"}),
    "letter_histogram": ("histogram", {"x": "data", "bins": "histo", "n": "length", "nbins": None},
                         {"index": "binned", "lo": 97, "span": 26, "width": 4}),
    "hist_mod": ("histogram", {"x": "v", "bins": "counts", "n": "n", "nbins": "nb"}, {"index": "modulo"}),
    # real values in equal bins of a range: torch.histc's (float counts, the range two parameters, values
    # outside skipped) and [0, 1) in 100 bins with the range in the kernel
    "histc_f32": ("histogram", {"x": "input", "bins": "hist", "n": "n", "nbins": "nbins", "lo": "min_val",
                                "hi": "max_val"}, {"index": "range", "edge": "closed", "outside": "skip"}),
    "unit_histogram": ("histogram", {"x": "values", "bins": "counts", "n": "size", "nbins": None, "lo": None,
                                     "hi": None}, {"index": "range", "lo": 0.0, "hi": 1.0, "outside": "skip"}),
    "cumsum_rows": ("scan", {"x": "x", "y": "y", "rows": "rows", "cols": "cols"}, {"exclusive": False, "per_row": True}),
    # integer prefix sums: exact, in y's type (a compaction's int32 offsets; per-row int32 -> int64)
    "compact_offsets": ("scan", {"x": "flags", "y": "offsets", "n": "n"}, {"exclusive": True, "per_row": False}),
    "row_cumsum_i64": ("scan", {"x": "counts", "y": "out", "rows": "rows", "cols": "cols"},
                       {"exclusive": False, "per_row": True}),
    "box_rows": ("box_filter", {"x": "src", "y": "dst", "rows": "height", "cols": "width", "radius": "radius"},
                 {"axis": "x", "edge": "zero", "norm": "sum"}),
    "sgemm_tn": ("gemm", {"a": "A", "b": "B", "c": "C", "m": "m", "n": "n", "k": "k", "alpha": "alpha", "beta": "beta",
                          "bias": None}, {"trans_a": True, "trans_b": False}),
    "swiglu_bf16": ("elementwise", {"y": "out", "n": "n", "x": "gate", "z": "up"}, {"form": "gated", "act": "silu"}),
    "fused_add_rmsnorm_f16": ("row_norm", {"x": "input", "y": "input", "weight": "weight", "bias": None, "eps": "epsilon",
                                           "rows": "num_tokens", "cols": "hidden_size", "res": "residual",
                                           "sum": "residual"}, {"norm": "rms"}),
    "fused_residual_layernorm": ("row_norm", {"x": "inp1", "y": "normed", "weight": "weight", "bias": "bias",
                                              "mean": "mean", "rstd": "rstd", "eps": None, "rows": "N", "cols": "C",
                                              "res": "inp2", "sum": "residual"}, {"norm": "layer", "eps": 1e-5}),
    # the same in llm.c's bf16 build: the reference rounds the stored sum to bf16 and norms that, as the kernel does
    "fused_residual_bf16": ("row_norm", {"x": "inp1", "y": "normed", "weight": "weight", "bias": "bias", "mean": "mean",
                                         "rstd": "rstd", "var": None, "eps": None, "rows": "N", "cols": "C",
                                         "res": "inp2", "sum": "residual"}, {"norm": "layer", "eps": 1e-5}),
    # probe 5's public kernels (ggml, cuda-samples, PolyBench): the rows only in the launch (argmax, mean,
    # the norm, uint4 segments read back from gridDim.x); a 4-D scan whose smallest case has ne02 = 1 (the
    # rows bound as all three outer sizes, the case with none of them 1 probed first and confirmed on
    # another); a 3 x 3 stencil whose smallest case (5 x 7) is too small to tell its border
    "argmax_f32": ("row_reduction", {"x": "x", "y": "dst", "rows": None, "cols": "ncols"}, {"op": "argmax"}),
    "reduce_rows_f32": ("row_reduction", {"x": "x_ptr", "y": "dst_ptr", "rows": None, "cols": "ncols"}, {"op": "mean"}),
    "norm_f32": ("row_norm", {"x": "x", "y": "dst", "weight": None, "bias": None, "mean": None, "rstd": None, "var": None,
                              "rows": None, "cols": "ncols", "eps": "eps"}, {"norm": "layer"}),
    "scanExclusiveShared": ("scan", {"x": "d_Src", "y": "d_Dst", "rows": None, "cols": "size"},
                            {"exclusive": True, "per_row": True}),
    "cumsum_kernel": ("scan", {"x": "src", "y": "dst", "rows": "ne01*ne02*ne03", "cols": "ne00"},
                      {"exclusive": False, "per_row": True}),
    # vLLM's gelu_tanh_and_mul in bf16, the reference rounding the activation before the product, as the
    # kernel does: two bf16 roundings from the float result (kinds.match.close allows both)
    "act_and_mul_kernel": ("elementwise", {"y": "out", "n": None, "x": "input", "cols": "d"},
                           {"form": "gated_halves", "act": "gelu_tanh", "act_on": "first"}),
    # candle's index_select: rows of the middle axis of (left, src_dim, right) picked (the left size an outer loop)
    "is_u32_f32": ("gather", {"y": "out", "index": "ids", "table": "inp", "rows": "ids_dim_size", "cols": "right_size",
                              "outer": "left_size", "vocab": "src_dim_size"}, {}),
    # cuda-samples' merge of partial histograms: 256 columns, a compile-time size written in the shape
    "mergeHistogram256Kernel": ("column_reduction", {"x": "d_PartialHistograms", "y": "d_Histogram",
                                                     "rows": "histogramCount", "cols": "256"}, {"op": "sum"}),
    # Rodinia's extract: exp(I / 255) in place, the constant written in the kernel (fitted), a C long size
    "extract": ("elementwise", {"y": "d_I", "n": "d_Ne", "x": "d_I"},
                {"form": "affine_act", "act": "exp", "a": float(np.float32(1 / 255)), "b": 0.0}),
    # ggml's pool2d: a 3 x 3 average, stride 2, padding 1 counted, the planes in no parameter (bound from x's size)
    "pool2d_nchw_kernel": ("pool2d", {"x": "src", "y": "dst", "planes": None, "rows": "ih", "cols": "iw"},
                           {"window": 3, "stride": 2, "pad": 1, "op": "mean"}),
    # down the columns, mapped: each column's 2-norm (squares summed, the root stored)
    "column_norms": ("column_reduction", {"x": "A", "y": "norms", "rows": "m", "cols": "n"},
                     {"op": "sum", "pre": "square", "post": "sqrt"}),
    # ggml's softmax backward: scale * (g - sum(g * y)) * y per row, y the forward's output
    "soft_max_back_f32": ("row_softmax", {"x": "dstf", "g": "grad", "y": "dst", "rows": None, "cols": "ncols",
                                          "scale": "scale"}, {"log": False, "backward": True}),
    # a bias of one value a column added with the residual before the norm (BERT's post-LN): FasterTransformer's,
    # in place; ONNX Runtime's SkipLayerNorm, the sum (input + skip + bias), mean and 1/std written too
    "generalAddBiasResidualPostLayerNorm": ("row_norm", {"x": "out", "y": "out", "res": "input", "pre_bias": "bias",
                                                         "weight": "gamma", "bias": "beta", "sum": None, "rows": "m",
                                                         "cols": "n", "eps": "layernorm_eps"}, {"norm": "layer"}),
    "cuApplyLayerNorm": ("row_norm", {"x": "vals", "y": "output_vals", "res": "skip", "pre_bias": "bias", "weight": "gamma",
                                      "bias": "beta", "sum": "skip_input_bias_add_output", "mean": "mean",
                                      "rstd": "inv_std_dev", "rows": "n1", "cols": "n2", "eps": "epsilon"}, {"norm": "layer"}),
    # TensorRT-LLM's lookup: this GPU's share of the vocabulary from `offset` on, zeros for a token outside it
    "lookup_kernel": ("gather", {"y": "output", "index": "input", "table": "weight", "rows": "token_num",
                                 "cols": "n_embed", "offset": "offset", "vocab": "size"}, {"outside": "zero"}),
    # FasterTransformer's BERT softmax: a keep-mask [B, T, T] shared by the heads, added as (1 - m) * -10000
    "softmax_kernel": ("row_softmax", {"x": "qk_buf_", "y": "qk_buf_", "rows": "batch_size*head_num*seq_len",
                                       "cols": "seq_len", "scale": "scalar", "bias": "attr_mask", "bias_group": "seq_len",
                                       "bias_heads": "head_num"},
                       {"log": False, "bias_rows": "heads", "mask_fill": -10000.0}),
    # attention's biases added as the heads are permuted: FasterTransformer's fused QKV (split into q, k, v,
    # one bias of all three) and one tensor's (ONNX Runtime's AddBiasTranspose, sizes as parameters)
    "add_fusedQKV_bias_transpose_kernel": ("transpose", {"x": "QKV", "y": "q_buf", "y1": "k_buf", "y2": "v_buf",
                                                         "outer": "batch_size", "rows": "seq_len", "cols": "head_num",
                                                         "inner": "size_per_head", "bias": "qkv_bias",
                                                         "bias_len": "3*head_num*size_per_head"}, {"parts": 3}),
    "bias_transpose_heads": ("transpose", {"x": "input", "y": "output", "bias": "biases", "bias_len": "heads*head_size",
                                           "outer": "batch", "rows": "seq", "cols": "heads", "inner": "head_size"}, {}),
    # PyTorch's max pooling with indices: each maximum's place in its plane written beside it
    "max_pool_forward_nchw": ("pool2d", {"x": "bottom_data", "y": "top_data", "indices": "top_mask", "planes": None,
                                         "rows": "height", "cols": "width"},
                              {"window": 3, "stride": 2, "pad": 1, "op": "max"}),
    # vLLM's dynamic per-token int8 quantization: each row's scale written, the tokens only in the launch
    "dynamic_scaled_int8_quant_kernel": ("row_reduction", {"x": "input", "y": "scale", "q": "out", "rows": None,
                                                           "cols": "hidden_size"},
                                         {"op": "absmax", "quantize": "int8", "divide": False}),
    # two outputs of one pass, each a map of the same operands: sin and cos; a bias-GELU keeping its input
    "sincos_kernel": ("elementwise", {"x": "x", "y": "s", "y2": "c", "n": "n"},
                      {"form": "map", "act": "sin", "second": {"form": "map", "act": "cos"}}),
    "bias_gelu_keep_pre": ("elementwise", {"x": "x", "bias": "bias", "y": "pre", "y2": "out", "cols": "cols"},
                           {"form": "bias_act", "act": "identity", "second": {"form": "bias_act", "act": "gelu_tanh"}}),
    # torch.max(dim=1): the values beside the indices
    "row_max_idx": ("row_reduction", {"x": "x", "y": "idx", "values": "vals", "rows": "rows", "cols": "cols"},
                    {"op": "argmax"}),
    # a convolution layer: the taps a buffer, a bias of one value and a ReLU after
    "conv3x3_bias_relu": ("stencil2d", {"x": "x", "y": "y", "taps": "w", "bias": "b", "rows": "h", "cols": "wd"},
                          {"k": 3, "edge": "zero", "act": "relu"}),
    # chains with scales: a residual branch's scale on the activation; a per-column scale on x (NHWC)
    "residual_scaled_gelu": ("elementwise", {"x": "x", "bias": "bias", "res": "res", "alpha": "alpha", "scale_vec": None,
                                             "cols": "cols"},
                             {"form": "bias_act_res", "act": "gelu_tanh", "out_scale": True}),
    "scale_shift_relu_nhwc": ("elementwise", {"x": "x", "bias": "shift", "scale_vec": "scale", "res": None, "alpha": None,
                                              "cols": "channels"}, {"form": "bias_act", "act": "relu"}),
    # a compaction's offsets and count: the whole array's exclusive scan and its sum in one value
    "offsets_and_count": ("scan", {"x": "flags", "y": "offsets", "totals": "count", "n": "n"},
                          {"exclusive": True, "per_row": False}),
    # weights summed by bin (torch.bincount with weights), declared nondeterministic for its float atomics
    "weighted_bincount": ("histogram", {"x": "x", "bins": "out", "weights": "w", "n": "n", "nbins": "bins"},
                          {"index": "direct"}),
    # masks of flags (bytes, bools): -inf where a key is masked, PyTorch's key_padding_mask inverted; a
    # scale the kernel computes, rsqrtf(head_dim), or writes (0.7)
    "masked_softmax_flags": ("row_softmax", {"x": "scores", "y": "probs", "scale": "scale", "bias": "mask",
                                             "bias_group": "H*T"},
                             {"bias_rows": "div", "mask_fill": float("-inf"), "mask_flags": True}),
    "softmax_rsqrt_padding": ("row_softmax", {"x": "scores", "y": "probs", "scale": "head_dim",
                                              "bias": "key_padding_mask", "bias_group": "H*T"},
                              {"scale_rsqrt": True, "bias_rows": "div", "mask_fill": float("-inf"),
                               "mask_flags": True, "mask_invert": True}),
    "softmax_const_scale": ("row_softmax", {"x": "x", "y": "y", "scale": None}, {"scale": float(np.float32(0.7))}),
    # three operands (torch.addcmul); a suffix sum; an embedding times sqrt(d_model)
    "addcmul_kernel": ("elementwise", {"x": "t1", "z": "t2", "res": "x", "alpha": "value"}, {"form": "mul_add"}),
    "reverse_cumsum": ("scan", {"x": "x", "y": "y", "n": "n"}, {"exclusive": False, "per_row": False, "reverse": True}),
    "embedding_scaled": ("gather", {"y": "out", "index": "ids", "table": "table", "rows": "n", "cols": "dim",
                                    "scale": "dim"}, {"scale_sqrt": True}),
    # the first pass of a multi-block scan: each tile of 512 scanned (the last short) and its total written
    "prescan": ("scan", {"x": "g_idata", "y": "g_odata", "totals": "g_blockSums", "n": "n"},
                {"exclusive": True, "per_row": True, "segment": 512}),
    "convolution2D_kernel": ("stencil2d", {"x": "A", "y": "B", "taps": None, "rows": "ni", "cols": "nj"},
                             {"k": 3, "edge": "clear", "taps": [0.2, 0.5, -0.8, -0.3, 0.6, -0.9, 0.4, 0.7, 0.1]}),
    # the rows only in the launch (candle's fast_sum): bound with the count read back from gridDim.x
    "row_sums_grid": ("row_reduction", {"x": "src", "y": "dst", "rows": None, "cols": "cols"}, {"op": "sum"}),
    # cuda-samples' modulate: d_A *= d_B / N, the scale from the int size
    "modulate": ("elementwise", {"y": "d_A", "n": "N", "x": "d_A", "z": "d_B", "alpha": "N"},
                 {"form": "binary_scale", "op": "mul", "divide": True}),
    # rotary embeddings as candle, llm.c and Hugging Face write them: pairs of halves or interleaved, the
    # row's position by a span of rows (candle: T * d in one size) or by period and heads ([B, T, H, d])
    "rope_candle": ("rope", {"x": "src", "y": "dst", "cos": "cos", "sin": "sin", "n": "bh*td", "cols": "d", "span": "td"},
                    {"pairing": "halves", "table": "split", "inverse": False}),
    "rope_i_candle": ("rope", {"x": "src", "y": "dst", "cos": "cos", "sin": "sin", "n": "bh*td", "span": "td"},
                      {"pairing": "interleaved", "table": "split", "inverse": False}),
    "rope_thd_bf16": ("rope", {"x": "src", "y": "dst", "n": "b*t*h*d", "cols": "d", "period": "t", "heads": "h"},
                      {"pairing": "halves", "table": "split"}),
    "rope_llmc": ("rope", {"x": "inp", "y": "out", "cs": "freqs_cis", "n": "B*T*n_head*head_dim", "cols": "head_dim",
                           "period": "T", "heads": "n_head"}, {"pairing": "interleaved", "table": "pairs"}),
    "rope_neox_inplace": ("rope", {"x": "q", "y": "q", "cos": "cos", "sin": "sin", "n": "batch*seq*dim", "cols": "dim",
                                   "span": "seq*dim"}, {"pairing": "halves", "table": "full"}),
    # cross-entropy's gradient through a softmax: llm.c's (added to dlogits, a loss gradient a row) and a
    # mean's (1 / n, fp16, negative targets ignored)
    "llmc_xent_backward": ("onehot_grad", {"y": "dlogits", "x": "probs", "index": "targets", "w": "dlosses",
                                           "rows": "B*T", "cols": "V"}, {"scale": "row", "accumulate": True}),
    "xent_grad_mean_f16": ("onehot_grad", {"y": "grad", "x": "probs", "index": "target", "alpha": "n", "rows": "n",
                                           "cols": "C"}, {"scale": "scalar", "divide": True, "accumulate": False,
                                                          "ignored": "zero"}),
    # by a positions buffer, in place: vLLM's query and key (the first rot_dim values of each head, the token
    # count only in the launch), and GPT-J pairs with cos and sin tables apart
    "vllm_rotary_f16": ("rope", {"y": "query", "y1": "key", "pos": "positions", "cs": "cos_sin_cache", "cols": "head_size",
                                 "rot": "rot_dim", "heads": "num_heads", "heads1": "num_kv_heads"},
                        {"pairing": "halves", "table": "cache", "by": "positions"}),
    "rope_gptj_positions": ("rope", {"y": "x", "pos": "positions", "cos": "cos", "sin": "sin", "cols": "dim", "rot": "dim",
                                     "heads": "heads"}, {"pairing": "interleaved", "table": "split", "by": "positions"}),
    # angles computed in the kernel: (t + offset) * theta^(-2i/d), theta and offset parameters
    "rope_theta": ("rope", {"x": "x", "y": "out", "cols": "dim", "period": "seq", "heads": "heads", "base": "theta",
                            "offset": "pos_offset"}, {"pairing": "halves", "table": "computed"}),
    # a GNN's scatter-sum: rows added where an index names them, indices repeating (float atomics: nondeterministic)
    "scatter_add_rows": ("gather", {"y": "out", "index": "index", "table": "src", "rows": "E", "cols": "F"},
                         {"scatter": True, "add": True}),
    # llm.c's encoder backward: the same rows also summed by position into a second output (dwpe[t])
    "llmc_encoder_backward": ("gather", {"y": "dwte", "index": "inp", "table": "dout", "rows": "B*T", "cols": "C",
                                         "pos": "dwpe", "period": "T"}, {"scatter": True, "add": True}),
    "dot_product": ("reduction", {"x": "a", "y": "c", "n": "n", "w": "b"}, {"op": "sum", "axis": None, "product": "full"}),
    "gemv_rowmajor": ("row_reduction", {"x": "A", "y": "y", "rows": "m", "cols": "n", "w": "x"},
                      {"op": "sum", "product": "cols"}),
    "relu_backward": ("elementwise", {"y": "dx", "n": "n", "x": "x", "z": "dy"}, {"form": "gated", "act": "step"}),
    "llmc_unpermute": ("transpose", {"x": "inp", "y": "out", "outer": "B", "rows": "NH", "mid": None, "cols": "N",
                                     "inner": "d"}, {}),
    "llmc_permute": ("transpose", {"x": "inp", "y": "q", "y1": "k", "y2": "v", "outer": "B", "rows": "N", "mid": None,
                                   "cols": "NH", "inner": "d", "part": "NH*d"}, {"parts": 3}),
    # llm.c's dev/cuda permute: (d1, d2, d3, d4) -> (d4, d3, d1, d2), a middle axis between the swapped groups
    "llmc_permute4d": ("transpose", {"x": "matrix", "y": "out_matrix", "outer": None, "rows": "dim1*dim2", "mid": "dim3",
                                     "cols": "dim4", "inner": None}, {}),
    "batched_transpose": ("transpose", {"x": "in", "y": "out", "outer": "batch", "rows": "rows", "mid": None,
                                        "cols": "cols", "inner": None}, {}),
    "swap_axes_5d": ("transpose", {"x": "x", "y": "y", "outer": "A", "rows": "R", "mid": "M", "cols": "C", "inner": "I"},
                     {}),
    "nchw_to_nhwc": ("transpose", {"x": "x", "y": "y", "outer": "N", "rows": "C", "mid": None, "cols": "H*W",
                                   "inner": None}, {}),
    "scaled_softmax_f16": ("row_softmax", {"x": "x", "y": "out", "rows": "rows", "cols": "cols", "scale": "scale"},
                           {"log": False}),
    "l2_normalize": ("row_norm", {"x": "x", "y": "out", "weight": None, "bias": None, "rows": "rows", "cols": "cols",
                                  "eps": None}, {"norm": "l2", "eps": 1e-12}),
    "row_argmax": ("row_reduction", {"x": "logits", "y": "idx", "rows": "rows", "cols": "vocab"}, {"op": "argmax"}),
    "bmm_f32": ("gemm", {"a": "A", "b": "B", "c": "C", "m": "M", "n": "N", "k": "K", "alpha": None, "beta": None,
                         "bias": None, "batch": "batch"}, {"trans_a": False, "trans_b": False}),
    "attn_scores_f16": ("gemm", {"a": "Q", "b": "K", "c": "S", "m": "T", "n": "T", "k": "D", "alpha": "scale",
                                 "beta": None, "bias": None, "batch": "BH"}, {"trans_a": False, "trans_b": True}),
    "index_copy": ("gather", {"y": "cache", "index": "slot", "table": "kv", "rows": "tokens", "cols": "width"},
                   {"scatter": True}),
    "gelu_backward": ("elementwise", {"y": "dinp", "n": "N", "x": "inp", "z": "dout"},
                      {"form": "gated", "act": "gelu_tanh_grad"}),
    "causal_softmax": ("row_softmax", {"x": "inp", "y": "out", "rows": "N*T", "cols": "T", "scale": "inv_temperature"},
                       {"log": False, "causal": True}),
    "gaussian7x7": ("stencil2d", {"x": "img", "y": "out", "rows": "H", "cols": "W", "taps": None},      # fitted
                    {"k": 7, "edge": "clamp", "taps": [float(v) for v in (lambda g: np.outer(g, g) / np.outer(g, g).sum())(
                        np.exp(-0.5 * (np.arange(-3, 4) / 1.5) ** 2)).reshape(-1)]}),
    "maxpool2x2": ("pool2d", {"x": "in", "y": "out", "planes": "N*C", "rows": "H", "cols": "W"}, {"window": 2, "op": "max"}),
    "avgpool3x3": ("pool2d", {"x": "src", "y": "dst", "planes": None, "rows": "height", "cols": "width"},
                   {"window": 3, "op": "mean"}),
    "absmax_f16": ("reduction", {"x": "x", "y": "amax", "n": "n"}, {"op": "max", "pre": "abs", "axis": None}),
    "row_sumsq": ("row_reduction", {"x": "x", "y": "out", "rows": "rows", "cols": "cols"}, {"op": "sum", "pre": "square"}),
    "gemv_t": ("column_reduction", {"x": "A", "y": "y", "rows": "m", "cols": "n", "w": "x"}, {"op": "sum", "product": "rows"}),
    "int8_quant": ("elementwise", {"y": "out", "n": "n", "x": "input", "alpha": "scale"},
                   {"form": "quantize", "divide": True}),
    "int8_dequant": ("elementwise", {"y": "out", "n": "n", "x": "q", "alpha": "scale"}, {"form": "dequantize"}),
    "silu_and_mul_f16": ("elementwise", {"y": "out", "n": None, "x": "input", "cols": "d"},
                         {"form": "gated_halves", "act": "silu", "act_on": "first"}),
    "linear_f16": ("gemm", {"a": "inp", "b": "weight", "c": "out", "bias": "bias", "m": "B*T", "n": "OC", "k": "C",
                            "alpha": None, "beta": None}, {"trans_a": False, "trans_b": True}),
    # a fused linear layer: the activation after the bias, in the GEMM's epilogue (fp16 on the tensor cores; fp32)
    "linear_bias_relu_f16": ("gemm", {"a": "X", "b": "W", "c": "Y", "bias": "b", "m": "M", "n": "N", "k": "K",
                                      "alpha": None, "beta": None}, {"trans_a": False, "trans_b": False, "act": "relu"}),
    "fc_gelu": ("gemm", {"a": "x", "b": "W", "c": "y", "bias": "b", "m": "M", "n": "N", "k": "K", "alpha": None,
                         "beta": None}, {"trans_a": False, "trans_b": True, "act": "gelu_tanh"}),
    "hgemm_tn_bf16": ("gemm", {"a": "A", "b": "B", "c": "C", "m": "m", "n": "n", "k": "k", "alpha": "alpha",
                               "beta": "beta", "bias": None}, {"trans_a": True, "trans_b": False}),
    "nll_bf16": ("row_pick", {"y": "loss", "index": "target", "table": "logp", "rows": "n", "cols": "classes"},
                 {"act": "neg"}),
    # lr and weight_decay are both 0.01 on every case, eps is a constant: the rerun with telling scalars
    # (and the one of tiny moments) says which is which
    "adamw_torch": ("optimizer_step", {"param": "param", "grad": "grad", "m": "exp_avg", "v": "exp_avg_sq",
                                       "lr": "lr", "beta1": "beta1", "beta2": "beta2", "step": "step",
                                       "weight_decay": "weight_decay", "eps": None, "beta1_correction": None,
                                       "beta2_correction": None, "n": "n"},
                    {"rule": "adamw", "decay": "decoupled", "correction": "step", "eps": 1e-8}),
    # llm.c's adamw_kernel3: a gradient scale, the old parameter read from the fp32 master, the new one also
    # written, rounded, into the bf16 params (a write-only copy); strides and the seed play no part
    "adamw_master": ("optimizer_step", {"param": "master_params_memory", "grad": "grads_memory", "m": "m_memory",
                                        "v": "v_memory", "lr": "learning_rate", "beta1": "beta1", "beta2": "beta2",
                                        "beta1_correction": "beta1_correction", "beta2_correction": "beta2_correction",
                                        "step": None, "eps": "eps", "weight_decay": "weight_decay",
                                        "grad_scale": "grad_scale", "copy": "params_memory", "n": "num_parameters"},
                     {"rule": "adamw", "decay": "decoupled", "correction": "given"}),
    "sgd_momentum": ("optimizer_step", {"param": "param", "grad": "grad", "buf": "momentum_buf", "lr": "lr",
                                        "momentum": "momentum", "dampening": "dampening",
                                        "weight_decay": "weight_decay", "n": "n"},
                     {"rule": "sgd_momentum", "nesterov": False, "decay": "l2"}),
}

#: the wild corpus's kernels of these kinds (bench/wild/NAME/NAME.json) -> (kind, roles, params)
WILD = {
    "llmc_crossentropy": ("row_pick", {"y": "losses", "index": "targets", "table": "probs", "rows": "B*T", "cols": "V"},
                          {"act": "neg_log"}),
    # learning_rate == beta2_correction == 0.001 on every case: the rerun with telling scalars says which is which
    "llmc_adamw": ("optimizer_step", {"param": "params_memory", "grad": "grads_memory", "m": "m_memory",
                                      "v": "v_memory", "lr": "learning_rate", "beta1": "beta1", "beta2": "beta2",
                                      "beta1_correction": "beta1_correction", "beta2_correction": "beta2_correction",
                                      "eps": "eps", "weight_decay": "weight_decay", "step": None,
                                      "n": "num_parameters"},
                   {"rule": "adamw", "decay": "decoupled", "correction": "given"}),
    # cuda-samples' separable convolution: 17 constant taps along each row, and down each column
    "cs_convolution_rows": ("stencil1d", {"x": "d_Src", "y": "d_Dst", "taps": None, "rows": "imageH", "cols": "imageW",
                                          "k": None}, {"k": 17, "edge": "zero", "flip": False}),
    "cs_convolution_cols": ("stencil1d", {"x": "d_Src", "y": "d_Dst", "taps": None, "planes": None, "rows": "imageH",
                                          "cols": "imageW", "k": None}, {"k": 17, "edge": "zero", "flip": False,
                                                                          "axis": "cols"}),
    # llm.c's attention permute: one input split into q, k and v, each a 0213 permute of its part
    "llmc_permute": ("transpose", {"x": "inp", "y": "q", "y1": "k", "y2": "v", "outer": "B", "rows": "N", "mid": None,
                                   "cols": "NH", "inner": "d", "part": "NH*d"}, {"parts": 3}),
    # candle's rope as published (its file includes <stdint.h>), and llm.c's cross-entropy backward
    "candle_rope": ("rope", {"x": "src", "y": "dst", "cos": "cos", "sin": "sin", "n": "bh*td", "cols": "d", "span": "td"},
                    {"pairing": "halves", "table": "split"}),
    "llmc_xent_backward": ("onehot_grad", {"y": "dlogits", "x": "probs", "index": "targets", "w": "dlosses",
                                           "rows": "B*T", "cols": "V"}, {"accumulate": True}),
}
WILD_DIR = ROOT / "bench" / "wild"


@pytest.mark.parametrize("name", sorted(BUNDLED))
def test_every_bundled_task_is_identified_with_its_kind_and_binding(name):
    check_match(identify(load_task(MANIFESTS / f"{name}.json")), *BUNDLED[name])


@pytest.mark.parametrize("name", sorted(PUBLIC))
def test_public_signatures_and_the_new_kinds_are_identified_with_their_binding(name):
    t0 = time.monotonic()
    found = identify(load_task(DATA / f"{name}.json"))
    check_match(found, *PUBLIC[name])
    assert time.monotonic() - t0 < 5.0          # < ~1 s once the reference process is up; a cold start is slower


@pytest.mark.parametrize("name", sorted(WILD))
def test_the_wild_corpus_s_cross_entropy_and_adamw_are_identified_with_their_binding(name):
    found = identify(load_task(WILD_DIR / name / f"{name}.json"))
    check_match(found, *WILD[name])


def test_a_scatter_add_of_floats_asks_for_the_nondeterministic_declaration_its_atomics_need(tmp_path):
    """The gate checks that two launches agree bit for bit; float atomics add in no fixed order, so a
    scatter-add is bound only where the manifest says its results may vary so (as its own atomics need)."""
    task = load_task(copy_task(tmp_path, "scatter_add_rows", lambda d: d.pop("nondeterministic")))
    found = identify(task)
    assert found.match is not None and found.match.params.get("add"), found.why
    with pytest.raises(Unbindable, match='"nondeterministic": true'):
        instantiate(task, found.match)


def test_a_reference_of_no_known_kind_is_nothing_matched_not_an_error():
    found = identify(load_task(DATA / "sort_rows.json"))
    assert found.match is None and "no kind" in found.why
    assert found.line().startswith("kind: nothing matched")


def test_a_reference_that_writes_something_else_leaves_every_hypothesis_unmatched(tmp_path):
    ref = ("def noisy(out, inp, N, C):\n    import numpy as np\n"
           "    out[...] = np.random.default_rng(3).standard_normal(out.shape)\n")
    path = copy_task(tmp_path, "llmc_softmax", lambda d: d.update(reference={"python": "refs.py:noisy"}), ref)
    assert identify(load_task(path)).match is None


def test_the_epsilon_is_read_off_the_reference_when_no_parameter_carries_it(tmp_path):
    ref = ("def ln6(out, mean, rstd, inp, weight, bias, N, C):\n    import numpy as np\n"
           "    x = inp.reshape(N, C).astype(np.float64); m = x.mean(1); v = x.var(1); s = 1 / np.sqrt(v + 1e-6)\n"
           "    out[...] = ((x - m[:, None]) * s[:, None] * weight + bias).reshape(out.shape); mean[...] = m; rstd[...] = s\n")
    path = copy_task(tmp_path, "llmc_layernorm", lambda d: d.update(reference={"python": "refs.py:ln6"}), ref)
    assert identify(load_task(path)).match.params["eps"] == 1e-6


@pytest.mark.parametrize("value", [1.0, 0.0])
def test_a_scale_left_at_a_neutral_value_is_still_bound(tmp_path, value):
    """A softmax of scale * x with the scale at 1 (init's guess) reads as a plain softmax, and one at 0
    as a softmax of zeros: the reference is run again with the scalar at a telling value, which moves
    the outputs, and the search there binds the scale (the bound kernel reads it, as the user's does)."""
    path = copy_task(tmp_path, "scaled_softmax_f16", lambda d: d["args"].update(scale=value))
    found = identify(load_task(path))
    assert found.match.kind == "row_softmax" and found.match.binding["scale"] == "scale", found.match


def test_the_gradient_through_a_log_softmax_is_a_backward_log_softmax_and_a_forward_is_not(tmp_path):
    ref = ("def lsm_back(grad, dstf, dst, ncols, scale):\n    import numpy as np\n"
           "    g = grad.reshape(-1, ncols).astype(np.float64); y = dstf.reshape(-1, ncols).astype(np.float64)\n"
           "    dst[...] = (g - np.exp(y) * g.sum(1, keepdims=True)).reshape(dst.shape)\n")
    path = copy_task(tmp_path, "soft_max_back_f32", lambda d: d.update(reference={"python": "refs.py:lsm_back"}), ref)
    check_match(identify(load_task(path)), "row_softmax", {"x": "dstf", "g": "grad", "y": "dst", "cols": "ncols"},
                {"log": True, "backward": True})
    fwd = ("def fwd(grad, dstf, dst, ncols, scale):\n    import numpy as np\n"
           "    x = grad.reshape(-1, ncols).astype(np.float64); e = np.exp(x - x.max(1, keepdims=True))\n"
           "    dst[...] = (e / e.sum(1, keepdims=True)).reshape(dst.shape)\n")
    path = copy_task(tmp_path, "soft_max_back_f32", lambda d: d.update(reference={"python": "refs.py:fwd"}), fwd)
    assert not identify(load_task(path)).match.params.get("backward")


def test_a_stated_kind_skips_the_guess_and_is_still_checked(tmp_path):
    path = copy_task(tmp_path, "llmc_softmax", lambda d: d.update(kind={"name": "row_softmax", "binding": {"x": "inp"}}))
    found = identify(load_task(path))
    assert found.match.source == "manifest" and found.match.binding["y"] == "out"
    assert "stated by the manifest" in found.line()
    wrong = copy_task(tmp_path, "llmc_softmax", lambda d: d.update(kind={"name": "row_softmax", "params": {"log": True}}))
    with pytest.raises(KindMismatch, match="row_softmax"):
        identify(load_task(wrong))
    plain = copy_task(tmp_path, "llmc_softmax", lambda d: d.update(kind="row_norm"))
    with pytest.raises(KindMismatch):
        identify(load_task(plain))


def test_validate_prints_the_kind_and_refuses_a_wrong_stated_kind_naming_its_json_path(tmp_path):
    from click.testing import CliRunner

    from kernel_forge.app.cli import cli

    res = CliRunner().invoke(cli, ["validate", "--no-compile", str(DATA / "llmc_layernorm.json")])
    assert res.exit_code == 0, res.output
    assert "kind: row_norm (x=inp, y=out, weight=weight, bias=bias, mean=mean, rstd=rstd, rows=N, cols=C" in res.output
    assert "bound patterns: bound_row_norm.cu" in res.output
    res = CliRunner().invoke(cli, ["validate", "--no-compile", str(DATA / "sort_rows.json")])
    assert res.exit_code == 0 and "kind: nothing matched" in res.output
    wrong = copy_task(tmp_path, "llmc_softmax", lambda d: d.update(kind="gather"))
    res = CliRunner().invoke(cli, ["validate", "--no-compile", str(wrong)])
    assert res.exit_code == 2 and "$.kind" in res.output and "Traceback" not in res.output


# -- bound patterns ---------------------------------------------------------------------------------

BINDABLE = ["sgemm_tn", "llmc_layernorm", "llmc_softmax", "blur3x3", "conv5x5", "embedding", "rmsnorm_f16",
            "bias_gelu_residual", "exclusive_scan", "bias_backward", "log_softmax_bf16", "transpose_coalesced",
            "reduce_max", "matmul_forward", "byte_histogram", "hist_mod", "cumsum_rows", "box_rows", "nll_bf16",
            "adamw_torch", "sgd_momentum", "linear_f16", "hgemm_tn_bf16", "swiglu_bf16", "silu_and_mul_f16",
            "fused_add_rmsnorm_f16", "fused_residual_layernorm", "dot_product", "gemv_rowmajor", "relu_backward",
            "llmc_unpermute", "batched_transpose", "swap_axes_5d", "scaled_softmax_f16",
            "l2_normalize", "row_argmax", "bmm_f32", "attn_scores_f16",
            "index_copy", "gelu_backward", "causal_softmax", "gaussian7x7", "maxpool2x2", "avgpool3x3",
            "absmax_f16", "row_sumsq", "gemv_t", "int8_quant", "int8_dequant", "add_channel_bias",
            "batchnorm_relu_nchw", "compact_offsets", "row_cumsum_i64", "gemma_rmsnorm", "sobel_x_reflect101",
            "laplace_periodic", "nchw_to_nhwc", "channel_mean_nchw", "conv_bias_grad", "saxpby", "clamp_range",
            "masked_fill_u8", "cross_entropy_logits", "letter_histogram", "scaled_masked_softmax", "histc_f32",
            "unit_histogram", "seg_softmax_nchw", "column_log_softmax",
            "group_norm_nchw", "instance_norm", "seg_argmax_nchw", "column_cumsum", "upsample_nearest2x",
            "convolution_1D_basic_kernel", "smooth_rows", "correlate_valid", "where_select", "mse_loss",
            "row_l2_norms", "dist_to_center", "vertical_conv", "softmax_temperature", "relu_add", "scale_shift",
            "divide_by", "linear_vec", "gather_dim1", "nll_ignore_index",
            "jacobi_sweep", "heat_step", "vertical_diffuse", "softmax_vector",
            "daxpy", "gelu_f64", "ddot", "dsum", "dgemv", "scale_bias_float4", "silu_half2",
            "int_sum", "row_sums_i32", "histo_kernel", "dtranspose", "column_sums_f64", "column_max_i32",
            "encoder_wpe_max_t", "smooth9_f64", "heat1d_f64", "linear_bias_relu_f16", "fc_gelu", "exp_scale",
            "layernorm_ld", "rms_norm_strided", "softmax_ld", "row_max_ld", "attn_softmax_mask", "attn_softmax_posbias",
            "count_above", "count_nonneg", "int_add", "scale_i64", "xor_u32", "abs_i32", "rmsnorm_offset_first", "rmsnorm_rows_in_grid",
            "llmc_permute", "adamw_master", "fused_residual_bf16", "row_sums_grid", "modulate",
            "rope_candle", "rope_i_candle", "rope_thd_bf16", "rope_llmc", "rope_neox_inplace", "llmc_permute4d",
            "llmc_xent_backward", "xent_grad_mean_f16", "vllm_rotary_f16", "rope_gptj_positions",
            "rope_theta", "scatter_add_rows", "llmc_encoder_backward", "argmax_f32", "reduce_rows_f32", "norm_f32",
            "scanExclusiveShared", "cumsum_kernel", "convolution2D_kernel", "act_and_mul_kernel", "is_u32_f32",
            "mergeHistogram256Kernel", "extract", "pool2d_nchw_kernel", "column_norms", "soft_max_back_f32",
            "generalAddBiasResidualPostLayerNorm", "cuApplyLayerNorm", "prescan", "lookup_kernel", "softmax_kernel",
            "add_fusedQKV_bias_transpose_kernel", "bias_transpose_heads", "max_pool_forward_nchw",
            "dynamic_scaled_int8_quant_kernel", "sincos_kernel", "bias_gelu_keep_pre", "row_max_idx", "conv3x3_bias_relu",
            "residual_scaled_gelu", "scale_shift_relu_nhwc", "offsets_and_count",
            "weighted_bincount", "masked_softmax_flags", "softmax_rsqrt_padding", "softmax_const_scale",
            "addcmul_kernel", "reverse_cumsum", "embedding_scaled"]
_TYPES = {"float": "float", "half": "__half", "bf16": "__nv_bfloat16"}


def _retyped(tmp_path, name: str, ctype: str) -> Path:
    """The manifest with every float buffer of the signature stored as ``ctype``."""
    def edit(d):
        d["signature"] = re.sub(r"\b(float|__half|__nv_bfloat16)\s*\*", ctype + "*", d["signature"])
        d["tolerance"] = {"atol": 3e-2, "rtol": 3e-2}
    return copy_task(tmp_path, name, edit)


def _compiled(task, bound):
    from kernel_forge.gate import preflight
    from kernel_forge.model.candidate import parse_candidate
    from kernel_forge.model.signature import check_matches, find_entry
    from kernel_forge.search.bound import gate_source

    cand = parse_candidate(bound.source, name=bound.label)
    sig, _ = find_entry(bound.source, task.signature.name)
    check_matches(task.signature, sig)
    assert [p.text for p in sig.params] == [p.text for p in task.signature.params]
    preflight.check_kernel(task, cand, file=bound.label)         # static rules, launch on every case
    why = preflight.nvrtc_available()
    if why:
        pytest.skip(why)
    return preflight.compile_kernel(parse_candidate(gate_source(bound.source), name=bound.label), "sm_90",
                                    file=bound.label)


@pytest.mark.parametrize("storage", ["float", "bf16"])
def test_the_column_box_filter_compiles_four_columns_a_load_and_one_for_32_and_16_bit_storage(tmp_path, storage):
    """box_filter_y's VEC = 4 (float4, or 4 x 16-bit in one 8-byte load) and VEC = 1 paths, without
    spills.  (With __half the sample's NumPy reference sums in float16 itself, and the probe reads it
    as a 7-tap stencil with fitted taps instead: a property of that reference, not of the kind.)"""
    from kernel_forge.gate import preflight
    from kernel_forge.model.candidate import parse_candidate
    from kernel_forge.search.bound import gate_source

    src = WILD_DIR / "cs_boxfilter_y" / "cs_boxfilter_y.json"
    raw = json.loads(src.read_text())
    raw["signature"] = raw["signature"].replace("float *", _TYPES[storage] + " *")
    for f in src.parent.iterdir():
        if f != src:
            (tmp_path / f.name).write_bytes(f.read_bytes())
    (tmp_path / src.name).write_text(json.dumps(raw))
    task = load_task(tmp_path / src.name)
    found = identify(task)
    assert found.match is not None, found.why
    [bound] = instantiate(task, found.match)
    assert "kf_box_slide_down<float4>" in bound.source
    why = preflight.nvrtc_available()
    if why:
        pytest.skip(why)
    cand = parse_candidate(gate_source(bound.source), name=bound.label)
    for vec in (4, 1):
        res = preflight.compile_kernel(cand.with_defines({"VEC": vec}), "sm_90", file=bound.label)
        assert res.resources.get("spill_stores", 0) == 0, (vec, res.resources)


def test_a_reduction_that_adds_to_its_output_is_bound_to_add():
    """llm.c's matmul_backward_bias does dbias += the column sums: read as such, and the bound
    pattern adds to dbias instead of overwriting it (host emulation: test_kinds_emulated.py)."""
    task = load_task(ROOT / "bench" / "wild" / "llmc_bias_backward" / "llmc_bias_backward.json")
    found = identify(task)
    check_match(found, "column_reduction", {"x": "dout", "y": "dbias", "rows": "B*T", "cols": "OC"},
           {"op": "sum", "accumulate": True})
    [bound] = instantiate(task, found.match)
    assert "#define KF_ACCUMULATE 1" in bound.source
    plain = identify(load_task(DATA / "bias_backward.json")).match      # the same sum, written over dbias
    assert "accumulate" not in plain.params
    assert "#define KF_ACCUMULATE 0" in instantiate(load_task(DATA / "bias_backward.json"), plain)[0].source


def test_a_sum_per_block_of_values_is_a_row_reduction_over_segments_the_last_one_short():
    """CUDA's classic reduction kernels write one sum per 2 * blockDim values (cuda-samples'
    reduction: g_odata has cdiv(n, 512) values); n need not be a multiple of the segment."""
    task = load_task(ROOT / "bench" / "wild" / "cs_reduction" / "cs_reduction.json")
    found = identify(task)
    check_match(found, "row_reduction", {"x": "g_idata", "y": "g_odata", "n": "n"}, {"op": "sum", "segment": 512})
    [bound] = instantiate(task, found.match)
    assert "// kforge: grid = [cdiv(cdiv((n), 512), RPB), 1, 1]" in bound.source
    assert "kf_row_reduction(g_idata, nullptr, nullptr, g_odata, (((long long)(n)) + 511) / 512, 512LL, ((long long)(n)), 1LL, 512LL)" in bound.source


def test_a_tile_scan_with_its_totals_binds_both_outputs_and_other_totals_match_nothing(tmp_path):
    """The first pass of a multi-block scan: tiles of 512 scanned and each tile's total written.  The
    bound pattern writes the totals from the tiles' carries; a kernel whose second output holds each
    tile's maximum, or a scan over the whole array, is not this kind (the one-tile case alone cannot tell
    a whole scan: it is found there and does not hold on the ragged case)."""
    task = load_task(DATA / "prescan.json")
    [bound] = instantiate(task, identify(task).match)
    assert "#define KF_TOTALS 1" in bound.source and "// kforge: grid = [cdiv(cdiv((n), 512), RPB), 1, 1]" in bound.source
    assert "kf_scan_rows(g_idata, g_odata, (((long long)(n)) + 511) / 512, 512LL, ((long long)(n)), g_blockSums)" \
        in bound.source
    maxima = ("def tile_max(g_odata, g_idata, g_blockSums, n):\n    import numpy as np\n"
              "    prescan_block_sums(g_odata, g_idata, g_blockSums, n)\n    x = np.full(len(g_blockSums) * 512, -np.inf)\n"
              "    x[:int(n)] = g_idata\n    g_blockSums[...] = x.reshape(-1, 512).max(axis=1)\n")
    whole = ("def whole(g_odata, g_idata, g_blockSums, n):\n    import numpy as np\n"
             "    prescan_block_sums(g_odata, g_idata, g_blockSums, n)\n"
             "    g_odata[...] = np.cumsum(g_idata.astype(np.float64)) - g_idata\n")
    for name, ref in (("tile_max", maxima), ("whole", whole)):
        sub = tmp_path / name
        sub.mkdir()
        path = copy_task(sub, "prescan", lambda d, name=name: d.update(reference={"python": f"refs.py:{name}"}), ref)
        found = identify(load_task(path))      # a whole scan is a tile's on one tile: it does not hold on two
        assert found.match is None or found.match.kind != "scan" or "does not hold" in found.why, found.why


def test_a_share_of_a_vocabulary_writes_zeros_outside_it_and_a_clamped_lookup_is_not_one(tmp_path):
    """TensorRT-LLM's lookup: row token - offset where the token is in this GPU's share, zeros
    elsewhere (bound with KF_ZERO_OUTSIDE and the offset passed); a reference that clamps the row
    instead matches no gather."""
    task = load_task(DATA / "lookup_kernel.json")
    [bound] = instantiate(task, identify(task).match)
    assert "#define KF_ZERO_OUTSIDE 1" in bound.source
    assert "((long long)(size)), ((long long)(offset)), 1.0f)" in bound.source
    clamped = ("def clamped(output, input, weight, token_num, offset, size, n_embed):\n    import numpy as np\n"
               "    ids = np.clip(input.astype(np.int64) - int(offset), 0, int(size) - 1)\n"
               "    output[...] = weight.reshape(int(size), -1)[ids].reshape(output.shape)\n")
    path = copy_task(tmp_path, "lookup_kernel", lambda d: d.update(reference={"python": "refs.py:clamped"}), clamped)
    found = identify(load_task(path))
    assert found.match is None or found.match.kind != "gather", found.match.describe()


@pytest.mark.parametrize("fill", [-10000.0, -1e9, float(np.finfo(np.float32).min)])
def test_a_keep_mask_is_added_as_one_minus_it_times_its_fill_and_a_plain_additive_mask_is_not(tmp_path, fill):
    """BERT's (1 - m) * -10000, and the larger fills (-1e9, HF's finfo.min), are read as a keep-mask (any fill
    that far down gives the same probabilities wherever a row sees a key); the same mask added as it is,
    is a plain additive bias (no mask_fill)."""
    ref = ("def filled(qk_buf_, attr_mask, batch_size, head_num, seq_len, scalar):\n    import numpy as np\n"
           "    B, H, T = int(batch_size), int(head_num), int(seq_len)\n"
           f"    m = attr_mask.reshape(B, 1, T, T).astype(np.float64)\n    fill = {fill!r}\n"
           "    a = qk_buf_.reshape(B, H, T, T) * float(scalar) + (m if fill == 0 else (1.0 - m) * fill)\n"
           "    e = np.exp(a - a.max(axis=-1, keepdims=True))\n"
           "    qk_buf_[...] = (e / e.sum(axis=-1, keepdims=True)).reshape(qk_buf_.shape)\n")
    path = copy_task(tmp_path, "softmax_kernel", lambda d: d.update(reference={"python": "refs.py:filled"}), ref)
    task = load_task(path)
    found = identify(task)
    check_match(found, "row_softmax", {"bias": "attr_mask", "bias_group": "seq_len", "bias_heads": "head_num"},
                {"bias_rows": "heads"})
    got = found.match.params["mask_fill"]
    assert got == fill or (fill < -1e4 and got <= -1e4), got
    [bound] = instantiate(task, found.match)
    assert "#define KF_MASK_KEEP 1" in bound.source and f"#define KF_MASK_FILL ({got!r}f)" in bound.source
    plain = tmp_path / "plain"
    plain.mkdir()
    path = copy_task(plain, "softmax_kernel", lambda d: d.update(reference={"python": "refs.py:filled"}),
                     ref.replace(f"fill = {fill!r}", "fill = 0"))
    m = identify(load_task(path)).match
    assert m is not None and m.params.get("bias_rows") == "heads" and "mask_fill" not in m.params, m


def test_a_weighted_histogram_asks_for_the_nondeterministic_declaration_its_float_atomics_need(tmp_path):
    path = copy_task(tmp_path, "weighted_bincount", lambda d: d.pop("nondeterministic"))
    task = load_task(path)
    with pytest.raises(Unbindable, match="nondeterministic"):
        instantiate(task, identify(task).match)


def test_a_gather_plus_a_row_by_position_is_a_gather_with_a_position_table():
    """llm.c's encoder_forward: out[b, t] = wte[inp[b, t]] + wpe[t]."""
    task = load_task(ROOT / "bench" / "wild" / "llmc_encoder" / "llmc_encoder.json")
    found = identify(task)
    check_match(found, "gather", {"y": "out", "index": "inp", "table": "wte", "pos": "wpe", "period": "T", "rows": "B*T",
                             "cols": "C"}, {})
    [bound] = instantiate(task, found.match)
    assert "#define KF_HAS_POS 1" in bound.source and "kf_gather(inp, wte, wpe, out," in bound.source
    plain = identify(load_task(DATA / "embedding.json")).match
    assert "pos" not in plain.binding


def test_a_box_filter_down_the_columns_with_its_radius_a_parameter():
    """cuda-samples' boxFilter y pass: the mean of the 2r+1 pixels of a column, edges clamped."""
    task = load_task(ROOT / "bench" / "wild" / "cs_boxfilter_y" / "cs_boxfilter_y.json")
    found = identify(task)
    check_match(found, "box_filter", {"x": "id", "y": "od", "rows": "h", "cols": "w", "radius": "r"},
           {"axis": "y", "edge": "clamp", "norm": "mean"})
    [bound] = instantiate(task, found.match)
    assert bound.label == "bound_box_filter_y.cu" and "#define KF_EDGE_CLAMP 1" in bound.source


@pytest.mark.parametrize("unroll", [4, 8])
def test_the_box_filter_slide_issues_its_loads_before_its_stores(unroll):
    """One load in flight per thread left the column pass at 61 % of copy bandwidth (H100, 4096 x
    4096): with UNROLL rows a step, the PTX of the slide holds 2 x UNROLL loads, then UNROLL stores."""
    pytest.importorskip("cuda.bindings.nvrtc")
    from kernel_forge.gpu.nvrtc import compile_source

    task = load_task(ROOT / "bench" / "wild" / "cs_boxfilter_y" / "cs_boxfilter_y.json")
    [bound] = instantiate(task, identify(task).match)
    r = compile_source(bound.source, arch="sm_90", defines={"BX": 128, "SEG": 64, "UNROLL": unroll}, file_label="b.cu")
    ptx = r.ptx if isinstance(r.ptx, str) else r.ptx.decode()
    seq = "".join("L" if m.group(1) == "ld" else "S" for m in re.finditer(r"\b(ld|st)\.global", ptx))
    assert "L" * (2 * unroll) + "S" * unroll in seq, seq


def _ptx_sequence(task_path, defines, letters: dict) -> str:
    """The bound pattern's memory instructions in PTX order, one letter each (``letters``: PTX
    opcode -> letter)."""
    pytest.importorskip("cuda.bindings.nvrtc")
    from kernel_forge.gpu.nvrtc import compile_source

    task = load_task(task_path)
    [bound] = instantiate(task, identify(task).match)
    r = compile_source(bound.source, arch="sm_90", defines=defines, file_label="b.cu")
    ptx = r.ptx if isinstance(r.ptx, str) else r.ptx.decode()
    pattern = "|".join(re.escape(op) + r"\b" for op in sorted(letters, key=len, reverse=True))
    return "".join(letters[m.group(0)] for m in re.finditer(pattern, ptx))


@pytest.mark.parametrize("br", [4, 8])
def test_the_transpose_issues_a_thread_s_loads_before_its_first_store_to_the_tile(br):
    """Its rows per thread counted from threadIdx.y were not unrolled: load, shared store, load...
    (a 4096 x 4096 transpose 46.5 us, now 42.9 us on the H100)."""
    seq = _ptx_sequence(WILD_DIR / "cs_transpose" / "cs_transpose.json", {"BR": br, "TY": 1},
                        {"ld.global": "L", "st.shared": "s", "st.global": "S"})
    assert seq.startswith("L" * (32 // br) + "s" * (32 // br)), seq


def test_the_column_reduction_keeps_8_row_loads_and_8_partials_in_flight():
    """The compiler unrolled the plain loops 4 at a time; 4 rows a step (unrolled again) and the
    partials 8 at a time give 8 or more loads before their combines."""
    seq = _ptx_sequence(WILD_DIR / "llmc_bias_backward" / "llmc_bias_backward.json", {"BX": 32, "BY": 8, "SPLIT": 8},
                        {"ld.global": "L", "ld.volatile.global": "V", "st.global": "S"})
    assert "L" * 8 in seq and "V" * 8 in seq, seq


def test_the_box_filter_sums_its_first_window_from_loads_issued_together():
    """UNROLL 8: the window's loads are issued 8 at a time, before the first store (the plain loop,
    which NVRTC unrolled 4 at a time, gave 5 loads there)."""
    seq = _ptx_sequence(WILD_DIR / "cs_boxfilter_y" / "cs_boxfilter_y.json", {"BX": 128, "SEG": 32, "UNROLL": 8},
                        {"ld.global": "L", "st.global": "S"})
    assert "L" * 8 in seq[:seq.index("S")], seq


# -- row picks and optimizer steps ------------------------------------------------------------------

#: references that come close to a row pick or an optimizer step and are neither: nothing may match
NEAR_MISSES = {
    "mse_loss": {   # the mean of (pred - target) cubed; of (pred + target) squared
        "mse_cubed": "def mse_cubed(pred, target, loss, n):\n"
                     "    loss[0] = ((pred.astype(np.float64) - target) ** 3).mean()\n",
        "mse_plus": "def mse_plus(pred, target, loss, n):\n"
                    "    loss[0] = ((pred.astype(np.float64) + target) ** 2).mean()\n",
    },
    "row_l2_norms": {   # the root of each row's sum of absolute values
        "root_l1": "def root_l1(x, norms, rows, cols):\n"
                   "    norms[...] = np.sqrt(np.abs(x.reshape(rows, cols).astype(np.float64)).sum(axis=1))\n",
    },
    "nll_bf16": {   # the column after the target's
        "nll_next_column": "def nll_next_column(logp, target, loss, classes, n):\n"
                           "    lp = logp.reshape(n, classes).astype(np.float64)\n"
                           "    loss[...] = -lp[np.arange(n), (target.reshape(n) + 1) % classes]\n",
        # the target's column of the row after (the table's rows and the losses out of step)
        "nll_next_row": "def nll_next_row(logp, target, loss, classes, n):\n"
                        "    lp = logp.reshape(n, classes).astype(np.float64)\n"
                        "    loss[...] = -lp[(np.arange(n) + 1) % n, target.reshape(n)]\n",
    },
    "adamw_torch": {   # the second moment with beta1
        "adamw_beta1_twice": "def adamw_beta1_twice(exp_avg, exp_avg_sq, param, grad, step, weight_decay, lr, beta1, "
                             "beta2, n):\n"
                             "    g = grad.astype(np.float64); p = param * (1.0 - lr * weight_decay)\n"
                             "    m = beta1 * exp_avg + (1 - beta1) * g; v = beta1 * exp_avg_sq + (1 - beta1) * g * g\n"
                             "    param[...] = p - lr / (1 - beta1 ** step) * m / (np.sqrt(v / (1 - beta2 ** step)) + 1e-8)\n"
                             "    exp_avg[...] = m; exp_avg_sq[...] = v\n",
        # the first moment's weights swapped: (1 - beta1) m + beta1 g
        "adamw_swapped": "def adamw_swapped(exp_avg, exp_avg_sq, param, grad, step, weight_decay, lr, beta1, beta2, n):\n"
                         "    g = grad.astype(np.float64); p = param * (1.0 - lr * weight_decay)\n"
                         "    m = (1 - beta1) * exp_avg + beta1 * g; v = beta2 * exp_avg_sq + (1 - beta2) * g * g\n"
                         "    param[...] = p - lr / (1 - beta1 ** step) * m / (np.sqrt(v / (1 - beta2 ** step)) + 1e-8)\n"
                         "    exp_avg[...] = m; exp_avg_sq[...] = v\n",
        # the bias correction of the first moment only
        "adamw_half_corrected": "def adamw_half_corrected(exp_avg, exp_avg_sq, param, grad, step, weight_decay, lr, beta1, "
                                "beta2, n):\n"
                                "    g = grad.astype(np.float64); p = param * (1.0 - lr * weight_decay)\n"
                                "    m = beta1 * exp_avg + (1 - beta1) * g; v = beta2 * exp_avg_sq + (1 - beta2) * g * g\n"
                                "    param[...] = p - lr / (1 - beta1 ** step) * m / (np.sqrt(v) + 1e-8)\n"
                                "    exp_avg[...] = m; exp_avg_sq[...] = v\n",
    },
    "sgd_momentum": {   # the buffer updated, the parameter stepped along the gradient alone
        "sgd_unused_buffer": "def sgd_unused_buffer(grad, momentum_buf, param, lr, momentum, dampening, weight_decay, n):\n"
                             "    g = grad + weight_decay * param; b = momentum * momentum_buf + (1 - dampening) * g\n"
                             "    param[...] = param - lr * g; momentum_buf[...] = b\n",
    },
}


@pytest.mark.parametrize("name, ref", [(n, r) for n, refs in sorted(NEAR_MISSES.items()) for r in sorted(refs)])
def test_a_reference_that_comes_close_to_a_row_pick_or_an_optimizer_step_matches_nothing(tmp_path, name, ref):
    path = copy_task(tmp_path, name, lambda d: d.update(reference={"python": f"refs.py:{ref}"}), NEAR_MISSES[name][ref])
    found = identify(load_task(path))
    assert found.match is None, found.match.describe()


def test_validate_names_the_kind_and_the_bound_pattern_of_the_corpus_s_cross_entropy_and_adamw():
    from click.testing import CliRunner

    from kernel_forge.app.cli import cli

    for name, line, label in (
            ("llmc_crossentropy", "kind: row_pick (y=losses, index=targets, table=probs, rows=B*T, cols=V; act=neg_log)",
             "bound_row_pick.cu"),
            ("llmc_adamw", "kind: optimizer_step (param=params_memory, grad=grads_memory, m=m_memory, v=v_memory, "
                           "lr=learning_rate, beta1=beta1, beta2=beta2, beta1_correction=beta1_correction, "
                           "beta2_correction=beta2_correction, eps=eps, weight_decay=weight_decay, n=num_parameters; "
                           "rule=adamw, decay=decoupled, correction=given)", "bound_optimizer_adam.cu")):
        res = CliRunner().invoke(cli, ["validate", "--no-compile", str(WILD_DIR / name / f"{name}.json")])
        assert res.exit_code == 0, res.output
        assert line in res.output and f"bound patterns: {label}" in res.output, res.output


def test_a_manifest_may_state_the_new_kinds_and_they_are_checked(tmp_path):
    from click.testing import CliRunner

    from kernel_forge.app.cli import cli

    for name, kind in (("nll_bf16", {"name": "row_pick", "params": {"act": "neg"}}),
                       ("sgd_momentum", {"name": "optimizer_step", "binding": {"lr": "lr", "buf": "momentum_buf"}})):
        res = CliRunner().invoke(cli, ["validate", "--no-compile", str(copy_task(tmp_path, name, lambda d: d.update(kind=kind)))])
        assert res.exit_code == 0 and f"kind: {kind['name']} (" in res.output and "stated by the manifest" in res.output, \
            res.output
    wrong = copy_task(tmp_path, "sgd_momentum", lambda d: d.update(kind={"name": "optimizer_step", "binding": {"lr": "momentum"}}))
    res = CliRunner().invoke(cli, ["validate", "--no-compile", str(wrong)])
    assert res.exit_code == 2 and "$.kind" in res.output


#: the bound patterns of the newer kinds and forms, each on a task that reaches it (fp32 and bf16 storage)
NEW_PATTERNS = [(DATA / "seg_softmax_nchw.json", "bound_softmax_axis.cu"),
                (DATA / "seg_argmax_nchw.json", "bound_argmax_axis.cu"),
                (DATA / "column_cumsum.json", "bound_scan_axis.cu"),
                (DATA / "upsample_nearest2x.json", "bound_upsample_nearest.cu"),
                (DATA / "convolution_1D_basic_kernel.json", "bound_stencil1d.cu"),
                (DATA / "smooth_rows.json", "bound_stencil1d.cu"),
                (DATA / "daxpy.json", "bound_elementwise_f64.cu"),
                (DATA / "ddot.json", "bound_reduction.cu"),
                (DATA / "dgemv.json", "bound_row_reduction.cu"),
                (DATA / "int_sum.json", "bound_reduction.cu"),
                (DATA / "count_above.json", "bound_reduction.cu"),
                (DATA / "int_add.json", "bound_elementwise_int.cu"),
                (DATA / "scale_i64.json", "bound_elementwise_int.cu"),
                (DATA / "row_sums_i32.json", "bound_row_reduction.cu"),
                (DATA / "vertical_conv.json", "bound_stencil1d_cols.cu"),
                (WILD_DIR / "cs_convolution_cols" / "cs_convolution_cols.json", "bound_stencil1d_cols.cu"),
                (WILD_DIR / "cs_convolution_rows" / "cs_convolution_rows.json", "bound_stencil1d.cu"),
                (DATA / "histc_f32.json", "bound_histogram.cu"),
                (WILD_DIR / "llmc_crossentropy" / "llmc_crossentropy.json", "bound_row_pick.cu"),
                (DATA / "nll_bf16.json", "bound_row_pick.cu"),
                (WILD_DIR / "llmc_adamw" / "llmc_adamw.json", "bound_optimizer_adam.cu"),
                (DATA / "adamw_torch.json", "bound_optimizer_adam.cu"),
                (DATA / "sgd_momentum.json", "bound_optimizer_sgd.cu")]


@pytest.mark.slow
@pytest.mark.parametrize("path, label", NEW_PATTERNS, ids=[p.stem for p, _ in NEW_PATTERNS])
def test_the_newer_bound_patterns_compile_at_every_setting_without_spills(path, label):
    """As tests/kernels/test_tuner_templates.py::test_sampled_configurations_compile_without_spills,
    every setting: NVRTC for sm_90, no warning, no spill."""
    pytest.importorskip("cuda.bindings.nvrtc")
    from kernel_forge.gpu.nvrtc import compile_source
    from kernel_forge.model.candidate import parse_candidate

    task = load_task(path)
    [bound] = instantiate(task, identify(task).match)
    assert bound.label == label
    cand = parse_candidate(bound.source, name=bound.label)
    configs = cand.configurations()
    assert len(configs) >= 12
    for d in configs:
        result = compile_source(cand.source, arch="sm_90", defines=d, file_label=bound.label)
        assert result.cubin and "warning" not in result.log.lower(), f"{d}: {result.log}"
        res = result.resources
        assert res.get("spill_stores", 0) + res.get("spill_loads", 0) == 0, f"{d}: {res}"
        for case in task.cases:
            grid, block, _ = cand.launch.resolve({**case.vars, **d})
            assert 1 <= grid[0] < 2 ** 31 and block[0] <= 1024, (d, case.name)


@pytest.mark.parametrize("storage", ["half", "bf16"])
@pytest.mark.parametrize("name", ["adamw_torch", "sgd_momentum"])
def test_optimizer_steps_compile_for_fp16_and_bf16_parameters_and_moments(tmp_path, name, storage):
    task = load_task(_retyped(tmp_path, name, _TYPES[storage]))
    found = identify(task)
    assert found.match is not None, found.why
    [bound] = instantiate(task, found.match)
    assert f"typedef {_TYPES[storage]} kf_param_t;" in bound.source
    assert _compiled(task, bound).resources.get("spill_stores", 0) == 0


@pytest.mark.parametrize("name", BINDABLE)
def test_every_bound_pattern_is_a_complete_kernel_with_the_task_s_own_signature_and_compiles(name):
    task = load_task(DATA / f"{name}.json")
    for bound in instantiate(task, identify(task).match):
        res = _compiled(task, bound)
        assert res.resources.get("spill_stores", 0) == 0, bound.label


@pytest.mark.slow
@pytest.mark.parametrize("storage", sorted(_TYPES))
@pytest.mark.parametrize("name", ["llmc_layernorm", "llmc_softmax", "bias_gelu_residual", "blur3x3", "embedding",
                                  "cumsum_rows", "nll_bf16", "rope_candle", "vllm_rotary_f16", "llmc_xent_backward"])
def test_bound_patterns_compile_for_fp32_fp16_and_bf16_storage(tmp_path, name, storage):
    task = load_task(_retyped(tmp_path, name, _TYPES[storage]))
    found = identify(task)
    assert found.match is not None, found.why
    [bound] = instantiate(task, found.match)
    assert (f"typedef {_TYPES[storage]} kf_y_t;" in bound.source)
    _compiled(task, bound)


def test_the_tuner_gates_a_bound_pattern_at_its_default_setting_before_searching_its_settings(tmp_path):
    from kernel_forge.model.candidate import parse_candidate
    from kernel_forge.proposers.base import Exhausted, ProposalRequest
    from kernel_forge.search.bound import bound_templates, gate_label
    from kernel_forge.search.tuner import TuneProposer

    task = load_task(DATA / "llmc_layernorm.json")
    found = bound_templates(task, [], where=tmp_path)
    [path] = found.templates
    assert any(n.startswith("kind: row_norm") for n in found.notes)
    tuner = TuneProposer([], bound=found.templates)
    [first] = tuner.propose(ProposalRequest(system="", prompt="")).proposals
    pinned = parse_candidate(first.source, name="x")
    assert first.label == gate_label(path) and not pinned.tunables and pinned.defines == {
        "WPR": 1, "RPB": 4, "ITEMS": 8, "STREAM": 1}
    # it passed: the template with its tunables comes next
    [second] = tuner.propose(ProposalRequest(system="", prompt="", spent=[first.label], passed=[first.label])).proposals
    assert second.label == path.name and parse_candidate(second.source, name="y").tunables
    # it failed: the binding is dropped, and with nothing else left the tuner is done
    with pytest.raises(Exhausted):
        tuner.propose(ProposalRequest(system="", prompt="", spent=[first.label]))


def test_a_row_norm_in_place_drops_restrict_from_its_buffers_and_one_that_is_not_keeps_it():
    """vLLM's fused_add_rms_norm writes the norm over its input and the sum over its residual: the
    pattern must not promise the compiler they do not alias; llm.c's layernorm keeps __restrict__."""
    for name, alias in (("fused_add_rmsnorm_f16", 1), ("llmc_layernorm", 0), ("fused_residual_layernorm", 0)):
        task = load_task(DATA / f"{name}.json")
        [bound] = instantiate(task, identify(task).match)
        assert f"#define KF_ALIAS {alias}" in bound.source.splitlines(), name


def test_a_product_whose_rows_only_the_launch_carries_is_named_and_refused_with_the_size_it_lacks():
    """cuda-samples' matrixMul(C, A, B, wA, wB): hA is in the grid, not a parameter.  The kind is
    still named (validate says what it is), and binding it says which size no parameter carries."""
    task = load_task(DATA / "cs_matrixmul.json")
    found = identify(task)
    check_match(found, "gemm", {"a": "A", "b": "B", "c": "C", "m": None, "n": "wB", "k": "wA"},
                {"trans_a": False, "trans_b": False})
    with pytest.raises(Unbindable, match="no kernel parameter carries the m"):
        instantiate(task, found.match)


def test_a_match_that_binds_wins_over_an_earlier_one_that_leaves_a_size_unbound():
    """A row-major gemv's values are also a one-row matrix product whose row count no parameter
    carries (the gemm finder's launch-only rows); identification goes on to the matrix-vector
    product, which binds."""
    from kernel_forge.kinds.linalg import find_gemm
    from kernel_forge.kinds.probe import take

    task = load_task(DATA / "gemv_rowmajor.json")
    unbound = next(find_gemm(take(task)))
    assert unbound.kind == "gemm" and unbound.binding["m"] is None
    check_match(identify(task), "row_reduction", {"x": "A", "y": "y", "rows": "m", "cols": "n", "w": "x"},
                {"product": "cols"})
