"""Hypotheses over the rows of a matrix: row norms, row softmax, reductions along an axis, column
reductions and prefix sums.  Each ``find_*`` returns the matches that hold on a probe."""
from __future__ import annotations

import itertools
import math

import numpy as np

from typing import Iterator

from kernel_forge.kinds.match import Match, close, dims, param_for

#: epsilons tried in this order when the signature has none (then read off tiny-variance rows)
EPSILONS = (1e-5, 1e-6, 1e-12, 1e-8, 1e-3, 1e-4, 1e-7, 1e-9, 1e-10, 0.0)


def _pairs(probe):
    """(x, y, rows, cols) for every float output y and float input x of the same size."""
    for y in probe.buffers(output=True, floating=True):
        size = probe.sizes[y]
        for x in probe.inputs_of(size):
            if x == y and not probe.arg(y).in_out:
                continue
            for rows, cols in dims(probe, size):
                if cols > 1:
                    yield x, y, rows, cols


def _scalars(probe, rows: int, cols: int) -> dict:
    """The parameters carrying rows and cols; one row that no parameter counts is the literal "1" (a
    softmax or a norm of one vector)."""
    r = param_for(probe, rows)
    c = param_for(probe, cols, avoid=(r,))
    return {"rows": r if r is not None or rows != 1 else "1", "cols": c}


# ----------------------------------------------------------------------------- row norms

#: the norms of a row: layer (mean and variance), RMS, and L2 (F.normalize: x / max(||x||, eps))
NORMS = ("layer", "rms", "l2")


def _norm(v: np.ndarray, norm: str, eps: float):
    if norm == "l2":
        ss = np.sum(v * v, axis=1, keepdims=True)
        rstd = 1.0 / np.maximum(np.sqrt(ss), eps)
        return v * rstd, np.zeros_like(ss), rstd, ss
    if norm == "rms":
        ms = np.mean(v * v, axis=1, keepdims=True)
        rstd = 1.0 / np.sqrt(ms + eps)
        return v * rstd, np.zeros_like(ms), rstd, ms
    mean = v.mean(axis=1, keepdims=True)
    var = np.mean((v - mean) ** 2, axis=1, keepdims=True)
    rstd = 1.0 / np.sqrt(var + eps)
    return (v - mean) * rstd, mean, rstd, var


def find_row_norm(probe) -> Iterator[Match]:
    """Layer, RMS or L2 norm of each row of ``x`` -- or of ``x + res``, a residual added first (vLLM's
    and FlashInfer's fused_add_rms_norm), with the sum written to an output ``sum`` when one holds
    it (in place of the residual, as those kernels do)."""
    eps_params = list(probe.float_scalars().items())
    for x, y, rows, cols in _pairs(probe):
        for res, total, pre in [(None, None, None), *_residual_adds(probe, x, y, rows, cols)]:
            v = probe.values[x].reshape(rows, cols)
            if total is not None:          # the sum as the reference stored it (rounded to bf16, as llm.c's is)
                v = probe.outputs[total].reshape(rows, cols)
            else:
                v = v + (probe.values[res].reshape(rows, cols) if res is not None else 0.0) + \
                    (probe.values[pre][None, :] if pre is not None else 0.0)
            extras = [o for o in probe.buffers(output=True, floating=True) if o not in (y, total)]
            if any(probe.sizes[o] != rows for o in extras):
                continue
            vecs = [n for n in probe.inputs_of(cols) if n not in (x, y, res, total, pre)]
            got = probe.outputs[y].reshape(rows, cols)
            for norm in NORMS:
                for eps_name, eps in [*eps_params, *((None, e) for e in _epsilons(norm))]:
                    z, mean, rstd, var = _norm(v, norm, eps)
                    hit = _affine(z, got, vecs, probe)
                    if hit is None:
                        continue
                    if eps_name is not None and len(eps_params) > 1 and not _is_the_eps(
                            probe, eps_name, y, v, norm, vecs, hit, res):
                        continue                  # another scalar (a weight offset of 0) that happened to fit
                    roles = _stats(probe, extras, mean, rstd, var, norm)
                    if roles is None:
                        continue
                    if not _normalises(probe, x, res, y, z, rstd, norm, eps, vecs, hit, pre):
                        continue
                    w, b, offset = hit
                    binding = {"x": x, "y": y, "weight": w, "bias": b, **roles, **_scalars(probe, rows, cols),
                               "eps": eps_name}
                    if res is not None or pre is not None:
                        binding.update(res=res, sum=total)
                    if pre is not None:
                        binding["pre_bias"] = pre
                    params = {"norm": norm, **({"weight_offset": 1.0} if offset else {})}
                    if eps_name is None:
                        params["eps"] = _read_eps(probe, x, y, binding, norm, eps, cols)
                    yield Match("row_norm", binding, params)
                    break
    yield from _group_norms(probe, eps_params)


def _normalises(probe, x: str, res, y: str, z: np.ndarray, rstd: np.ndarray, norm: str, eps: float, vecs, hit,
                pre=None) -> bool:
    """Whether a norm that held really divides by the rows' scale: where every row's scale is within
    5 % of one (an RMS of random normal values is ~1: ``y = a * b`` reads as an RMS norm of one row
    weighted by b), the reference runs again on x (and res) times 2.5 -- a norm's output stays, a
    map's scales.  True when the scales tell already, or the reference cannot be rerun."""
    from kernel_forge.common.errors import KForgeError

    if norm == "l2" or not np.all(np.abs(rstd - 1.0) < 0.05):
        return True
    changes = {n: probe.values[n] * 2.5 for n in (x, res) if n is not None}
    try:
        out = probe.rerun(changes)[y].reshape(z.shape)
    except (KForgeError, ValueError, KeyError):
        return True
    v = sum(probe.stored(n, changes[n]) for n in changes).reshape(z.shape)      # as the reference saw them
    if pre is not None:
        v = v + probe.values[pre][None, :]
    return _affine(_norm(v, norm, eps)[0], out, vecs, probe) == hit


def _is_the_eps(probe, name: str, y: str, v: np.ndarray, norm: str, vecs, hit, res) -> bool:
    """Whether scalar ``name`` acts as the epsilon: with it set to 0.5 the reference's rows are the
    same norm at epsilon 0.5, with the same weight and bias (FlashInfer's RMSNorm passes a weight
    offset, 0, before its eps)."""
    from kernel_forge.common.errors import KForgeError

    try:
        out = probe.rerun({}, scalars={name: 0.5})[y].reshape(v.shape)
    except (KForgeError, ValueError, KeyError):
        return True                           # no second run: the fit stands
    z, *_ = _norm(v, norm, 0.5)
    return _affine(z, out, vecs, probe) == hit


def _group_norms(probe, eps_params) -> Iterator[Match]:
    """A group norm of x's declared N x C x inner (GroupNorm: ``groups`` a parameter dividing C; an
    InstanceNorm: each channel its own group), weight and bias per channel, mean / rstd / var outputs
    one per (sample, group).  A row of the norm is a sample's group: C / groups channels of inner values."""
    for y in probe.buffers(output=True, floating=True):
        size = probe.sizes[y]
        for x in probe.inputs_of(size):
            if x == y and not probe.arg(y).in_out:
                continue
            for outer, channels, inner in _middle_axes(probe, x):
                c_name = param_for(probe, channels)
                groups = [(n, g) for n, g in probe.int_scalars().items()
                          if 1 < g < channels and channels % g == 0 and n != c_name]
                for g_name, g in [*groups, (c_name, channels)]:
                    rows, cols = outer * g, channels // g * inner
                    extras = [o for o in probe.buffers(output=True, floating=True) if o != y]
                    if g_name is None or any(probe.sizes[o] != rows for o in extras):
                        continue
                    chan = (np.arange(rows)[:, None] % g) * (channels // g) + np.arange(cols)[None, :] // inner
                    v = probe.values[x].reshape(rows, cols)
                    vecs = [n for n in probe.inputs_of(channels) if n not in (x, y)]
                    got = probe.outputs[y].reshape(rows, cols)
                    for eps_name, eps in [*eps_params, *((None, e) for e in EPSILONS)]:
                        z, mean, rstd, var = _norm(v, "layer", eps)
                        hit = _affine(z, got, vecs, probe, chan)
                        roles = _stats(probe, extras, mean, rstd, var, "layer") if hit else None
                        if roles is None:
                            continue
                        inner_p = param_for(probe, inner, avoid=(c_name, g_name))
                        binding = {"x": x, "y": y, "weight": hit[0], "bias": hit[1], **roles, "eps": eps_name,
                                   "outer": param_for(probe, outer, avoid=(c_name, g_name, inner_p)),
                                   "groups": g_name, "channels": c_name, "inner": inner_p}
                        params = {"norm": "layer", "group": True, **({"weight_offset": 1.0} if hit[2] else {})}
                        if eps_name is None:
                            params["eps"] = _read_eps(probe, x, y, binding, "layer", eps, cols, chan)
                        yield Match("row_norm", binding, params)
                        break


def _residual_adds(probe, x, y, rows: int, cols: int) -> Iterator[tuple[str | None, str | None, str | None]]:
    """(res, sum, pre_bias) for every other input ``res`` of ``x``'s size, with no bias, then with each
    vector of a row's length added too (BERT's post-LN ``LN(x + res + bias[col])``: FasterTransformer,
    ONNX Runtime's SkipLayerNorm), and for each such vector alone (``LN(x + bias[col])``); ``sum``
    the output that holds what is normed (None: none holds it, it is only normed)."""
    size = rows * cols

    def held(want):
        sums = [o for o in probe.buffers(output=True, floating=True)
                if o != y and probe.sizes[o] == size and close(probe.outputs[o], want.reshape(-1))]
        return sums[0] if sums else None

    others = [r for r in probe.inputs_of(size) if r != x]
    pres = [b for b in probe.inputs_of(cols) if b not in (x, y) and cols > 1 and rows > 1]
    for res in others:
        yield res, held(probe.values[x] + probe.values[res]), None
    for res in [*others, None]:
        for pre in pres:
            if pre == res:
                continue
            want = probe.values[x].reshape(rows, cols) + probe.values[pre][None, :] + \
                (probe.values[res].reshape(rows, cols) if res is not None else 0.0)
            yield res, held(want), pre


def _affine(z, got, vecs, probe, chan=None):
    """(weight, bias, offset) with got == z * (offset + weight) + bias, or None: names (None: absent),
    offset 1 for a weight stored as its difference from one (Gemma's RMSNorm), else 0.  ``chan``: the
    vectors' index of each value (a group norm's channels), else the column."""
    def vec(name):
        return probe.values[name][chan] if chan is not None else probe.values[name][None, :]

    for w in [None, *vecs]:
        for offset in ((0.0, 1.0) if w else (0.0,)):
            zw = z * (offset + vec(w) if w else 1.0)
            for b in [None, *vecs]:
                if b is not None and b == w:
                    continue
                pred = zw + (vec(b) if b else 0.0)
                if close(got, pred):
                    return w, b, offset
    return None


def _epsilons(norm: str) -> tuple:
    """The epsilons tried for ``norm`` (F.normalize's 1e-12 first for L2)."""
    return (1e-12, *(e for e in EPSILONS if e != 1e-12)) if norm == "l2" else EPSILONS


#: the statistics a norm has no output for (an RMS norm has no mean; an L2 norm no mean or variance)
_NO_STAT = {"layer": (), "rms": ("mean",), "l2": ("mean", "var")}


def _stats(probe, extras, mean, rstd, var, norm):
    roles = {"mean": None, "rstd": None, "var": None}
    for o in extras:
        got = probe.outputs[o]
        for role, want in (("mean", mean), ("rstd", rstd), ("var", var)):
            if role in _NO_STAT[norm]:
                continue
            if roles[role] is None and close(got, want.reshape(-1)):
                roles[role] = o
                break
        else:
            return None
    return roles


def _read_eps(probe, x, y, binding, norm, guess, cols, chan=None) -> float:
    """The epsilon, read off rows scaled to a variance near the epsilons tried (the guess when
    the reference cannot be run again); ``chan`` as for :func:`_affine`."""
    from kernel_forge.common.errors import KForgeError

    v = probe.values[x]
    scaled = (v - v.mean()) * 1e-3
    changes = {x: scaled}
    if binding.get("res"):                   # the residual added before the norm: zero, so x's rows are what is normed
        changes[binding["res"]] = np.zeros(probe.sizes[binding["res"]])
    try:
        out = probe.rerun(changes)
    except (KForgeError, ValueError):
        return guess
    vs = scaled.reshape(-1, cols)
    yv = out[y].reshape(-1, cols)
    best, err = guess, None
    for eps in _epsilons(norm):
        z, *_ = _norm(vs, norm, eps)
        for role in ("weight", "bias"):
            if binding[role]:
                vec = probe.values[binding[role]]
                vec = vec[chan] if chan is not None else vec[None, :]
                z = z * vec if role == "weight" else z + vec
        e = float(np.max(np.abs(z - yv)))
        if err is None or e < err:
            best, err = eps, e
    return best


# ----------------------------------------------------------------------------- softmax

def find_row_softmax(probe) -> Iterator[Match]:
    """Softmax or log-softmax of each row, of x or of ``scale * x`` with a float parameter's scale
    (attention's 1 / sqrt(d)), plus an additive mask or bias of one value per column; also causal:
    rows in blocks of ``cols`` (T x T scores), row r seeing columns up to r % cols, the others 0
    (-inf for log-softmax)."""
    base_scales = _softmax_scales(probe)
    for x, y, rows, cols in _pairs(probe):
        if len(probe.buffers(output=True)) != 1:
            continue
        scales = base_scales + _fitted_scales(probe, x, y, rows, cols, base_scales)
        masks = [None]
        if rows % cols == 0:
            masks.append(np.arange(cols)[None, :] > (np.arange(rows) % cols)[:, None])
        biases = _softmax_biases(probe, x, y, rows, cols)
        plain = [(m, (None, None, None, None), {}) for m in masks]
        for scale, sv, div in scales:
            for mask, (bias, brows, group, heads), fill in plain + [(None, b, f) for b in biases
                                                                   for f in _mask_forms(probe, b[0])]:
                if mask is None and bias is None and scale is not None and sv == 1.0:
                    continue
                v = probe.values[x].reshape(rows, cols) * sv
                if bias is not None:
                    b = _mask_values(probe.values[bias].reshape(-1, cols).astype(np.float64), fill)
                    with np.errstate(invalid="ignore"):
                        v = v + b[_bias_rows(rows, brows, group, heads)]
                if mask is not None:
                    v = np.where(mask, -np.inf, v)
                m = v - v.max(axis=1, keepdims=True)
                with np.errstate(divide="ignore"):
                    lse = np.log(np.exp(m).sum(axis=1, keepdims=True))
                for log, pred in ((False, np.exp(m - lse)), (True, m - lse)):
                    if _close_with_infs(probe.outputs[y], pred.reshape(-1)):
                        binding = {"x": x, "y": y, **_scalars(probe, rows, cols)}
                        if scale:
                            binding["scale"] = scale
                        if bias:
                            binding["bias"] = bias
                        if brows:
                            binding["bias_group"] = param_for(probe, group)
                        if heads:
                            binding["bias_heads"] = param_for(probe, heads)
                        params = {"log": log, **({"causal": True} if mask is not None else {}), **div,
                                  **({"bias_rows": brows} if brows else {}), **fill}
                        yield Match("row_softmax", binding, params)
    yield from _axis_softmaxes(probe, base_scales)
    yield from _cross_entropies(probe, base_scales)
    yield from _softmax_backwards(probe)


def _softmax_backwards(probe) -> Iterator[Match]:
    """The gradient through a softmax of each row: dx = scale * p * (g - sum(p * g)), p the softmax's
    output and g the gradient of it (llm.c's and ggml's softmax backward, PyTorch's
    ``_softmax_backward_data``); through a log-softmax, p its output: dx = scale * (g - exp(p) * sum(g)).
    The scale a float parameter or 1."""
    outs = probe.buffers(output=True)
    if len(outs) != 1 or not probe.arg(outs[0]).param.dtype.is_float:
        return
    y = outs[0]
    n = probe.sizes[y]
    ins = [b for b in probe.inputs_of(n) if b != y]
    scales = [(None, 1.0), *probe.float_scalars().items()]
    for p, g in itertools.permutations(ins, 2):
        for rows, cols in dims(probe, n):
            if cols < 2:
                continue
            P, G = probe.values[p].reshape(rows, cols), probe.values[g].reshape(rows, cols)
            with np.errstate(all="ignore"):
                preds = ((False, P * (G - (P * G).sum(axis=1, keepdims=True))),
                         (True, G - np.exp(P) * G.sum(axis=1, keepdims=True)))
            for log, base in preds:
                for scale, sv in scales:
                    if close(probe.outputs[y], (sv * base).reshape(-1)):
                        binding = {"x": p, "g": g, "y": y, **_scalars(probe, rows, cols)}
                        if scale:
                            binding["scale"] = scale
                        yield Match("row_softmax", binding, {"log": log, "backward": True})


#: how a float bias may be a keep-mask m (1 where a key is seen): None (added as it is), or (1 - m) * fill --
#: BERT's -10000 (FasterTransformer, the original BERT), -1e9, and float32's lowest (HF's finfo.min)
MASK_FILLS = (None, -10000.0, -1e9, float(np.finfo(np.float32).min))
#: an integer or boolean mask's fills where it masks a key (``masked_fill(mask == 0, -inf)`` first)
FLAG_FILLS = (-np.inf, -10000.0, -1e9, float(np.finfo(np.float32).min))


def _mask_forms(probe, bias: str) -> list[dict]:
    """The params a softmax's bias may be read with: a float bias as it is or as a keep-mask times a fill
    (``mask_fill``); an integer or boolean mask as flags, 0 where a key is seen and the fill where it
    is masked -- a key seen where the flag is nonzero, or (``mask_invert``, PyTorch's key_padding_mask)
    where it is zero."""
    if probe.arg(bias).param.dtype.is_float:
        return [{} if f is None else {"mask_fill": f} for f in MASK_FILLS]
    return [{"mask_fill": f, "mask_flags": True, **({"mask_invert": True} if inv else {})}
            for f in FLAG_FILLS for inv in (False, True)]


def _mask_values(b: np.ndarray, form: dict) -> np.ndarray:
    """What a softmax adds for bias values ``b`` read as ``form`` (:func:`_mask_forms`)."""
    if not form:
        return b
    if form.get("mask_flags"):
        seen = (b != 0) != bool(form.get("mask_invert"))
        return np.where(seen, 0.0, form["mask_fill"])
    return (1.0 - b) * form["mask_fill"]


def _bias_rows(rows: int, mode: str | None, group: int | None, heads: int | None) -> np.ndarray:
    """The bias row each of the softmax's rows adds (see :func:`_softmax_biases`)."""
    r = np.arange(rows)
    if mode == "div":
        return r // group
    if mode == "mod":
        return r % group
    if mode == "heads":
        return r % group + r // (heads * group) * group
    return np.zeros(rows, dtype=np.int64)


def _softmax_biases(probe, x, y, rows, cols) -> list[tuple[str, str | None, int | None, int | None]]:
    """Additive masks a softmax's rows may add, (buffer, how its rows map, group, heads): one value per
    column (None: every row adds the one row); a matrix of k rows broadcast, row r adding row r / (rows / k)
    ("div": a key-padding mask per batch over its heads and queries, HF BERT's) or row r % k ("mod": a
    mask per position over the batches), the group a parameter's value; or a [B, 1, Tq, Tk] mask over
    each batch's heads ("heads": scores [B, H, Tq, Tk], row r adding row r % Tq + r / (H * Tq) * Tq, as
    FasterTransformer's softmax reads its attention mask), Tq a parameter's value."""
    out = []
    for b in probe.inputs_of(floating=None):       # an integer or boolean input: a mask of flags
        if b in (x, y) or probe.sizes[b] % cols:
            continue
        k = probe.sizes[b] // cols
        if k == 1:
            out.append((b, None, None, None))
        elif 1 < k < rows and rows % k == 0:
            out += [(b, mode, group, None) for mode, group in (("div", rows // k), ("mod", k))
                    if param_for(probe, group) is not None]
            heads = rows // k
            if param_for(probe, heads) is None:
                continue
            for q in sorted({v for v in probe.int_scalars().values() if 1 < v < k and k % v == 0}):
                out.append((b, "heads", q, heads))
    return out


def _fitted_scales(probe, x, y, rows, cols, tried) -> list[tuple[str | None, float, dict]]:
    """A scale the kernel computes itself, read off the reference's softmax: the slope of each row's
    log-probabilities against its values, over the keys it sees (a mask of flags adds 0 there) --
    one over the square root of an integer parameter (``rsqrtf(head_dim)``: the parameter bound,
    ``scale_rsqrt``), else the constant as written (``scale``).  None where the slope is 1 or a
    parameter's scale already."""
    got = probe.outputs[y].reshape(rows, cols)
    with np.errstate(all="ignore"):
        logp = np.log(got) if np.all(got >= 0) else got          # a log-softmax's output is its own log
    v = probe.values[x].reshape(rows, cols).astype(np.float64)
    seen = np.isfinite(logp) & (got != 0 if np.all(got >= 0) else True)
    if seen.sum() < 2 * rows:
        return []
    n = seen.sum(axis=1, keepdims=True)
    if np.any(n == 0):
        return []
    lc = np.where(seen, logp - np.where(seen, logp, 0).sum(axis=1, keepdims=True) / n, 0.0)
    vc = np.where(seen, v - np.where(seen, v, 0).sum(axis=1, keepdims=True) / n, 0.0)
    den = float((vc * vc).sum())
    if den == 0.0:
        return []
    c = float((lc * vc).sum()) / den
    if not np.isfinite(c) or c <= 0 or any(abs(c - sv) <= 1e-4 * abs(sv) for _, sv, _ in tried):
        return []
    for name, value in probe.int_scalars().items():
        if value > 0 and abs(c * math.sqrt(value) - 1.0) <= 1e-4:
            return [(name, 1.0 / math.sqrt(value), {"scale_rsqrt": True})]
    c = float(np.float32(c))
    return [(None, c, {"scale": c})]


def _softmax_scales(probe) -> list[tuple[str | None, float, dict]]:
    """(parameter, the factor x is scaled by, the match's extra params): none, each float parameter as
    a factor (attention's 1 / sqrt(d) passed as it is), and as a divisor (a temperature: x / T)."""
    floats = [(n, v) for n, v in probe.float_scalars().items() if v]
    return [(None, 1.0, {}), *((n, v, {}) for n, v in floats), *((n, 1.0 / v, {"divide": True}) for n, v in floats
                                                                   if v != 1.0)]


def _axis_softmaxes(probe, scales) -> Iterator[Match]:
    """Softmax or log-softmax over an axis that is not the last, of x or ``scale * x``: the middle
    axis of N x C x HW (``softmax(x, dim=1)`` of a segmentation map) or the first of a matrix (a
    column softmax).  Bound as ``dim="middle"``: ``outer`` softmaxes (None: one) of ``axis`` values
    ``inner`` apart."""
    if len(probe.buffers(output=True)) != 1:
        return
    for y in probe.buffers(output=True, floating=True):
        size = probe.sizes[y]
        for x in probe.inputs_of(size):
            if x == y and not probe.arg(y).in_out:
                continue
            for outer, mid, inner in _axis_splits(probe, x, size):
                v = probe.values[x].reshape(outer, mid, inner)
                for scale, sv, div in scales:
                    m = v * sv - (v * sv).max(axis=1, keepdims=True)
                    lse = np.log(np.exp(m).sum(axis=1, keepdims=True))
                    for log, pred in ((False, np.exp(m - lse)), (True, m - lse)):
                        if not close(probe.outputs[y], pred.reshape(-1)):
                            continue
                        binding = {"x": x, "y": y, **_axis_roles(probe, outer, mid, inner)}
                        if scale:
                            binding["scale"] = scale
                        yield Match("row_softmax", binding, {"log": log, "dim": "middle", **div})


def _cross_entropies(probe, scales) -> Iterator[Match]:
    """A cross-entropy from logits, one loss per row: y[r] = logsumexp(s x[r]) - s x[r, index[r]]
    (``F.cross_entropy(..., reduction='none')``; the log-softmax and the pick fused)."""
    outs = probe.buffers(output=True)
    if len(outs) != 1 or not probe.arg(outs[0]).param.dtype.is_float:
        return
    y = outs[0]
    rows = probe.sizes[y]
    for idx in probe.inputs_of(rows, floating=False):
        t = probe.values[idx].astype(np.int64)
        for x in probe.inputs_of():
            if probe.sizes[x] % rows or probe.sizes[x] == rows:
                continue
            cols = probe.sizes[x] // rows
            if t.min() < 0 or t.max() >= cols:
                continue
            for scale, sv, div in scales:
                v = probe.values[x].reshape(rows, cols).astype(np.float64) * sv
                m = v.max(axis=1)
                lse = m + np.log(np.exp(v - m[:, None]).sum(axis=1))
                if close(probe.outputs[y], lse - v[np.arange(rows), t]):
                    binding = {"x": x, "y": y, "index": idx, **_scalars(probe, rows, cols)}
                    if scale:
                        binding["scale"] = scale
                    yield Match("row_softmax", binding, {"log": True, "xent": True, **div})
    return


def _close_with_infs(got, want) -> bool:
    """close(), where ``want``'s infinite and NaN values (a masked log-softmax's -inf; a row whose every key
    is masked) must be met exactly."""
    inf = ~np.isfinite(want)
    if not inf.any():
        return close(got, want)
    return bool(np.array_equal(got[inf], want[inf], equal_nan=True)) and close(got[~inf], want[~inf])


# ----------------------------------------------------------------------------- reductions

_REDUCE = {"sum": np.sum, "max": np.max, "min": np.min, "mean": np.mean}


def find_reductions(probe) -> Iterator[Match]:
    """Row reductions (out[r] = op over a row), column reductions (out[c] = op over a column:
    a bias gradient) and whole reductions (one value)."""
    outs = probe.buffers(output=True, floating=True)
    if len(probe.buffers(output=True)) == 2:
        yield from _row_quantizations(probe)
        yield from _max_with_index(probe)
    if len(probe.buffers(output=True)) != 1:
        return
    if not outs:
        yield from _int_reductions(probe, probe.buffers(output=True)[0])
        yield from _arg_reductions(probe, probe.buffers(output=True)[0])
        yield from _predicate_counts(probe, probe.buffers(output=True)[0])
        return
    y = outs[0]
    n_out = probe.sizes[y]
    got = probe.outputs[y]
    # an output that starts from values may be added to (llm.c's dbias += ...): the reduction is then got - before
    forms = [(False, got)] + ([(True, got - probe.values[y])] if probe.arg(y).in_out else [])
    adds = _adds_to_start(probe, y) if probe.arg(y).in_out else None
    if adds is not None:               # the rerun said which: a small start would fit either form
        forms = [f for f in forms if f[0] == adds]
    for x in probe.inputs_of():
        size = probe.sizes[x]
        if size <= n_out:
            continue
        v = probe.values[x]
        for accumulate, want in forms:
            extra = {"accumulate": True} if accumulate else {}
            if n_out == 1:
                for op, fn in _REDUCE.items():
                    if close(want, np.array([fn(v)]), rtol=5e-3) and not _really_absmax(probe, x, y, op, None):
                        yield Match("reduction", {"x": x, "y": y, "n": param_for(probe, size)},
                                    {"op": op, "axis": None, **extra})
                continue
            for rows, cols in dims(probe, size):
                m = v.reshape(rows, cols)
                for axis, kind, n in ((1, "row_reduction", rows), (0, "column_reduction", cols)):
                    if n != n_out:
                        continue
                    for op, fn in _REDUCE.items():
                        if close(want, fn(m, axis=axis), rtol=5e-3) and not _really_absmax(probe, x, y, op, axis, cols):
                            yield Match(kind, {"x": x, "y": y, **_scalars(probe, rows, cols)}, {"op": op, **extra})
            for outer, mid, inner in _middle_axes(probe, x):
                m = v.reshape(outer, mid, inner)
                for op, fn in _REDUCE.items():
                    if outer * inner == n_out and close(want, fn(m, axis=1).reshape(-1), rtol=5e-3):
                        # over the middle axis (the mean over C of NCHW): a batch of column reductions
                        yield Match("column_reduction", {"x": x, "y": y, **_scalars(probe, mid, inner),
                                                         "batch": param_for(probe, outer)}, {"op": op, **extra})
                    if mid == n_out and close(want, fn(m, axis=(0, 2)), rtol=5e-3):
                        # over all but the middle axis (a conv's bias gradient): rows in outer runs
                        yield Match("row_reduction", {"x": x, "y": y, **_scalars(probe, mid, inner),
                                                      "outer": param_for(probe, outer)}, {"op": op, **extra})
            tried = {rc for rc in dims(probe, size) if rc[0] == n_out}
            for seg in _segments(size, n_out, tried):   # a sum per segment of a constant length, the last one short
                padded = np.zeros(n_out * seg)
                padded[:size] = v
                if close(want, padded.reshape(n_out, seg).sum(axis=1), rtol=5e-3) and _segments_hold(probe, x, y, seg):
                    yield Match("row_reduction", {"x": x, "y": y, "n": param_for(probe, size)},
                                {"op": "sum", "segment": seg, **extra})
    yield from _product_sums(probe, y, forms)
    yield from _mapped_reductions(probe, y, forms)


def _segments_hold(probe, x: str, y: str, seg: int) -> bool:
    """Whether every case of the task declares one output value per ``seg`` values of x (the last
    short): cuda-samples' reduce6 writes a sum per block of its grid, which matches a sum per 512
    values only while the grid covers x once -- on a larger case the output holds fewer sums."""
    task = probe.task
    for case in task.cases:
        n = math.prod(task.shape(task.arg(x), case))
        if math.prod(task.shape(task.arg(y), case)) != -(-n // seg):
            return False
    return True


def _adds_to_start(probe, y) -> bool | None:
    """Whether the reference adds to ``y``'s starting values (``out[0] += sum(x * x)``) rather than
    overwriting them: run again with ``y`` starting higher by half its largest output (at least 1),
    an addition moves the output by that much and an overwrite not at all.  A start that is small
    next to the result fits either form within close()'s tolerance, so the forms are not told apart
    by the values alone.  None when the reference cannot be rerun."""
    from kernel_forge.common.errors import KForgeError

    got = probe.outputs[y]
    shift = max(1.0, 0.5 * float(np.max(np.abs(got))) if got.size else 1.0)
    try:
        out = probe.rerun({y: probe.values[y] + shift})[y]
    except (KForgeError, ValueError, KeyError):
        return None
    moved = float(np.max(np.abs(out - got))) if got.size else 0.0
    return moved > 0.5 * shift


def _middle_axes(probe, x) -> Iterator[tuple[int, int, int]]:
    """(outer, mid, inner) for each middle axis of ``x``'s declared shape (3-D or more; each side a
    product of its axes): N x C x HW for C."""
    shape = [int(v) for v in probe.task.shape(probe.arg(x), probe.inputs.case)]
    for i in range(1, len(shape) - 1):
        outer, mid, inner = math.prod(shape[:i]), shape[i], math.prod(shape[i + 1:])
        if outer > 1 and mid > 1 and inner > 1:
            yield outer, mid, inner


def _axis_splits(probe, x, size: int) -> list[tuple[int, int, int]]:
    """(outer, axis, inner) for each axis of ``x`` that is not the last: its declared middle axes,
    and the first of each (rows, cols) split (outer 1: a column walk)."""
    return list(dict.fromkeys([*_middle_axes(probe, x),
                               *((1, r, c) for r, c in dims(probe, size) if r > 1 and c > 1)]))


def _axis_roles(probe, outer: int, axis: int, inner: int) -> dict:
    """The parameters carrying a walk's axis, inner and outer sizes (outer None when it is 1)."""
    a = param_for(probe, axis)
    i = param_for(probe, inner, avoid=(a,))
    return {"axis": a, "inner": i, "outer": param_for(probe, outer, avoid=(a, i)) if outer > 1 else None}


def _really_absmax(probe, x, y, op, axis, cols: int = 1) -> bool:
    """Whether a max that held is the max of |x| whose largest magnitudes happened to be positive
    (half the time for a whole tensor of random values): the reference run again on -x tells."""
    from kernel_forge.common.errors import KForgeError

    if op != "max":
        return False
    v = probe.values[x]
    shaped = v if axis is None else v.reshape(-1, cols)
    if not close(probe.outputs[y], np.asarray(np.max(np.abs(shaped), axis=axis)).reshape(-1), rtol=5e-3):
        return False
    try:
        out = probe.rerun({x: -v})[y]
    except (KForgeError, ValueError, KeyError):
        return False
    return not close(out, np.asarray(np.max(-shaped, axis=axis)).reshape(-1), rtol=5e-3)


#: maps applied to each value before a whole or row reduction: |x| (an absmax for a quantization
#: scale, an L1 norm) and x * x (a sum of squares)
_PRE = {"abs": np.abs, "square": np.square}


def _mapped_reductions(probe, y, forms) -> Iterator[Match]:
    """op(pre(x)) of all values, of each row or of each column, ``pre`` from :data:`_PRE`; of ``pre(x - w)``, w the
    size of x or of a row (a sum of squared differences, an L1 distance, each row's distance to a
    vector); the square root of a sum or mean of squares (a 2-norm, an RMS, a Euclidean distance)."""
    n_out = probe.sizes[y]
    for x in probe.inputs_of():
        size = probe.sizes[x]
        if size <= n_out:
            continue
        pairs = [(None, probe.values[x])] + [(w, probe.values[x].reshape(-1, probe.sizes[w]) - probe.values[w])
                                             for w in probe.inputs_of() if w not in (x, y) and probe.sizes[w] > 1
                                             and size % probe.sizes[w] == 0 and probe.sizes[w] in (size, size // n_out)]
        for w, diff in pairs:
            for pre, pf in _PRE.items():
                v = pf(diff).reshape(-1)
                for accumulate, want in forms:
                    extra = {"accumulate": True} if accumulate else {}
                    if w is not None:
                        extra.update(product="full" if probe.sizes[w] == size else "cols", diff=True)
                    for op, fn in _REDUCE.items():
                        posts = [(None, lambda r: r)] + ([("sqrt", np.sqrt)] if pre == "square" and op in ("sum", "mean")
                                                         else [])
                        for post, post_fn in posts:
                            more = {**extra, **({"post": post} if post else {})}
                            roles = {"w": w} if w is not None else {}
                            if n_out == 1:
                                if close(want, post_fn(np.array([fn(v)])), rtol=5e-3):
                                    yield Match("reduction", {"x": x, "y": y, "n": param_for(probe, size), **roles},
                                                {"op": op, "axis": None, "pre": pre, **more})
                                continue
                            for rows, cols in dims(probe, size):
                                if w is not None and probe.sizes[w] not in (size, cols):
                                    continue
                                if rows == n_out and close(want, post_fn(fn(v.reshape(rows, cols), axis=1)), rtol=5e-3):
                                    yield Match("row_reduction", {"x": x, "y": y, **_scalars(probe, rows, cols), **roles},
                                                {"op": op, "pre": pre, **more})
                                if w is None and cols == n_out and rows > 1 and \
                                        close(want, post_fn(fn(v.reshape(rows, cols), axis=0)), rtol=5e-3):
                                    # down the columns: each column's sum of squares, its 2-norm, its L1 norm
                                    yield Match("column_reduction", {"x": x, "y": y, **_scalars(probe, rows, cols)},
                                                {"op": op, "pre": pre, **more})


#: the integer types an integer reduction reads and writes (as the bound patterns' KF_I64 loads them)
_WIDE_INTS = ("int32", "uint32", "int64", "uint64")


def _int_reductions(probe, y) -> Iterator[Match]:
    """Integers summed (or their largest or smallest) exactly into an integer output: all of them, each
    row's or each column's; the output's type wraps a sum as the kernel's own would."""
    if probe.arg(y).param.dtype.name not in _WIDE_INTS:
        return
    n_out = probe.sizes[y]
    got = np.asarray(probe.outputs[y], dtype=np.float64).reshape(-1)
    # an output that starts from values may be added to (an atomicAdd into a zeroed count): then got - before
    forms = [({}, got)] + ([({"accumulate": True}, got - np.asarray(probe.values[y], dtype=np.float64).reshape(-1))]
                           if probe.arg(y).in_out else [])
    for x in probe.inputs_of(floating=False):
        size = probe.sizes[x]
        if size <= n_out or probe.arg(x).param.dtype.name not in _WIDE_INTS:
            continue
        v = np.asarray(probe.values[x]).astype(np.int64)
        # (kind, rows, cols, axis): all values, each row's, each column's
        shapes = ([("reduction", 1, size, 1)] if n_out == 1 else
                  [(kind, r, c, axis) for r, c in dims(probe, size)
                   for kind, axis, n in (("row_reduction", 1, r), ("column_reduction", 0, c)) if n == n_out])
        for (kind, r, c, axis), (extra, have) in itertools.product(shapes, forms):
            for op, fn in (("sum", np.sum), ("max", np.max), ("min", np.min)):
                if not np.array_equal(have, fn(v.reshape(r, c), axis=axis).astype(np.float64)):
                    continue
                if kind == "reduction":
                    yield Match(kind, {"x": x, "y": y, "n": param_for(probe, size)}, {"op": op, "axis": None, **extra})
                else:
                    yield Match(kind, {"x": x, "y": y, **_scalars(probe, r, c)}, {"op": op, **extra})


#: comparisons a predicate count may make, x against a threshold t
_COMPARE = {"gt": np.greater, "ge": np.greater_equal, "lt": np.less, "le": np.less_equal,
            "ne": np.not_equal, "eq": np.equal}


def _predicate_counts(probe, y) -> Iterator[Match]:
    """An integer count of the float values that pass a comparison (``count += x > t``), t a float
    parameter or 0: the values equal to t (a rerun with some x set to t) tell > from >=, < from <=."""
    if probe.sizes[y] != 1 or probe.arg(y).param.dtype.name not in _WIDE_INTS:
        return
    got = float(np.asarray(probe.outputs[y]).reshape(-1)[0])
    base = float(np.asarray(probe.values[y]).reshape(-1)[0]) if probe.arg(y).in_out else 0.0
    for x in probe.inputs_of():
        if probe.sizes[x] <= 1 or probe.arg(x).param.dtype.name != "float32":
            continue
        v = probe.values[x]
        for t_name, t in [(None, 0.0), *probe.float_scalars().items()]:
            for extra, have in (({}, got), ({"accumulate": True}, got - base)) if probe.arg(y).in_out else (({}, got),):
                fits = [op for op, fn in _COMPARE.items() if have == float(np.count_nonzero(fn(v, t)))]
                if not fits:
                    continue
                op = _tell_ties(probe, x, y, t, fits, base if extra else 0.0)
                if op is None:
                    continue
                roles = {"threshold": t_name} if t_name else {}
                params = {"op": "sum", "axis": None, "pred": op, **({} if t_name else {"t": t}), **extra}
                yield Match("reduction", {"x": x, "y": y, "n": param_for(probe, probe.sizes[x]), **roles}, params)
                return


def _tell_ties(probe, x, y, t: float, fits: list[str], base: float) -> str | None:
    """Which of the comparisons that fit counts the values equal to t as the reference does."""
    from kernel_forge.common.errors import KForgeError

    v = probe.values[x].copy()
    v[::3] = np.float32(t)                    # a third of the values on the threshold
    try:
        out = float(np.asarray(probe.rerun({x: v})[y]).reshape(-1)[0]) - base
    except (KForgeError, ValueError, KeyError):
        return None
    still = [op for op in fits if out == float(np.count_nonzero(_COMPARE[op](v, t)))]
    return still[0] if len(still) == 1 else None


def _arg_reductions(probe, y) -> Iterator[Match]:
    """An integer output holding the column of each row's largest or smallest value (the first on
    ties, as NumPy's and PyTorch's argmax answer)."""
    n_out = probe.sizes[y]
    for x in probe.inputs_of():
        size = probe.sizes[x]
        if size <= n_out:
            continue
        for rows, cols in dims(probe, size):
            if rows != n_out:
                continue
            m = probe.values[x].reshape(rows, cols)
            for op, fn in (("argmax", np.argmax), ("argmin", np.argmin)):
                if np.array_equal(probe.outputs[y], fn(m, axis=1).astype(np.float64)):
                    yield Match("row_reduction", {"x": x, "y": y, **_scalars(probe, rows, cols)}, {"op": op})
        # over an axis that is not the last: each pixel's class of N x C x HW, a column's argmax
        for outer, mid, inner in _axis_splits(probe, x, size):
            if outer * inner != n_out:
                continue
            m = probe.values[x].reshape(outer, mid, inner)
            for op, fn in (("argmax", np.argmax), ("argmin", np.argmin)):
                if np.array_equal(probe.outputs[y], fn(m, axis=1).reshape(-1).astype(np.float64)):
                    yield Match("row_reduction", {"x": x, "y": y, **_axis_roles(probe, outer, mid, inner)},
                                {"op": op, "dim": "middle"})


def _product_sums(probe, y, forms) -> Iterator[Match]:
    """Sums of a product ``x * w``: of everything (a dot product), of each row (row-wise dot
    products), of each row times a vector ``w`` of the row's length (a matrix-vector product, plus a
    bias of one value a row where one is added: a linear layer's ``A x + b``), or
    of each column times a vector of the column's length (a transposed one, y = A^T w)."""
    n_out = probe.sizes[y]
    for x in probe.inputs_of():
        size = probe.sizes[x]
        if size <= n_out:
            continue
        for w in probe.inputs_of():
            if w in (x, y):
                continue
            for accumulate, want in forms:
                extra = {"accumulate": True} if accumulate else {}
                if n_out == 1 and probe.sizes[w] == size:
                    if close(want, np.array([np.sum(probe.values[x] * probe.values[w])]), rtol=5e-3):
                        yield Match("reduction", {"x": x, "y": y, "n": param_for(probe, size), "w": w},
                                    {"op": "sum", "axis": None, "product": "full", **extra})
                    continue
                for rows, cols in dims(probe, size):
                    m = probe.values[x].reshape(rows, cols)
                    if rows == n_out and probe.sizes[w] in (size, cols):
                        full = probe.sizes[w] == size
                        wv = probe.values[w].reshape(rows, cols) if full else probe.values[w][None, :]
                        dots = (m * wv).sum(axis=1)
                        for b in [None, *(b for b in probe.inputs_of(rows) if b not in (x, w, y))]:
                            if close(want, dots + (probe.values[b] if b else 0.0), rtol=5e-3):   # (+ a bias: A x + b)
                                yield Match("row_reduction", {"x": x, "y": y, **_scalars(probe, rows, cols), "w": w,
                                                              **({"bias": b} if b else {})},
                                            {"op": "sum", "product": "full" if full else "cols", **extra})
                    elif cols == n_out and probe.sizes[w] == rows and close(
                            want, (m * probe.values[w][:, None]).sum(axis=0), rtol=5e-3):   # y = A^T w
                        yield Match("column_reduction", {"x": x, "y": y, **_scalars(probe, rows, cols), "w": w},
                                    {"op": "sum", "product": "rows", **extra})


def _segments(size: int, n_out: int, tried: set = frozenset()) -> list[int]:
    """Powers of two ``s`` with ``ceil(size / s) == n_out``: the segment lengths of a per-block
    partial sum (CUDA's classic reduction kernels write one sum per ``2 * blockDim.x`` values).
    The probed size may be a multiple of the segment (n = 1024 with one sum per 512), so a segment
    that divides ``size`` is kept unless its split is one of ``tried`` (a row reduction over a
    scalar's rows, found already)."""
    return [s for s in (1 << k for k in range(1, 21))
            if -(-size // s) == n_out and (size % s or (size // s, s) not in tried)]


# ----------------------------------------------------------------------------- prefix sums

def find_scan(probe) -> Iterator[Match]:
    outs = probe.buffers(output=True, floating=None)
    if len(outs) == 2:
        yield from _scans_with_totals(probe, *outs)
    if len(outs) != 1:
        return
    y = outs[0]
    size = probe.sizes[y]
    got = probe.outputs[y]
    for x in probe.inputs_of(size, floating=None):
        if x == y and not probe.arg(y).in_out:
            continue
        v = probe.values[x]
        splits = [(1, size)] + [rc for rc in dims(probe, size) if rc[0] > 1 and rc[1] > 1]
        for rows, cols in splits:
            m = v.reshape(rows, cols)
            for reverse in (False, True):           # summed from the end: flip, cumsum, flip
                inc = np.cumsum(m[:, ::-1], axis=1)[:, ::-1] if reverse else np.cumsum(m, axis=1)
                for exclusive, pred in ((False, inc), (True, inc - m)):
                    if close(got, pred.reshape(-1), rtol=5e-3) and not close(got, v):
                        binding = {"x": x, "y": y}
                        if rows == 1:
                            binding["n"] = param_for(probe, size)
                        else:
                            binding.update(_scalars(probe, rows, cols))
                        yield Match("scan", binding, {"exclusive": exclusive, "per_row": rows > 1,
                                                      **({"reverse": True} if reverse else {})})
        # over an axis that is not the last: each column's running sum (dim=0), dim=1 of N x C x HW
        for outer, mid, inner in _axis_splits(probe, x, size):
            m = v.reshape(outer, mid, inner)
            inc = np.cumsum(m, axis=1)
            for exclusive, pred in ((False, inc), (True, inc - m)):
                if close(got, pred.reshape(-1), rtol=5e-3) and not close(got, v):
                    yield Match("scan", {"x": x, "y": y, **_axis_roles(probe, outer, mid, inner)},
                                {"exclusive": exclusive, "per_row": False, "dim": "middle"})
    return


def _one_total(probe, totals: str) -> bool:
    """Whether every case declares one value for ``totals`` (a sum, not one per tile of a larger case)."""
    task = probe.task
    return all(math.prod(task.shape(task.arg(totals), case)) == 1 for case in task.cases)


def _scans_with_totals(probe, a: str, b: str) -> Iterator[Match]:
    """A prefix sum of each tile of ``seg`` values of a flat array (the last tile short) that also writes
    each tile's total: the first kernel of a multi-pass scan (GPU Gems 3's prescan with its block sums,
    a block-wide CUB scan that leaves its aggregate), whose totals a second kernel scans and adds back.
    ``seg`` is a power of two, as a block's tile is.  One total for every case: a scan of the whole
    array that also writes its sum (a stream compaction's offsets and count)."""
    y, totals = (a, b) if probe.sizes[a] > probe.sizes[b] else (b, a)
    size, n_tot = probe.sizes[y], probe.sizes[totals]
    if not 1 <= n_tot < size or probe.arg(y).in_out:
        return
    for x in probe.inputs_of(size, floating=None):
        if x in (y, totals):
            continue
        v = probe.values[x].astype(np.float64)
        if n_tot == 1:                      # a scan of the whole array and its sum (a compaction's count)
            inc = np.cumsum(v)
            for exclusive, pred in ((False, inc), (True, inc - v)):
                if close(probe.outputs[totals], inc[-1:], rtol=5e-3) and close(probe.outputs[y], pred, rtol=5e-3) \
                        and not close(probe.outputs[y], v) and _one_total(probe, totals):
                    yield Match("scan", {"x": x, "y": y, "totals": totals, "n": param_for(probe, size)},
                                {"exclusive": exclusive, "per_row": False})
            continue
        for seg in _segments(size, n_tot):
            tiles = np.zeros(n_tot * seg)
            tiles[:size] = v
            inc = np.cumsum(tiles.reshape(n_tot, seg), axis=1)
            if not close(probe.outputs[totals], inc[:, -1], rtol=5e-3):
                continue
            found = False
            for exclusive, pred in ((False, inc), (True, inc - tiles.reshape(n_tot, seg))):
                if close(probe.outputs[y], pred.reshape(-1)[:size], rtol=5e-3) and not close(probe.outputs[y], v) \
                        and _segments_hold(probe, x, totals, seg):
                    found = True
                    yield Match("scan", {"x": x, "y": y, "totals": totals, "n": param_for(probe, size)},
                                {"exclusive": exclusive, "per_row": True, "segment": seg})
            if found:
                break              # one tile holds all (n <= seg): the least such tile says it


def _row_quantizations(probe) -> Iterator[Match]:
    """Dynamic int8 quantization of each row with its own scale (vLLM's dynamic_scaled_int8_quant,
    TensorRT-LLM's per-token quantization): s = max |x| / 127 per row, written to a float output of one
    value a row, and q = saturate(rint(x * 127 / max |x|)) -- or rint(x / s), told apart where they
    round differently -- to an int8 output of x's size.  Bound as a row reduction (the scale) with the
    quantized row as its epilogue."""
    outs = probe.buffers(output=True)
    q = next((o for o in outs if probe.arg(o).param.dtype.name == "int8"), None)
    y = next((o for o in outs if probe.arg(o).param.dtype.is_float), None)
    if q is None or y is None:
        return
    n, rows = probe.sizes[q], probe.sizes[y]
    if rows < 1 or n % rows or n == rows:
        return
    cols = n // rows
    got = probe.outputs[q].astype(np.int64)
    for x in probe.inputs_of(n, floating=True):
        v = probe.values[x].reshape(rows, cols).astype(np.float64)
        m = np.abs(v).max(axis=1, keepdims=True)
        if not close(probe.outputs[y], (m / 127.0).reshape(-1)):
            continue
        with np.errstate(all="ignore"):
            forms = ((False, np.where(m > 0, v * (127.0 / m), 0.0)), (True, np.where(m > 0, v / (m / 127.0), 0.0)))
        fits = [divide for divide, want in forms
                if np.abs(got - np.clip(np.rint(want), -128, 127).reshape(-1)).max() <= 1]
        if not fits:
            continue
        exact = [divide for divide, want in forms if np.array_equal(got, np.clip(np.rint(want), -128, 127).reshape(-1))]
        r = param_for(probe, rows)
        yield Match("row_reduction", {"x": x, "y": y, "q": q, "rows": r, "cols": param_for(probe, cols, avoid=(r,))},
                    {"op": "absmax", "quantize": "int8", "divide": (exact or fits)[0]})


def _max_with_index(probe) -> Iterator[Match]:
    """Each row's largest (smallest) value and its column, two outputs of one value a row
    (``torch.max(x, dim=1)``'s values and indices; a greedy sampler's token and its logit): the
    argmax found on the integer output, the value output checked against it."""
    outs = probe.buffers(output=True)
    ints = [o for o in outs if not probe.arg(o).param.dtype.is_float]
    floats = [o for o in outs if probe.arg(o).param.dtype.is_float]
    if len(ints) != 1 or len(floats) != 1 or probe.sizes[ints[0]] != probe.sizes[floats[0]]:
        return
    idx, vals = ints[0], floats[0]
    for m in _arg_reductions(probe, idx):
        if m.params.get("dim") == "middle":
            continue
        rows = probe.sizes[idx]
        x = probe.values[m.binding["x"]].reshape(rows, -1)
        pick = np.max if m.params["op"] == "argmax" else np.min
        if close(probe.outputs[vals], pick(x, axis=1), rtol=1e-6):
            yield Match("row_reduction", {**m.binding, "values": vals}, m.params)
