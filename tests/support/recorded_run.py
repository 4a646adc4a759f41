"""The recorded matmul_f32 run in tests/data/matmul_f32/run-001 (made by tests/data/make_recorded_run.py),
read the way the loop reads its own records: attempts, PromptAttempts, the best's diagnosis."""
from __future__ import annotations

import copy
import json
import re
from functools import lru_cache

from kernel_forge.analysis.diagnosis import diagnose
from kernel_forge.search.prompts import PromptContext, build_prompt_parts
from kernel_forge.search.prompt_blocks import PromptAttempt
from kernel_forge.model.task import load_task

from tests.support.paths import ROOT, TESTS

RUN = TESTS / "data" / "matmul_f32" / "run-001"
#: what the holdout case of matmul_f32 is (m=263, n=131, k=67) and the seed its failure used
HOLDOUT_MARKS = ("m=263", "n=131", "k=67", "263, n", "88001", "(holdout)", "case holdout")


@lru_cache(maxsize=1)
def _raw() -> tuple[dict, dict, dict]:
    return (json.loads((RUN / "history.json").read_text()), json.loads((RUN / "env.json").read_text()),
            json.loads((RUN / "profiles" / "a0004.json").read_text()))


def history() -> dict:
    return copy.deepcopy(_raw()[0])


def env() -> dict:
    return copy.deepcopy(_raw()[1])


def profile() -> dict:
    return copy.deepcopy(_raw()[2])


def task():
    return load_task(ROOT / "manifests" / "matmul_f32.json")


def attempts() -> dict[str, dict]:
    return {a["id"]: a for a in history()["attempts"]}


def prompt_attempt(a: dict) -> PromptAttempt:
    """As search.request_build.prompt_attempt builds it (holdout cases removed, hidden details withheld)."""
    ev = a.get("evaluation") or {}
    return PromptAttempt(id=a["id"], source=(RUN / a["source_file"]).read_text(), passed=a["status"] == "passed",
                         reason=a["reason"], message=a["message"] if a["reason"] != "holdout_failed" else
                         "failed a hidden case", score_us=a["score_us"],
                         cases=[c for c in ev.get("cases", []) if c.get("role") != "holdout"],
                         compile_log=(ev.get("compile") or {}).get("log", ""), rationale=a["rationale"],
                         defines=a["defines"], parent=a["parent"], launch=a["launch"])


def diagnosis(best_id: str = "a0004", *, with_profile: bool = True, drop_resources: bool = False, prof=None):
    at = attempts()
    best = at[best_id]["evaluation"]
    if drop_resources:
        for c in best["cases"]:
            c["resources"] = None
    e = env()
    return diagnose(task(), best, initial=at["a0000"]["evaluation"], baselines=history()["baselines"],
                    device=e["device"], calibration=e["calibration"],
                    profile=prof if prof is not None else (profile() if with_profile else None))


def prompt_parts(**kw):
    """(static prefix, dynamic part) of the prompt built from the recorded run, its best a0004, with
    ``kw`` replacing any of the prompt context's fields."""
    t = task()
    at = attempts()
    e = env()
    pa = prompt_attempt
    args = dict(reference_source=t.reference.path.read_text(), device=e["device"], calibration=e["calibration"],
                best=pa(at["a0004"]), history=[pa(a) for a in at.values() if a["status"] == "passed"],
                failures=[pa(a) for a in at.values() if a["status"] == "failed"], diagnosis=diagnosis())
    args.update(kw)
    return build_prompt_parts(PromptContext(t, **args))


def section(text: str, title: str) -> str:
    """One ``# Title`` section of a prompt (up to the next top-level heading)."""
    m = re.search(rf"^# {re.escape(title)}.*?(?=^# |\Z)", text, re.M | re.S)
    assert m, f"no section {title!r}"
    return m.group(0)
