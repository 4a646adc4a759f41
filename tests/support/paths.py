"""The repository's folders as the tests see them: ROOT (the checkout), TESTS, MANIFESTS."""
from __future__ import annotations

from pathlib import Path

TESTS = Path(__file__).resolve().parents[1]
ROOT = TESTS.parent
MANIFESTS = ROOT / "manifests"
