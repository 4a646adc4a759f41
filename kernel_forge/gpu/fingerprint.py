"""Keyed fingerprints of device buffers: "is this buffer still bit-for-bit what it was?" without
copying it to the host.

The worker uses them to tell whether a const input changed and whether a later launch left the
same outputs as the first (checked) launch, so a 256 MB output crosses the PCIe bus and the pipe
to the gate once per draw instead of four times.  The fingerprint of ``n`` bytes read as
little-endian 32-bit words ``w_i`` (the last one zero-padded) is

    sum over i of mix(mix(i + key) XOR w_i)   (mod 2**64)

with ``mix`` the SplitMix64 finaliser (Steele, Lea and Flood, "Fast splittable pseudorandom
number generators", OOPSLA 2014).  ``key`` is drawn by the worker from the OS's random source
for every case run and given only to the fingerprint kernel, and the fingerprints it compares
against are kept in host memory, so a candidate can neither rewrite the values a buffer is
compared with nor aim a change at the key; a change goes unnoticed with probability about 2**-64.
"""
from __future__ import annotations

import random

import numpy as np

from kernel_forge.gpu.mask import DEVICE, mix64

SOURCE = DEVICE + r"""
extern "C" __global__ void kf_fingerprint(const unsigned char* data, u64 nbytes, u64 key, u64* out, u64 mkey,
                                          int masked) {
    u64 words = (nbytes + 3) / 4, acc = 0;
    for (u64 i = blockIdx.x * (u64)blockDim.x + threadIdx.x; i < words; i += (u64)gridDim.x * blockDim.x) {
        u64 w = 0;
        if (4 * i + 4 <= nbytes && ((size_t)data & 3) == 0) {
            w = ((const unsigned int*)data)[i];
            if (masked) w ^= (unsigned int)(kf_ks((4 * i) >> 3, mkey) >> (((4 * i) & 7) * 8));
        } else {
            for (int b = 0; b < 4 && 4 * i + b < nbytes; ++b) {
                u64 o = 4 * i + b, v = data[o];
                if (masked) v ^= (kf_ks(o >> 3, mkey) >> ((o & 7) * 8)) & 0xff;
                w |= v << (8 * b);
            }
        }
        acc += kf_mix(kf_mix(i + key) ^ w);
    }
    for (int o = 16; o > 0; o >>= 1) acc += __shfl_down_sync(0xffffffffu, acc, o);
    if ((threadIdx.x & 31) == 0) atomicAdd(out, acc);
}
"""

_BLOCK = 256
_MAX_BLOCKS = 4096
_kernel = None


def new_key() -> int:
    return random.SystemRandom().getrandbits(64)


def fingerprint(array, key: int, stream, *, masked_with: int | None = None) -> int:
    """Fingerprint of a contiguous CuPy array's bytes, computed on ``stream`` (synchronises it)."""
    return fingerprint_many([array], key, stream, masked_with=masked_with)[0]


def fingerprint_many(arrays, key: int, stream, *, masked_with: int | None = None) -> list[int]:
    """Fingerprints of several contiguous CuPy arrays with one key and one synchronisation.
    ``masked_with``: the arrays are stored masked with that key (:mod:`.mask`): the fingerprint is
    of the unmasked bytes, as if they had been stored plainly."""
    import cupy

    global _kernel
    if _kernel is None:
        _kernel = cupy.RawKernel(SOURCE, "kf_fingerprint")
    arrays = list(arrays)
    if not arrays:
        return []
    for array in arrays:
        if not array.flags.c_contiguous:
            raise ValueError("fingerprint needs a contiguous array")
    with stream:
        out = cupy.zeros(len(arrays), dtype=cupy.uint64)
        for i, array in enumerate(arrays):
            nbytes = int(array.nbytes)
            if nbytes:
                words = (nbytes + 3) // 4
                grid = max(1, min(_MAX_BLOCKS, (words + _BLOCK - 1) // _BLOCK))
                _kernel((grid,), (_BLOCK,), (array, np.uint64(nbytes), np.uint64(key & (2**64 - 1)), out[i:i + 1],
                                             np.uint64((masked_with or 0) & (2**64 - 1)),
                                             np.int32(masked_with is not None)))
        return [int(v) for v in out.get(stream=stream)]


def fingerprint_named(arrays: dict[str, object], key: int, stream, *,
                      masked_with: int | None = None) -> dict[str, int]:
    """:func:`fingerprint_many` of named arrays: name -> fingerprint, in the arrays' order."""
    names = list(arrays)
    return dict(zip(names, fingerprint_many([arrays[n] for n in names], key, stream, masked_with=masked_with)))


def host_fingerprint(data: np.ndarray, key: int) -> int:
    """The same fingerprint computed with NumPy (the specification the GPU kernel is tested against)."""
    raw = np.ascontiguousarray(data).view(np.uint8).ravel()
    pad = (-raw.size) % 4
    words = np.concatenate([raw, np.zeros(pad, np.uint8)]).view("<u4").astype(np.uint64)
    i = np.arange(words.size, dtype=np.uint64)
    with np.errstate(over="ignore"):
        terms = mix64(mix64(i + np.uint64(key & (2**64 - 1))) ^ words)
        return int(terms.sum(dtype=np.uint64)) if terms.size else 0
