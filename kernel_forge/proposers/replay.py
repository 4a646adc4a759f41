"""Replay: proposals from a folder of ``.cu`` files or a JSONL of recorded model answers.

A folder is replayed in name order, one file per proposal.  A JSONL file holds one JSON object
per line, either proposal arguments (``{"source": ..., "rationale": ..., "launch": ...,
"tunables": ...}``) or a recorded ``model-NNN.json`` body whose response carries them.  Replay is
how a reviewer re-runs a recorded optimisation without a model, and how tests drive the loop.
"""
from __future__ import annotations

import json
from pathlib import Path

from kernel_forge.common.errors import InputError
from kernel_forge.common.reads import MAX_KERNEL, read_jsonl, read_text_file
from kernel_forge.proposers.base import Exhausted, Proposal, ProposalRequest, ProposalResult
from kernel_forge.proposers.proposal_schema import ProposalSchemaError, check_proposal, to_proposal


def _args_from_record(obj: dict) -> dict | None:
    """Proposal arguments from a recorded model call, if any: a submit_kernel tool call (Anthropic
    tool_use, OpenAI Chat tool_calls or Responses function_call) or an answer in the answer format
    (the kernel in a fenced block; edits need their parent, which a record does not hold)."""
    from kernel_forge.proposers.answer import read_answer

    if "source" in obj:
        return obj
    resp = obj.get("response") or {}
    texts: list[str] = []
    for block in resp.get("content", []) or []:          # Anthropic
        if isinstance(block, dict) and block.get("type") == "tool_use":
            return block.get("input")
        if isinstance(block, dict) and block.get("type") == "text":
            texts.append(block.get("text") or "")
    for choice in resp.get("choices", []) or []:          # OpenAI Chat Completions
        message = choice.get("message") or {}
        for call in message.get("tool_calls") or []:
            try:
                return json.loads(call["function"]["arguments"])
            except (KeyError, TypeError, json.JSONDecodeError):
                return None
        texts.append(message.get("content") or "")
    for item in resp.get("output", []) or []:             # OpenAI Responses
        if isinstance(item, dict) and item.get("type") == "function_call":
            try:
                return json.loads(item.get("arguments") or "")
            except (TypeError, json.JSONDecodeError):
                return None
        if isinstance(item, dict) and item.get("type") == "message":
            texts += [c.get("text") or "" for c in item.get("content") or [] if c.get("type") == "output_text"]
    text = "\n".join(t for t in texts if t)
    if text:
        answer = read_answer(text)
        return answer.args
    return None


def load_proposals(path: str | Path) -> list[Proposal]:
    p = Path(path)
    out: list[Proposal] = []
    if p.is_dir():
        files = sorted(p.glob("*.cu"))
        if not files:
            raise InputError(f"{p}: no .cu files to replay")
        for f in files:
            out.append(Proposal(source=read_text_file(f, "replayed kernel", limit=MAX_KERNEL),
                                rationale=f"replay of {f.name}", proposer="replay", label=f.name))
        return out
    if not p.is_file():
        raise InputError(f"{p}: no such file or folder to replay")
    for lineno, obj in read_jsonl(p, "replay file"):
        args = _args_from_record(obj) if isinstance(obj, dict) else None
        problem = check_proposal(args) if args is not None else "no proposal in this record"
        if problem:
            raise InputError(f"{p}:{lineno}: {problem}")
        try:
            out.append(to_proposal(args, proposer="replay", label=f"{p.name}:{lineno}"))
        except ProposalSchemaError as exc:
            raise InputError(f"{p}:{lineno}: {exc}") from None
    if not out:
        raise InputError(f"{p}: no proposals in it")
    return out


class ReplayProposer:
    """Hands out recorded proposals in order; ``skip`` resumes after those already recorded."""

    def __init__(self, path: str | Path, skip: int = 0):
        self.path = Path(path)
        self.proposals = load_proposals(path)
        self.position = skip
        self.name = "replay"
        self.needs_prompt = True     # ignored, but built: the prompts a model would have had

    def propose(self, request: ProposalRequest) -> ProposalResult:
        if self.position >= len(self.proposals):
            raise Exhausted(f"all {len(self.proposals)} recorded proposals from {self.path} were replayed")
        batch = self.proposals[self.position:self.position + max(1, request.n)]
        self.position += len(batch)
        return ProposalResult(proposals=list(batch))
