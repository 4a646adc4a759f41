"""Buffers of (case, seed) kept on the GPU between runs, and the driver calls that reset them.

Inputs are drawn once per (case, seed), uploaded once and kept resident (least recently used
first out, within a GPU-memory budget) with the expected outputs the gate sends once, which are
stored masked (invariant 11, :mod:`.mask`).  A const input is given to the kernel as the
resident copy itself and its keyed fingerprint is checked after every launch; every other buffer
with initial values (in/out outputs, non-const inputs) is restored from a resident copy with a
device-to-device copy before every launch, and pure outputs are poisoned with a driver memset.
No CuPy kernel runs there: the only kernels near a timed launch are the candidate's and the
harness's ``kf_``-named ones.

**One block per (case, seed), laid out the same way everywhere.**  All of a (case, seed)'s
device memory is one allocation that starts on a 2 MiB boundary (:data:`PAGE`, a GPU large
page) and is a whole number of pages; inside it, at offsets that are multiples of
:data:`ALIGN` (512 bytes, as CuPy's pool aligns), in this order: the buffers the kernel gets
(every pointer parameter, in signature order), the initial-value copies of the non-const ones
with an ``init``, then room for the expected values of each output (:func:`block_layout`).  So a
buffer's address modulo 2 MiB, and every buffer's distance from the others, depend only on the
task and the case: not on the mode (--quick or full), on what the worker ran before, or on how
a memory pool happened to reuse freed memory.  Before this, the same histogram kernel timed
6,391 µs under the full gate and 4,410 µs under --quick, each stable across rounds (H200,
bench/evidence/h200-2026-12-02-s6): its 256 bins are hit by millions of global atomics, whose
throughput depends on which L2 slices the bins' lines map to, i.e. on where the pool put them.

The layout is public on purpose: tests/adversarial/memscan_*.cu read the expected values of their
own case straight after their output (unmasked, they find them and win; masked, they find
nothing).  Hiding the answer's address is no defence; masking it is (invariant 11).
"""
from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass, field

import numpy as np

from kernel_forge.common.dtypes import poison_memset
from kernel_forge.model.task import Task
from kernel_forge.gpu import driver
from kernel_forge.gpu.module_state import harness_call


def memset(array, width: int, pattern: int, stream_ptr: int, what: str = "poisoning an output") -> None:
    """Fill ``array`` with a ``width``-byte ``pattern`` (cuMemsetD8/D16/D32Async); ``what`` names it
    in the message of a failure."""
    drv = driver._driver()
    n = int(array.nbytes) // width
    if not n:
        return
    name = {1: "cuMemsetD8Async", 2: "cuMemsetD16Async", 4: "cuMemsetD32Async"}[width]
    harness_call(getattr(drv, name)(int(array.data.ptr), int(pattern), n, drv.CUstream(stream_ptr)),
                 f"{name}({what})")


def copy(dst, src, stream_ptr: int) -> None:
    """``dst[...] = src`` on the stream (cuMemcpyDtoDAsync; same sizes)."""
    drv = driver._driver()
    if int(src.nbytes):
        harness_call(drv.cuMemcpyDtoDAsync(int(dst.data.ptr), int(src.data.ptr), int(src.nbytes),
                                           drv.CUstream(stream_ptr)), "cuMemcpyDtoDAsync(a buffer reset or copy)")


#: every buffer of a block starts at a multiple of this many bytes from the block's start
ALIGN = 512
#: a block starts on a multiple of this (a GPU large page) and is a whole number of them
PAGE = 2 << 20


def _up(n: int, a: int) -> int:
    return (int(n) + a - 1) // a * a


@dataclass(frozen=True)
class Slot:
    """Where one buffer lies in its (case, seed)'s block."""

    kind: str          #: "kernel" (what the kernel gets), "initial" (a pristine copy) or "expected"
    name: str          #: the parameter's name
    offset: int        #: bytes from the block's start (a multiple of ALIGN)
    nbytes: int


def block_layout(parts: list[tuple[str, str, int]]) -> tuple[list[Slot], int]:
    """``(kind, name, nbytes)`` in order -> their slots and the block's size (whole pages)."""
    slots, at = [], 0
    for kind, name, nbytes in parts:
        slots.append(Slot(kind, name, at, int(nbytes)))
        at += _up(max(int(nbytes), 0), ALIGN)
    return slots, _up(max(at, 1), PAGE)


def case_layout(task: Task, host_buffers: dict[str, np.ndarray], output_shapes: dict[str, tuple]
                ) -> tuple[list[Slot], int]:
    """The block of one (case, seed): the kernel's buffers in signature order, the initial-value
    copies of the non-const ones with an ``init``, room for the expected values of each output
    (:func:`kernel_forge.model.tolerance.device_expected_dtype`)."""
    from kernel_forge.model.tolerance import device_expected_dtype

    parts = [("kernel", a.name, host_buffers[a.name].nbytes) for a in task.args if a.is_buffer]
    parts += [("initial", a.name, host_buffers[a.name].nbytes) for a in task.args
              if a.is_buffer and a.init is not None and not a.param.const]
    for a in task.outputs:
        n = int(np.prod(output_shapes[a.name])) if output_shapes[a.name] else 1
        parts.append(("expected", a.name, n * device_expected_dtype(a.param.dtype, task.tolerance_for(a)).itemsize))
    return block_layout(parts)


class Block:
    """One (case, seed)'s device memory: an allocation of whole 2 MiB pages starting on a page
    boundary (cudaMalloc gives that for sizes of whole pages; otherwise a page more is taken and
    the start rounded up), freed when the last array viewing it goes.  ``separate``: every array
    its own allocation of its exact size instead (the sanitizer's child: inside one block, a write
    one past a buffer's end lands in the next slot, where memcheck cannot see it)."""

    def __init__(self, size: int, *, separate: bool = False):
        import cupy

        self._cp = cupy
        self.size = _up(max(int(size), 1), PAGE)
        self.separate = separate
        if separate:         # each array an allocation of its own size (for compute-sanitizer)
            self.mem, self.base = None, 0
            return
        mem = _malloc(self.size)
        if int(mem.ptr) % PAGE:
            del mem
            mem = _malloc(self.size + PAGE)
        self.mem = mem
        self.base = _up(int(mem.ptr), PAGE)

    def array(self, offset: int, shape: tuple, dtype):
        """A CuPy array over ``[base + offset, ...)`` (keeps the block alive)."""
        cp = self._cp
        n = int(np.prod(shape)) if shape else 1
        if self.separate:    # memcheck sees an access past this array's end as out of bounds
            return cp.empty(n, dtype=np.dtype(dtype)).reshape(shape)
        ptr = cp.cuda.MemoryPointer(self.mem, self.base - int(self.mem.ptr) + int(offset))
        return cp.ndarray(n, dtype=np.dtype(dtype), memptr=ptr).reshape(shape)


def free_room(slots: list[Slot], size: int) -> list[tuple[int, int]]:
    """``(offset, nbytes)`` of every run of a block's bytes that no slot covers, in order."""
    out, at = [], 0
    for slot in sorted(slots, key=lambda s: s.offset):
        if slot.offset > at:
            out.append((at, slot.offset - at))
        at = max(at, slot.offset + max(int(slot.nbytes), 0))
    if size > at:
        out.append((at, size - at))
    return out


def _malloc(size: int):
    """``cupy.cuda.Memory(size)``; when the GPU is full, CuPy's pool gives back what it caches
    and it is tried once more."""
    import cupy

    try:
        return cupy.cuda.Memory(size)
    except Exception as exc:  # noqa: BLE001 - CUDARuntimeError / OutOfMemoryError, by their text
        text = f"{type(exc).__name__} {exc}".lower()
        if "memory" not in text:
            raise
    cupy.get_default_memory_pool().free_all_blocks()
    return cupy.cuda.Memory(size)


@dataclass
class CaseBuffers:
    """One (case, seed) on the GPU."""

    case: str
    seed: int
    key: int                           #: fingerprint key drawn at upload (never given to a candidate)
    const: dict[str, object] = field(default_factory=dict)      #: const inputs, passed as they are
    initial: dict[str, object] = field(default_factory=dict)    #: initial values of the other buffers with an init
    work: dict[str, object] = field(default_factory=dict)       #: what the kernel gets for every non-const buffer
    scalars: dict = field(default_factory=dict)
    fingerprints: dict[str, int] = field(default_factory=dict)  #: of const and initial, at upload
    expected: dict[str, object] | None = None                   #: reference values (verify.device_expected), stored masked
    mask_key: int | None = None                                 #: what ``expected`` is masked with (gpu/mask.py; None: plain)
    expected_dtypes: dict[str, object] = field(default_factory=dict)  #: the reference's own dtypes
    expected_key: int = 0                                       #: drawn when the expected values were uploaded
    expected_fingerprints: dict[str, int] = field(default_factory=dict)
    block: "Block | None" = None                                #: the memory all of the above lie in
    slots: dict[tuple[str, str], Slot] = field(default_factory=dict)   #: (kind, name) -> where in the block

    expected_outside: set[str] = field(default_factory=set)     #: outputs whose expected values did not fit the block
    #: the block's bytes no buffer uses (the padding between slots, the room after the last one up to
    #: the whole page), zeroed at upload: name -> a byte array over them.  Memory a kernel reaches by
    #: address that outlives its launch: fingerprinted with ``fingerprints`` and after every run
    free: dict[str, object] = field(default_factory=dict)

    @property
    def nbytes(self) -> int:
        if self.block is not None:
            extra = [a for n, a in (self.expected or {}).items() if n in self.expected_outside]
            return int(self.block.size) + sum(int(a.nbytes) for a in extra)
        arrays = list(self.const.values()) + list(self.initial.values()) + list(self.work.values())
        arrays += list((self.expected or {}).values())
        return sum(int(a.nbytes) for a in arrays)

    def expected_slot(self, name: str, values: np.ndarray):
        """A device array in this block for expected values ``values`` (a flat host array), or
        None when they do not fit the room kept for them (another dtype than planned)."""
        slot = self.slots.get(("expected", name))
        if self.block is None or slot is None or values.nbytes != slot.nbytes or values.ndim != 1:
            return None
        return self.block.array(slot.offset, (values.size,), values.dtype)

    def kernel_buffer(self, name: str):
        return self.const[name] if name in self.const else self.work[name]

    def held(self, name: str):
        """A buffer the fingerprints at upload are of."""
        if name in self.const:
            return self.const[name]
        return self.initial[name] if name in self.initial else self.free[name]


def reset(task: Task, bufs: CaseBuffers, stream_ptr: int, *, poison: bool) -> None:
    """Before a launch: poison pure outputs (if ``poison``), restore every buffer with initial values."""
    for arg in task.args:
        if not arg.is_buffer or arg.name in bufs.const:
            continue
        if arg.name in bufs.initial:
            copy(bufs.work[arg.name], bufs.initial[arg.name], stream_ptr)
        elif poison:
            width, pattern = poison_memset(arg.param.dtype)
            memset(bufs.work[arg.name], width, pattern, stream_ptr)


class Resident:
    """Least recently used (case, seed) buffers within ``budget`` bytes of GPU memory."""

    def __init__(self, budget: int):
        self.budget = int(budget)
        self.entries: OrderedDict[tuple[str, int], CaseBuffers] = OrderedDict()

    def get(self, case: str, seed: int) -> CaseBuffers | None:
        entry = self.entries.get((case, seed))
        if entry is not None:
            self.entries.move_to_end((case, seed))
        return entry

    def put(self, entry: CaseBuffers) -> None:
        self.entries[(entry.case, entry.seed)] = entry
        self.entries.move_to_end((entry.case, entry.seed))
        self.trim(keep=entry)

    def trim(self, keep: CaseBuffers | None = None) -> None:
        while sum(e.nbytes for e in self.entries.values()) > self.budget:
            oldest = next((k for k, e in self.entries.items() if e is not keep), None)
            if oldest is None:
                return
            del self.entries[oldest]

    def drop(self, case: str, seed: int) -> None:
        self.entries.pop((case, seed), None)

    def clear(self) -> None:
        self.entries.clear()
