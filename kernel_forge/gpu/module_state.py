"""Module globals: found in the CUBIN, snapshotted at load, restored before every launch.

A candidate can keep state between launches in module-scope ``__device__`` variables (a cache of
its last answer keyed by the input's content, a counter, a flag).  Poisoning outputs does not see
it and a fresh input draw does not defeat a content-keyed cache, so the gate puts every module
global back to its load-time image before every launch it makes, outside the timed window.  A
kernel whose state resets itself (a "last block" counter) or that rewrites a scratch array every
launch is unaffected; a cache never hits.

The globals are read from the CUBIN's ELF symbol table (``STT_OBJECT`` symbols in the
``.nv.global`` and ``.nv.global.init`` sections), found on the device with ``cuModuleGetGlobal``
and copied once, right after the module is loaded.  When every symbol of a section resolves to
one consistent base address, the section is restored as one range (padding included); otherwise
symbol by symbol.  Restores are stream-ordered device-to-device copies, never kernels, so they do
not show up among the kernels the timing clock attributes to the candidate.
"""
from __future__ import annotations

import struct
from dataclasses import dataclass

from ..errors import CudaError

#: sections that hold writable module globals (zero-initialised and initialised)
GLOBAL_SECTIONS = (".nv.global", ".nv.global.init")
_SHT_SYMTAB = 2
_STT_OBJECT = 1


@dataclass(frozen=True)
class GlobalVar:
    name: str          #: symbol name as in the CUBIN (C++ names mangled)
    section: str       #: ".nv.global" (zero-initialised) or ".nv.global.init"
    offset: int        #: offset within its section
    size: int          #: bytes


@dataclass(frozen=True)
class Section:
    name: str
    size: int


def module_globals(cubin: bytes) -> tuple[list[GlobalVar], list[Section]]:
    """The writable globals of a CUBIN and the sections holding them (an ELF64 reader for the few
    fields this needs).  Raises ValueError for data that is not a 64-bit little-endian ELF."""
    if len(cubin) < 64 or cubin[:4] != b"\x7fELF" or cubin[4] != 2 or cubin[5] != 1:
        raise ValueError("not a 64-bit little-endian ELF image (a CUBIN)")
    shoff = struct.unpack_from("<Q", cubin, 0x28)[0]
    shentsize, shnum, shstrndx = struct.unpack_from("<HHH", cubin, 0x3A)
    sections = []
    for i in range(shnum):
        name, typ, _flags, _addr, offset, size, link, _info, _align, _entsize = \
            struct.unpack_from("<IIQQQQIIQQ", cubin, shoff + i * shentsize)
        sections.append((name, typ, offset, size, link))

    def cstr(table_offset: int, at: int) -> str:
        start = table_offset + at
        end = cubin.index(b"\x00", start)
        return cubin[start:end].decode("utf-8", errors="replace")

    shstr_off = sections[shstrndx][2]
    names = [cstr(shstr_off, s[0]) for s in sections]
    wanted = {i: names[i] for i in range(shnum) if names[i] in GLOBAL_SECTIONS}
    out: list[GlobalVar] = []
    for idx, (_n, typ, offset, size, link) in enumerate(sections):
        if typ != _SHT_SYMTAB:
            continue
        str_off = sections[link][2]
        for k in range(size // 24):
            st_name, st_info, _other, st_shndx, st_value, st_size = struct.unpack_from("<IBBHQQ", cubin, offset + 24 * k)
            if st_info & 0xF == _STT_OBJECT and st_shndx in wanted and st_size > 0:
                out.append(GlobalVar(cstr(str_off, st_name), wanted[st_shndx], int(st_value), int(st_size)))
    used = {g.section for g in out}
    secs = [Section(names[i], sections[i][3]) for i in wanted if names[i] in used]
    return sorted(out, key=lambda g: (g.section, g.offset)), secs


@dataclass(frozen=True)
class _Range:
    label: str        #: a section name or a symbol name
    ptr: int          #: device address
    size: int
    pristine: int     #: offset of the load-time copy in the pristine buffer


class ModuleState:
    """The load-time image of a loaded module's writable globals.

    Build it right after ``driver.Module(cubin, entry)`` and before any launch.  ``restore(stream)``
    puts every global back; ``changed(key, stream)`` names the globals whose bytes differ from the
    load-time image now (for evidence: which state a launch left behind)."""

    def __init__(self, module, cubin: bytes):
        import cupy

        from . import driver

        self.globals, sections = module_globals(cubin)
        self.names = [g.name for g in self.globals]
        self.missing: list[str] = []
        drv = driver._driver()
        found: dict[str, tuple[int, int]] = {}
        for g in self.globals:
            try:
                ptr, size = driver.check(drv.cuModuleGetGlobal(module.handle, g.name.encode()),
                                         f"cuModuleGetGlobal({g.name})")
                found[g.name] = (int(ptr), int(size))
            except CudaError:
                self.missing.append(g.name)
        ranges: list[tuple[str, int, int]] = []
        for sec in sections:
            members = [g for g in self.globals if g.section == sec.name and g.name in found]
            bases = {found[g.name][0] - g.offset for g in members}
            whole = len(bases) == 1 and len(members) == len([g for g in self.globals if g.section == sec.name])
            if whole and members:
                ranges.append((sec.name, bases.pop(), sec.size))
            else:
                ranges.extend((g.name, found[g.name][0], min(g.size, found[g.name][1])) for g in members)
        self.nbytes = sum(size for _l, _p, size in ranges)
        self._buffer = cupy.empty(max(1, self.nbytes), dtype=cupy.uint8)
        self.ranges: list[_Range] = []
        at = 0
        for label, ptr, size in ranges:
            self.ranges.append(_Range(label, ptr, size, at))
            at += size
        # every found symbol's place in the snapshot (for `changed`, symbol by symbol)
        self._symbols: list[tuple[str, int, int, int]] = []
        for g in self.globals:
            if g.name not in found:
                continue
            ptr, size = found[g.name]
            for r in self.ranges:
                if r.ptr <= ptr and ptr + min(size, g.size) <= r.ptr + r.size:
                    self._symbols.append((g.name, ptr, min(size, g.size), r.pristine + ptr - r.ptr))
                    break
        base = int(self._buffer.data.ptr)
        for r in self.ranges:   # synchronous: the module has not run yet
            driver.check(drv.cuMemcpyDtoD(base + r.pristine, r.ptr, r.size), "cuMemcpyDtoD(module global snapshot)")

    @property
    def complete(self) -> bool:
        """Every global was found on the device (else the caller should reload the module instead)."""
        return not self.missing

    def restore(self, stream) -> None:
        """Stream-ordered copies of the load-time image back over every global."""
        if not self.ranges:
            return
        from . import driver

        drv = driver._driver()
        base = int(self._buffer.data.ptr)
        s = drv.CUstream(stream.ptr)
        for r in self.ranges:
            driver.check(drv.cuMemcpyDtoDAsync(r.ptr, base + r.pristine, r.size, s),
                         "cuMemcpyDtoDAsync(module global restore)")

    def changed(self, key: int, stream) -> list[str]:
        """Names of the globals whose bytes now differ from the load-time image (keyed fingerprints)."""
        import cupy

        from .fingerprint import fingerprint

        out = []
        for name, ptr, size, at in self._symbols:
            now = cupy.ndarray(size, dtype=cupy.uint8,
                               memptr=cupy.cuda.MemoryPointer(cupy.cuda.UnownedMemory(ptr, size, self), 0))
            if fingerprint(now, key, stream) != fingerprint(self._buffer[at:at + size], key, stream):
                out.append(name)
        return out
