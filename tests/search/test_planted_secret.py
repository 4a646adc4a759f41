"""Issue #35, done when: "A planted secret in the working folder never appears in history.json, a
prompt, or a request body, across a scripted run whose model proposes every leak above."

A real optimisation run on the CPU: the model proposer talks real HTTP to the loopback Anthropic
server, whose scripted model proposes one leaking kernel per turn (each spelling of S1/S2).  The
gate compiles every proposal with the real preparation (static rules, signature, NVRTC for
sm_90, the include allow-list) and only the cases of a kernel that compiles are scripted (no GPU
here).  A refused include comes back as a compile error naming the line and the file, so the
loop's fix turns send that message to the model: the secret must still be nowhere.
"""
from __future__ import annotations

import json
from pathlib import Path

import pytest

pytest.importorskip("cuda.bindings.nvrtc", reason="cuda-bindings (the [cu13]/[cu12] extra) not installed")

from kernel_forge.common.errors import CandidateError, CompileError, SignatureError  # noqa: E402
from kernel_forge.config.gate_settings import GateOptions  # noqa: E402
from kernel_forge.gate.gate import Gate  # noqa: E402
from kernel_forge.model.task import load_task  # noqa: E402
from kernel_forge.model.verdict import Evaluation  # noqa: E402

from tests.support.fakes import ScriptedGate, vector_add  # noqa: E402
from tests.support.loop_runs import MANIFEST, model_proposer, new_run, read  # noqa: E402
from tests.support.loopback import tool  # noqa: E402

SECRET = "TOPSECRET_planted_7d1e"


class CompilingGate(ScriptedGate):
    """The scripted gate, but every candidate is first prepared by the real gate (static rules,
    signature, NVRTC): what fails there is the real gate's early verdict, with its message and log."""

    def __init__(self, task):
        super().__init__(task)
        self.real = Gate(task, GateOptions(arch="sm_90"))
        self.early: list[Evaluation] = []

    def _evaluate(self, cand, roles, *, kind="candidate", only=None):
        if kind != "baseline":
            ev = Evaluation(label=cand.name, passed=False, defines=cand.compile_defines(), sha256=cand.sha256,
                            kind=kind)
            try:
                self.real.prepare(cand)
            except CompileError as exc:            # as Gate.evaluate records it
                ev.reason, ev.message = "compile_error", str(exc)
                ev.compile = {"log": exc.log, "lines": list(exc.lines)}
            except SignatureError as exc:
                ev.reason, ev.message = "signature_mismatch", str(exc)
            except CandidateError as exc:
                ev.reason, ev.message = "static_rule", str(exc)
            else:
                return super()._evaluate(cand, roles, kind=kind, only=only)
            self.early.append(ev)
            return ev
        return super()._evaluate(cand, roles, kind=kind, only=only)

    def close(self) -> None:
        self.real.close()
        super().close()


@pytest.fixture
def planted(tmp_path, monkeypatch):
    """A working folder holding the secret three ways: .env, secrets/token.txt, and a header-looking
    symlink to the token."""
    work = tmp_path / "work"
    (work / "secrets").mkdir(parents=True)
    (work / ".env").write_text(f"{SECRET}\n")
    (work / "secrets" / "token.txt").write_text(f"{SECRET}\n")
    (work / "config.cuh").symlink_to(work / "secrets" / "token.txt")
    monkeypatch.chdir(work)
    monkeypatch.setenv("KFORGE_CACHE_DIR", str(tmp_path / "cubin-cache"))
    return work


def leaks(work: Path) -> dict[str, str]:
    """Each way issue #35 found (and a few more) for a kernel to read a file, inside an initialiser
    whose errors would echo the file's words."""
    token, env = work / "secrets" / "token.txt", work / ".env"
    wrap = "__device__ int leak[] = {{\n{}\n}};\n".format
    return {
        "digraph": wrap(f'%:include "{token}"'),
        "dot_env": wrap('#include ".env"'),
        "symlink": wrap('#include "config.cuh"'),
        "macro": f'#define WHERE "{env}"\n' + wrap("#include WHERE"),
        "continuation": wrap(f'#inc\\\nlude "{env}"'),
        "comment_split": wrap(f'%:/*\n*/include "{token}"'),
        "include_next": wrap('#include_next ".env"'),
        "angle_climb": wrap("#include <" + "../" * 30 + str(token).lstrip("/") + ">"),
        "toolkit_macro": f'#define THRUST_MR_STD_MR_HEADER "{token}"\n#include <thrust/mr/memory_resource.h>\n',
    }


def test_a_planted_secret_never_reaches_history_a_prompt_or_a_request_body(tmp_path, planted, loopback,
                                                                            clean_env):
    kernels = leaks(planted)
    loopback.script("anthropic", *[tool({"source": src + vector_add(), "rationale": f"try {name}"})
                                   for name, src in kernels.items()],
                    *[tool({"source": vector_add("pass 400"), "rationale": "plain"}) for _ in range(4)])
    gate = CompilingGate(load_task(MANIFEST))
    opt = new_run(tmp_path, gate=gate, proposer=model_proposer("anthropic", loopback),
                  max_iterations=len(kernels))
    opt.run()

    # every leak was proposed, gated and refused before anything ran
    hist = read(opt.run_dir, "history.json")
    refused = [a for a in hist["attempts"] if a["reason"] in ("compile_error", "static_rule", "duplicate")]
    assert len(refused) == len(kernels) and not [a for a in hist["attempts"] if a["reason"] == "passed"][1:]
    assert len(gate.early) >= len(kernels) - 1              # one spelling normalises to an earlier one
    messages = " ".join(ev.message for ev in gate.early)
    for named in (str(planted / "secrets" / "token.txt"), str(planted / ".env"), "config.cuh",
                  "macro", "THRUST_MR_STD_MR_HEADER"):
        assert named in messages                           # the refusal names the file (or why), not its words

    # the secret is nowhere: the run folder, the compile cache, any request the provider received
    assert len(loopback.requests("anthropic")) >= len(kernels)
    for folder in (opt.run_dir.path, tmp_path / "cubin-cache"):
        for f in folder.rglob("*"):
            if f.is_file():
                assert SECRET.encode() not in f.read_bytes(), f"the planted secret is in {f}"
    for r in loopback.requests("anthropic"):
        body = r.body if isinstance(r.body, str) else json.dumps(r.body)
        assert SECRET not in body, "the planted secret was sent to the model provider"
    fix_turns = [r for r in loopback.requests("anthropic") if "could not compile" in json.dumps(r.body)
                 or "outside the allowed headers" in json.dumps(r.body)]
    assert fix_turns                                        # refusals did reach the model, as messages
