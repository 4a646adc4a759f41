"""Keyed fingerprints of device buffers (kernel_forge/gpu/fingerprint.py)."""
import random

import numpy as np
import pytest

from kernel_forge.gpu.fingerprint import SOURCE, fingerprint, host_fingerprint, new_key


def test_a_single_flipped_bit_anywhere_changes_the_fingerprint():
    rng = np.random.default_rng(1)
    data = rng.integers(0, 256, 4099, dtype=np.uint8)
    key = new_key()
    base = host_fingerprint(data, key)
    for pos in [0, 1, 2, 3, 4, 2048, 4095, 4096, 4098]:
        for bit in (0, 7):
            changed = data.copy()
            changed[pos] ^= 1 << bit
            assert host_fingerprint(changed, key) != base, (pos, bit)


def test_swapping_words_or_moving_values_changes_the_fingerprint():
    data = np.arange(1, 1001, dtype=np.uint32)
    key = new_key()
    swapped = data.copy()
    swapped[[10, 500]] = swapped[[500, 10]]
    rolled = np.roll(data, 1)
    assert len({host_fingerprint(x, key) for x in (data, swapped, rolled)}) == 3


def test_the_fingerprint_depends_on_the_key_and_is_repeatable():
    data = np.linspace(-1, 1, 777, dtype=np.float32)
    k = new_key()
    assert host_fingerprint(data, k) == host_fingerprint(data.copy(), k)
    assert host_fingerprint(data, k) != host_fingerprint(data, k ^ 1)
    assert host_fingerprint(np.zeros(0, np.uint8), k) == 0
    # the same bytes whatever the dtype: the fingerprint is of the bytes
    assert host_fingerprint(data, k) == host_fingerprint(data.view(np.uint16), k)


def test_keys_are_64_bit_and_not_repeated():
    keys = {new_key() for _ in range(64)}
    assert len(keys) == 64 and all(0 <= k < 2**64 for k in keys)


def test_the_kernel_compiles_with_nvrtc():
    from kernel_forge.gpu.nvrtc import compile_source

    result = compile_source(SOURCE, arch="sm_90", defines={})
    assert result.cubin and b"kf_fingerprint" in result.cubin


@pytest.mark.gpu
@pytest.mark.parametrize("nbytes, offset", [(0, 0), (1, 0), (3, 0), (4, 0), (5, 0), (4099, 0), (4099, 1),
                                            ((1 << 22) + 3, 2), (1 << 26, 0)])
def test_gpu_fingerprint_equals_the_host_specification(nbytes, offset):
    import cupy

    rng = np.random.default_rng(nbytes)
    host = rng.integers(0, 256, nbytes + offset, dtype=np.uint8)
    stream = cupy.cuda.Stream(non_blocking=True)
    with stream:                               # the worker's order: upload on its stream, then sync
        dev = cupy.asarray(host)[offset:]      # offset 1 and 2: a pointer not aligned to 4 bytes
        stream.synchronize()
        key = random.getrandbits(64)
        got = fingerprint(dev, key, stream)
        assert got == host_fingerprint(host[offset:], key)
        if nbytes:
            dev[nbytes // 2] ^= 0x10
            assert fingerprint(dev, key, stream) != got
