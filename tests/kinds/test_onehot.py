"""kernel_forge/kinds/onehot.py: cross-entropy's gradient through a softmax read from a reference and
bound (the public signatures: test_kinds.py; under host emulation: test_kinds_emulated.py)."""
from __future__ import annotations

import numpy as np

from kernel_forge.kinds import identify
from kernel_forge.kinds.bind import instantiate
from kernel_forge.kinds.onehot import onehot_grad
from kernel_forge.model.task import load_task

from tests.support.kind_tasks import check_match, copy_task


def test_the_gradient_takes_one_off_the_target_and_zeroes_ignored_rows():
    x = np.full((3, 4), 0.25)
    g = onehot_grad(x, np.array([1, -100, 3]), np.array([[2.0], [5.0], [1.0]]))
    assert g.tolist() == [[0.5, -1.5, 0.5, 0.5], [0.0] * 4, [0.25, 0.25, 0.25, -0.75]]


def test_a_kernel_that_writes_dlogits_is_told_from_one_that_adds_to_them(tmp_path):
    """llm.c's manifest zeroes dlogits first, so both forms fit its values; the rerun on a raised
    start decides (here: the reference that overwrites)."""
    ref = ("def xent_overwrite(dlogits, dlosses, probs, targets, B, T, V):\n"
           "    dlogits[...] = 0.0\n"
           "    xent_softmax_backward(dlogits, dlosses, probs, targets, B, T, V)\n")
    task = load_task(copy_task(tmp_path, "llmc_xent_backward",
                               lambda d: d.update(reference={"python": "refs.py:xent_overwrite"}), ref))
    found = identify(task)
    check_match(found, "onehot_grad", {"y": "dlogits", "w": "dlosses"}, {"scale": "row", "accumulate": False})
    [bound] = instantiate(task, found.match)
    assert "#define KF_ACCUMULATE 0" in bound.source and "#define KF_ROW_SCALE 1" in bound.source


def test_a_one_hot_of_another_column_is_not_this_kind(tmp_path):
    ref = ("def xent_shifted(dlogits, dlosses, probs, targets, B, T, V):\n"
           "    xent_softmax_backward(dlogits, dlosses, probs, (targets + 1) % V, B, T, V)\n")
    task = load_task(copy_task(tmp_path, "llmc_xent_backward",
                               lambda d: d.update(reference={"python": "refs.py:xent_shifted"}), ref))
    found = identify(task)
    assert found.match is None or found.match.kind != "onehot_grad", found.match.describe()
