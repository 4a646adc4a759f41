"""Fixtures of the app tests."""
from __future__ import annotations

import pytest
from click.testing import CliRunner

from kernel_forge.app.cli import cli

from tests.support.paths import ROOT


@pytest.fixture
def kforge(monkeypatch):
    """kforge's command line in this process, run from the repository root: ``kforge(*args)`` -> click's Result."""
    monkeypatch.chdir(ROOT)
    runner = CliRunner()
    return lambda *args: runner.invoke(cli, [str(a) for a in args], catch_exceptions=False)
