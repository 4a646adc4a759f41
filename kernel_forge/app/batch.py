"""``kforge batch``: one ``optimize`` per task, one after another here or as Ray tasks.

A batch lives in ``runs/batch-NNN/``: one folder per task (``TASK/run-NNN/``, an ordinary run
folder) and ``batch.json`` (what was asked, and each task's outcome as it finishes).  With Ray,
every task is a Ray task asking for one GPU (``num_gpus=1``): Ray places them on the GPUs of one
host or a cluster, sets ``CUDA_VISIBLE_DEVICES`` for each, and retries a task whose worker died
(``max_retries``).  A retried task — or ``kforge batch --resume runs/batch-NNN`` — finds its run
folder and resumes it (``kforge optimize --resume``), so a task killed mid-run loses nothing that
was recorded.  Ray is an optional extra (``pip install 'cuda-kernel-forge[ray]'``), imported only
here, only with ``--ray``; no scheduling of our own is layered on top of it.
"""
from __future__ import annotations

import dataclasses
import importlib
import json
import re
import time
from pathlib import Path

from kernel_forge.common.errors import EnvironmentProblem, InputError
from kernel_forge.common.json_path import json_path
from kernel_forge.config.build import InFile, Where
from kernel_forge.evidence.run_dir import RunDir, atomic_write, numbered_dir
from kernel_forge.common.writes import make_dirs

FINISHED = {"max_iterations", "budget_usd", "max_tokens", "time_limit", "patience", "target_speedup",
            "unreachable"}


@dataclasses.dataclass
class BatchTask:
    name: str          #: the task's name (its folder in the batch)
    manifest: str      #: absolute path of its manifest
    folder: str        #: runs/batch-NNN/NAME


def new_batch_dir(runs_dir: str | Path) -> Path:
    return numbered_dir(runs_dir, "batch")


def plan(manifests: list[str], batch_dir: Path) -> list[BatchTask]:
    """One task per manifest; names must be unique (they are folder names)."""
    from kernel_forge.model.task import load_task

    tasks, seen = [], {}
    for m in manifests:
        task = load_task(m)
        if task.name in seen:
            raise InputError(f"{m}: task {task.name!r} is also {seen[task.name]}; a batch runs each task once")
        seen[task.name] = m
        tasks.append(BatchTask(task.name, str(Path(m).resolve()), str(batch_dir / task.name)))
    return tasks


def _factory(spec: str | None):
    """``"module:function"`` -> the callable (task, GateOptions) -> gate; None -> real gates."""
    if not spec:
        return None
    mod, _, fn = spec.partition(":")
    return getattr(importlib.import_module(mod), fn)


def build_options(loop: dict, gate: dict, proposer: dict, where: Where):
    """(LoopConfig, GateOptions, ProposerConfig) of every run of the batch, through the one
    validator (exit 2 before anything runs)."""
    from kernel_forge.config.build import build
    from kernel_forge.config.gate_settings import GateOptions
    from kernel_forge.config.loop_settings import LoopConfig
    from kernel_forge.config.proposer import ProposerConfig

    return build(LoopConfig, loop, where), build(GateOptions, gate, where), build(ProposerConfig, proposer, where)


def check_options(loop: dict, gate: dict, proposer: dict, where: Where | None = None) -> None:
    """The batch's options, as every run of it will take them (default: named ``batch options:
    $.loop.NAME``, the place they take in batch.json)."""
    from kernel_forge.app.option_checks import check_settings

    for obj in build_options(loop, gate, proposer, where or InFile("batch options")):
        check_settings(obj)


def latest_run(folder: str | Path) -> Path | None:
    runs = sorted(Path(folder).glob("run-*/run.json"))
    return runs[-1].parent if runs else None


def run_task(task: dict, loop: dict, gate: dict, proposer: dict, gate_factory: str | None = None) -> dict:
    """Optimise one task into its batch folder, resuming the run already there (a retry)."""
    from kernel_forge.app.run_setup import resume_run, start_run
    from kernel_forge.model.task import load_task

    t = BatchTask(**task)
    factory = _factory(gate_factory)
    loop_cfg, gate_opts, prop = build_options(loop, gate, proposer, InFile(str(Path(t.folder).parent / "batch.json")))
    t0 = time.time()
    existing = latest_run(t.folder)
    own_gate = factory(load_task(t.manifest), gate_opts) if factory else None
    if existing is not None:
        opt = resume_run(existing, overrides={}, gate=own_gate)
        resumed = True
    else:
        make_dirs(t.folder)
        opt = start_run(t.manifest, loop_cfg, gate_opts, prop, runs_dir=t.folder, gate=own_gate)
        resumed = False
    try:
        summary = opt.run()
    finally:
        opt.gate.close()
    best = summary.get("best") or {}
    return {"task": t.name, "run": str(opt.run_dir.path), "resumed": resumed, "stop_reason": summary["stop_reason"],
            "best": best.get("id"), "score_us": best.get("score_us"),
            "speedup_vs_initial": best.get("speedup_vs_initial"), "seconds": round(time.time() - t0, 2)}


def _write(batch_dir: Path, record: dict) -> None:
    atomic_write(batch_dir / "batch.json", (json.dumps(record, indent=2, default=str) + "\n").encode())


def _done(result: dict | None) -> bool:
    """A task whose run ended by a stop rule (not an error, a kill or Ctrl-C) is not run again."""
    reason = (result or {}).get("stop_reason") or ""
    return reason in FINISHED or reason.startswith("proposer_exhausted")


def run_batch(manifests: list[str], *, runs_dir: str | Path = "runs", loop: dict | None = None,
              gate: dict | None = None, proposer: dict | None = None, ray_address: str | None = None,
              retries: int = 2, resume: str | Path | None = None, gate_factory: str | None = None,
              ray_init: dict | None = None, progress=lambda m: None) -> dict:
    """Run (or resume) a batch; returns the batch record also written to ``batch.json``."""
    if resume is None:
        if not manifests:
            raise InputError("give at least one manifest")
        plan(manifests, Path(runs_dir) / "batch-new")      # bad input first (exit 2), nothing written
        check_options(loop or {}, gate or {}, proposer or {})
    else:
        record = read_record(resume)
        tasks = [BatchTask(**t) for t in record["tasks"]]
        check_options(record.get("loop", {}), record.get("gate", {}), record.get("proposer", {}),
                      InFile(str(Path(resume) / "batch.json")))
    if ray_address is not None:
        check_ray_address(ray_address)
    if ray_address is None and gate_factory is None:
        from kernel_forge.gate.gate import probe_gpu
        probe_gpu()          # then the GPU (exit 3), still before anything is written
    ray = _connect_ray(ray_address, ray_init) if ray_address is not None else None   # (exit 3) nothing written yet
    if resume is not None:
        batch_dir = Path(resume)
    else:
        batch_dir = new_batch_dir(runs_dir)
        tasks = plan(manifests, batch_dir)
        record = {"batch": batch_dir.name, "created": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
                  "ray": ray_address, "loop": loop or {}, "gate": gate or {}, "proposer": proposer or {},
                  "tasks": [dataclasses.asdict(t) for t in tasks], "results": {}}
    record.setdefault("results", {})
    _write(batch_dir, record)
    todo = [t for t in tasks if not _done(record["results"].get(t.name))]
    args = (record["loop"], record["gate"], record["proposer"], gate_factory)
    t0 = time.time()
    if ray_address is None:
        for t in todo:
            progress(f"[kforge batch] {t.name}: optimising ({t.folder})")
            try:
                record["results"][t.name] = run_task(dataclasses.asdict(t), *args)
            except Exception as exc:  # noqa: BLE001 - one task's failure is that task's result
                record["results"][t.name] = {"task": t.name, "stop_reason": "error", "error": f"{type(exc).__name__}: {exc}"}
            _write(batch_dir, record)
    else:
        remote = ray.remote(num_gpus=1, max_retries=retries, retry_exceptions=False)(run_task)
        refs = {remote.remote(dataclasses.asdict(t), *args): t for t in todo}
        progress(f"[kforge batch] {len(refs)} task(s) submitted to Ray ({ray_address})")
        pending = list(refs)
        while pending:
            ready, pending = ray.wait(pending, num_returns=1)
            t = refs[ready[0]]
            try:
                record["results"][t.name] = ray.get(ready[0])
            except Exception as exc:  # noqa: BLE001 - Ray's errors: the task failed for good
                record["results"][t.name] = {"task": t.name, "stop_reason": "error",
                                             "error": f"{type(exc).__name__}: {str(exc)[:2000]}"}
            progress(f"[kforge batch] {t.name}: {record['results'][t.name].get('stop_reason')}")
            _write(batch_dir, record)
    record["seconds"] = round(record.get("seconds", 0.0) + time.time() - t0, 2)
    record["finished"] = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    _write(batch_dir, record)
    _plot(batch_dir, record)
    return record


#: a Ray cluster address: auto, ray://HOST:PORT (Ray Client) or HOST:PORT (the cluster's GCS)
_RAY_ADDRESS = re.compile(r"^(auto|(ray://)?(\[[0-9A-Fa-f:.]+\]|[A-Za-z0-9]([A-Za-z0-9.-]*[A-Za-z0-9])?):\d{1,5})$")


def check_ray_address(address: str) -> None:
    """``--ray ADDRESS`` before anything starts: ``auto``, ``ray://HOST:PORT`` or ``HOST:PORT``
    (alone, ``--ray`` is a local Ray)."""
    if address in ("local", "auto-local"):
        return
    m = _RAY_ADDRESS.match(address or "")
    port = int(address.rsplit(":", 1)[1]) if m and address != "auto" else 1
    if m is None or not 0 < port < 65536:
        raise InputError(f"--ray {address!r}: not a Ray address",
                         hint="give auto, HOST:PORT (e.g. 10.0.0.5:6379) or ray://HOST:10001, or --ray alone for a local Ray")


def _connect_ray(address: str, ray_init: dict | None):
    """Ray, started locally or connected to ``address`` (an :class:`EnvironmentProblem` when it
    cannot be: exit 3, before the batch folder exists)."""
    ray = _import_ray()
    init = dict(ray_init or {})
    if address not in ("local", "auto-local"):
        init.setdefault("address", address)
    init.setdefault("include_dashboard", False)
    init.setdefault("ignore_reinit_error", True)
    try:
        ray.init(**init)
    except KeyboardInterrupt:
        raise
    except Exception as exc:  # noqa: BLE001 - Ray's own errors: whatever it says, it could not start
        raise EnvironmentProblem(f"--ray {address}: Ray could not start or connect: {type(exc).__name__}: "
                                 f"{str(exc).splitlines()[0] if str(exc) else ''}",
                                 hint="is the cluster up at that address (ray status)?") from None
    return ray


def read_record(folder: str | Path) -> dict:
    """``batch.json`` of a batch folder (``--resume``), checked before anything runs."""
    from kernel_forge.common.reads import read_json_file

    p = Path(folder)
    if not (p / "batch.json").is_file():
        raise InputError(f"{p}: not a kforge batch folder (no batch.json)", hint="pass a folder like runs/batch-003")
    record = read_json_file(p / "batch.json", "batch record")
    if not isinstance(record, dict) or not isinstance(record.get("tasks"), list):
        raise InputError(f"{p / 'batch.json'}: $.tasks: expected the list of the batch's tasks")
    keys = {f.name for f in dataclasses.fields(BatchTask)}
    for i, t in enumerate(record["tasks"]):
        if not isinstance(t, dict) or set(t) != keys or not all(isinstance(v, str) for v in t.values()):
            raise InputError(f"{p / 'batch.json'}: {json_path('tasks', i)}: expected {{{', '.join(sorted(keys))}}} as text")
    for key in ("loop", "gate", "proposer", "results"):
        if not isinstance(record.get(key, {}), dict):
            raise InputError(f"{p / 'batch.json'}: {json_path(key)}: expected an object")
    return record


def _import_ray():
    try:
        import ray
    except ImportError:
        raise EnvironmentProblem("--ray needs Ray, which is not installed",
                                 hint="pip install 'cuda-kernel-forge[ray]'") from None
    return ray


def _plot(batch_dir: Path, record: dict) -> None:
    """``speedups.png``: each task's best against its initial kernel."""
    rows = [(k, v.get("speedup_vs_initial")) for k, v in sorted(record["results"].items()) if v.get("speedup_vs_initial")]
    if not rows:
        return
    try:
        import io

        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return
    fig, ax = plt.subplots(figsize=(max(4, 0.8 * len(rows) + 2), 3.5))
    ax.bar([r[0] for r in rows], [r[1] for r in rows], color="C0")
    ax.axhline(1.0, color="gray", lw=1, ls="--")
    ax.set_ylabel("best / initial kernel (x, log)")
    ax.set_yscale("log")
    ax.set_title(f"{record['batch']}: speedup per task")
    plt.setp(ax.get_xticklabels(), rotation=30, ha="right")
    fig.tight_layout()
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=110)
    plt.close(fig)
    RunDir(batch_dir).write_bytes("speedups.png", buf.getvalue())


def table(record: dict) -> str:
    lines = ["| task | stop | best | x initial | s | run |", "| --- | --- | --- | --- | --- | --- |"]
    for name, r in sorted(record["results"].items()):
        sp = r.get("speedup_vs_initial")
        lines.append(f"| {name} | {r.get('stop_reason')} | {r.get('best') or '-'} | "
                     f"{'-' if not sp else format(sp, '.2f')} | {r.get('seconds', '-')} | {r.get('run', r.get('error', ''))} |")
    return "\n".join(lines)
