"""The search simulator's pools (bench/search_sim.py): recorded H200 verdicts per bundled task, read
from a complete recording (bench/search_record.py) or from tuner runs' history.json, with the settings
a run lacks imputed from their nearest recorded neighbours."""
from __future__ import annotations

import dataclasses
import gzip
import hashlib
import json
import math
import random
import sys
from dataclasses import dataclass, field
from pathlib import Path

from kernel_forge.common.stats import geomean
from kernel_forge.model.candidate import Candidate, parse_candidate
from kernel_forge.model.task import Task, load_task

ROOT = Path(__file__).resolve().parent.parent
STRATEGIES = ("greedy", "population", "anneal", "brute")
MODEL_STRATEGIES = ("greedy", "population", "anneal")
WITHIN = 0.05      # "reached": within 5 % of the pool's best
BROKEN = "SIM_BROKEN"


def _key(d: dict) -> tuple:
    return tuple(sorted((k, float(v)) for k, v in d.items()))


# ------------------------------------------------------------------------------ recordings

@dataclass
class Pool:
    """Recorded results of one task: (label, setting) -> result (see search_record.py)."""

    task: Task
    results: dict[tuple, dict] = field(default_factory=dict)      # (label, _key(defines)) -> RESULT
    templates: dict[str, Candidate] = field(default_factory=dict)  # label -> template
    imputed: int = 0
    recorded: int = 0

    def best(self) -> float:
        return min(r["score_us"] for r in self.results.values() if r.get("passed") and r.get("score_us"))

    def lookup(self, label: str, defines: dict) -> dict | None:
        return self.results.get((label, _key(defines)))


def _tunable(cand: Candidate, defines: dict) -> dict:
    return {k: defines[k] for k in cand.tunables if k in defines}


def _read_recording(path: Path) -> dict:
    with (gzip.open(path, "rt", encoding="utf-8") if str(path).endswith(".gz") else open(path)) as f:
        rec = json.load(f)
    if rec.get("format") != "kforge-search-recording/1":
        raise SystemExit(f"{path}: not a kforge search recording (format {rec.get('format')!r})")
    return rec


def _settings_recorded(entry: dict) -> int:
    return sum(len((t or {}).get("results") or []) for t in (entry.get("templates") or {}).values())


def merge_recordings(paths: list[Path]) -> dict:
    """One recording from several of the same device (a recording cut by its time limit, then one of
    the tasks it did not reach): each task from the recording that holds most of its settings."""
    recs = [_read_recording(p) for p in paths]
    # the device's identity, not what was measured on it (its clock offset differs call to call)
    devices = {json.dumps({k: v for k, v in (r.get("device") or {}).items() if k not in ("clock_offset",)},
                          sort_keys=True) for r in recs}
    if len(devices) > 1:
        raise SystemExit("the recordings come from different devices; simulate them one at a time: "
                         + ", ".join(str(p) for p in paths))
    merged = dict(recs[0], tasks={})
    for rec in recs:
        for name, entry in rec["tasks"].items():
            if name not in merged["tasks"] or _settings_recorded(entry) > _settings_recorded(merged["tasks"][name]):
                merged["tasks"][name] = entry
    return merged


def load_recording(paths: list[Path], tasks: list[str] | None = None) -> tuple[dict[str, Pool], dict]:
    rec = merge_recordings(paths)
    pools = {}
    for name, entry in rec["tasks"].items():
        if tasks and name not in tasks:
            continue
        if not entry.get("initial") or not entry["initial"].get("passed"):
            print(f"[sim] {name}: left out ({entry.get('error') or 'its initial kernel was not recorded passing'})",
                  file=sys.stderr)
            continue
        task = load_task(ROOT / entry["manifest"])
        missing = [tp.name for tp in task.templates if not (entry["templates"].get(tp.name) or {}).get("results")]
        if task.templates and len(missing) == len(task.templates):   # a recording cut before this task's settings
            print(f"[sim] {name}: no setting recorded; left out", file=sys.stderr)
            continue
        if missing:     # a template the recording has not seen (or cut before its first setting) is left out
            print(f"[sim] {name}: {', '.join(missing)} not in the recording; left out", file=sys.stderr)
            task = dataclasses.replace(task, templates=tuple(tp for tp in task.templates if tp.name not in missing))
        pool = Pool(task)
        pool.results[("initial", ())] = entry["initial"]
        for tp in task.templates:
            cand = parse_candidate(tp.read_text(encoding="utf-8"), name=tp.name)
            pool.templates[tp.name] = cand
            t = entry["templates"].get(tp.name)
            if t is None:
                continue
            if t.get("sha256") != hashlib.sha256(tp.read_text(encoding="utf-8").encode()).hexdigest():
                print(f"[sim] warning: {tp.name} changed since it was recorded", file=sys.stderr)
            for r in t["results"]:
                pool.results[(tp.name, _key(_tunable(cand, r["defines"])))] = r
                pool.recorded += 1
        impute(pool)
        pools[name] = pool
    return pools, {"device": rec.get("device"), "calibration": rec.get("calibration"),
                   "source": " + ".join(str(p) for p in paths),
                   "complete": bool(pools) and all(p.imputed == 0 for p in pools.values()),
                   "created": rec.get("created")}


def load_runs(root: Path, tasks: list[str] | None = None) -> tuple[dict[str, Pool], dict]:
    """Tuner runs (history.json, or history.jsonl of a run killed before it finished) found under
    ``root``: their gated settings, the rest imputed."""
    from kernel_forge.evidence.history_log import read_history

    pools: dict[str, Pool] = {}
    env = {}
    folders = {p.parent for p in root.rglob("history.json")} | {p.parent for p in root.rglob("history.jsonl")}
    for folder in sorted(folders):
        hist_path = folder / "history.json"
        hist = read_history(folder, check=False)
        name = hist["task"]
        if tasks and name not in tasks:
            continue
        if name not in pools:
            task = load_task(ROOT / "manifests" / f"{name}.json")
            pools[name] = Pool(task, templates={tp.name: parse_candidate(tp.read_text(encoding="utf-8"), name=tp.name)
                                                for tp in task.templates})
        pool = pools[name]
        if not env and (hist_path.parent / "env.json").is_file():
            e = json.loads((hist_path.parent / "env.json").read_text())
            env = {"device": e.get("device"), "calibration": e.get("calibration")}
        for a in hist["attempts"]:
            ev = a.get("evaluation")
            if not ev:
                continue
            label = "initial" if a["proposer"] == "initial" else a["label"]
            if label != "initial" and label not in pool.templates:
                continue
            cand = pool.templates.get(label)
            if cand is not None:
                d = _tunable(cand, a["defines"])
                if set(d) != set(cand.tunables) or not cand.with_defines(d).satisfies_constraints() or \
                        any(d[k] not in cand.tunables[k] for k in d):
                    continue
            else:
                d = {}
            cases = {c["name"]: {"median": c["timing"]["median"], "p20": c["timing"]["p20"], "p80": c["timing"]["p80"]}
                     for c in ev.get("cases", []) if c.get("role") == "performance" and c.get("timing")}
            key = (label, _key(d))
            if key not in pool.results:
                pool.recorded += label != "initial"
            pool.results[key] = {"passed": ev["passed"], "reason": ev["reason"], "score_us": ev.get("score_us"),
                                 "cases": cases, "holdout": True}
    for pool in pools.values():
        impute(pool)
        for label in [l for l in pool.templates if not any(k[0] == l for k in pool.results)]:
            print(f"[sim] {pool.task.name}: {label} has no recorded setting; left out", file=sys.stderr)
            del pool.templates[label]
    return pools, {**env, "source": str(root), "complete": False}


def impute(pool: Pool, k: int = 3, spread: float = 0.08) -> None:
    """Fill the valid settings a recording lacks from the ``k`` nearest recorded settings of the
    same template (distance: steps in each tunable's sorted values), their per-case times
    averaged in log space and scattered by a deterministic log-normal factor."""
    for label, cand in pool.templates.items():
        have = {kk[1]: r for kk, r in pool.results.items() if kk[0] == label and r.get("passed") and r.get("cases")}
        if not have:
            continue
        order = {n: sorted(v) for n, v in cand.tunables.items()}
        pos = lambda d: {n: order[n].index(d[n]) for n in order}  # noqa: E731
        recorded = [(dict(kk), r) for kk, r in have.items()]
        for d in cand.configurations():
            t = _tunable(cand, d)
            if (label, _key(t)) in pool.results:
                continue
            p = pos(t)
            near = sorted(recorded, key=lambda x: (sum(abs(p[n] - order[n].index(x[0][n])) for n in order),
                                                   json.dumps(x[0], sort_keys=True)))[:k]
            rng = random.Random(f"impute:{label}:{_key(t)}")
            factor = math.exp(rng.gauss(0, spread))
            cases = {}
            for name in near[0][1]["cases"]:
                vals = [x[1]["cases"][name]["median"] for x in near if name in x[1]["cases"]]
                m = math.exp(sum(map(math.log, vals)) / len(vals)) * factor
                cases[name] = {"median": m, "p20": m * 0.997, "p80": m * 1.003}
            pool.results[(label, _key(t))] = {"passed": True, "reason": "passed", "cases": cases, "holdout": True,
                                               "score_us": geomean([c["median"] for c in cases.values()]),
                                               "imputed": True}
            pool.imputed += 1
