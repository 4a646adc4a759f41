"""Masked copies of correct answers: what keeps invariant 11 of ARCHITECTURE.md.

**Invariant 11 — no correct answer is readable by a candidate while it runs.**  A candidate's
kernel can read any device memory mapped in the worker's context by pointer arithmetic from its
own buffers (a scan forward from the end of its output found a correct copy of C that the harness
had left there, and copied it instead of computing: 1.41x its honest twin under --quick).  So
every copy of a correct output the worker keeps on the GPU is stored *masked*:

- the expected values (uploaded once per case and seed, resident across candidates) are XORed
  with a keystream drawn when they are uploaded; only the comparison kernel undoes it, given the
  key as an argument after the candidate's launches (:mod:`.compare`);
- the copies kept of a stage's outputs (first and second checked launch, the randomly chosen
  timed launch) are written masked with a key drawn for the run (:func:`mask_copy`, a ``kf_``
  kernel, instead of a plain copy); the comparison kernel, the fingerprint kernel and the host
  (sampled values) undo it;
- at the end of every run the output buffers themselves are masked in place (they hold the last
  launch's outputs), and the module's globals are put back to their load-time image (a cache an
  earlier candidate filled is wiped), so memory later freed into CuPy's pool holds no answer;
- a Python baseline's temporaries (CuPy's own arrays) come from a separate pool that is zeroed
  and released after each baseline run (:class:`~kernel_forge.gpu.scrubbed_pool.ScrubbedPool`).

The key is never stored in a device buffer: it exists on the GPU only as an argument of the
harness's own kernels.  A known plaintext does not give the key away: the keystream of 8-byte
word ``w`` is ``mix(mix(w + key) + key)`` (``mix`` the SplitMix64 finaliser), so three values a
candidate computed itself, found at three places, do not reveal a fourth (a constant XOR key
would: three equal differences would find the array and its key at once).  Bytes are masked
by position: byte ``o`` of a buffer is XORed with byte ``o % 8`` (little-endian) of word
``o // 8``'s keystream, so element ``i`` of size ``s`` uses bits ``8 * (i*s % 8)`` up of word
``i*s // 8``, whatever the element type.  ``KFORGE_TEST_NO_MASK=1`` (a test hook, like
``KFORGE_TEST_FORGE_COMPARE``) stores everything unmasked: the memory-scan attack kernels of
tests/adversarial/ are shown to find an answer then, and none with masking on.
"""
from __future__ import annotations

import os

import numpy as np

#: test hook: keep answers unmasked (the memory-scan attacks must then find one)
NO_MASK_ENV = "KFORGE_TEST_NO_MASK"

#: device functions shared by the mask, comparison and fingerprint kernels
DEVICE = r"""
typedef unsigned long long u64;
__device__ __forceinline__ u64 kf_mix(u64 z) {
    z ^= z >> 30; z *= 0xBF58476D1CE4E5B9ull;
    z ^= z >> 27; z *= 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}
// the keystream of 8-byte word w
__device__ __forceinline__ u64 kf_ks(u64 w, u64 key) { return kf_mix(kf_mix(w + key) + key); }
// the mask of element i of a buffer of `size`-byte elements (size 1, 2, 4 or 8)
__device__ __forceinline__ u64 kf_ks_elem(u64 i, unsigned size, u64 key) {
    u64 o = i * size;
    u64 bits = kf_ks(o >> 3, key) >> ((o & 7) * 8);
    return size == 8 ? bits : (bits & ((1ull << (8 * size)) - 1));
}
"""

SOURCE = DEVICE + r"""
#define KF_MASK(NAME, T) \
extern "C" __global__ void NAME(const T* src, T* dst, u64 n, u64 key) { \
    for (u64 i = blockIdx.x * (u64)blockDim.x + threadIdx.x; i < n; i += (u64)gridDim.x * blockDim.x) \
        dst[i] = src[i] ^ (T)kf_ks_elem(i, sizeof(T), key); \
}
KF_MASK(kf_mask_u8, unsigned char)
KF_MASK(kf_mask_u16, unsigned short)
KF_MASK(kf_mask_u32, unsigned int)
KF_MASK(kf_mask_u64, u64)
"""

_NAMES = {1: "kf_mask_u8", 2: "kf_mask_u16", 4: "kf_mask_u32", 8: "kf_mask_u64"}
_UNSIGNED = {1: np.uint8, 2: np.uint16, 4: np.uint32, 8: np.uint64}
_BLOCK = 256
_MAX_BLOCKS = 4096
_module = None


def enabled() -> bool:
    """Whether answers are masked (always, unless the test hook turns it off)."""
    return not os.environ.get(NO_MASK_ENV)


def _kernel(width: int):
    import cupy

    global _module
    if _module is None:
        _module = cupy.RawModule(code=SOURCE)
    return _module.get_function(_NAMES[width])


def _width(array) -> int:
    size = int(np.dtype(array.dtype).itemsize)
    if size not in _NAMES:
        raise ValueError(f"cannot mask elements of {size} bytes")
    return size


def mask_copy(dst, src, key: int, stream) -> None:
    """``dst = src`` XOR the keystream of ``key`` (same shape and dtype, contiguous); a ``kf_``
    kernel on ``stream``.  ``dst is src`` masks (or unmasks) in place."""
    n = int(src.size)
    if not n:
        return
    width = _width(src)
    grid = max(1, min(_MAX_BLOCKS, -(-n // _BLOCK)))
    t = _UNSIGNED[width]
    with stream:
        _kernel(width)((grid,), (_BLOCK,), (src.reshape(-1).view(t), dst.reshape(-1).view(t), np.uint64(n),
                                            np.uint64(key & (2**64 - 1))))


def mask_inplace(array, key: int, stream) -> None:
    mask_copy(array, array, key, stream)


# -- the specification, on the host ----------------------------------------------------------

def mix64(z: np.ndarray) -> np.ndarray:
    """The SplitMix64 finaliser on uint64 arrays (``kf_mix`` on the device; the fingerprint's too)."""
    z = z ^ (z >> np.uint64(30))
    z = z * np.uint64(0xBF58476D1CE4E5B9)
    z = z ^ (z >> np.uint64(27))
    z = z * np.uint64(0x94D049BB133111EB)
    return z ^ (z >> np.uint64(31))


def keystream_words(words: np.ndarray, key: int) -> np.ndarray:
    """The keystream of the given 8-byte word indices."""
    k = np.uint64(key & (2**64 - 1))
    with np.errstate(over="ignore"):
        return mix64(mix64(np.asarray(words, dtype=np.uint64) + k) + k)


def element_masks(indices, itemsize: int, key: int) -> np.ndarray:
    """The mask of each element index of a buffer of ``itemsize``-byte elements, as unsigned
    integers of that size (what :func:`kf_ks_elem` gives)."""
    idx = np.asarray(indices, dtype=np.uint64)
    with np.errstate(over="ignore"):
        o = idx * np.uint64(itemsize)
    bits = keystream_words(o >> np.uint64(3), key) >> ((o & np.uint64(7)) * np.uint64(8))
    return bits.astype(_UNSIGNED[itemsize])   # truncation keeps the low bytes


def host_mask(values: np.ndarray, key: int) -> np.ndarray:
    """``values`` (a whole buffer) masked or unmasked with ``key``: a new array, same dtype."""
    a = np.ascontiguousarray(values)
    size = a.dtype.itemsize
    flat = a.reshape(-1).view(_UNSIGNED[size])
    out = flat ^ element_masks(np.arange(flat.size), size, key)
    return out.view(a.dtype).reshape(a.shape)


def unmask_at(values: np.ndarray, indices, key: int) -> np.ndarray:
    """Values read at ``indices`` of a masked buffer, unmasked (same dtype)."""
    v = np.ascontiguousarray(values)
    size = v.dtype.itemsize
    raw = v.reshape(-1).view(_UNSIGNED[size]) ^ element_masks(indices, size, key)
    return raw.view(v.dtype).reshape(v.shape)


