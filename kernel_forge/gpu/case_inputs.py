"""A case's inputs on the GPU: (case, seed)'s buffers drawn and uploaded into a block of their own,
found again while resident and unchanged, and the expected outputs uploaded masked beside them.
"""
from __future__ import annotations

import numpy as np

from kernel_forge.gpu import mask
from kernel_forge.gpu.failure import classify
from kernel_forge.gpu.fingerprint import fingerprint_named, new_key
from kernel_forge.gpu.resident import Block, CaseBuffers, Resident, case_layout, free_room, memset
from kernel_forge.model.inputs import generate
from kernel_forge.model.task import Task
from kernel_forge.model.tolerance import device_expected
from kernel_forge.model.worker_protocol import Observation

__all__ = ["CaseInputs"]


class CaseInputs:
    """The cases' buffers of one worker: drawn from the task's seeds, kept in ``resident``."""

    def __init__(self, task: Task, stream, resident: Resident, *, separate_buffers: bool = False):
        self.task = task
        self.stream = stream
        self.resident = resident
        self.separate_buffers = separate_buffers   #: every buffer its own allocation (compute-sanitizer)

    def _fps(self, arrays: dict[str, object], key: int) -> dict[str, int]:
        return fingerprint_named(arrays, key, self.stream)

    def upload(self, case, seed: int) -> CaseBuffers:
        """Draw (case, seed)'s inputs and put them in a block of their own, laid out as
        :mod:`.resident` says (the same offsets in every mode and worker)."""
        host = generate(self.task, case, seed)
        bufs = CaseBuffers(case=case.name, seed=seed, key=new_key(), scalars=dict(host.scalars))
        shapes = {a.name: tuple(host.buffers[a.name].shape) for a in self.task.outputs}
        slots, size = case_layout(self.task, host.buffers, shapes)
        bufs.slots = {(s.kind, s.name): s for s in slots}
        try:
            block = Block(size, separate=self.separate_buffers)
        except Exception as exc:  # noqa: BLE001 - out of memory: the other cases' blocks go first
            if classify(exc).kind != "out_of_memory" or not self.resident.entries:
                raise
            self.resident.clear()
            block = Block(size, separate=self.separate_buffers)
        bufs.block = block
        with self.stream:
            for arg in self.task.args:
                if not arg.is_buffer:
                    continue
                values = np.ascontiguousarray(host.buffers[arg.name])
                dev = block.array(bufs.slots[("kernel", arg.name)].offset, values.shape, values.dtype)
                if arg.init is None:            # a pure output: poisoned before every launch anyway
                    bufs.work[arg.name] = dev
                elif arg.param.const:
                    dev.set(values, stream=self.stream)
                    bufs.const[arg.name] = dev
                else:
                    init = block.array(bufs.slots[("initial", arg.name)].offset, values.shape, values.dtype)
                    init.set(values, stream=self.stream)
                    bufs.initial[arg.name] = init
                    bufs.work[arg.name] = dev
            if not block.separate:       # the bytes no buffer uses: zeroed, and watched like the inputs
                for offset, nbytes in free_room(slots, block.size):
                    room = block.array(offset, (nbytes,), np.uint8)
                    memset(room, 1, 0, self.stream.ptr, "zeroing the unused room of a case's block")
                    bufs.free[f"free room at +{offset}"] = room
        bufs.fingerprints = self._fps({**bufs.const, **bufs.initial, **bufs.free}, bufs.key)
        self.resident.put(bufs)
        return bufs

    def buffers(self, case, seed: int, obs: Observation) -> CaseBuffers:
        """(case, seed)'s buffers: the resident ones unless something changed them (named in
        ``obs.restored``), else drawn and uploaded again."""
        bufs = self.resident.get(case.name, seed)
        if bufs is not None:
            held = {n: bufs.held(n) for n in bufs.fingerprints}
            now = self._fps(held, bufs.key)
            damaged = [n for n, fp in now.items() if fp != bufs.fingerprints[n]]
            if bufs.expected is not None:
                exp_now = self._fps(bufs.expected, bufs.expected_key)
                if exp_now != bufs.expected_fingerprints:
                    damaged.append("expected values")
            if damaged:
                obs.restored = damaged
                self.resident.drop(case.name, seed)
                bufs = None
            else:
                obs.resident = True
        return bufs if bufs is not None else self.upload(case, seed)

    def set_expected(self, bufs: CaseBuffers, expected: dict[str, np.ndarray]) -> None:
        """Upload the expected outputs and mask them at once (no candidate runs in between): only
        the comparison kernel, given ``bufs.mask_key`` after the candidate's launches, undoes it."""
        import cupy as cp

        task = self.task
        bufs.mask_key = new_key() if mask.enabled() else None
        bufs.expected, bufs.expected_outside = {}, set()
        with self.stream:
            for a in task.outputs:
                values = np.ascontiguousarray(device_expected(expected[a.name], a.param.dtype, task.tolerance_for(a)))
                dev = bufs.expected_slot(a.name, values)       # the room kept in the case's block
                if dev is None:
                    dev = cp.asarray(values)
                    bufs.expected_outside.add(a.name)
                else:
                    dev.set(values, stream=self.stream)
                bufs.expected[a.name] = dev
        if bufs.mask_key is not None:
            for arr in bufs.expected.values():
                mask.mask_inplace(arr, bufs.mask_key, self.stream)
        bufs.expected_dtypes = {a.name: np.asarray(expected[a.name]).dtype for a in task.outputs}
        bufs.expected_key = new_key()
        bufs.expected_fingerprints = self._fps(bufs.expected, bufs.expected_key)
        self.resident.trim(keep=bufs)
