"""Shared fixtures. The tests mirror the package: tests/<layer>/test_<module>*.py holds the tests
of kernel_forge/<layer>/<module>.py; the helpers (fakes, the loopback server, recorded runs) stay
here, importable from every folder."""
import os
import sys
from functools import lru_cache
from pathlib import Path

import pytest

TESTS = Path(__file__).resolve().parent
ROOT = TESTS.parent
MANIFESTS = ROOT / "manifests"

# the helpers here, and test modules that share their fakes (`from test_loop import ...`), import
# by file name from any folder
for _folder in [TESTS, *sorted(p for p in TESTS.iterdir() if p.is_dir() and any(p.glob("test_*.py")))]:
    if str(_folder) not in sys.path:
        sys.path.insert(0, str(_folder))


def gpu_for_worker(worker: str | None, gpus: str | None) -> str | None:
    """The GPU a pytest-xdist worker (gw0, gw1, ...) gets from KFORGE_TEST_GPUS ("0,1,...")."""
    ids = [g.strip() for g in (gpus or "").split(",") if g.strip()]
    if not worker or not ids or not worker.startswith("gw") or not worker[2:].isdigit():
        return None
    return ids[int(worker[2:]) % len(ids)]


# `make test-gpu` on several GPUs runs one xdist worker per GPU; pin each before anything touches CUDA
_pinned = gpu_for_worker(os.environ.get("PYTEST_XDIST_WORKER"), os.environ.get("KFORGE_TEST_GPUS"))
if _pinned is not None:
    os.environ["CUDA_VISIBLE_DEVICES"] = _pinned


@lru_cache(maxsize=1)
def _has_gpu() -> tuple[bool, str]:
    try:
        from kernel_forge.gate.gate import probe_gpu
        probe_gpu()
        return True, ""
    except Exception as exc:  # noqa: BLE001
        return False, str(exc).splitlines()[0]


def gpu_present() -> bool:
    """Whether a usable NVIDIA GPU and driver are here (probed once)."""
    return _has_gpu()[0]


def pytest_collection_modifyitems(config, items):
    # the marker, not a keyword: every test under tests/gpu/ has the folder's name "gpu" among its keywords
    gpu_items = [i for i in items if i.get_closest_marker("gpu") is not None]
    if not gpu_items:
        return
    for item in gpu_items:          # `make test` (--dist loadgroup): no two GPU tests at once, so none times on a busy GPU
        item.add_marker(pytest.mark.xdist_group("gpu"))
    ok, why = _has_gpu()
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
def root() -> Path:
    return ROOT


@pytest.fixture
def manifests_dir() -> Path:
    return MANIFESTS
