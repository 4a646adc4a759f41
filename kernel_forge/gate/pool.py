"""Several GPUs of one host: one gate (one worker process) per device, candidates gated in parallel.

:class:`GatePool` is a :class:`~kernel_forge.gate.gatelike.GateLike` whose :meth:`evaluate_many` hands
an iteration's candidates to the devices as they free up (one candidate per device at a time) and
returns the verdicts in the candidates' order, each stamped with the device that produced it.
Everything that compares kernels stays on one device, the pool's first: the side-by-side
re-measurement of contenders (:meth:`retime`), the vendor baselines, the holdout and the profile,
so a comparison never mixes GPUs.  Each device's gate calibrates itself (its own copy bandwidth
and peaks), so each verdict's % of peak is against the GPU that ran it.  All gates share the same
input seeds, so every candidate is checked on the same draws whichever GPU it lands on.

A device whose gate fails outside a candidate's fault (its worker cannot start again, the GPU is
gone) takes only the candidate it was running down — that candidate gets ``worker_died`` with the
message — and the device leaves the pool; the other devices carry on with the rest.
"""
from __future__ import annotations

import dataclasses
import queue
import threading
from collections.abc import Callable, Sequence

from kernel_forge.model.candidate import Candidate
from kernel_forge.common.errors import InputError, KForgeError
from kernel_forge.model.verdict import Evaluation


def parse_devices(spec: str | Sequence[int] | None, count: int) -> list[int]:
    """``"0,1"``, ``"all"``, ``[0, 2]`` or None (device 0) -> ordinals, checked against ``count``."""
    if spec is None or spec == "":
        ids = [0]
    elif isinstance(spec, str):
        text = spec.strip().lower()
        if text == "all":
            ids = list(range(count))
        else:
            try:
                ids = [int(x) for x in text.split(",") if x.strip()]
            except ValueError:
                raise InputError(f"--devices {spec!r}: give GPU ordinals like 0,1 or 'all'") from None
    else:
        ids = [int(x) for x in spec]
    if not ids:
        raise InputError(f"--devices {spec!r} names no GPU")
    if len(set(ids)) != len(ids):
        raise InputError(f"--devices {spec!r} names a GPU twice")
    bad = [i for i in ids if i < 0 or i >= count]
    if bad:
        raise InputError(f"--devices {spec!r}: no GPU {bad[0]} (this machine has {count}: 0..{count - 1})")
    return ids


class GatePool:
    """One gate per device; ``gates[0]`` is the reference device for every comparison."""

    def __init__(self, gates: Sequence, devices: Sequence[int]):
        if not gates or len(gates) != len(devices):
            raise ValueError("a pool needs one gate per device")
        self.gates = list(gates)
        self.devices = list(devices)
        self._alive = list(range(len(self.gates)))
        self._lock = threading.Lock()
        self.progress: Callable[[str], None] = lambda message: None

    @classmethod
    def for_devices(cls, task, options, devices: Sequence[int]) -> "GatePool":
        """Real gates, one per device, sharing the first gate's input seeds."""
        from kernel_forge.gate.gate import Gate

        first = Gate(task, dataclasses.replace(options, device=devices[0]))
        gates = [first] + [Gate(task, dataclasses.replace(options, device=d, fresh_seeds=list(first.options.fresh_seeds)))
                           for d in devices[1:]]
        return cls(gates, devices)

    @property
    def primary(self):
        return self.gates[self._alive[0]] if self._alive else self.gates[0]

    # -- parallel gating -----------------------------------------------------------------------
    def evaluate_many(self, candidates: Sequence[Candidate], *, roles=("correctness", "performance"),
                      kind: str = "candidate", should_stop: Callable[[], bool] = lambda: False,
                      on_result: Callable[[int, Evaluation], None] = lambda i, ev: None
                      ) -> list[Evaluation | None]:
        """Gate ``candidates`` on every live device at once; verdicts in the candidates' order.
        ``should_stop`` is asked before each candidate starts (a time limit): the ones not started
        come back as None.  ``on_result(i, ev)`` is called (from the device's thread, one call at a
        time) as each verdict arrives, so the caller records it at once."""
        results: list[Evaluation | None] = [None] * len(candidates)
        todo: "queue.Queue[int]" = queue.Queue()
        for i in range(len(candidates)):
            todo.put(i)

        def work(slot: int) -> None:
            gate, device = self.gates[slot], self.devices[slot]
            while True:
                if should_stop():
                    return
                try:
                    i = todo.get_nowait()
                except queue.Empty:
                    return
                try:
                    ev = gate.evaluate(candidates[i], roles=roles, kind=kind)
                except KForgeError as exc:   # the device, not the candidate: leave the pool
                    results[i] = Evaluation(label=candidates[i].name, passed=False, reason="worker_died",
                                            message=f"GPU {device} failed: {exc}", sha256=candidates[i].sha256)
                    results[i].device = device
                    with self._lock:
                        if slot in self._alive and len(self._alive) > 1:
                            self._alive.remove(slot)
                        on_result(i, results[i])
                    self.progress(f"[kforge] GPU {device} left the pool: {exc}")
                    return
                ev.device = device
                results[i] = ev
                with self._lock:
                    on_result(i, ev)

        with self._lock:
            slots = list(self._alive)
        threads = [threading.Thread(target=work, args=(s,), name=f"kforge-gpu{self.devices[s]}", daemon=True)
                   for s in slots]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        return results

    # -- GateLike: everything that compares runs on the primary device --------------------------
    def evaluate(self, candidate: Candidate, *, roles=("correctness", "performance"), kind: str = "candidate",
                 **kw) -> Evaluation:
        ev = self.primary.evaluate(candidate, roles=roles, kind=kind, **kw)
        ev.device = self.devices[self.gates.index(self.primary)]
        return ev

    def retime(self, candidates: list[Candidate], rounds: int = 2) -> list[Evaluation]:
        return self.primary.retime(candidates, rounds=rounds)

    def evaluate_baseline(self, name: str) -> Evaluation:
        return self.primary.evaluate_baseline(name)

    def device_info(self) -> dict | None:
        return self.primary.device_info()

    def devices_info(self) -> list[dict | None]:
        return [g.device_info() for g in self.gates]

    def calibrate(self) -> dict | None:
        return self.primary.calibrate()

    def precompile(self, candidates: list[Candidate]) -> None:
        self.primary.precompile(candidates)

    def profile(self, candidate: Candidate, cases: list[str]) -> dict:
        return self.primary.profile(candidate, cases)

    def ensure_gpu(self) -> None:
        for g in self.gates:
            g.ensure_gpu()

    def close(self) -> None:
        for g in self.gates:
            g.close()
