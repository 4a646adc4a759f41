"""A gate that answers from recorded verdicts instead of a GPU.

It implements :class:`~kernel_forge.gate.gatelike.GateLike` from the ``history.json`` of an earlier
run (or any mapping of source hash → Evaluation JSON): verdicts, holdout results, baselines, the
device and its calibration, and the profiles the run wrote (``profiles/aNNNN.json``), so the loop,
the prompt and the evidence can be replayed and tested on a machine with no GPU.  A candidate it
has no verdict for is an error; one it has no profile for gets ``{"available": False, ...}``.
"""
from __future__ import annotations

from pathlib import Path

from kernel_forge.model.candidate import Candidate
from kernel_forge.common.errors import InputError
from kernel_forge.common.reads import read_json_file
from kernel_forge.gate.gatelike import InTurn
from kernel_forge.model.verdict import Evaluation

NO_PROFILE = "no profile of this kernel was recorded (a recorded gate has no GPU to profile on)"


def _object(value, path: Path) -> dict:
    if not isinstance(value, dict):
        raise InputError(f"{path}: $: expected an object, got {type(value).__name__}")
    return value


class RecordedGate(InTurn):
    def __init__(self, verdicts: dict[str, dict], *, device: dict | None = None, calibration: dict | None = None,
                 baselines: dict[str, dict] | None = None, holdout: dict[str, dict] | None = None,
                 profiles: dict[str, dict] | None = None):
        self.verdicts = verdicts
        self.device = device
        self.calibration = calibration
        self.baselines = baselines or {}
        self.holdout = holdout or {}
        self.profiles = profiles or {}          # source hash -> GateLike.profile() answer
        self.calls: list[tuple[str, tuple]] = []

    @classmethod
    def from_run(cls, run_path: str | Path) -> "RecordedGate":
        from kernel_forge.records.history_file import recorded_history

        p = Path(run_path)
        # damaged or hand-edited evidence is an InputError naming the file, never a crash (the
        # commands check the history against its schema first: evidence.history_log.read_history).
        # A run killed before it finished has its history in the attempt log only.
        hist = recorded_history(p)
        env = _object(read_json_file(p / "env.json", "environment record"), p / "env.json") \
            if (p / "env.json").is_file() else {}
        if not isinstance(hist.get("attempts"), list) or not all(isinstance(a, dict) for a in hist["attempts"]):
            raise InputError(f"{p / 'history.json'}: $.attempts: expected a list of attempts")
        verdicts, holdout, profiles = {}, {}, {}
        for a in hist["attempts"]:
            if a.get("evaluation") and a.get("sha256"):
                verdicts[a["sha256"]] = a["evaluation"]
            if a.get("holdout") and a.get("sha256"):
                holdout[a["sha256"]] = a["holdout"]
            if a.get("profile") and a.get("sha256") and (p / a["profile"]).is_file():
                recorded = _object(read_json_file(p / a["profile"], "recorded profile"), p / a["profile"])
                profiles[a["sha256"]] = {k: v for k, v in recorded.items() if k not in ("attempt", "wall_seconds")}
        return cls(verdicts, device=env.get("device"), calibration=env.get("calibration"),
                   baselines=hist.get("baselines", {}), holdout=holdout, profiles=profiles)

    def _lookup(self, candidate: Candidate) -> Evaluation:
        d = self.verdicts.get(candidate.sha256)
        if d is None:
            raise InputError(f"no recorded verdict for {candidate.name} (sha256 {candidate.sha256[:12]})")
        ev = Evaluation.from_json(d)
        ev.label = candidate.name
        return ev

    def evaluate(self, candidate: Candidate, *, roles: tuple[str, ...] = ("correctness", "performance"),
                 kind: str = "candidate") -> Evaluation:
        self.calls.append(("evaluate", tuple(roles)))
        if tuple(roles) == ("holdout",):
            h = self.holdout.get(candidate.sha256, {"passed": True, "reason": "passed"})
            return Evaluation(label=candidate.name, passed=h.get("passed", True), reason=h.get("reason", "passed"),
                              message=h.get("message", ""))
        ev = self._lookup(candidate)
        ev.cases = [c for c in ev.cases if c.role in roles]
        return ev

    def retime(self, candidates: list[Candidate], rounds: int = 2) -> list[Evaluation]:
        self.calls.append(("retime", tuple(c.name for c in candidates)))
        out = []
        for c in candidates:
            ev = self._lookup(c)
            ev.cases = [x for x in ev.cases if x.role == "performance"]
            out.append(ev)
        return out

    def evaluate_baseline(self, name: str) -> Evaluation:
        self.calls.append(("baseline", (name,)))
        if name in self.baselines:
            return Evaluation.from_json(self.baselines[name])
        return Evaluation(label=f"baseline:{name}", passed=False, reason="harness_error",
                          message="no recorded baseline", kind="baseline")

    def device_info(self) -> dict | None:
        return self.device

    def calibrate(self) -> dict | None:
        return self.calibration

    def precompile(self, candidates: list[Candidate]) -> None:
        """Nothing to compile: every verdict is recorded."""
        self.calls.append(("precompile", tuple(c.name for c in candidates)))

    def profile(self, candidate: Candidate, cases: list[str]) -> dict:
        """The recorded profile of this kernel (its cases limited to ``cases``), or why there is none."""
        self.calls.append(("profile", (candidate.name, *cases)))
        rec = self.profiles.get(candidate.sha256)
        if rec is None:
            return {"available": False, "reason": NO_PROFILE, "tool": "", "seconds": 0.0, "cases": {}}
        return {**rec, "cases": {k: v for k, v in (rec.get("cases") or {}).items() if k in cases}}

    def close(self) -> None:
        pass
