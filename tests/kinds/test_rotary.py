"""kernel_forge/kinds/rotary.py: rotary position embeddings read from a reference and bound (the
public signatures themselves: test_kinds.py; under host emulation: test_kinds_emulated.py)."""
from __future__ import annotations

import numpy as np
import pytest

from kernel_forge.kinds import identify
from kernel_forge.kinds.bind import Unbindable, instantiate
from kernel_forge.kinds.fit import classify
from kernel_forge.kinds.rotary import rotated
from kernel_forge.model.task import load_task

from tests.support.kind_tasks import check_match, copy_task


@pytest.mark.parametrize("pairing", ["halves", "interleaved"])
@pytest.mark.parametrize("table", ["split", "pairs", "full"])
def test_the_inverse_rotation_undoes_the_rotation_for_every_layout(pairing, table):
    rng = np.random.default_rng(3)
    d, period, heads = 8, 5, 3
    x = rng.normal(size=2 * period * heads * d)
    angles = rng.uniform(-3, 3, size=(period, d if table == "full" else d // 2))
    if table == "pairs":
        tabs = (np.stack([np.cos(angles), np.sin(angles)], axis=-1).reshape(-1),)
    else:
        tabs = (np.cos(angles).reshape(-1), np.sin(angles).reshape(-1))
    y = rotated(x, d, pairing, table, tabs, period, heads)
    assert not np.allclose(y, x)
    if table != "full":       # one angle a pair: a rotation, undone by the inverse (full tables need not be one)
        assert np.allclose(rotated(y, d, pairing, table, tabs, period, heads, inverse=True), x)
        assert np.isclose(np.linalg.norm(y), np.linalg.norm(x))         # a rotation keeps the length


def test_the_rows_position_counts_heads_within_a_token():
    """[B, T, H, d]: the H rows of one token share its position; [B*H, T, d] would not."""
    d, period, heads = 4, 3, 2
    x = np.ones(2 * period * heads * d)
    angles = np.arange(period * d // 2, dtype=np.float64).reshape(period, d // 2)
    tabs = (np.cos(angles).reshape(-1), np.sin(angles).reshape(-1))
    rows = rotated(x, d, "halves", "split", tabs, period, heads).reshape(-1, d)
    assert np.allclose(rows[0], rows[1]) and not np.allclose(rows[1], rows[2])
    assert np.allclose(rows[0], rows[heads * period])             # the next batch starts at position 0 again


BACKWARD = '''
def rope_backward(src, cos, sin, dst, bh, td, d, stride_b):
    """The gradient of candle's rope: each pair rotated back by its angle."""
    t = td // d
    x = src.reshape(bh, t, d).astype(np.float64)
    c = cos.reshape(t, d // 2).astype(np.float64); s = sin.reshape(t, d // 2).astype(np.float64)
    a, b = x[..., : d // 2], x[..., d // 2:]
    dst[...] = np.concatenate([a * c + b * s, b * c - a * s], axis=-1).reshape(dst.shape)
'''


def test_a_rotation_back_is_read_as_the_inverse_and_bound_so(tmp_path):
    task = load_task(copy_task(tmp_path, "rope_candle", lambda d: d.update(reference={"python": "refs.py:rope_backward"}),
                               BACKWARD))
    found = identify(task)
    check_match(found, "rope", {"x": "src", "y": "dst", "cos": "cos", "sin": "sin", "cols": "d", "span": "td"},
                {"pairing": "halves", "inverse": True})
    [bound] = instantiate(task, found.match)
    assert "#define KF_INVERSE 1" in bound.source and "#define KF_INTERLEAVED 0" in bound.source


SHIFTED = '''
def rope_shifted(src, cos, sin, dst, bh, td, d, stride_b):
    """Not a rope of any layout the kind knows: each row takes the angles of the next position."""
    t = td // d
    x = src.reshape(bh, t, d).astype(np.float64)
    c = np.roll(cos.reshape(t, d // 2), -1, axis=0); s = np.roll(sin.reshape(t, d // 2), -1, axis=0)
    a, b = x[..., : d // 2], x[..., d // 2:]
    dst[...] = np.concatenate([a * c - b * s, b * c + a * s], axis=-1).reshape(dst.shape)
'''


def test_angles_of_another_position_are_not_read_as_a_rope(tmp_path):
    task = load_task(copy_task(tmp_path, "rope_candle", lambda d: d.update(reference={"python": "refs.py:rope_shifted"}),
                               SHIFTED))
    found = identify(task)
    assert found.match is None or found.match.kind != "rope", found.match.describe()


def test_pairs_of_halves_without_the_row_length_are_not_bound(tmp_path):
    """candle's rope with its ``d`` left out of the signature: the halves cannot be found, so no
    pattern is written (the interleaved rope_i needs no d: test_kinds.py)."""
    def edit(d):
        d["signature"] = d["signature"].replace(", const uint32_t d,", ",")
        del d["args"]["d"]
        d["reference"] = {"python": "refs.py:rope_no_d"}
    ref = ("def rope_no_d(src, cos, sin, dst, bh, td, stride_b):\n"
           "    rope_candle(src, cos, sin, dst, bh, td, 32, stride_b)\n")
    task = load_task(copy_task(tmp_path, "rope_candle", edit, ref))
    found = identify(task)
    assert found.match is not None and found.match.kind == "rope", found.why
    assert found.match.binding.get("cols") is None
    with pytest.raises(Unbindable, match="row length"):
        instantiate(task, found.match)


def test_a_rope_is_named_by_its_name_before_anything_runs():
    from tests.support.kind_tasks import DATA

    assert classify(load_task(DATA / "rope_llmc.json")).kind == "rope"


def test_by_position_only_the_first_rot_values_of_each_head_turn():
    from kernel_forge.kinds.rotary import rotated_tokens

    rng = np.random.default_rng(5)
    tokens, heads, d, rot = 3, 2, 8, 4
    x = rng.normal(size=tokens * heads * d)
    cache = rng.uniform(-1, 1, size=(6, rot))
    positions = np.array([5, 0, 5])
    y = rotated_tokens(x, d, rot, "halves", "cache", (cache.reshape(-1),), positions).reshape(tokens, heads, d)
    xs = x.reshape(tokens, heads, d)
    assert np.array_equal(y[:, :, rot:], xs[:, :, rot:]) and not np.allclose(y[:, :, :rot], xs[:, :, :rot])
    c, s = cache[5, :2], cache[5, 2:]                       # token 0 at position 5: cos then sin
    assert np.allclose(y[0, 1, :2], xs[0, 1, :2] * c - xs[0, 1, 2:4] * s)
    alone = rotated_tokens(xs[2].reshape(-1), d, rot, "halves", "cache", (cache.reshape(-1),), np.array([5]))
    assert np.allclose(alone.reshape(heads, d), y[2])       # a token's rotation depends on its position alone


def test_vllm_s_kernel_is_bound_with_its_token_count_from_the_launch():
    from tests.support.kind_tasks import DATA

    task = load_task(DATA / "vllm_rotary_f16.json")
    [bound] = instantiate(task, identify(task).match)
    assert bound.label == "bound_rope_tokens.cu" and "// kforge: grid = [(T), 1, 1]" in bound.source
    assert "#define KF_TABLE 1" in bound.source and "kf_rope_tokens(reinterpret_cast<const kf_pos_t*>(positions), " \
        "query, key, cos_sin_cache, cos_sin_cache" in bound.source
