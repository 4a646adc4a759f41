"""kernel_forge.proposers.relaxation: a parameter a model rejects, dropped and remembered for the run."""
from __future__ import annotations

from kernel_forge.proposers.relaxation import WITHOUT_TEMPERATURE, Learned, relaxation_for
from kernel_forge.proposers.retry import Failure


def rejected(status: int, message: str) -> Failure:
    return Failure(retryable=False, description=f"HTTP {status}", status=status,
                   body={"error": {"message": message}})


def test_only_an_http_400_naming_a_parameter_the_body_carries_is_relaxed_and_each_only_once():
    body = {"model": "m", "temperature": 0.2}
    assert relaxation_for([WITHOUT_TEMPERATURE], rejected(400, "temperature is not supported"), body, set()) \
        is WITHOUT_TEMPERATURE
    assert relaxation_for([WITHOUT_TEMPERATURE], rejected(500, "temperature"), body, set()) is None
    assert relaxation_for([WITHOUT_TEMPERATURE], rejected(400, "temperature"), {"model": "m"}, set()) is None
    assert relaxation_for([WITHOUT_TEMPERATURE], rejected(400, "temperature"), body, {"temperature"}) is None


def test_what_was_learned_is_applied_to_later_bodies_that_still_carry_it():
    learned = Learned()
    body = {"model": "m", "temperature": 0.2, "messages": [1]}
    learned.learn(WITHOUT_TEMPERATURE, body, WITHOUT_TEMPERATURE.apply(body))
    assert learned.names == {"temperature"}
    later = learned.apply({"model": "m", "temperature": 0.7, "messages": [2]}, [WITHOUT_TEMPERATURE])
    assert later == {"model": "m", "messages": [2]}
