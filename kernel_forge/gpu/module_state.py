"""Module globals: found in the CUBIN, snapshotted at load, restored before every launch.

A candidate can keep state between launches in module-scope ``__device__`` variables (a cache of
its last answer keyed by the input's content, a counter, a flag).  Poisoning outputs does not see
it and a fresh input draw does not defeat a content-keyed cache, so the gate puts every module
global back to its load-time image before every launch it makes, outside the timed window.  A
kernel whose state resets itself (a "last block" counter) or that rewrites a scratch array every
launch is unaffected; a cache never hits.

The globals are read from the CUBIN's ELF symbol table: ``STT_OBJECT`` symbols in the writable
sections ``.nv.global`` (zero-initialised) and ``.nv.global.init`` (initialised) — every type,
alignment and size, ``static``, namespaced, anonymous-namespace, function-scope ``static`` and
templated variables alike (C++ names mangled) — and, for a check only, the user ``__constant__``
banks ``.nv.constant<N>`` (read-only to kernels: NVRTC drops a plain store to them, so a change
there means a store through a laundered pointer; :meth:`ModuleState.constants_changed`).

**One copy per symbol, at the address and size the driver reports.**  Each global is found with
``cuModuleGetGlobal`` and copied with its own range ``[ptr, ptr + min(ELF size, driver size))``;
no range ever spans two symbols.  The first version of this module restored a whole section as
one range whenever every symbol's address minus its ELF offset gave the same base, assuming the
driver lays a section out as the ELF does, in one allocation.  It does not: the driver places
each global on its own (in the order they are looked up; with lazy loading, on first lookup),
so a section's symbols sit in separate allocations that are merely adjacent.  Whenever every
symbol before the last has a size that is a multiple of the driver's placement alignment, the
addresses *look* like the ELF layout — a ``__device__ double`` array of any length followed by a
4-byte retirement counter always does — and the one copy across two allocations failed with
``cuMemcpyDtoD(module global snapshot) failed: CUDA_ERROR_INVALID_VALUE`` (H200, issue 19),
while ``float`` partials behind a 4-byte counter (offsets 0 and 4) never looked contiguous and
passed.  ``tests/test_module_state.py`` checks over real NVRTC CUBINs of every kind of global
that each planned range lies inside one symbol's reported range, under several driver layouts.

Restores are stream-ordered device-to-device copies, never kernels, so they do not show up among
the kernels the timing clock attributes to the candidate.  A global ``cuModuleGetGlobal`` cannot
find (or a name two symbols share) makes the state incomplete: the worker then reloads the
module before every launch instead (slower, the same guarantee).
"""
from __future__ import annotations

import re
import struct
from dataclasses import dataclass

from ..errors import CudaError

#: sections that hold writable module globals (zero-initialised and initialised)
GLOBAL_SECTIONS = (".nv.global", ".nv.global.init")
#: user __constant__ banks (``.nv.constant0.<kernel>`` holds parameters and has no object symbols)
_CONSTANT_SECTION = re.compile(r"^\.nv\.constant\d+$")
_SHT_SYMTAB = 2
_STT_OBJECT = 1


class HarnessFault(Exception):
    """The harness's own machinery failed (not the candidate): reported as ``harness_error``
    with ``what`` failed.  Raised only for errors that are not a sticky context error (a sticky
    error seen at a harness call is the candidate's earlier launch faulting)."""

    def __init__(self, what: str, cause: BaseException):
        super().__init__(f"{what}: {type(cause).__name__}: {cause}")
        self.what, self.cause = what, cause


@dataclass(frozen=True)
class GlobalVar:
    name: str          #: symbol name as in the CUBIN (C++ names mangled)
    section: str       #: ".nv.global", ".nv.global.init" or ".nv.constant<N>"
    offset: int        #: offset within its section (the ELF's layout, not the driver's)
    size: int          #: bytes

    @property
    def constant(self) -> bool:
        return self.section not in GLOBAL_SECTIONS


@dataclass(frozen=True)
class Section:
    name: str
    size: int
    align: int = 1


def module_globals(cubin: bytes, *, constants: bool = False) -> tuple[list[GlobalVar], list[Section]]:
    """The writable globals of a CUBIN (and with ``constants`` its ``__constant__`` variables too)
    and the sections holding them (an ELF64 reader for the few fields this needs).  Raises
    ValueError for data that is not a 64-bit little-endian ELF."""
    if len(cubin) < 64 or cubin[:4] != b"\x7fELF" or cubin[4] != 2 or cubin[5] != 1:
        raise ValueError("not a 64-bit little-endian ELF image (a CUBIN)")
    shoff = struct.unpack_from("<Q", cubin, 0x28)[0]
    shentsize, shnum, shstrndx = struct.unpack_from("<HHH", cubin, 0x3A)
    sections = []
    for i in range(shnum):
        name, typ, _flags, _addr, offset, size, link, _info, align, _entsize = \
            struct.unpack_from("<IIQQQQIIQQ", cubin, shoff + i * shentsize)
        sections.append((name, typ, offset, size, link, align))

    def cstr(table_offset: int, at: int) -> str:
        start = table_offset + at
        end = cubin.index(b"\x00", start)
        return cubin[start:end].decode("utf-8", errors="replace")

    shstr_off = sections[shstrndx][2]
    names = [cstr(shstr_off, s[0]) for s in sections]
    wanted = {i: names[i] for i in range(shnum)
              if names[i] in GLOBAL_SECTIONS or (constants and _CONSTANT_SECTION.match(names[i]))}
    out: list[GlobalVar] = []
    for (_n, typ, offset, size, link, _align) in sections:
        if typ != _SHT_SYMTAB:
            continue
        str_off = sections[link][2]
        for k in range(size // 24):
            st_name, st_info, _other, st_shndx, st_value, st_size = struct.unpack_from("<IBBHQQ", cubin, offset + 24 * k)
            if st_info & 0xF == _STT_OBJECT and st_shndx in wanted and st_size > 0:
                out.append(GlobalVar(cstr(str_off, st_name), wanted[st_shndx], int(st_value), int(st_size)))
    used = {g.section for g in out}
    secs = [Section(names[i], sections[i][3], max(1, sections[i][5])) for i in wanted if names[i] in used]
    return sorted(out, key=lambda g: (g.section, g.offset)), secs


@dataclass(frozen=True)
class Range:
    label: str        #: the symbol's name
    ptr: int          #: device address (cuModuleGetGlobal)
    size: int         #: bytes copied: min(ELF size, driver size)
    pristine: int     #: offset of the load-time copy in the pristine buffer
    constant: bool = False  #: a __constant__ variable: fingerprinted, never restored


def plan_ranges(symbols: list[GlobalVar], found: dict[str, tuple[int, int]]) -> list[Range]:
    """The copies that snapshot and restore ``symbols``: one per symbol ``found`` on the device
    (name -> (pointer, bytes) as ``cuModuleGetGlobal`` reports them), never one spanning two.
    Pure: tests/test_module_state.py runs it over real CUBINs and modelled driver layouts."""
    out: list[Range] = []
    at = 0
    seen_ptrs: set[int] = set()
    for g in symbols:
        if g.name not in found:
            continue
        ptr, size = found[g.name]
        n = min(int(g.size), int(size))
        if n <= 0 or ptr in seen_ptrs:
            continue
        seen_ptrs.add(ptr)
        out.append(Range(g.name, int(ptr), n, at, g.constant))
        at += (n + 255) // 256 * 256      # each copy 256-byte aligned in the pristine buffer
    return out


class ModuleState:
    """The load-time image of a loaded module's globals.

    Build it right after ``driver.Module(cubin, entry)`` and before any launch.  ``restore(stream)``
    puts every writable global back; ``changed(key, stream)`` names the globals (and ``__constant__``
    variables) whose bytes differ from the load-time image now (evidence: which state a launch left
    behind; a changed constant is a verdict)."""

    def __init__(self, module, cubin: bytes):
        import cupy

        from . import driver

        self.globals, _sections = module_globals(cubin, constants=True)
        self.names = [g.name for g in self.globals if not g.constant]
        self.missing: list[str] = []
        drv = driver._driver()
        found: dict[str, tuple[int, int]] = {}
        counts: dict[str, int] = {}
        for g in self.globals:
            counts[g.name] = counts.get(g.name, 0) + 1
        for g in self.globals:
            if counts[g.name] > 1:            # a lookup by name cannot tell them apart
                if not g.constant:
                    self.missing.append(g.name)
                continue
            try:
                ptr, size = driver.check(drv.cuModuleGetGlobal(module.handle, g.name.encode()),
                                         f"cuModuleGetGlobal({g.name})")
                found[g.name] = (int(ptr), int(size))
            except CudaError as exc:
                if exc.code in driver.STICKY:
                    raise
                if not g.constant:
                    self.missing.append(g.name)
        self.ranges = plan_ranges(self.globals, found)
        self.nbytes = sum(r.size for r in self.ranges)
        end = max((r.pristine + r.size for r in self.ranges), default=0)
        self._buffer = cupy.empty(max(1, end), dtype=cupy.uint8)
        base = int(self._buffer.data.ptr)
        for r in self.ranges:   # synchronous: the module has not run yet
            harness_call(drv.cuMemcpyDtoD(base + r.pristine, r.ptr, r.size),
                         f"cuMemcpyDtoD(module global snapshot of {r.label}, {r.size} bytes)")
        self._restore = [r for r in self.ranges if not r.constant]

    @property
    def complete(self) -> bool:
        """Every writable global was found on the device (else the caller should reload the module
        before every launch instead)."""
        return not self.missing

    def restore(self, stream) -> None:
        """Stream-ordered copies of the load-time image back over every writable global."""
        if not self._restore:
            return
        from . import driver

        drv = driver._driver()
        base = int(self._buffer.data.ptr)
        s = drv.CUstream(stream.ptr)
        for r in self._restore:
            harness_call(drv.cuMemcpyDtoDAsync(r.ptr, base + r.pristine, r.size, s),
                         f"cuMemcpyDtoDAsync(module global restore of {r.label})")

    def changed(self, key: int, stream, *, constants: bool = False) -> list[str]:
        """Names of the writable globals (``constants``: of the ``__constant__`` variables) whose
        bytes now differ from the load-time image (keyed fingerprints, one synchronisation)."""
        import cupy

        from .fingerprint import fingerprint_many

        picked = [r for r in self.ranges if r.constant == constants]
        if not picked:
            return []
        now = [cupy.ndarray(r.size, dtype=cupy.uint8,
                            memptr=cupy.cuda.MemoryPointer(cupy.cuda.UnownedMemory(r.ptr, r.size, self), 0))
               for r in picked]
        then = [self._buffer[r.pristine:r.pristine + r.size] for r in picked]
        fps = fingerprint_many(now + then, key, stream)
        return [r.label for r, a, b in zip(picked, fps[:len(picked)], fps[len(picked):]) if a != b]


def harness_call(result, what: str):
    """``driver.check`` for a call the harness makes for itself: a failure that is not a sticky
    context error (the candidate's launch faulting, seen here) is a :class:`HarnessFault`."""
    from . import driver

    try:
        return driver.check(result, what)
    except CudaError as exc:
        if exc.code in driver.STICKY:
            raise
        raise HarnessFault(what, exc) from None
