"""Ask a model for text: one conversation in, the answer's text out, with the :class:`ModelCall`
records of the exchange.  ``kforge init --describe`` asks through this door only.

* :func:`ask_text` is the one function that touches the provider layer
  (:mod:`kernel_forge.proposers`), through :meth:`ModelProposer.ask`: the request is built from
  the model's entry in the capability table as a proposal's is (thinking on where the model has
  it, its effort, an output limit with room to think, a temperature only where it is taken), no
  tool is offered, the budget is checked before every call against its worst case, an answer cut
  off at the output limit is asked once more with twice the limit (up to the cap), and each call's
  cost is the provider's usage at the table's prices.
* :class:`ProviderText` asks ``anthropic:MODEL`` / ``openai:MODEL`` (any OpenAI-compatible
  server with a base URL); :class:`ReplayText` answers from recorded exchanges (a folder of the
  ``model-NNN.json`` records an earlier ``init --describe`` wrote), in order per role.
"""
from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Protocol

from kernel_forge.common.errors import EnvironmentProblem, InputError
from kernel_forge.proposers.base import ModelCall


@dataclass
class Answer:
    text: str
    calls: list[ModelCall] = field(default_factory=list)   #: every exchange it took (a retry of a cut-off answer too)
    replayed_from: str | None = None                        #: the record file, for a replayed answer


class TextModel(Protocol):
    name: str

    def ask(self, role: str, system: str, messages: list[dict]) -> Answer:
        """The answer to ``messages`` ([{"role": "user" | "assistant", "content": text}, ...])."""
        ...


def response_text(response: dict | None) -> str:
    """The text of a recorded Anthropic Messages, OpenAI Responses or Chat Completions response body."""
    if not isinstance(response, dict):
        return ""
    if isinstance(response.get("content"), list):                     # Anthropic
        return "\n".join(b.get("text", "") for b in response["content"]
                         if isinstance(b, dict) and b.get("type") == "text").strip()
    if isinstance(response.get("output"), list):                      # OpenAI Responses
        return "\n".join(p.get("text", "") for item in response["output"]
                         if isinstance(item, dict) and item.get("type") == "message"
                         for p in item.get("content") or [] if isinstance(p, dict)
                         and p.get("type") == "output_text").strip()
    for choice in response.get("choices") or []:                       # OpenAI Chat Completions
        content = (choice.get("message") or {}).get("content")
        if isinstance(content, list):
            content = "\n".join(p.get("text", "") for p in content if isinstance(p, dict))
        if content:
            return str(content).strip()
    return ""


def ask_text(proposer, system: str, messages: list[dict], role: str = "text") -> Answer:
    """Send one conversation through a model proposer (:func:`make_model_proposer`) and return the
    text of its answer.  No answer: a budget refusal or an answer cut off at the cap is an
    :class:`InputError` with the figures, a failed exchange an :class:`EnvironmentProblem`
    naming the endpoint."""
    reply = proposer.ask(system, messages, what=f"the {role} answer")
    if reply.error is None:
        return Answer(reply.text, reply.calls)
    if reply.budget_exhausted:
        raise InputError(reply.error, hint="raise --budget-usd or lower --max-output-tokens; the answers so far "
                                           "are kept in the exchange folder")
    if reply.truncated:
        raise InputError(reply.error, hint="raise --max-output-tokens, or describe a smaller task")
    where = proposer.base_url or f"the {proposer.provider} API"
    raise EnvironmentProblem(f"{reply.error} ({where})",
                             hint="check the key (ANTHROPIC_API_KEY / OPENAI_API_KEY), --base-url and the "
                                  "model name; nothing was written")


class ProviderText:
    """A model behind the provider layer (its key from ANTHROPIC_API_KEY / OPENAI_API_KEY)."""

    def __init__(self, spec: str, *, base_url: str | None = None, **options):
        from kernel_forge.proposers.models import make_model_proposer

        self.proposer = make_model_proposer(spec, base_url=base_url, **options)
        self.name = self.proposer.name

    def ask(self, role: str, system: str, messages: list[dict]) -> Answer:
        return ask_text(self.proposer, system, messages, role)


class ReplayText:
    """Recorded answers: every ``*.json`` record of ``folder`` with a ``role`` and either the
    ``response`` body it got or its ``text``, handed out in file-name order per role.  A record
    that names the ``description`` it answered must match the one being described."""

    def __init__(self, folder: str | Path, description: str | None = None):
        self.folder = Path(folder)
        if not self.folder.is_dir():
            raise InputError(f"--replay {self.folder}: not a folder of recorded answers",
                             hint="give the NAME_describe folder an earlier kforge init --describe wrote")
        self.queues: dict[str, list[tuple[Path, dict]]] = {}
        for f in sorted(self.folder.glob("*.json")):
            try:
                rec = json.loads(f.read_text(encoding="utf-8"))
            except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
                raise InputError(f"--replay {f}: not a readable JSON record ({exc})") from None
            if not isinstance(rec, dict) or "role" not in rec:
                continue                       # the cross-check's records and the like
            if "text" not in rec and "response" not in rec:
                raise InputError(f"--replay {f}: $: a record needs the \"response\" it got or its \"text\"")
            said = rec.get("description")
            if description is not None and said is not None and said.strip() != description.strip():
                raise InputError(f"--replay {f}: $.description: these answers were recorded for another "
                                 f"description: {said[:160]!r}",
                                 hint="describe the task with the same text, or ask a model (--model)")
            self.queues.setdefault(rec["role"], []).append((f, rec))
        if not self.queues:
            raise InputError(f"--replay {self.folder}: holds no recorded answers (model-NNN.json with a role)")
        first = next(iter(self.queues.values()))[0][1]
        self.name = (f"{first['provider']}:{first['model']}" if first.get("provider") and first.get("model")
                     else "replay")

    def ask(self, role: str, system: str, messages: list[dict]) -> Answer:
        queue = self.queues.get(role) or []
        if not queue:
            raise InputError(f"--replay {self.folder}: no (further) recorded answer for the {role} call",
                             hint="the recorded exchange ends here; ask a model (--model) for the rest")
        f, rec = queue.pop(0)
        text = rec["text"] if "text" in rec else response_text(rec.get("response"))
        fields = {k: rec[k] for k in ModelCall.__dataclass_fields__ if k in rec}
        call = ModelCall(**{"provider": rec.get("provider", "replay"), "model": rec.get("model", "recorded"),
                            "request": rec.get("request") or {"messages": messages},
                            "response": rec.get("response"), **{k: v for k, v in fields.items()
                                                                if k not in ("provider", "model", "request", "response")}})
        call.cost_usd, call.seconds = 0.0, 0.0          # nothing was spent on a replay
        return Answer(text, [call], replayed_from=str(f))


def record(call: ModelCall, **extra) -> dict:
    """A describe exchange's evidence record (``model-NNN.json``): ``extra`` (index, role, turn,
    description, replayed_from) and the ModelCall."""
    return {**extra, **asdict(call)}
