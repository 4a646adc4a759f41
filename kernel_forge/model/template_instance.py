"""Template kernels: ``template <typename T, int BLOCK> __global__ void k(T* y, ...)``, run as one instance.

A kernel file names the instance to run with a header line::

    // kforge: instance k<float, 256>

(arguments as C++ writes them; defaults may be left out; a tunable's name may stand for a value, as
in ``k<float, BLOCK>``).  The driver finds kernels by name, and an instance's name is mangled, so the
compile turns the template into a ``__device__ __forceinline__`` function (same lines, renamed) and
adds one ``extern "C" __global__`` kernel named as the template, taking the instance's parameters
and calling it: the code NVRTC generates for the kernel is the instance's own.  The template's
``__launch_bounds__``, with its parameters written as the instance's arguments, moves to that kernel.
"""
from __future__ import annotations

import re
from dataclasses import dataclass

from kernel_forge.common.errors import SignatureError
from kernel_forge.model.kernel_heads import closing_paren, templated_heads

#: ``// kforge: instance NAME<ARGS>``
INSTANCE_LINE = re.compile(r"^[ \t]*//[ \t]*kforge:[ \t]*instance\b(.*)$", re.M)
_INSTANCE = re.compile(r"^\s*([A-Za-z_]\w*)\s*<(.*)>\s*$")
#: the suffix of the template's new name (a device function) once an instance is compiled
BODY_SUFFIX = "__kf_template"
#: the suffix of the function, in the template's namespace, through which the added kernel calls the instance
CALL_SUFFIX = "__kf_instance"
_ATTRIBUTE = re.compile(r"(__launch_bounds__|__maxnreg__|__cluster_dims__|[A-Z][A-Z0-9]*_LAUNCH_BOUNDS_\d)\s*\(")
_PAIRS = {"<": ">", "(": ")", "[": "]", "{": "}"}


@dataclass(frozen=True)
class TemplateParam:
    name: str
    is_type: bool           # ``typename T`` / ``class T``; else a value (``int BLOCK``)
    default: str | None     # as written after ``=``
    text: str


def split_top(text: str) -> list[str]:
    """``text`` split at its commas outside ``<>``, ``()``, ``[]`` and ``{}`` (stripped pieces)."""
    pieces, depth, start = [], 0, 0
    for i, ch in enumerate(text):
        if ch in _PAIRS:
            depth += 1
        elif ch in _PAIRS.values():
            depth = max(0, depth - 1)
        elif ch == "," and depth == 0:
            pieces.append(text[start:i].strip())
            start = i + 1
    last = text[start:].strip()
    if last or pieces:
        pieces.append(last)
    return pieces


def template_params(head: str) -> list[TemplateParam]:
    """The parameters of ``template <...>`` (``head`` is that text)."""
    inner = head[head.index("<") + 1:head.rindex(">")]
    out = []
    for piece in split_top(inner):
        decl, eq, default = piece.partition("=")
        pointer = re.search(r"\(\s*\*\s*([A-Za-z_]\w*)\s*\)", decl)     # scalar_t (*ACT_FN)(const scalar_t&)
        if pointer:
            out.append(TemplateParam(pointer.group(1), False, default.strip() if eq else None, piece))
            continue
        words = re.findall(r"[A-Za-z_]\w*|\.\.\.", decl)
        if not words or "..." in words:
            raise SignatureError(f"template parameter {piece!r} is not supported (a pack or an unnamed one)",
                                 hint="name each parameter of the template; a parameter pack has no single instance")
        is_type = words[0] in ("typename", "class") and len(words) <= 2
        out.append(TemplateParam(words[-1] if len(words) > 1 else "", is_type, default.strip() if eq else None, piece))
        if not out[-1].name:
            raise SignatureError(f"template parameter {piece!r} has no name", hint="name each parameter of the template")
    return out


def is_specialization(head) -> bool:
    """Whether a template kernel's head is an explicit specialization (``template <>``)."""
    return re.fullmatch(r"template\s*<\s*>", head.template) is not None


def primary_definition(code: str, primary: list):
    """The primary template's definition among its heads (else its last declaration)."""
    return next((h for h in primary if not code[closing_paren(code, h.open_paren) + 1:].lstrip().startswith(";")),
                primary[-1])


def merged_params(heads, definition) -> list[TemplateParam]:
    """The definition's template parameters, each with the default any declaration of it gives (C++
    lets a forward declaration carry the defaults, and forbids the definition to repeat them)."""
    params = template_params(definition.template)
    for other in heads:
        for i, p in enumerate(template_params(other.template)[:len(params)]):
            if p.default is not None and params[i].default is None:
                params[i] = TemplateParam(params[i].name, params[i].is_type, p.default, params[i].text + " = " + p.default)
    return params


def declared_instances(source: str) -> dict[str, tuple[str, int]]:
    """kernel name -> (the instance's arguments as written, 1-based line) from each
    ``// kforge: instance`` line; a malformed line or a second line for one kernel raises."""
    found: dict[str, tuple[str, int]] = {}
    for m in INSTANCE_LINE.finditer(source):
        line = source.count("\n", 0, m.start()) + 1
        inst = _INSTANCE.match(m.group(1))
        if not inst:
            raise SignatureError(f"line {line}: `// kforge: instance{m.group(1)}` must read "
                                 "`// kforge: instance NAME<ARGUMENTS>`", hint="e.g. // kforge: instance rms_norm<float, 256>")
        name, args = inst.group(1), inst.group(2).strip()
        if name in found:
            raise SignatureError(f"line {line}: a second instance of {name} (line {found[name][1]} names one): "
                                 "a task runs one instance of its kernel")
        found[name] = (args, line)
    return found


def bind(name: str, params: list[TemplateParam], args: str, line: int) -> dict[str, str]:
    """Template parameter -> the instance's argument (a default where the line leaves it out)."""
    given = split_top(args)
    where = f"line {line}: instance {name}<{args}>"
    if len(given) > len(params):
        raise SignatureError(f"{where} gives {len(given)} arguments; the template takes {len(params)}: "
                             f"<{', '.join(p.text for p in params)}>")
    mapping: dict[str, str] = {}
    for i, p in enumerate(params):
        if i < len(given) and given[i]:
            mapping[p.name] = given[i]
        elif p.default is not None:
            mapping[p.name] = substitute(p.default, mapping)
        else:
            raise SignatureError(f"{where} leaves out {p.text!r}, which has no default",
                                 hint=f"name it: // kforge: instance {name}<"
                                      + ", ".join(mapping.get(q.name, "float" if q.is_type else "...") for q in params)
                                      + ">")
    return mapping


def substitute(text: str, mapping: dict[str, str]) -> str:
    """``text`` with each whole-word template parameter written as its argument."""
    if not mapping:
        return text
    return re.sub(r"\b[A-Za-z_]\w*\b", lambda m: mapping.get(m.group(0), m.group(0)), text)


def param_names(params_text: str) -> list[str]:
    """Each parameter's name (its last identifier) in a parameter list's text."""
    names = []
    for piece in split_top(params_text):
        if piece in ("", "void"):
            continue
        words = re.findall(r"[A-Za-z_]\w*", piece.split("=")[0])
        names.append(words[-1] if words else "")
    return names


def attributes(head: str) -> list[str]:
    """The ``__launch_bounds__(...)``-like attributes written in a kernel's head."""
    out = []
    for m in _ATTRIBUTE.finditer(head):
        end = closing_paren(head, m.end() - 1)
        out.append(head[m.start():end + 1])
    return out


def instantiated(source: str) -> str:
    """``source`` with each template kernel named by a ``// kforge: instance`` line compiled as that
    instance: the template a ``__device__ __forceinline__`` function, renamed, on its own lines; an
    ``extern "C" __global__`` kernel of the template's name calling it, added after the last line."""
    wanted = declared_instances(source) if "instance" in source else {}
    if not wanted:
        return source
    from kernel_forge.common.static_rules import strip_comments_and_strings
    code = strip_comments_and_strings(source, keep_strings=True)
    edits: list[tuple[int, int, str]] = []
    wrappers: list[str] = []
    for name, (args, line) in sorted(wanted.items()):
        heads = [h for h in templated_heads(code) if h.name == name]
        primary = [h for h in heads if not is_specialization(h)]
        if not primary:
            continue          # no template of that name: the line names nothing here (find_entry says so)
        definition = primary_definition(code, primary)
        mapping = bind(name, merged_params(primary, definition), args, line)
        close = closing_paren(code, definition.open_paren)
        params_text = " ".join(code[definition.open_paren + 1:close].split())
        written = [a for h in [definition, *primary] for a in attributes(code[h.start:h.open_paren])]
        for m in re.finditer(rf"\btemplate\s+(?:__\w+__\s+)*(__global__)(?=\s+void\s+{re.escape(name)}\s*<)", code):
            edits.append((m.start(1), m.end(1), "__device__"))   # the file's own explicit instantiations, of the function now
        kinds = {a.split("(")[0].strip(): a for a in reversed(written)}      # each kind once, the definition's first
        attrs = " ".join(substitute(a, mapping) for a in kinds.values())
        for h in heads:
            span = code[h.start:h.open_paren]
            newlines = "\n" * span.count("\n")
            edits.append((h.start, h.open_paren, f"__device__ __forceinline__ void {name}{BODY_SUFFIX}{newlines}"))
        uses = re.finditer(rf"(?<![\w.\"/]){re.escape(name)}\b(?=\s*[<(])", strip_comments_and_strings(source))
        for m in uses:                     # other uses (a call's, an instance taken by name) follow; not text, not paths
            if not any(s <= m.start() < e for s, e, _ in edits) and not _on_include_line(code, m.start()):
                edits.append((m.start(), m.end(), name + BODY_SUFFIX))
        call = ", ".join(param_names(params_text))
        concrete = substitute(params_text, mapping)
        scope = namespace_at(code, definition.start)
        head = f'extern "C" __global__ void {attrs + " " if attrs else ""}{name}('
        if scope:   # the instance's arguments read where the template stands (silu_kernel<float> in namespace vllm)
            ns = "::".join(scope)
            wrappers.append(f"namespace {ns} {{ __device__ __forceinline__ void {name}{CALL_SUFFIX}({concrete}) "
                            f"{{ {name}{BODY_SUFFIX}<{args}>({call}); }} }}")
            wrappers.append(f"{head}{_qualified_params(concrete, code, scope)}) {{ {ns}::{name}{CALL_SUFFIX}({call}); }}")
        else:
            wrappers.append(f"{head}{concrete}) {{ {name}{BODY_SUFFIX}<{args}>({call}); }}")
    for start, end, text in sorted(edits, reverse=True):
        source = source[:start] + text + source[end:]
    if wrappers:
        added = "\n".join(wrappers)
        for header, pattern in (("cuda_fp16.h", r"\b__half2?\b"), ("cuda_bf16.h", r"\b__nv_bfloat162?\b")):
            if re.search(pattern, added) and not re.search(rf"#\s*include\s*<{re.escape(header)}>", code):
                added = f"#include <{header}>\n" + added      # a type the instance names, not the file
        source = source.rstrip("\n") + "\n" + added + "\n"
    return source


def namespace_at(code: str, pos: int) -> list[str]:
    """The named namespaces open at ``pos`` in comment-free ``code``, outermost first (``namespace
    vllm {`` -> ["vllm"]; ``namespace a::b {`` -> ["a", "b"]; an unnamed one adds nothing: its names are
    seen from outside it)."""
    stack: list[list[str]] = []
    for m in re.finditer(r"\bnamespace\s+([A-Za-z_][\w:]*)?\s*\{|[{}]", code[:pos]):
        if m.group(0) == "}":
            if stack:
                stack.pop()
        elif m.group(0) == "{":
            stack.append([])
        else:
            stack.append([n for n in (m.group(1) or "").split("::") if n])
    return [n for names in stack for n in names]


def _qualified_params(params: str, code: str, scope: list[str]) -> str:
    """``params`` as written outside the namespaces ``scope``: the names of types the file declares in
    them (``struct Foo``, ``typedef ... Foo;``, ``using Foo = ...``) qualified."""
    if not scope:
        return params
    names = set()
    for m in re.finditer(r"\b(?:struct|class|union|enum)\s+([A-Za-z_]\w*)|\busing\s+([A-Za-z_]\w*)\s*="
                         r"|\btypedef\b[^;{}]*?\b([A-Za-z_]\w*)\s*;", code):
        if namespace_at(code, m.start()) == scope:
            names.add(next(g for g in m.groups() if g))
    prefix = "".join(f"{n}::" for n in scope)
    return re.sub(r"(?<![\w:])([A-Za-z_]\w*)\b", lambda m: prefix + m.group(1) if m.group(1) in names else m.group(1),
                  params)


def _on_include_line(code: str, at: int) -> bool:
    start = code.rfind("\n", 0, at) + 1
    return re.match(r"\s*#\s*include\b", code[start:at]) is not None


def instance_signature_text(code: str, head, args: str, line: int) -> str:
    """The instance's kernel head as a non-template kernel: ``__global__ void NAME(concrete params)``."""
    heads = [h for h in templated_heads(code) if h.name == head.name and not is_specialization(h)]
    mapping = bind(head.name, merged_params(heads, head), args, line)
    close = closing_paren(code, head.open_paren)
    return f"__global__ void {head.name}({substitute(code[head.open_paren + 1:close], mapping)})"


def default_instance(code: str, name: str) -> str | None:
    """The arguments ``kforge init`` writes for template kernel ``name`` in comment-free ``code``:
    the first of the file's own explicit instantiations (``template __global__ void k<float, 256>(...);``),
    else each parameter's default (one naming an earlier parameter read as that one's argument),
    ``float`` for a type without one; None when ``name`` is no template.  A value with neither
    raises: no guess would be the user's."""
    heads = [h for h in templated_heads(code) if h.name == name and not is_specialization(h)]
    if not heads:
        return None
    explicit = re.search(rf"\btemplate\s+(?:__\w+__\s+)*__global__\s+void\s+{re.escape(name)}\s*<", code)
    if explicit:
        depth, i = 1, explicit.end()
        while i < len(code) and depth:
            depth += {"<": 1, ">": -1}.get(code[i], 0)
            i += 1
        return " ".join(code[explicit.end():i - 1].split())
    params = merged_params(heads, primary_definition(code, heads))
    missing = [p.text for p in params if not p.is_type and p.default is None]
    if missing:
        example = ", ".join(p.default or ("float" if p.is_type else "...") for p in params)
        raise SignatureError(f"kernel {name} is a template whose {', '.join(repr(m) for m in missing)} "
                             f"{'has' if len(missing) == 1 else 'have'} no default, so there is no instance to guess",
                             hint=f"add a line `// kforge: instance {name}<{example}>` (with the values) to the kernel "
                                  "file and run kforge init again")
    mapping: dict[str, str] = {}
    for p in params:
        mapping[p.name] = substitute(p.default, mapping) if p.default else "float"
    return ", ".join(mapping[p.name] for p in params)
