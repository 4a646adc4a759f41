"""Output tokens of one proposal, asked for inside JSON (the old submit_kernel tool call) against
as a fenced code block with a small JSON part (the answer format now), and as search/replace
edits against the parent where the proposal has one.

The answers are the recorded proposals kforge ships: the seven model proposals of the recorded
matmul run (tests/data/run-matmul_f32: source, rationale, launch, tunables, parent) and the
bundled tasks' templates (the kernel library's variants) as proposals against their task's
initial kernel.  Each is written out in the three forms exactly as
kernel_forge/proposers/answer.py reads them (and the JSON form as the tool arguments the model
had to emit, kernel JSON-escaped), and counted with a
real tokenizer: OpenAI's o200k_base from the ``bpe-openai`` package (it ships the encoding, so
nothing is downloaded; ``pip install bpe-openai``), else ``tiktoken`` if its encoding is cached,
else 4 characters a token (said so in the output).  Anthropic's tokenizer is not public; the
ratios between the forms are what carries over.

Run: ``python bench/answer_tokens.py [--write bench/ANSWER_TOKENS.md]``.  No GPU, a second or two.
"""
from __future__ import annotations

import argparse
import difflib
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from kernel_forge.kernels import library  # noqa: E402
from kernel_forge.model.candidate import parse_candidate  # noqa: E402
from kernel_forge.proposers.answer import read_answer  # noqa: E402
from kernel_forge.model.task import load_task  # noqa: E402


def tokenizer():
    """(name, count function) of the best tokenizer available here."""
    try:
        import bpe_openai

        enc = bpe_openai.get_encoding("o200k_base")
        return "o200k_base (bpe-openai)", lambda t: len(enc.encode(t))
    except Exception:  # noqa: BLE001 - not installed
        pass
    try:
        import tiktoken

        enc = tiktoken.get_encoding("o200k_base")
        return "o200k_base (tiktoken)", lambda t: len(enc.encode(t))
    except Exception:  # noqa: BLE001 - not installed, or its encoding file cannot be fetched
        pass
    return "approximation: 4 characters a token", lambda t: max(1, round(len(t) / 4))


def extras_of(source: str, rationale: str) -> dict:
    """What the JSON part carries for a kernel: its launch and tunables (from its // kforge: lines)."""
    try:
        cand = parse_candidate(source, name="k.cu")
    except Exception:  # noqa: BLE001 - a file without a header
        return {}
    out: dict = {}
    if cand.launch is not None:
        out["launch"] = cand.launch.to_json()
    if cand.tunables:
        out["tunables"] = {k: list(v) for k, v in cand.tunables.items()}
    return out


def json_form(source: str, rationale: str, extras: dict) -> str:
    """The submit_kernel arguments as the model emits them (the kernel JSON-escaped)."""
    return json.dumps({"source": source, "rationale": rationale, **extras})


def fenced_form(source: str, rationale: str, extras: dict, speedup: float = 1.2) -> str:
    part = {**extras, "predicted_speedup": speedup}
    return f"{rationale}\n\n```cuda\n{source.rstrip()}\n```\n\n```json\n{json.dumps(part)}\n```\n"


def edits(parent: str, child: str, context: int = 2) -> str:
    """SEARCH/REPLACE edits turning ``parent`` into ``child`` (hunks with a little context, merged)."""
    a, b = parent.splitlines(keepends=True), child.splitlines(keepends=True)
    blocks = []
    for group in difflib.SequenceMatcher(None, a, b, autojunk=False).get_grouped_opcodes(context):
        lo_a, hi_a = group[0][1], group[-1][2]
        lo_b, hi_b = group[0][3], group[-1][4]
        blocks.append("<<<<<<< SEARCH\n" + "".join(a[lo_a:hi_a]) + "=======\n" + "".join(b[lo_b:hi_b])
                      + ">>>>>>> REPLACE\n")
    return "".join(blocks)


def diff_form(parent: str, source: str, rationale: str, extras: dict, speedup: float = 1.2) -> str | None:
    text = edits(parent, source)
    if not text:
        return None
    answer = f"{rationale}\n\n```diff\n{text}```\n\n```json\n{json.dumps({**extras, 'predicted_speedup': speedup})}\n```\n"
    got = read_answer(answer, parent)
    if got.problem is not None or got.args["source"].rstrip() != source.rstrip():
        return None          # an edit that is not unique in the parent: the model would send the file
    return answer


def recorded() -> list[dict]:
    """The recorded proposals: (name, source, rationale, parent source)."""
    out = []
    run = ROOT / "tests" / "data" / "run-matmul_f32"
    hist = json.loads((run / "history.json").read_text())
    sources = {a["id"]: (run / a["source_file"]).read_text() for a in hist["attempts"]}
    seen = set()
    for a in hist["attempts"]:
        if not a.get("parent") or a["label"] in seen:
            continue
        seen.add(a["label"])
        out.append({"name": f"matmul_f32 {a['id']}", "source": sources[a["id"]],
                    "rationale": a.get("rationale") or "tiled version", "parent": sources[a["parent"]]})
    for t in sorted((k.path for k in library.index() if k.role == "variant"), key=lambda p: p.name):
        task_name = next((m.stem for m in (ROOT / "manifests").glob("*.json") if t.stem.startswith(m.stem)), None)
        if task_name is None:
            continue
        task = load_task(ROOT / "manifests" / f"{task_name}.json")
        out.append({"name": f"template {t.stem}", "source": t.read_text(),
                    "rationale": f"the {t.stem.removeprefix(task_name + '_')} template of {task_name}: "
                                 "a faster schedule with its launch and tunables",
                    "parent": task.initial.read_text()})
    return out


def measure() -> tuple[str, list[dict]]:
    name, count = tokenizer()
    rows = []
    for r in recorded():
        extras = extras_of(r["source"], r["rationale"])
        j = count(json_form(r["source"], r["rationale"], extras))
        f = count(fenced_form(r["source"], r["rationale"], extras))
        d_text = diff_form(r["parent"], r["source"], r["rationale"], extras)
        d = count(d_text) if d_text else None
        check = read_answer(fenced_form(r["source"], r["rationale"], extras))
        assert check.problem is None and check.args["source"].rstrip() == r["source"].rstrip(), r["name"]
        rows.append({"name": r["name"], "json": j, "fenced": f, "diff": d})
    return name, rows


def render(name: str, rows: list[dict]) -> str:
    lines = [f"Tokenizer: {name}.", "",
             "| answer | JSON (tool arguments) | fenced + JSON part | vs JSON | edits vs parent | vs JSON |",
             "| --- | --- | --- | --- | --- | --- |"]
    for r in rows:
        d = "-" if r["diff"] is None else str(r["diff"])
        dr = "-" if r["diff"] is None else f"{r['diff'] / r['json']:.2f}"
        lines.append(f"| {r['name']} | {r['json']} | {r['fenced']} | {r['fenced'] / r['json']:.2f} | {d} | {dr} |")
    tj, tf = sum(r["json"] for r in rows), sum(r["fenced"] for r in rows)
    # the answer format lets a model send edits where it has them: the smaller of the two
    best = sum(min(r["fenced"], r["diff"]) if r["diff"] else r["fenced"] for r in rows)
    lines += [f"| **all {len(rows)}** | **{tj}** | **{tf}** | **{tf / tj:.2f}** | **{best}** (file or edits, the smaller) "
              f"| **{best / tj:.2f}** |", ""]
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--write", help="also write the table to this markdown file")
    args = ap.parse_args()
    name, rows = measure()
    text = render(name, rows)
    print(text)
    if args.write:
        Path(args.write).write_text("# Output tokens per proposal: JSON vs fenced vs edits\n\n"
                                    "Written by `python bench/answer_tokens.py --write bench/ANSWER_TOKENS.md`; "
                                    "see the script's docstring for the answers and the tokenizer.\n\n" + text)


if __name__ == "__main__":
    main()
