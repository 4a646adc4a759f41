"""Model proposers for the transport, repair and retry tests: a model the capability table does not
list (the providers' generic request, priced here), pointed at the loopback server, with injected
sleeps; the saxpy proposal (:data:`GOOD`) and the request (:data:`REQUEST`) they answer."""
from __future__ import annotations

from kernel_forge.proposers.base import ProposalRequest
from kernel_forge.proposers.models import make_model_proposer

ANTHROPIC_KEY = "sk-ant-api03-LOOPBACK-secret-0123456789abcdef"
OPENAI_KEY = "sk-proj-LOOPBACK-secret-0123456789abcdef"

KERNEL = 'extern "C" __global__ void saxpy(int n, float a, const float* x, float* y) {\n' \
         '  int i = blockIdx.x * BLOCK + threadIdx.x;\n  if (i < n) y[i] = a * x[i] + y[i];\n}\n'
GOOD = {
    "source": KERNEL,
    "rationale": "one element per thread, BLOCK tunable",
    "launch": {"grid": ["cdiv(n, BLOCK)"], "block": ["BLOCK"], "shared_mem": 0},
    "tunables": {"BLOCK": [128, 256, 512]},
}
REQUEST = ProposalRequest(system="You write CUDA kernels.", prompt="Make saxpy faster.", n=1)


class Sleeps(list):
    """A sleep that records the waits it was asked for instead of waiting."""

    def __call__(self, seconds: float) -> None:
        self.append(seconds)


#: models the capability table does not list: the providers' safe defaults, no rule of the table enforced,
#: priced here like claude-sonnet-4-5 ($3 / $15) and gpt-5 ($1.25 / $0.125 cached / $10)
TEST_MODELS = {"anthropic": "claude-test-1", "openai": "qwen-test"}
TEST_PRICES = {"anthropic:claude-test-1": {"input": 3.0, "output": 15.0},
               "openai:qwen-test": {"input": 1.25, "cached_input": 0.125, "output": 10.0}}


def make(provider: str, server, *, model: str | None = None, **kw):
    """A proposer for the transport, repair and retry tests: a model the table does not list (the
    generic request), answering with the submit_kernel tool unless told otherwise."""
    # a silence of 5 s: a loaded machine (pytest -n, CI) starved the loopback's thread past 0.3 s now
    # and then, and a spurious timeout made a third attempt; the timeout tests set their own
    kw.setdefault("request_timeout_s", 5.0)
    kw.setdefault("answer_format", "tool")
    kw.setdefault("prices", TEST_PRICES)
    if "retry" not in kw:
        kw.setdefault("sleep", Sleeps())
    if provider == "anthropic":
        kw.setdefault("api_key", ANTHROPIC_KEY)
        kw.setdefault("max_tokens", 8192)
        return make_model_proposer(f"anthropic:{model or TEST_MODELS['anthropic']}", base_url=server.anthropic_base_url,
                                   **kw)
    kw.setdefault("api_key", OPENAI_KEY)
    kw.setdefault("max_tokens", 8192)
    return make_model_proposer(f"openai:{model or TEST_MODELS['openai']}", base_url=server.openai_base_url, **kw)
