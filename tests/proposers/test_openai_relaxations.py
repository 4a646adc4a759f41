"""kernel_forge.proposers.openai_relaxations: what an OpenAI(-compatible) request is sent again without."""
from __future__ import annotations

from kernel_forge.proposers.openai_relaxations import relaxations


def by_name(name):
    return next(r for r in relaxations() if r.name == name)


def test_the_effort_steps_down_to_the_highest_value_the_error_lists():
    effort = by_name("effort_value")
    body = {"reasoning": {"effort": "xhigh", "summary": "auto"}, "include": ["reasoning.encrypted_content"]}
    message = "unsupported value: 'reasoning.effort' supported values are: 'low', 'medium' and 'high'."
    assert effort.named(message.lower())
    assert effort.adapt(body, message)["reasoning"]["effort"] == "high"
    down = effort.adapt(body, "reasoning.effort: supported values are: 'none'")
    assert down["reasoning"] == {"effort": "none"} and "include" not in down


def test_a_server_that_rejects_one_output_limit_field_gets_the_other():
    swap = by_name("max_tokens_field")
    assert swap.named("unsupported parameter: 'max_tokens' is not supported with this model")
    assert swap.apply({"max_tokens": 10, "model": "m"}) == {"max_completion_tokens": 10, "model": "m"}
