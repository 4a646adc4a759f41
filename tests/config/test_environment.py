"""What kforge takes from outside its settings' declaration: the timing environment variables the
GPU worker reads and an endpoint URL, each refused by name before anything uses it."""
from __future__ import annotations

import pytest

from kernel_forge.common.errors import InputError
from kernel_forge.config.environment import CLOCK_KINDS, check_base_url, check_environment


@pytest.fixture
def env(monkeypatch):
    monkeypatch.delenv("KFORGE_CLOCK", raising=False)
    monkeypatch.delenv("KFORGE_CLOCK_OFFSET_US", raising=False)
    return monkeypatch


@pytest.mark.parametrize("clock", ["cupti", "events", " Events ", ""])
def test_the_clock_is_cupti_or_events_or_unset(env, clock):
    env.setenv("KFORGE_CLOCK", clock)
    check_environment()
    assert CLOCK_KINDS == ("cupti", "events")


def test_a_clock_typo_is_refused_naming_the_variable_and_the_two_kinds(env):
    env.setenv("KFORGE_CLOCK", "sundial")
    with pytest.raises(InputError) as err:
        check_environment()
    assert err.value.message == "KFORGE_CLOCK='sundial': must be cupti or events (or unset: cupti)"
    check_environment(timing=False)            # a command that times nothing does not read it


@pytest.mark.parametrize("offset", ["fast", "nan", "inf", "-0.5"])
def test_the_clock_offset_is_a_finite_number_of_microseconds_at_least_zero(env, offset):
    env.setenv("KFORGE_CLOCK_OFFSET_US", offset)
    with pytest.raises(InputError, match=r"KFORGE_CLOCK_OFFSET_US=.*finite number of microseconds >= 0"):
        check_environment()
    env.setenv("KFORGE_CLOCK_OFFSET_US", "0.86")
    check_environment()


@pytest.mark.parametrize("url", ["ftp://host/v1", "localhost:8000", "http://", 8000])
def test_a_base_url_is_http_or_https_with_a_host_and_the_refusal_names_where_it_came_from(url):
    with pytest.raises(InputError) as err:
        check_base_url(url, where="OPENAI_BASE_URL")
    assert err.value.message == f"OPENAI_BASE_URL {url!r} is not an http:// or https:// URL"
    check_base_url("https://api.example.com/v1")
    check_base_url("http://localhost:8000/v1")
