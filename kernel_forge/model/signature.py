"""Parse ``[extern "C"] __global__ void name(params)`` into typed parameters.

Supported parameters: pointers (``const`` or not, ``__restrict__``, ``__grid_constant__``) to, and
scalars of, the types in :mod:`kernel_forge.common.dtypes`, and pointers to CUDA's vector types
(``float4``, ``uchar4``, ``half2`` ...: a buffer of their lanes' type with a trailing axis of lanes).
A kernel may also take ``void*`` (exllamav2's ``const void* x``, cast inside to the type it reads): such a
parameter is *untyped*, and matches whatever pointer the task declares for it (the manifest's
signature names the type; ``kforge init`` reads it from the kernel's casts, :mod:`kernel_forge.model.void_pointers`).
A default value (``int* p = NULL``) is read past: a launch passes every argument.  Anything else
(references, arrays, structs, vectors by value, templates, pointers to pointers) is refused with a
caret under the offending text.  Function attributes (``__launch_bounds__(...)``, ``__maxnreg__(...)``,
``__cluster_dims__(...)``, ``__noinline__``, PyTorch's ``C10_LAUNCH_BOUNDS_1(...)``) may stand before or after ``void``.
"""
from __future__ import annotations

import re
from dataclasses import dataclass

from kernel_forge.common.dtypes import C_TYPES, VECTOR_TYPES, DType
from kernel_forge.common.errors import SignatureError
from kernel_forge.model.kernel_heads import _ATTR, _entries, closing_paren, in_directive, templated_heads

_QUALIFIERS = {"__restrict__", "__restrict", "restrict", "volatile", "__grid_constant__"}
#: ``extern "C"`` or nothing before it: a kernel of C++ linkage is given C linkage when compiled
#: (:func:`with_c_linkage`), so the driver finds either by its name
_HEAD = re.compile(r'^\s*(?:extern\s+"C"\s+)?' + _ATTR + r'__global__\s+' + _ATTR + r'void\s+' + _ATTR
                   + r'([A-Za-z_]\w*)\s*\(')
_IDENT = re.compile(r"[A-Za-z_]\w*")
#: PyTorch's 16-bit types as a kernel from ATen spells them (``at::Half* out``), read as CUDA's own
_TORCH_TYPES = {"at Half": "__half", "c10 Half": "__half", "at BFloat16": "__nv_bfloat16",
                "c10 BFloat16": "__nv_bfloat16"}
_TORCH_SPELLED = re.compile(r"\b(?:at|c10)\s*::\s*(Half|BFloat16)\b")


@dataclass(frozen=True)
class Param:
    name: str
    dtype: DType
    pointer: bool
    const: bool            # for pointers: the pointee is const
    text: str              # the parameter as written
    lanes: int = 1         # a pointer to a CUDA vector type: its lanes (``float4``: 4 of ``dtype``)
    vector: str = ""       # that vector type as spelled (``float4``); "" for a scalar type
    untyped: bool = False  # ``void*``: the bytes' type is the task's (``dtype`` is a uint8 placeholder)

    def describe(self) -> str:
        if self.pointer:
            return f"{'const ' if self.const else ''}{'void' if self.untyped else self.vector or self.dtype.name}* {self.name}"
        return f"{self.dtype.name} {self.name}"


@dataclass(frozen=True)
class Signature:
    name: str
    params: tuple[Param, ...]
    text: str

    def param(self, name: str) -> Param:
        for p in self.params:
            if p.name == name:
                return p
        raise KeyError(name)

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(p.name for p in self.params)


def parse_signature(text: str, aliases: dict[str, str] | None = None) -> Signature:
    """Parse one kernel declaration; ``text`` may end with ``{`` or ``;`` or nothing.  ``aliases``:
    the file's own names of types (``floatX`` -> ``float``: :mod:`kernel_forge.model.type_aliases`)."""
    flat = " ".join(text.split())
    m = _HEAD.match(flat)
    if not m:
        raise SignatureError(
            'expected `__global__ void NAME(PARAMS)` (extern "C" or not)', signature=flat, column=0,
            hint="declare the instance's signature, with its types (`__global__ void NAME(float* y, ...)`); the kernel "
                 "file names that instance in a line `// kforge: instance NAME<float, ...>`"
            if flat.lstrip().startswith("template") else None)
    name = m.group(1)
    start = m.end()
    try:
        end = closing_paren(flat, start - 1)
    except SignatureError:
        raise SignatureError("unclosed parameter list", signature=flat, column=len(flat)) from None
    tail = flat[end + 1:].strip()
    if tail not in ("", "{", ";") and not tail.startswith("{"):
        raise SignatureError("unexpected text after the parameter list", signature=flat,
                             column=end + 1)
    params: list[Param] = []
    body = flat[start:end]
    if body.strip() in ("", "void"):
        return Signature(name, (), flat)
    offset = start
    for piece in body.split(","):
        col = offset + (len(piece) - len(piece.lstrip()))
        # a default value (`int* partial_sums = NULL`, cuda-samples' shfl_scan): every argument is passed at a
        # launch, so it plays no part; the parameter is read without it
        params.append(_parse_param(piece.split("=", 1)[0].strip(), flat, col, aliases or {}))
        offset += len(piece) + 1
    seen: set[str] = set()
    offset = start
    for piece, p in zip(body.split(","), params):
        if p.name in seen:
            col = offset + piece.rfind(p.name)
            raise SignatureError(f"parameter name {p.name!r} appears twice", signature=flat, column=col)
        seen.add(p.name)
        offset += len(piece) + 1
    return Signature(name, tuple(params), flat)


def _parse_param(piece: str, flat: str, col: int, aliases: dict[str, str]) -> Param:
    if not piece:
        raise SignatureError("empty parameter", signature=flat, column=col)
    for bad, why in (("&", "references are not supported; pass a pointer"),
                     ("[", "array parameters are not supported; pass a pointer"),
                     ("<", "templates are not supported; use extern \"C\" with concrete types"),
                     ("(", "function pointers are not supported")):
        if bad in piece:
            raise SignatureError(why, signature=flat, column=col + piece.index(bad))
    stars = piece.count("*")
    if stars > 1:
        raise SignatureError("pointers to pointers are not supported", signature=flat,
                             column=col + piece.index("*"))
    pointer = stars == 1
    before, _, after = piece.partition("*")
    words = _IDENT.findall(before if pointer else piece)
    if pointer:
        after_words = _IDENT.findall(after)
        if not after_words:
            raise SignatureError("parameter has no name", signature=flat, column=col + len(piece))
        name = after_words[-1]
        for w in after_words[:-1]:
            if w not in _QUALIFIERS | {"const"}:
                raise SignatureError(f"unexpected {w!r} after '*'", signature=flat,
                                     column=col + piece.index(w, len(before)))
    else:
        if len(words) < 2:
            raise SignatureError("parameter needs a type and a name", signature=flat, column=col)
        name = words[-1]
        words = words[:-1]
    const = "const" in words
    type_words = [w for w in words if w not in _QUALIFIERS | {"const"}]
    type_name = " ".join(type_words)
    type_name = aliases.get(type_name, _TORCH_TYPES.get(type_name, type_name))
    dtype, lanes, vector = C_TYPES.get(type_name), 1, ""
    if type_name == "void" and pointer:
        return Param(name=name, dtype=C_TYPES["unsigned char"], pointer=True, const=const, text=piece, untyped=True)
    if dtype is None and type_name in VECTOR_TYPES:
        if not pointer:
            raise SignatureError(f"a {type_name} by value is not supported; pass its lanes as scalars, or a pointer",
                                 signature=flat, column=col)
        (dtype, lanes), vector = VECTOR_TYPES[type_name], type_name
    if dtype is None:
        raise SignatureError(f"unsupported type {type_name!r}", signature=flat, column=col,
                             hint="supported: " + ", ".join(sorted({d.name for d in C_TYPES.values()}))
                             + "; by pointer also CUDA's vector types (float4, uchar4, half2 ...)")
    if not pointer and const is False and "const" in piece:
        const = True
    return Param(name=name, dtype=dtype, pointer=pointer, const=const if pointer else False,
                 text=piece, lanes=lanes, vector=vector)


def as_compiled(source: str) -> str:
    """What NVRTC compiles for ``source``: each template kernel a ``// kforge: instance`` line names
    compiled as that instance (:mod:`kernel_forge.model.template_instance`), and every kernel given C
    linkage (:func:`with_c_linkage`), so the driver finds each by the name it was written with."""
    from kernel_forge.model.template_instance import instantiated

    return with_c_linkage(instantiated(source))


def with_c_linkage(source: str) -> str:
    """``source`` with ``extern "C"`` written before every kernel head that lacks it (a kernel of C++
    linkage, as most projects write them: ``__global__ void k(...)``), on the same line, so the driver
    finds each by its name and line numbers stay the kernel's.  Templated kernels are left alone."""
    from kernel_forge.common.static_rules import strip_comments_and_strings

    code = strip_comments_and_strings(source, keep_strings=True)
    starts = [m.start() for m, _, templated in _entries(code) if not m.group(1) and not templated
              and not re.search(r'\bstatic\s*$', code[max(0, m.start() - 40):m.start()])]
    for at in reversed(starts):
        source = source[:at] + 'extern "C" ' + source[at:]
    return source


def find_entry(source: str, name: str, headers: dict[str, str] | None = None) -> tuple[Signature, int] | None:
    """Find the definition of kernel ``name`` in CUDA source: (signature, 1-based line).
    Comments and string literals are ignored (offsets are kept, so lines stay right).  A type the
    file names itself (``typedef float floatX;``, here or in the task's ``headers``) is read as
    the type it names."""
    from kernel_forge.common.static_rules import strip_comments_and_strings

    code = strip_comments_and_strings(source, keep_strings=True)
    declared = None
    for m, found, templated in _entries(code):
        if found != name or in_directive(code, m.start()):       # a macro's parameter NAME is no kernel
            continue
        if templated:
            if re.search(r"template\s*<\s*>\s*$", code[max(0, m.start() - 40):m.start()]):
                continue                      # an explicit specialization: the primary template is the entry
            found_head = _instance_head(source, code, m, name, headers)
            if code[closing_paren(code, m.end() - 1) + 1:].lstrip().startswith(";"):
                declared = declared or found_head
                continue
            return found_head
        try:
            i = closing_paren(code, m.end() - 1)
        except SignatureError:
            i = len(code)                     # unclosed: parse_signature says so, with a caret
        line = code.count("\n", 0, m.start()) + 1
        head = (_parse_with_aliases(code[m.start():i + 1], source, headers), line)
        if code[i + 1:].lstrip().startswith(";"):
            declared = declared or head            # a declaration: the definition, later, is the one to name
            continue
        return head
    if declared is None and ("#" in code or headers):                  # a kernel a macro writes (candle's UNARY_OP)
        from kernel_forge.model.kernel_macros import expanded, line_in

        text, spans = expanded(code, tuple((headers or {}).values()))
        if spans:
            for m, found, _templated in _entries(text):
                if found == name and any(sp.start <= m.start() < sp.end for sp in spans):
                    close = closing_paren(text, m.end() - 1)
                    return (_parse_with_aliases(text[m.start():close + 1], source, headers),
                            line_in(spans, m.start(), text))
    return declared


def _instance_head(source: str, code: str, m, name: str, headers) -> tuple[Signature, int]:
    """A template kernel's head read as the instance its ``// kforge: instance`` line names."""
    from kernel_forge.model.template_instance import (declared_instances, instance_signature_text, is_specialization,
                                                       merged_params)

    head = next(h for h in templated_heads(code) if h.start == m.start())
    line = code.count("\n", 0, m.start()) + 1
    wanted = declared_instances(source).get(name)
    if wanted is None:
        params = merged_params([h for h in templated_heads(code) if h.name == name and not is_specialization(h)], head)
        example = ", ".join(p.default or ("float" if p.is_type else "...") for p in params)
        raise SignatureError(f"kernel {name} (line {line}) is a template: the task runs one instance of it, and no "
                             f"`// kforge: instance {name}<...>` line names which",
                             signature=" ".join(head.template.split()) + " " + " ".join(code[m.start():m.end()].split()),
                             column=0, hint=f"add a line `// kforge: instance {name}<{example}>` to the kernel file")
    return _parse_with_aliases(instance_signature_text(code, head, *wanted), source, headers), line


def _parse_with_aliases(text: str, source: str, headers: dict[str, str] | None) -> Signature:
    try:
        return parse_signature(text)
    except SignatureError as exc:
        if not str(exc).startswith("unsupported type"):
            raise
        from kernel_forge.model.type_aliases import aliases

        known = aliases(source, headers)
        if not known:
            raise
        return parse_signature(text, known)


def resolved_text(sig: Signature, source: str, headers: dict[str, str] | None = None) -> str:
    """The signature's text with the file's own type names written as the types they name (what a
    manifest declares: ``floatX* out`` -> ``float* out``)."""
    from kernel_forge.model.type_aliases import aliases

    known = aliases(source, headers)
    text = _TORCH_SPELLED.sub(lambda m: _TORCH_TYPES["at " + m.group(1)], sig.text)
    return re.sub(r"\b[A-Za-z_]\w*\b", lambda m: known.get(m.group(0), m.group(0)), text) if known else text


def check_matches(expected: Signature, actual: Signature) -> None:
    """Raise :class:`SignatureError` naming the first parameter that differs."""
    if expected.name != actual.name:
        raise SignatureError(f"kernel is named {actual.name!r}, the task expects {expected.name!r}")
    if len(expected.params) != len(actual.params):
        raise SignatureError(
            f"kernel {actual.name} takes {len(actual.params)} parameters, the task declares "
            f"{len(expected.params)}: ({', '.join(p.describe() for p in expected.params)})")
    for i, (e, a) in enumerate(zip(expected.params, actual.params)):
        if e.untyped and e.pointer:
            raise SignatureError(f"parameter {i + 1} ({e.name}) is `{e.describe()}` in the task: the task's signature "
                                 "names the type its buffer holds (`const __half* x`); the kernel may take it as void*")
        if a.untyped and e.pointer:
            pass                                   # void*: the kernel casts it to what the task declares
        elif (e.dtype, e.pointer, e.lanes) != (a.dtype, a.pointer, a.lanes):
            raise SignatureError(
                f"parameter {i + 1} ({a.name}) is `{a.describe()}`, the task declares "
                f"`{e.describe()}`")
        if e.pointer and e.const and not a.const:
            raise SignatureError(
                f"parameter {i + 1} ({a.name}) drops `const`: the task declares it as an input "
                f"(`{e.describe()}`)")
