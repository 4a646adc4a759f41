"""``kforge init NAME``: a new task from a kernel file or a signature.

It writes ``NAME.json`` (the manifest), ``NAME_reference.py`` (a reference stub) and ``NAME.cu``
(the initial kernel: the given file's text, or a stub body for a signature), guessing each
argument's role from its type: ``const T*`` is an input, ``T*`` an output, an integer scalar a
size variable that the cases set (a floating-point scalar gets the value 1.0).  It then
validates them and lists what to fill in.  The reference stub raises NotImplementedError, which
``kforge validate`` reports as that manifest's error until it is filled in.  No file is ever
overwritten without ``force``; a refusal writes nothing.
"""
from __future__ import annotations

import json
import re
import unicodedata
from dataclasses import dataclass, field
from pathlib import Path

from kernel_forge.common import expressions
from kernel_forge.common.errors import InputError, KForgeError, SignatureError
from kernel_forge.common.json_path import json_path
from kernel_forge.common.writes import check_within, write_files
from kernel_forge.model.references import python_name
from kernel_forge.model.kernel_heads import _entries, in_directive
from kernel_forge.model.signature import Signature, find_entry, parse_signature, resolved_text
from kernel_forge.common.static_rules import strip_comments_and_strings

#: the manifest schema's rule for a task name; kforge init holds parameter names to it too, so
#: the manifest's keys, the kernel and the Python reference all spell them the same way
NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")

#: cases for a task with one size variable, and for one with several (their product grows fast)
ONE_SIZE = {"small": 1037, "large": 1 << 22, "holdout": (1 << 20) + 11}
SEVERAL_SIZES = {"small": 37, "large": 512, "holdout": 263}


@dataclass
class InitResult:
    manifest: Path
    written: list[Path] = field(default_factory=list)
    guesses: list[str] = field(default_factory=list)   #: each argument's guessed role
    todo: list[str] = field(default_factory=list)      #: what the user must fill in or check
    status: str = ""                                   #: the validation's outcome, in words
    valid: bool = False                                #: validated (the reference stub aside)


def _ascii(name: str) -> str:
    """A name's ASCII spelling (``relü`` -> ``relu``), for the message that refuses it."""
    plain = unicodedata.normalize("NFKD", name).encode("ascii", "ignore").decode()
    plain = re.sub(r"\W", "_", plain)
    return plain if NAME.match(plain or "") else "_" + plain


def check_name(name: str, what: str, where: str, *, variable: bool = False) -> None:
    """Refuse a name the manifest schema (or a Python reference) could not take, before anything
    is written; a non-ASCII name gets its ASCII spelling as the suggestion.  A ``variable`` (a
    scalar parameter: a case variable of the manifest) must also be one that the manifest's
    expressions can use: the check ``kforge validate`` makes of every case variable."""
    if not NAME.match(name):
        raise InputError(f"{where}: {what} {name!r} is not a plain ASCII identifier ([A-Za-z_][A-Za-z0-9_]*, the "
                         "manifest schema's rule); nothing was written",
                         hint=f"rename it, e.g. {_ascii(name)!r}" + (" (in the kernel too)" if what != "the task name" else ""))
    problem = expressions.variable_problem(name) if variable else None
    if problem:
        raise InputError(f"{where}: {what} {name!r} {problem}, so it cannot be a case variable of the manifest; "
                         "nothing was written", hint=f"rename it in the kernel, e.g. {name.lower() + '_'!r}")


@dataclass
class _Entry:
    """What init reads of the kernel: its signature, the file's text (None for --signature), where,
    the instance line it added, the types read for void* parameters, and how each non-const pointer
    is used (:mod:`kernel_forge.model.pointer_access`)."""
    sig: Signature
    source: str | None = None
    path: Path | None = None
    instance_line: str | None = None
    read_types: list[str] = field(default_factory=list)
    access: dict[str, str] = field(default_factory=dict)


def _signature(name: str, from_file, signature) -> _Entry:
    if (from_file is None) == (signature is None):
        raise InputError("give the kernel with --from FILE.cu or its --signature (one of them)")
    check_name(name, "the task name", "NAME")
    if signature is not None:
        try:
            sig = parse_signature(signature)
        except SignatureError as exc:
            raise InputError(f"--signature: {exc}") from None
        if sig.name != name:
            raise InputError(f"--signature declares {sig.name!r}, not {name!r}: the task's name is its kernel's name")
        for p in sig.params:
            check_name(p.name, "the parameter", "--signature", variable=not p.pointer)
        if any(p.untyped for p in sig.params):
            p = next(p for p in sig.params if p.untyped)
            raise InputError(f"--signature: parameter {p.name} is `{p.describe()}`: write the type its buffer holds "
                             f"(e.g. `const __half* {p.name}`)")
        return _Entry(sig)
    from kernel_forge.common.reads import MAX_KERNEL, Unreadable, read_input_bytes

    src_path = Path(from_file)
    try:
        source = read_input_bytes(src_path, "kernel file", limit=MAX_KERNEL).decode("utf-8")
    except Unreadable as exc:
        raise InputError(f"--from {src_path}: {exc.reason}") from None
    except UnicodeDecodeError:
        raise InputError(f"--from {src_path}: not UTF-8 text") from None
    from kernel_forge.model.kernel_macros import expanded

    code = strip_comments_and_strings(source, keep_strings=True)
    names = [found for m, found, _t in _entries(code) if not in_directive(code, m.start())]   # not a macro's NAME
    local = project_headers(source, src_path)
    text = expanded(code, tuple(local.values()))[0]
    names += [found for m, found, _t in _entries(text)      # what macros write (not a macro's own NAME parameter)
              if found not in names and not in_directive(text, m.start())]
    names = list(dict.fromkeys(names))
    if name not in names:
        found = ", ".join(names) or "none (a kernel is __global__ void NAME(...))"
        inside = _headers_defining(name, local)
        raise InputError(f"--from {src_path}: no kernel named {name!r}; kernels found: {found}"
                         + (f"; {name} is defined in {inside}, which {src_path.name} includes" if inside else ""),
                         hint=(f"run kforge init {name} --from {inside} (the macros and constants {src_path.name} "
                               f"defines before its #include are then missing: add them to {inside}'s copy)")
                         if inside else None)
    try:
        with_instance = _with_instance(source, name)
        added = with_instance.splitlines()[-1] if with_instance != source else None
        source = with_instance
        found = find_entry(source, name, local)
        if found is None:
            raise InputError(f"--from {src_path}: kernel {name} is named here, but its head could not be read "
                             "(a macro that writes it in a way kforge does not expand?)",
                             hint="write the kernel's head out, __global__ void NAME(PARAMS), or pass --signature")
        sig, line = found
        sig = parse_signature(resolved_text(sig, source, local))      # floatX written as the type it names
    except SignatureError as exc:
        raise InputError(f"--from {src_path}: the signature of {name} is not supported: {exc}") from None
    for p in sig.params:
        check_name(p.name, "the parameter", f"--from {src_path}", variable=not p.pointer)
    read = []
    code = strip_comments_and_strings(source, keep_strings=True)       # the instance line, if one was added, in
    if any(p.untyped for p in sig.params):        # void*: the manifest names the type the kernel reads through it
        from kernel_forge.model.type_aliases import aliases
        from kernel_forge.model.void_pointers import read_types, typed

        types = read_types(code, line, sig, aliases(source, local))
        sig = typed(sig, types)
        read = [f"{t.param}: void* -> {t.ctype}" + (f" (the kernel's cast `{t.cast}`, line {t.line}" if t.line else
                                                    f" ({t.cast}") + "; the kernel keeps void*)"
                + (f"; it also reads {t.param} as {' and '.join(t.others)}: the manifest's flags must pick the {t.ctype} "
                   "path" if t.others else "") for t in types]
    from kernel_forge.model.pointer_access import access

    head = code.splitlines()[line - 1] if 0 < line <= code.count("\n") + 1 else ""
    # a kernel a macro writes is found at its invocation, with no body there: no reading of it
    used = access(code, line, [p.name for p in sig.params if p.pointer and not p.const]) if "__global__" in head else {}
    return _Entry(sig, source, src_path, added, read, used)


def _headers_defining(name: str, local: dict[str, str]) -> str | None:
    """The first of the file's project headers (include name -> text) that defines kernel ``name``
    (cuda-samples keep a sample's kernels in NAME_kernel.cuh, included by NAME.cu)."""
    for include, text in local.items():
        code = strip_comments_and_strings(text, keep_strings=True)
        if any(found == name for _m, found, _t in _entries(code)):
            return include
    return None


def _with_instance(source: str, name: str) -> str:
    """``source`` with a ``// kforge: instance`` line after its last line when its kernel ``name`` is a
    template and no line names the instance (each type parameter float, each value its default)."""
    from kernel_forge.model.template_instance import declared_instances, default_instance

    if name in declared_instances(source):
        return source
    args = default_instance(strip_comments_and_strings(source, keep_strings=True), name)
    if args is None:
        return source
    return source.rstrip("\n") + f"\n// kforge: instance {name}<{args}>\n"


def _tolerance(sig: Signature) -> dict:
    outs = [p.dtype for p in sig.params if p.pointer and not p.const]
    floats = [d for d in outs if d.is_float]
    if not floats:
        return {"atol": 0, "rtol": 0}
    bits = min(d.bits for d in floats)
    if bits <= 16:
        return {"atol": 1e-2, "rtol": 1e-2}
    return {"atol": 1e-5, "rtol": 1e-5} if bits == 32 else {"atol": 1e-10, "rtol": 1e-10}


def build_manifest(name: str, sig: Signature, *, has_launch: bool,
                   access: dict[str, str] | None = None, launch=None) -> tuple[dict, list[str], list[str]]:
    """The manifest for ``sig``, the guesses made and what to fill in.  ``access``: how the kernel
    uses each non-const pointer (``read``: an input despite no const; ``both``: in/out)."""
    access = access or {}
    sizes = [p for p in sig.params if not p.pointer and not p.dtype.is_float and p.dtype.name != "bool"]
    size = sizes[0].name if sizes else None
    guesses, todo = [], []
    args: dict = {}
    shape = [size] if size else [4096]
    inputs, outputs = [], []
    for p in sig.params:
        used = access.get(p.name) if p.pointer and not p.const else None
        if p.pointer and (p.const or used == "read"):
            if p.dtype.is_float:
                init = "normal"
            else:
                # a bool, or a byte mask (candle's where_u8 `ids`, a causal mask): half true, half false
                flag = p.dtype.name == "bool" or (p.dtype.bits == 8 and "mask" in p.name.lower())
                init = {"kind": "randint", "low": 0 if p.dtype.kind == "uint" or flag else -100,
                        "high": 2 if flag else 100}
            args[p.name] = {"shape": list(shape), "init": init}
            inputs.append(p.name)
            guesses.append(f"{p.name}: {p.describe()} -> input, shape {json.dumps(shape)}, init {json.dumps(init)}"
                           + (" (not const, but the kernel only reads it)" if used == "read" else ""))
        elif p.pointer and used == "both":
            init = "normal" if p.dtype.is_float else {"kind": "randint", "low": 0, "high": 100}
            args[p.name] = {"shape": list(shape), "init": init, "output": True}
            outputs.append(p.name)
            guesses.append(f"{p.name}: {p.describe()} -> in/out, shape {json.dumps(shape)}, init {json.dumps(init)} (the "
                           "kernel reads it and writes it)")
        elif p.pointer:
            args[p.name] = {"shape": list(shape), "output": True}
            outputs.append(p.name)
            guesses.append(f"{p.name}: {p.describe()} -> output, shape {json.dumps(shape)} (poisoned before each launch; "
                           "add an init to make it in/out)")
        elif p.dtype.is_float:
            args[p.name] = 1.0
            guesses.append(f"{p.name}: {p.describe()} -> a constant, 1.0")
            todo.append(f"the value of {p.name} in {name}.json {json_path('args', p.name)} (guessed 1.0)")
        elif p.dtype.name == "bool":
            args[p.name] = 0
            guesses.append(f"{p.name}: {p.describe()} -> a flag, 0 (false)")
            todo.append(f"the value of {p.name} in {name}.json {json_path('args', p.name)} (guessed 0: false; 1 is true)")
        else:
            args[p.name] = p.name
            guesses.append(f"{p.name}: {p.describe()} -> size variable {p.name}, set by each case")
        if p.lanes > 1:
            guesses[-1] += (f" (the shape counts {p.vector}s; the reference sees {p.dtype.name} values with a last axis "
                            f"of {p.lanes}: {p.name}[..., 0] is .x)")
        if python_name(p.name) != p.name:
            guesses[-1] += f" (a Python keyword: the reference takes it as {python_name(p.name)})"
    table = ONE_SIZE if len(sizes) <= 1 else SEVERAL_SIZES
    roles = (("small", "correctness"), ("large", "performance"), ("holdout", "holdout"))
    cases = [{"name": n, "role": role, "vars": {p.name: table[n] for p in sizes}} for n, role in roles]
    item = {p.name: p.dtype.itemsize * p.lanes for p in sig.params if p.pointer}
    per = " + ".join(f"{item[k]}*{size}" if size else str(item[k] * 4096) for k in item) or "0"
    manifest = {"name": name, "description": f"TODO: what {name} computes.",
                "signature": sig.text.rstrip(" {;"),
                "reference": {"python": f"{name}_reference.py:reference"},
                "initial": f"{name}.cu", "args": args,
                "tolerance": _tolerance(sig), "cost": {"bytes": per}, "cases": cases}
    if not has_launch and launch is not None:      # the program's own launch (authoring/launch_read.py)
        manifest["launch"] = {"grid": launch.grid, "block": launch.block,
                              **({"shared_mem": launch.shared_mem} if launch.shared_mem is not None else {})}
        outside = (f"; {', '.join(launch.defaulted)} set outside the launching function: taken as the block below"
                   if launch.defaulted else "")
        guesses.append(f"launch: grid {json.dumps(launch.grid)}, block {json.dumps(launch.block)}"
                       + (f", shared_mem {json.dumps(launch.shared_mem)}" if launch.shared_mem is not None else "")
                       + f" (read from the program's launch, line {launch.line}: {name}{launch.written}{outside})")
    elif not has_launch:
        grid = f"cdiv({size}, 256)" if size else 16
        manifest["launch"] = {"grid": [grid], "block": [256]}
        guesses.append(f"launch: grid [{grid}], block [256] (one thread per element of {shape[0]})")
    if not outputs:
        todo.append("mark the buffers the kernel writes with \"output\": true (no non-const pointer was found)")
    todo.insert(0, f"the reference: {name}_reference.py, reference() must write "
                   f"{', '.join(outputs) or 'the outputs'} in place from {', '.join(inputs) or 'the inputs'} (NumPy)")
    todo.append(f"each buffer's shape (all guessed {json.dumps(shape)}) in {name}.json $.args")
    if len(sizes) > 1:
        todo.append(f"the case sizes of {', '.join(p.name for p in sizes)} in {name}.json $.cases")
    todo.append(f"the tolerance ({json.dumps(manifest['tolerance'])}) and the cost (only bytes, guessed; "
                "add \"flops\" for compute-bound kernels)")
    return manifest, guesses, todo


def reference_stub(name: str, sig: Signature) -> str:
    params = ", ".join(python_name(p.name) for p in sig.params)
    outs = [python_name(p.name) for p in sig.params if p.pointer and not p.const]
    ins = [python_name(p.name) for p in sig.params if p.pointer and p.const]
    np_import = "import numpy  # noqa: F401" if "np" in params.split(", ") else "import numpy as np  # noqa: F401"
    renamed = [p.name for p in sig.params if python_name(p.name) != p.name]
    note = ([f"Parameters named like a Python keyword get a trailing underscore: {', '.join(renamed)} -> "
             f"{', '.join(python_name(n) for n in renamed)}."] if renamed else [])
    vectors = [p for p in sig.params if p.lanes > 1]
    if vectors:
        note.append("A buffer of a CUDA vector type has its lanes as the array's last axis ("
                    + ", ".join(f"{python_name(p.name)}: {p.vector}, {p.dtype.name} x {p.lanes}" for p in vectors)
                    + "; [..., 0] is .x).")
    lines = [f'"""Trusted reference for {name}: every candidate kernel is compared with what this computes.',
             "",
             "Written by `kforge init`. It is called with every kernel parameter by name: buffers as NumPy arrays",
             "(half and bfloat16 widened to float32), scalars as Python numbers. Write the outputs in place",
             f"({', '.join(outs) or 'the non-const buffers'}), as the kernel does, and return nothing.",
             *note, '"""', np_import, "", "",
             f"def reference({params}):",
             f'    """{", ".join(outs) or "outputs"} from {", ".join(ins) or "inputs"}."""',
             f"    # e.g. {outs[0] if outs else 'out'}[...] = ...",
             f'    raise NotImplementedError("fill in reference() in {name}_reference.py: '
             f'write {", ".join(outs) or "the outputs"} in place")', ""]
    return "\n".join(lines)


def kernel_stub(sig: Signature, size: str | None) -> str:
    guard = f"    if (i >= {size}) return;\n" if size else ""
    outs = ", ".join(p.name for p in sig.params if p.pointer and not p.const) or "the outputs"
    kinds = {p.dtype.name for p in sig.params}
    includes = "".join(f"#include <{h}>\n" for k, h in (("float16", "cuda_fp16.h"), ("bfloat16", "cuda_bf16.h"))
                       if k in kinds)
    return ("// Written by `kforge init`: fill in the body. The manifest's launch starts one thread per element.\n"
            f"{includes}"
            f"{sig.text.rstrip(' {;')}\n"
            "{\n"
            "    long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;\n"
            f"{guard}"
            f"    // TODO: compute {outs}[i]\n"
            "}\n")


def init_task(name: str, folder: str | Path = ".", *, from_file=None, signature=None, force: bool = False,
              validate: bool = True) -> InitResult:
    entry = _signature(name, from_file, signature)
    sig, source, src_path, instance_line = entry.sig, entry.source, entry.path, entry.instance_line
    from kernel_forge.authoring.launch_read import read_launch

    program_launch = read_launch(source, name, sig.params) if source is not None else None
    from kernel_forge.authoring.device_part import device_part
    from kernel_forge.model.candidate import parse_candidate
    from kernel_forge.common.errors import CandidateError

    beside = set(_project_files(source, src_path.parent)) if source is not None and src_path is not None else set()
    macros = _project_macros(source, src_path) if source is not None and src_path is not None else set()
    extracted = (device_part(source, name, beside=beside, macros=macros, writers=_project_writers(source, src_path))
                 if source is not None else None)
    headers: dict[str, str] = {}
    if extracted is not None and extracted.changed:      # a program: the kernel beside its host code
        source, headers = _with_project_headers(name, extracted, src_path, macros)
    has_launch = False
    if source is not None:
        try:
            has_launch = parse_candidate(source, name=str(src_path)).launch is not None
        except CandidateError as exc:
            raise InputError(f"--from {src_path}: {exc.message}") from None
    manifest, guesses, todo = build_manifest(name, sig, has_launch=has_launch, access=entry.access,
                                             launch=program_launch)
    guesses[:0] = entry.read_types
    shared_read = "shared_mem" in manifest.get("launch", {})
    if source is not None and not has_launch and not shared_read and re.search(
            r"\bextern\s[^;]*__shared__", strip_comments_and_strings(source)):
        todo.append(f"the dynamic shared memory the kernel's `extern __shared__` needs, in bytes: {name}.json "
                    "$.launch.shared_mem (the launch guessed gives it none)")
    out = Path(folder)
    if out.exists() and not out.is_dir():
        raise InputError(f"--dir {out}: is a file, not a folder")
    targets = {"manifest": out / f"{name}.json", "reference": out / f"{name}_reference.py",
               "kernel": out / f"{name}.cu"}
    if extracted is not None and extracted.changed:
        if targets["kernel"].resolve() == src_path.resolve():      # never over the user's program
            targets["kernel"] = out / f"{name}.device.cu"
            manifest["initial"] = targets["kernel"].name
        note = extracted.note()
        guesses.append(f"kernel: {src_path.name} is a program: {targets['kernel'].name} keeps the device part of it, "
                       f"line for line" + (f" ({note})" if note else ""))
        for h in headers:
            targets[f"header {h}"] = out / h
            guesses.append(f"header: {h} is the device part of {h.split('.', 1)[1]} (its include points at it; the "
                           "manifest lists it under headers)")
        if headers:
            manifest["headers"] = sorted(headers)
    kernel_in_place = src_path is not None and targets["kernel"].resolve() == src_path.resolve()
    if instance_line:
        if kernel_in_place:
            raise InputError(f"--from {src_path}: kernel {name} is a template and the file names no instance of it; "
                             "nothing was written", hint=f"add the line `{instance_line}` to {src_path.name} (or edit "
                             "its arguments) and run kforge init again")
        guesses.append(f"instance: `{instance_line}` added after the kernel's last line (a template runs one instance: "
                       "the file's first explicit instantiation, else each type float and each value its default; "
                       "edit the line for another)")
    check_within(out, targets.values())
    existing = [p for k, p in targets.items() if p.exists() and not (k == "kernel" and kernel_in_place)]
    if existing and not force:
        raise InputError(f"{', '.join(str(p) for p in existing)} already exist{'s' if len(existing) == 1 else ''}; "
                         "nothing was written", hint="pass --force to overwrite, or --dir for another folder")
    for p in existing:
        if p.is_dir():
            raise InputError(f"{p} is a folder; nothing was written")
    sizes = [p.name for p in sig.params if not p.pointer and not p.dtype.is_float and p.dtype.name != "bool"]
    contents = {"manifest": (json.dumps(manifest, indent=2) + "\n").encode(),
                "reference": reference_stub(name, sig).encode()}
    if not kernel_in_place:
        contents["kernel"] = (source if source is not None else kernel_stub(sig, sizes[0] if sizes else None)).encode()
    contents.update({f"header {h}": text.encode() for h, text in headers.items()})
    if source is None:
        todo.insert(1, f"the kernel body in {targets['kernel']}")
    result = InitResult(manifest=targets["manifest"], guesses=guesses, todo=todo)
    # all three staged on disk before any is renamed into place; a failure leaves nothing behind
    result.written = write_files([(targets[k], data) for k, data in contents.items()], private=False,
                                 overwrite=force)
    if validate:
        _validate(result)
    return result


def _project_files(source: str, folder: Path) -> dict[str, Path]:
    """include name -> path of each header the text includes that is a file in ``folder`` (``"common.h"``,
    and ``<ops.cuh>`` as some projects write their own; CUDA's device headers aside)."""
    from kernel_forge.authoring.device_part import DEVICE_HEADERS

    found = {}
    for quote, include in re.findall(r'^[ \t]*#[ \t]*include[ \t]*([<"])([^>"]+)[>"]', source, re.M):
        path = folder / include
        if (quote == '"' or not DEVICE_HEADERS.match(include)) and path.is_file():
            found.setdefault(include, path)
    return found


def _read_header(path: Path) -> str | None:
    from kernel_forge.common.reads import MAX_KERNEL, Unreadable, read_input_bytes

    try:
        return read_input_bytes(path, "header", limit=MAX_KERNEL).decode("utf-8")
    except (Unreadable, UnicodeDecodeError, OSError):
        return None                           # unreadable: left out, as the note says


def project_headers(source: str, src_path: Path) -> dict[str, str]:
    """include name -> text of each project header the file includes that is found beside it, and of
    the project headers those include in turn, each found beside the header that includes it (what
    the kernel's own types and helpers come from)."""
    found: dict[str, str] = {}
    todo = list(_project_files(source, src_path.parent).items())
    while todo:
        include, path = todo.pop(0)
        if include in found:
            continue
        text = _read_header(path)
        if text is None:
            continue
        found[include] = text
        todo += [(i, p) for i, p in _project_files(text, path.parent).items() if i not in found]
    return found


def _project_macros(source: str, src_path: Path) -> set[str]:
    """The macros standing for ``__device__`` that the file and its project headers define (one header
    may use what another defines: DeepSpeed's ``DS_D_INLINE``)."""
    from kernel_forge.authoring.device_part import device_macros

    return set().union(device_macros(source), *(device_macros(t) for t in project_headers(source, src_path).values()))


def _project_writers(source: str, src_path: Path) -> set[str]:
    """The macros that write kernels (candle's BINARY_OP) that the file's project headers define."""
    from kernel_forge.common.static_rules import strip_comments_and_strings
    from kernel_forge.model.kernel_macros import kernel_macros

    return set(kernel_macros("", *(strip_comments_and_strings(t, keep_strings=True)
                                   for t in project_headers(source, src_path).values())))


def _with_project_headers(name: str, extracted, src_path: Path, macros: set[str]) -> tuple[str, dict[str, str]]:
    """The device part's text, each project header it included (``#include "common.h"`` found beside
    the program) replaced by its own device part, ``NAME.common.h``, on the same line, and so on for
    the project headers those include; and those headers."""
    headers: dict[str, str] = {}
    source = _point_at_parts(name, extracted, src_path.parent, headers, macros)
    return source, headers


def _point_at_parts(name: str, part, folder: Path, headers: dict[str, str], macros: set[str]) -> str:
    """``part``'s text with each project header it left out (found in ``folder``) included as its own
    device part, ``NAME.<header>``, written into ``headers`` (once each, a header's own project
    headers the same way; ``macros``: the project's macros standing for ``__device__``)."""
    from kernel_forge.authoring.device_part import device_part

    files = _project_files(part.source_before, folder)
    lines = part.source.rstrip("\n").split("\n")
    for line, include in sorted(part.local.items()):
        if include not in files:
            continue
        own = f"{name}.{Path(include).name}"
        if own not in headers:
            text = _read_header(files[include])
            if text is None:
                continue
            headers[own] = ""                 # taken: a header that includes itself, or a cycle, ends here
            inner = device_part(text, None, beside=set(_project_files(text, files[include].parent)),
                                macros=macros)
            headers[own] = _point_at_parts(name, inner, files[include].parent, headers, macros).rstrip("\n") + "\n"
        lines[line - 1] = f'#include "{own}"'
        gone = next((i for i in part.includes if include in i), None)
        if gone:
            part.includes.remove(gone)
    return "\n".join(lines) + "\n"


def _validate(result: InitResult) -> None:
    from kernel_forge.common.errors import ReferenceError_
    from kernel_forge.authoring.validate import validate_manifest

    try:
        report = validate_manifest(result.manifest)
    except ReferenceError_ as exc:
        if "not implemented yet" in exc.message:
            result.valid = True
            result.status = ("validated: the manifest, its files and the kernel are consistent; the reference is "
                             "still a stub (kforge validate reports it until it is filled in)")
        else:
            result.status = f"written, but the reference fails: {exc}"
        return
    except KForgeError as exc:
        result.status = f"written, but validation failed: {exc}"
        result.todo.insert(0, "fix what validation reported above")
        return
    result.valid = True
    result.status = "validated" + (f" ({len(report.warnings)} warning(s): run kforge validate)" if report.warnings else "")
