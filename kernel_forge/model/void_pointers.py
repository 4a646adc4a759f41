"""What a kernel's ``void*`` parameters hold, read from the casts its body makes of them.

Some projects pass buffers untyped and cast inside (exllamav2's ``const void* x``, read as
``((half*)x)`` or, behind a flag, as ``float*``).  A task's manifest names the type each buffer
holds, so ``kforge init`` writes, for each ``void*`` parameter, the type of the first cast the
kernel's body makes of it (``(const half2*) x``, ``reinterpret_cast<const float4*>(x)``,
``static_cast<T*>(x)``: a vector type's lane).  A parameter the body never casts to a known type
takes the type of the kernel's first typed pointer, else ``float``; either way it is a guess
the user is told of.
"""
from __future__ import annotations

import re
from dataclasses import dataclass

from kernel_forge.common.dtypes import C_TYPES, LANE_CTYPES, VECTOR_TYPES
from kernel_forge.model.kernel_heads import body_span
from kernel_forge.model.signature import Signature, parse_signature

_TYPE = r"((?:const\s+|volatile\s+)*[A-Za-z_][\w:]*(?:\s+[A-Za-z_]\w*)*?)\s*(?:const\s*)?\*"
_QUALIFIER = re.compile(r"\b(?:const|volatile)\b")
_TORCH = {"at Half": "__half", "c10 Half": "__half", "at BFloat16": "__nv_bfloat16", "c10 BFloat16": "__nv_bfloat16"}
#: a cast to bytes is address arithmetic more often than the buffer's type: another cast wins over it
_BYTES = {"signed char", "unsigned char", "char"}


@dataclass(frozen=True)
class ReadType:
    param: str
    ctype: str          # the C spelling written in the manifest's signature (``__half``)
    line: int           # 1-based line of the cast; 0 when guessed from another parameter
    cast: str           # the cast as written (one line), or how the type was guessed
    others: tuple[str, ...] = ()   # other types the body casts it to (a flag picks one: ``input_fp32``)


def _casts(name: str) -> re.Pattern:
    n = re.escape(name)
    return re.compile(r"\(\s*" + _TYPE + r"\s*\)\s*\(?\s*" + n + r"\b(?!\s*[\[(.])"          # (T*) x, (T*)(x)
                      + r"|\b(?:reinterpret_cast|static_cast)\s*<\s*" + _TYPE + r"\s*>\s*\(\s*" + n + r"\s*\)")


def _element(type_text: str, aliases: dict[str, str]) -> str | None:
    words = " ".join(_QUALIFIER.sub(" ", type_text).replace("::", " ").split())
    words = _TORCH.get(words, aliases.get(words, words))
    if words in VECTOR_TYPES:
        return LANE_CTYPES[VECTOR_TYPES[words][0].name]
    dtype = C_TYPES.get(words)
    if dtype is None:
        return None
    return "bool" if dtype.name == "bool" else LANE_CTYPES[dtype.name]


def read_types(code: str, head_line: int, sig: Signature, aliases: dict[str, str] | None = None) -> list[ReadType]:
    """The type each ``void*`` parameter of ``sig`` holds, read from the kernel body in ``code``
    (comments stripped, offsets kept) whose head starts on ``head_line``."""
    start, end = body_span(code, head_line)
    body = code[start:end]
    typed = next((LANE_CTYPES.get(p.dtype.name, "bool") for p in sig.params if p.pointer and not p.untyped), None)
    found = []
    for p in sig.params:
        if not p.untyped:
            continue
        casts = []
        for m in _casts(p.name).finditer(body):
            ctype = _element(m.group(1) or m.group(2), aliases or {})
            if ctype:
                at = start + m.start()
                casts.append(ReadType(p.name, ctype, code.count("\n", 0, at) + 1, " ".join(m.group(0).split())))
        casts.sort(key=lambda c: c.ctype in _BYTES)                 # stable: the first cast to a wider type
        if casts:
            others = tuple(dict.fromkeys(c.ctype for c in casts if c.ctype != casts[0].ctype and c.ctype not in _BYTES))
            found.append(ReadType(p.name, casts[0].ctype, casts[0].line, casts[0].cast, others))
        elif typed:
            found.append(ReadType(p.name, typed, 0, "no cast of it to a known type: the type of the kernel's first "
                                                    "typed pointer"))
        else:
            found.append(ReadType(p.name, "float", 0, "no cast of it to a known type, and no typed pointer"))
    return found


def typed(sig: Signature, types: list[ReadType]) -> Signature:
    """``sig`` with each ``void`` of a ``void*`` parameter written as the type it holds."""
    by_name = {t.param: t.ctype for t in types}
    text = sig.text
    cursor = text.index("(", text.index(sig.name)) + 1
    for p in sig.params:
        at = text.index(p.text, cursor)
        piece = p.text
        if p.name in by_name:
            piece = re.sub(r"\bvoid\b", by_name[p.name], piece, count=1)
            text = text[:at] + piece + text[at + len(p.text):]
        cursor = at + len(piece)
    return parse_signature(text)
