"""An offline benchmark of the search strategies: no GPU, no network.

The real loop (:class:`kernel_forge.search.loop.Optimizer`) runs against a gate that replays recorded H200
verdicts (:class:`SimGate`, like :mod:`kernel_forge.gate.recorded` but keyed by kernel and setting),
in two modes:

* ``tune``: the built-in tuner over each bundled task's templates, exactly as ``make optimize``
  runs it, until every setting is gated (the recording has them all);
* ``model``: a simulated model (:class:`SimProposer`) that answers each proposal from the pool of
  recorded kernels (the initial kernel and every template setting), chosen by the proposal's
  parent and technique with a seed: a technique moves a fixed subset of the parent's tunables one
  or two steps in a fixed direction (which subset and which way: a hash of technique and kernel),
  with some spread; ``gen:rewrite`` switches to another template; a crossover mixes two parents'
  settings; 20 % of answers fail to compile (a fix turn repairs 70 % of those); the predicted
  speedup is the true one times log-normal noise.

For each strategy and many seeds it reports: proposals to reach within 5 % of the best kernel in
the pool (the best reachable), the best reached (as a ratio to that) after a fixed number of
proposals, and the share of proposals that were duplicates.  Recordings:
``bench/search_record.py`` (``bench/device_search.sh``) writes the complete format; for
development, ``--runs`` reads the tuner runs under ``bench/evidence`` (history.json) and fills the
settings they lack from their nearest recorded neighbours (marked "imputed" in the output).

    python bench/search_sim.py --recording OUT/search-recording.json.gz --seeds 20 --out bench
    python bench/search_sim.py --evidence --seeds 20 --out bench     # the tuner runs under bench/evidence
"""
from __future__ import annotations

import argparse
import hashlib
import math
import random
import shutil
import statistics
import sys
import tempfile
import time
from dataclasses import replace
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from kernel_forge.search import spaces as search  # noqa: E402
from kernel_forge.model.candidate import Candidate, load_candidate, parse_candidate  # noqa: E402
from kernel_forge.evidence.run_dir import RunDir  # noqa: E402
from kernel_forge.gate.gatelike import InTurn  # noqa: E402
from kernel_forge.config.loop_settings import LoopConfig  # noqa: E402
from kernel_forge.search.loop import Optimizer  # noqa: E402
from kernel_forge.proposers.base import Proposal, ProposalRequest, ProposalResult  # noqa: E402
from kernel_forge.search.tuner import TuneProposer  # noqa: E402
from kernel_forge.common.stats import geomean, summarize  # noqa: E402
from kernel_forge.model.verdict import CaseResult, Evaluation  # noqa: E402

from bench.search_sim_pools import (BROKEN, MODEL_STRATEGIES, STRATEGIES, WITHIN, Pool, _tunable,  # noqa: E402
                                     load_recording, load_runs)
from bench.search_sim_report import redraw, write_outputs  # noqa: E402,F401


# ------------------------------------------------------------------------------ the gate

class SimGate(InTurn):
    """A GateLike that answers from a :class:`Pool` (deterministic: the recorded medians)."""

    def __init__(self, pool: Pool, device: dict | None, calibration: dict | None):
        self.pool, self.task = pool, pool.task
        self.device, self.calibration = device, calibration
        self.bodies = {search.body_key(c): label for label, c in pool.templates.items()}
        self.bodies[search.body_key(load_candidate(pool.task.initial))] = "initial"
        self.gated = 0

    def identify(self, cand: Candidate) -> tuple[str, dict, dict | None]:
        if BROKEN in cand.source:
            return "broken", {}, {"passed": False, "reason": "compile_error", "message": "simulated compile error"}
        fam = sim_kernel(cand.source)
        if fam is not None:                      # a simulated model's kernel: its settings written in the code
            label, d = fam
            return label, d, self.pool.lookup(label, d)
        label = self.bodies.get(search.body_key(cand))
        if label is None:
            raise KeyError(f"{cand.name}: not a kernel of the pool")
        d = _tunable(self.pool.templates[label], cand.defines) if label != "initial" else {}
        return label, d, self.pool.lookup(label, d)

    def _evaluation(self, cand: Candidate, roles) -> Evaluation:
        label, d, r = self.identify(cand)
        ev = Evaluation(label=cand.name, passed=False, defines=cand.compile_defines(), sha256=cand.sha256, seconds=0.0)
        if r is None:
            raise KeyError(f"{cand.name}: no recorded result for {label} {d}")
        if not r["passed"]:
            ev.reason, ev.message = r.get("reason") or "mismatch", r.get("message") or "recorded failure"
            return ev
        for case in self.task.cases:
            if case.role not in roles:
                continue
            res = CaseResult(case.name, case.role, True, seeds=[0])
            if case.role == "holdout" and r.get("holdout") is False:
                res.passed, res.reason, res.message = False, "mismatch", "recorded holdout failure"
            if case.role == "performance":
                c = r["cases"][case.name]
                lo, mid, hi = c.get("p20") or c["median"], c["median"], c.get("p80") or c["median"]
                res.timing = summarize([lo, lo, mid, hi, hi], flushed=True)
            ev.cases.append(res)
        bad = [c for c in ev.cases if not c.passed]
        if bad:
            ev.reason, ev.message = bad[0].reason, bad[0].message
            return ev
        ev.passed, ev.reason = True, "passed"
        perf = [c.timing.median for c in ev.cases if c.role == "performance"]
        ev.score_us = geomean(perf) if perf else None
        return ev

    def evaluate(self, candidate, *, roles=("correctness", "performance"), kind="candidate", **_):
        if roles != ("holdout",):
            self.gated += 1
        return self._evaluation(candidate, tuple(roles))

    def retime(self, candidates, rounds=2):
        return [self._evaluation(c, ("performance",)) for c in candidates]

    def evaluate_baseline(self, name):
        return Evaluation(label=f"baseline:{name}", passed=False, reason="harness_error", message="not simulated",
                          kind="baseline")

    def device_info(self):
        return self.device

    def calibrate(self):
        return self.calibration

    def precompile(self, candidates):
        pass

    def profile(self, candidate, cases):
        return {"available": False, "reason": "simulated", "tool": "", "seconds": 0.0, "cases": {}}

    def close(self):
        pass


# ------------------------------------------------------------------------------ the model

def sim_kernel(source: str) -> tuple[str, dict] | None:
    """(template, setting) of a kernel the simulated model wrote, or None."""
    if "#define SIM_FAMILY " not in source:
        return None
    label, d = "", {}
    for line in source.splitlines():
        parts = line.split()
        if len(parts) == 3 and parts[0] == "#define":
            if parts[1] == "SIM_FAMILY":
                label = parts[2]
            elif parts[1] not in (BROKEN,):
                v = float(parts[2])
                d[parts[1]] = int(v) if v.is_integer() else v
        elif line.strip() and not line.startswith(("#define", "//")):
            break
    return label, d


class SimProposer:
    """Answers each proposal from the pool, by parent and technique (see the module docstring)."""

    name = "sim"
    needs_prompt = False

    def __init__(self, pool: Pool, seed: int, *, fail: float = 0.2, fix: float = 0.7, spread: float = 0.35,
                 aware: float = 0.7):
        self.pool, self.seed, self.fail, self.fix, self.spread, self.aware = pool, seed, fail, fix, spread, aware
        self.opt: Optimizer | None = None
        self.broken: dict[int, tuple[str, dict]] = {}
        self.families = [k for k in pool.templates]
        self.bodies = {search.body_key(c): label for label, c in pool.templates.items()}

    def _identity(self, attempt_id: str) -> tuple[str, dict, float | None]:
        a = next(x for x in self.opt.state.attempts if x.id == attempt_id)
        src = (self.opt.run_dir.path / a.source_file).read_text()
        if BROKEN in src:
            n = int(src.split(BROKEN)[1].split()[0])
            label, d = self.broken[n]
            return label, d, None
        if a.proposer == "initial":
            return "initial", {}, a.score_us
        fam = sim_kernel(src)
        if fam is not None:
            return fam[0], fam[1], a.score_us
        cand = parse_candidate(src, name="x.cu")
        label = self.bodies.get(search.body_key(cand), "initial")
        return label, (_tunable(self.pool.templates[label], a.defines) if label != "initial" else {}), a.score_us

    def _source(self, label: str, d: dict) -> str:
        """The kernel as a model would write it: the template with its settings as ``#define``s in
        the code (so two settings are two kernels), no tunables."""
        if label == "initial":
            return self.pool.task.initial.read_text(encoding="utf-8")
        t = self.pool.templates[label]
        head = [f"#define SIM_FAMILY {label}"] + [f"#define {k} {v}" for k, v in sorted(d.items())]
        body = replace(t, tunables={}, constraints=(), defines={}).render()
        launch = [l for l in body.splitlines() if l.startswith("// kforge:")]
        rest = [l for l in body.splitlines() if not l.startswith("// kforge:")]
        return "\n".join(launch + [f"// kforge: define {k} = {v}" for k, v in sorted(d.items())] + head + rest) + "\n"

    def _tried(self) -> list[tuple[str, dict]]:
        """The kernels the run has recorded (what the prompt's history and ledger show)."""
        out = []
        for a in self.opt.state.attempts:
            if a.proposer == "initial" or a.reason == "duplicate":
                continue
            src = (self.opt.run_dir.path / a.source_file).read_text()
            fam = sim_kernel(src) if BROKEN not in src else None
            if fam is not None:
                out.append(fam)
        return out

    def _valid(self, label: str, d: dict) -> bool:
        t = self.pool.templates[label]
        return all(d.get(k) in t.tunables[k] for k in t.tunables) and t.with_defines(d).satisfies_constraints()

    def _random(self, label: str, rng: random.Random) -> dict:
        configs = self.pool.templates[label].configurations()
        return _tunable(self.pool.templates[label], rng.choice(configs))

    def _move(self, label: str, d: dict, tech: str, rng: random.Random) -> tuple[str, dict]:
        base = tech.split("#")[0]
        if label == "initial" or base in ("gen:rewrite",) or (rng.random() < 0.08 and len(self.families) > 1):
            others = [f for f in self.families if f != label] or self.families
            f = rng.choice(others)
            return f, self._random(f, rng)
        t = self.pool.templates[label]
        names = sorted(t.tunables)
        h = int(hashlib.sha256(f"{base}|{label}".encode()).hexdigest(), 16)
        for _ in range(12):
            move = [names[h % len(names)]]
            if (h >> 20) % 5 < 2 and len(names) > 1:
                move.append(names[(h >> 8) % len(names)])
            if rng.random() < self.spread or base == "gen:tune":
                move = [rng.choice(names)]
            sign = 1 if (h >> 4) & 1 else -1
            if rng.random() < self.spread:
                sign = -sign
            c = dict(d)
            for n in dict.fromkeys(move):
                vals = sorted(t.tunables[n])
                i = vals.index(d[n]) + sign * (2 if rng.random() < 0.3 else 1)
                c[n] = vals[max(0, min(len(vals) - 1, i))]
            if c != d and self._valid(label, c):
                return label, c
            h = int(hashlib.sha256(f"{h}:{rng.random()}".encode()).hexdigest(), 16)
        return label, d                           # nothing new came to mind: the parent again

    def propose(self, request: ProposalRequest) -> ProposalResult:
        out = []
        for i in range(request.n):
            rng = random.Random(f"{self.seed}:{request.iteration}:{i}")
            slot = request.slots[i] if i < len(request.slots) else None
            parent = slot.parent if slot else self.opt.state.best.id
            tech = slot.technique if slot else ""
            direction = slot.direction if slot else ""
            label, d, score = self._identity(parent)
            src_a = next(x for x in self.opt.state.attempts if x.id == parent)
            if src_a.status == "failed" and src_a.fix_of is None and tech and direction.startswith("fix"):
                if rng.random() < self.fix:
                    target = (label, d)
                else:
                    target = None
            elif slot and slot.second_parent:
                l2, d2, s2 = self._identity(slot.second_parent)
                if l2 == label and label != "initial":
                    c = {n: (d if rng.random() < 0.5 else d2)[n] for n in d}
                    target = (label, c) if self._valid(label, c) else self._move(label, d, tech, rng)
                else:
                    first = (label, d) if (score or 9e99) <= (s2 or 9e99) else (l2, d2)
                    target = self._move(first[0], first[1], "crossover", rng) if first[0] != "initial" else (l2, d2)
            else:
                target = self._move(label, d, tech, rng)
            tries = 0
            while target is not None and target in self._tried() and rng.random() < self.aware and tries < 3:
                tries += 1                     # the prompt lists what was tried: most of the time it looks elsewhere
                target = self._move(label, d, f"{tech}~{tries}", rng)
            if target is None or rng.random() < self.fail:
                n = len(self.broken)
                self.broken[n] = target or (label, d)
                src = f"#define {BROKEN} {n}\n" + self._source(*(target or (label, d)))
                out.append(Proposal(source=src, direction=direction, proposer="sim", rationale=f"{tech} from {parent}"))
                continue
            r = self.pool.lookup(*target)
            true = (score / r["score_us"]) if score and r and r.get("score_us") else 1.0
            out.append(Proposal(source=self._source(*target), proposer="sim", rationale=f"{tech} from {parent}",
                                direction=direction, predicted_speedup=round(true * math.exp(rng.gauss(0, 0.3)), 3)))
        return ProposalResult(proposals=out)


# ------------------------------------------------------------------------------ running

class SimOptimizer(Optimizer):
    """The real loop with its evidence writing turned off (nothing here is evidence)."""

    def _write_history(self) -> None:
        pass

    def _write_best(self) -> None:
        pass

    def _profile(self, a, *, final: bool = False) -> None:
        pass

    def _evaluate_bound(self) -> None:
        pass          # the recording holds the pool's kernels only: a bound pattern has no recorded time

    def _finish(self) -> dict:
        return {"stop_reason": self.state.stop_reason}


def run_one(pool: Pool, env: dict, mode: str, strategy: str, seed: int, *, budget: int, workdir: Path) -> dict:
    task = pool.task
    gate = SimGate(pool, env.get("device"), env.get("calibration"))
    if mode == "tune":
        proposer = TuneProposer([p for p in task.templates if p.name in pool.templates])
        loop = LoopConfig(search=strategy, seed=seed, max_iterations=1000, roof_stop=0, tune_time_limit_s=0,
                          archive="off", profile=False)
    else:
        proposer = SimProposer(pool, seed)
        loop = LoopConfig(search=strategy, seed=seed, max_iterations=max(1, budget // 4), candidates=4, roof_stop=0,
                          archive="off", profile=False)
    run = RunDir.create(workdir)
    opt = SimOptimizer(task, gate, proposer, run, loop)
    if isinstance(proposer, SimProposer):
        proposer.opt = opt
    opt.run()
    shutil.rmtree(run.path, ignore_errors=True)
    target = pool.best()
    seq = [a for a in opt.state.attempts if a.proposer != "initial"]
    best = opt.state.initial.score_us
    curve, reach = [], None
    for i, a in enumerate(seq, 1):
        if a.status == "passed" and a.score_us:
            best = min(best, a.score_us)
        curve.append(best / target)
        if reach is None and best <= target * (1 + WITHIN):
            reach = i
    return {"task": task.name, "mode": mode, "strategy": strategy, "seed": seed, "proposals": len(seq), "reach": reach,
            "curve": curve, "duplicates": sum(a.reason == "duplicate" for a in seq),
            "failed": sum(a.status == "failed" and a.reason != "duplicate" for a in seq), "stop": opt.state.stop_reason}


def at(curve: list[float], n: int) -> float:
    return curve[min(n, len(curve)) - 1] if curve else float("nan")


def summarise(rows: list[dict], budgets: list[int], cap: int) -> dict:
    reach = [r["reach"] if r["reach"] is not None else cap + 1 for r in rows]
    return {"runs": len(rows), "reach_median": statistics.median(reach), "reach_mean": statistics.mean(reach),
            "reached": sum(r["reach"] is not None for r in rows),
            "best_at": {n: geomean([at(r["curve"], n) for r in rows]) for n in budgets},
            "duplicate_rate": sum(r["duplicates"] for r in rows) / max(1, sum(r["proposals"] for r in rows)),
            "proposals": statistics.mean(r["proposals"] for r in rows)}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--recording", type=Path, action="append",
                    help="search-recording.json(.gz) from bench/search_record.py; give it again to merge "
                         "recordings of one device (each task from the one that holds most of its settings)")
    ap.add_argument("--runs", type=Path, help="a folder of tuner runs (history.json) instead; missing settings imputed")
    ap.add_argument("--evidence", action="store_true",
                    help="the tuner runs committed under bench/evidence (their .tgz files, extracted here) instead")
    ap.add_argument("--tasks", default="")
    ap.add_argument("--seeds", type=int, default=20)
    ap.add_argument("--modes", default="tune,model")
    ap.add_argument("--strategies", default=",".join(STRATEGIES))
    ap.add_argument("--model-budget", type=int, default=48, help="model proposals per simulated run")
    ap.add_argument("--out", type=Path, default=None, help="folder for SEARCH.md, search-sim.json and search-sim.png")
    ap.add_argument("--redraw", type=Path, help="only redraw SEARCH.md and the plot from this search-sim.json")
    args = ap.parse_args()
    if args.redraw:
        redraw(args.redraw, args.out or args.redraw.parent)
        return 0
    tasks = [t for t in args.tasks.split(",") if t] or None
    if args.recording:
        pools, env = load_recording(args.recording, tasks)
    elif args.runs:
        pools, env = load_runs(args.runs, tasks)
    elif args.evidence:
        import tarfile
        folder = Path(tempfile.mkdtemp(prefix="kforge-evidence-"))
        for i, tgz in enumerate(sorted((ROOT / "bench" / "evidence").rglob("*.tgz"))):
            with tarfile.open(tgz) as tar:
                kw = {"filter": "data"} if hasattr(tarfile, "data_filter") else {}
                tar.extractall(folder / f"{i:02d}-{tgz.stem}", **kw)
        pools, env = load_runs(folder, tasks)
        env["source"] = "bench/evidence/*/*.tgz (tuner runs of earlier sessions)"
        shutil.rmtree(folder, ignore_errors=True)
    else:
        raise SystemExit("give --recording FILE, --runs FOLDER or --evidence")
    if not env.get("device"):
        from kernel_forge.gpu.device_description import load, shipped
        env["device"], cal = load(shipped("h200"))
        env["calibration"] = env.get("calibration") or cal
    modes = [m for m in args.modes.split(",") if m]
    strategies = [s for s in args.strategies.split(",") if s]
    work = Path(tempfile.mkdtemp(prefix="kforge-sim-", dir="/dev/shm" if Path("/dev/shm").is_dir() else None))
    results: dict = {"source": env.get("source"), "complete": env.get("complete"), "seeds": args.seeds,
                     "within": WITHIN, "tasks": {}, "rows": []}
    t0 = time.time()
    try:
        for name, pool in pools.items():
            target = pool.best()
            info = {"settings": len(pool.results) - 1, "recorded": pool.recorded, "imputed": pool.imputed,
                    "pool_best_us": target, "initial_us": pool.lookup("initial", {})["score_us"], "modes": {}}
            results["tasks"][name] = info
            for mode in modes:
                cap = info["settings"] if mode == "tune" else args.model_budget
                budgets = [12, 24, 48] if mode == "tune" else [12, 24, args.model_budget]
                for strat in (strategies if mode == "tune" else [s for s in strategies if s in MODEL_STRATEGIES]):
                    rows = [run_one(pool, env, mode, strat, seed, budget=args.model_budget, workdir=work)
                            for seed in range(args.seeds)]
                    results["rows"] += rows
                    s = summarise(rows, budgets, cap)
                    info["modes"].setdefault(mode, {})[strat] = s
                    print(f"[sim] {name:12} {mode:5} {strat:10} reach median {s['reach_median']:6.1f} "
                          f"(reached {s['reached']}/{s['runs']}), best@{budgets[1]} x{s['best_at'][budgets[1]]:.3f}, "
                          f"dups {100 * s['duplicate_rate']:.1f}%  [{time.time() - t0:.0f} s]", flush=True)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    if args.out:
        write_outputs(results, args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
