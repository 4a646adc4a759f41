"""The kernel library: every kernel kforge ships for the tuner to search, in one place, with one
way to name them.

The files sit in ``kernel_forge/kernels/<kind>/<stem>.cu`` (package data), ``<kind>`` one of
the kinds of operation (:data:`kernel_forge.kinds.fit.KINDS`, :data:`kernel_forge.kinds.KINDS`).
A kernel's name is ``<kind>/<stem>`` (``gemm/gemm_simt_warptile``); the stem alone is unique in the
library and names it too (the tuner labels its attempts ``<stem>.cu``, prompts and run records
name an expert pattern by its stem).  ``index.json`` says what each one is:

* ``pattern``: an expert pattern, written against the signature of the bundled task ``task``.
  Retrieval shows it to a model and the tuner searches it on a task of its kind that has the same
  signature and lists no templates (:mod:`kernel_forge.kinds.fit`);
* ``variant``: a tuning template of the bundled task ``task`` (a bundled manifest lists it);
* ``bound``: a kind's template written against role names, with ``@@SLOT@@`` holes, that
  :mod:`kernel_forge.kinds.bind` writes out for a task's own signature.

A manifest names a library kernel in ``templates`` by its name (``"gemm/matmul_f32_tiled"``); a
file of its own by its path, relative to the manifest (:func:`kernel_forge.model.task.load_task`).

Headers shared by kernels sit in ``include/``: :func:`headers` hands each to NVRTC in memory as
``kforge/<file>`` (:mod:`kernel_forge.gpu.nvrtc`), so a kernel includes one with
``#include "kforge/cp_async.cuh"``.  ``include/_io.cuh`` is for the bound templates only: the
binder writes its text into each bound kernel (:func:`include_text`).
"""
from __future__ import annotations

import json
import re
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

HERE = Path(__file__).resolve().parent
INCLUDE = HERE / "include"
#: the folder part of an include name that reaches the library's headers
HEADER_PREFIX = "kforge/"
#: what a library name looks like (a manifest's ``templates`` entry of this form names a library kernel)
NAME = re.compile(r"[a-z][a-z0-9_]*/[a-z][a-z0-9_]*")
ROLES = ("pattern", "variant", "bound")

_INCLUDE_LINE = re.compile(r'^[ \t]*#[ \t]*include[ \t]*"' + re.escape(HEADER_PREFIX) + r'([\w.]+)"[ \t]*$', re.M)


@dataclass(frozen=True)
class Kernel:
    name: str          #: ``<kind>/<stem>``
    role: str          #: one of ROLES
    task: str          #: the bundled task whose signature it carries ("" for a bound template)
    technique: str     #: one line: what the kernel does (a pattern's is said in the prompt)

    @property
    def kind(self) -> str:
        return self.name.split("/")[0]

    @property
    def stem(self) -> str:
        return self.name.split("/")[1]

    @property
    def file(self) -> str:
        """The file's name: what the tuner labels the kernel's attempts with."""
        return self.stem + ".cu"

    @property
    def path(self) -> Path:
        return HERE / self.kind / self.file

    def text(self) -> str:
        """The file as written (the tuner and the gate compile this: NVRTC gets the headers)."""
        return self.path.read_text(encoding="utf-8")

    def source(self) -> str:
        """The kernel as one self-contained text, each library header it includes written in
        place: what a model is shown."""
        return expand(self.text())


@lru_cache(maxsize=1)
def index() -> tuple[Kernel, ...]:
    """Every kernel of ``index.json``, in its order."""
    data = json.loads((HERE / "index.json").read_text(encoding="utf-8"))
    return tuple(Kernel(k["name"], k["role"], k.get("task", ""), k["technique"]) for k in data["kernels"])


def patterns() -> tuple[Kernel, ...]:
    """The expert patterns, in the index's order."""
    return tuple(k for k in index() if k.role == "pattern")


def by_name(name: str) -> Kernel | None:
    """The kernel named ``<kind>/<stem>`` or by its stem alone; None if the library has none."""
    key = "name" if "/" in name else "stem"
    return next((k for k in index() if getattr(k, key) == name), None)


def of_path(path) -> Kernel | None:
    """The library kernel whose file ``path`` is, if it is one."""
    real = Path(path).resolve()
    return next((k for k in index() if k.path == real), None)


def names(role: str | None = None) -> list[str]:
    return [k.name for k in index() if role is None or k.role == role]


@lru_cache(maxsize=1)
def headers() -> dict[str, str]:
    """``kforge/<file>`` -> text of every shared header in ``include/`` (``_io.cuh`` aside)."""
    return {HEADER_PREFIX + p.name: p.read_text(encoding="utf-8")
            for p in sorted(INCLUDE.glob("*.cuh")) if not p.name.startswith("_")}


def include_text(file: str) -> str:
    """The text of ``include/<file>`` (the bound templates' ``_io.cuh``)."""
    return (INCLUDE / file).read_text(encoding="utf-8")


def expand(text: str) -> str:
    """``text`` with every ``#include "kforge/<file>"`` line replaced by that header's text (an
    unknown name stays as written: NVRTC names it)."""
    known = headers()
    return _INCLUDE_LINE.sub(lambda m: known.get(HEADER_PREFIX + m.group(1), m.group(0)).rstrip("\n"), text)
