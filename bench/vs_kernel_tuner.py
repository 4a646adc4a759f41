"""kforge's gate against Kernel Tuner on the same work, measured side by side in ONE process (GPU).

The benchmark of issue 10: vector_add over 2^24 floats plus a 1,000,003-element correctness case,
10 block sizes, every candidate a cold compile.  Four harnesses, each on the same 10 kernels:

  (a) kforge full gate     Gate(task, GateOptions())        strict: 2 draws, repeat, after-timing checks
  (b) kforge --quick       Gate(task, GateOptions.quick())  1 draw, no repeat or after-timing checks
      each two ways: one by one (evaluate compiles), and as the loop gates an iteration's
      candidates (``gate.precompile(all ten)`` first: the next ones compile while one is gated)
  (c) Kernel Tuner, CUDA   tune_kernel(lang="nvcuda"), answer checked (cuda-python backend)
  (d) Kernel Tuner, cupy   tune_kernel(lang="cupy"), answer checked

kforge runs on a temporary manifest built from manifests/vector_add.json with exactly the two
cases ("odd", n = 1,000,003, correctness; "n16M", n = 2^24, performance); each harness gets a
fresh, empty compile cache (KFORGE_CACHE_DIR; CUPY_CACHE_DIR for CuPy's own).  For Kernel Tuner
the same work is two tune_kernel calls per backend, each over the 10 block sizes with
`answer=` checked: n = 2^24 (timed, `--kt-iterations` launches, Kernel Tuner's default 7) and
n = 1,000,003; a candidate's cost is the two calls' wall time over 10.  Kernel Tuner's own
compile / verification / benchmark / framework times per configuration are kept in the JSON.

Printed: ms per candidate (median over the 10, and the first and slowest), the best time each
harness found (kforge: the n16M median of the best candidate; Kernel Tuner: its reported mean of
`iterations` launches, no L2 flush) and at which block size.  Without kernel_tuner (or with a
backend that fails) its rows say why and the rest still runs.

    PYTHONPATH=$PWD:/tmp/site python bench/vs_kernel_tuner.py --out $OUT/vs_kernel_tuner.json

``--case stencil`` (issue 29): a user's kernel with its own tune lines, no ``templates`` entry.
The 3x3 blur of bench/wild/blur3x3/tuned.cu (``(const float* x, float* y, int h, int w)``, BX x
BY threads each computing RY rows, 54 valid settings) on 4096 x 4096: kforge's model-free
``optimize`` (the library's start_run, in this process: defaults but --roof-stop 0, no dispatch
rule, no archive, no profile, so that it gates every setting and only that) against Kernel
Tuner's brute force over the same 54 settings (tune_kernel, answer checked, grid_div_y = BY*RY).
The figure of merit is the wall time to gate every valid setting; the goal is kforge <= 2x
Kernel Tuner's.

    PYTHONPATH=$PWD:/tmp/site python bench/vs_kernel_tuner.py --case stencil --out $OUT/vs_kt_stencil.json
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import re
import statistics
import sys
import tempfile
import time
import traceback
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
# KFORGE_PACKAGE_ROOT: measure another checkout of the package (e.g. the release before) the same way
sys.path.insert(0, os.environ.get("KFORGE_PACKAGE_ROOT") or str(ROOT))

BLOCKS = (32, 64, 96, 128, 192, 256, 384, 512, 768, 1024)
N_PERF = 1 << 24
N_ODD = 1_000_003

#: the candidate kforge gates: the naive kernel with its block size as a define
KFORGE_KERNEL = """// kforge: grid = [cdiv(n, BLOCK)]
// kforge: block = [BLOCK]
// kforge: define BLOCK = {block}
extern "C" __global__ void vector_add(const float* a, const float* b, float* c, int n)
{{
    long long i = (long long)blockIdx.x * BLOCK + threadIdx.x;
    if (i < n) {{
        c[i] = a[i] + b[i];
    }}
}}
"""

#: the same kernel as Kernel Tuner wants it: it defines block_size_x, the grid is n / block_size_x
KT_KERNEL = """extern "C" __global__ void vector_add(const float* a, const float* b, float* c, int n)
{
    long long i = (long long)blockIdx.x * block_size_x + threadIdx.x;
    if (i < n) {
        c[i] = a[i] + b[i];
    }
}
"""


def two_case_manifest(directory: Path) -> Path:
    """manifests/vector_add.json with exactly the cases "odd" (n = 1,000,003) and "n16M" (2^24),
    every path in it made absolute."""
    src = ROOT / "manifests" / "vector_add.json"
    data = json.loads(src.read_text())
    here = src.parent

    def absolute(spec: str) -> str:
        path, _, func = spec.partition(":")
        return str((here / path).resolve()) + (f":{func}" if func else "")

    data.pop("$schema", None)
    data["reference"] = {"python": absolute(data["reference"]["python"])}
    data["baselines"] = {k: {"python": absolute(v["python"])} for k, v in data.get("baselines", {}).items()}
    data["initial"] = absolute(data["initial"])
    data.pop("templates", None)
    data["cases"] = [{"name": "odd", "role": "correctness", "vars": {"n": N_ODD}},
                     {"name": "n16M", "role": "performance", "vars": {"n": N_PERF}}]
    path = directory / "vector_add.json"
    path.write_text(json.dumps(data, indent=1))
    return path


def summary(per_candidate_s: list[float]) -> dict:
    ms = [s * 1000.0 for s in per_candidate_s]
    return {"median": statistics.median(ms), "first": ms[0], "max": max(ms), "min": min(ms), "all": ms}


def run_kforge(manifest: Path, quick: bool, cache_root: Path, ahead: bool = False) -> dict:
    from kernel_forge.model.candidate import parse_candidate
    from kernel_forge.config.gate_settings import GateOptions
    from kernel_forge.gate.gate import Gate
    from kernel_forge.model.task import load_task

    mode = ("kforge-quick" if quick else "kforge-full") + ("-ahead" if ahead else "")
    os.environ["KFORGE_CACHE_DIR"] = str(cache_root / mode)
    task = load_task(manifest)
    options = GateOptions.quick() if quick else GateOptions()
    row = {"harness": ("kforge --quick" if quick else "kforge full gate") + (", compiling ahead" if ahead else ""),
           "options": {k: v for k, v in vars(options).items() if not k.startswith("_")}}
    with Gate(task, options) as gate:
        if ahead and not hasattr(gate, "precompile"):
            return {"harness": row["harness"], "skipped": "this package has no Gate.precompile"}
        t0 = time.perf_counter()
        gate.ensure_gpu()
        gate.calibrate()    # worker start and calibration: once per gate, not per candidate
        row["startup_s"] = time.perf_counter() - t0
        seconds, results = [], []
        cands = [parse_candidate(KFORGE_KERNEL.format(block=block), name=f"vector_add_b{block}.cu")
                 for block in BLOCKS]
        if ahead:
            gate.precompile(cands)      # as the loop does with an iteration's candidates
        for block, cand in zip(BLOCKS, cands):
            t0 = time.perf_counter()
            ev = gate.evaluate(cand, roles=("correctness", "performance"))
            seconds.append(time.perf_counter() - t0)
            perf = ev.case("n16M")
            results.append({"block": block, "passed": ev.passed, "reason": ev.reason,
                            "seconds": seconds[-1], "score_us": ev.score_us,
                            "n16M_median_us": perf.timing.median if perf and perf.timing else None,
                            "compile": {k: (ev.compile or {}).get(k) for k in ("seconds", "cached")}})
            if not ev.passed:
                row.setdefault("failures", []).append(f"block {block}: {ev.reason}: {ev.message}")
        row["device"] = gate.device
    row["per_candidate_ms"] = summary(seconds)
    row["candidates"] = results
    ok = [r for r in results if r["passed"] and r["n16M_median_us"]]
    if ok:
        best = min(ok, key=lambda r: r["n16M_median_us"])
        row["best_us"], row["best_block"] = best["n16M_median_us"], best["block"]
    return row


def run_kernel_tuner(lang: str, iterations: int) -> dict:
    import numpy as np
    from kernel_tuner import tune_kernel

    label = {"nvcuda": "Kernel Tuner, CUDA backend (nvcuda)", "cupy": "Kernel Tuner, cupy backend"}[lang]
    row = {"harness": label, "lang": lang, "iterations": iterations}
    rng = np.random.default_rng(0)
    calls = []
    for n in (N_PERF, N_ODD):
        a = rng.standard_normal(n).astype(np.float32)
        b = rng.uniform(-2.0, 2.0, n).astype(np.float32)
        c = np.zeros_like(a)
        args = [a, b, c, np.int32(n)]
        answer = [None, None, a + b, None]
        t0 = time.perf_counter()
        results, env = tune_kernel("vector_add", KT_KERNEL, n, args, {"block_size_x": list(BLOCKS)},
                                   answer=answer, atol=1e-6, lang=lang, iterations=iterations,
                                   quiet=True, cache=None)
        wall = time.perf_counter() - t0
        calls.append({"n": n, "wall_s": wall, "configurations": len(results),
                      "results": [{k: r.get(k) for k in ("block_size_x", "time", "compile_time",
                                                         "verification_time", "benchmark_time",
                                                         "framework_time", "strategy_time")}
                                  for r in results]})
        row.setdefault("device", env.get("device_name"))
        row.setdefault("kernel_tuner_version", env.get("kernel_tuner_version"))
    row["calls"] = calls
    if any(call["configurations"] != len(BLOCKS) for call in calls):
        row["note"] = "some configurations failed or were skipped: " + ", ".join(
            f"n={call['n']}: {call['configurations']}" for call in calls)
    # a candidate's cost: its share of both calls' wall time (each call compiles, verifies and times
    # all 10 configurations); Kernel Tuner's own split per configuration stays in "calls"
    total = sum(call["wall_s"] for call in calls)
    row["per_candidate_ms"] = {"median": 1000.0 * total / len(BLOCKS), "of": "wall time of both calls / 10"}
    accounted = []
    for block in BLOCKS:
        parts = [r for call in calls for r in call["results"] if r["block_size_x"] == block]
        accounted.append(sum(sum((p.get(k) or 0) for k in ("compile_time", "verification_time", "benchmark_time",
                                                          "framework_time", "strategy_time")) for p in parts))
    row["kernel_tuner_accounted_ms"] = {"median": statistics.median(accounted), "all": accounted}
    first_call = {r["block_size_x"]: r for r in calls[0]["results"]}
    timed = [r for r in first_call.values() if isinstance(r.get("time"), (int, float))]
    if timed:
        best = min(timed, key=lambda r: r["time"])
        row["best_us"], row["best_block"] = best["time"] * 1000.0, best["block_size_x"]
    return row


# ------------------------------------------------------------------------------ the 2-D stencil

STENCIL = ROOT / "bench" / "wild" / "blur3x3"
STENCIL_H = STENCIL_W = 4096
STENCIL_SETTINGS = 54
OWN_SPACE = re.compile(r"\btuned\.cu: (\d+) of (\d+) settings gated")


def own_space_done(line: str) -> bool:
    """Whether a progress line shows every one of the blur's own settings gated (not the bound
    pattern's, which the run searches too)."""
    m = OWN_SPACE.search(line)
    return bool(m) and m.group(1) == m.group(2)


def stencil_manifest(directory: Path) -> Path:
    """bench/wild/blur3x3's manifest with tuned.cu (its own tune lines) as the initial kernel and no
    templates entry, every path absolute."""
    data = json.loads((STENCIL / "blur3x3.json").read_text())
    data.pop("$schema", None)
    data.pop("launch", None)                   # tuned.cu's header carries its launch
    data["initial"] = str(STENCIL / "tuned.cu")
    data["reference"] = {"python": str(STENCIL / "reference.py") + ":reference"}
    data["cases"] = [c for c in data["cases"] if c["role"] != "performance"] + [
        {"name": "hd4k", "role": "performance", "vars": {"h": STENCIL_H, "w": STENCIL_W}}]
    path = directory / "blur3x3_tuned.json"
    path.write_text(json.dumps(data, indent=1))
    return path


def run_kforge_stencil(manifest: Path, cache_root: Path) -> dict:
    """kforge's model-free optimize over the kernel's own 54 settings: wall time and what it gated."""
    from kernel_forge.app.run_setup import start_run
    from kernel_forge.config.gate_settings import GateOptions
    from kernel_forge.config.loop_settings import LoopConfig
    from kernel_forge.config.proposer import ProposerConfig
    from kernel_forge.search.bound import is_bound_label

    os.environ["KFORGE_CACHE_DIR"] = str(cache_root / "kforge-stencil")
    loop = LoopConfig(archive="off", roof_stop=0, dispatch=False, profile=False, tune_time_limit_s=0,
                      time_limit_s=900)
    lines: list[str] = []
    own_done: list[float] = []                 # when the progress first showed all 54 own settings gated
    t0 = time.perf_counter()

    def progress(m: str) -> None:
        lines.append(m)
        print(m, flush=True)
        if own_space_done(m) and not own_done:
            own_done.append(time.perf_counter() - t0)

    opt = start_run(manifest, loop, GateOptions(), ProposerConfig(), runs_dir=cache_root / "runs",
                    progress=progress)
    summary = opt.run()
    run_wall = time.perf_counter() - t0
    # the run goes on to the stencil pattern bound to the blur's signature once its own settings are
    # spent; the figure of merit is the time to gate the kernel's own 54
    wall = own_done[0] if own_done else run_wall
    hist = json.loads((opt.run_dir.path / "history.json").read_text())["attempts"]
    own = [a for a in hist if a["proposer"] in ("initial", "tune") and a.get("evaluation")
           and not is_bound_label(a["label"])]
    gated = {tuple(sorted(a["defines"].items())) for a in own}
    passed = [a for a in own if a["status"] == "passed" and a.get("score_us")]
    best = min(passed, key=lambda a: a["score_us"]) if passed else None
    row = {"harness": "kforge optimize (model-free, own tune lines)", "wall_s": wall, "run_wall_s": run_wall,
           "wall_is": "own settings all gated" if own_done else "whole run", "settings_gated": len(gated),
           "iterations": summary.get("iterations"), "stop_reason": summary.get("stop_reason"),
           "run": str(opt.run_dir.path), "iteration_lines": [x for x in lines if "] iteration " in x]}
    if best:
        row["best_us"], row["best_setting"] = best["score_us"], best["defines"]
    return row


def run_kernel_tuner_stencil(lang: str, iterations: int) -> dict:
    """Kernel Tuner's brute force over the same 54 settings, answer checked."""
    import numpy as np
    from kernel_tuner import tune_kernel

    src = "\n".join(l for l in (STENCIL / "tuned.cu").read_text().splitlines() if "kforge:" not in l)
    rng = np.random.default_rng(0)
    h, w = STENCIL_H, STENCIL_W
    x = rng.standard_normal((h, w)).astype(np.float32)
    p = np.pad(x.astype(np.float64), 1, mode="edge")
    want = (sum(p[i:i + h, j:j + w] for i in range(3) for j in range(3)) / 9.0).astype(np.float32)
    y = np.zeros_like(x)
    params = {"BX": [8, 16, 32, 64, 128], "BY": [1, 2, 4, 8, 16], "RY": [1, 2, 4]}
    t0 = time.perf_counter()
    results, env = tune_kernel("blur3x3", src, (w, h), [x, y, np.int32(h), np.int32(w)], params,
                               grid_div_x=["BX"], grid_div_y=["BY", "RY"], block_size_names=["BX", "BY", "BZ"],
                               restrictions=["BX*BY>=64", "BX*BY<=1024"], answer=[None, want, None, None],
                               atol=1e-5, lang=lang, iterations=iterations, quiet=True, cache=None)
    wall = time.perf_counter() - t0
    timed = [r for r in results if isinstance(r.get("time"), (int, float))]
    row = {"harness": f"Kernel Tuner brute force ({lang})", "lang": lang, "wall_s": wall,
           "settings_gated": len(results), "device": env.get("device_name"),
           "kernel_tuner_version": env.get("kernel_tuner_version")}
    if timed:
        best = min(timed, key=lambda r: r["time"])
        row["best_us"], row["best_setting"] = best["time"] * 1000.0, {k: best[k] for k in params}
    return row


def stencil_table(rows: list[dict]) -> str:
    kt = next((r["wall_s"] for r in rows if r.get("lang") == "nvcuda" and "wall_s" in r), None)
    out = ["| harness | settings gated (of 54) | wall time (s) | this ÷ Kernel Tuner (CUDA) | best time found | at |",
           "| --- | --- | --- | --- | --- | --- |"]
    for r in rows:
        if "skipped" in r:
            out.append(f"| {r['harness']} | skipped: {r['skipped']} | | | | |")
            continue
        ratio = f"{r['wall_s'] / kt:.2f}" if kt else "-"
        best = f"{r['best_us']:.1f} µs" if r.get("best_us") else "-"
        out.append(f"| {r['harness']} | {r['settings_gated']} | {r['wall_s']:.1f} | {ratio} | {best} "
                   f"| {r.get('best_setting', '-')} |")
    return "\n".join(out + ["", "- goal (issue 29): kforge gates every valid setting in at most 2x Kernel Tuner's "
                              "brute-force wall time; Kernel Tuner's best: its mean of `iterations` launches, "
                              "no L2 flush; kforge's: the median, L2 flushed"])


def main_stencil(args, cache_root: Path) -> int:
    rows: list[dict] = []
    report = {"benchmark": {"case": "stencil", "kernel": "bench/wild/blur3x3/tuned.cu", "h": STENCIL_H,
                            "w": STENCIL_W, "settings": STENCIL_SETTINGS, "kt_iterations": args.kt_iterations},
              "python": platform.python_version(), "rows": rows}
    started = time.perf_counter()
    if args.only != "kforge":
        try:
            import kernel_tuner  # noqa: F401
        except ImportError as exc:
            rows.append({"harness": "Kernel Tuner brute force (nvcuda)",
                         "skipped": f"kernel_tuner is not installed ({exc})"})
        else:
            print("[vs-kt] Kernel Tuner brute force over the stencil ...", flush=True)
            try:
                rows.append(run_kernel_tuner_stencil("nvcuda", args.kt_iterations))
            except Exception as exc:  # noqa: BLE001 - one side failing must not lose the other
                rows.append({"harness": "Kernel Tuner brute force (nvcuda)",
                             "skipped": f"failed: {type(exc).__name__}: {exc}".splitlines()[0],
                             "traceback": traceback.format_exc()})
    if args.only != "kernel_tuner":
        print("[vs-kt] kforge optimize over the stencil's own tune lines ...", flush=True)
        rows.append(run_kforge_stencil(stencil_manifest(cache_root), cache_root))
    report["wall_s"] = time.perf_counter() - started
    report["table"] = stencil_table(rows)
    print(report["table"])
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(report, indent=1, default=str))
    print(f"[vs-kt] wrote {args.out} ({report['wall_s']:.0f} s)")
    return 0


def table(rows: list[dict]) -> str:
    kt = next((r["per_candidate_ms"]["median"] for r in rows
               if r.get("lang") == "nvcuda" and "per_candidate_ms" in r), None)
    out = ["| harness | ms per candidate (median of 10) | first | slowest | Kernel Tuner (CUDA) ÷ this "
           "| best time found | at block |",
           "| --- | --- | --- | --- | --- | --- | --- |"]
    for r in rows:
        if "skipped" in r:
            out.append(f"| {r['harness']} | skipped: {r['skipped']} | | | | | |")
            continue
        pc = r["per_candidate_ms"]
        first = f"{pc['first']:.0f}" if "first" in pc else "-"
        slowest = f"{pc['max']:.0f}" if "max" in pc else "-"
        ratio = f"{kt / pc['median']:.1f}×" if kt and pc["median"] > 0 else "-"
        best = f"{r['best_us']:.1f} µs" if r.get("best_us") else "-"
        out.append(f"| {r['harness']} | {pc['median']:.0f} | {first} | {slowest} | {ratio} | {best} "
                   f"| {r.get('best_block', '-')} |")
    notes = ["- Kernel Tuner rows: the wall time of both tune_kernel calls / 10 (no first/slowest); best time: "
             "its mean of `iterations` launches without an L2 flush; kforge: the n16M median, L2 flushed"]
    notes += [f"- {r['harness']}: {r['note']}" for r in rows if r.get("note")]
    notes += [f"- {r['harness']}: {f}" for r in rows for f in r.get("failures", [])]
    return "\n".join(out + ([""] + notes if notes else []))


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", type=Path, default=Path("vs_kernel_tuner.json"), help="JSON results file")
    ap.add_argument("--kt-iterations", type=int, default=7,
                    help="Kernel Tuner's timed launches per configuration (its default: 7)")
    ap.add_argument("--only", choices=("kforge", "kernel_tuner"), help="run one side only")
    ap.add_argument("--case", choices=("vector_add", "stencil"), default="vector_add",
                    help="vector_add: 10 block sizes, per candidate; stencil: a 3x3 blur's own 54 settings, "
                         "the wall time to gate them all (issue 29)")
    args = ap.parse_args(argv)

    cache_root = Path(tempfile.mkdtemp(prefix="kforge-vs-kt-"))
    # CuPy's own kernel cache: fresh too (it is read when cupy first compiles, in this process)
    os.environ["CUPY_CACHE_DIR"] = str(cache_root / "cupy")
    if args.case == "stencil":
        return main_stencil(args, cache_root)
    rows: list[dict] = []
    report = {"benchmark": {"task": "vector_add", "n_perf": N_PERF, "n_correctness": N_ODD,
                            "block_sizes": list(BLOCKS), "kt_iterations": args.kt_iterations},
              "python": platform.python_version(), "rows": rows}
    started = time.perf_counter()
    if args.only != "kernel_tuner":
        manifest = two_case_manifest(cache_root)
        for quick in (False, True):
            for ahead in (False, True):
                print(f"[vs-kt] kforge {'--quick' if quick else 'full gate'}{' compiling ahead' if ahead else ''} ...",
                      flush=True)
                rows.append(run_kforge(manifest, quick, cache_root, ahead))
    if args.only != "kforge":
        try:
            import kernel_tuner
            report["kernel_tuner"] = getattr(kernel_tuner, "__version__", None)
        except ImportError as exc:
            for lang in ("nvcuda", "cupy"):
                rows.append({"harness": f"Kernel Tuner ({lang})",
                             "skipped": f"kernel_tuner is not installed ({exc}); pip install kernel_tuner "
                                        "python-constraint2 xmltodict (bench/fetch_device_wheels.sh carries them)"})
        else:
            for lang in ("nvcuda", "cupy"):
                print(f"[vs-kt] Kernel Tuner {lang} ...", flush=True)
                try:
                    rows.append(run_kernel_tuner(lang, args.kt_iterations))
                except Exception as exc:  # noqa: BLE001 - one backend failing must not lose the others
                    rows.append({"harness": f"Kernel Tuner ({lang})",
                                 "skipped": f"failed: {type(exc).__name__}: {exc}".splitlines()[0],
                                 "traceback": traceback.format_exc()})
    report["wall_s"] = time.perf_counter() - started
    text = table(rows)
    report["table"] = text
    print(text)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(report, indent=1, default=str))
    print(f"[vs-kt] wrote {args.out} ({report['wall_s']:.0f} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
