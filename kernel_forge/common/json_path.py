"""Where in a JSON document a message points: ``$.cases[2].vars.N``.

Every message that names a place inside a JSON file (a manifest, a config, a run's evidence, an
archive line) writes that place with :func:`json_path`, so they all read the same way.
"""
from __future__ import annotations

import json
import re

#: a key that reads plainly after a dot; any other key is written in brackets and quotes
_PLAIN_KEY = re.compile(r"[A-Za-z_][A-Za-z0-9_-]*")


def json_path(*parts: str | int) -> str:
    """The JSON path of ``parts``, from the document's root ``$``: a key as ``.key`` (or
    ``["odd key"]`` when it is not a plain name), a list index as ``[i]``.

    ``json_path("cases", 2, "vars", "N")`` -> ``$.cases[2].vars.N``;
    ``json_path(*error.absolute_path)`` for a jsonschema error; ``json_path()`` -> ``$``."""
    out = "$"
    for part in parts:
        if isinstance(part, int) and not isinstance(part, bool):
            out += f"[{part}]"
        elif _PLAIN_KEY.fullmatch(str(part)):
            out += f".{part}"
        else:
            out += f"[{json.dumps(str(part), ensure_ascii=False)}]"
    return out
