"""What recording the evidence costs per attempt, at a run's start and at its end (no GPU).

A scripted tuner run (the real loop, :class:`kernel_forge.search.loop.Optimizer`, and the built-in
tuner, over one template with ``--attempts`` settings or more; the verdicts come from the scripted
gate of tests/support/fakes.py: every case with its 31 timing samples, as the real gate records them) is
run twice, recording the history

* ``log``: as kforge does it, an append-only log (``history.jsonl``, evidence/history_log.py);
* ``whole``: as releases before it did, ``history.json`` rewritten whole at every save.

Per attempt it reports the evidence time (the history's saves and every other evidence file:
sources, best.cu, replay requests) and the bytes written through kernel_forge.common.writes, over
the run's first and last ``--window`` attempts (a save is counted in the window holding the
number of attempts recorded when it was made).  The one history.json a process writes at its end
is reported apart.

    python bench/evidence_cost.py                          # 2,000 attempts, both ways
    python bench/evidence_cost.py --attempts 500 --modes log --out OUT/evidence-cost.json
"""
from __future__ import annotations

import argparse
import dataclasses
import json
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from kernel_forge.common import writes  # noqa: E402
from kernel_forge.config.loop_settings import LoopConfig  # noqa: E402
from kernel_forge.evidence.run_dir import RunDir  # noqa: E402
from kernel_forge.model.task import load_task  # noqa: E402
from kernel_forge.search.loop import Optimizer  # noqa: E402
from kernel_forge.search.tuner import TuneProposer  # noqa: E402

from tests.support.fakes import ScriptedGate  # noqa: E402

MANIFEST = ROOT / "manifests" / "vector_add.json"
MODES = ("log", "whole")


def template(attempts: int) -> str:
    """A vector_add template with at least ``attempts`` settings (BLOCK x PAD; the scripted gate
    scores BLOCK, PAD only makes settings)."""
    blocks = [32 * i for i in range(1, 33)]
    pads = list(range(max(1, -(-attempts // len(blocks)))))
    return (f"// kforge: grid = [cdiv(n, BLOCK)]\n// kforge: block = [BLOCK]\n"
            f"// kforge: tune BLOCK = [{', '.join(map(str, blocks))}]\n"
            f"// kforge: tune PAD = [{', '.join(map(str, pads))}]\n// fake: pass 400\n"
            'extern "C" __global__ void vector_add(const float* a, const float* b, float* c, int n) {\n'
            "    int i = blockIdx.x * blockDim.x + threadIdx.x;\n    if (i < n) c[i] = a[i] + b[i] + 0 * PAD;\n}\n")


class CountingFS(writes._OS):
    """The write helper's system calls, counting the bytes written."""

    def __init__(self):
        self.bytes = 0

    def write(self, fd, data):
        self.bytes += len(data)
        super().write(fd, data)


@dataclasses.dataclass
class Save:
    attempts: int       #: attempts recorded when the evidence was written
    seconds: float
    nbytes: int


class TimedRun(RunDir):
    """A run folder that times every evidence write (a write inside another counts once)."""

    def __init__(self, path, fs: CountingFS, opt_ref: list):
        super().__init__(path)
        self.fs, self.opt_ref, self.saves, self.depth, self.final = fs, opt_ref, [], 0, None

    def _timed(self, fn, *a, **kw):
        self.depth += 1
        t0, b0 = time.perf_counter(), self.fs.bytes
        try:
            return fn(*a, **kw)
        finally:
            self.depth -= 1
            if self.depth == 0 and self.opt_ref:
                self.record(len(self.opt_ref[0].state.attempts), time.perf_counter() - t0, self.fs.bytes - b0)

    def record(self, n: int, seconds: float, nbytes: int) -> None:
        if self.final is not None:
            self.final[0] += seconds
            self.final[1] += nbytes
        else:
            self.saves.append(Save(n, seconds, nbytes))

    def write_json(self, name, obj):
        return self._timed(super().write_json, name, obj)

    def write_text(self, name, text):
        return self._timed(super().write_text, name, text)

    def write_bytes(self, name, data):
        return self._timed(super().write_bytes, name, data)

    def append_line(self, name, obj, **kw):
        return self._timed(super().append_line, name, obj, **kw)


def optimizer_class(mode: str):
    class Timed(Optimizer):
        def _write_history(self) -> None:
            if mode == "whole":          # the release before the log: history.json rewritten whole
                self._history_written = time.monotonic()
                self.run_dir.write_json("history.json", self._history())
            else:
                self.run_dir._timed(super()._write_history)

        def _finish(self) -> dict:
            self.run_dir.final = [0.0, 0]
            return super()._finish()
    return Timed


def run(attempts: int, mode: str, workdir: Path, *, fs: CountingFS | None = None, tune_budget: int = 24) -> dict:
    """One scripted tuner run of ``attempts`` settings (and the initial kernel); its evidence
    saves, and the end's writes apart."""
    workdir.mkdir(parents=True, exist_ok=True)
    tpl = workdir / "vector_add_many.cu"
    tpl.write_text(template(attempts))
    task = dataclasses.replace(load_task(MANIFEST), templates=(tpl,))
    fs = fs or CountingFS()
    old, writes.FS = writes.FS, fs
    try:
        root = workdir / f"runs-{mode}"
        path = RunDir.create(root).path
        ref: list = []
        run_dir = TimedRun(path, fs, ref)
        loop = LoopConfig(max_iterations=10_000, roof_stop=0, tune_time_limit_s=0, tune_budget=tune_budget,
                          archive="off", profile=False, search="brute")
        opt = optimizer_class(mode)(task, ScriptedGate(task), TuneProposer([tpl]), run_dir, loop)
        ref.append(opt)
        t0 = time.perf_counter()
        summary = opt.run()
        wall = time.perf_counter() - t0
    finally:
        writes.FS = old
    return {"mode": mode, "attempts": len(opt.state.attempts), "wall_s": wall, "stop": summary["stop_reason"],
            "saves": run_dir.saves, "final_s": run_dir.final[0], "final_bytes": run_dir.final[1],
            "history_bytes": (path / "history.json").stat().st_size}


def window(saves: list[Save], lo: int, hi: int) -> dict:
    """Evidence per attempt over attempts lo+1..hi: seconds and bytes of the saves made then."""
    inside = [s for s in saves if lo < s.attempts <= hi]
    n = max(1, hi - lo)
    return {"attempts": f"{lo + 1}-{hi}", "ms_per_attempt": 1e3 * sum(s.seconds for s in inside) / n,
            "bytes_per_attempt": sum(s.nbytes for s in inside) / n, "writes": len(inside)}


def report(result: dict, size: int) -> dict:
    """The first window starts after the initial kernel's saves (the attempts recorded at the run's
    first save), so that with ``size`` a whole number of batches both windows hold as many batches."""
    n = result["attempts"]
    start = min((s.attempts for s in result["saves"]), default=0)
    return {**{k: v for k, v in result.items() if k != "saves"},
            "first": window(result["saves"], start, start + size), "last": window(result["saves"], n - size, n)}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--attempts", type=int, default=2000)
    ap.add_argument("--window", type=int, default=None,
                    help="attempts per window (default: ten batches, 10 x --tune-budget)")
    ap.add_argument("--modes", default=",".join(MODES))
    ap.add_argument("--tune-budget", type=int, default=24)
    ap.add_argument("--out", type=Path, help="write the figures as JSON here too")
    args = ap.parse_args()
    args.window = args.window or 10 * args.tune_budget
    rows = []
    with tempfile.TemporaryDirectory(prefix="kforge-evidence-cost-") as tmp:
        for mode in args.modes.split(","):
            r = report(run(args.attempts, mode, Path(tmp) / mode, tune_budget=args.tune_budget), args.window)
            rows.append(r)
            print(f"{mode:>5}: {r['attempts']} attempts in {r['wall_s']:.1f} s ({r['stop'][:40]}); evidence per attempt, "
                  f"first {args.window}: {r['first']['ms_per_attempt']:.3f} ms, {r['first']['bytes_per_attempt']:,.0f} B; "
                  f"last {args.window}: {r['last']['ms_per_attempt']:.3f} ms, {r['last']['bytes_per_attempt']:,.0f} B; "
                  f"at the end: {1e3 * r['final_s']:.0f} ms, {r['final_bytes']:,} B (history.json "
                  f"{r['history_bytes']:,} B)", flush=True)
    if args.out:
        writes.write_text(args.out, json.dumps(rows, indent=2) + "\n", private=False)
    return 0


if __name__ == "__main__":
    sys.exit(main())
