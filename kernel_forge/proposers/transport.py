"""Talking to an SDK: importing it when a proposer is built, the timeouts of a request, whether an
endpoint is local, a response as the JSON it came as, and what a sloppy stream may raise."""
from __future__ import annotations

import ipaddress
from typing import Any
from urllib.parse import urlsplit

from kernel_forge.common.errors import EnvironmentProblem

#: connection attempts while a local server (localhost, a private address) cannot be reached
LOCAL_CONNECT_ATTEMPTS = 2
#: seconds allowed to open a connection (the request timeout bounds the rest)
CONNECT_TIMEOUT = 10.0
#: a non-streamed answer's time per output token: the anthropic SDK's estimate (an hour for
#: 128,000 tokens, _base_client._calculate_nonstreaming_timeout), used for both providers
NONSTREAMING_SECONDS_PER_TOKEN = 3600 / 128_000
#: the API key sent to a server given with a base URL when none is set (local servers take any)
NO_KEY = "not-needed"


def is_local_url(base_url: str | None) -> bool:
    """``base_url`` points at this machine or a private network (a local model server)."""
    if not base_url:
        return False
    host = (urlsplit(base_url).hostname or "").lower()
    if host == "localhost" or host.endswith(".localhost"):
        return True
    try:
        ip = ipaddress.ip_address(host)
    except ValueError:
        return False
    return ip.is_loopback or ip.is_private or ip.is_unspecified


class StreamAssemblyError(Exception):
    """A streamed answer whose events the SDK could not assemble into a message (a server that
    strays from the wire format); recorded as a failed call, not retried."""


class EmptyStream(Exception):
    """The server closed a streamed answer without sending any chunk."""


#: what assembling a sloppy stream can raise (the HTTP library's and the SDKs' errors are not among them)
ASSEMBLY_ERRORS = (ValueError, KeyError, IndexError, TypeError, AttributeError, AssertionError)


def as_count(value: Any) -> int:
    """A token count as a provider reported it: a non-negative int (0 for anything else)."""
    try:
        return max(0, int(value or 0))
    except (TypeError, ValueError):
        return 0


def import_sdk(name: str, requirement: str):
    """Import an SDK (a dependency, imported only when a proposer is built) or explain."""
    import importlib

    try:
        return importlib.import_module(name)
    except ImportError as exc:
        raise EnvironmentProblem(
            f"the {name!r} package is needed for {name}:MODEL proposers but cannot be imported ({exc})",
            hint=f"pip install '{requirement}'   (it is a dependency of cuda-kernel-forge: reinstall it)",
        ) from None


def dump_response(obj: Any) -> dict | None:
    """The SDK response object as the JSON body it was built from."""
    if obj is None:
        return None
    if isinstance(obj, dict):
        return obj
    # warnings=False: a body that strays from the SDK's types (a local server) is recorded as is
    for attempt in (lambda: obj.model_dump(mode="json", exclude_unset=True, warnings=False),
                    lambda: obj.model_dump(mode="json", exclude_unset=True),
                    lambda: obj.to_dict(),
                    lambda: dict(obj)):
        try:
            return attempt()
        except Exception:  # noqa: BLE001 - try the next way
            continue
    return {"repr": repr(obj)}

