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
passed.  ``tests/gpu/test_module_state.py`` checks over real NVRTC CUBINs of every kind of global
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

from kernel_forge.common.errors import CudaError

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
    Pure: tests/gpu/test_module_state.py runs it over real CUBINs and modelled driver layouts."""
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


#: at most this many writable globals are restored with one cuMemcpyDtoDAsync each; more (a
#: kernel including cooperative_groups or libcu++ headers has hundreds of 1-8 byte constexpr
#: statics in .nv.global) with one ``kf_state_copy`` kernel over a table of chunks
MEMCPY_MAX = 4
#: bytes per chunk of the kernel path (a 64 MB global is 1,024 blocks' work)
CHUNK = 64 << 10

#: the harness kernels of the kernel path: copy chunks (restore, snapshot) and find changed ones
STATE_SOURCE = r"""
typedef unsigned long long u64;
struct kf_chunk { u64 a, b, bytes, sym; };
// a[i] = b[i] for every chunk (dst = a, src = b)
extern "C" __global__ void kf_state_copy(const kf_chunk* t, unsigned int n) {
    for (unsigned int r = blockIdx.x; r < n; r += gridDim.x) {
        const u64 dst = t[r].a, src = t[r].b, bytes = t[r].bytes;
        if (((dst | src | bytes) & 15) == 0) {
            uint4* d = (uint4*)dst; const uint4* s = (const uint4*)src;
            for (u64 i = threadIdx.x; i < bytes / 16; i += blockDim.x) d[i] = s[i];
        } else if (((dst | src | bytes) & 3) == 0) {
            unsigned int* d = (unsigned int*)dst; const unsigned int* s = (const unsigned int*)src;
            for (u64 i = threadIdx.x; i < bytes / 4; i += blockDim.x) d[i] = s[i];
        } else {
            unsigned char* d = (unsigned char*)dst; const unsigned char* s = (const unsigned char*)src;
            for (u64 i = threadIdx.x; i < bytes; i += blockDim.x) d[i] = s[i];
        }
    }
}
// differs[sym] = 1 for every chunk whose bytes at a and b differ
extern "C" __global__ void kf_state_diff(const kf_chunk* t, unsigned int n, unsigned int* differs) {
    for (unsigned int r = blockIdx.x; r < n; r += gridDim.x) {
        const u64 x = t[r].a, y = t[r].b, bytes = t[r].bytes;
        int d = 0;
        if (((x | y | bytes) & 7) == 0) {
            const u64* p = (const u64*)x; const u64* q = (const u64*)y;
            for (u64 i = threadIdx.x; i < bytes / 8; i += blockDim.x) d |= p[i] != q[i];
        } else {
            const unsigned char* p = (const unsigned char*)x; const unsigned char* q = (const unsigned char*)y;
            for (u64 i = threadIdx.x; i < bytes; i += blockDim.x) d |= p[i] != q[i];
        }
        d = __syncthreads_or(d);
        if (threadIdx.x == 0 && d) differs[t[r].sym] = 1u;
    }
}
"""
_BLOCK = 256
_MAX_BLOCKS = 4096
_module = None


def _kernel(name: str):
    import cupy

    global _module
    if _module is None:
        _module = cupy.RawModule(code=STATE_SOURCE)
    return _module.get_function(name)


def chunk_table(pairs: list[tuple[int, int, int, int]]) -> "np.ndarray":
    """(a, b, bytes, symbol index) per range, split into chunks of at most CHUNK bytes: the
    ``kf_chunk`` table the state kernels read (an (n, 4) uint64 array)."""
    import numpy as np

    rows = []
    for a, b, nbytes, sym in pairs:
        for at in range(0, nbytes, CHUNK):
            rows.append((a + at, b + at, min(CHUNK, nbytes - at), sym))
    return np.asarray(rows, dtype=np.uint64).reshape(-1, 4)


class ModuleState:
    """The load-time image of a loaded module's globals.

    Build it right after ``driver.Module(cubin, entry)`` and before any launch.  ``restore(stream)``
    puts every writable global back; ``changed(stream)`` names the globals (and ``__constant__``
    variables) whose bytes differ from the load-time image now (evidence: which state a launch left
    behind; a changed constant is a verdict); ``image_intact(stream)`` says whether the load-time
    image itself (a harness buffer a candidate could reach) is still what was snapshotted."""

    def __init__(self, module, cubin: bytes):
        import cupy

        from kernel_forge.gpu import driver
        from kernel_forge.gpu.fingerprint import fingerprint, new_key

        self._cp = cupy
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
        self._writable = [r for r in self.ranges if not r.constant]
        self._constants = [r for r in self.ranges if r.constant]
        self.kernel_path = len(self._writable) > MEMCPY_MAX
        # constants: always by memcpy (the driver's way into constant banks), into the image and,
        # for each check, into a scratch copy the diff kernel compares
        for r in self._constants:
            harness_call(drv.cuMemcpyDtoD(base + r.pristine, r.ptr, r.size),
                         f"cuMemcpyDtoD(__constant__ snapshot of {r.label}, {r.size} bytes)")
        const_end = max((r.pristine + r.size for r in self._constants), default=0)
        self._scratch = cupy.empty(max(1, const_end), dtype=cupy.uint8) if self._constants else None
        idx = {r.label: i for i, r in enumerate(self.ranges)}
        self._restore_table = self._snap_table = None
        if self.kernel_path:
            self._restore_table = cupy.asarray(chunk_table(
                [(r.ptr, base + r.pristine, r.size, idx[r.label]) for r in self._writable]))
            self._snap_table = cupy.asarray(chunk_table(
                [(base + r.pristine, r.ptr, r.size, idx[r.label]) for r in self._writable]))
            cupy.cuda.Device().synchronize()   # uploaded on a stream the next one does not wait for
            stream = cupy.cuda.Stream(non_blocking=True)
            self._launch("kf_state_copy", self._snap_table, stream, "module global snapshot (kf_state_copy)")
            stream.synchronize()
        else:
            for r in self._writable:   # synchronous: the module has not run yet
                harness_call(drv.cuMemcpyDtoD(base + r.pristine, r.ptr, r.size),
                             f"cuMemcpyDtoD(module global snapshot of {r.label}, {r.size} bytes)")
        scratch = int(self._scratch.data.ptr) if self._scratch is not None else 0
        pairs = []          # (bytes now, bytes then): a constant's "now" is its scratch copy
        for r in self.ranges:
            live = scratch + r.pristine if r.constant else r.ptr
            pairs.append((live, base + r.pristine, r.size, idx[r.label]))
        self._diff_table = cupy.asarray(chunk_table(pairs)) if pairs else None
        # the tables went up on the current (legacy default) stream, which the gate's non-blocking
        # streams do not wait for
        cupy.cuda.Device().synchronize()
        self._image_key = new_key()
        stream = cupy.cuda.Stream(non_blocking=True)
        self._image_fp = fingerprint(self._buffer, self._image_key, stream) if self.ranges else 0

    def _launch(self, name: str, table, stream, what: str, *extra) -> None:
        import numpy as np

        n = int(table.shape[0])
        if not n:
            return
        grid = max(1, min(_MAX_BLOCKS, n))
        try:
            with stream:
                _kernel(name)((grid,), (_BLOCK,), (table, np.uint32(n), *extra))
        except Exception as exc:  # noqa: BLE001 - CuPy's launch errors: the harness's own
            text = str(exc)
            from kernel_forge.gpu import driver
            if any(code in text for code in driver.STICKY):
                raise
            raise HarnessFault(what, exc) from None

    @property
    def complete(self) -> bool:
        """Every writable global was found on the device (else the caller should reload the module
        before every launch instead)."""
        return not self.missing

    def restore(self, stream) -> None:
        """Stream-ordered: the load-time image back over every writable global (one copy per
        global, or one ``kf_state_copy`` launch when there are more than MEMCPY_MAX)."""
        if not self._writable:
            return
        if self.kernel_path:
            self._launch("kf_state_copy", self._restore_table, stream, "module global restore (kf_state_copy)")
            return
        from kernel_forge.gpu import driver

        drv = driver._driver()
        base = int(self._buffer.data.ptr)
        s = drv.CUstream(stream.ptr)
        for r in self._writable:
            harness_call(drv.cuMemcpyDtoDAsync(r.ptr, base + r.pristine, r.size, s),
                         f"cuMemcpyDtoDAsync(module global restore of {r.label})")

    def changed(self, stream, *, constants: bool = False) -> list[str]:
        """Names of the writable globals (``constants``: of the ``__constant__`` variables) whose
        bytes now differ from the load-time image (one diff kernel, one read back)."""
        import numpy as np

        picked = [r for r in self.ranges if r.constant == constants]
        if not picked or self._diff_table is None:
            return []
        cp = self._cp
        if constants:
            from kernel_forge.gpu import driver

            drv = driver._driver()
            scratch = int(self._scratch.data.ptr)
            s = drv.CUstream(stream.ptr)
            for r in self._constants:
                harness_call(drv.cuMemcpyDtoDAsync(scratch + r.pristine, r.ptr, r.size, s),
                             f"cuMemcpyDtoDAsync(__constant__ check of {r.label})")
        with stream:
            flags = cp.zeros(len(self.ranges), dtype=cp.uint32)
        self._launch("kf_state_diff", self._diff_table, stream, "module global check (kf_state_diff)", flags)
        got = np.asarray(flags.get(stream=stream))
        wanted = {r.label for r in picked}
        return [r.label for i, r in enumerate(self.ranges) if got[i] and r.label in wanted]

    def image_intact(self, stream) -> bool:
        """The load-time image is still what was snapshotted (keyed fingerprint): a candidate that
        rewrote it could make every "restore" hand it its own state back."""
        if not self.ranges:
            return True
        from kernel_forge.gpu.fingerprint import fingerprint

        return fingerprint(self._buffer, self._image_key, stream) == self._image_fp


def harness_call(result, what: str):
    """``driver.check`` for a call the harness makes for itself: a failure that is not a sticky
    context error (the candidate's launch faulting, seen here) is a :class:`HarnessFault`."""
    from kernel_forge.gpu import driver

    try:
        return driver.check(result, what)
    except CudaError as exc:
        if exc.code in driver.STICKY or "OUT_OF_MEMORY" in exc.code:
            raise                      # the candidate's crash seen late, or the GPU out of memory
        raise HarnessFault(what, exc) from None
