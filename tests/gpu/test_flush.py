"""The L2 flush before every timed launch (gpu/flush.py): one cooperative kernel, both phases.

CPU: the kernels compile for sm_90 without spills, ``kf_flush_once`` fits eight 256-thread
blocks per SM, and the host side (grid from the occupancy, the growing target, the self-check,
every reason to fall back to the two-kernel flush) with the driver faked.  GPU: the one-kernel
flush is what the worker uses on this GPU, it finishes many times in a row (the counter keeps
step), and it leaves the L2 as cold as the two-kernel one.
"""
from __future__ import annotations

import types

import numpy as np
import pytest

from kernel_forge.common.errors import CudaError
from kernel_forge.gpu import driver as real_driver
from kernel_forge.gpu import flush as flush_mod
from kernel_forge.gpu.nvrtc import compile_source

from tests.support import fake_gpu


def test_the_flush_kernels_compile_for_sm90_and_the_one_kernel_flush_fills_every_sm():
    res = compile_source(flush_mod.SOURCE, arch="sm_90", file_label="kf_flush.cu")
    assert "kf_flush_once" in res.log
    once = res.log[res.log.index("Function properties for kf_flush_once"):]
    regs = int(once.split("Used ")[1].split(" registers")[0])
    assert regs <= 32, once[:300]                  # 65,536 registers / (8 blocks x 256 threads)
    assert "spill" not in once.split("\n")[1] or "0 bytes spill stores, 0 bytes spill loads" in once.split("\n")[1]
    for name in ("kf_flush", "kf_discard", "kf_flush_once", "kf_warm", "kf_mark"):
        assert f"void {name}(" in flush_mod.SOURCE


class _Driver:
    """The driver calls _set_up_once makes, scripted."""

    def __init__(self, coop=1, per_sm=8, launch_error=None):
        self.coop, self.per_sm, self.launch_error = coop, per_sm, launch_error
        self.launches: list[tuple] = []
        self.CUdevice_attribute = types.SimpleNamespace(CU_DEVICE_ATTRIBUTE_COOPERATIVE_LAUNCH="coop")
        self.CUresult = types.SimpleNamespace(CUDA_SUCCESS=0)

    def cuCtxGetDevice(self):
        return (0, 0)

    def cuDeviceGetAttribute(self, attr, dev):
        return (0, self.coop)

    def cuOccupancyMaxActiveBlocksPerMultiprocessor(self, fn, threads, smem):
        return (0, self.per_sm)


@pytest.fixture
def fake(monkeypatch):
    fake_gpu.install(monkeypatch)
    drv = _Driver()
    monkeypatch.setattr(real_driver, "_driver", lambda: drv)
    monkeypatch.setattr(real_driver, "check", lambda result, what: result[1] if len(result) == 2 else None)
    import kernel_forge.gpu.nvrtc as nvrtc_mod
    monkeypatch.setattr(nvrtc_mod, "compile_source", lambda src, **kw: types.SimpleNamespace(cubin=b"cubin"))

    def launch(module, grid, block, smem, stream_ptr, args, *, cooperative=False):
        if drv.launch_error is not None:
            raise drv.launch_error
        drv.launches.append((tuple(grid), tuple(block), cooperative, args._holders[4].value))
    monkeypatch.setattr(real_driver, "launch", launch)
    monkeypatch.delenv(flush_mod.ENV, raising=False)
    for name in ("kf_flush", "kf_discard", "kf_warm", "kf_mark"):
        fake_gpu.KERNELS[name] = lambda grid, block, args: None
    return drv


def test_the_one_kernel_flush_is_sized_to_what_fits_and_its_target_grows_by_the_grid(fake):
    f = flush_mod.L2Flusher(1 << 20, sms=132, arch="sm_90")
    assert f.kind == "once" and f.why_split == ""
    assert fake.launches == [((1056, 1, 1), (256, 1, 1), True, 1056)]        # the self-check
    stream = types.SimpleNamespace(ptr=7)
    for _ in range(3):
        f(stream)
    assert [l[3] for l in fake.launches] == [1056, 2112, 3168, 4224]
    f._target = 0xFFFFFFFF - 100                    # 32-bit wrap-around: the kernel compares the difference
    f(stream)
    assert fake.launches[-1][3] == (0xFFFFFFFF - 100 + 1056) & 0xFFFFFFFF


def test_fewer_blocks_fit_fewer_are_launched(fake):
    fake.per_sm = 5
    f = flush_mod.L2Flusher(1 << 20, sms=132, arch="sm_90")
    assert f.kind == "once" and fake.launches[0][0] == (660, 1, 1)


@pytest.mark.parametrize("setup, why", [
    (lambda drv, mp: mp.setenv(flush_mod.ENV, "split"), "KFORGE_FLUSH=split"),
    (lambda drv, mp: setattr(drv, "coop", 0), "no cooperative launches"),
    (lambda drv, mp: setattr(drv, "per_sm", 0), "does not fit"),
    (lambda drv, mp: setattr(drv, "launch_error",
                             CudaError("cuLaunchCooperativeKernel", "CUDA_ERROR_COOPERATIVE_LAUNCH_TOO_LARGE")),
     "COOPERATIVE_LAUNCH_TOO_LARGE"),
])
def test_the_two_kernel_flush_stays_when_the_one_kernel_flush_cannot_run(fake, monkeypatch, setup, why):
    setup(fake, monkeypatch)
    f = flush_mod.L2Flusher(1 << 20, sms=132, arch="sm_90")
    assert f.kind == "split" and why in f.why_split, f.why_split
    assert f._once is None
    before = len(fake.launches)
    f(fake_gpu.make_cupy().cuda.Stream())          # the two kernels, no cooperative launch
    assert len(fake.launches) == before and fake_gpu.KF_LAUNCHES[-2:] == ["kf_flush", "kf_discard"]


def test_a_sticky_error_in_the_self_check_is_not_swallowed(fake):
    fake.launch_error = CudaError("cuLaunchCooperativeKernel", "CUDA_ERROR_ILLEGAL_ADDRESS")
    with pytest.raises(CudaError):
        flush_mod.L2Flusher(1 << 20, sms=132, arch="sm_90")


@pytest.mark.gpu
def test_the_worker_flushes_with_one_kernel_that_keeps_step_and_evicts():
    import cupy as cp

    from kernel_forge.gpu import driver

    driver.probe()
    info = driver.device_info(0)
    f = flush_mod.L2Flusher(info.l2_bytes, info.sms, arch=info.arch)
    print("flush:", f.kind, f.why_split)
    assert f.kind == "once", f.why_split
    stream = cp.cuda.Stream(non_blocking=True)
    for _ in range(200):
        f(stream)
    stream.synchronize()
    assert int(f._arrived.get()[0]) == f._target       # every block of every launch met the others
    # cold after it, as after the two-kernel flush: reading 16 MB takes as long after either
    with stream:
        data = cp.ones(4 << 20, dtype=cp.float32)
    times = {}
    for kind in ("once", "split"):
        samples = []
        for _ in range(20):
            with stream:
                data.sum()                             # warm
                if kind == "once":
                    f(stream)
                else:
                    f._flush(f._grid, (256,), (f.buf, np.int64(f.buf.size // 4), f.sink))
                    f._discard(f._grid, (256,), (f.buf, np.int64(f.buf.nbytes)))
                start, end = cp.cuda.Event(), cp.cuda.Event()
                start.record(stream)
                data.sum()
                end.record(stream)
            end.synchronize()
            samples.append(cp.cuda.get_elapsed_time(start, end))
        times[kind] = float(np.median(samples))
    print("read after flush (ms):", times)
    assert abs(times["once"] - times["split"]) <= max(0.15 * times["split"], 0.002), times   # 2 µs of event noise
