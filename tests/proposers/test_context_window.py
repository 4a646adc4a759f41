"""The context window is checked before every call (issue 32 item 5): for every model of the
capability table, through the real SDKs and the loopback, a prompt larger than its window is cut by
rule (whole sections, lowest priority first) or refused before the call, and the evidence or the
error says so, with the sizes.  Nothing is sent to fail with an HTTP 400 for its length."""
from __future__ import annotations

import pytest

from kernel_forge.proposers import capabilities
from kernel_forge.proposers.base import ProposalRequest
from kernel_forge.proposers.budget import estimate_tokens

from tests.support.loopback import Loopback, tool
from tests.support.table_proposers import proposer_for, spec_of

pytestmark = pytest.mark.filterwarnings("ignore:The model .* is deprecated:DeprecationWarning",
                                        "ignore:Using Claude with")

KERNEL = 'extern "C" __global__ void k(float* x) { x[threadIdx.x] = 0.f; }'
ANSWER = {"source": KERNEL, "rationale": "zero"}
HISTORY_HEAD = "# Earlier correct kernels, slowest to fastest (the best is above)"
ALL = sorted(capabilities.entries())


@pytest.fixture
def server(clean_env):
    s = Loopback().start()
    yield s
    s.stop()


def prompt(best_chars: int, history_chars: int) -> str:
    return (f"# Current best: a0001, score 10 µs\n```cuda\n{KERNEL}\n```\n{'b' * best_chars}\n\n"
            f"{HISTORY_HEAD}\n{'h' * history_chars}\n\n# Your job\nMake it faster.")


@pytest.mark.parametrize("key", ALL)
def test_a_prompt_over_the_window_loses_its_lowest_priority_sections_and_says_so(server, key):
    window = capabilities.entries()[key].context
    server.script(spec_of(key)[0] if not key.startswith("local:") else "chat", tool(ANSWER))
    p = proposer_for(key, server)
    request = ProposalRequest(system="You write CUDA kernels.", prompt=prompt(100, 3 * window + 3000))
    result = p.propose(request)

    assert result.errors == [] and len(result.proposals) == 1
    (req,) = server.received
    sent = str(req.body)
    assert "# Current best: a0001" in sent and "# Your job" in sent and HISTORY_HEAD not in sent
    assert estimate_tokens(req.body) + (req.body.get("max_tokens") or req.body.get("max_output_tokens")) <= window
    note = result.calls[0].plan["context"]
    assert note["dropped"] == [HISTORY_HEAD] and note["window"] == window
    assert note["prompt_tokens_before_cut"] > window


@pytest.mark.parametrize("key", ALL)
def test_a_prompt_that_cannot_be_cut_to_fit_is_refused_before_the_call_naming_the_sizes(server, key):
    window = capabilities.entries()[key].context
    p = proposer_for(key, server)
    request = ProposalRequest(system="You write CUDA kernels.", prompt=prompt(3 * window + 3000, 10))
    result = p.propose(request)

    assert server.received == [] and result.calls == [] and result.proposals == []
    (error,) = result.errors
    assert f"context window is {window} tokens" in error and "the call was not made" in error
    assert f"after dropping {HISTORY_HEAD}" in error
    tokens = int(error.split("the prompt is about ")[1].split(" tokens")[0])
    assert tokens > window


def test_a_local_server_s_window_comes_from_context_tokens_and_the_output_limit_is_lowered_to_fit(server):
    """vLLM's entry says 32,768; a server started with 16,384 is told by --context-tokens: a prompt
    of about 10k tokens then leaves the answer the rest, not the 8,192 asked."""
    server.script("chat", tool(ANSWER))
    p = proposer_for("local:vllm", server, context_tokens=16_384)
    result = p.propose(ProposalRequest(system="s", prompt=prompt(30_000, 0)))
    (req,) = server.received
    tokens = estimate_tokens(req.body)
    assert 9_000 < tokens < 11_000 and req.body["max_tokens"] == 16_384 - tokens
    assert result.calls[0].plan["context"]["output_limit_lowered"] == {"from": 8192, "to": 16_384 - tokens}


def test_context_tokens_below_1024_is_refused(server):
    from kernel_forge.common.errors import InputError

    with pytest.raises(InputError, match="--context-tokens must be >= 1024"):
        proposer_for("local:vllm", server, context_tokens=512)
