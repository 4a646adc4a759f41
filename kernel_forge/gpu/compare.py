"""Output checks on the GPU: :func:`kernel_forge.model.tolerance.compare`'s rule, computed where the data is.

One ``kf_compare_*`` kernel per (stored type, expected type, exact or tolerance) reads the
candidate's output and the expected values (uploaded once per case and seed) and reduces them to
a summary: mismatches, unwritten (poison) elements, misplaced NaN/Inf, the largest absolute and
relative errors and the worst element's share of its tolerance.  Only when there are mismatches a
second pass marks them so the first few can be reported with their values.  The arithmetic is the
specification's (verify.element_checks) in float64, compiled without FMA contraction, so the
summary equals the CPU's bit for bit (tests/gpu/test_compare_gpu.py).
"""
from __future__ import annotations

import numpy as np

from kernel_forge.common.dtypes import DType, poison_bits
from kernel_forge.model.task import Tolerance
from kernel_forge.model.tolerance import OutputCheck, exact, first_entries, rel_floor
from kernel_forge.gpu.mask import DEVICE, unmask_at

_STORE = {  # dtype name -> (C type of the stored bits, expression turning `bits` into a double)
    "float32": ("unsigned int", "(double)__uint_as_float(bits)"),
    "float64": ("u64", "__longlong_as_double((long long)bits)"),
    "float16": ("unsigned short", "kf_half(bits)"),
    "bfloat16": ("unsigned short", "(double)__uint_as_float(((unsigned int)bits) << 16)"),
    "int8": ("unsigned char", "(double)(signed char)bits"),
    "int16": ("unsigned short", "(double)(short)bits"),
    "int32": ("unsigned int", "(double)(int)bits"),
    "int64": ("u64", "(double)(long long)bits"),
    "uint8": ("unsigned char", "(double)bits"),
    "uint16": ("unsigned short", "(double)bits"),
    "uint32": ("unsigned int", "(double)bits"),
    "uint64": ("u64", "(double)bits"),
}
_INT = {  # dtype name -> expression turning `bits` into the integer compared exactly
    "int8": "(long long)(signed char)bits", "int16": "(long long)(short)bits", "int32": "(long long)(int)bits",
    "int64": "(long long)bits", "uint8": "(long long)bits", "uint16": "(long long)bits",
    "uint32": "(long long)bits", "uint64": "bits",
}
_EXP = {"float32": "float", "float64": "double", "int64": "long long", "uint64": "u64"}
#: expected C type -> (C type of its bits, expression turning `eb` into the value)
_EXP_BITS = {"float": ("unsigned int", "__uint_as_float(eb)"), "double": ("u64", "__longlong_as_double((long long)eb)"),
             "long long": ("u64", "(long long)eb"), "u64": ("u64", "eb")}

_HEAD = DEVICE + r"""
__device__ __forceinline__ double kf_half(unsigned short h) {
    int e = (h >> 10) & 0x1f, m = h & 0x3ff;
    double v;
    if (e == 0) v = ldexp((double)m, -24);
    else if (e == 31) v = m ? __longlong_as_double(0x7ff8000000000000ll) : __longlong_as_double(0x7ff0000000000000ll);
    else v = ldexp((double)(m | 0x400), e - 25);
    return (h & 0x8000) ? -v : v;
}
__device__ __forceinline__ u64 kf_bits(double v) { return (u64)__double_as_longlong(v); }
"""

_BODY = r"""
extern "C" __global__ void NAME(const STORE* a, const EBITS* e, u64 n, double atol, double rtol, double floor,
                                u64 poison, int check_poison, u64* counts, u64* maxes, unsigned char* mask,
                                int want_mask, u64 akey, int amasked, u64 ekey, int emasked) {
    u64 bad = 0, unw = 0, nfb = 0, mabs = 0, mrel = 0, mratio = 0;
    for (u64 i = blockIdx.x * (u64)blockDim.x + threadIdx.x; i < n; i += (u64)gridDim.x * blockDim.x) {
        STORE bits = a[i];
        if (amasked) bits ^= (STORE)kf_ks_elem(i, sizeof(STORE), akey);
        EBITS eb = e[i];
        if (emasked) eb ^= (EBITS)kf_ks_elem(i, sizeof(EBITS), ekey);
        const EXP ev_ = ECONV;
        bool un = check_poison && (u64)bits == poison;
        bool b, nf = false;
        double diff, rel, ratio;
        BODY
        un = un && b;     // the poison where the reference has that very value was written (an int8 -127)
        bad += b; unw += un; nfb += nf;
        u64 d = kf_bits(diff), r = kf_bits(rel), q = kf_bits(ratio);
        mabs = d > mabs ? d : mabs; mrel = r > mrel ? r : mrel; mratio = q > mratio ? q : mratio;
        if (want_mask) mask[i] = b;
    }
    for (int o = 16; o > 0; o >>= 1) {
        bad += __shfl_down_sync(0xffffffffu, bad, o);
        unw += __shfl_down_sync(0xffffffffu, unw, o);
        nfb += __shfl_down_sync(0xffffffffu, nfb, o);
        u64 x = __shfl_down_sync(0xffffffffu, mabs, o); mabs = x > mabs ? x : mabs;
        x = __shfl_down_sync(0xffffffffu, mrel, o); mrel = x > mrel ? x : mrel;
        x = __shfl_down_sync(0xffffffffu, mratio, o); mratio = x > mratio ? x : mratio;
    }
    if ((threadIdx.x & 31) == 0) {
        if (bad) atomicAdd(&counts[0], bad);
        if (unw) atomicAdd(&counts[1], unw);
        if (nfb) atomicAdd(&counts[2], nfb);
        atomicMax(&maxes[0], mabs); atomicMax(&maxes[1], mrel); atomicMax(&maxes[2], mratio);
    }
}
"""

_FLOAT = r"""
        double av = CONVERT, ev = (double)ev_;
        bool both = isfinite(av) && isfinite(ev);
        diff = both ? fabs(av - ev) : 0.0;
        double lim = atol + rtol * fabs(both ? ev : 0.0);
        bool same_nf = (isnan(av) && isnan(ev)) || (isinf(av) && isinf(ev) && (signbit(av) == signbit(ev)));
        nf = !both && !same_nf;
        b = (both && !(diff <= lim)) || nf;
        rel = both ? diff / fmax(fabs(ev), floor) : 0.0;
        ratio = (both && diff != 0.0) ? diff / lim : 0.0;
"""

_EXACT = r"""
        ITYPE av = CONVERT, ev = (ITYPE)ev_;
        b = av != ev;
        diff = fabs((double)av - (double)ev);
        rel = diff / fmax(fabs((double)ev), floor);
        ratio = diff == 0.0 ? 0.0 : __longlong_as_double(0x7ff0000000000000ll);
"""

_kernels: dict[tuple[str, str, bool], object] = {}
_BLOCK = 256
_MAX_BLOCKS = 2048


def kernel_source(dtype: DType, expected_dtype: str, exact_mode: bool) -> tuple[str, str]:
    """``(name, CUDA source)`` of the comparison kernel for these types (no GPU needed)."""
    store, convert = _STORE[dtype.name]
    name = f"kf_compare_{dtype.name}_{expected_dtype}_{'exact' if exact_mode else 'tol'}"
    if exact_mode:
        itype = "u64" if dtype.name == "uint64" else "long long"
        body = _EXACT.replace("ITYPE", itype).replace("CONVERT", _INT[dtype.name])
    else:
        body = _FLOAT.replace("CONVERT", convert)
    ebits, econv = _EXP_BITS[_EXP[expected_dtype]]
    src = _HEAD + (_BODY.replace("NAME", name).replace("STORE", store).replace("EBITS", ebits)
                   .replace("ECONV", econv).replace("EXP", _EXP[expected_dtype]))
    return name, src.replace("BODY", body)


#: NVRTC options: no FMA contraction, so the float64 arithmetic rounds exactly like NumPy's
OPTIONS = ("--fmad=false",)


def _kernel(dtype: DType, expected_dtype: str, exact_mode: bool):
    import cupy

    key = (dtype.name, expected_dtype, exact_mode)
    if key not in _kernels:
        name, src = kernel_source(dtype, expected_dtype, exact_mode)
        _kernels[key] = cupy.RawModule(code=src, options=OPTIONS).get_function(name)
    return _kernels[key]


def compare_on_gpu(name: str, actual, expected, dtype: DType, tol: Tolerance, stream, *,
                   shape: tuple[int, ...] | None = None, exact_ints: bool = True, check_poison: bool = True,
                   max_report: int = 5, reference_dtype=None, actual_key: int | None = None,
                   expected_key: int | None = None) -> OutputCheck:
    """Summary of ``actual`` (a CuPy array of stored values) against ``expected`` (a CuPy array
    made from :func:`kernel_forge.model.tolerance.device_expected`), as :func:`kernel_forge.model.tolerance.compare`
    would give it for the same host arrays.  ``reference_dtype`` is the reference's own dtype (the
    reported expected values are shown in it, as the CPU shows them).  ``actual_key`` /
    ``expected_key``: the array is stored masked with that key (:mod:`.mask`); the kernel undoes
    it element by element, and so does the host for the first mismatches it reports."""
    import cupy

    shape = tuple(shape if shape is not None else actual.shape)
    total = int(actual.size)
    if int(expected.size) != total:
        return OutputCheck(name, False, total, mismatches=total,
                           shape_error=f"output has {total} elements, reference {int(expected.size)}")
    exact_mode = exact(dtype, tol, exact_ints)
    kern = _kernel(dtype, np.dtype(expected.dtype).name, exact_mode)
    flat_a = actual.reshape(-1).view(np.dtype(f"u{dtype.itemsize}"))
    flat_e = expected.reshape(-1)
    floor = rel_floor(dtype, tol, exact_ints)
    with stream:
        counts = cupy.zeros(3, dtype=cupy.uint64)
        maxes = cupy.zeros(3, dtype=cupy.uint64)
        dummy = cupy.empty(1, dtype=cupy.uint8)

        def launch(mask, want: int) -> None:
            if total:
                grid = max(1, min(_MAX_BLOCKS, -(-total // _BLOCK)))
                kern((grid,), (_BLOCK,), (flat_a, flat_e, np.uint64(total), np.float64(tol.atol), np.float64(tol.rtol),
                                          np.float64(floor), np.uint64(poison_bits(dtype)), np.int32(bool(check_poison)),
                                          counts, maxes, mask, np.int32(want),
                                          np.uint64((actual_key or 0) & (2**64 - 1)), np.int32(actual_key is not None),
                                          np.uint64((expected_key or 0) & (2**64 - 1)),
                                          np.int32(expected_key is not None)))

        launch(dummy, 0)
        got = cupy.concatenate([counts, maxes]).get(stream=stream)
        n_bad, unwritten, nonfinite = (int(x) for x in got[:3])
        max_abs, max_rel, ratio = (float(x) for x in got[3:].view(np.float64))
        first = []
        if n_bad:
            mask = cupy.empty(total, dtype=cupy.uint8)
            counts.fill(0)
            maxes.fill(0)
            launch(mask, 1)
            idx = cupy.flatnonzero(mask)[:max_report]
            idx_h = idx.get(stream=stream)
            a_h = flat_a[idx].get(stream=stream)
            if actual_key is not None:
                a_h = unmask_at(a_h, idx_h, actual_key)
            a_h = a_h.view(dtype.numpy)
            e_h = flat_e[idx].get(stream=stream)
            if expected_key is not None:
                e_h = unmask_at(e_h, idx_h, expected_key)
            if reference_dtype is not None:
                e_h = e_h.astype(reference_dtype)      # exact: device_expected only widened them
            first = first_entries(idx_h, a_h, e_h, dtype, shape)
            if nonfinite:
                max_abs = float("inf")
    return OutputCheck(name=name, ok=n_bad == 0, total=total, mismatches=n_bad, unwritten=unwritten,
                       nonfinite_mismatches=nonfinite, max_abs=max_abs, max_rel=max_rel, first=first,
                       tol_ratio=ratio)
