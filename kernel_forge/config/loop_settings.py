"""The loop's settings: stop rules and search settings of ``kforge optimize``."""
from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import ClassVar, Literal

from kernel_forge.common.setting import MAX_COUNT, MAX_SEED, YEAR_S, setting

#: --budget-usd when none is given (0 turns the limit off)
DEFAULT_BUDGET_USD = 20.0


@dataclass
class LoopConfig:
    """Stop rules and search settings of ``kforge optimize`` (every field is a CLI option)."""

    SECTION: ClassVar[str] = "loop"

    max_iterations: int | None = setting(
        None, min=1, max=MAX_COUNT, flag="--max-iterations",
        help="iterations, each asking for `candidates` proposals (default: 7 with a model or a replay; none for the "
             "built-in tuner, which its time limit, exhaustion and --roof-stop end)")
    candidates: int = setting(4, min=1, max=1000, flag="--candidates",
                              help="model proposals per iteration (the tuner proposes every template with settings left)")
    search: Literal["greedy", "population", "anneal", "brute"] = setting(
        "population", help="search strategy for parents, directions and tunable settings (see README: Search)")
    roof_stop: float = setting(
        0.9, min=0, max=2,
        help="stop once the best reaches this share of the roof that applies (measured bandwidth or compute peak) "
             "on every performance case (0: never)")
    budget_usd: float | None = setting(
        DEFAULT_BUDGET_USD, min=0, max=10**9, flag="--budget-usd",
        help="most the model calls may cost (USD), each checked before it is made against its worst case (default "
             "$20; 0: no limit; the default does not apply to a model with no price, whose cost cannot be counted)")
    max_tokens: int | None = setting(None, min=1, max=10**15, flag="--max-tokens",
                                     help="stop when input+output tokens reach this")
    time_limit_s: float | None = setting(None, above=0, max=YEAR_S, flag="--time-limit", help="stop after this much wall time")
    tune_time_limit_s: float = setting(180.0, min=0, max=YEAR_S,
                                       help="the built-in tuner's time limit when --time-limit is not given (0: none)")
    patience: int | None = setting(None, min=1, max=MAX_COUNT, flag="--patience",
                                   help="stop after this many iterations without improvement")
    target_speedup: float | None = setting(None, above=0, max=10**6, flag="--target-speedup",
                                           help="stop once best is this much faster than the initial kernel")
    tune_budget: int = setting(24, min=1, max=MAX_COUNT, flag="--tune-budget",
                               help="most settings gated per tuned proposal per iteration (the tuner: per template, "
                                    "shared by promise)")
    refine: bool = setting(True, help="spend a tuned proposal's budget in rounds, each picked from what the rounds "
                                      "before measured (greedy: one step of neighbours of the best setting)")
    history_in_prompt: int = setting(5, min=0, max=1000,
                                     help="earlier correct kernels shown to the model (distinct, best excluded)")
    failures_in_prompt: int = setting(3, min=0, max=1000, help="recent failures summarised in the prompt")
    crossover_every: int = setting(3, min=0, max=MAX_COUNT,
                                   help="greedy: every Nth iteration offers two parents to combine; population: one "
                                        "proposal per iteration is a crossover (0: never)")
    retime_rounds: int = setting(2, min=1, max=1000, help="interleaved re-measurement rounds before the best changes")
    min_improvement: float = setting(0.01, min=0, below=1,
                                     help="the least relative gain, on one case, that can move the best, and the least "
                                          "band of every case (0.01: 1 %)")
    hints: str = setting("", flag="--hints", help="extra text for the model")
    seed: int = setting(0, min=0, max=MAX_SEED, flag="--loop-seed",
                        help="seed of the loop's own choices (sampling, crossover); --seed is the gate's input draws")
    fix_turns: int = setting(1, min=0, max=100, help="turns a failed proposal gets to be fixed in its slot (0: none)")
    profile: bool = setting(True, help="profile the best and each new best for the prompt (ncu where it works); a "
                                       "proposer that reads no prompt (the built-in tuner) gets one profile, of the "
                                       "final best")
    history_chars: int = setting(16000, min=0, max=10**8, help="most characters of earlier kernels' source in one prompt")
    archive: str | None = setting(None, help="kernel archive file (default: the user's cache; \"off\": none)")
    archive_examples: int = setting(3, min=0, max=1000, help="kernels of similar earlier tasks shown from the archive")
    archive_chars: int = setting(6000, min=0, max=10**8, help="most characters of archived source in one prompt")
    dispatch: bool = setting(True, help="settings per shape: once a tuned proposal's settings are gated, also gate the "
                                        "simplest dispatch rule over them that keeps every performance case within "
                                        "noise of its own best (dispatch_fit.py)")

    @property
    def budget_limit(self) -> float | None:
        """--budget-usd as a limit: None where there is none (0 or null)."""
        return self.budget_usd or None

    def to_json(self) -> dict:
        return asdict(self)
