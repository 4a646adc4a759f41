"""kernel_forge.proposers.conversation: one proposal's follow-ups (truncation, repair), each call recorded."""
from __future__ import annotations

from kernel_forge.proposers.cache_plan import CachePlan
from kernel_forge.proposers.conversation import Conversation
from kernel_forge.proposers.pricing import PriceTable
from kernel_forge.proposers.relaxation import Learned
from kernel_forge.proposers.retry import RetryPolicy, classify_exception
from kernel_forge.proposers.usage import Usage, price_of

PLAN = CachePlan(on=False, reason="off", static="", common="", rests=["p"], prefix_tokens=0, min_tokens=None,
                 static_ttl=None, key="k")


class Model:
    """A model proposer's hooks, answering from a script: "cut" (cut off at the limit) or "ok"."""

    provider, model, name, timeout, _secrets, _cut_note = "openai", "m", "openai:m", 5.0, (), None
    caps = type("Caps", (), {"key": "openai:m"})
    max_tokens, max_tokens_cap, budget = 1000, 4000, None

    def __init__(self, *answers):
        self.answers, self.bodies = list(answers), []
        self.prices = PriceTable({"openai:m": [1.0, 2.0]})
        self.retry = RetryPolicy(max_attempts=1, sleep=lambda s: None)
        self.learned = Learned()

    def _send(self, body, on_start, progress):
        self.bodies.append(body)
        return self.answers.pop(0)

    def _fit_output(self, body, where):
        return body, None

    def _reserve(self, body, where):
        return None

    def _usage(self, response): return Usage(input=10, output=5)
    def _classify(self, exc): return classify_exception(exc)
    def _price(self, usage): return price_of(self.prices, self.provider, self.model, usage)
    def _plan_json(self, plan, body): return {}
    def _refusal(self, response): return None
    def _relaxations(self): return []
    def _truncated(self, response): return response == "cut"
    def _limit_field(self, body): return "max_tokens"
    def _output_room(self, body): return 100_000
    def _add_user_text(self, body, text): return {**body, "extra": text}
    def shorter_text(self, limit): return f"shorter than {limit}"


def test_a_cut_off_answer_is_asked_again_once_with_twice_the_limit():
    model = Model("cut", "ok")
    conv = Conversation(model, "openai:m: proposal 1 of 1", PLAN)
    response, body = conv.answer({"max_tokens": 1000})
    assert response == "ok" and [b["max_tokens"] for b in model.bodies] == [1000, 2000]
    assert conv.calls[0].error.endswith("asked again with max_tokens=2000") and conv.used == {"truncation"}


def test_cut_off_twice_is_the_conversation_s_error_with_both_calls_recorded():
    model = Model("cut", "cut")
    conv = Conversation(model, "openai:m: proposal 1 of 1", PLAN)
    assert conv.answer({"max_tokens": 1000}) is None and len(conv.calls) == 2
    assert conv.error == "openai:m: proposal 1 of 1: the answer was cut off at the output limit (2000 tokens) again"


def test_at_the_cap_a_text_conversation_stops_instead_of_asking_for_a_shorter_answer():
    model = Model("cut")
    conv = Conversation(model, "openai:m: a text answer", PLAN)
    assert conv.answer({"max_tokens": 4000}, shorter=False) is None
    assert conv.error.endswith("(4000 tokens) the cap") and len(model.bodies) == 1
