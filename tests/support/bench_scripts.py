"""The scripts of bench/ as modules, for their tests: bench/ is a folder of scripts, not a package,
so each is loaded by its file path, once per process (nothing is put on sys.path)."""
from __future__ import annotations

import importlib.util
import sys
from functools import lru_cache
from types import ModuleType

from tests.support.paths import ROOT

BENCH = ROOT / "bench"


@lru_cache(maxsize=None)
def bench_script(name: str) -> ModuleType:
    """bench/``name``.py, run once as the module ``name`` (registered in sys.modules while it runs,
    as an import would: its dataclasses look their module up there)."""
    spec = importlib.util.spec_from_file_location(name, BENCH / f"{name}.py")
    mod = importlib.util.module_from_spec(spec)
    sys.modules[name] = mod
    try:
        spec.loader.exec_module(mod)
    except BaseException:
        del sys.modules[name]
        raise
    return mod
