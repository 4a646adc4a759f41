"""A CuPy memory pool whose chunks can be zeroed: a Python baseline's temporaries hold answers,
and none may stay readable in pooled memory after the baseline ran."""
from __future__ import annotations

import sys


class ScrubbedPool:
    """A CuPy memory pool for a Python baseline's temporaries that can be wiped: every chunk it
    takes from the driver is remembered, and :meth:`scrub` zeroes them all (stream-ordered, then
    synchronised) before releasing the free ones, so no answer a baseline computed stays readable
    in pooled memory.  ``with pool.active(): fn()`` routes CuPy's allocations to it."""

    def __init__(self):
        import cupy

        self._cp = cupy
        self._chunks: list = []
        self.pool = cupy.cuda.MemoryPool(allocator=self._alloc)

    def _alloc(self, size: int):
        mem = self._cp.cuda.Memory(size)
        self._chunks.append(mem)
        return self._cp.cuda.MemoryPointer(mem, 0)

    def active(self):
        return self._cp.cuda.using_allocator(self.pool.malloc)

    def scrub(self, stream) -> int:
        """Zero every chunk, release the free ones; returns the bytes zeroed."""
        from kernel_forge.gpu.module_state import harness_call
        from kernel_forge.gpu import driver

        if not self._chunks:
            return 0
        drv = driver._driver()
        stream.synchronize()
        total = 0
        for mem in self._chunks:
            n = int(mem.size)
            if n:
                harness_call(drv.cuMemsetD8Async(int(mem.ptr), 0, n, drv.CUstream(stream.ptr)),
                             "cuMemsetD8Async(scrubbing a baseline's pooled memory)")
                total += n
        stream.synchronize()
        self.pool.free_all_blocks()
        del mem     # the loop's last chunk: a reference of ours would keep it remembered (and allocated) below
        # chunks the pool still holds (in use) stay remembered; the others are released now
        self._chunks = [m for m in self._chunks if sys.getrefcount(m) > 3]
        return total
