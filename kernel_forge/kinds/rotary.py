"""Rotary position embedding (RoPE): each row of ``d`` values of x is rotated pair by pair by the
angles of its position, read from cos / sin tables.

For pair i of a row at position pos, with (a, b) the pair's two values and c, s the table's:

    out_a = a * c - b * s        out_b = b * c + a * s        (``inverse``: the rotation by -angle)

The hypotheses cover the layouts public kernels use:

- **pairing** ``interleaved`` (a, b) = (x[2i], x[2i+1]) -- GPT-J, candle's ``rope_i``, llm.c's
  llama3 ``rope_forward`` -- or ``halves`` (x[i], x[i + d/2]) -- GPT-NeoX, candle's ``rope``, the
  ``rotate_half`` of Hugging Face models;
- **table** ``split``: cos and sin, each ``[T, d/2]``; ``pairs``: one table ``[T, d/2, 2]`` of
  (cos, sin) pairs (llm.c's ``freqs_cis``); ``full``: cos and sin each ``[T, d]``, one angle per
  value (HF's ``q * cos + rotate_half(q) * sin``); ``computed``: no table, the angles
  ``(t + offset) * base^(-2i/d)`` computed in the kernel (:func:`_find_rope_computed`);
- **position** of row r: ``(r / heads) % T`` -- rows laid out [B, T, d] or [B*H, T, d] (heads 1:
  candle's ``rope``) or [B, T, H, d] (candle's ``rope_thd``, llm.c's);
- in place (y = x) or not;
- or, as serving code writes it (vLLM's ``rotary_embedding_kernel``), by a positions buffer: the
  query and the key ([tokens, heads, d], each its own head count) rotated in place on the first
  ``rot`` values of each head by the angles of ``positions[token]`` (:func:`find_rope_tokens`).

The binding names x, y, the tables (``cos`` and ``sin``, or ``cs`` for a pairs table) and the sizes
the bound pattern needs: ``n`` (the values of x), ``cols`` (d), and either ``span`` (T * d: a table
as long as one period of rows, heads 1) or ``period`` (T) with ``heads``."""
from __future__ import annotations

from typing import Iterator

import numpy as np

from kernel_forge.kinds.match import Match, close, param_for

PAIRINGS = ("halves", "interleaved")
TABLES = ("split", "pairs", "full", "computed")
#: the bases of computed angles tried besides a float parameter's: RoPE's 10,000, Llama 3's 500,000, 1,000,000
BASES = (10000.0, 500000.0, 1000000.0)


def rotated(x: np.ndarray, d: int, pairing: str, table: str, tabs: tuple, period: int, heads: int,
            inverse: bool = False) -> np.ndarray:
    """x (flat, rows of ``d``) rotated as the module docstring says; ``tabs`` the table values (cos,
    sin) or (pairs,), each flat."""
    half = d // 2
    rows = x.size // d
    xs = x.reshape(rows, d)
    pos = (np.arange(rows) // heads) % period
    if pairing == "interleaved":
        col_a, col_b = np.arange(half) * 2, np.arange(half) * 2 + 1
    else:
        col_a, col_b = np.arange(half), np.arange(half) + half
    a, b = xs[:, col_a], xs[:, col_b]
    if table == "split":
        c = tabs[0].reshape(-1, half)[pos]
        s = tabs[1].reshape(-1, half)[pos]
        ca, sa, cb, sb = c, s, c, s
    elif table == "pairs":
        cs = tabs[0].reshape(-1, half, 2)[pos]
        ca, sa = cs[..., 0], cs[..., 1]
        cb, sb = ca, sa
    else:
        c = tabs[0].reshape(-1, d)[pos]
        s = tabs[1].reshape(-1, d)[pos]
        ca, sa, cb, sb = c[:, col_a], s[:, col_a], c[:, col_b], s[:, col_b]
    sign = -1.0 if inverse else 1.0
    out = np.empty_like(xs)
    out[:, col_a] = a * ca - sign * b * sa
    out[:, col_b] = b * cb + sign * a * sb
    return out.reshape(-1)


def _row_lengths(probe, n: int) -> list[int]:
    """Even row lengths d that divide n: the integer scalars' values, the declared last axes of x-sized
    buffers and twice or once the last axis of each other buffer (a table's d / 2 or d)."""
    found = [v for v in probe.int_scalars().values()]
    for a in probe.task.args:
        if a.is_buffer and a.shape:
            last = int(probe.task.shape(a, probe.inputs.case)[-1])
            found += [last, 2 * last]
    return [d for d in dict.fromkeys(found) if d >= 2 and d % 2 == 0 and n % d == 0]


def _tables(probe, x: str, y: str) -> Iterator[tuple[str, tuple[str, ...]]]:
    """(table layout, the tables' names): every ordered pair of other floating-point inputs of one
    size (cos, sin), and every single one (pairs)."""
    others = [t for t in probe.inputs_of(floating=True) if t not in (x, y)]
    for c in others:
        for s in others:
            if s != c and probe.sizes[s] == probe.sizes[c]:
                yield "split", (c, s)
                yield "full", (c, s)
        yield "pairs", (c,)


def find_rope(probe) -> Iterator[Match]:
    """Rotary position embeddings: see the module docstring (rows by their place), with the angles
    computed rather than read (:func:`_find_rope_computed`), and :func:`find_rope_tokens` (by a
    positions buffer, in place)."""
    yield from _find_rope_rows(probe)
    yield from _find_rope_computed(probe)
    yield from find_rope_tokens(probe)


def computed_tables(d: int, period: int, base: float, offset: int) -> tuple[np.ndarray, np.ndarray]:
    """cos and sin [period, d/2] of the angles (position + offset) * base^(-2i/d): RoPE's inverse
    frequencies, as a kernel that computes them (``powf(theta, -2.0f * i / d)``) uses them."""
    inv = base ** (-2.0 * np.arange(d // 2) / d)
    ang = (np.arange(period) + offset)[:, None] * inv[None, :]
    return np.cos(ang).reshape(-1), np.sin(ang).reshape(-1)


def _find_rope_computed(probe) -> Iterator[Match]:
    """Rows rotated by angles a kernel computes, (t + offset) * base^(-2i/d): t the row's position
    ((row / heads) % T), base a float parameter or a usual constant (:data:`BASES`), offset an
    integer parameter or 0."""
    outs = [o for o in probe.buffers(output=True) if probe.arg(o).param.dtype.is_float]
    if len(outs) != 1 or len(probe.buffers(output=True)) != 1:
        return
    y = outs[0]
    n, got = probe.sizes[y], probe.outputs[y]
    ints = probe.int_scalars()
    bases = [(a, v) for a, v in probe.float_scalars().items() if v > 1] + [(None, b) for b in BASES]
    offsets = [(None, 0)] + [(a, v) for a, v in ints.items() if v > 0]
    for x in probe.inputs_of(n):
        for d in _row_lengths(probe, n):
            rows = n // d
            for period in dict.fromkeys([*(v for v in ints.values() if 1 < v <= rows and rows % v == 0)]):
                for heads in dict.fromkeys([1, *(v for v in ints.values() if v > 1 and rows % (v * period) == 0)]):
                    for (b_name, base), (o_name, offset) in ((b, o) for b in bases for o in offsets):
                        tabs = computed_tables(d, period, base, offset)
                        for pairing in PAIRINGS:
                            if close(got, rotated(probe.values[x], d, pairing, "split", tabs, period, heads)):
                                m = _match(probe, x, y, (), "computed", pairing, False, n, d, period, heads)
                                yield Match("rope", {**m.binding, "base": b_name, "offset": o_name},
                                            {**m.params, "base": base})


def _find_rope_rows(probe) -> Iterator[Match]:
    outs = [o for o in probe.buffers(output=True) if probe.arg(o).param.dtype.is_float]
    if len(outs) != 1 or len(probe.buffers(output=True)) != 1:
        return
    y = outs[0]
    n = probe.sizes[y]
    got = probe.outputs[y]
    ints = probe.int_scalars()
    for x in probe.inputs_of(n):
        xv = probe.values[x]
        for d in _row_lengths(probe, n):
            rows, half = n // d, d // 2
            for table, names in _tables(probe, x, y):
                tsize = probe.sizes[names[0]]
                per_row = d if table in ("full", "pairs") else half
                if tsize % per_row:
                    continue
                held = tsize // per_row          # the table's rows: T, or more (a table made for a longer context)
                periods = dict.fromkeys([held, *(v for v in ints.values() if 1 <= v < held)])
                heads_all = dict.fromkeys([1, *(v for v in ints.values() if v > 1 and rows % v == 0)])
                tabs = tuple(probe.values[t] for t in names)
                for period in periods:
                    for heads in heads_all:
                        if heads > 1 and rows % (heads * period):
                            continue
                        for pairing in PAIRINGS:
                            for inverse in (False, True):
                                pred = rotated(xv, d, pairing, table, tabs, period, heads, inverse)
                                if close(got, pred):
                                    yield _match(probe, x, y, names, table, pairing, inverse, n, d, period, heads)


def _table_roles(names: tuple[str, ...]) -> dict:
    """The tables' roles: one table (of pairs, a cache) is ``cs``; two are ``cos`` and ``sin``; none
    (computed angles) none."""
    return {} if not names else {"cs": names[0]} if len(names) == 1 else {"cos": names[0], "sin": names[1]}


def _match(probe, x, y, names, table, pairing, inverse, n, d, period, heads) -> Match:
    binding = {"x": x, "y": y, **_table_roles(names)}
    binding["n"] = param_for(probe, n)
    binding["cols"] = param_for(probe, d)
    span = param_for(probe, period * d) if heads == 1 else None
    if span is not None:
        binding["span"] = span
    else:
        binding["period"] = param_for(probe, period)
        binding["heads"] = param_for(probe, heads) if heads > 1 else None
    return Match("rope", binding, {"pairing": pairing, "table": table, "inverse": inverse})


#: how a table by position holds its two halves: ``cache`` one buffer [P, rot] of cos then sin (vLLM's
#: cos_sin_cache), ``split`` cos and sin each [P, rot/2]
TOKEN_TABLES = ("cache", "split")


def rotated_tokens(x: np.ndarray, d: int, rot: int, pairing: str, table: str, tabs: tuple, positions: np.ndarray,
                   inverse: bool = False) -> np.ndarray:
    """x (flat: tokens x heads x d) with the first ``rot`` values of each head rotated by the angles of
    its token's position (``positions[token]``), the rest as they were."""
    tokens = positions.size
    xs = x.reshape(tokens, -1, d).copy()
    half = rot // 2
    if table == "cache":
        cs = tabs[0].reshape(-1, rot)[positions]
        c, s = cs[:, :half], cs[:, half:]
    else:
        c, s = tabs[0].reshape(-1, half)[positions], tabs[1].reshape(-1, half)[positions]
    ia = np.arange(half) * 2 if pairing == "interleaved" else np.arange(half)
    ib = ia + 1 if pairing == "interleaved" else ia + half
    a, b = xs[:, :, ia], xs[:, :, ib]
    c, s = c[:, None, :], s[:, None, :]
    sign = -1.0 if inverse else 1.0
    xs[:, :, ia], xs[:, :, ib] = a * c - sign * b * s, b * c + sign * a * s
    return xs.reshape(-1)


def find_rope_tokens(probe) -> Iterator[Match]:
    """Rotary embeddings by position, in place, as serving code writes them (vLLM's
    ``rotary_embedding_kernel``): the query and, where there is one, the key ([tokens, heads, d], their
    own head counts) rotated in place on the first ``rot`` values of each head, the angles those of
    ``positions[token]`` in a table by position (``cache``: [P, rot], cos then sin; ``split``)."""
    outs = [o for o in probe.buffers(output=True) if probe.arg(o).init is not None]
    if not 1 <= len(outs) <= 2 or len(outs) != len(probe.buffers(output=True)):
        return
    if not all(probe.arg(o).param.dtype.is_float for o in outs):
        return
    ints = [v for v in probe.int_scalars().values() if v >= 2 and v % 2 == 0]
    for pos_name in probe.inputs_of(floating=False):
        positions = probe.values[pos_name].astype(np.int64)
        tokens = positions.size
        if tokens == 0 or positions.min() < 0 or any(probe.sizes[o] % tokens for o in outs):
            continue
        for d in dict.fromkeys(ints):
            if any(probe.sizes[o] % (tokens * d) for o in outs):
                continue
            for rot in dict.fromkeys(r for r in ints if r <= d):
                for table, names in _tables(probe, outs[0], outs[-1]):
                    if table == "full" or any(t in outs for t in names):
                        continue
                    kind = "cache" if table == "pairs" else "split"
                    per = rot if kind == "cache" else rot // 2
                    if probe.sizes[names[0]] % per or positions.max() >= probe.sizes[names[0]] // per:
                        continue
                    tabs = tuple(probe.values[t] for t in names)
                    for pairing in PAIRINGS:
                        for inverse in (False, True):
                            if all(close(probe.outputs[o], rotated_tokens(probe.values[o], d, rot, pairing, kind, tabs,
                                                                          positions, inverse)) for o in outs):
                                yield _token_match(probe, outs, pos_name, names, kind, pairing, inverse, tokens, d, rot)


def _token_match(probe, outs, pos_name, names, table, pairing, inverse, tokens, d, rot) -> Match:
    binding = {"y": outs[0], **({"y1": outs[1]} if len(outs) > 1 else {}), "pos": pos_name, **_table_roles(names)}
    binding["cols"] = param_for(probe, d)
    binding["rot"] = param_for(probe, rot)
    for j, o in enumerate(outs):
        heads = probe.sizes[o] // (tokens * d)
        binding["heads" + ("1" if j else "")] = param_for(probe, heads) if heads > 1 else None
    return Match("rope", binding, {"pairing": pairing, "table": table, "inverse": inverse, "by": "positions"})
