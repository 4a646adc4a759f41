"""Tests of kernel_forge/gpu/scrubbed_pool.py, on tests/fake_gpu.py's stand-in and on a GPU."""
from __future__ import annotations

import sys
import types

import numpy as np
import pytest

from tests.support import fake_gpu
from kernel_forge.gpu import driver


@pytest.fixture
def cp(monkeypatch):
    """The fake CuPy, whose memory pointers keep their allocation alive as CuPy's do."""
    fake_gpu.install(monkeypatch)
    cupy = sys.modules["cupy"]
    monkeypatch.setattr(cupy.cuda, "MemoryPointer", lambda mem, offset: types.SimpleNamespace(ptr=mem.ptr + offset,
                                                                                              mem=mem))
    return cupy


def pool_with(cp, *sizes):
    from kernel_forge.gpu.scrubbed_pool import ScrubbedPool

    pool = ScrubbedPool()
    ptrs = [pool.pool.malloc(n) for n in sizes]
    for p, n in zip(ptrs, sizes):
        fake_gpu.MEM.resolve(p.ptr, n)[:] = 0xAB               # what a baseline computed
    return pool, ptrs


def test_a_pool_that_took_nothing_scrubs_nothing_and_calls_no_driver(cp, monkeypatch):
    from kernel_forge.gpu.scrubbed_pool import ScrubbedPool

    monkeypatch.setattr(driver, "_driver", lambda: pytest.fail("the driver was called for an empty pool"))
    assert ScrubbedPool().scrub(cp.cuda.Stream()) == 0


def test_every_chunk_is_zeroed_and_the_free_ones_are_given_back(cp):
    pool, ptrs = pool_with(cp, 512, 2048)
    views = [fake_gpu.MEM.resolve(p.ptr, n) for p, n in zip(ptrs, (512, 2048))]
    assert all(v.all() for v in views)
    assert pool.scrub(cp.cuda.Stream()) == 512 + 2048
    assert not any(v.any() for v in views)
    assert pool.pool.freed == 1                                # free_all_blocks, after the zeroing


def test_the_released_chunks_are_forgotten_and_the_one_in_use_is_zeroed_again_next_time(cp):
    pool, ptrs = pool_with(cp, 512, 1024, 4096)
    kept = ptrs[1]                                             # still in use by the baseline's result
    del ptrs
    assert pool.scrub(cp.cuda.Stream()) == 512 + 1024 + 4096
    fake_gpu.MEM.resolve(kept.ptr, 1024)[:] = 0xCD
    assert pool.scrub(cp.cuda.Stream()) == 1024                # the last chunk too was released, not held here
    assert not fake_gpu.MEM.resolve(kept.ptr, 1024).any()
    del kept
    assert pool.scrub(cp.cuda.Stream()) == 1024 and pool.scrub(cp.cuda.Stream()) == 0


def test_cupy_allocations_go_to_the_pool_only_while_it_is_active(cp):
    from kernel_forge.gpu.scrubbed_pool import ScrubbedPool

    pool = ScrubbedPool()
    x, y, out = (cp.asarray(np.full(256, v, np.float32)) for v in (1.0, 2.0, 0.0))
    cp.add(x, y, out=out)                                      # outside: CuPy's own allocator
    assert fake_gpu.TEMPORARIES == []
    with pool.active():
        cp.add(x, y, out=out)                                  # a temporary of 1 KiB from the pool
    (tmp,) = fake_gpu.TEMPORARIES
    assert np.all(fake_gpu.MEM.resolve(tmp, 1024).view(np.float32) == 3.0)
    assert pool.scrub(cp.cuda.Stream()) == 1024
    assert not fake_gpu.MEM.resolve(tmp, 1024).any()


@pytest.mark.gpu
def test_on_a_gpu_a_baseline_s_temporaries_and_results_are_zeroed():
    import cupy

    from kernel_forge.gpu.scrubbed_pool import ScrubbedPool

    driver.probe()
    cupy.cuda.Device(0).use()
    stream = cupy.cuda.Stream(non_blocking=True)
    pool = ScrubbedPool()
    with pool.active():
        kept = cupy.full(4096, 7.0, dtype=cupy.float32)
        doubled = kept * 2.0
        total = float(doubled.sum())
    del doubled
    assert total == 4096 * 14.0
    first = pool.scrub(stream)
    assert first >= 2 * 4096 * 4                              # kept, doubled and the sum's memory
    assert not cupy.asnumpy(kept).any()                        # zeroed though still in use
    assert pool.scrub(stream) == int(kept.data.mem.size)       # only the chunk in use is left to scrub
