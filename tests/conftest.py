"""Fixtures every test folder shares. The tests mirror the package: tests/<layer>/test_<module>*.py
holds the tests of kernel_forge/<layer>/<module>.py. What test files share besides fixtures (fakes,
the loopback server, recorded runs, paths) lives in the package tests/support/ and is imported as
``from tests.support.X import ...`` (the repository root is on sys.path through pyproject.toml's
``pythonpath``); no test file imports another, and nothing here or there changes sys.path
(tests/test_suite_layout.py checks both)."""
import os

import pytest

from tests.support.gpu_probe import gpu_for_worker, probe
from tests.support.paths import MANIFESTS, ROOT

# `make test-gpu` on several GPUs runs one xdist worker per GPU; pin each before anything touches CUDA
_pinned = gpu_for_worker(os.environ.get("PYTEST_XDIST_WORKER"), os.environ.get("KFORGE_TEST_GPUS"))
if _pinned is not None:
    os.environ["CUDA_VISIBLE_DEVICES"] = _pinned


def pytest_collection_modifyitems(config, items):
    # the marker, not a keyword: every test under tests/gpu/ has the folder's name "gpu" among its keywords
    gpu_items = [i for i in items if i.get_closest_marker("gpu") is not None]
    if not gpu_items:
        return
    for item in gpu_items:          # `make test` (--dist loadgroup): no two GPU tests at once, so none times on a busy GPU
        item.add_marker(pytest.mark.xdist_group("gpu"))
    ok, why = probe()
    if ok:
        return
    skip = pytest.mark.skip(reason=f"no GPU: {why}")
    for item in gpu_items:
        item.add_marker(skip)


@pytest.fixture(autouse=True)
def _isolated_cache(tmp_path_factory, monkeypatch):
    # one compile cache per test session, never the user's
    monkeypatch.setenv("KFORGE_CACHE_DIR", str(tmp_path_factory.getbasetemp() / "cubin-cache"))
    # a fresh kernel archive per test, never the user's: runs add to it and retrieve from it
    monkeypatch.setenv("KFORGE_ARCHIVE", str(tmp_path_factory.mktemp("archive") / "archive.sqlite"))


@pytest.fixture
def root():
    return ROOT


@pytest.fixture
def manifests_dir():
    return MANIFESTS


@pytest.fixture
def arch(tmp_path):
    """An empty kernel archive in the test's folder (the archive and retrieval tests)."""
    from kernel_forge.archive.store import open_archive

    with open_archive(tmp_path / "archive.sqlite") as a:
        yield a


@pytest.fixture
def loopback():
    """A started :class:`tests.support.loopback.Loopback`; stopped at teardown. A request the
    installed SDK does not allow fails the test that sent it (unless the test expects one)."""
    from tests.support.loopback import Loopback

    server = Loopback().start()
    try:
        yield server
    finally:
        server.stop()
    if not server.expect_invalid:
        assert server.invalid == [], "requests the installed SDK does not allow:\n" + "\n".join(
            r.message for r in server.invalid)


@pytest.fixture
def clean_env(monkeypatch):
    """No ambient credentials, base URLs or proxies reach the SDK clients."""
    for name in list(os.environ):
        upper = name.upper()
        if upper.startswith(("ANTHROPIC_", "OPENAI_")) or upper.endswith("_PROXY") or upper == "NO_PROXY":
            monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("NO_PROXY", "127.0.0.1")
