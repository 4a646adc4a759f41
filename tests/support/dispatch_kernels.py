"""Scripted vector_add kernels with a tuned block size (tests/support/fakes.py's ``// fake:`` lines):
the tune header, and a template whose best setting depends on the shape (BLOCK=128, and 1024 on the
64M case) from which the loop fits a dispatch rule."""
from __future__ import annotations

from tests.support.fakes import vector_add

HEADER = """// kforge: grid = [cdiv(n, BLOCK)]
// kforge: block = [BLOCK]
// kforge: tune BLOCK = [128, 256, 512, 1024]
"""
#: the best setting is BLOCK=128, and BLOCK=1024 on n64M: the loop fits a dispatch rule to it
TEMPLATE = vector_add("pass 400", header=HEADER) + "// fake-opt: BLOCK=128\n// fake-opt@n64M: BLOCK=1024\n"
