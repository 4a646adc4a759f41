"""Hypotheses with index arithmetic of their own: matrix products (transposes, alpha, beta, a bias
epilogue) and histograms (integer counts of integer values)."""
from __future__ import annotations

import itertools

import numpy as np

from typing import Iterator

from kernel_forge.kinds.match import Match, close


def find_gemm(probe) -> Iterator[Match]:
    outs = probe.buffers(output=True, floating=True)
    if len(outs) != 1 or len(probe.buffers(output=True)) != 1:
        return
    c = outs[0]
    ints = list(probe.int_scalars().items())
    atoms = ints + [(f"{a}*{b}", va * vb) for (a, va), (b, vb) in itertools.combinations(ints, 2)]
    floats = list(probe.float_scalars().items())
    mats = [a for a in probe.inputs_of() if a != c]
    got = probe.outputs[c]
    for (mn, m), (nn, n), (kn, k) in itertools.permutations(atoms, 3):
        used = [*mn.split("*"), *nn.split("*"), *kn.split("*")]
        if len(set(used)) != len(used) or m * n != probe.sizes[c] or k < 2:
            continue
        for a, b in itertools.permutations(mats, 2):
            if probe.sizes[a] != m * k or probe.sizes[b] != k * n:
                continue
            for ta, tb in itertools.product((False, True), repeat=2):
                A = probe.values[a].reshape((k, m) if ta else (m, k))
                B = probe.values[b].reshape((n, k) if tb else (k, n))
                prod = (A.T if ta else A) @ (B.T if tb else B)
                for alpha, av in [(None, 1.0), *floats]:
                    for beta, bv in [(None, 0.0), *((f, v) for f, v in floats if f != alpha)]:
                        if beta is not None and not probe.arg(c).in_out:
                            continue
                        base = av * prod + (bv * probe.values[c].reshape(m, n) if beta else 0.0)
                        for bias in [None, *(v for v in probe.inputs_of(n) if v not in (a, b, c))]:
                            pred = base + (probe.values[bias][None, :] if bias else 0.0)
                            if close(got, pred.reshape(-1), rtol=5e-3):
                                yield Match("gemm", {"a": a, "b": b, "c": c, "m": mn, "n": nn, "k": kn,
                                                       "alpha": alpha, "beta": beta, "bias": bias},
                                              {"trans_a": ta, "trans_b": tb})
    return


def find_histogram(probe) -> Iterator[Match]:
    outs = probe.buffers(output=True)
    if len(outs) != 1 or probe.arg(outs[0]).param.dtype.is_float:
        return
    h = outs[0]
    bins = probe.sizes[h]
    got = probe.outputs[h]
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
    return
