"""Elementwise maps and fused elementwise chains: ``y = act(x)``, ``y = x OP z``, ``y = act(x) * z`` (a
gated unit: SwiGLU, GEGLU) -- also with ``x`` and ``z`` the two halves of each row of one buffer
(vLLM's and SGLang's ``act_and_mul``: ``y[r, :] = act(s[r, :c]) * s[r, c:]``) --, ``y = alpha*x (+ z)``,
and ``y = act(x + bias[col]) + res`` with a bias broadcast along the rows (bias, activation,
residual), or per channel along a middle axis (an NCHW bias; an inference batch norm), with ``act``
from :data:`FUNCTIONS`."""
from __future__ import annotations

import math
import re
from itertools import permutations

import numpy as np

from typing import Iterator

from kernel_forge.kinds.match import Match, close, dims, param_for

_erf = np.frompyfunc(math.erf, 1, 1)

#: values a hypothesis is first tried on (all of them only when those match): identification stays fast
SAMPLE = 8192


def _gelu_erf(v):
    return 0.5 * v * (1.0 + _erf(v / math.sqrt(2.0)).astype(np.float64))


def _sigmoid(v):
    return 1.0 / (1.0 + np.exp(-v))


def _gelu_tanh_grad(v):
    s = math.sqrt(2.0 / math.pi)
    t = np.tanh(s * (v + 0.044715 * v ** 3))
    return 0.5 * (1.0 + t) + 0.5 * v * (1.0 - t * t) * s * (1.0 + 3.0 * 0.044715 * v * v)


def _gelu_erf_grad(v):
    return 0.5 * (1.0 + _erf(v / math.sqrt(2.0)).astype(np.float64)) + v * np.exp(-0.5 * v * v) / math.sqrt(2.0 * math.pi)


#: name -> (NumPy on float64, CUDA on a float ``v``)
FUNCTIONS = {
    "identity": (lambda v: v, "v"),
    "relu": (lambda v: np.maximum(v, 0.0), "fmaxf(v, 0.0f)"),
    "gelu_tanh": (lambda v: 0.5 * v * (1.0 + np.tanh(math.sqrt(2.0 / math.pi) * (v + 0.044715 * v ** 3))),
                  "0.5f * v * (1.0f + tanhf(0.7978845608028654f * (v + 0.044715f * v * v * v)))"),
    "gelu_erf": (_gelu_erf, "0.5f * v * (1.0f + erff(v * 0.7071067811865476f))"),
    "silu": (lambda v: v / (1.0 + np.exp(-v)), "v / (1.0f + __expf(-v))"),
    "sigmoid": (lambda v: 1.0 / (1.0 + np.exp(-v)), "1.0f / (1.0f + __expf(-v))"),
    "tanh": (np.tanh, "tanhf(v)"),
    "exp": (np.exp, "expf(v)"),
    "softplus": (lambda v: np.logaddexp(0.0, v), "(v > 20.0f ? v : log1pf(expf(v)))"),
    "leaky_relu": (lambda v: np.where(v > 0, v, 0.01 * v), "(v > 0.0f ? v : 0.01f * v)"),
    "square": (lambda v: v * v, "v * v"),
    "abs": (np.abs, "fabsf(v)"),
    "neg": (lambda v: -v, "-v"),
    "log": (np.log, "logf(v)"),
    "neg_log": (lambda v: -np.log(v), "-logf(v)"),      # a negative log-likelihood (cross-entropy's loss)
    "step": (lambda v: np.where(v > 0, 1.0, 0.0), "(v > 0.0f ? 1.0f : 0.0f)"),   # ReLU's gradient: step(x) * dy
    # the other activations' derivatives: a backward pass is the gated unit act'(x) * dy
    "gelu_tanh_grad": (_gelu_tanh_grad,
                       "0.5f * (1.0f + tanhf(0.7978845608028654f * (v + 0.044715f * v * v * v))) + 0.5f * v * "
                       "(1.0f - tanhf(0.7978845608028654f * (v + 0.044715f * v * v * v)) * tanhf(0.7978845608028654f * "
                       "(v + 0.044715f * v * v * v))) * 0.7978845608028654f * (1.0f + 0.134145f * v * v)"),
    "gelu_erf_grad": (_gelu_erf_grad,
                      "0.5f * (1.0f + erff(v * 0.7071067811865476f)) + v * 0.3989422804014327f * expf(-0.5f * v * v)"),
    "silu_grad": (lambda v: _sigmoid(v) * (1.0 + v * (1.0 - _sigmoid(v))),
                  "(1.0f / (1.0f + __expf(-v))) * (1.0f + v * (1.0f - 1.0f / (1.0f + __expf(-v))))"),
    "sigmoid_grad": (lambda v: _sigmoid(v) * (1.0 - _sigmoid(v)),
                     "(1.0f / (1.0f + __expf(-v))) * (1.0f - 1.0f / (1.0f + __expf(-v)))"),
    "tanh_grad": (lambda v: 1.0 - np.tanh(v) ** 2, "(1.0f - tanhf(v) * tanhf(v))"),
    # more of torch.nn's activations (after the common ones: where two agree on the probe's values,
    # relu6 and relu on values below 6, the earlier is named) and math functions of one value
    "relu6": (lambda v: np.clip(v, 0.0, 6.0), "fminf(fmaxf(v, 0.0f), 6.0f)"),
    "hardtanh": (lambda v: np.clip(v, -1.0, 1.0), "fminf(fmaxf(v, -1.0f), 1.0f)"),
    "hardsigmoid": (lambda v: np.clip(v + 3.0, 0.0, 6.0) / 6.0, "fminf(fmaxf(v + 3.0f, 0.0f), 6.0f) / 6.0f"),
    "hardswish": (lambda v: v * np.clip(v + 3.0, 0.0, 6.0) / 6.0, "v * fminf(fmaxf(v + 3.0f, 0.0f), 6.0f) / 6.0f"),
    "mish": (lambda v: v * np.tanh(np.logaddexp(0.0, v)), "v * tanhf(v > 20.0f ? v : log1pf(expf(v)))"),
    "elu": (lambda v: np.where(v > 0, v, np.expm1(np.minimum(v, 0.0))), "(v > 0.0f ? v : expm1f(v))"),
    "selu": (lambda v: 1.0507009873554805 * np.where(v > 0, v, 1.6732632423543772 * np.expm1(np.minimum(v, 0.0))),
             "1.0507009873554805f * (v > 0.0f ? v : 1.6732632423543772f * expm1f(v))"),
    "gelu_quick": (lambda v: v * _sigmoid(1.702 * v), "v / (1.0f + expf(-1.702f * v))"),
    "softsign": (lambda v: v / (1.0 + np.abs(v)), "v / (1.0f + fabsf(v))"),
    "log_sigmoid": (lambda v: -np.logaddexp(0.0, -v), "-(v < -20.0f ? -v : log1pf(expf(-v)))"),
    "erf": (lambda v: _erf(v).astype(np.float64), "erff(v)"),
    "sin": (np.sin, "sinf(v)"),
    "cos": (np.cos, "cosf(v)"),
    "expm1": (np.expm1, "expm1f(v)"),
    "log1p": (np.log1p, "log1pf(v)"),
    "sqrt": (np.sqrt, "sqrtf(v)"),
    "rsqrt": (lambda v: 1.0 / np.sqrt(v), "rsqrtf(v)"),
    "reciprocal": (lambda v: 1.0 / v, "1.0f / v"),
    "sign": (np.sign, "(float)((v > 0.0f) - (v < 0.0f))"),
}

#: name -> (NumPy, CUDA on floats ``a`` and ``b``)
BINARY = {
    "add": (np.add, "a + b"), "sub": (np.subtract, "a - b"), "mul": (np.multiply, "a * b"),
    "div": (np.divide, "a / b"), "max": (np.maximum, "fmaxf(a, b)"), "min": (np.minimum, "fminf(a, b)"),
}


_FLOAT_MATH = re.compile(r"\b(?:__)?(fmax|fmin|tanh|exp|log|sqrt|rsqrt|erf|erfc|fabs|fma|sin|cos|expm1|log1p|pow|rint|"
                         r"copysign|floor|ceil|exp2|log2|log10|sinh|cosh|atan|tan|cbrt|trunc|round)f\(")
_FLOAT_LITERAL = re.compile(r"(?<![\w.])((?:\d+\.\d*|\.\d+|\d+)(?:[eE][-+]?\d+)?)f\b")


def in_double(code: str) -> str:
    """A CUDA expression or body written for float, computing in double: float math functions and
    intrinsics (``expf``, ``__expf``, ``fmaf`` ...) become their double forms, ``1.0f`` literals
    double literals, ``float`` declarations ``double``."""
    code = _FLOAT_MATH.sub(lambda m: m.group(1) + "(", code)
    code = _FLOAT_LITERAL.sub(lambda m: m.group(1) if any(c in m.group(1) for c in ".eE") else m.group(1) + ".0", code)
    return re.sub(r"\bfloat\b", "double", code)


def _f(name, v):
    with np.errstate(all="ignore"):
        return FUNCTIONS[name][0](v)


#: the storage an integer map reads and writes, and its width in bits
INT_MAP_TYPES = {"int32": 32, "uint32": 32, "int64": 64, "uint64": 64}
#: integer two-operand forms, as NumPy computes them on int64 (then wrapped to the storage type)
INT_BINARY = {"add": np.add, "sub": np.subtract, "mul": np.multiply, "max": np.maximum, "min": np.minimum,
              "and": np.bitwise_and, "or": np.bitwise_or, "xor": np.bitwise_xor}
#: integer maps
INT_MAPS = {"identity": lambda v: v, "neg": np.negative, "abs": np.abs, "not": np.invert}


def _wrapped(v: np.ndarray, dtype_name: str) -> np.ndarray:
    """int64 values as the storage type holds them (a 32-bit sum wraps), as float64 for comparing."""
    return np.asarray(v, dtype=np.int64).astype(np.dtype(dtype_name)).astype(np.float64)


def _int_elementwise(probe, y) -> Iterator[Match]:
    """Exact maps and two-operand forms of 32- or 64-bit integers of one type: x OP z (+ - * max min & | ^),
    -x, |x|, ~x, a copy, alpha * x, x + alpha, alpha * x + z (alpha an integer parameter)."""
    dt = probe.arg(y).param.dtype.name
    n = probe.sizes[y]
    got = np.asarray(probe.outputs[y], dtype=np.float64)
    full = [x for x in probe.inputs_of(n, floating=False) if probe.arg(x).param.dtype.name == dt]
    if not full:
        return
    base = {"y": y, "n": param_for(probe, n)}
    ints = {x: np.asarray(probe.values[x]).astype(np.int64) for x in full}

    def holds(values) -> bool:
        with np.errstate(all="ignore"):
            return bool(np.array_equal(got, _wrapped(values, dt)))

    for x in full:
        for op, fn in INT_MAPS.items():
            if not (op == "identity" and x == y) and holds(fn(ints[x])):
                yield Match("elementwise", {**base, "x": x}, {"form": "map", "act": op, "int": True})
        for z in full:
            if z != x:
                for op, fn in INT_BINARY.items():
                    if holds(fn(ints[x], ints[z])):
                        yield Match("elementwise", {**base, "x": x, "z": z}, {"form": "binary", "op": op, "int": True})
        sizes = {v for v in (base["n"],) if v}
        for a, av in probe.int_scalars().items():
            if a in sizes:
                continue
            if holds(av * ints[x]):
                yield Match("elementwise", {**base, "x": x, "alpha": a}, {"form": "scale", "int": True})
            if holds(ints[x] + av):
                yield Match("elementwise", {**base, "x": x, "alpha": a}, {"form": "shift", "int": True})
            for z in full:
                if z != x and holds(av * ints[x] + ints[z]):
                    yield Match("elementwise", {**base, "x": x, "z": z, "alpha": a}, {"form": "axpy", "int": True})


def find_elementwise(probe) -> Iterator[Match]:
    yield from _quantizations(probe)
    outs = probe.buffers(output=True)
    if len(outs) == 1 and probe.arg(outs[0]).param.dtype.name in INT_MAP_TYPES:
        yield from _int_elementwise(probe, outs[0])
    if len(outs) == 2 and all(probe.arg(o).param.dtype.is_float for o in outs) \
            and probe.sizes[outs[0]] == probe.sizes[outs[1]]:
        yield from _two_outputs(probe, *outs)
    if len(outs) != 1 or not probe.arg(outs[0]).param.dtype.is_float:
        return
    yield from _float_maps(probe, outs[0])


#: the forms a second output may take beside the first in one pass (the plain elementwise pattern's)
_SECOND_FORMS = {"map", "binary", "binary_act", "gated", "scale", "scale_act", "axpy", "axpby", "affine", "clamp",
                 "bias_act", "act_res", "bias_act_res", "binary_scale", "mul_add"}


def _two_outputs(probe, y: str, y2: str) -> Iterator[Match]:
    """Two outputs of one size, each an elementwise map of the same operands, computed in one pass
    (``sincos``; a fused bias and activation that also keeps the pre-activation for the backward;
    a value and its derivative): the first match of each, where their operands agree (a role bound
    to one buffer in both) and the second's form is one the plain pattern computes.  The second's
    form rides in ``params["second"]``, its output in role ``y2``."""
    first = {o: next(iter(_float_maps(probe, o)), None) for o in (y, y2)}
    if any(m is None or m.params.get("form", "map") not in _SECOND_FORMS for m in first.values()):
        return
    for a, b in ((y, y2), (y2, y)):
        m1, m2 = first[a], first[b]
        shared = {r: v for r, v in m2.binding.items() if r != "y" and v is not None}
        if any(m1.binding.get(r) not in (None, v) for r, v in shared.items()):
            continue
        binding = {**m1.binding, **shared, "y2": b}
        yield Match("elementwise", binding, {**m1.params, "second": dict(m2.params)})
        return


def _float_maps(probe, y: str) -> Iterator[Match]:
    """The elementwise forms of one float output ``y``."""
    n = probe.sizes[y]
    got = probe.outputs[y]
    full = [x for x in probe.inputs_of(n)]
    n_name = param_for(probe, n)
    base = {"y": y, "n": n_name}
    alphas = list(probe.float_scalars().items())

    vals = probe.values

    def holds(pred_of, step: int = 1) -> bool:
        """Whether the prediction holds: on the first SAMPLE values (a multiple of ``step``), then on all."""
        k = min(n, max(step, SAMPLE // step * step))
        with np.errstate(all="ignore"):
            if not close(got[:k], np.asarray(pred_of(k), dtype=np.float64)):
                return False
            return k == n or close(got, np.asarray(pred_of(n), dtype=np.float64))

    for x in full:                                               # y = act(x)
        for act in FUNCTIONS:
            if not (act == "identity" and x == y) and holds(lambda k: _f(act, vals[x][:k])):
                yield Match("elementwise", {**base, "x": x}, {"form": "map", "act": act})
    for x in full:                                               # y = x OP z
        for z in full:
            if z == x:
                continue
            for op, (fn, _) in BINARY.items():
                if holds(lambda k: fn(vals[x][:k], vals[z][:k])):
                    yield Match("elementwise", {**base, "x": x, "z": z}, {"form": "binary", "op": op})
            for op in ("add", "sub", "mul"):                    # y = act(x OP z): relu(a + b), a fused residual
                fn = BINARY[op][0]
                for act in FUNCTIONS:
                    if act != "identity" and holds(lambda k: _f(act, fn(vals[x][:k], vals[z][:k]))):
                        yield Match("elementwise", {**base, "x": x, "z": z}, {"form": "binary_act", "op": op, "act": act})
            for act in FUNCTIONS:                                # y = act(x) * z: a gated unit (SwiGLU, GEGLU)
                if act != "identity" and holds(lambda k: _f(act, vals[x][:k]) * vals[z][:k]):
                    yield Match("elementwise", {**base, "x": x, "z": z}, {"form": "gated", "act": act})
    for s in probe.inputs_of(2 * n):                             # y = act(one half of each row) * the other half
        for rows, cols in dims(probe, n):
            c_name = param_for(probe, cols)
            if c_name is None or rows * cols != n:
                continue
            halves = vals[s].reshape(rows, 2, cols)
            for act_on in (0, 1):
                xs, zs = halves[:, act_on].reshape(-1), halves[:, 1 - act_on].reshape(-1)
                for act in FUNCTIONS:
                    if act != "identity" and holds(lambda k: _f(act, xs[:k]) * zs[:k], cols):
                        yield Match("elementwise", {**base, "x": s, "cols": c_name},
                                    {"form": "gated_halves", "act": act, "act_on": ("first", "second")[act_on]})
    for a, av in alphas:                                         # y = alpha * x (+ z), x / alpha, act(alpha * x)
        for x in full:
            if holds(lambda k: av * vals[x][:k]):
                yield Match("elementwise", {**base, "x": x, "alpha": a}, {"form": "scale"})
            elif av and holds(lambda k: vals[x][:k] / av):
                yield Match("elementwise", {**base, "x": x, "alpha": a}, {"form": "scale", "divide": True})
            for act in FUNCTIONS:                                # y = act(alpha * x): exp(s x), a scaled tanh
                if act != "identity" and holds(lambda k: _f(act, av * vals[x][:k])):
                    yield Match("elementwise", {**base, "x": x, "alpha": a}, {"form": "scale_act", "act": act})
            for z in full:
                if z != x and holds(lambda k: av * vals[x][:k] + vals[z][:k]):
                    yield Match("elementwise", {**base, "x": x, "z": z, "alpha": a}, {"form": "axpy"})
    for a, av in [*alphas, *((i, float(v)) for i, v in probe.int_scalars().items() if v)]:
        for x in full:                                           # y = (x OP z) * alpha, or / alpha: d_A * d_B / N
            for z in full:
                if z == x:
                    continue
                for op in ("mul", "add", "sub"):
                    fn = BINARY[op][0]
                    if (a, av) in alphas and holds(lambda k: av * fn(vals[x][:k], vals[z][:k])):
                        yield Match("elementwise", {**base, "x": x, "z": z, "alpha": a}, {"form": "binary_scale", "op": op})
                    elif holds(lambda k: fn(vals[x][:k], vals[z][:k]) / av):
                        yield Match("elementwise", {**base, "x": x, "z": z, "alpha": a},
                                    {"form": "binary_scale", "op": op, "divide": True})
    for (a, av), (b, bv) in permutations(alphas, 2):            # two scalars: y = alpha x + beta z, a clamp
        for x in full:
            for z in full:
                if z != x and holds(lambda k: av * vals[x][:k] + bv * vals[z][:k]):
                    yield Match("elementwise", {**base, "x": x, "z": z, "alpha": a, "beta": b}, {"form": "axpby"})
            if av < bv and holds(lambda k: np.clip(vals[x][:k], av, bv)):
                yield Match("elementwise", {**base, "x": x, "alpha": a, "beta": b}, {"form": "clamp"})
            if holds(lambda k: av * vals[x][:k] + bv):                # a scale and a shift
                yield Match("elementwise", {**base, "x": x, "alpha": a, "beta": b}, {"form": "affine"})
    yield from _masked_fills(probe, full, base, holds)
    yield from _products_added(probe, full, base, holds, alphas)
    for x in full:                                               # fused chains with a row-broadcast bias
        rest = [r for r in full if r != x]
        splits = [(r, c) for r, c in dims(probe, n) if r > 1 and c > 1] or [(1, n)]
        first = True                                             # act(x) + res: on the first split only
        for rows, cols in splits:
            vecs = [b for b in probe.inputs_of(cols) if b not in (x, y)] if rows > 1 else []
            for act in FUNCTIONS:
                for b in ([None] if first else []) + vecs:
                    for r in [None, *rest]:
                        if b is None and r is None:
                            continue

                        def pred(k, b=b, r=r):
                            pre = vals[x][:k].reshape(-1, cols) + (vals[b][None, :] if b else 0.0)
                            return _f(act, pre).reshape(-1) + (vals[r][:k] if r else 0.0)

                        if holds(pred, cols):
                            form = ("bias_" if b else "") + "act" + ("_res" if r else "")
                            binding = {**base, "x": x, "bias": b, "res": r}
                            if b:
                                binding["cols"] = param_for(probe, cols)
                            yield Match("elementwise", binding, {"form": form, "act": act})
            first = False
    yield from _scaled_chains(probe, full, base, holds)
    yield from _channel_chains(probe, y, full, base, holds)
    yield from _fitted_constants(probe, y, [*full, *([y] if probe.arg(y).in_out and y not in full else [])],
                                 base, holds)
    return


def _products_added(probe, full, base, holds, alphas) -> Iterator[Match]:
    """Three operands: ``y = alpha * x * z + r`` (a fused multiply-add of tensors; ``torch.addcmul``'s
    ``r + alpha * x * z``), alpha a float parameter or 1."""
    vals = probe.values
    for r in full:
        for x, z in ((x, z) for x in full for z in full if x < z and r not in (x, z)):
            for a, av in [(None, 1.0), *alphas]:
                if holds(lambda k: av * vals[x][:k] * vals[z][:k] + vals[r][:k]):
                    yield Match("elementwise", {**base, "x": x, "z": z, "res": r, "alpha": a}, {"form": "mul_add"})
                    return


def _scaled_chains(probe, full, base, holds) -> Iterator[Match]:
    """Fused chains with scales: ``alpha * act(x * s[col] + b[col]) + res`` -- a vector of one value a
    column multiplying x (a folded batch norm or an affine layer over the last axis, NHWC's
    per-channel scale and shift), and/or a float parameter multiplying the activation (a residual
    branch's scale) -- each part optional, at least one scale present (the plain chains are tried
    before), on each split of x into rows of a parameter's columns; the first that holds."""
    y, n = base["y"], probe.sizes[base["y"]]
    vals = probe.values
    splits = [(r, c) for r, c in dims(probe, n) if r > 1 and c > 1]
    alphas = [(None, 1.0), *((a, v) for a, v in probe.float_scalars().items() if v not in (0.0, 1.0))]
    for x in full:
        rest = [r for r in full if r != x]
        for rows, cols in splits:
            vecs = [b for b in probe.inputs_of(cols) if b not in (x, y)]
            for s, b in [(s, b) for s in [None, *vecs] for b in [None, *vecs] if b != s or s is None]:
                for (a, av), r in [(al, r) for al in alphas for r in [None, *rest]]:
                    if s is None and a is None:
                        continue                   # a plain chain: tried before
                    for act in FUNCTIONS:
                        def pred(k, s=s, b=b, r=r, av=av):
                            pre = vals[x][:k].reshape(-1, cols) * (vals[s][None, :] if s else 1.0) + \
                                (vals[b][None, :] if b else 0.0)
                            return av * _f(act, pre).reshape(-1) + (vals[r][:k] if r else 0.0)

                        if holds(pred, cols):
                            form = ("bias_" if b else "") + "act" + ("_res" if r else "")
                            binding = {**base, "x": x, "bias": b, "res": r, "scale_vec": s, "alpha": a,
                                       "cols": param_for(probe, cols)}
                            yield Match("elementwise", binding, {"form": form, "act": act,
                                                                 **({"out_scale": True} if a else {})})
                            return


#: the functions whose inverse recovers act's argument from the output (a fitted act(a * x + b))
_INVERSES = {"identity": lambda v: v, "exp": np.log, "tanh": np.arctanh, "sigmoid": lambda v: np.log(v / (1.0 - v)),
             "sqrt": np.square, "log": np.exp, "reciprocal": lambda v: 1.0 / v}


def _fit_line(u: np.ndarray, v: np.ndarray) -> tuple[float, float] | None:
    """(a, b) with v ~ a * u + b by least squares, each rounded to 7 significant digits and float32
    (1 / 255 stays 1 / 255 to float precision; an offset within the fit's rounding is 0); None where u
    does not vary or u or v is not finite."""
    ok = np.isfinite(u) & np.isfinite(v)
    if ok.sum() < 8 or not ok.all() or np.ptp(u) == 0:
        return None
    a, b = np.polyfit(u, v, 1)
    if abs(b) <= 1e-6 * max(abs(a) * float(np.max(np.abs(u))), float(np.max(np.abs(v))), 1e-30):
        b = 0.0                                   # an offset within the fit's rounding: none
    snap = lambda c: float(np.float32(float(f"{c:.7g}"))) if c else 0.0  # noqa: E731
    return snap(a), snap(b)


def _fitted_constants(probe, y, full, base, holds) -> Iterator[Match]:
    """Maps with constants written in the kernel, not passed: act(a * x + b) (Rodinia's exp(I / 255),
    a sigmoid of 2x) and a * act(x) + b, a and b fitted from the reference's values (the forms with
    parameters for them come first).  The fits that hold come closest first: exp(x / 255) is within
    the matching tolerance of the line 1 + x / 255 too."""
    got = probe.outputs[y]
    found = []
    for x in full:
        xs = probe.values[x]
        with np.errstate(all="ignore"):
            tries = [("affine_act", act, inverse(got), xs) for act, inverse in _INVERSES.items()]
        tries += [("act_affine", act, got, _f(act, xs)) for act in FUNCTIONS if act != "identity"]
        for form, act, v, u in tries:
            with np.errstate(all="ignore"):
                line = _fit_line(u, v)
            if line is None or line == (1.0, 0.0) or line[0] == 0.0:
                continue
            a, b = line
            pred = (lambda k, a=a, b=b, act=act: _f(act, a * xs[:k] + b)) if form == "affine_act" else \
                   (lambda k, a=a, b=b, act=act: a * _f(act, xs[:k]) + b)
            if holds(pred):
                with np.errstate(all="ignore"):
                    err = float(np.max(np.abs(pred(len(xs)) - got)))
                found.append((err, len(found), Match("elementwise", {**base, "x": x},
                                                     {"form": form, "act": act, "a": a, "b": b})))
    for _, _, m in sorted(found, key=lambda t: t[:2]):
        yield m


def _channel_chains(probe, y, full, base, holds) -> Iterator[Match]:
    """Fused chains broadcast along a middle axis: x of N x C x inner values (NCHW, inner = H*W, a
    parameter) and per-channel vectors of C values, channel (j / inner) % C of element j --
        y = act(x + bias[c]) (+ res)                                       (form bias_act, bias_act_res)
        y = act((x - mean[c]) / sqrt(var[c] + eps) * scale[c] + offset[c]) (+ res)  (batch norm, inference)
    with eps a float parameter, else one of the usual constants."""
    vals = probe.values
    n = probe.sizes[y]
    for inner_name, inner in probe.int_scalars().items():
        if inner <= 1 or n % inner:
            continue
        for c in sorted({probe.sizes[b] for b in probe.inputs_of() if b not in (y, *full)}):
            if c <= 1 or (n // inner) % c:
                continue
            c_name = param_for(probe, c, avoid=(inner_name,))
            vecs = [b for b in probe.inputs_of(c) if b not in (y, *full)]
            if c_name is None or not vecs:
                continue
            chan = lambda k: (np.arange(k) // inner) % c          # noqa: E731
            shape = {"cols": c_name, "inner": inner_name}
            for x in full:
                rest = [r for r in full if r != x]
                for act in FUNCTIONS:
                    for r in [None, *rest]:
                        add = (lambda k, r=r: vals[r][:k] if r else 0.0)
                        for b in vecs:
                            if holds(lambda k: _f(act, vals[x][:k] + vals[b][chan(k)]) + add(k)):
                                yield Match("elementwise", {**base, "x": x, "bias": b, "res": r, **shape},
                                            {"form": "bias_act" + ("_res" if r else ""), "act": act,
                                             "broadcast": "channel"})
                        if len(vecs) < 4:
                            continue
                        for mean, var, scale, offset in permutations(vecs, 4):
                            for eps_name, eps in _epsilons(probe):
                                def bn(k, mean=mean, var=var, scale=scale, offset=offset, eps=eps):
                                    ch = chan(k)
                                    inv = 1.0 / np.sqrt(vals[var][ch] + eps)
                                    return _f(act, (vals[x][:k] - vals[mean][ch]) * inv * vals[scale][ch]
                                              + vals[offset][ch]) + add(k)
                                if holds(bn):
                                    binding = {**base, "x": x, "res": r, "mean": mean, "var": var, "scale": scale,
                                               "offset": offset, "eps": eps_name, **shape}
                                    yield Match("elementwise", binding,
                                                {"form": "batchnorm_act" + ("_res" if r else ""), "act": act,
                                                 "broadcast": "channel", "eps": eps})


def _epsilons(probe) -> list[tuple[str | None, float]]:
    """The epsilon of a normalisation: a float parameter, else a constant references use."""
    return [*probe.float_scalars().items(), *((None, e) for e in (1e-5, 1e-3, 1e-6, 1e-12, 0.0))]


def _masked_fills(probe, full, base, holds) -> Iterator[Match]:
    """y = fill where an integer (or bool) mask is nonzero, else x (``masked_fill``): the fill a
    float parameter or a constant attention masks use; or y = x where the mask is nonzero, else z
    (``torch.where``)."""
    vals = probe.values
    n = probe.sizes[base["y"]]
    fills = [*probe.float_scalars().items(), *((None, c) for c in (0.0, -1e9, -1e4))]
    for m in probe.inputs_of(n, floating=False):
        on = vals[m] != 0
        if on.all() or not on.any():
            continue
        for x in full:
            for name, fill in fills:
                if holds(lambda k: np.where(on[:k], fill, vals[x][:k])):
                    yield Match("elementwise", {**base, "x": x, "z": m, "alpha": name},
                                {"form": "masked_fill", **({} if name else {"fill": fill})})
                    break
            for z in full:                               # y = mask ? x : z (torch.where, a select)
                if z != x and holds(lambda k: np.where(on[:k], vals[x][:k], vals[z][:k])):
                    yield Match("elementwise", {**base, "x": x, "z": z, "mask": m}, {"form": "where"})


def _scales(probe) -> list[tuple[str, float]]:
    """Float scalars, and the one value of each one-value float input buffer (a scale passed by
    pointer)."""
    out = list(probe.float_scalars().items())
    for b in probe.inputs_of(1):
        out.append((b, float(probe.values[b][0])))
    return out


def _quantizations(probe) -> Iterator[Match]:
    """int8 quantization with a per-tensor scale, y = saturate(rint(x / s)) or rint(x * s), and its
    inverse, y = s * x from int8 values (vLLM's static_scaled_int8_quant, a dequantization)."""
    outs = probe.buffers(output=True)
    if len(outs) != 1:
        return
    y = outs[0]
    n = probe.sizes[y]
    got = probe.outputs[y]
    int8_out = probe.arg(y).param.dtype.name == "int8"
    for x in probe.inputs_of(n, floating=None):
        x_int8 = probe.arg(x).param.dtype.name == "int8"
        if x == y or not (int8_out ^ x_int8) or (not int8_out and not probe.arg(y).param.dtype.is_float):
            continue
        if x_int8 and not probe.arg(x).param.dtype.is_float:
            for a, av in _scales(probe):
                if close(got, av * probe.values[x]):
                    yield Match("elementwise", {"y": y, "n": param_for(probe, n), "x": x, "alpha": a}, {"form": "dequantize"})
            continue
        if not probe.arg(x).param.dtype.is_float:
            continue
        for a, av in _scales(probe):
            for divide in (True, False):
                with np.errstate(all="ignore"):
                    want = np.clip(np.rint(probe.values[x] / av if divide else probe.values[x] * av), -128, 127)
                if np.all(np.isfinite(want)) and np.array_equal(got, want):
                    yield Match("elementwise", {"y": y, "n": param_for(probe, n), "x": x, "alpha": a},
                                {"form": "quantize", "divide": divide})
