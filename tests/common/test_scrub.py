"""Tests of kernel_forge/common/scrub.py: credentials taken out of what kforge writes."""
from __future__ import annotations

import dataclasses
import json

from kernel_forge.common.scrub import REDACTED, scrub
from kernel_forge.proposers.base import ModelCall

ANTHROPIC_KEY = "sk-ant-api03-LOOPBACK-secret-0123456789abcdef"
OPENAI_KEY = "sk-proj-LOOPBACK-secret-0123456789abcdef"


def test_scrub_removes_keys_and_patterns():
    local = "plain-local-token-xyz"
    data = {
        "headers": {"Authorization": "Bearer abcdefghijklmnop", "X-Api-Key": ANTHROPIC_KEY, "accept": "json"},
        "api_key": OPENAI_KEY,
        "nested": [("text with sk-ant-api03-ABCDEFGHIJKLMNOPQRSTUV inside", 3), {"openai-api-key": "v"}],
        "message": f"rejected {local} and Bearer zyxwvutsrqponm",
        "max_tokens": 100,
        "source": "float disk-cache = 1; // mask-free",
    }
    out = scrub(data, secrets=[local])
    dumped = json.dumps(out)
    for secret in (ANTHROPIC_KEY, OPENAI_KEY, "sk-ant-api03-ABCDEFGHIJKLMNOPQRSTUV", local,
                   "abcdefghijklmnop", "zyxwvutsrqponm"):
        assert secret not in dumped
    assert out["headers"]["Authorization"] == REDACTED and out["headers"]["accept"] == "json"
    assert out["api_key"] == REDACTED and out["nested"][1]["openai-api-key"] == REDACTED
    assert out["nested"][0] == (f"text with {REDACTED} inside", 3)
    assert out["message"] == f"rejected {REDACTED} and Bearer {REDACTED}"
    assert out["max_tokens"] == 100 and out["source"] == data["source"]
    # the input is untouched
    assert data["api_key"] == OPENAI_KEY and data["headers"]["X-Api-Key"] == ANTHROPIC_KEY

    call = ModelCall(provider="openai", model="m", request={"k": OPENAI_KEY}, response=None,
                     error=f"HTTP 401: bad key {OPENAI_KEY}")
    clean = scrub(call)
    assert isinstance(clean, ModelCall) and OPENAI_KEY not in json.dumps(dataclasses.asdict(clean))
    assert call.request["k"] == OPENAI_KEY


def test_a_secret_key_with_no_value_stays_empty_and_any_key_ending_in_api_key_is_one():
    out = scrub({"api_key": None, "password": "", "Proxy-Authorization": "Basic dXNlcjpwYXNz",
                 "my_service_api_key": "k-12345", "api_key_hint": "starts with sk-"})
    assert out == {"api_key": None, "password": "", "Proxy-Authorization": REDACTED,
                   "my_service_api_key": REDACTED, "api_key_hint": "starts with sk-"}


def test_words_that_merely_contain_sk_and_short_names_are_left_alone():
    text = "risk-assessment-and-mitigation-plan, task-0123456789abcdefghij, sk-short, Bearer abc"
    assert scrub(text) == text
    # a named secret shorter than 4 characters would cut words apart: it is not used
    assert scrub("the key abc is in abcdef", secrets=["abc"]) == "the key abc is in abcdef"
    assert scrub("the key abcd is in abcdef", secrets=["abcd"]) == f"the key {REDACTED} is in {REDACTED}ef"
    # "bearer" keeps its spelling, the token goes
    assert scrub("authorization: bearer 0123456789.abc") == f"authorization: bearer {REDACTED}"


def test_a_secret_in_a_mapping_key_is_scrubbed_too_and_lists_come_back_as_copies():
    out = scrub({f"token {ANTHROPIC_KEY}": 1, "samples_us": [1.0, 2.0, 3]})
    assert out == {f"token {REDACTED}": 1, "samples_us": [1.0, 2.0, 3]}
    samples = [1.0, 2.0]
    copy = scrub(samples)
    assert copy == samples and copy is not samples
    assert scrub(7) == 7 and scrub(None) is None
