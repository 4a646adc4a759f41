"""kernel_forge.proposers.transport: what talking to an SDK needs (a local endpoint, a response as JSON)."""
from __future__ import annotations

from kernel_forge.proposers.transport import as_count, dump_response, is_local_url


def test_local_urls():
    for url in ("http://localhost:8000/v1", "http://127.0.0.1:11434/v1", "http://10.1.2.3/v1",
                "https://192.168.0.7:8443", "http://[::1]:8000", "http://gpu.localhost/v1"):
        assert is_local_url(url), url
    for url in (None, "https://api.openai.com/v1", "https://api.anthropic.com", "http://8.8.8.8/v1"):
        assert not is_local_url(url), url


def test_a_token_count_is_a_non_negative_int_whatever_the_provider_sent():
    assert [as_count(v) for v in (12, "7", None, -3, "n/a", 2.9)] == [12, 7, 0, 0, 0, 2]


def test_a_response_is_recorded_as_the_json_it_came_as():
    class Model:
        def model_dump(self, **kw):
            return {"id": "m1", "mode": kw.get("mode")}

    assert dump_response(None) is None and dump_response({"a": 1}) == {"a": 1}
    assert dump_response(Model()) == {"id": "m1", "mode": "json"}
    assert dump_response(object())["repr"].startswith("<object object")
