"""What a compiled kernel executes: its instruction mix, in the whole kernel and in its hot loop.

:func:`mix_of` compiles a candidate with NVRTC (no GPU needed) and counts its instructions by
kind -- FFMA, shared-memory loads and stores (LDS/STS, LDSM), global loads and stores
(LDG/STG, LDGSTS), tensor-core instructions (HMMA, HGMMA), shuffles, barriers, special
functions (MUFU), atomics, local-memory traffic (spills) -- with the vector width of every
memory instruction (LDS.128, LDG.E.128), for the whole kernel and for its *hot loop*: the
innermost loop (a backward branch) holding the most arithmetic.  The ratio of FFMA to
shared-memory loads there is what decides whether a tiled kernel can keep the FMA pipe busy
(an expert SGEMM issues 16 FFMA per LDS.128; a 32 x 32 tile that computes 4 outputs per thread
issues 4 FFMA per 5 LDS, and is bound by shared-memory instruction issue).

Counted from SASS (``nvdisasm`` on the CUBIN, :mod:`kernel_forge.gpu.disasm`) where nvdisasm is
installed -- what the GPU runs -- else from the PTX of the same NVRTC compile, which has the
same loads, stores, FMAs and vector widths for such kernels (ptxas folds address arithmetic
and may unroll further, so integer and total counts differ); the answer says which.
:func:`parse_sass` and :func:`parse_ptx` are pure functions over the text.
"""
from __future__ import annotations

import math
import re
from dataclasses import asdict, dataclass, field

#: categories, in the order they are shown
CATEGORIES = ("ffma", "fp32", "hfma2", "dfma", "tensor", "lds", "sts", "ldsm", "ldg", "stg", "ldgsts",
              "ldl", "stl", "atom", "shfl", "bar", "mufu", "int", "branch", "other")
#: memory categories whose vector widths are kept
WIDE = ("lds", "sts", "ldg", "stg", "ldgsts", "ldl", "stl")
LABELS = {"ffma": "FFMA", "fp32": "other FP32 (FADD/FMUL/...)", "hfma2": "HFMA2 (packed half)", "dfma": "FP64",
          "tensor": "tensor-core (HMMA/HGMMA)", "lds": "LDS", "sts": "STS", "ldsm": "LDSM", "ldg": "LDG",
          "stg": "STG", "ldgsts": "LDGSTS (cp.async)", "ldl": "LDL (local/spill)", "stl": "STL (local/spill)",
          "atom": "atomics", "shfl": "SHFL", "bar": "BAR", "mufu": "MUFU", "int": "integer", "branch": "branch",
          "other": "other"}

_SASS_OPS = {
    "FFMA": "ffma", "FFMA32I": "ffma", "FMUL": "fp32", "FADD": "fp32", "FMUL32I": "fp32", "FADD32I": "fp32",
    "FMNMX": "fp32", "FSETP": "fp32", "FSEL": "fp32", "FCHK": "fp32", "FSWZADD": "fp32",
    "HFMA2": "hfma2", "HADD2": "hfma2", "HMUL2": "hfma2", "HMNMX2": "hfma2",
    "DFMA": "dfma", "DADD": "dfma", "DMUL": "dfma",
    "HMMA": "tensor", "IMMA": "tensor", "BMMA": "tensor", "DMMA": "tensor", "HGMMA": "tensor", "IGMMA": "tensor",
    "QGMMA": "tensor", "BGMMA": "tensor", "UTCHMMA": "tensor", "UTCQMMA": "tensor",
    "LDS": "lds", "STS": "sts", "LDSM": "ldsm", "LDG": "ldg", "STG": "stg", "LDGSTS": "ldgsts",
    "LD": "ldg", "ST": "stg", "LDL": "ldl", "STL": "stl",
    "ATOM": "atom", "ATOMG": "atom", "ATOMS": "atom", "RED": "atom", "REDG": "atom", "REDUX": "atom",
    "SHFL": "shfl", "BAR": "bar", "MUFU": "mufu",
    "BRA": "branch", "BRX": "branch", "JMP": "branch", "EXIT": "branch", "RET": "branch", "CALL": "branch",
}
_INT_PREFIXES = ("IMAD", "IADD", "IMUL", "LEA", "SHF", "LOP", "ISETP", "IMNMX", "SEL", "PRMT", "IABS", "FLO", "POPC",
                 "BREV", "I2F", "F2I", "F2F", "I2I", "U", "MOV", "S2R", "S2UR", "CS2R", "P2R", "R2P", "PLOP3", "VIADD",
                 "IDP", "VABSDIFF", "BMSK", "SGXT")


def _sass_category(op: str) -> str:
    base = op.split(".")[0]
    if op.startswith("HFMA2.MMA"):
        return "other"              # ptxas's register move/zeroing on the FMA pipe, not half math
    if base in _SASS_OPS:
        return _SASS_OPS[base]
    if base.startswith(_INT_PREFIXES):
        return "int"
    return "other"


def _sass_width(op: str) -> int:
    mods = op.split(".")[1:]
    for m in mods:
        if m in ("128", "64"):
            return int(m)
        if m in ("U8", "S8"):
            return 8
        if m in ("U16", "S16"):
            return 16
    return 32


@dataclass
class Instr:
    pos: int            #: offset (SASS) or line index (PTX)
    op: str             #: the opcode with its modifiers ("LDS.128", "ld.shared.v4.f32")
    category: str
    width: int = 0      #: bits per thread for memory instructions, else 0
    target: str = ""    #: the label a branch goes to


@dataclass
class Listing:
    """One function's instructions and the positions of its labels."""

    instrs: list = field(default_factory=list)
    labels: dict = field(default_factory=dict)   #: label -> position of the next instruction


# -- SASS -------------------------------------------------------------------------------------
_SASS_FUNC = re.compile(r"^\s*\.section\s+\.text\.([A-Za-z_$][\w$]*)")
_SASS_LINE = re.compile(r"/\*([0-9a-f]{4,})\*/\s+(?:\{\s*)?(@!?U?P[0-9T]\s+)?([A-Z][A-Z0-9_]*(?:\.[A-Z0-9_]+)*)(.*?);")
_SASS_LABEL = re.compile(r"^\s*(\.L_x_\d+|\.L_\w+):")
_SASS_TARGET = re.compile(r"`\((\.L_[\w]+)\)")


def parse_sass(text: str, entry: str | None = None) -> Listing:
    """The instructions of function ``entry`` (the first function when None) in ``nvdisasm``
    output."""
    out = Listing()
    current = None
    pending: list[str] = []
    for line in text.splitlines():
        m = _SASS_FUNC.match(line)
        if m:
            if current is not None and (entry is None or current == entry) and out.instrs:
                break
            current = m.group(1)
            continue
        if current is None or (entry is not None and current != entry):
            continue
        lm = _SASS_LABEL.match(line)
        if lm:
            pending.append(lm.group(1))
            continue
        im = _SASS_LINE.search(line)
        if not im:
            continue
        pos = int(im.group(1), 16)
        for lab in pending:
            out.labels[lab] = pos
        pending = []
        op = im.group(3)
        cat = _sass_category(op)
        t = _SASS_TARGET.search(im.group(4) or "")
        out.instrs.append(Instr(pos, op, cat, _sass_width(op) if cat in WIDE else 0, t.group(1) if t else ""))
    return out


# -- PTX --------------------------------------------------------------------------------------
_PTX_ENTRY = re.compile(r"^\s*\.(?:visible\s+)?\.?entry\s+([A-Za-z_$][\w$]*)")
_PTX_LABEL = re.compile(r"^\s*(\$?[A-Za-z_][\w$]*):")
_PTX_INSTR = re.compile(r"^\s*(@!?%\w+\s+)?([a-z][\w.]*)\s*(.*?);")
_PTX_TYPE_BITS = {"b8": 8, "u8": 8, "s8": 8, "b16": 16, "u16": 16, "s16": 16, "f16": 16, "bf16": 16,
                  "b32": 32, "u32": 32, "s32": 32, "f32": 32, "b64": 64, "u64": 64, "s64": 64, "f64": 64,
                  "f16x2": 32, "bf16x2": 32, "b128": 128}


def _ptx_category(op: str) -> str:
    parts = op.split(".")
    base = parts[0]
    mods = set(parts[1:])
    if base == "fma" and "f32" in mods:
        return "ffma"
    if base in ("fma", "mul", "add", "sub") and ("f16x2" in mods or "bf16x2" in mods or "f16" in mods or "bf16" in mods):
        return "hfma2"
    if base in ("fma", "mul", "add", "sub") and "f64" in mods:
        return "dfma"
    if base in ("add", "sub", "mul", "max", "min", "neg", "abs", "setp", "selp", "div") and "f32" in mods:
        return "fp32"
    if base in ("mma", "wgmma", "tcgen05"):
        return "tensor"
    if base == "ldmatrix":
        return "ldsm"
    if base == "cp" and "async" in mods and "bulk" not in mods:
        return "ldgsts" if "wait_group" not in mods and "commit_group" not in mods and "wait_all" not in mods else "other"
    if base in ("ld", "ldu"):
        if "shared" in mods:
            return "lds"
        if "local" in mods:
            return "ldl"
        if "param" in mods or "const" in mods:
            return "other"
        return "ldg"
    if base == "st":
        if "shared" in mods:
            return "sts"
        if "local" in mods:
            return "stl"
        if "param" in mods:
            return "other"
        return "stg"
    if base in ("atom", "red"):
        return "atom"
    if base == "shfl":
        return "shfl"
    if base in ("bar", "barrier"):
        return "bar"
    if base in ("ex2", "lg2", "rcp", "rsqrt", "sqrt", "sin", "cos", "tanh") and "approx" in mods:
        return "mufu"
    if base in ("bra", "ret", "exit", "call", "brx"):
        return "branch"
    if base in ("mad", "add", "sub", "mul", "shl", "shr", "and", "or", "xor", "not", "cvt", "mov", "setp", "selp",
                "min", "max", "cvta", "mul24", "mad24", "prmt", "bfe", "bfi", "popc", "clz", "neg", "abs", "rem",
                "div", "lop3", "shf"):
        return "int"
    return "other"


def _ptx_width(op: str) -> int:
    parts = op.split(".")
    lanes = 1
    bits = 32
    for p in parts[1:]:
        if p in ("v2", "v4", "v8"):
            lanes = int(p[1:])
        elif p in _PTX_TYPE_BITS:
            bits = _PTX_TYPE_BITS[p]
    if parts[0] == "cp":
        return 0
    return lanes * bits


_PTX_CP_SIZE = re.compile(r",\s*(4|8|16)\s*(?:,|$)")


def parse_ptx(text: str, entry: str | None = None) -> Listing:
    """The instructions of ``.entry`` ``entry`` (the first when None) in PTX text."""
    out = Listing()
    inside = False
    depth = 0
    pending: list[str] = []
    idx = 0
    for line in text.splitlines():
        if not inside:
            m = _PTX_ENTRY.match(line)
            if m and (entry is None or m.group(1) == entry):
                inside = True
                depth = 0
            continue
        stripped = line.split("//", 1)[0]
        depth += stripped.count("{") - stripped.count("}")
        if depth <= 0 and "}" in stripped:
            break
        lm = _PTX_LABEL.match(stripped)
        if lm:
            pending.append(lm.group(1))
            continue
        im = _PTX_INSTR.match(stripped)
        if not im or im.group(2).startswith("."):
            continue
        op = im.group(2)
        cat = _ptx_category(op)
        width = 0
        if cat in WIDE:
            width = _ptx_width(op)
            if cat == "ldgsts":
                s = _PTX_CP_SIZE.search(im.group(3))
                width = int(s.group(1)) * 8 if s else 0
        target = ""
        if cat == "branch":
            t = im.group(3).strip().split()
            target = t[-1] if t else ""
        for lab in pending:
            out.labels[lab] = idx
        pending = []
        out.instrs.append(Instr(idx, op, cat, width, target))
        idx += 1
    return out


# -- counting ---------------------------------------------------------------------------------
def _counts(instrs) -> tuple[dict, dict]:
    counts: dict[str, int] = {}
    widths: dict[str, dict[str, int]] = {}
    for i in instrs:
        counts[i.category] = counts.get(i.category, 0) + 1
        if i.category in WIDE and i.width:
            w = widths.setdefault(i.category, {})
            w[str(i.width)] = w.get(str(i.width), 0) + 1
    return counts, widths


def loops(listing: Listing) -> list[tuple[int, int]]:
    """(start, end) positions of every loop: a branch back to a label at or before it."""
    out = set()
    for i in listing.instrs:
        if i.category == "branch" and i.target in listing.labels:
            start = listing.labels[i.target]
            if start <= i.pos:
                out.add((start, i.pos))
    return sorted(out)


def hot_loop(listing: Listing) -> tuple[int, int] | None:
    """The innermost loop (one that contains no other) with the most arithmetic (FFMA, tensor,
    HFMA2, FP64), then the most memory instructions; None for a kernel without loops."""
    found = loops(listing)
    if not found:
        return None
    inner = [l for l in found if not any(o != l and l[0] <= o[0] and o[1] <= l[1] for o in found)]

    def weight(l):
        body = [i for i in listing.instrs if l[0] <= i.pos <= l[1]]
        c, _ = _counts(body)
        arith = sum(c.get(k, 0) for k in ("ffma", "tensor", "hfma2", "dfma"))
        mem = sum(c.get(k, 0) for k in ("lds", "sts", "ldg", "stg", "ldgsts", "ldsm", "atom"))
        return (arith, mem, -(l[1] - l[0]), -l[0])
    return max(inner, key=weight)


@dataclass
class InstructionMix:
    """Instruction counts of one kernel (see the module docstring)."""

    source: str                    #: "sass" | "ptx"
    tool: str                      #: "nvdisasm 13.5.37" | "NVRTC 13.5 (PTX)"
    arch: str
    defines: dict
    kernel: dict                   #: category -> count, whole kernel
    kernel_widths: dict            #: category -> {bits: count}, whole kernel
    instructions: int              #: whole kernel
    hot_loop: dict | None = None   #: {"start", "end", "instructions", "counts", "widths"}; None: no loop
    note: str = ""                 #: why SASS was not used, when it was not

    def to_json(self) -> dict:
        return asdict(self)

    @property
    def focus(self) -> tuple[dict, dict, str]:
        """(counts, widths, where): the hot loop's where there is one, else the whole kernel's."""
        if self.hot_loop:
            return self.hot_loop["counts"], self.hot_loop["widths"], "hot loop"
        return self.kernel, self.kernel_widths, "whole kernel"


def summarise(listing: Listing, *, source: str, tool: str, arch: str, defines: dict, note: str = "") -> InstructionMix:
    counts, widths = _counts(listing.instrs)
    mix = InstructionMix(source=source, tool=tool, arch=arch, defines=dict(defines), kernel=counts,
                         kernel_widths=widths, instructions=len(listing.instrs), note=note)
    hl = hot_loop(listing)
    if hl is not None:
        body = [i for i in listing.instrs if hl[0] <= i.pos <= hl[1]]
        c, w = _counts(body)
        fmt = (lambda p: f"0x{p:04x}") if source == "sass" else str
        mix.hot_loop = {"start": fmt(hl[0]), "end": fmt(hl[1]), "instructions": len(body), "counts": c, "widths": w}
    return mix


def ratios(mix: dict | InstructionMix | None) -> dict:
    """Derived figures of a mix (its hot loop's where it has one): ``ffma_per_lds`` (FFMA per
    shared-memory load instruction), ``math_per_shared`` (arithmetic per shared-memory load or
    store), ``lds_bits`` (the widest/commonest LDS width), ``shared_share`` (shared-memory
    instructions per instruction)."""
    if mix is None:
        return {}
    m = mix if isinstance(mix, dict) else mix.to_json()
    hl = m.get("hot_loop")
    counts, widths = (hl["counts"], hl["widths"]) if hl else (m.get("kernel") or {}, m.get("kernel_widths") or {})
    total = (hl or {}).get("instructions") or m.get("instructions") or 0
    ffma = counts.get("ffma", 0)
    lds = counts.get("lds", 0) + counts.get("ldsm", 0)
    shared = lds + counts.get("sts", 0)
    arith = ffma + counts.get("tensor", 0) + counts.get("hfma2", 0) + counts.get("dfma", 0)
    out = {"ffma": ffma, "lds": lds, "sts": counts.get("sts", 0), "ldg": counts.get("ldg", 0),
           "math": arith, "shared": shared, "instructions": total}
    if lds:
        out["ffma_per_lds"] = ffma / lds
    if shared:
        out["math_per_shared"] = arith / shared
    if total:
        out["shared_share"] = shared / total
        out["math_share"] = arith / total
    w = (widths.get("lds") or {})
    if w:
        out["lds_bits"] = int(max(w, key=lambda b: (w[b], int(b))))
    return out


def _widths_text(w: dict) -> str:
    if not w:
        return ""
    if len(w) == 1:
        return f"all {next(iter(w))}-bit"
    return ", ".join(f"{n} x {b}-bit" for b, n in sorted(w.items(), key=lambda kv: -int(kv[0])))


def render(mix: dict | InstructionMix | None) -> str:
    """One or two lines for the prompt: the focus's counts with vector widths and the FFMA per
    shared-memory load, then the whole kernel's totals."""
    if mix is None:
        return ""
    m = mix if isinstance(mix, dict) else mix.to_json()
    hl = m.get("hot_loop")
    counts, widths = (hl["counts"], hl["widths"]) if hl else (m.get("kernel") or {}, m.get("kernel_widths") or {})
    unit = "" if m.get("source") == "sass" else "PTX instructions "
    where = (f"hot loop ({unit}{hl['start']}-{hl['end']}, {hl['instructions']} instructions)" if hl
             else "whole kernel (no loop)")
    parts = []
    for cat in ("ffma", "tensor", "hfma2", "dfma", "fp32", "lds", "ldsm", "sts", "ldg", "stg", "ldgsts", "ldl", "stl",
                "shfl", "mufu", "atom", "bar"):
        n = counts.get(cat, 0)
        if not n:
            continue
        w = _widths_text(widths.get(cat) or {})
        parts.append(f"{n} {LABELS[cat].split(' (')[0]}" + (f" ({w})" if w and cat in WIDE else ""))
    r = ratios(m)
    tail = ""
    if r.get("ffma_per_lds") is not None and r["ffma"]:
        tail = f" -> {r['ffma_per_lds']:.2f} FFMA per shared-memory load"
        if r["ffma_per_lds"] < 1:
            g = math.gcd(r["lds"], r["ffma"])
            tail += f" ({r['lds'] // g} LDS per {r['ffma'] // g} FFMA)"
    src = f"{m.get('tool') or m.get('source')}, {m.get('arch')}"
    line = f"instruction mix ({src}), {where}: " + (", ".join(parts) or "no arithmetic or memory instructions") + tail
    if hl:
        k = m.get("kernel") or {}
        line += (f"; whole kernel {m.get('instructions', 0)} instructions, {k.get('ffma', 0)} FFMA, "
                 f"{k.get('lds', 0)} LDS, {k.get('ldg', 0)} LDG, {k.get('stg', 0)} STG")
        spills = k.get("ldl", 0) + k.get("stl", 0)
        if spills:
            line += f", {spills} local-memory (spill) instructions"
    if m.get("note"):
        line += f" [{m['note']}]"
    return line


# -- building one -------------------------------------------------------------------------------
def mix_of(source: str, *, arch: str, entry: str | None, defines: dict | None = None, prefer: str = "sass",
           file_label: str = "kernel.cu", headers: dict[str, str] | None = None) -> InstructionMix:
    """Compile ``source`` (NVRTC, no GPU) and count the instructions of ``entry`` (None: the
    first kernel it defines): SASS through
    nvdisasm when ``prefer`` is "sass" and nvdisasm is found, else PTX.  Raises
    :class:`~kernel_forge.common.errors.CompileError` when the source does not compile and
    :class:`~kernel_forge.common.errors.EnvironmentProblem` when NVRTC is missing."""
    from kernel_forge.common.errors import EnvironmentProblem
    from kernel_forge.gpu import disasm
    from kernel_forge.gpu.nvrtc import compile_source, nvrtc_version

    defines = dict(defines or {})
    note = ""
    if prefer == "sass":
        tool = disasm.find_nvdisasm()
        if tool:
            compiled = compile_source(source, arch=arch, defines=defines, file_label=file_label, headers=headers)
            try:
                text = disasm.sass(compiled.cubin, tool)
                listing = parse_sass(text, entry)
                if listing.instrs:
                    version = disasm.nvdisasm_version(tool)
                    return summarise(listing, source="sass", tool=f"nvdisasm {version}".strip(), arch=arch,
                                     defines=defines)
                note = f"nvdisasm listed no function {entry}: counted from PTX"
            except EnvironmentProblem as exc:
                note = f"{exc}: counted from PTX"
        else:
            note = 'SASS needs nvdisasm (pip install "cuda-toolkit[nvdisasm]"): counted from PTX'
    text = disasm.ptx(source, arch=arch, defines=defines, file_label=file_label, headers=headers)
    listing = parse_ptx(text, entry)
    return summarise(listing, source="ptx", tool=f"NVRTC {nvrtc_version()} PTX", arch=arch, defines=defines,
                     note=note)


def mix_for_candidate(candidate, entry: str, arch: str, headers: dict[str, str] | None = None) -> dict | None:
    """:func:`mix_of` for a :class:`~kernel_forge.model.candidate.Candidate` as JSON, or
    ``{"error": ...}`` when it cannot be had (never raises for a kernel or tool problem)."""
    from kernel_forge.common.errors import KForgeError

    try:
        name = str(getattr(candidate, "name", "") or "kernel.cu")
        label = name.rsplit("/", 1)[-1] if name.endswith(".cu") else "kernel.cu"
        return mix_of(candidate.source, arch=arch, entry=entry, defines=candidate.compile_defines(),
                      file_label=label, headers=headers).to_json()
    except KForgeError as exc:
        return {"error": str(exc).splitlines()[0]}
    except Exception as exc:  # noqa: BLE001 - a broken toolchain must not stop a profile
        return {"error": f"{type(exc).__name__}: {exc}"}
