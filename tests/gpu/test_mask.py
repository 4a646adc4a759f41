"""Masked answers (kernel_forge/gpu/mask.py, invariant 11 of ARCHITECTURE.md): the keystream's specification
on the host, and on the GPU the mask kernels, the fingerprint of a masked buffer and the
comparison of masked outputs against masked expected values."""
from __future__ import annotations

import random

import numpy as np
import pytest

from kernel_forge.gpu import mask
from kernel_forge.gpu.fingerprint import host_fingerprint
from kernel_forge.gpu.nvrtc import compile_source

DTYPES = [np.uint8, np.uint16, np.float16, np.float32, np.int32, np.float64, np.int64]


@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: np.dtype(d).name)
def test_masking_twice_with_the_same_key_gives_the_values_back(dtype):
    rng = np.random.default_rng(3)
    x = rng.integers(0, 255, 1003).astype(dtype)
    key = random.getrandbits(64)
    masked = mask.host_mask(x, key)
    assert masked.dtype == x.dtype and masked.shape == x.shape
    assert np.array_equal(mask.host_mask(masked, key).view(np.uint8), x.view(np.uint8))
    # almost every element changes, and another key gives other bits
    assert np.mean(masked.view(np.uint8) != x.view(np.uint8)) > 0.9
    assert not np.array_equal(mask.host_mask(x, key ^ 1).view(np.uint8), masked.view(np.uint8))


@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: np.dtype(d).name)
def test_an_elements_mask_is_the_bytes_at_its_position_whatever_its_type(dtype):
    """Byte o of a buffer is masked with byte o % 8 of word o // 8's keystream: element i of any
    size takes its bytes from there, so the same bytes mask alike read as any type."""
    key = 0xDEADBEEF12345678
    x = np.zeros(77, dtype=dtype)
    as_bytes = mask.host_mask(x.view(np.uint8), key)
    assert np.array_equal(mask.host_mask(x, key).view(np.uint8), as_bytes)
    idx = np.array([0, 1, 5, 76])
    picked = mask.host_mask(x, key)[idx]
    assert np.array_equal(mask.unmask_at(picked, idx, key).view(np.uint8), x[idx].view(np.uint8))


def test_three_known_values_do_not_reveal_a_fourth():
    """A scan that knows three correct values finds no constant difference to exploit: the
    keystream of neighbouring words is unrelated (what a plain XOR with one key would give away)."""
    key = random.getrandbits(64)
    c = np.arange(1, 17, dtype=np.float32)
    m = mask.host_mask(c, key).view(np.uint32)
    diffs = m ^ c.view(np.uint32)
    assert len(set(diffs.tolist())) == len(diffs)


def test_the_mask_kernels_compile_for_sm90_and_are_named_kf():
    result = compile_source(mask.SOURCE, arch="sm_90", file_label="mask.cu")
    for name in ("kf_mask_u8", "kf_mask_u16", "kf_mask_u32", "kf_mask_u64"):
        assert name.encode() in result.cubin
    assert result.resources.get("spill_stores", 0) == 0


def test_the_test_hook_turns_masking_off(monkeypatch):
    assert mask.enabled()
    monkeypatch.setenv(mask.NO_MASK_ENV, "1")
    assert not mask.enabled()


# -- on the GPU --------------------------------------------------------------------------------

@pytest.mark.gpu
@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: np.dtype(d).name)
@pytest.mark.parametrize("n", [1, 7, 4099, 1 << 20])
def test_gpu_masking_is_the_host_specification(dtype, n):
    import cupy

    rng = np.random.default_rng(n)
    host = rng.integers(0, 255, n).astype(dtype)
    key = random.getrandbits(64)
    stream = cupy.cuda.Stream(non_blocking=True)
    with stream:
        src = cupy.asarray(host)
        dst = cupy.empty_like(src)
        mask.mask_copy(dst, src, key, stream)
        got = cupy.asnumpy(dst)
        mask.mask_inplace(src, key, stream)
        again = cupy.asnumpy(src)
        stream.synchronize()
    want = mask.host_mask(host, key)
    assert np.array_equal(got.view(np.uint8), want.view(np.uint8))
    assert np.array_equal(again.view(np.uint8), want.view(np.uint8))


@pytest.mark.gpu
@pytest.mark.parametrize("nbytes, offset", [(1, 0), (5, 0), (4099, 0), (4099, 1), ((1 << 20) + 3, 2)])
def test_gpu_fingerprint_of_a_masked_buffer_is_the_plain_buffers(nbytes, offset):
    import cupy

    from kernel_forge.gpu.fingerprint import fingerprint

    rng = np.random.default_rng(nbytes)
    host = rng.integers(0, 256, nbytes + offset, dtype=np.uint8)
    mkey, key = random.getrandbits(64), random.getrandbits(64)
    masked = np.concatenate([host[:offset], mask.host_mask(host[offset:], mkey)])
    stream = cupy.cuda.Stream(non_blocking=True)
    with stream:
        dev = cupy.asarray(masked)[offset:]
        stream.synchronize()
        assert fingerprint(dev, key, stream, masked_with=mkey) == host_fingerprint(host[offset:], key)
        assert fingerprint(dev, key, stream) != host_fingerprint(host[offset:], key)


@pytest.mark.gpu
@pytest.mark.parametrize("name", ["float32", "bfloat16", "float64", "int32"])
def test_gpu_comparison_of_masked_arrays_equals_the_plain_comparison(name):
    import cupy

    from kernel_forge.common.dtypes import BY_NAME
    from kernel_forge.gpu.compare import compare_on_gpu
    from kernel_forge.model.task import Tolerance
    from kernel_forge.model.tolerance import device_expected

    from tests.support.planted_outputs import planted

    dtype = BY_NAME[name]
    tol = Tolerance(0, 0) if name == "int32" else Tolerance(1e-3, 1e-3)
    actual, ref = planted(dtype, 100_003, seed=5, tol=tol)
    e = device_expected(ref, dtype, tol)
    akey, ekey = random.getrandbits(64), random.getrandbits(64)
    stream = cupy.cuda.Stream(non_blocking=True)
    with stream:
        plain = compare_on_gpu("y", cupy.asarray(actual), cupy.asarray(e), dtype, tol, stream,
                               reference_dtype=np.asarray(ref).dtype)
        masked = compare_on_gpu("y", cupy.asarray(mask.host_mask(actual, akey)), cupy.asarray(mask.host_mask(e, ekey)),
                                dtype, tol, stream, reference_dtype=np.asarray(ref).dtype, actual_key=akey,
                                expected_key=ekey)
    assert masked.to_json() == plain.to_json()
    assert not plain.ok and plain.first        # planted mismatches, reported with their values
