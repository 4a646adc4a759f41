"""The sections of a run (``loop``, ``proposer``, ``gate``) and how their settings are named on
the command line, for messages about settings that a library caller made."""
from __future__ import annotations

import functools
from typing import Any

from kernel_forge.config.build import OnCommandLine, Where, check_settings as _check
from kernel_forge.config.describe import DescribeConfig
from kernel_forge.config.gate_settings import GateOptions
from kernel_forge.config.loop_settings import LoopConfig
from kernel_forge.config.proposer import ProposerConfig
from kernel_forge.common.setting import option_names

#: the sections of a run, in the order of ``kforge optimize --help``; each is a config file section
RUN_SECTIONS: tuple[tuple[str, type], ...] = (("loop", LoopConfig), ("proposer", ProposerConfig), ("gate", GateOptions))


@functools.lru_cache(maxsize=1)
def command_line() -> OnCommandLine:
    """Every setting named by its ``kforge optimize`` (or ``init --describe``) option."""
    flags = option_names(RUN_SECTIONS)
    flags.update(option_names([("describe", DescribeConfig)]))
    return OnCommandLine(flags)


def check_settings(obj: Any, where: Where | None = None) -> None:
    """Every field of a settings object, named as ``where`` says (default: its command-line option)."""
    _check(obj, where or command_line())
