"""What kforge takes from outside its settings' declaration, checked before anything uses it:
the timing environment variables the GPU worker reads, and an endpoint URL (``--base-url``, or
the ``OPENAI_BASE_URL`` / ``ANTHROPIC_BASE_URL`` the SDKs read).  Each check raises an
:class:`~kernel_forge.common.errors.InputError` that names the variable or the option."""
from __future__ import annotations

import math
import os
from urllib.parse import urlparse

from kernel_forge.common.errors import InputError

#: what the timing environment variables may be (the GPU worker reads them; a typo must not pass silently)
CLOCK_KINDS = ("cupti", "events")


def check_environment(*, timing: bool = True) -> None:
    """The environment variables kforge reads, before anything uses them: ``KFORGE_CLOCK``
    (``cupti``, the default, or ``events``) and ``KFORGE_CLOCK_OFFSET_US`` (a finite number of
    microseconds >= 0) when ``timing``.  Refused with exit 2 naming the variable."""
    if not timing:
        return
    clock = os.environ.get("KFORGE_CLOCK", "")
    if clock.strip() and clock.strip().lower() not in CLOCK_KINDS:
        raise InputError(f"KFORGE_CLOCK={clock!r}: must be {' or '.join(CLOCK_KINDS)} (or unset: cupti)",
                         hint="unset it, or KFORGE_CLOCK=events to time with CUDA events alone")
    offset = os.environ.get("KFORGE_CLOCK_OFFSET_US", "")
    if offset.strip():
        try:
            value = float(offset)
        except ValueError:
            value = math.nan
        if not (math.isfinite(value) and value >= 0):
            raise InputError(f"KFORGE_CLOCK_OFFSET_US={offset!r}: must be a finite number of microseconds >= 0 "
                             "(the GPU's launch offset, e.g. 0.86)", hint="unset it to use the measured offset")


def check_base_url(url: str, *, where: str = "--base-url") -> None:
    parsed = urlparse(url) if isinstance(url, str) else None
    if parsed is None or parsed.scheme not in ("http", "https") or not parsed.netloc:
        raise InputError(f"{where} {url!r} is not an http:// or https:// URL",
                         hint="e.g. --base-url http://localhost:8000/v1 for a local OpenAI-compatible server")
