"""Tests of kernel_forge/gpu/case_inputs.py, on tests/fake_gpu.py's stand-in for CuPy and the driver."""
from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

from tests.support import fake_gpu
import kernel_forge.gpu.case_inputs as case_inputs_mod
from kernel_forge.gpu.case_inputs import CaseInputs
from kernel_forge.gpu.mask import host_mask
from kernel_forge.gpu.resident import PAGE, Resident
from kernel_forge.model.inputs import generate
from kernel_forge.model.task import load_task
from kernel_forge.model.worker_protocol import Observation

ROOT = Path(__file__).resolve().parents[2]
VECTOR_ADD = load_task(ROOT / "manifests" / "vector_add.json")   # a, b: const inputs; c: a pure output
HISTOGRAM = load_task(ROOT / "manifests" / "histogram.json")     # x: const input; bins: in/out (zeros)


@pytest.fixture
def inputs(monkeypatch):
    fake_gpu.install(monkeypatch)

    def make(task=VECTOR_ADD, budget=1 << 30):
        return CaseInputs(task, sys.modules["cupy"].cuda.Stream(), Resident(budget))
    return make


def host(arr) -> np.ndarray:
    return np.asarray(arr.a)


def test_an_upload_holds_the_drawn_inputs_in_one_block_with_its_unused_room_zeroed(inputs):
    ci = inputs()
    bufs = ci.upload(VECTOR_ADD.case("tiny"), 5)                     # n = 37
    drawn = generate(VECTOR_ADD, VECTOR_ADD.case("tiny"), 5)
    assert set(bufs.const) == {"a", "b"} and set(bufs.work) == {"c"} and bufs.initial == {}
    assert np.array_equal(host(bufs.const["a"]), drawn.buffers["a"]) and np.array_equal(host(bufs.const["b"]),
                                                                                         drawn.buffers["b"])
    assert bufs.scalars == {"n": 37} and bufs.block.size == PAGE
    # a's 148 bytes start the block; the room up to b's slot at 512 is the first unused run
    assert bufs.slots[("kernel", "a")].offset == 0 and "free room at +148" in bufs.free
    assert all(not host(room).any() for room in bufs.free.values())
    assert set(bufs.fingerprints) == {"a", "b", *bufs.free}
    assert ci.resident.get("tiny", 5) is bufs


def test_an_in_out_buffer_gets_a_pristine_copy_beside_the_one_the_kernel_writes(inputs):
    bufs = inputs(HISTOGRAM).upload(HISTOGRAM.case("few_bins"), 0)
    assert set(bufs.const) == {"x"} and set(bufs.initial) == {"bins"} and set(bufs.work) == {"bins"}
    assert host(bufs.initial["bins"]).tolist() == [0, 0, 0]
    assert bufs.initial["bins"].data.ptr != bufs.work["bins"].data.ptr
    assert set(bufs.fingerprints) >= {"x", "bins"}


def test_unchanged_resident_buffers_are_used_again_and_changed_ones_are_drawn_afresh(inputs):
    ci = inputs()
    case = VECTOR_ADD.case("tiny")
    first = ci.upload(case, 5)
    obs = Observation(case="tiny", seed=5)
    assert ci.buffers(case, 5, obs) is first and obs.resident and obs.restored == []
    original = host(first.const["a"]).copy()
    first.const["a"].a[3] += 1.0                                      # a kernel wrote its const input
    next(iter(first.free.values())).a[0] = 7                          # and kept something in the unused room
    obs = Observation(case="tiny", seed=5)
    again = ci.buffers(case, 5, obs)
    assert again is not first and not obs.resident
    assert obs.restored == ["a", "free room at +148"]
    assert np.array_equal(host(again.const["a"]), original)          # the same draw, uploaded again
    assert ci.resident.get("tiny", 5) is again
    fresh = Observation(case="tiny", seed=6)                           # another draw: not resident
    assert ci.buffers(case, 6, fresh).seed == 6 and not fresh.resident and not fresh.restored


def test_the_expected_values_are_stored_masked_in_their_slot_and_their_change_is_noticed(inputs):
    ci = inputs()
    case = VECTOR_ADD.case("tiny")
    bufs = ci.upload(case, 2)
    expected = np.arange(37, dtype=np.float32)
    ci.set_expected(bufs, {"c": expected})
    stored = bufs.expected["c"]
    assert stored.data.ptr == bufs.block.base + bufs.slots[("expected", "c")].offset and bufs.expected_outside == set()
    assert bufs.mask_key is not None and not np.array_equal(host(stored), expected)
    assert np.array_equal(host_mask(host(stored), bufs.mask_key), expected)      # masked, not lost
    assert bufs.expected_dtypes == {"c": np.dtype(np.float32)}
    stored.a.view(np.uint32)[0] ^= 1                                  # one bit of the expected copy flipped
    obs = Observation(case="tiny", seed=2)
    assert ci.buffers(case, 2, obs) is not bufs and obs.restored == ["expected values"]


def test_out_of_memory_evicts_the_other_cases_and_tries_once_more(inputs, monkeypatch):
    ci = inputs()
    ci.upload(VECTOR_ADD.case("tiny"), 1)
    real, calls = case_inputs_mod.Block, []

    class OutOfMemoryError(Exception):
        pass

    def block(size, separate=False):
        calls.append(size)
        if len(calls) == 1:
            raise OutOfMemoryError(f"Out of memory allocating {size:,} bytes")
        return real(size, separate=separate)

    monkeypatch.setattr(case_inputs_mod, "Block", block)
    bufs = ci.upload(VECTOR_ADD.case("tiny"), 5)
    assert len(calls) == 2 and list(ci.resident.entries) == [("tiny", 5)]
    monkeypatch.setattr(case_inputs_mod, "Block", lambda size, separate=False: (_ for _ in ()).throw(ValueError("bad")))
    with pytest.raises(ValueError):                                   # any other error is not retried
        ci.upload(VECTOR_ADD.case("tiny"), 1)
    assert ci.resident.get("tiny", 5) is bufs
