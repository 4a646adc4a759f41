"""Hypotheses with index arithmetic of their own: matrix products (transposes, alpha, beta, a bias
epilogue) and histograms (counts of integer values, or of real values in bins of a range)."""
from __future__ import annotations

import itertools

import numpy as np

from typing import Iterator

from kernel_forge.kinds.maps import FUNCTIONS
from kernel_forge.kinds.match import Match, close


def find_gemm(probe) -> Iterator[Match]:
    """C = alpha * op(A) @ op(B) + beta * C (+ bias): sizes single parameters or products of two;
    also a batch of such products (``batch`` a parameter, each operand holding batch matrices one
    after the other: a batched matmul, attention's scores)."""
    outs = probe.buffers(output=True, floating=True)
    if len(outs) != 1 or len(probe.buffers(output=True)) != 1:
        return
    c = outs[0]
    ints = list(probe.int_scalars().items())
    atoms = ints + [(f"{a}*{b}", va * vb) for (a, va), (b, vb) in itertools.combinations(ints, 2)]
    found = False
    ins = [probe.sizes[a] for a in probe.inputs_of() if a != c]
    for batch, nb in [(None, 1), *((name, v) for name, v in ints if v > 1)]:
        own = [(n, v) for n, v in atoms if batch not in n.split("*")]
        # only the (m, n, k) whose sizes fit C and two inputs (the order of itertools.product kept):
        # a signature of 20 integers has 210 atoms, whose 9 million triples took 48 s to try one by one
        for mnk in ((m, n, k) for m in own if m[1] and probe.sizes[c] % (nb * m[1]) == 0
                    for n in own if nb * m[1] * n[1] == probe.sizes[c]
                    for k in own if any(nb * m[1] * k[1] == s for s in ins)):
            for match in _products(probe, c, batch, nb, mnk):
                found = True
                yield match
    if not found:            # the rows only in the launch (cuda-samples' matrixMul(C, A, B, wA, wB)): named, m unbound
        for (nn, n), (kn, k) in itertools.product(atoms, repeat=2):
            if n and probe.sizes[c] % n == 0:
                yield from _products(probe, c, None, 1, (("", probe.sizes[c] // n), (nn, n), (kn, k)))


#: the activations a GEMM's epilogue applies after alpha, beta and the bias (a fused linear layer:
#: ``relu(x @ W + b)``), from kinds.maps' functions; identity first
GEMM_ACTS = ("identity", "relu", "gelu_tanh", "gelu_erf", "silu", "sigmoid", "tanh", "leaky_relu")


def _products(probe, c, batch, nb, mnk) -> Iterator[Match]:
    (mn, m), (nn, n), (kn, k) = mnk
    # a parameter is one size, or several equal ones (a square product's N); never part of two
    used = [p for atom in {mn, nn, kn} - {""} for p in atom.split("*")]
    if len(set(used)) != len(used) or nb * m * n != probe.sizes[c] or k < 2:
        return
    floats = list(probe.float_scalars().items())
    mats = [a for a in probe.inputs_of() if a != c]
    got = probe.outputs[c]
    for a, b in itertools.permutations(mats, 2):
        if probe.sizes[a] != nb * m * k or probe.sizes[b] != nb * k * n:
            continue
        for ta, tb in itertools.product((False, True), repeat=2):
            A = probe.values[a].reshape((nb, k, m) if ta else (nb, m, k))
            B = probe.values[b].reshape((nb, n, k) if tb else (nb, k, n))
            prod = (A.transpose(0, 2, 1) if ta else A) @ (B.transpose(0, 2, 1) if tb else B)
            for alpha, av in [(None, 1.0), *floats]:
                for beta, bv in [(None, 0.0), *((f, v) for f, v in floats if f != alpha)]:
                    if beta is not None and not probe.arg(c).in_out:
                        continue
                    base = av * prod + (bv * probe.values[c].reshape(nb, m, n) if beta else 0.0)
                    for bias in [None, *(v for v in probe.inputs_of(n) if v not in (a, b, c))]:
                        pred = base + (probe.values[bias][None, None, :] if bias else 0.0)
                        for act in GEMM_ACTS:                 # a fused linear layer's activation after the bias
                            if not close(got, FUNCTIONS[act][0](pred).reshape(-1), rtol=5e-3):
                                continue
                            binding = {"a": a, "b": b, "c": c, "m": mn or None, "n": nn, "k": kn,
                                       "alpha": alpha, "beta": beta, "bias": bias}
                            if batch:
                                binding["batch"] = batch
                            yield Match("gemm", binding, {"trans_a": ta, "trans_b": tb,
                                                          **({"act": act} if act != "identity" else {})})
                            break


def find_histogram(probe) -> Iterator[Match]:
    """Counts (integer, or whole numbers in a float output as torch.histc gives them) of integer
    values (each value its bin, modulo the bins, or bins of a few consecutive values) or of real
    values in equal bins of a range."""
    outs = probe.buffers(output=True)
    if len(outs) != 1:
        return
    h = outs[0]
    bins = probe.sizes[h]
    got = probe.outputs[h]
    if probe.arg(h).param.dtype.is_float:
        yield from _weighted(probe, h, bins, got)
    if not np.all(np.isfinite(got)) or not np.array_equal(got, np.round(got)) or got.min() < 0:
        return
    for x in probe.inputs_of():
        yield from _ranged(probe, x, h, bins, got)
    if probe.arg(h).param.dtype.is_float:
        return
    for x in probe.inputs_of(floating=False):
        v = probe.values[x].astype(np.int64)
        if v.size == 0:
            continue
        for mode, vals in (("direct", v), ("ignore", v[(v >= 0) & (v < bins)]), ("modulo", v % bins)):
            if vals.size == 0 or vals.min() < 0 or vals.max() >= bins or (mode == "ignore" and vals.size == v.size):
                continue
            if np.array_equal(got, np.bincount(vals, minlength=bins)):
                yield Match("histogram", {"x": x, "bins": h, "n": next(iter(probe.params_of(v.size)), None),
                                            "nbins": next(iter(probe.params_of(bins)), None)}, {"index": mode})
        yield from _binned(probe, x, h, v, bins, got)
    return


def _weighted(probe, h, bins, got) -> Iterator[Match]:
    """Weights summed by bin: ``h[b] = sum of w[i] where x[i] = b`` (torch.bincount with weights, a
    segment sum by class), x integer values in [0, bins) (or the others skipped, or taken modulo the
    bins), w a float input of x's size."""
    for x in probe.inputs_of(floating=False):
        v = probe.values[x].astype(np.int64)
        for wb in probe.inputs_of(v.size, floating=True):
            if wb in (x, h) or v.size == 0:
                continue
            wv = probe.values[wb].astype(np.float64)
            for mode, keep in (("direct", np.ones(v.size, bool)), ("ignore", (v >= 0) & (v < bins)),
                               ("modulo", None)):
                vals = v % bins if keep is None else v[keep]
                if vals.size == 0 or vals.min() < 0 or vals.max() >= bins or (mode == "ignore" and keep.all()):
                    continue
                want = np.bincount(vals, weights=wv if keep is None else wv[keep], minlength=bins)
                if close(got, want, rtol=1e-4):
                    yield Match("histogram", {"x": x, "bins": h, "weights": wb,
                                              "n": next(iter(probe.params_of(v.size)), None),
                                              "nbins": next(iter(probe.params_of(bins)), None)}, {"index": mode})
                    return


#: where a binned histogram's range may start: 0, and the codes of ' ', '0', 'A' and 'a'
_BIN_STARTS = (0, 32, 48, 65, 97)


def _binned(probe, x, h, v, bins, got) -> Iterator[Match]:
    """Values in [lo, lo + span) counted in bins of `width` consecutive values, the others skipped:
    PMPP's letter histogram, bin (c - 'a') / 4 of the 26 letters (7 bins, the last one short)."""
    for width in range(2, 17):
        for lo in _BIN_STARTS:
            for span in range((bins - 1) * width + 1, bins * width + 1):
                keep = (v >= lo) & (v < lo + span)
                if keep.all() or not keep.any():
                    continue
                if np.array_equal(got, np.bincount((v[keep] - lo) // width, minlength=bins)):
                    yield Match("histogram", {"x": x, "bins": h, "n": next(iter(probe.params_of(v.size)), None),
                                              "nbins": next(iter(probe.params_of(bins)), None)},
                                {"index": "binned", "lo": lo, "span": span, "width": width})
                    return


#: a range no parameter carries: [0, 1) (a probability, a normalised pixel) and [-1, 1)
_CONST_RANGES = ((0.0, 1.0), (-1.0, 1.0))


def _ranged(probe, x, h, bins, got) -> Iterator[Match]:
    """Real values counted in ``bins`` equal bins of [lo, hi] (torch.histc, NumPy's histogram: a
    value equal to hi in the last bin; ``edge="open"``: [lo, hi), hi skipped), or of ``width``
    from lo; values outside skipped, or clamped into the end bins.  The range is two float
    parameters, a parameter and a width, or a constant range.  The bin is worked out in float64,
    as the bound pattern works it out (a float32 product could round a value across an edge)."""
    v = probe.values[x]
    v = v[np.isfinite(v)] if v.size else v
    if v.size < 2 or v.size != probe.sizes[x]:
        return
    floats = probe.float_scalars()
    n = next(iter(probe.params_of(v.size)), None)
    nbins = next(iter(probe.params_of(bins)), None)
    ranges = [((lo, hi), (floats[lo], floats[hi]), "range") for lo, hi in itertools.permutations(floats, 2)
              if floats[lo] < floats[hi]]
    ranges += [((lo, w), (floats[lo], floats[lo] + bins * floats[w]), "width")
               for lo, w in itertools.permutations(floats, 2) if floats[w] > 0]
    ranges += [((None, None), r, "range") for r in _CONST_RANGES]
    for (lo_name, hi_name), (lo, hi), form in ranges:
        if form == "width":
            t = (v - lo) / floats[hi_name]
        else:
            t = (v - lo) * bins / (hi - lo)
        idx = np.floor(t)
        inside = (v >= lo) & (v <= hi)
        if not inside.any():
            continue
        for edge, outside in itertools.product(("closed", "open"), ("skip", "clamp")):
            b = np.where(v == hi, bins - 1 if edge == "closed" else bins, idx)
            if outside == "clamp":
                b = np.clip(b, 0, bins - 1)
            keep = (b >= 0) & (b < bins)
            counts = np.bincount(b[keep].astype(np.int64), minlength=bins)[:bins]
            if np.array_equal(got, counts):
                binding = {"x": x, "bins": h, "n": n, "nbins": nbins}
                binding.update({"lo": lo_name, "width": hi_name} if form == "width" else {"lo": lo_name, "hi": hi_name})
                yield Match("histogram", binding, {"index": form, "lo": lo, "hi": hi, "edge": edge, "outside": outside})
                return
