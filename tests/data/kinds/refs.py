"""References for the kinds tests: public signatures (llm.c, an image blur, an embedding lookup)
and the new kinds, each written the way its project computes it."""
import math

import numpy as np


def layernorm_forward(out, mean, rstd, inp, weight, bias, N, C):
    x = inp.reshape(N, C).astype(np.float64)
    m = x.mean(axis=1)
    v = ((x - m[:, None]) ** 2).mean(axis=1)
    s = 1.0 / np.sqrt(v + 1e-5)
    out[...] = (((x - m[:, None]) * s[:, None]) * weight + bias).reshape(out.shape)
    mean[...] = m
    rstd[...] = s


def softmax_forward(out, inp, N, C):
    x = inp.reshape(N, C).astype(np.float64)
    e = np.exp(x - x.max(axis=1, keepdims=True))
    out[...] = (e / e.sum(axis=1, keepdims=True)).reshape(out.shape)


def blur3x3(x, y, h, w):
    img = np.pad(x.reshape(h, w).astype(np.float64), 1, mode="edge")
    k = np.array([[1, 2, 1], [2, 4, 2], [1, 2, 1]]) / 16.0
    acc = sum(k[dy, dx] * img[dy:dy + h, dx:dx + w] for dy in range(3) for dx in range(3))
    y[...] = acc.reshape(y.shape)


def conv5x5(img, filt, out, H, W):
    p = np.pad(img.reshape(H, W).astype(np.float64), 2)
    f = filt.reshape(5, 5)
    out[...] = sum(f[i, j] * p[i:i + H, j:j + W] for i in range(5) for j in range(5)).reshape(out.shape)


def embedding(out, idx, table, n, dim):
    out[...] = table.reshape(-1, dim)[idx[:n]].reshape(out.shape)


def rmsnorm_f16(out, inp, weight, rows, dim, eps):
    x = inp.reshape(rows, dim).astype(np.float64)
    r = 1.0 / np.sqrt((x * x).mean(axis=1, keepdims=True) + eps)
    out[...] = (x * r * weight.astype(np.float64)).reshape(out.shape)


def bias_gelu_residual(out, x, bias, res, rows, cols):
    v = x.reshape(rows, cols).astype(np.float64) + bias
    g = 0.5 * v * (1.0 + np.vectorize(math.erf)(v / math.sqrt(2.0)))
    out[...] = (g.reshape(-1) + res.reshape(-1)).reshape(out.shape)


def exclusive_scan(in_, out, n):
    c = np.cumsum(in_.astype(np.float64))
    out[...] = c - in_.reshape(-1)


def bias_backward(dbias, dout, B, T, OC):
    dbias[...] = dout.reshape(B * T, OC).astype(np.float64).sum(axis=0)


def log_softmax_bf16(x, y, rows, cols):
    v = x.reshape(rows, cols).astype(np.float64)
    m = v - v.max(axis=1, keepdims=True)
    y[...] = (m - np.log(np.exp(m).sum(axis=1, keepdims=True))).reshape(y.shape)


def sort_rows(x, y, n):
    """No known kind: a sort."""
    y[...] = np.sort(x)


def transpose_coalesced(odata, idata, width, height):
    """CUDA samples' transposeCoalesced: idata is height x width, odata width x height."""
    odata[...] = idata.reshape(height, width).T.reshape(odata.shape)


def reduce_max(in_, out, n):
    out[...] = np.max(in_.astype(np.float64))


def matmul_forward(out, inp, weight, bias, B, T, C, OC):
    """llm.c matmul_forward: out (B*T, OC) = inp (B*T, C) @ weight (OC, C)^T + bias."""
    x = inp.reshape(B * T, C).astype(np.float64)
    w = weight.reshape(OC, C).astype(np.float64)
    out[...] = (x @ w.T + bias).reshape(out.shape)


def byte_histogram(buffer, size, histo):
    """256 bins of bytes (an image tool's histogram: bins as the manifest's own constant)."""
    histo[...] = np.bincount(np.asarray(buffer[:size], dtype=np.int64), minlength=256)[:256].astype(histo.dtype)


def hist_mod(v, counts, n, nb):
    """Counts of v mod nb into 64-bit bins (negative values wrap, as Python's %)."""
    counts[...] = np.bincount(np.asarray(v[:n], dtype=np.int64) % nb, minlength=nb)[:nb].astype(counts.dtype)


def cumsum_rows(x, y, rows, cols):
    """Inclusive prefix sum of each row (torch.cumsum(x, dim=-1))."""
    y[...] = np.cumsum(x.reshape(rows, cols).astype(np.float64), axis=1).reshape(y.shape)


def box_rows(src, dst, width, height, radius):
    """The sum of the 2*radius+1 pixels of a row around each pixel, zero outside the image."""
    img = np.pad(src.reshape(height, width).astype(np.float64), ((0, 0), (radius, radius)))
    c = np.concatenate([np.zeros((height, 1)), np.cumsum(img, axis=1)], axis=1)
    dst[...] = (c[:, 2 * radius + 1:] - c[:, :width]).reshape(dst.shape)


def sgemm_tn(m, n, k, alpha, A, B, beta, C):
    """cuBLAS-style C = alpha * A^T @ B + beta * C, A stored k x m (its transpose is the m x k operand)."""
    a = A.reshape(k, m).astype(np.float64)
    b = B.reshape(k, n).astype(np.float64)
    C[...] = (alpha * (a.T @ b) + beta * C.reshape(m, n).astype(np.float64)).reshape(C.shape)


def nll_bf16(logp, target, loss, classes, n):
    """A negative log-likelihood from log-probabilities (PyTorch's nll_loss, reduction='none'):
    loss[r] = -logp[r, target[r]], bf16 log-probabilities, 64-bit targets."""
    lp = logp.reshape(n, classes).astype(np.float64)
    loss[...] = -lp[np.arange(n), target.reshape(n)]


def adamw_torch(exp_avg, exp_avg_sq, param, grad, step, weight_decay, lr, beta1, beta2, n):
    """PyTorch's AdamW (a bf16 gradient, fp32 master weights): the decay first, the bias
    corrections from the step count, eps a constant 1e-8."""
    g = grad.astype(np.float64)
    p = param.astype(np.float64) * (1.0 - lr * weight_decay)
    m = beta1 * exp_avg + (1.0 - beta1) * g
    v = beta2 * exp_avg_sq + (1.0 - beta2) * g * g
    denom = np.sqrt(v) / math.sqrt(1.0 - beta2 ** step) + 1e-8
    param[...] = p - (lr / (1.0 - beta1 ** step)) * m / denom
    exp_avg[...] = m
    exp_avg_sq[...] = v


def sgd_momentum(grad, momentum_buf, param, lr, momentum, dampening, weight_decay, n):
    """PyTorch's SGD with momentum, dampening and (L2) weight decay, not Nesterov."""
    p = param.astype(np.float64)
    g = grad.astype(np.float64) + weight_decay * p
    b = momentum * momentum_buf + (1.0 - dampening) * g
    param[...] = p - lr * b
    momentum_buf[...] = b


def linear_f16(out, inp, weight, bias, B, T, C, OC):
    """A linear layer in half precision (PyTorch's F.linear): out (B*T, OC) = inp (B*T, C) @ weight
    (OC, C)^T + bias, fp16 storage."""
    x = inp.reshape(B * T, C).astype(np.float64)
    w = weight.reshape(OC, C).astype(np.float64)
    out[...] = (x @ w.T + bias.astype(np.float64)).reshape(out.shape)


def hgemm_tn_bf16(m, n, k, alpha, A, B, beta, C):
    """cuBLAS-style C = alpha * A^T @ B + beta * C in bf16, A stored k x m."""
    a = A.reshape(k, m).astype(np.float64)
    b = B.reshape(k, n).astype(np.float64)
    C[...] = (alpha * (a.T @ b) + beta * C.reshape(m, n).astype(np.float64)).reshape(C.shape)


def swiglu_bf16(out, gate, up, n):
    """A gated linear unit's activation (LLaMA's SwiGLU): out = silu(gate) * up, bf16 storage."""
    g = gate.astype(np.float64)
    out[...] = g / (1.0 + np.exp(-g)) * up.astype(np.float64)


def silu_and_mul_f16(out, input, d):
    """vLLM's silu_and_mul: silu of each row's first half times its second half, fp16 storage."""
    x = input[:, :d].astype(np.float64)
    out[...] = x / (1.0 + np.exp(-x)) * input[:, d:].astype(np.float64)


def fused_add_rmsnorm_f16(input, residual, weight, epsilon, num_tokens, hidden_size):
    """vLLM's fused_add_rms_norm: the residual becomes input + residual, the input its RMS norm."""
    z = input.astype(np.float64) + residual.astype(np.float64)
    residual[...] = z
    r = 1.0 / np.sqrt((z * z).mean(axis=1, keepdims=True) + epsilon)
    input[...] = z * r * weight.astype(np.float64)


def fused_residual_layernorm(residual, normed, mean, rstd, inp1, inp2, weight, bias, N, C):
    """llm.c's fused_residual_forward: the residual sum, its layernorm, each row's mean and rstd."""
    z = inp1.reshape(N, C).astype(np.float64) + inp2.reshape(N, C).astype(np.float64)
    residual[...] = z.reshape(residual.shape)
    m = z.mean(axis=1)
    s = 1.0 / np.sqrt(((z - m[:, None]) ** 2).mean(axis=1) + 1e-5)
    normed[...] = (((z - m[:, None]) * s[:, None]) * weight + bias).reshape(normed.shape)
    mean[...] = m
    rstd[...] = s


def dot_product(a, b, c, n):
    c[...] = np.sum(a.astype(np.float64) * b.astype(np.float64))


def gemv_rowmajor(y, A, x, m, n):
    y[...] = A.reshape(m, n).astype(np.float64) @ x.astype(np.float64)


def relu_backward(dx, dy, x, n):
    dx[...] = np.where(x > 0, dy, 0.0)


def llmc_unpermute(inp, out, B, N, NH, d):
    out[...] = inp.reshape(B, NH, N, d).transpose(0, 2, 1, 3).reshape(out.shape)


def batched_transpose(out, in_, batch, rows, cols):
    out[...] = in_.reshape(batch, rows, cols).transpose(0, 2, 1).reshape(out.shape)


def swap_axes_5d(y, x, A, R, M, C, I):
    y[...] = np.swapaxes(x.reshape(A, R, M, C, I), 1, 3).reshape(y.shape)


def scaled_softmax_f16(out, x, scale, rows, cols):
    v = x.reshape(rows, cols).astype(np.float64) * scale
    e = np.exp(v - v.max(axis=1, keepdims=True))
    out[...] = (e / e.sum(axis=1, keepdims=True)).reshape(out.shape)


def l2_normalize(out, x, rows, cols):
    v = x.reshape(rows, cols).astype(np.float64)
    out[...] = (v / np.maximum(np.sqrt((v * v).sum(axis=1, keepdims=True)), 1e-12)).reshape(out.shape)


def row_argmax(idx, logits, rows, vocab):
    idx[...] = logits.reshape(rows, vocab).argmax(axis=1)


def attn_scores_f16(S, Q, K, scale, BH, T, D):
    q = Q.reshape(BH, T, D).astype(np.float64)
    k = K.reshape(BH, T, D).astype(np.float64)
    S[...] = (scale * (q @ k.transpose(0, 2, 1))).reshape(S.shape)


def bmm_f32(C, A, B, batch, M, N, K):
    C[...] = (A.reshape(batch, M, K).astype(np.float64) @ B.reshape(batch, K, N)).reshape(C.shape)


def index_copy(cache, kv, slot, tokens, width):
    keep = slot >= 0
    cache[slot[keep]] = kv[keep]


def gelu_backward(dinp, inp, dout, N):
    """llm.c's gelu_backward: the tanh GELU's derivative times the incoming gradient."""
    x = inp.astype(np.float64)
    s = math.sqrt(2.0 / math.pi)
    t = np.tanh(s * (x + 0.044715 * x ** 3))
    sech2 = 1.0 - t * t
    dinp[...] = (0.5 * (1.0 + t) + x * 0.5 * sech2 * s * (1.0 + 3.0 * 0.044715 * x * x)) * dout


def causal_softmax(out, inv_temperature, inp, N, T):
    v = inp.reshape(N, T, T).astype(np.float64) * inv_temperature
    v = np.where(np.arange(T)[None, None, :] > np.arange(T)[None, :, None], -np.inf, v)
    e = np.exp(v - v.max(axis=2, keepdims=True))
    out[...] = (e / e.sum(axis=2, keepdims=True)).reshape(out.shape)


def cs_matrixmul(C, A, B, wA, wB):
    C[...] = A.astype(np.float64) @ B.astype(np.float64)


def gaussian7x7(img, out, H, W):
    """A 7 x 7 Gaussian (sigma 1.5), edges clamped, the weights written into the kernel."""
    g = np.exp(-0.5 * (np.arange(-3, 4) / 1.5) ** 2)
    f = np.outer(g, g) / np.outer(g, g).sum()
    p = np.pad(img.reshape(H, W).astype(np.float64), 3, mode="edge")
    out[...] = sum(f[i, j] * p[i:i + H, j:j + W] for i in range(7) for j in range(7)).reshape(out.shape)


def maxpool2x2(in_, out, N, C, H, W):
    v = in_.reshape(N * C, H, W)[:, :H // 2 * 2, :W // 2 * 2].reshape(N * C, H // 2, 2, W // 2, 2)
    out[...] = v.max(axis=(2, 4)).reshape(out.shape)


def avgpool3x3(dst, src, width, height):
    v = src.reshape(height, width)[:height // 3 * 3, :width // 3 * 3].astype(np.float64)
    dst[...] = v.reshape(height // 3, 3, width // 3, 3).mean(axis=(1, 3)).reshape(dst.shape)


def absmax_f16(amax, x, n):
    amax[...] = np.abs(x.astype(np.float64)).max()


def row_sumsq(out, x, rows, cols):
    v = x.reshape(rows, cols).astype(np.float64)
    out[...] = (v * v).sum(axis=1)


def gemv_t(y, A, x, m, n):
    y[...] = A.reshape(m, n).astype(np.float64).T @ x.astype(np.float64)


def int8_quant(input, out, scale, n):
    out[...] = np.clip(np.rint(input.astype(np.float32) / np.float32(scale[0])), -128, 127)


def int8_dequant(out, q, scale, n):
    out[...] = scale * q.astype(np.float64)


def batchnorm_relu_nchw(x, y, running_mean, running_var, weight, bias, N, C, HW, eps):
    """A conv net's inference batch norm fused with ReLU, NCHW (per-channel statistics broadcast
    along the middle axis), as a hand-written fused kernel computes it."""
    v = x.reshape(N, C, HW).astype(np.float64)
    inv = 1.0 / np.sqrt(running_var.astype(np.float64) + eps)
    o = (v - running_mean[None, :, None]) * inv[None, :, None] * weight[None, :, None] + bias[None, :, None]
    y[...] = np.maximum(o, 0.0).reshape(y.shape)


def add_channel_bias(out, in_, bias, batch, channels, spatial):
    """A convolution's bias added per output channel, NCHW (cuDNN's add-tensor with a 1 x C x 1 x 1 bias)."""
    out[...] = (in_.reshape(batch, channels, spatial).astype(np.float64) + bias[None, :, None]).reshape(out.shape)


def compact_offsets(flags, offsets, n):
    """Stream compaction's write offsets: an exclusive prefix sum of 0/1 flags, in int32."""
    c = np.cumsum(flags.astype(np.int64))
    offsets[...] = (c - flags.reshape(-1)).astype(np.int32)


def row_cumsum_i64(counts, out, rows, cols):
    """A per-row running count of int32 values into int64 (torch.cumsum(dim=1) promotes to int64)."""
    out[...] = np.cumsum(counts.reshape(rows, cols).astype(np.int64), axis=1).reshape(out.shape)


def gemma_rmsnorm(x, w, y, rows, cols, eps):
    """Gemma's RMSNorm: the weight is stored as its difference from one, y = x / rms(x) * (1 + w)."""
    v = x.reshape(rows, cols).astype(np.float64)
    r = 1.0 / np.sqrt((v * v).mean(axis=1, keepdims=True) + eps)
    y[...] = (v * r * (1.0 + w)).reshape(y.shape)


def sobel_x_reflect101(src, dst, rows, cols):
    """OpenCV's Sobel x derivative (3 x 3) with its default border, BORDER_REFLECT_101."""
    p = np.pad(src.reshape(rows, cols).astype(np.float64), 1, mode="reflect")
    gx = (p[:-2, 2:] + 2 * p[1:-1, 2:] + p[2:, 2:]) - (p[:-2, :-2] + 2 * p[1:-1, :-2] + p[2:, :-2])
    dst[...] = gx.reshape(dst.shape)


def laplace_periodic(u, out, ny, nx):
    """One explicit heat-equation step's 5-point Laplacian on a periodic grid."""
    g = u.reshape(ny, nx).astype(np.float64)
    lap = np.roll(g, 1, 0) + np.roll(g, -1, 0) + np.roll(g, 1, 1) + np.roll(g, -1, 1) - 4 * g
    out[...] = lap.reshape(out.shape)


def nchw_to_nhwc(x, y, N, C, H, W):
    """A channels-last conversion (permute 0, 2, 3, 1): C moves past H and W."""
    y[...] = x.reshape(N, C, H, W).transpose(0, 2, 3, 1).reshape(y.shape)


def channel_mean_nchw(x, out, N, C, HW):
    """The mean over the channels of an NCHW tensor at each pixel (a spatial attention map's input)."""
    out[...] = x.reshape(N, C, HW).astype(np.float64).mean(axis=1).reshape(out.shape)


def conv_bias_grad(dout, dbias, N, C, HW):
    """A convolution's bias gradient: the sum of the output gradient over N and H*W per channel."""
    dbias[...] = dout.reshape(N, C, HW).astype(np.float64).sum(axis=(0, 2))


def saxpby(n, alpha, x, beta, y):
    """BLAS-style y = alpha * x + beta * y, in place."""
    y[...] = alpha * x.astype(np.float64) + beta * y.astype(np.float64)


def clamp_range(x, y, n, min_val, max_val):
    """torch.clamp(x, min, max) with both bounds given."""
    y[...] = np.clip(x, min_val, max_val)


def masked_fill_u8(scores, mask, out, n, value):
    """torch.masked_fill with a bool (byte) mask: value where the mask is set, the score elsewhere."""
    out[...] = np.where(mask != 0, value, scores)


def cross_entropy_logits(logits, targets, losses, B, V):
    """F.cross_entropy(logits, targets, reduction='none'): the log-softmax and the pick fused."""
    v = logits.reshape(B, V).astype(np.float64)
    m = v.max(axis=1)
    lse = m + np.log(np.exp(v - m[:, None]).sum(axis=1))
    losses[...] = lse - v[np.arange(B), targets.astype(np.int64)]


def letter_histogram(data, length, histo):
    """PMPP's text histogram: the letters 'a'..'z' counted in bins of four ('a'-'d', ..., 'y'-'z'),
    every other byte skipped."""
    pos = data.astype(np.int64) - ord("a")
    keep = (pos >= 0) & (pos < 26)
    histo[...] = np.bincount(pos[keep] // 4, minlength=7).astype(histo.dtype)


def scaled_masked_softmax(scores, key_mask, probs, rows, keys, scale):
    """Attention probabilities with a key-padding mask added to the scaled scores (one value per key)."""
    v = scores.reshape(rows, keys).astype(np.float64) * scale + key_mask[None, :]
    e = np.exp(v - v.max(axis=1, keepdims=True))
    probs[...] = (e / e.sum(axis=1, keepdims=True)).reshape(probs.shape)


def histc_f32(input, hist, n, nbins, min_val, max_val):
    """torch.histc: nbins equal bins of [min_val, max_val] (max_val itself in the last), values
    outside skipped, the counts as floats (NumPy's histogram counts so, in float64)."""
    hist[...] = np.histogram(np.asarray(input[:n], dtype=np.float64), bins=nbins,
                             range=(float(min_val), float(max_val)))[0].astype(hist.dtype)


def unit_histogram(values, counts, size):
    """Values in [0, 1) counted in 100 equal bins, bin int(v * 100) (values at or past 1 skipped)."""
    b = np.floor(np.asarray(values[:size], dtype=np.float64) * 100).astype(np.int64)
    counts[...] = np.bincount(b[(b >= 0) & (b < 100)], minlength=100)[:100].astype(counts.dtype)


def seg_softmax_nchw(logits, probs, N, C, H, W):
    """torch.softmax(logits, dim=1): each pixel's C class scores."""
    v = np.asarray(logits, dtype=np.float64)
    e = np.exp(v - v.max(axis=1, keepdims=True))
    probs[...] = (e / e.sum(axis=1, keepdims=True)).astype(probs.dtype)


def column_log_softmax(in_, out, rows, cols):
    """torch.log_softmax(x, dim=0): each column's log-probabilities."""
    v = np.asarray(in_, dtype=np.float64)
    m = v - v.max(axis=0, keepdims=True)
    out[...] = (m - np.log(np.exp(m).sum(axis=0, keepdims=True))).astype(out.dtype)


def group_norm_nchw(x, gamma, beta, y, mean, rstd, N, C, HW, G, eps):
    """GroupNorm: each sample's C channels in G groups normed together (biased variance), then
    scaled and shifted per channel; mean and rstd per (sample, group)."""
    v = np.asarray(x, dtype=np.float64).reshape(N, G, -1)
    mu = v.mean(axis=2, keepdims=True)
    r = 1.0 / np.sqrt(v.var(axis=2, keepdims=True) + eps)
    z = ((v - mu) * r).reshape(N, C, HW)
    y[...] = (z * gamma[None, :, None] + beta[None, :, None]).astype(y.dtype)
    mean[...] = mu.reshape(N, G).astype(mean.dtype)
    rstd[...] = r.reshape(N, G).astype(rstd.dtype)


def instance_norm(input, output, weight, bias, N, C, H, W, eps):
    """InstanceNorm2d(affine=True): each (sample, channel) plane normed, then scaled and shifted per channel."""
    v = np.asarray(input, dtype=np.float64).reshape(N, C, H * W)
    z = (v - v.mean(axis=2, keepdims=True)) / np.sqrt(v.var(axis=2, keepdims=True) + eps)
    output[...] = (z * weight[None, :, None] + bias[None, :, None]).reshape(N, C, H, W).astype(output.dtype)


def seg_argmax_nchw(logits, labels, N, C, HW):
    """logits.argmax(dim=1): each pixel's class (the first on ties)."""
    labels[...] = np.asarray(logits).reshape(N, C, HW).argmax(axis=1).astype(labels.dtype)


def column_cumsum(x, y, rows, cols):
    """torch.cumsum(x, dim=0): each column's running sum."""
    y[...] = np.cumsum(np.asarray(x, dtype=np.float64), axis=0).astype(y.dtype)


def upsample_nearest2x(input, output, N, C, H, W):
    """F.interpolate(scale_factor=2, mode='nearest'): each value copied into a 2 x 2 block."""
    output[...] = np.asarray(input).repeat(2, axis=2).repeat(2, axis=3).astype(output.dtype)


def conv1d_pmpp(N, M, P, Mask_Width, Width):
    # PMPP's 1-D convolution: P[i] = sum_j N[i - r + j] * M[j], zero ghost cells
    r = Mask_Width // 2
    x = np.pad(N.astype(np.float64), (r, Mask_Width - 1 - r))
    P[...] = sum(float(M[j]) * x[j:j + Width] for j in range(Mask_Width))


def smooth_rows(src, dst, rows, n):
    # a [1, 2, 1] / 4 filter along each row of a batch of signals, the end samples repeated
    x = np.pad(src.reshape(rows, n).astype(np.float64), ((0, 0), (1, 1)), mode="edge")
    dst[...] = (0.25 * x[:, :-2] + 0.5 * x[:, 1:-1] + 0.25 * x[:, 2:]).reshape(dst.shape)


def correlate_valid(signal, kernel, out, n, k):
    # np.convolve's "valid" mode: the mask reversed, only positions whose window lies inside
    out[...] = np.convolve(signal.astype(np.float64), kernel.astype(np.float64), mode="valid")


def where_select(cond, a, b, out, n):
    # torch.where(cond, a, b) with a bool mask
    assert cond.dtype == np.bool_
    out[...] = np.where(cond, a, b)


def mse_loss(pred, target, loss, n):
    # F.mse_loss(pred, target): the mean of the squared differences
    loss[0] = ((pred.astype(np.float64) - target) ** 2).mean()


def row_l2_norms(x, norms, rows, cols):
    # each row's Euclidean norm (torch.linalg.vector_norm(x, dim=1)), as a cosine similarity needs
    norms[...] = np.sqrt((x.reshape(rows, cols).astype(np.float64) ** 2).sum(axis=1))


def dist_to_center(points, center, dist, n, dim):
    # k-means' assignment step for one centroid: each point's squared distance to it
    dist[...] = ((points.reshape(n, dim).astype(np.float64) - center) ** 2).sum(axis=1)


def vertical_conv(src, taps, dst, planes, height, width, ntaps):
    # a mask of ntaps taps down each column of each plane, the edges reflected (OpenCV's BORDER_REFLECT_101)
    r = ntaps // 2
    x = np.pad(src.reshape(planes, height, width).astype(np.float64), ((0, 0), (r, ntaps - 1 - r), (0, 0)),
               mode="reflect")
    dst[...] = sum(float(taps[j]) * x[:, j:j + height, :] for j in range(ntaps)).reshape(dst.shape)


def softmax_temperature(probs, logits, temperature, rows, vocab):
    # a sampler's softmax of logits / temperature
    v = logits.reshape(rows, vocab).astype(np.float64) / temperature
    e = np.exp(v - v.max(axis=1, keepdims=True))
    probs[...] = (e / e.sum(axis=1, keepdims=True)).reshape(probs.shape)


def relu_add(a, b, out, n):
    # relu(a + b): a residual sum activated
    out[...] = np.maximum(a.astype(np.float64) + b, 0.0)


def scale_shift(x, y, scale, shift, n):
    # y = scale * x + shift with two scalars (a de-normalisation)
    y[...] = scale * x.astype(np.float64) + shift


def divide_by(x, y, divisor, n):
    # y = x / divisor (a mean from a sum, a normalisation by a count)
    y[...] = x.astype(np.float64) / divisor


def linear_vec(W, x, b, y, out_features, in_features):
    # a linear layer on one vector: y = W x + b (torch.nn.functional.linear at batch 1)
    y[...] = W.reshape(out_features, in_features).astype(np.float64) @ x + b


def gather_dim1(src, index, out, rows, cols, k):
    # torch.gather(src, 1, index): k picks from each row of src
    out[...] = np.take_along_axis(src.reshape(rows, cols), index.reshape(rows, k).astype(np.int64), axis=1).reshape(out.shape)


def nll_ignore_index(logp, target, loss, n, classes):
    # F.nll_loss(logp, target, ignore_index=..., reduction='none'): an ignored (negative) target's loss is 0
    lp = logp.reshape(n, classes).astype(np.float64)
    t = target.reshape(n).astype(np.int64)
    loss[...] = np.where(t < 0, 0.0, -lp[np.arange(n), np.where(t < 0, 0, t)])


def jacobi_sweep(u, unew, nx, ny):
    # one Jacobi sweep of Laplace's equation: the interior the mean of its four neighbours, the
    # boundary kept (Dirichlet), as HPC codes write it
    x = u.reshape(ny, nx).astype(np.float64)
    o = x.copy()
    o[1:-1, 1:-1] = 0.25 * (x[:-2, 1:-1] + x[2:, 1:-1] + x[1:-1, :-2] + x[1:-1, 2:])
    unew[...] = o.reshape(unew.shape)


def heat_step(u, unew, n, alpha):
    # an explicit 1-D heat step, u + alpha (u[i-1] - 2 u[i] + u[i+1]), the two end points 0
    x = u.astype(np.float64)
    o = np.zeros_like(x)
    o[1:-1] = x[1:-1] + alpha * (x[:-2] - 2.0 * x[1:-1] + x[2:])
    unew[...] = o


def vertical_diffuse(src, dst, height, width):
    # a 5-point vertical smoothing [1, 4, 6, 4, 1] / 16 down each column, the top and bottom two rows kept
    x = src.reshape(height, width).astype(np.float64)
    o = x.copy()
    t = np.array([1, 4, 6, 4, 1]) / 16.0
    o[2:-2] = sum(t[j] * x[j:j + height - 4] for j in range(5))
    dst[...] = o.reshape(dst.shape)


def softmax_vector(x, y, n):
    # the softmax of one vector (no row count: one row)
    v = x.astype(np.float64)
    e = np.exp(v - v.max())
    y[...] = e / e.sum()


def daxpy(n, a, x, y):
    # BLAS daxpy, in place: y = a x + y in double
    y[...] = a * x + y


def gelu_f64(x, y, n):
    # the tanh GELU of a double vector
    v = x.astype(np.float64)
    y[...] = 0.5 * v * (1.0 + np.tanh(math.sqrt(2.0 / math.pi) * (v + 0.044715 * v ** 3)))


def ddot(n, x, y, result):
    # BLAS ddot: the dot product of two double vectors
    result[0] = float(np.dot(x.astype(np.float64), y.astype(np.float64)))


def dsum(x, out, n):
    # the sum of a double vector
    out[0] = float(x.astype(np.float64).sum())


def dgemv(A, x, y, m, n):
    # BLAS dgemv without scalars: y = A x, A row-major m x n, in double
    y[...] = A.reshape(m, n).astype(np.float64) @ x.astype(np.float64)


def scale_bias_float4(in4, out4, scale, bias, n4):
    # a float4 kernel's elementwise a*x + b: n4 vectors, the lanes a last axis of 4
    out4[...] = scale * in4.astype(np.float64) + bias


def silu_half2(out, inp, n2):
    # SiLU over half2 pairs (n2 pairs)
    v = inp.astype(np.float64)
    out[...] = v / (1.0 + np.exp(-v))


def invert_rgba(src, dst, width, height):
    # an RGBA image's colours inverted, its alpha kept (uchar4 pixels)
    dst[..., :3] = 255 - src[..., :3]
    dst[..., 3] = src[..., 3]


def int_sum(in_, out, n):
    # the sum of an int vector into one int (wrapping as int32 would; the inputs keep it in range)
    out[0] = int(in_.astype(np.int64).sum())


def row_sums_i32(mat, sums, rows, cols):
    # each row's sum of an int32 matrix, in int64
    sums[...] = mat.reshape(rows, cols).astype(np.int64).sum(axis=1)


def histo_kernel(buffer, size, histo):
    # CUDA by Example's byte histogram: 256 counts, added to a zeroed histogram
    histo[...] += np.bincount(buffer.astype(np.int64), minlength=256).astype(histo.dtype)


def dtranspose(A, B, rows, cols):
    # B = A^T in double
    B[...] = A.reshape(rows, cols).T


def column_sums_f64(A, colsum, m, n):
    # each column's sum of a double m x n matrix (a statistics code's column totals)
    colsum[...] = A.reshape(m, n).sum(axis=0)


def column_max_i32(counts, best, rows, cols):
    # each column's largest count of an int32 matrix
    best[...] = counts.reshape(rows, cols).max(axis=0)


def encoder_wpe_max_t(out, inp, wte, wpe, B, T, C):
    # llm.c's encoder: a token's row of wte plus its position's row of wpe, which holds maxT >= T rows
    tok = inp.reshape(B, T)
    out[...] = (wte.reshape(-1, C)[tok] + wpe.reshape(-1, C)[:T][None]).reshape(out.shape)


def smooth9_f64(in_, out, nx, ny):
    # an HPC 9-point smoother in double: the mean of each interior point's 3 x 3 box, the boundary copied
    a = in_.reshape(ny, nx)
    o = a.copy()
    o[1:-1, 1:-1] = sum(a[1 + di:ny - 1 + di, 1 + dj:nx - 1 + dj] for di in (-1, 0, 1) for dj in (-1, 0, 1)) / 9.0
    out[...] = o


def heat1d_f64(u, u_new, n):
    # one explicit step of the 1-D heat equation in double (r = 0.25), the two ends held (Dirichlet)
    u_new[...] = u
    u_new[1:-1] = u[1:-1] + 0.25 * (u[:-2] - 2.0 * u[1:-1] + u[2:])


def linear_bias_relu_f16(X, W, b, Y, M, N, K):
    # a fused linear layer in fp16: relu(X @ W + b), W stored K x N
    r = X.reshape(M, K).astype(np.float64) @ W.reshape(K, N).astype(np.float64) + b.astype(np.float64)
    Y[...] = np.maximum(r, 0.0).reshape(Y.shape)


def fc_gelu(x, W, b, y, M, N, K):
    # a transformer MLP's first layer: gelu_tanh(x @ W^T + b), W stored N x K (nn.Linear's layout)
    v = x.reshape(M, K).astype(np.float64) @ W.reshape(N, K).astype(np.float64).T + b
    y[...] = (0.5 * v * (1.0 + np.tanh(math.sqrt(2.0 / math.pi) * (v + 0.044715 * v ** 3)))).reshape(y.shape)


def exp_scale(y, x, s, n):
    # y = exp(s * x), the scale inside the function (unsigned count, the scalar before it)
    y[...] = np.exp(s * x.astype(np.float64))


def layernorm_ld(y, x, gamma, beta, M, N, ldx, eps):
    # a layernorm of each row's first N values, x's rows ldx apart (a BLAS-style leading dimension)
    v = x.reshape(M, ldx)[:, :N].astype(np.float64)
    m = v.mean(axis=1, keepdims=True)
    var = ((v - m) ** 2).mean(axis=1, keepdims=True)
    y[...] = ((v - m) / np.sqrt(var + eps) * gamma + beta).reshape(y.shape)


def row_max_ld(x, y, rows, cols, ld):
    # each row's largest of its first cols values, rows ld apart
    y[...] = x.reshape(rows, ld)[:, :cols].astype(np.float64).max(axis=1)


def rms_norm_strided(out, input, input_stride, weight, epsilon, num_tokens, hidden_size):
    # vLLM's rms_norm_kernel on a view: each token's hidden_size values, tokens input_stride apart
    v = input.reshape(num_tokens, input_stride)[:, :hidden_size].astype(np.float64)
    r = 1.0 / np.sqrt((v * v).mean(axis=1, keepdims=True) + epsilon)
    out[...] = (v * r * weight.astype(np.float64)).reshape(out.shape)


def softmax_ld(out, inp, N, C, ld):
    # each row's softmax of its first C values, inp's rows ld apart, out packed
    v = inp.reshape(N, ld)[:, :C].astype(np.float64)
    e = np.exp(v - v.max(axis=1, keepdims=True))
    out[...] = (e / e.sum(axis=1, keepdims=True)).reshape(out.shape)


def attn_softmax_mask(att, mask, B, NH, T, scale):
    # BERT-style attention probabilities in place: softmax(scale * scores + mask[b, :]), the mask per batch
    a = att.reshape(B, NH, T, T).astype(np.float64) * scale + mask.reshape(B, 1, 1, T).astype(np.float64)
    e = np.exp(a - a.max(axis=-1, keepdims=True))
    att[...] = (e / e.sum(axis=-1, keepdims=True)).reshape(att.shape)


def attn_softmax_posbias(probs, scores, bias, BH, T):
    # softmax(scores + bias[t, :]): a relative-position bias of T x T added to every (batch, head)'s scores
    a = scores.reshape(BH, T, T).astype(np.float64) + bias.reshape(1, T, T).astype(np.float64)
    e = np.exp(a - a.max(axis=-1, keepdims=True))
    probs[...] = (e / e.sum(axis=-1, keepdims=True)).reshape(probs.shape)


def count_above(x, threshold, count, n):
    # count += (x > threshold), an atomicAdd per passing value into a zeroed int
    count[0] += int(np.count_nonzero(x > np.float32(threshold)))


def count_nonneg(v, total, len):  # noqa: A002 (the kernel names it so)
    # how many values are >= 0 (a constant threshold), written into an unsigned long long
    total[0] = int(np.count_nonzero(v >= 0))


def int_add(a, b, c, n):
    # c = a + b, wrapping as int32 does
    c[...] = (a.astype(np.int64) + b).astype(np.int32)


def scale_i64(x, y, k, count):
    # y = k * x of int64 (wrapping as int64 does)
    y[...] = np.int64(k) * x


def xor_u32(a, b, out, n):
    out[...] = a ^ b


def abs_i32(x, y, n):
    y[...] = np.abs(x)


def rmsnorm_offset_first(input, weight, output, rows, d, weight_bias, eps):
    # y = x / sqrt(mean(x^2) + eps) * (weight_bias + w), the offset before eps in the signature
    x = input.reshape(rows, d).astype(np.float64)
    r = 1.0 / np.sqrt((x * x).mean(axis=1, keepdims=True) + eps)
    output[...] = (x * r * (weight_bias + weight)).reshape(output.shape)


def rmsnorm_rows_in_grid(input, weight, output, d, eps):
    # y = x / sqrt(mean(x^2) + eps) * w, each of the rows the launch's grid holds
    x = input.reshape(-1, d).astype(np.float64)
    r = 1.0 / np.sqrt((x * x).mean(axis=1, keepdims=True) + eps)
    output[...] = (x * r * weight).reshape(output.shape)


def llmc_permute(q, k, v, inp, B, N, NH, d):
    x = inp.reshape(B, N, 3, NH, d)
    for j, out in enumerate((q, k, v)):
        out[...] = x[:, :, j].transpose(0, 2, 1, 3).reshape(out.shape)


def adamw_master(params_memory, master_params_memory, grads_memory, m_memory, v_memory, num_parameters, w_stride,
                 g_stride, s_stride, learning_rate, beta1, beta2, beta1_correction, beta2_correction, eps, weight_decay,
                 grad_scale, seed):
    """llm.c's adamw_kernel3 with a master copy: the old parameter from the fp32 master, the new one
    written to both (the bf16 copy rounded to nearest here; llm.c rounds stochastically)."""
    g = grad_scale * grads_memory.astype(np.float64)
    m = beta1 * m_memory + (1.0 - beta1) * g
    v = beta2 * v_memory + (1.0 - beta2) * g * g
    old = master_params_memory.astype(np.float64)
    p = old - learning_rate * ((m / beta1_correction) / (np.sqrt(v / beta2_correction) + eps) + weight_decay * old)
    m_memory[...] = m
    v_memory[...] = v
    master_params_memory[...] = p
    params_memory[...] = p


def _bf16(a):
    """float32 values rounded to the nearest bfloat16 (ties to even), as float32."""
    bits = np.ascontiguousarray(a, dtype=np.float32).view(np.uint32)
    return ((bits + 0x7FFF + ((bits >> 16) & 1)) & 0xFFFF0000).astype(np.uint32).view(np.float32)


def fused_residual_bf16(residual, normed, mean, rstd, inp1, inp2, weight, bias, N, C):
    """llm.c's fused_residual_forward2 in bf16: the sum rounded to bf16 as the kernel stores it, and
    the layernorm of that stored sum, its output rounded to bf16 too."""
    z = _bf16(inp1.reshape(N, C).astype(np.float32) + inp2.reshape(N, C).astype(np.float32)).astype(np.float64)
    residual[...] = z.reshape(residual.shape)
    m = z.mean(axis=1)
    s = 1.0 / np.sqrt(((z - m[:, None]) ** 2).mean(axis=1) + 1e-5)
    normed[...] = _bf16(((z - m[:, None]) * s[:, None]) * weight + bias).reshape(normed.shape)
    mean[...] = m
    rstd[...] = s


def row_sums_grid(src, dst, cols):
    """Each row's sum; the rows are the launch's (src's shape), no parameter carries them."""
    dst[...] = src.reshape(-1, cols).astype(np.float64).sum(axis=1)


def modulate(d_A, d_B, N):
    """cuda-samples' modulateKernel: d_A *= d_B * (1 / N), in place."""
    d_A[...] = d_A.astype(np.float64) * d_B * (1.0 / N)


def _rope(x, d, pos, c, s, interleaved, full=False):
    """x [rows, d] rotated by the angles of each row's position (c, s: [T, d/2], or [T, d] when full)."""
    x = x.reshape(-1, d).astype(np.float64)
    half = d // 2
    ia = np.arange(half) * 2 if interleaved else np.arange(half)
    ib = ia + 1 if interleaved else ia + half
    c, s = np.asarray(c, np.float64), np.asarray(s, np.float64)
    ca, sa = (c[pos][:, ia], s[pos][:, ia]) if full else (c[pos], s[pos])
    cb, sb = (c[pos][:, ib], s[pos][:, ib]) if full else (ca, sa)
    out = np.empty_like(x)
    out[:, ia] = x[:, ia] * ca - x[:, ib] * sa
    out[:, ib] = x[:, ib] * cb + x[:, ia] * sb
    return out


def rope_candle(src, cos, sin, dst, bh, td, d, stride_b):
    """candle's rope (pairs of halves): src [bh, t, d], cos / sin [t, d/2] shared by every bh."""
    t = td // d
    pos = np.tile(np.arange(t), bh)
    dst[...] = _rope(src, d, pos, cos.reshape(t, d // 2), sin.reshape(t, d // 2), False).reshape(dst.shape)


def rope_i_candle(src, cos, sin, dst, bh, td, stride_b):
    """candle's rope_i (interleaved pairs): src [bh, td], cos / sin [td/2]: pair i of a row takes
    angle i (the row length never needed)."""
    dst[...] = _rope(src, td, np.zeros(bh, np.int64), cos.reshape(1, -1), sin.reshape(1, -1), True).reshape(dst.shape)


def rope_thd_bf16(src, cos, sin, dst, b, t, h, d, stride_b):
    """candle's rope_thd: src [b, t, h, d] (pairs of halves), cos / sin [t, d/2]; the output rounded to bf16."""
    pos = np.repeat(np.tile(np.arange(t), b), h)
    c = cos.reshape(t, d // 2).astype(np.float64)
    s = sin.reshape(t, d // 2).astype(np.float64)
    dst[...] = _bf16(_rope(src.astype(np.float32), d, pos, c, s, False).astype(np.float32)).reshape(dst.shape)


def rope_llmc(out, inp, freqs_cis, B, T, n_head, head_dim):
    """llm.c's rope_forward (llama3): inp [B, T, NH, HS] interleaved pairs, freqs_cis [T, HS/2, 2] of (cos, sin)."""
    pos = np.repeat(np.tile(np.arange(T), B), n_head)
    fc = freqs_cis.reshape(T, head_dim // 2, 2).astype(np.float64)
    out[...] = _rope(inp, head_dim, pos, fc[..., 0], fc[..., 1], True).reshape(out.shape)


def rope_neox_inplace(q, cos, sin, batch, seq, dim):
    """Hugging Face's q * cos + rotate_half(q) * sin, in place in fp16: q [batch, seq, dim], cos / sin [seq, dim]."""
    pos = np.tile(np.arange(seq), batch)
    q[...] = _rope(q.astype(np.float32), dim, pos, cos.reshape(seq, dim), sin.reshape(seq, dim), False,
                   full=True).reshape(q.shape)


def permute_4d(matrix, out_matrix, dim1, dim2, dim3, dim4):
    """llm.c's dev/cuda/permute.cu: (dim1, dim2, dim3, dim4) -> (dim4, dim3, dim1, dim2), as its permute_cpu."""
    m = matrix.reshape(dim1, dim2, dim3, dim4)
    out_matrix[...] = np.transpose(m, (3, 2, 0, 1)).reshape(out_matrix.shape)


def xent_softmax_backward(dlogits, dlosses, probs, targets, B, T, V):
    """llm.c's crossentropy_softmax_backward: dlogits[b, t, i] += (probs[b, t, i] - (i == targets[b, t])) * dlosses[b, t]."""
    p = probs.reshape(B * T, V).astype(np.float64)
    hot = np.zeros_like(p)
    hot[np.arange(B * T), targets.reshape(-1).astype(np.int64)] = 1.0
    d = dlogits.reshape(B * T, V).astype(np.float64) + (p - hot) * dlosses.reshape(B * T, 1)
    dlogits[...] = d.reshape(dlogits.shape)


def xent_grad_mean(probs, target, grad, n, C):
    """A mean cross-entropy's gradient through its softmax, (p - onehot) / n, in fp16; a negative target
    (an ignored position) has no gradient."""
    p = probs.reshape(n, C).astype(np.float64)
    t = target.reshape(-1).astype(np.int64)
    keep = t >= 0
    hot = np.zeros_like(p)
    hot[np.flatnonzero(keep), t[keep]] = 1.0
    g = (p - hot) / n
    g[~keep] = 0.0
    grad[...] = g.reshape(grad.shape)


def _rope_by_position(x, positions, heads, d, rot, c, s, interleaved):
    """x [tokens, heads, d] in place: the first rot values of each head rotated by c, s [tokens, rot/2]."""
    t = positions.size
    v = x.reshape(t, heads, d).astype(np.float64)
    half = rot // 2
    ia = np.arange(half) * 2 if interleaved else np.arange(half)
    ib = ia + 1 if interleaved else ia + half
    a, b = v[:, :, ia].copy(), v[:, :, ib].copy()
    c, s = c[:, None, :], s[:, None, :]
    v[:, :, ia], v[:, :, ib] = a * c - b * s, b * c + a * s
    return v.reshape(x.shape)


def vllm_rotary(positions, query, key, cos_sin_cache, rot_dim, query_stride, key_stride, num_heads, num_kv_heads,
                head_size):
    """vLLM's rotary_embedding_kernel<__half, true> (GPT-NeoX pairs): query and key rotated in place on
    the first rot_dim values of each head, cos then sin from cos_sin_cache[positions[token]]."""
    pos = positions.reshape(-1).astype(np.int64)
    cache = cos_sin_cache.reshape(-1, rot_dim).astype(np.float64)[pos]
    c, s = cache[:, : rot_dim // 2], cache[:, rot_dim // 2:]
    query[...] = _rope_by_position(query.astype(np.float32), pos, num_heads, head_size, rot_dim, c, s, False)
    key[...] = _rope_by_position(key.astype(np.float32), pos, num_kv_heads, head_size, rot_dim, c, s, False)


def gptj_rotary_tokens(positions, x, cos, sin, tokens, heads, dim):
    """GPT-J pairs (2i, 2i+1) of each head of x [tokens, heads, dim] rotated in place, cos / sin
    [max_pos, dim/2] looked up by positions[token]."""
    pos = positions.reshape(-1).astype(np.int64)
    c = cos.reshape(-1, dim // 2).astype(np.float64)[pos]
    s = sin.reshape(-1, dim // 2).astype(np.float64)[pos]
    x[...] = _rope_by_position(x, pos, heads, dim, dim, c, s, True)


def rope_theta(x, out, seq, heads, dim, theta, pos_offset):
    """Angles computed in the kernel, as llama2.c-style ports write them: x [seq, heads, dim] (GPT-NeoX
    halves), angle (t + pos_offset) * theta^(-2i/dim)."""
    t = np.arange(seq) + pos_offset
    inv = float(theta) ** (-2.0 * np.arange(dim // 2) / dim)
    ang = t[:, None] * inv[None, :]
    out[...] = _rope(x, dim, np.repeat(np.arange(seq), heads), np.cos(ang), np.sin(ang), False).reshape(out.shape)


def scatter_add_rows(src, index, out, E, F):
    """A GNN's scatter-sum (torch_scatter's scatter_add along dim 0, index_add_): out[index[e], :] += src[e, :]."""
    o = out.reshape(-1, F).astype(np.float64)
    np.add.at(o, index.reshape(-1).astype(np.int64), src.reshape(E, F).astype(np.float64))
    out[...] = o.reshape(out.shape)


def encoder_backward(dwte, dwpe, dout, inp, B, T, C):
    """llm.c's encoder_backward: dwte[inp[b, t], :] += dout[b, t, :] and dwpe[t, :] += dout[b, t, :]."""
    d = dout.reshape(B * T, C).astype(np.float64)
    wte = dwte.reshape(-1, C).astype(np.float64)
    np.add.at(wte, inp.reshape(-1).astype(np.int64), d)
    dwte[...] = wte.reshape(dwte.shape)
    wpe = dwpe.reshape(T, C).astype(np.float64)
    np.add.at(wpe, np.arange(B * T) % T, d)
    dwpe[...] = wpe.reshape(dwpe.shape)


def ggml_argmax(x, dst, ncols):
    """ggml argmax_f32: for each row of x (nrows x ncols), the column of its maximum, as int32 (ties do not occur with continuous random inputs; ggml's warp reduction does not promise the first index on ties)."""
    dst[...] = np.argmax(x.reshape(-1, ncols), axis=1).astype(np.int32).reshape(dst.shape)


def ggml_cumsum(src, dst, ne00, ne01, ne02, ne03, s00, s01, s02, s03, s0, s1, s2, s3):
    """ggml cumsum (GGML_OP_CUMSUM): inclusive prefix sum along the innermost axis (ne00) of every row of a contiguous [ne03][ne02][ne01][ne00] float tensor (strides given as the contiguous ones, in elements)."""
    a = src.astype(np.float64).reshape(-1, int(ne00))
    dst[...] = np.cumsum(a, axis=1).reshape(dst.shape)


def cs_scan_short(d_Dst, d_Src, size):
    """cs_scan_exclusive_shared: batched exclusive prefix sums of uint32 (wrapping), segments of L elements. d_Src / d_Dst are uint4 buffers: the reference sees them as (B*L/4, 4) uint32 arrays."""
    L = int(size)
    x = d_Src.reshape(-1, L).astype(np.uint64)
    inc = np.cumsum(x, axis=1)
    exc = (inc - x) & np.uint64(0xFFFFFFFF)
    d_Dst[...] = exc.astype(np.uint32).reshape(d_Dst.shape)


# taps[dy + 1][dx + 1] multiplies A[i + dy, j + dx] (c11 c21 c31 / c12 c22 c32 / c13 c23 c33)
POLYBENCH_CONV2D_TAPS = np.array([[0.2, 0.5, -0.8],
                                  [-0.3, 0.6, -0.9],
                                  [0.4, 0.7, 0.10]], dtype=np.float32).astype(np.float64)


def polybench_conv2d(ni, nj, A, B):
    """pb_conv2d: PolyBench 2DCONV, a 3 x 3 stencil with fixed asymmetric taps on the interior of an ni x nj image; the border of B is not written (it keeps B's zeros)."""
    a = A.reshape(ni, nj).astype(np.float64)
    b = B.reshape(ni, nj).astype(np.float64).copy()
    if ni >= 3 and nj >= 3:
        acc = np.zeros((ni - 2, nj - 2))
        for dy in range(3):
            for dx in range(3):
                acc += POLYBENCH_CONV2D_TAPS[dy, dx] * a[dy:dy + ni - 2, dx:dx + nj - 2]
        b[1:-1, 1:-1] = acc
    B[...] = b.reshape(B.shape)


def ggml_norm(x, dst, ncols, stride_row, stride_channel, stride_sample, eps):
    """ggml norm_f32 (ggml_norm): each row of x (nsamples x nchannels x nrows x ncols, row-major) normalised to zero mean and unit variance (population variance E[x^2] - mean^2, no weight or bias), written contiguously to dst."""
    a = x.astype(np.float64).reshape(-1, ncols)
    mean = a.mean(axis=1, keepdims=True)
    var = (a * a).mean(axis=1, keepdims=True) - mean * mean
    dst[...] = ((a - mean) / np.sqrt(var + eps)).reshape(dst.shape)


def ggml_mean(x_ptr, dst_ptr, ncols):
    """ggml mean (reduce_rows_f32<norm=true>): dst[r] = mean of row r of x (nrows x ncols)."""
    dst_ptr[...] = x_ptr.astype(np.float64).reshape(-1, ncols).mean(axis=1).reshape(dst_ptr.shape)


def vllm_gelu_tanh_and_mul(out, input, d):
    """vLLM gelu_tanh_and_mul in bf16: out[t, :] = gelu_tanh(input[t, :d]) * input[t, d:]; the kernel rounds the activation to bf16 before the bf16 product, and so does this."""
    x = input.reshape(-1, 2 * d).astype(np.float32)
    a, b = x[:, :d], x[:, d:]
    beta = np.float32(np.sqrt(2.0) * (2.0 / np.sqrt(np.pi)) * 0.5)
    g = 0.5 * a.astype(np.float64) * (1.0 + np.tanh(beta * (a.astype(np.float64) + 0.044715 * a.astype(np.float64) ** 3)))
    out[...] = (_bf16(g).astype(np.float64) * b).reshape(out.shape)


def candle_index_select(numel, num_dims, info, ids, inp, out, left_size, src_dim_size, ids_dim_size, right_size):
    """candle is_u32_f32 (Tensor::index_select(ids, dim)): inp viewed as (left, src_dim, right), out as (left, ids_dim, right); out[l, i, r] = inp[l, ids[i], r] (0 where ids[i] == u32::MAX). inp is contiguous: info = (numel, 1), its dims and strides seen as one dimension."""
    x = inp.reshape(left_size, src_dim_size, right_size)
    idx = ids.reshape(ids_dim_size).astype(np.int64)
    y = np.zeros((left_size, ids_dim_size, right_size), dtype=inp.dtype)
    ok = idx != 0xFFFFFFFF
    y[:, ok, :] = x[:, idx[ok], :]
    out[...] = y.reshape(out.shape)


def merge_histogram256(d_Histogram, d_PartialHistograms, histogramCount):
    """cs_merge_histogram256: the 256 column sums (uint32, wrapping) of histogramCount partial histograms of 256 bins laid out one after another."""
    p = d_PartialHistograms.reshape(int(histogramCount), 256).astype(np.uint64)
    d_Histogram[...] = (p.sum(axis=0) & np.uint64(0xFFFFFFFF)).astype(np.uint32)


def srad_extract(d_Ne, d_I):
    """rod_srad_extract: Rodinia SRAD's extract, in place: I = exp(I / 255) over Ne pixels."""
    d_I[...] = np.exp(d_I.astype(np.float64) / 255.0)


def ggml_pool2d(ih, iw, oh, ow, kh, kw, sh, sw, ph, pw, parallel_elements, src, dst, op):
    """ggml pool_2d, op = GGML_OP_POOL_AVG (op == 1): src is NC planes of ih x iw; output (oh x ow) cell (y, x) averages the window rows y*sh-ph .. +kh, cols x*sw-pw .. +kw clipped to the image, always dividing by kh*kw (zero padding counted). op == 0 (max) is also written out for completeness."""
    nc = int(parallel_elements) // (oh * ow)
    a = src.reshape(nc, ih, iw).astype(np.float64)
    out = np.empty((nc, oh, ow))
    for y in range(oh):
        y0, y1 = max(0, y * sh - ph), min(ih, y * sh - ph + kh)
        for x in range(ow):
            x0, x1 = max(0, x * sw - pw), min(iw, x * sw - pw + kw)
            win = a[:, y0:y1, x0:x1]
            if int(op) == 1:
                out[:, y, x] = win.sum(axis=(1, 2)) / (kh * kw)
            else:
                out[:, y, x] = win.max(axis=(1, 2))
    dst[...] = out.reshape(dst.shape)


def column_norms(A, norms, m, n):
    """Each column's 2-norm: the square root of its sum of squares."""
    norms[...] = np.sqrt((A.reshape(m, n).astype(np.float64) ** 2).sum(axis=0))


def ggml_soft_max_back(grad, dstf, dst, ncols, scale):
    """ggml soft_max_back_f32: for each row, dst = scale * (grad - dot(dstf, grad)) * dstf, where dstf is the softmax forward output of that row (here a real softmax of random logits, so each row of dstf sums to 1)."""
    g = grad.astype(np.float64).reshape(-1, ncols)
    y = dstf.astype(np.float64).reshape(-1, ncols)
    dot = (g * y).sum(axis=1, keepdims=True)
    dst[...] = (scale * (g - dot) * y).reshape(dst.shape)


def ft_post_layernorm(out, input, bias, gamma, beta, layernorm_eps, m, n):
    """FasterTransformer post-LN: out = LayerNorm(out + input + bias) * gamma + beta, in place on out (biased variance, eps inside the rsqrt)."""
    x = out.reshape(m, n).astype(np.float64) + input.reshape(m, n).astype(np.float64) + bias.astype(np.float64)
    mu = x.mean(axis=1, keepdims=True)
    var = ((x - mu) ** 2).mean(axis=1, keepdims=True)
    y = (x - mu) / np.sqrt(var + layernorm_eps) * gamma.astype(np.float64) + beta.astype(np.float64)
    out[...] = y.reshape(out.shape)


def ort_skip_layernorm(output_vals, mean, inv_std_dev, vals, n1, n2, epsilon, gamma, beta, broadcast_param, skip, bias,
                       skip_input_bias_add_output):
    """ORT SkipLayerNorm via cuApplyLayerNorm (simplified = false, broadcast_param = 0): s = vals + bias + skip per
    row; out = gamma * (s - mean) / sqrt(var + eps) + beta (biased variance); also writes s, mean[row], inv_std_dev[row]."""
    x = vals.reshape(n1, n2).astype(np.float64)
    s = x + bias.reshape(n2).astype(np.float64)[None, :] + skip.reshape(n1, n2).astype(np.float64)
    mu = s.mean(axis=1)
    var = ((s - mu[:, None]) ** 2).mean(axis=1)
    inv = 1.0 / np.sqrt(var + np.float32(epsilon))
    g = gamma.reshape(-1, n2).astype(np.float64)
    b = beta.reshape(-1, n2).astype(np.float64)
    rows = np.arange(n1)
    if broadcast_param == 0:
        gi = np.zeros(n1, dtype=np.int64)
    elif broadcast_param > 0:
        gi = rows // broadcast_param
    else:
        gi = rows % (-broadcast_param)
    out = g[gi] * inv[:, None] * (s - mu[:, None]) + b[gi]
    output_vals.reshape(n1, n2)[...] = out
    skip_input_bias_add_output.reshape(n1, n2)[...] = s
    mean.reshape(n1)[...] = mu
    inv_std_dev.reshape(n1)[...] = inv


def prescan_block_sums(g_odata, g_idata, g_blockSums, n):
    """prescan: an exclusive prefix sum of each tile of 512 values (the last short), and each tile's total."""
    n = int(n)
    tiles = -(-n // 512)
    x = np.zeros(tiles * 512)
    x[:n] = g_idata.astype(np.float64)
    inc = np.cumsum(x.reshape(tiles, 512), axis=1)
    g_odata[...] = (inc.reshape(-1) - x)[:n]
    g_blockSums[...] = inc[:, -1]


def trtllm_lookup(output, input, weight, token_num, offset, size, n_embed):
    """lookup_kernel: rows offset .. offset + size - 1 of a vocabulary; zeros for a token outside them."""
    ids = input.astype(np.int64) - int(offset)
    inside = (ids >= 0) & (ids < int(size))
    rows = weight.reshape(int(size), int(n_embed))[np.clip(ids, 0, int(size) - 1)]
    output[...] = np.where(inside[:, None], rows, 0.0).reshape(output.shape)


def ft_softmax_kernel(qk_buf_, attr_mask, batch_size, head_num, seq_len, scalar):
    """FasterTransformer's softmax_kernel: softmax(scalar * qk + (1 - mask) * -10000), the [B, T, T] mask over the heads."""
    B, H, T = int(batch_size), int(head_num), int(seq_len)
    m = attr_mask.reshape(B, 1, T, T).astype(np.float64)
    a = qk_buf_.reshape(B, H, T, T).astype(np.float64) * float(scalar) + (1.0 - m) * -10000.0
    e = np.exp(a - a.max(axis=-1, keepdims=True))
    qk_buf_[...] = (e / e.sum(axis=-1, keepdims=True)).reshape(qk_buf_.shape)


def ft_fused_qkv_bias_transpose(q_buf, k_buf, v_buf, QKV, qkv_bias, batch_size, seq_len, head_num, size_per_head):
    """add_fusedQKV_bias_transpose_kernel: (QKV + bias) [B, S, 3, N, H] split into q, k, v [B, N, S, H]."""
    B, S, N, H = int(batch_size), int(seq_len), int(head_num), int(size_per_head)
    x = QKV.reshape(B, S, 3, N, H) + qkv_bias.reshape(1, 1, 3, N, H)
    for j, out in enumerate((q_buf, k_buf, v_buf)):
        out[...] = x[:, :, j].transpose(0, 2, 1, 3).reshape(out.shape)


def bias_transpose_heads(input, biases, output, batch, seq, heads, head_size):
    """(input + bias) [B, S, N, H] written as [B, N, S, H]."""
    B, S, N, H = int(batch), int(seq), int(heads), int(head_size)
    x = input.reshape(B, S, N, H) + biases.reshape(1, 1, N, H)
    output[...] = x.transpose(0, 2, 1, 3).reshape(output.shape)


def torch_max_pool_with_indices(nthreads, bottom_data, channels, height, width, pooled_height, pooled_width,
                                kernel_h, kernel_w, stride_h, stride_w, pad_h, pad_w, dilation_h, dilation_w,
                                top_data, top_mask):
    """max_pool_forward_nchw (dilation 1): each window's maximum and its first place in the plane."""
    H, W, PH, PW, K, S, P = (int(v) for v in (height, width, pooled_height, pooled_width, kernel_h, stride_h, pad_h))
    x = bottom_data.reshape(-1, H, W).astype(np.float64)
    vals = np.full((x.shape[0], PH, PW), -np.inf)
    at = np.zeros((x.shape[0], PH, PW), dtype=np.int64)
    for oy in range(PH):
        for ox in range(PW):
            for dy in range(K):
                for dx in range(K):
                    iy, ix = oy * S - P + dy, ox * S - P + dx
                    if 0 <= iy < H and 0 <= ix < W:
                        v = x[:, iy, ix]
                        better = v > vals[:, oy, ox]
                        vals[:, oy, ox] = np.where(better, v, vals[:, oy, ox])
                        at[:, oy, ox] = np.where(better, iy * W + ix, at[:, oy, ox])
    top_data[...] = vals.reshape(top_data.shape)
    top_mask[...] = at.reshape(top_mask.shape)


def vllm_dynamic_int8_quant(input, out, scale, hidden_size):
    """dynamic_scaled_int8_quant_kernel: per token, scale = max |x| / 127 and out = saturate(rint(x * 127 / max |x|))."""
    x = input.reshape(-1, int(hidden_size)).astype(np.float32)
    m = np.abs(x).max(axis=1, keepdims=True)
    scale[...] = (m / np.float32(127.0)).reshape(scale.shape)
    with np.errstate(divide="ignore", invalid="ignore"):
        q = np.where(m > 0, x * (np.float32(127.0) / m), 0.0)
    out[...] = np.clip(np.rint(q), -128, 127).astype(np.int8).reshape(out.shape)


def sincos_pair(x, s, c, n):
    """sincos_kernel: s = sin(x), c = cos(x)."""
    v = x.astype(np.float64)
    s[...] = np.sin(v)
    c[...] = np.cos(v)


def bias_gelu_keep_pre(x, bias, pre, out, rows, cols):
    """bias_gelu_keep_pre: pre = x + bias[col]; out = gelu_tanh(pre)."""
    p = x.reshape(int(rows), int(cols)).astype(np.float64) + bias.astype(np.float64)[None, :]
    pre[...] = p.reshape(pre.shape)
    out[...] = (0.5 * p * (1.0 + np.tanh(np.sqrt(2.0 / np.pi) * (p + 0.044715 * p ** 3)))).reshape(out.shape)


def row_max_idx(x, vals, idx, rows, cols):
    """row_max_idx: each row's largest value and the column of its first occurrence."""
    m = x.reshape(int(rows), int(cols))
    vals[...] = m.max(axis=1)
    idx[...] = m.argmax(axis=1)


def conv3x3_bias_relu(x, y, w, b, h, wd):
    """conv3x3_bias_relu: relu(3 x 3 correlation with zero padding + b)."""
    from numpy.lib.stride_tricks import sliding_window_view
    img = np.pad(x.reshape(int(h), int(wd)).astype(np.float64), 1)
    win = sliding_window_view(img, (3, 3))
    y[...] = np.maximum((win * w.reshape(3, 3)).sum(axis=(-1, -2)) + float(b[0]), 0.0).reshape(y.shape)


def residual_scaled_gelu(x, bias, res, y, rows, cols, alpha):
    """residual_scaled_gelu: res + alpha * gelu_tanh(x + bias[col])."""
    v = x.reshape(int(rows), int(cols)).astype(np.float64) + bias.astype(np.float64)[None, :]
    g = 0.5 * v * (1.0 + np.tanh(np.sqrt(2.0 / np.pi) * (v + 0.044715 * v ** 3)))
    y[...] = (float(alpha) * g + res.reshape(int(rows), int(cols))).reshape(y.shape)


def scale_shift_relu_nhwc(x, scale, shift, y, pixels, channels):
    """scale_shift_relu_nhwc: relu(x * scale[c] + shift[c]), channels last."""
    v = x.reshape(int(pixels), int(channels)).astype(np.float64) * scale[None, :] + shift[None, :]
    y[...] = np.maximum(v, 0.0).reshape(y.shape)


def offsets_and_count(flags, offsets, count, n):
    """offsets_and_count: exclusive prefix sum of the flags, and their total."""
    f = flags.astype(np.int64)
    inc = np.cumsum(f)
    offsets[...] = (inc - f).astype(offsets.dtype)
    count[...] = inc[-1]


def weighted_bincount(x, w, out, n, bins):
    """weighted_bincount: the weights summed by bin."""
    out[...] = np.bincount(x.astype(np.int64), weights=w.astype(np.float64), minlength=int(bins))[:int(bins)]


def _masked_softmax(s, seen):
    a = np.where(seen, s, -np.inf)
    with np.errstate(invalid="ignore"):
        e = np.exp(a - a.max(axis=-1, keepdims=True))
        return e / e.sum(axis=-1, keepdims=True)


def masked_softmax_flags(scores, mask, probs, B, H, T, scale):
    """masked_softmax_flags: softmax(scale * scores) over the keys whose byte flag is nonzero."""
    B, H, T = int(B), int(H), int(T)
    s = scores.reshape(B, H, T, T).astype(np.float64) * float(scale)
    probs[...] = _masked_softmax(s, mask.reshape(B, 1, 1, T) != 0).reshape(probs.shape)


def softmax_rsqrt_padding(scores, key_padding_mask, probs, B, H, T, head_dim):
    """softmax_rsqrt_padding: softmax(scores / sqrt(head_dim)), a true flag masking its key."""
    B, H, T = int(B), int(H), int(T)
    s = scores.reshape(B, H, T, T).astype(np.float64) / np.sqrt(int(head_dim))
    probs[...] = _masked_softmax(s, key_padding_mask.reshape(B, 1, 1, T) == 0).reshape(probs.shape)


def softmax_const_scale(x, y, rows, cols):
    """softmax_const_scale: a row softmax of 0.7 * x."""
    v = x.reshape(int(rows), int(cols)).astype(np.float64) * 0.7
    e = np.exp(v - v.max(axis=1, keepdims=True))
    y[...] = (e / e.sum(axis=1, keepdims=True)).reshape(y.shape)


def addcmul_kernel(x, t1, t2, y, n, value):
    """addcmul_kernel: x + value * t1 * t2."""
    y[...] = x.astype(np.float64) + float(value) * t1.astype(np.float64) * t2


def reverse_cumsum(x, y, n):
    """reverse_cumsum: y[i] = x[i] + ... + x[n - 1]."""
    y[...] = np.cumsum(x.astype(np.float64)[::-1])[::-1]


def embedding_scaled(out, ids, table, n, dim):
    """embedding_scaled: table[ids] * sqrt(dim)."""
    rows = table.reshape(-1, int(dim))[ids.astype(np.int64)].astype(np.float64)
    out[...] = (rows * np.sqrt(int(dim))).reshape(out.shape)
