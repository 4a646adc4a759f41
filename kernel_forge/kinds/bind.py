"""Patterns bound to the task's signature: a kind's template (a ``bound`` kernel of the library,
``kernel_forge/kernels/KIND/NAME.cu``, written against role names) instantiated with the task's
entry name, its parameters as written, the storage type of each bound buffer (float, __half,
__nv_bfloat16), the optional parts the binding has (weight, bias, mean / rstd outputs, residual
...), the kind's parameters (epsilon, function, taps, edge mode) and a launch written in the
manifest's own size expressions.  The library headers a template includes are written in, like
``_io.cuh``, so each bound pattern is one self-contained file.

The result is one complete ``.cu`` per bound pattern: the template's body, then an entry point
with the task's exact signature that calls the body with the bound arguments.  It carries its
own launch and tunables (``// kforge:`` lines), so the tuner searches it like any template; the
tuner gates it first (:mod:`kernel_forge.search.tuner`).

:func:`instantiate` raises :class:`Unbindable` (with the reason) when a binding cannot be written:
a size that no kernel parameter carries, a storage type the pattern does not read, a kind with no
bound pattern yet.
"""
from __future__ import annotations

import re
from dataclasses import dataclass

from kernel_forge.common.dtypes import LANE_CTYPES
from kernel_forge.kernels import library
from kernel_forge.kinds.match import Match
from kernel_forge.kinds.rotary import TABLES

_CTYPES = {"float32": "float", "float16": "__half", "bfloat16": "__nv_bfloat16"}
_INTS = {"int32": "int", "int64": "long long", "uint32": "unsigned", "uint64": "unsigned long long"}
_SMALL_INTS = {"int8": "signed char", "uint8": "unsigned char", "int16": "short", "uint16": "unsigned short",
               "bool": "bool"}


#: what a bound pattern's file name (its attempts' label) starts with
LABEL_PREFIX = "bound_"


class Unbindable(Exception):
    """A match the bound patterns cannot be instantiated for (the message says why)."""


@dataclass(frozen=True)
class Bound:
    pattern: str       #: the template's stem (its kind's pattern)
    label: str         #: the file name the tuner records it under
    source: str        #: the complete .cu
    match: Match


class _Writer:
    """The pieces one instantiation is assembled from."""

    def __init__(self, task, match: Match, base: str = ""):
        self.task, self.match = task, match
        self.base = base                        #: the kind's template this instantiation stands for
        self.types: dict[str, str] = {}
        self.defines: dict[str, str] = {}
        self.slots: dict[str, str] = {}
        self.headers: set[str] = set()
        self.template: str | None = None        #: a writer's choice of template (a library name), in place of its kind's

    # -- roles -----------------------------------------------------------------------------
    def role(self, role: str) -> str | None:
        return self.match.binding.get(role)

    def buffer(self, role: str, *, required: bool = True, default_type: str = "float", small_ints: bool = False,
               double: bool = False) -> str:
        """The argument passed for a buffer role (its parameter, or nullptr), its type declared
        (8- and 16-bit integers only where the pattern reads them: ``small_ints``; float64 only
        where it computes in double: ``double``)."""
        name = self.role(role)
        if name is None:
            if required:
                raise Unbindable(f"the binding has no {role}")
            self.types[role] = default_type
            return "nullptr"
        dt = self.task.arg(name).param.dtype
        floats = {**_CTYPES, **({"float64": "double"} if double else {})}
        ctype = floats.get(dt.name) if dt.is_float else {**_INTS, **(_SMALL_INTS if small_ints else {})}.get(dt.name)
        if ctype is None:
            raise Unbindable(f"{name} is {dt.name}; the bound patterns read float32, float16, bfloat16 and 32/64-bit integers")
        if ctype == "__half":
            self.headers.add("#include <cuda_fp16.h>\n#define KF_HALF 1")
        if ctype == "__nv_bfloat16":
            self.headers.add("#include <cuda_bf16.h>\n#define KF_BF16 1")
        if ctype == "signed char" and small_ints:
            self.headers.add("#define KF_INT8 1")
            words = re.findall(r"\w+", self.task.arg(name).param.text)
            if "char" in words and "signed" not in words and "unsigned" not in words:
                ctype = "char"        # plain char is its own C++ type: the parameter's pointer must convert
        self.types[role] = ctype
        return name

    def size(self, role: str) -> str:
        """A size role as a C expression over the kernel's parameters (``B*T`` -> a product; a
        literal count such as one vector's ``1`` as it is)."""
        names = self._names(role)
        return "(" + " * ".join(f"(long long)({n})" for n in names) + ")"

    def launch_size(self, role: str) -> str:
        """A size role in the manifest's expressions, for the ``// kforge:`` launch lines."""
        parts = []
        for n in self._names(role):
            if n.isdigit():
                parts.append(n)
                continue
            value = self.task.arg(n).value
            if value is None:
                raise Unbindable(f"the size {n} has no value expression in the manifest")
            parts.append(f"({value})")
        return " * ".join(parts)

    def launch_rows(self, buffer: str, cols_role: str) -> str:
        """The rows of ``buffer`` of ``cols_role`` columns, in the manifest's expressions: its size
        over the columns (a count no kernel parameter need carry -- a bound pattern that launches
        one block row per row reads it back from ``gridDim``)."""
        return f"({self.launch_count(buffer)}) // ({self.launch_size(cols_role)})"

    def launch_count(self, buffer: str) -> str:
        """How many values ``buffer`` holds, in the manifest's expressions (a vector type's lanes counted)."""
        arg = self.task.arg(buffer)
        lanes = [str(arg.param.lanes)] if arg.param.lanes > 1 else []
        return " * ".join([f"({e})" for e in arg.shape] + lanes)

    def rows_arg(self, buffer: str) -> str:
        """The row count of a pattern launched as ``cdiv(ROWS, RPB)`` blocks: its parameter, or, when no
        parameter carries it (FlashInfer's and DeepSpeed's norms take it from the launch), the launch
        itself: ROWS set to rows * RPB, a block per row, and the kernel reads the count back from
        ``gridDim.x`` (the blocks past rows / RPB find no row of theirs)."""
        if self.role("rows"):
            self.slots["ROWS"] = self.launch_size("rows")
            return self.size("rows")
        self.slots["ROWS"] = f"({self.launch_rows(buffer, 'cols')}) * RPB"
        return "(long long)gridDim.x"

    def axis_walk(self) -> tuple[str, str, str]:
        """A walk along an axis that is not the last (the axis templates: a thread column per position):
        the POSITIONS slot set to outer * inner in the manifest's sizes, and (outer, axis, inner) as C
        expressions (outer 1 when unbound: one matrix, a column walk)."""
        outer = self.role("outer")
        self.slots["POSITIONS"] = (f"{self.launch_size('outer')} * " if outer else "") + self.launch_size("inner")
        return (self.size("outer") if outer else "1LL"), self.size("axis"), self.size("inner")

    def _names(self, role: str) -> list[str]:
        expr = self.role(role)
        if not expr:
            raise Unbindable(f"no kernel parameter carries the {role} (a size the kernel must be given)")
        return expr.split("*")

    def scalar_arg(self, role: str, default: str = "1.0f") -> str:
        """A float role's value in the entry: its parameter, or the one value of a buffer that
        holds it (a scale passed by pointer, as vLLM's quantization kernels take it)."""
        name = self.role(role)
        if not name:
            return default
        if self.task.arg(name).is_buffer:
            self.buffer(role)
            return f"kf_ld({name})"
        return f"(float)({name})"

    def scalar(self, role: str, param: str, default: float) -> str:
        """A float role: its parameter, else the kind's parameter as a literal."""
        name = self.role(role)
        if name:
            return f"(float)({name})"
        value = float(self.match.params.get(param, default))
        return f"{value!r}f" if "e" in repr(value) or "." in repr(value) else f"{value!r}.0f"

    # -- the file ----------------------------------------------------------------------------
    def source(self, template: str, call: str, what: str) -> str:
        body = library.by_name(template).source()      # the library headers it includes, written in
        for k, v in self.slots.items():
            body = body.replace(f"@@{k}@@", v)
        left = re.findall(r"@@\w+@@", body)
        if left:                     # pragma: no cover - a template and its writer disagree
            raise Unbindable(f"template {template} has unfilled slots {left}")
        sig = self.task.signature
        params = ", ".join(p.text for p in sig.params)
        head = [f"// {sig.name} -- bound pattern {template.split('/')[1]} for {what}, written by kforge for this",
                "// task's own signature (kernel_forge/kinds)."]
        types = [f"typedef {c} kf_{r}_t;" for r, c in sorted(self.types.items())]
        defs = [f"#define {k} {v}" for k, v in sorted(self.defines.items())]
        io = library.include_text("_io.cuh")
        entry = (f'extern "C" __global__ void __launch_bounds__(KF_THREADS)\n{sig.name}({params})\n{{\n'
                 f"    {call};\n}}\n")
        if any(p.lanes > 1 for p in sig.params):
            entry = self._vector_entry(call)
        return "\n".join([*head, *sorted(self.headers), *types, *defs, io, body, entry])

    def _vector_entry(self, call: str) -> str:
        """The entry of a signature with vector-typed pointers (``float4* x``): the call goes in a
        device function that takes each such buffer as a pointer to its lanes' type, under the
        same name, and the entry passes it the vectors' addresses as that type."""
        sig = self.task.signature
        inner, passed = [], []
        for p in sig.params:
            if p.lanes > 1:
                ctype = f"{'const ' if p.const else ''}{LANE_CTYPES[p.dtype.name]}*"
                if p.dtype.name == "float16":
                    self.headers.add("#include <cuda_fp16.h>\n#define KF_HALF 1")
                if p.dtype.name == "bfloat16":
                    self.headers.add("#include <cuda_bf16.h>\n#define KF_BF16 1")
                inner.append(f"{ctype} {p.name}")
                passed.append(f"reinterpret_cast<{ctype}>({p.name})")
            else:
                inner.append(p.text.replace("__grid_constant__", ""))
                passed.append(p.name)
        return (f"static __device__ __forceinline__ void kf_bound_body({', '.join(inner)})\n{{\n    {call};\n}}\n\n"
                f'extern "C" __global__ void __launch_bounds__(KF_THREADS)\n{sig.name}({", ".join(p.text for p in sig.params)})\n'
                f"{{\n    kf_bound_body({', '.join(passed)});\n}}\n")


# ------------------------------------------------------------------------------ per kind

def _row_norm(w: _Writer) -> str:
    m = w.match
    x, y = w.buffer("x"), w.buffer("y")
    wt = w.buffer("weight", required=False)
    bs = w.buffer("bias", required=False)
    stats = {r: w.buffer(r, required=False) for r in ("mean", "rstd", "var")}
    st = {w.types[r] for r, n in stats.items() if n != "nullptr"}
    if len(st) > 1:
        raise Unbindable("the statistics outputs have different types")
    for r in ("mean", "rstd", "var"):
        w.types.pop(r)
    w.types["s"] = st.pop() if st else "float"
    res, total = w.buffer("res", required=False), w.buffer("sum", required=False)     # x + res, normed (and kept)
    pre = w.buffer("pre_bias", required=False, default_type="float")                  # + bias[col], before the norm
    if m.params.get("group"):        # a group norm of outer x channels x inner: a row per (sample, group)
        w.slots["ROWS"] = f"{w.launch_size('outer')} * {w.launch_size('groups')}"
        rows, groups = f"({w.size('outer')} * {w.size('groups')})", w.size("groups")
        # int arithmetic: a 64-bit quotient is a call with a stack frame (a row's length is an int anyway)
        cols, inner = f"((int){w.size('channels')} / (int){groups} * (int){w.size('inner')})", w.size("inner")
    else:
        rows = w.rows_arg(y)
        cols, inner, groups = w.size("cols"), "1LL", "1LL"
    w.defines.update(KF_GROUP=int(bool(m.params.get("group"))),
                     KF_RMS=int(m.params.get("norm") in ("rms", "l2")), KF_L2=int(m.params.get("norm") == "l2"),
                     KF_HAS_W=int(wt != "nullptr"), KF_W_OFFSET=f"{float(m.params.get('weight_offset', 0.0))!r}f",
                     KF_HAS_B=int(bs != "nullptr"), KF_MEAN=int(stats["mean"] != "nullptr"),
                     KF_RSTD=int(stats["rstd"] != "nullptr"), KF_VAR=int(stats["var"] != "nullptr"),
                     KF_ADD=int(res != "nullptr"), KF_SUM=int(total != "nullptr"), KF_PRE_BIAS=int(pre != "nullptr"))
    if pre != "nullptr" and m.params.get("group"):
        raise Unbindable("a bias added before the norm is bound for row norms, not group norms")
    io = [n for n in (x, y, res, total) if n != "nullptr"]
    w.defines["KF_ALIAS"] = int(len(set(io)) < len(io))      # in place: no __restrict__ on those four
    eps = w.scalar("eps", "eps", 1e-5)
    if w.role("ldx") and (res != "nullptr" or total != "nullptr" or pre != "nullptr" or m.params.get("group")):
        raise Unbindable("a strided x is bound for a plain row norm only (no residual, no group)")
    return (f"kf_row_norm({x}, {res}, {total}, {wt}, {bs}, {y}, {stats['mean']}, {stats['rstd']}, {stats['var']}, "
            f"{rows}, (int){cols}, {eps}, (int){inner}, (int){groups}, {_row_stride(w, cols)}, {pre})")


def _row_stride(w: _Writer, cols: str) -> str:
    """How far apart x's rows are: ``cols``, or the parameter of a strided view (``ldx``: a row of
    cols values in each of x's rows of ldx, as a BLAS ``ld`` or a padded vocabulary holds them)."""
    return w.size("ldx") if w.role("ldx") else f"(long long)({cols})"


def _row_softmax(w: _Writer) -> str:
    if w.match.params.get("dim") == "middle" and w.role("ldx"):
        raise Unbindable("a strided x is bound for a softmax along rows only")
    if w.match.params.get("dim") == "middle":
        return _axis_softmax(w)
    if w.match.params.get("backward"):
        return _softmax_backward(w)
    x, y = w.buffer("x"), w.buffer("y")
    index = w.buffer("index", required=False, default_type="int")      # a cross-entropy's targets
    bias = w.buffer("bias", required=False, small_ints=True)           # an additive mask per column (or flags)
    if bias != "nullptr" and (w.types["bias"] in _CTYPES.values()) == bool(w.match.params.get("mask_flags")):
        raise Unbindable(f"a softmax's bias is read as flags where it is an integer or boolean mask, else as values; "
                         f"{bias} is {w.types['bias']}")
    if index != "nullptr" and w.types["index"] in _CTYPES.values():
        raise Unbindable(f"a cross-entropy's targets are integers; {index} is {w.types['index']}")
    rows = w.rows_arg(y)
    w.defines.update(KF_LOG=int(bool(w.match.params.get("log"))), KF_CAUSAL=int(bool(w.match.params.get("causal"))),
                     KF_XENT=int(bool(w.match.params.get("xent"))), KF_HAS_BIAS=int(bias != "nullptr"))
    scale = _softmax_scale(w)
    # a bias of several rows broadcast: row r adds the bias's row r / group ("div"), r % group ("mod"), or
    # r % group + (r / (heads * group)) * group ("heads": a [B, 1, Tq, Tk] mask over each batch's heads)
    group = w.size("bias_group") if w.role("bias_group") else "1LL"
    never = "0x7fffffffffffffffLL"
    mode = w.match.params.get("bias_rows")
    bdiv, bmod, bblk = {"div": (group, never, never), "mod": ("1LL", group, never),
                        "heads": ("1LL", group, f"{w.size('bias_heads')} * {group}") if mode == "heads" else None
                        }.get(mode, ("1LL", "1LL", never))
    fill = w.match.params.get("mask_fill")
    flags = bool(w.match.params.get("mask_flags"))           # an integer or boolean mask of flags
    w.defines["KF_MASK_KEEP"] = 2 if flags else int(fill is not None)
    w.defines["KF_MASK_INVERT"] = int(bool(w.match.params.get("mask_invert")))
    if fill is not None:
        w.defines["KF_MASK_FILL"] = "(-__int_as_float(0x7f800000))" if fill == float("-inf") else f"({float(fill)!r}f)"
    return (f"kf_row_softmax({x}, {index}, {bias}, {y}, {rows}, (int){w.size('cols')}, {scale}, "
            f"{_row_stride(w, w.size('cols'))}, {bdiv}, {bmod}, {bblk})")


def _softmax_backward(w: _Writer) -> str:
    """The gradient through each row's softmax (or log-softmax) from its output and the output's gradient."""
    x, g, y = w.buffer("x"), w.buffer("g"), w.buffer("y")
    w.template = "row_softmax/softmax_backward"
    w.defines["KF_LOG"] = int(bool(w.match.params.get("log")))
    rows = w.rows_arg(y)
    return f"kf_softmax_backward({x}, {g}, {y}, {rows}, {w.size('cols')}, {w.scalar('scale', 'scale', 1.0)})"


def _axis_softmax(w: _Writer) -> str:
    """Softmax over an axis that is not the last: ``outer`` x ``axis`` x ``inner`` values, one
    softmax per (outer, inner) position (``outer`` unbound: a column softmax, one matrix)."""
    x, y = w.buffer("x"), w.buffer("y")
    w.template = "row_softmax/softmax_axis"
    w.defines["KF_LOG"] = int(bool(w.match.params.get("log")))
    scale = _softmax_scale(w)
    return f"kf_axis_softmax({x}, {y}, {', '.join(w.axis_walk())}, {scale})"


def _softmax_scale(w: _Writer) -> str:
    """The factor a softmax scales x by: its parameter, or one over it (a temperature), one over the square
    root of an integer parameter (``rsqrtf(head_dim)``, computed in the kernel), a constant written in
    the kernel, or 1."""
    scale = w.scalar("scale", "scale", 1.0)
    if w.match.params.get("scale_rsqrt") and w.role("scale"):
        return f"rsqrtf({scale})"
    return f"(1.0f / {scale})" if w.match.params.get("divide") and w.role("scale") else scale


#: the elementwise forms elementwise_f64 computes in double (one operand or two, scalars by value)
_F64_FORMS = ("map", "binary", "binary_act", "scale", "scale_act", "axpy", "axpby", "affine", "clamp", "affine_act",
              "act_affine")


def _elementwise_body(p: dict, row_bias: bool = False, res: bool = False) -> str:
    """The body of kf_op for an elementwise match's form, written for float (xv, zv the operands, bv
    a row's bias, rv the residual or a where's mask, alpha and beta the scalars); elementwise_f64
    computes the same body in double (kinds.maps.in_double)."""
    from kernel_forge.kinds.maps import BINARY, FUNCTIONS

    form = p.get("form", "map")
    act = FUNCTIONS[p.get("act", "identity")][1]
    if form == "binary":
        return f"const float a = xv, b = zv;\n    return {BINARY[p['op']][1]};"
    if form == "binary_scale":
        v = BINARY[p["op"]][1]
        return "const float a = xv, b = zv;\n    return " + (f"({v}) / alpha;" if p.get("divide") else f"alpha * ({v});")
    if form == "binary_act":
        return f"const float a = xv, b = zv;\n    float v = {BINARY[p['op']][1]};\n    v = {act};\n    return v;"
    if form in ("scale", "quantize") and p.get("divide"):
        return "return xv / alpha;"
    if form == "affine":
        return "return fmaf(alpha, xv, beta);"
    if form == "scale_act":
        return f"float v = alpha * xv;\n    v = {act};\n    return v;"
    if form == "affine_act":         # constants the user's kernel writes, fitted from the reference
        return f"float v = fmaf({_float_literal(p['a'])}, xv, {_float_literal(p['b'])});\n    v = {act};\n    return v;"
    if form == "act_affine":
        return f"float v = xv;\n    v = {act};\n    return fmaf({_float_literal(p['a'])}, v, {_float_literal(p['b'])});"
    if form in ("scale", "dequantize"):
        return "return alpha * xv;"
    if form == "quantize":
        return "return xv * alpha;"
    if form == "axpy":
        return "return fmaf(alpha, xv, zv);"
    if form == "mul_add":            # alpha * x * z + r (alpha 1 where no parameter carries it)
        return "return fmaf(alpha * xv, zv, rv);"
    if form == "axpby":
        return "return fmaf(alpha, xv, beta * zv);"
    if form == "clamp":
        return "return fminf(fmaxf(xv, alpha), beta);"
    if form == "masked_fill":
        return "return zv != 0.0f ? alpha : xv;"
    if form == "where":
        return "return rv != 0.0f ? xv : zv;"
    if form in ("gated", "gated_halves"):
        return f"float v = xv;\n    v = {act};\n    return v * zv;"
    # a map or a chain; a channel's bias or batch norm, or a column's scale, is applied to xv before kf_op (the
    # template's KF_CHANNEL, KF_HAS_CSCALE); out_scale: the activation times alpha
    scaled = "alpha * v" if p.get("out_scale") else "v"
    return f"float v = xv{' + bv' if row_bias else ''};\n    v = {act};\n    return {scaled}{' + rv' if res else ''};"


def _float_literal(v: float) -> str:
    """A float constant as CUDA reads it exactly (``3.921568859e-03f``)."""
    return f"{float(v):.9e}f"


def _elementwise_f64(w: _Writer) -> str:
    """Double storage: elementwise_f64, the op computed in double (kinds.maps.in_double)."""
    from kernel_forge.kinds.maps import in_double

    p = w.match.params
    form = p.get("form", "map")
    if form not in _F64_FORMS:
        raise Unbindable(f"the float64 elementwise pattern computes maps and two-operand forms, not {form}")
    body = _elementwise_body(p)
    y, x = w.buffer("y", double=True), w.buffer("x", double=True)
    z = w.buffer("z", required=False, default_type="double", double=True)
    if any(w.types[r] != "double" for r in ("x", "y", "z")):
        raise Unbindable("the float64 elementwise pattern reads and writes double only")
    w.template = "elementwise/elementwise_f64"
    w.slots["OP"] = ("__device__ __forceinline__ double kf_op(double xv, double zv, double alpha, double beta)\n"
                     f"{{\n    {in_double(body)}\n}}")
    w.slots["N"] = w.launch_size("n")
    w.defines["KF_HAS_Z"] = int(z != "nullptr")
    if any(w.role(r) and w.task.arg(w.role(r)).is_buffer for r in ("alpha", "beta")):
        raise Unbindable("the float64 elementwise pattern takes its scalars by value")
    scalar = {r: (f"(double)({w.role(r)})" if w.role(r) else "0.0") for r in ("alpha", "beta")}
    return f"kf_elementwise_f64({x}, {z}, {y}, {w.size('n')}, {scalar['alpha']}, {scalar['beta']})"


#: the integer forms' bodies (a, b the operands, alpha the scalar; U the unsigned type of the storage's width,
#: so sums, differences and products wrap as the storage does, with no signed overflow)
_INT_BODIES = {
    ("map", "identity"): "a", ("map", "neg"): "(T)(U)(0 - (U)a)", ("map", "abs"): "a < 0 ? (T)(U)(0 - (U)a) : a",
    ("map", "not"): "~a",
    ("binary", "add"): "(T)((U)a + (U)b)", ("binary", "sub"): "(T)((U)a - (U)b)", ("binary", "mul"): "(T)((U)a * (U)b)",
    ("binary", "max"): "a > b ? a : b", ("binary", "min"): "a < b ? a : b", ("binary", "and"): "a & b",
    ("binary", "or"): "a | b", ("binary", "xor"): "a ^ b",
    ("scale", None): "(T)((U)alpha * (U)a)", ("shift", None): "(T)((U)a + (U)alpha)",
    ("axpy", None): "(T)((U)alpha * (U)a + (U)b)",
}


def _elementwise_int(w: _Writer) -> str:
    """32- or 64-bit integers of one type: elementwise_int, exact."""
    p = w.match.params
    form = p.get("form", "map")
    body = _INT_BODIES.get((form, p.get("act") or p.get("op")))
    if body is None:
        raise Unbindable(f"the integer elementwise pattern has no form {form} {p.get('act') or p.get('op') or ''}")
    y, x = w.buffer("y"), w.buffer("x")
    z = w.buffer("z", required=False, default_type=w.types["y"])
    if any(w.types[r] != w.types["y"] or w.types[r] not in _INTS.values() for r in ("x", "z")):
        raise Unbindable("the integer elementwise pattern reads and writes 32- or 64-bit integers of one type")
    if w.role("alpha") and w.task.arg(w.role("alpha")).is_buffer:
        raise Unbindable("the integer elementwise pattern takes its scalar by value")
    wide = w.types["y"] in ("long long", "unsigned long long")
    unsigned = "unsigned long long" if wide else "unsigned"
    w.template = "elementwise/elementwise_int"
    w.slots["OP"] = (f"__device__ __forceinline__ kf_y_t kf_op(kf_y_t a, kf_y_t b, long long alpha)\n{{\n"
                     f"    typedef kf_y_t T;\n    typedef {unsigned} U;\n    (void)b; (void)alpha;\n    return {body};\n}}")
    w.slots["N"] = w.launch_size("n")
    w.slots["LANES"] = "2" if wide else "4"
    w.defines["KF_HAS_Z"] = int(z != "nullptr")
    alpha = f"(long long)({w.role('alpha')})" if w.role("alpha") else "0LL"
    return f"kf_elementwise_int({x}, {z}, {y}, {w.size('n')}, {alpha})"


def _adds(params: dict, operand: str) -> bool:
    """Whether an elementwise form adds the row-broadcast bias (``"bias"``) or the residual (``"res"``)."""
    form = params.get("form", "")
    return form.startswith("bias_") if operand == "bias" else form.endswith("_res")


def _elementwise(w: _Writer) -> str:
    p = w.match.params
    form = p.get("form", "map")
    if p.get("int"):
        return _elementwise_int(w)
    if any(w.task.arg(w.role(r)).param.dtype.name == "float64" for r in ("x", "y", "z") if w.role(r)):
        return _elementwise_f64(w)
    quant = form in ("quantize", "dequantize")        # int8 storage on one side, rounded and saturated on stores
    y, x = w.buffer("y", small_ints=quant), w.buffer("x", small_ints=quant)
    z = w.buffer("z", required=False, small_ints=form == "masked_fill")     # a mask of bytes or integers
    bias = w.buffer("bias", required=False)
    res = w.buffer("res", required=False)
    if form == "where":         # the mask takes the residual's place: a full-size operand of bytes or integers
        res = w.buffer("mask", small_ints=True)
        w.types["res"] = w.types.pop("mask")
    row_bias = bias != "nullptr" and p.get("broadcast") != "channel"
    second = p.get("second")            # a second output of the same operands, computed in the same pass
    has_res = res != "nullptr"
    # with two outputs, each body adds the bias and the residual where its own form does
    body = _elementwise_body(p, row_bias and (second is None or _adds(p, "bias")),
                             has_res and (second is None or _adds(p, "res")))
    w.slots["OP"] = ("__device__ __forceinline__ float kf_op(float xv, float zv, float bv, float rv, float alpha,\n"
                     "                                      float beta)\n"
                     f"{{\n    {body}\n}}")
    y2 = w.buffer("y2", required=False, default_type=w.types["y"])
    w.defines["KF_HAS_Y2"] = int(second is not None)
    if second is not None:
        if quant or form in ("gated_halves", "masked_fill", "where") or p.get("broadcast") == "channel":
            raise Unbindable(f"a second output is bound beside the plain elementwise forms, not {form}")
        body2 = _elementwise_body(second, row_bias and _adds(second, "bias"), has_res and _adds(second, "res"))
        w.slots["OP"] += ("\n\n__device__ __forceinline__ float kf_op2(float xv, float zv, float bv, float rv, "
                          "float alpha,\n                                       float beta)\n"
                          f"{{\n    {body2}\n}}")
    if form == "gated_halves":      # x and z: the two halves of each row of one buffer, each `cols` wide
        w.template = "elementwise/gated_halves"
        cols = w.size("cols")
        w.slots.update(ROWS=w.launch_rows(y, "cols"), COLS=w.launch_size("cols"))
        x, z = (f"{x} + {cols}", x) if p.get("act_on") == "second" else (x, f"{x} + {cols}")
        return f"kf_gated_halves({x}, {z}, {y}, {cols})"
    w.slots["N"] = w.launch_size("n")
    # per-channel vectors broadcast along a middle axis (NCHW): a bias, or a batch norm's four
    channel, bn = p.get("broadcast") == "channel", form.startswith("batchnorm")
    stats = [w.buffer(r, required=bn) for r in ("mean", "var", "scale", "offset")]
    cscale = w.buffer("scale_vec", required=False)       # x times a vector of one value a column
    w.types["cscale"] = w.types.pop("scale_vec")
    w.defines.update(KF_HAS_Z=int(z != "nullptr"), KF_HAS_BIAS=int(bias != "nullptr" and not channel),
                     KF_HAS_RES=int(res != "nullptr"), KF_CHANNEL=int(channel), KF_BN=int(bn),
                     KF_HAS_CSCALE=int(cscale != "nullptr"))
    if cscale != "nullptr" and channel:
        raise Unbindable("a column's scale is bound with a row-broadcast bias, not with per-channel vectors")
    cols = w.size("cols") if bias != "nullptr" or channel or cscale != "nullptr" else "1LL"
    inner = w.size("inner") if channel else "1LL"
    eps = w.scalar("eps", "eps", 1e-5) if bn else "0.0f"
    alpha = w.scalar_arg("alpha") if form != "masked_fill" or w.role("alpha") else w.scalar("alpha", "fill", 0.0)
    beta = w.scalar_arg("beta", "0.0f")
    ch = f"kf_chan{{{', '.join(stats)}, {eps}, {inner}}}"
    return (f"kf_elementwise({x}, {z}, {bias}, {res}, {y}, {w.size('n')}, {cols}, {alpha}, {beta}, {ch}, {y2}, "
            f"{cscale})")


def _stencil_operands(w: _Writer) -> tuple[str, str, str]:
    """A stencil's x, taps and y, and its compute type (kf_acc_t): float, or double where x or y is
    double (KF_F64: an HPC stencil's doubles, every operand double)."""
    x, y = w.buffer("x", double=True), w.buffer("y", double=True)
    taps = w.buffer("taps", required=False, double=True)
    w.types["acc"] = "float"
    if "double" in (w.types["x"], w.types["y"]):
        if any(w.types[r] != "double" for r in ("x", "y")) or (taps != "nullptr" and w.types["taps"] != "double"):
            raise Unbindable("the bound stencil of doubles reads and writes double only")
        w.types["acc"] = w.types["taps"] = "double"
        w.defines["KF_F64"] = 1
    return x, taps, y


def _tap_literals(w: _Writer, values) -> str:
    """Constant taps as C literals of the compute type (double: every digit; float: an f suffix)."""
    suffix = "" if w.types["acc"] == "double" else "f"
    return ", ".join(f"{float(v)!r}{suffix}" for v in values)


def _stencil2d(w: _Writer) -> str:
    p = w.match.params
    x, taps, y = _stencil_operands(w)
    k = int(p.get("k", 3))
    from kernel_forge.kinds.spatial import STENCIL_EDGES

    w.defines.update(KF_K=k, KF_EDGE=STENCIL_EDGES.index(p.get("edge", "zero")), KF_TAPS_CONST=int(taps == "nullptr"))
    if taps == "nullptr":
        values = p.get("taps")
        if not values or len(values) != k * k:
            raise Unbindable(f"a stencil without a taps parameter needs {k * k} taps in its params")
        w.defines["KF_TAPS"] = _tap_literals(w, values)
    w.slots.update(ROWS=w.launch_size("rows"), COLS=w.launch_size("cols"))
    act = p.get("act")                  # a convolution layer's epilogue: act(sum + bias)
    if act and w.types["acc"] == "double":
        raise Unbindable("a stencil's bias and activation are bound for float, float16 and bfloat16 storage")
    from kernel_forge.kinds.maps import FUNCTIONS

    w.defines["KF_EPI"] = int(bool(act))
    w.slots["EPI"] = ("__device__ __forceinline__ float kf_epi(float v)\n"
                      f"{{\n    return {FUNCTIONS[act or 'identity'][1]};\n}}")
    bias = w.scalar_arg("bias", "0.0f")
    return f"kf_stencil2d({x}, {taps}, {y}, (int){w.size('rows')}, (int){w.size('cols')}, {bias})"


def _stencil1d(w: _Writer) -> str:
    from kernel_forge.kinds.spatial import STENCIL_EDGES

    p = w.match.params
    x, taps, y = _stencil_operands(w)
    k, edge = int(p.get("k", 3)), p.get("edge", "zero")
    valid = edge == "valid"
    w.defines.update(KF_EDGE=STENCIL_EDGES.index(edge) if not valid else 1, KF_VALID=int(valid),
                     KF_FLIP=int(bool(p.get("flip"))), KF_TAPS_CONST=int(taps == "nullptr"))
    if taps == "nullptr":
        values = p.get("taps")
        if not values or len(values) != k:
            raise Unbindable(f"a 1-D stencil without a taps parameter needs {k} taps in its params")
        w.defines.update(KF_K=k, KF_TAPS=_tap_literals(w, values))
        kc, kl = str(k), str(k)
    elif w.role("k"):
        kc, kl = f"(int){w.size('k')}", f"({w.launch_size('k')})"
    else:
        shape = w.task.arg(w.role("taps")).shape
        if len(shape) != 1 or not str(shape[0]).strip().isdigit():
            raise Unbindable("no kernel parameter carries the taps' count, and their shape is not a constant")
        kc = kl = str(int(str(shape[0]).strip()))
    if p.get("axis") == "cols":         # down each column of planes x rows x cols
        w.template = "stencil1d/stencil1d_cols"
        planes = w.size("planes") if w.role("planes") else "1LL"
        w.slots.update(PLANES=w.launch_size("planes") if w.role("planes") else "1", COLS=w.launch_size("cols"),
                       OUT_ROWS=f"({w.launch_size('rows')}) - {kl} + 1" if valid else w.launch_size("rows"))
        return f"kf_stencil1d_cols({x}, {taps}, {y}, {planes}, (int){w.size('rows')}, {w.size('cols')}, {kc})"
    rows = w.size("rows") if w.role("rows") else "1LL"
    w.slots.update(ROWS=w.launch_size("rows") if w.role("rows") else "1",
                   OUT_COLS=f"({w.launch_size('cols')}) - {kl} + 1" if valid else w.launch_size("cols"))
    return f"kf_stencil1d({x}, {taps}, {y}, {rows}, (int){w.size('cols')}, {kc})"


def _box_filter(w: _Writer) -> str:
    p = w.match.params
    x, y = w.buffer("x"), w.buffer("y")
    w.template = "box_filter/box_filter_x" if p.get("axis") == "x" else "box_filter/box_filter_y"
    w.defines.update(KF_EDGE_CLAMP=int(p.get("edge") == "clamp"), KF_MEAN=int(p.get("norm", "mean") == "mean"))
    w.slots.update(ROWS=w.launch_size("rows"), COLS=w.launch_size("cols"), RADIUS=w.launch_size("radius"))
    return f"kf_box_filter({x}, {y}, {w.size('rows')}, {w.size('cols')}, {w.size('radius')})"


def _gather(w: _Writer) -> str:
    y, idx, table = w.buffer("y"), w.buffer("index"), w.buffer("table")
    pos = w.buffer("pos", required=False)
    if w.types["index"] not in _INTS.values() or w.types["table"] in _INTS.values():
        raise Unbindable("a gather needs integer indices and a floating-point table")
    w.slots["ROWS"] = w.launch_size("rows")
    adds = bool(w.match.params.get("add"))
    if adds and (w.types["y"] != "float" or w.types["pos"] != "float"):
        raise Unbindable("a scatter-add is bound for a float32 output (its atomic adds)")
    if adds and not w.task.nondeterministic:
        raise Unbindable("a scatter-add's atomic adds of floating-point rows are not bit-for-bit repeatable, which "
                         "the gate checks: declare \"nondeterministic\": true in the manifest, as any kernel of "
                         "float atomics needs")
    w.defines.update(KF_HAS_POS=int(pos != "nullptr"), KF_SCATTER=int(bool(w.match.params.get("scatter"))),
                     KF_SCATTER_ADD=int(adds))
    period = w.size("period") if pos != "nullptr" else "1LL"
    if w.role("outer"):                # along a middle axis: outer blocks of vocab rows, the indices for each
        if pos != "nullptr":
            raise Unbindable("a gather along a middle axis is bound without a position table")
        w.slots["ROWS"] = f"({w.launch_size('outer')}) * ({w.launch_size('rows')})"
        rows = f"{w.size('outer')} * {w.size('rows')}"
        return (f"kf_gather({idx}, {table}, {pos}, {y}, {rows}, {w.size('cols')}, {period}, {w.size('rows')}, "
                f"{w.size('vocab')}, 0LL, 1.0f)")
    rows = w.size("rows")
    zero = w.match.params.get("outside") == "zero"       # a share of a vocabulary: rows outside it written as zeros
    w.defines["KF_ZERO_OUTSIDE"] = int(zero)
    vocab = w.size("vocab") if zero else "0LL"
    offset = w.size("offset") if w.role("offset") else "0LL"
    # rows times a factor: a float parameter, the square root of an integer one, or a constant
    scaled = bool(w.role("scale")) or "scale" in w.match.params
    w.defines["KF_GATHER_SCALE"] = int(scaled)
    scale = w.scalar("scale", "scale", 1.0)
    if w.match.params.get("scale_sqrt") and w.role("scale"):
        scale = f"sqrtf({scale})"
    return (f"kf_gather({idx}, {table}, {pos}, {y}, {rows}, {w.size('cols')}, {period}, {rows}, {vocab}, {offset}, "
            f"{scale})")


def _row_pick(w: _Writer) -> str:
    from kernel_forge.kinds.maps import FUNCTIONS

    y, idx, table = w.buffer("y"), w.buffer("index"), w.buffer("table")
    if w.types["index"] not in _INTS.values() or w.types["table"] in _INTS.values():
        raise Unbindable("a row pick needs integer indices and a floating-point table")
    act = FUNCTIONS[w.match.params.get("act", "identity")][1]
    w.slots["OP"] = f"__device__ __forceinline__ float kf_op(float v)\n{{\n    return {act};\n}}"
    w.defines["KF_IGNORED_ZERO"] = int(w.match.params.get("ignored") == "zero")
    if w.role("picks"):             # several picks a table row (torch.gather): one output a pick
        w.slots["ROWS"] = f"{w.launch_size('rows')} * {w.launch_size('picks')}"
        return f"kf_row_pick({idx}, {table}, {y}, {w.size('rows')} * {w.size('picks')}, {w.size('cols')}, {w.size('picks')})"
    w.slots["ROWS"] = w.launch_size("rows")
    return f"kf_row_pick({idx}, {table}, {y}, {w.size('rows')}, {w.size('cols')}, 1LL)"


def _optimizer_step(w: _Writer) -> str:
    p = w.match.params
    sgd = p.get("rule") == "sgd_momentum"
    param, grad = w.buffer("param"), w.buffer("grad")
    state = [w.buffer("buf")] if sgd else [w.buffer("m"), w.buffer("v")]
    if any(t not in _CTYPES.values() for t in w.types.values()):
        raise Unbindable("an optimizer step updates floating-point parameters, moments and gradients")
    w.slots["N"] = w.launch_size("n")
    decay = p.get("decay", "none")
    wd = w.scalar("weight_decay", "weight_decay", 0.0)
    w.defines["KF_DECAY_L2"] = int(decay == "l2" and w.role("weight_decay") is not None)
    lr = w.scalar("lr", "lr", 1e-3)
    if sgd:
        w.template = "optimizer_step/optimizer_sgd"
        w.defines["KF_NESTEROV"] = int(bool(p.get("nesterov")))
        mom, damp = w.scalar("momentum", "momentum", 0.9), w.scalar("dampening", "dampening", 0.0)
        return f"kf_optimizer_sgd({param}, {grad}, {state[0]}, {w.size('n')}, {lr}, {mom}, {damp}, {wd})"
    m, v = state
    copy = w.buffer("copy", required=False)        # a master's low-precision copy (llm.c's bf16 params)
    if w.types["copy"] not in _CTYPES.values():
        raise Unbindable("a master's copy holds floating-point parameters")
    w.defines["KF_COPY"] = int(copy != "nullptr")
    gs = w.scalar("grad_scale", "grad_scale", 1.0)
    w.defines["KF_DECAY_DECOUPLED"] = int(decay == "decoupled" and w.role("weight_decay") is not None)
    b1, b2 = w.scalar("beta1", "beta1", 0.9), w.scalar("beta2", "beta2", 0.999)
    correction = p.get("correction", "given")
    if correction == "step":                  # PyTorch's: 1 - beta^t from the step count t
        t = f"(float)({w.role('step')})" if w.role("step") else None
        if t is None:
            raise Unbindable("the bias correction comes from a step count that no kernel parameter carries")
        c1, c2 = f"(1.0f - powf({b1}, {t}))", f"(1.0f - powf({b2}, {t}))"
    elif correction == "none":
        c1 = c2 = "1.0f"
    else:
        c1 = w.scalar("beta1_correction", "beta1_correction", 1.0)
        c2 = w.scalar("beta2_correction", "beta2_correction", 1.0)
    eps = w.scalar("eps", "eps", 1e-8)
    return (f"kf_optimizer_adam({param}, {grad}, {m}, {v}, {copy}, {w.size('n')}, {lr}, {b1}, {b2}, {c1}, {c2}, {eps}, "
            f"{wd}, {gs})")


def _scan(w: _Writer) -> str:
    x, y = w.buffer("x"), w.buffer("y")
    per_row = bool(w.match.params.get("per_row")) or w.match.params.get("dim") == "middle"   # no tile sums between blocks
    if all(w.types[r] in _CTYPES.values() for r in ("x", "y")):
        w.types["acc"] = "float"
    elif all(w.types[r] in _INTS.values() for r in ("x", "y")):      # exact, in y's integer type
        if not per_row and w.types["y"] in ("long long", "unsigned long long"):
            raise Unbindable("the bound prefix sum of a whole array passes 32-bit tile sums between blocks; y is "
                             f"{w.types['y']}")
        w.types["acc"] = w.types["y"]
    else:
        raise Unbindable("the bound prefix sum adds floating-point values, or integers into integers; x and y are "
                         f"{w.types['x']} and {w.types['y']}")
    w.defines["KF_INT_SCAN"] = int(w.types["acc"] != "float")
    w.defines["KF_EXCLUSIVE"] = int(bool(w.match.params.get("exclusive")))
    w.defines["KF_REVERSE"] = int(bool(w.match.params.get("reverse")))     # summed from the end
    if w.match.params.get("reverse") and (w.match.params.get("dim") == "middle" or w.match.params.get("segment")):
        raise Unbindable("a prefix sum from the end is bound over a whole array or each row")
    if w.match.params.get("dim") == "middle":       # over an axis that is not the last: a position per thread column
        w.template = "scan/scan_axis"
        return f"kf_axis_scan({x}, {y}, {', '.join(w.axis_walk())})"
    totals = w.buffer("totals", required=False, default_type=w.types["y"])
    w.defines["KF_TOTALS"] = int(totals != "nullptr")
    if w.match.params.get("segment"):        # a scan of each tile of seg values (the last short), with its total
        w.template = "scan/scan_rows"
        n, seg = w.size("n"), int(w.match.params["segment"])
        w.slots["ROWS"] = f"cdiv({w.launch_size('n')}, {seg})"
        return f"kf_scan_rows({x}, {y}, ({n} + {seg - 1}) / {seg}, {seg}LL, {n}, {totals})"
    if per_row:                                   # a prefix sum of each row: a warp per row
        w.template = "scan/scan_rows"
        rows = w.rows_arg(w.role("x"))         # no rows parameter (cuda-samples' short scans): from gridDim
        cols = w.size("cols")
        return f"kf_scan_rows({x}, {y}, {rows}, {cols}, {rows} * {cols}, {totals})"
    w.slots["N"] = w.launch_size("n")
    return f"kf_scan({x}, {y}, {w.size('n')}, {totals})"


def _histogram(w: _Writer) -> str:
    x = w.buffer("x", small_ints=True)
    bins = w.buffer("bins")
    index = w.match.params.get("index")
    ranged = index in ("range", "width")                       # real values in equal bins of a range
    if (w.types["x"] in _CTYPES.values()) != ranged:
        raise Unbindable(f"the bound histogram counts integer values, or real values in bins of a range; x is "
                         f"{w.types['x']} and the bins are {index}")
    # counts kept in integers, written once into the bins (whole numbers in a float output, as torch.histc's)
    w.types["count"] = "unsigned long long" if w.types["bins"] in ("long long", "unsigned long long") else "unsigned int"
    weights = w.buffer("weights", required=False)        # each value adds its weight (bincount's weights)
    w.types["w"] = w.types.pop("weights")
    w.defines["KF_WEIGHTED"] = int(weights != "nullptr")
    if weights != "nullptr":
        if w.types["bins"] not in _CTYPES.values() or w.types["w"] not in _CTYPES.values():
            raise Unbindable("a weighted histogram sums floating-point weights into floating-point bins")
        if not w.task.nondeterministic:
            raise Unbindable("a weighted histogram's float atomic adds are not bit-for-bit repeatable, which the gate "
                             "checks: declare \"nondeterministic\": true in the manifest, as any kernel of float atomics "
                             "needs")
        w.types["count"] = "float"
    w.defines["KF_INDEX_MODULO"] = int(index == "modulo")
    binned = index == "binned"                                 # bins of `width` values from `lo`
    w.defines.update(KF_BIN_LO=int(w.match.params.get("lo", 0)) if binned else 0,
                     KF_BIN_SPAN=int(w.match.params.get("span", 0)) if binned else 0,
                     KF_BIN_WIDTH=int(w.match.params.get("width", 1)) if binned else 1)
    w.defines.update(KF_BIN_RANGE={"range": 1, "width": 2}.get(index, 0),
                     KF_BIN_CLOSED=int(w.match.params.get("edge") == "closed"),
                     KF_BIN_CLAMP=int(w.match.params.get("outside") == "clamp"))
    ends = "0.0, 0.0"                                          # the range's start, and its end or bin width
    if ranged:
        far = "width" if index == "width" else "hi"
        ends = ", ".join(f"(double)({w.role(role)})" if w.role(role) else repr(float(w.match.params[key]))
                         for role, key in (("lo", "lo"), (far, "hi")))
    w.slots["N"] = w.launch_size("n")
    if w.role("nbins"):
        w.slots["NBINS"], nbins = w.launch_size("nbins"), w.size("nbins")
    else:                    # a bin count no parameter carries: the output's own shape, when it is a number
        shape = w.task.arg(bins).shape
        if len(shape) != 1 or not str(shape[0]).isdigit():
            raise Unbindable(f"no kernel parameter carries the number of bins, and {bins}'s shape {list(shape)} is "
                             "not a number")
        w.slots["NBINS"], nbins = str(shape[0]), f"{int(shape[0])}LL"
    return f"kf_histogram({x}, {bins}, {w.size('n')}, {nbins}, {ends}, {weights})"


def _reduce_op(w: _Writer, double: bool = False) -> str:
    """The op's defines; the multiplier's argument (``nullptr`` when the values are summed as they are)."""
    op = w.match.params.get("op", "sum")
    w.defines.update(KF_OP_MAX=int(op == "max"), KF_OP_MIN=int(op == "min"), KF_OP_MEAN=int(op == "mean"),
                     KF_ACCUMULATE=int(bool(w.match.params.get("accumulate"))),
                     KF_MUL={None: 0, "full": 1, "cols": 2, "rows": 1}[w.match.params.get("product")],
                     KF_PRE={None: 0, "abs": 1, "square": 2}[w.match.params.get("pre")],
                     KF_DIFF=int(bool(w.match.params.get("diff"))), KF_SQRT=int(w.match.params.get("post") == "sqrt"))
    unbound = w.types["x"] if "KF_I64" in w.defines else ("double" if double else "float")   # an absent w: x's type
    return w.buffer("w", required=False, default_type=unbound, double=double)


def _column_reduction(w: _Writer) -> str:
    x, y = w.buffer("x", double=True), w.buffer("y", double=True)
    double = "double" in (w.types["x"], w.types["y"])
    _int_reduction(w)
    mul = _reduce_op(w, double)
    _f64_storage(w, "column reduction", ("x", "y", "w"))
    w.slots["COLS"] = w.launch_size("cols")
    w.slots["BATCH"] = w.launch_size("batch") if w.role("batch") else "1"
    rows, cols = w.size("rows"), w.size("cols")
    if w.role("batch"):          # a reduction over a middle axis: one matrix per grid z
        x, y = f"{x} + (long long)blockIdx.z * {rows} * {cols}", f"{y} + (long long)blockIdx.z * {cols}"
    return f"kf_column_reduction({x}, {mul}, {y}, {rows}, {cols})"


def _row_quant(w: _Writer) -> str:
    """Dynamic int8 quantization of each row: its scale (max |x| / 127) and the int8 row."""
    x, y, q = w.buffer("x"), w.buffer("y"), w.buffer("q", small_ints=True)
    if w.types["q"] not in ("signed char", "char") or any(w.types[r] not in _CTYPES.values() for r in ("x", "y")):
        raise Unbindable("the bound row quantization reads float32, float16 or bfloat16 values and writes int8 values "
                         "and floating-point scales")
    w.template = "row_reduction/row_quant"
    w.defines["KF_DIVIDE"] = int(bool(w.match.params.get("divide")))
    rows = w.rows_arg(w.role("x"))       # no rows parameter (vLLM's: a block a token): from gridDim
    return f"kf_row_quant({x}, {q}, {y}, {rows}, {w.size('cols')})"


def _row_reduction(w: _Writer) -> str:
    if w.match.params.get("quantize"):
        return _row_quant(w)
    x, y = w.buffer("x", double=True), w.buffer("y", double=True)
    op = w.match.params.get("op")
    if op in ("argmax", "argmin") and w.role("ldx"):
        raise Unbindable(f"a strided x is not bound for {op}")
    if op in ("argmax", "argmin"):    # the column of each row's largest (smallest) value
        if w.types["x"] == "double":
            raise Unbindable(f"the bound {op} reads float, float16 or bfloat16 values")
        if w.types["y"] in _CTYPES.values():
            raise Unbindable(f"the bound {op} writes integer columns; {w.role('y')} is floating-point")
        w.defines["KF_ARGMIN"] = int(op == "argmin")
        if w.match.params.get("dim") == "middle":    # over an axis that is not the last: a position per thread column
            w.template = "row_reduction/argmax_axis"
            outer, axis, inner = w.axis_walk()
            return f"kf_axis_argmax({x}, {y}, {outer}, (int){axis}, {inner})"
        w.template = "row_reduction/row_argmax"
        rows = w.rows_arg(w.role("x"))         # no rows parameter (ggml's argmax: a block a row): from gridDim
        values = w.buffer("values", required=False)       # the value found, beside its column
        w.defines["KF_VALUES"] = int(values != "nullptr")
        return f"kf_row_argmax({x}, {y}, {rows}, (int){w.size('cols')}, {values})"
    double = "double" in (w.types["x"], w.types["y"])
    _int_reduction(w)
    mul = _reduce_op(w, double)
    bias = w.buffer("bias", required=False, default_type=w.types["w"], double=double)   # A x + b
    w.defines["KF_HAS_BIAS"] = int(bias != "nullptr")
    _f64_storage(w, "row reduction", ("x", "y", "w", "bias"))     # dgemv
    seg = w.match.params.get("segment")
    if seg:                      # a sum per segment of seg values, the last one short: rows of seg, n in all
        n, seg = w.size("n"), int(seg)
        w.slots["ROWS"] = f"cdiv({w.launch_size('n')}, {seg})"
        return f"kf_row_reduction({x}, {mul}, {bias}, {y}, ({n} + {seg - 1}) / {seg}, {seg}LL, {n}, 1LL, {seg}LL)"
    if w.role("rows") or w.role("outer"):
        w.slots["ROWS"] = w.launch_size("rows")
        rows = w.size("rows")
    else:       # no parameter carries the rows (candle's fast_sum: a block a row): y's values, read back from gridDim
        w.slots["ROWS"] = f"({w.launch_count(w.role('y'))}) * RPB"
        rows = "(long long)gridDim.x"
    cols = w.size("cols")
    outer = w.size("outer") if w.role("outer") else "1LL"      # each row in outer runs: a channel of NCHW
    return f"kf_row_reduction({x}, {mul}, {bias}, {y}, {rows}, {cols}, {rows} * {cols}, {outer}, {_row_stride(w, cols)})"


def _transpose(w: _Writer) -> str:
    x, y = w.buffer("x", small_ints=True, double=True), w.buffer("y", small_ints=True, double=True)
    if w.types["x"] != w.types["y"]:
        raise Unbindable("the bound transpose copies values as stored: x and y need one storage type")
    w.slots.update(ROWS=w.launch_size("rows"), COLS=w.launch_size("cols"))
    # an N-D array's two axes swapped: x as [outer, rows, mid, cols, inner], each of outer, mid and
    # inner bound when above 1
    outer, mid, inner = (bool(w.role(r)) for r in ("outer", "mid", "inner"))
    parts = int(w.match.params.get("parts", 1))      # one input split into `parts` outputs (llm.c's q, k, v)
    if parts > 1 and not inner:
        raise Unbindable("an input split into several outputs is bound with a contiguous run after the swap only")
    if inner:                    # a contiguous run after the swapped axes: runs move whole
        w.template = "transpose/permute_rows"
        slabs = " * ".join(f"({w.launch_size(r)})" for r, on in (("outer", outer), ("rows", True), ("mid", mid)) if on)
        w.slots.update(SLABS=slabs, PARTS=str(parts))
        mid_size = w.size("mid") if mid else "1LL"
        ys = [y] + [w.buffer(f"y{j}", small_ints=True, double=True) for j in range(1, parts)]
        if any(w.types.pop(f"y{j}") != w.types["y"] for j in range(1, parts)):
            raise Unbindable("the outputs of a split permute need one storage type")
        ys += ["nullptr"] * (4 - parts)
        part = w.size("part") if parts > 1 else "1LL"
        w.defines["KF_PARTS"] = parts
        bias = w.buffer("bias", required=False)         # added as values move (attention's q, k, v biases)
        w.defines["KF_BIAS"] = int(bias != "nullptr")
        if bias != "nullptr" and any(w.types[r] not in _CTYPES.values() for r in ("x", "bias")):
            raise Unbindable("a permute that adds a bias is bound for float32, float16 and bfloat16 values")
        blen = w.size("bias_len") if bias != "nullptr" else "1LL"
        return (f"kf_permute_rows({x}, {', '.join(ys)}, {w.size('rows')}, {mid_size}, {w.size('cols')}, "
                f"{w.size('inner')}, {part}, {bias}, {blen})")
    # a middle axis between the swapped ones (none after): one strided matrix a position, on the grid's z
    w.slots["BATCH"] = " * ".join(f"({w.launch_size(r)})" for r, on in (("outer", outer), ("mid", mid)) if on) or "1"
    return f"kf_transpose({x}, {y}, {w.size('rows')}, {w.size('cols')}, {w.size('mid') if mid else '1LL'})"


def _f64_storage(w: _Writer, what: str, roles: tuple) -> None:
    """Double storage (x or y double): combined in double (KF_F64), every operand in ``roles`` double."""
    if "double" not in (w.types["x"], w.types["y"]):
        return
    if any(w.types[r] != "double" for r in roles):
        raise Unbindable(f"the bound {what} of doubles reads and writes double only")
    w.defines["KF_F64"] = 1


def _int_reduction(w: _Writer) -> bool:
    """Whether the reduction is of integers (KF_I64: read as long long, summed exactly); it then
    reads and writes 32- or 64-bit integers only, with no second operand, map or mean."""
    ints = [w.types[r] in _INTS.values() for r in ("x", "y")]
    if not any(ints):
        return False
    p = w.match.params
    if not all(ints) or w.role("w") or w.role("bias") or p.get("pre") or p.get("post") or p.get("op") not in ("sum", "max", "min"):
        raise Unbindable("the bound integer reduction sums (or takes the largest or smallest of) 32- or 64-bit "
                         "integers into an integer, with no second operand, map or mean")
    w.defines["KF_I64"] = 1
    return True


#: a predicate count's comparison -> KF_PRED (_io.cuh)
_PREDICATES = {"gt": 1, "ge": 2, "lt": 3, "le": 4, "ne": 5, "eq": 6}


def _predicate_count(w: _Writer) -> str:
    """How many float values pass a comparison with a threshold (a parameter, or a constant read from
    the reference), counted exactly into an integer (KF_I64 with KF_PRED)."""
    x, y = w.buffer("x"), w.buffer("y")
    if w.types["x"] != "float" or w.types["y"] not in _INTS.values():
        raise Unbindable("the bound predicate count reads float32 values into a 32- or 64-bit integer count")
    p = w.match.params
    w.buffer("w", required=False, default_type="float")
    w.defines.update(KF_I64=1, KF_PRED=_PREDICATES[p["pred"]], KF_OP_MAX=0, KF_OP_MIN=0, KF_OP_MEAN=0, KF_MUL=0,
                     KF_PRE=0, KF_DIFF=0, KF_SQRT=0, KF_ACCUMULATE=int(bool(p.get("accumulate"))))
    t = w.role("threshold") or repr(float(p.get("t", 0.0)))
    w.slots["N"] = w.launch_size("n")
    return f"kf_reduction(kf_pred_x{{{x}, (float)({t})}}, kf_pred_x{{nullptr, 0.0f}}, {y}, {w.size('n')})"


def _reduction(w: _Writer) -> str:
    if w.match.params.get("pred"):
        return _predicate_count(w)
    x, y = w.buffer("x", double=True), w.buffer("y", double=True)
    double = "double" in (w.types["x"], w.types["y"])
    if not _int_reduction(w) and not all(w.types[r] in (*_CTYPES.values(), "double") for r in ("x", "y")):
        raise Unbindable("the bound reduction combines floating-point values, or integers into an integer")
    mul = _reduce_op(w, double)
    _f64_storage(w, "reduction", ("x", "y", "w"))
    w.slots["N"] = w.launch_size("n")
    return f"kf_reduction({x}, {mul}, {y}, {w.size('n')})"


def _gemm(w: _Writer) -> str:
    p = w.match.params
    a, b, c = w.buffer("a"), w.buffer("b"), w.buffer("c")
    bias = w.buffer("bias", required=False)
    operands = {w.types["a"], w.types["b"]}
    if operands <= {"__half", "__nv_bfloat16"}:        # 16-bit operands: the tensor cores (gemm_f16)
        if len(operands) > 1:
            raise Unbindable("the bound 16-bit gemm multiplies operands of one type: a and b are fp16 and bf16")
        if any(w.types[r] not in _CTYPES.values() for r in ("c", "bias")):
            raise Unbindable(f"the bound 16-bit gemm writes a floating-point c (and reads such a bias): c is "
                             f"{w.types['c']}, bias {w.types['bias']}")
        # in place of the SIMT pattern mma.sync (any GPU since sm_80), of the split-TF32 ones wgmma (Hopper)
        w.template = "gemm/gemm_f16" if w.base == "gemm/gemm" else "gemm/gemm_f16_wg"
        w.defines["KF_AB_BF16"] = int(operands == {"__nv_bfloat16"})
    elif any(w.types[r] != "float" for r in ("a", "b", "c")) or (bias != "nullptr" and w.types["bias"] != "float"):
        raise Unbindable("the bound gemm is float32 (SIMT FFMA or split TF32) or 16-bit (fp16 or bf16 on the "
                         "tensor cores); a, b, c and bias are "
                         + ", ".join(w.types[r] for r in ("a", "b", "c", "bias")))
    w.slots.update(M=w.launch_size("m"), N=w.launch_size("n"), BATCH=w.launch_size("batch") if w.role("batch") else "1")
    act = p.get("act")
    if act:                      # a fused linear layer's activation, applied in float after the bias
        from kernel_forge.kinds.maps import FUNCTIONS
        w.headers.add(f"__device__ __forceinline__ float kf_gemm_act(float v) {{ return {FUNCTIONS[act][1]}; }}")
    w.defines.update(KF_GEMM_ACT=int(bool(act)), KF_HAS_BETA=int(bool(w.role("beta"))), KF_HAS_BIAS=int(bias != "nullptr"),
                     KF_TRANS_A=int(bool(p.get("trans_a"))), KF_TRANS_B=int(bool(p.get("trans_b"))))
    alpha = f"(float)({w.role('alpha')})" if w.role("alpha") else "1.0f"
    beta = f"(float)({w.role('beta')})" if w.role("beta") else "0.0f"
    m, n, k = w.size("m"), w.size("n"), w.size("k")
    if w.role("batch"):          # a batch of products, one per grid z: each operand's matrix blockIdx.z
        z = "(long long)blockIdx.z"
        a, b, c = f"{a} + {z} * {m} * {k}", f"{b} + {z} * {k} * {n}", f"{c} + {z} * {m} * {n}"
    return f"kf_gemm({a}, {b}, {c}, (int){m}, (int){n}, (int){k}, {alpha}, {beta}, {bias})"


def _pool2d(w: _Writer) -> str:
    x, y = w.buffer("x"), w.buffer("y")
    p = w.match.params
    k = int(p.get("window", 2))
    stride, pad = int(p.get("stride", k)), int(p.get("pad", 0))
    out = lambda size: f"((({w.launch_size(size)}) + {2 * pad - k}) // {stride} + 1)"  # noqa: E731
    w.slots.update(OUT_ROWS=f"{_planes(w)}{out('rows')}", OUT_COLS=out("cols"))
    w.defines.update(KF_K=k, KF_STRIDE=stride, KF_PAD=pad, KF_MAX=int(p.get("op") == "max"),
                     KF_MEAN=int(p.get("op") == "mean"), KF_MEAN_VALID=int(p.get("op") == "mean_valid"))
    indices = w.buffer("indices", required=False, default_type="int")     # where each maximum was
    if indices != "nullptr" and w.types["indices"] not in _INTS.values():
        raise Unbindable(f"a max pooling's indices are 32- or 64-bit integers; {indices} is {w.types['indices']}")
    w.defines["KF_INDICES"] = int(indices != "nullptr")
    if indices != "nullptr":
        indices = f"reinterpret_cast<kf_indices_t*>({indices})"    # int64_t is long on some hosts, long long under NVRTC
    return f"kf_pool2d({x}, {y}, {w.size('rows')}, {w.size('cols')}, {indices})"


def _planes(w: _Writer) -> str:
    """The planes of an image batch as a launch factor: their parameter, else x's size over a plane's."""
    if w.role("planes"):
        return f"({w.launch_size('planes')}) * "
    return f"(({w.launch_count(w.role('x'))}) // (({w.launch_size('rows')}) * ({w.launch_size('cols')}))) * "


def _resample(w: _Writer) -> str:
    x, y = w.buffer("x"), w.buffer("y")
    s = int(w.match.params.get("scale", 2))
    w.slots.update(OUT_ROWS=f"{_planes(w)}({w.launch_size('rows')}) * {s}", OUT_COLS=f"({w.launch_size('cols')}) * {s}")
    w.defines["KF_S"] = s
    return f"kf_upsample_nearest({x}, {y}, (int){w.size('cols')})"


def _rope_tables(w: _Writer) -> tuple[str, str]:
    """The cos and sin arguments: one table (of pairs, a cache: role ``cs``) passed as both, or two."""
    if w.role("cs"):
        cos = sin = w.buffer("cs")
        w.types["cos"] = w.types["sin"] = w.types.pop("cs")
        return cos, sin
    return w.buffer("cos"), w.buffer("sin")


def _rope(w: _Writer) -> str:
    """Rotary embeddings (kinds/rotary.py): the tables as bound, the row's position by span or by
    period and heads."""
    p = w.match.params
    if p.get("by") == "positions":
        return _rope_tokens(w)
    x, y = w.buffer("x"), w.buffer("y")
    computed = p.get("table") == "computed"
    cos, sin = (w.buffer("cos", required=False), w.buffer("sin", required=False)) if computed else _rope_tables(w)
    if any(w.types[r] in _INTS.values() for r in ("x", "y", "cos", "sin")):
        raise Unbindable("rotary embeddings need floating-point values and tables")
    interleaved = p.get("pairing") == "interleaved"
    by_span = bool(w.role("span"))
    cols = w.size("cols") if w.role("cols") else None
    if cols is None and not (interleaved and by_span and not computed):
        raise Unbindable("no kernel parameter carries the row length (cols), which pairs of halves and computed "
                         "angles need")
    if by_span:
        span, heads = w.size("span"), "1LL"
    else:
        span = f"{w.size('period')} * {cols}"
        heads = w.size("heads") if w.role("heads") else "1LL"
    w.defines.update(KF_INTERLEAVED=int(interleaved), KF_TABLE=TABLES.index(p.get("table", "split")),
                     KF_BY_SPAN=int(by_span), KF_INVERSE=int(bool(p.get("inverse"))))
    w.slots.update(PAIRS=f"({w.launch_size('n')}) // 2", G="2" if interleaved else "4")     # KF_G: pairs a group
    angles = ""
    if computed:          # (position + offset) * base^(-2i / cols), computed as the reference does
        angles = f", {w.scalar('base', 'base', 10000.0)}, {w.size('offset') if w.role('offset') else '0LL'}"
    return f"kf_rope({x}, {cos}, {sin}, {y}, {w.size('n')}, {cols or '0LL'}, {span}, {heads}{angles})"


def _rope_tokens(w: _Writer) -> str:
    """Rotary embeddings by a positions buffer, in place (vLLM's): a block per token, the token count
    the positions' (the launch's, where no parameter carries it)."""
    p = w.match.params
    y, pos = w.buffer("y"), w.buffer("pos")
    y1 = w.buffer("y1", required=False)
    if y1 == "nullptr":
        w.types["y1"] = w.types["y"]
    cos, sin = _rope_tables(w)
    if w.types["pos"] not in _INTS.values() or any(w.types[r] in _INTS.values() for r in ("y", "y1", "cos", "sin")):
        raise Unbindable("rotary embeddings by position need integer positions and floating-point values and tables")
    w.template = "rope/rope_tokens"
    w.slots["TOKENS"] = " * ".join(f"({e})" for e in w.task.arg(pos).shape) or "1"
    w.defines.update(KF_INTERLEAVED=int(p.get("pairing") == "interleaved"), KF_TABLE=int(p.get("table") == "cache"),
                     KF_INVERSE=int(bool(p.get("inverse"))))
    heads = w.size("heads") if w.role("heads") else "1LL"
    heads1 = w.size("heads1") if w.role("heads1") else "1LL"
    pos = f"reinterpret_cast<const kf_pos_t*>({pos})"     # int64_t is long on some hosts, long long under NVRTC
    return f"kf_rope_tokens({pos}, {y}, {y1}, {cos}, {sin}, {heads}, {heads1}, {w.size('cols')}, {w.size('rot')})"


def _onehot_grad(w: _Writer) -> str:
    """Cross-entropy's gradient through a softmax (kinds/onehot.py): a block per row and column tile."""
    p = w.match.params
    y, x, idx = w.buffer("y"), w.buffer("x"), w.buffer("index")
    scale = w.buffer("w", required=False)
    if w.types["index"] not in _INTS.values() or w.types["x"] in _INTS.values():
        raise Unbindable("a one-hot gradient needs integer targets and floating-point probabilities")
    w.defines.update(KF_ROW_SCALE=int(scale != "nullptr"), KF_ACCUMULATE=int(bool(p.get("accumulate"))))
    w.slots.update(ROWS=w.launch_size("rows"), COLS=w.launch_size("cols"))
    alpha = w.scalar_arg("alpha") if p.get("scale") == "scalar" else "1.0f"
    if p.get("divide"):
        alpha = f"(1.0f / {alpha})"
    return f"kf_onehot_grad({x}, {idx}, {scale}, {y}, {w.size('cols')}, {alpha})"


#: kind -> (its first bound template, by library name; the writer)
_WRITERS = {
    "gemm": ("gemm/gemm", _gemm),
    "transpose": ("transpose/transpose", _transpose),
    "reduction": ("reduction/reduction", _reduction),
    "row_norm": ("row_norm/row_norm", _row_norm),
    "row_softmax": ("row_softmax/row_softmax", _row_softmax),
    "elementwise": ("elementwise/elementwise", _elementwise),
    "stencil2d": ("stencil2d/stencil2d", _stencil2d),
    "gather": ("gather/gather", _gather),
    "row_pick": ("row_pick/row_pick", _row_pick),
    "optimizer_step": ("optimizer_step/optimizer_adam", _optimizer_step),
    "scan": ("scan/scan", _scan),
    "histogram": ("histogram/histogram", _histogram),
    "box_filter": ("box_filter/box_filter_y", _box_filter),
    "pool2d": ("pool2d/pool2d", _pool2d),
    "resample": ("resample/upsample_nearest", _resample),
    "stencil1d": ("stencil1d/stencil1d", _stencil1d),
    "column_reduction": ("column_reduction/column_reduction", _column_reduction),
    "row_reduction": ("row_reduction/row_reduction", _row_reduction),
    "rope": ("rope/rope", _rope),
    "onehot_grad": ("onehot_grad/onehot_grad", _onehot_grad),
}


#: further bound patterns of a kind, written by the same writer: the tuner gates and searches each
#: beside the first (fp32 GEMM: the split-precision TF32 tensor-core patterns, mma.sync and Hopper's
#: wgmma, beside the SIMT one; 16-bit operands take gemm_f16 (mma.sync) and gemm_f16_wg (wgmma) in
#: their places)
_MORE = {
    "gemm": ("gemm/gemm_tf32x3", "gemm/gemm_tf32x3_wg"),
}


def kinds_with_patterns() -> tuple[str, ...]:
    return tuple(_WRITERS)


def instantiate(task, match: Match) -> list[Bound]:
    """The bound patterns of ``match``'s kind for ``task`` (see the module docstring)."""
    if match.kind not in _WRITERS:
        raise Unbindable(f"no bound pattern for kind {match.kind} yet")
    first, write = _WRITERS[match.kind]
    out = []
    for template in (first, *_MORE.get(match.kind, ())):
        w = _Writer(task, match, template)
        call = write(w)
        template = w.template or template      # a writer may choose its kind's other template (per-row scan, SGD)
        stem = template.split("/")[1]
        if any(b.pattern == stem for b in out):     # ... once (16-bit GEMM operands: the one fp16/bf16 pattern)
            continue
        out.append(Bound(stem, f"{LABEL_PREFIX}{stem}.cu", w.source(template, call, match.describe()), match))
    return out
