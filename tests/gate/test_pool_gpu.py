"""`make test-gpu` on several GPUs: which GPU each pytest-xdist worker is pinned to (no GPU needed)."""
import pytest

from tests.support.gpu_probe import gpu_for_worker


@pytest.mark.parametrize("worker, gpus, expected", [
    ("gw0", "0,1", "0"), ("gw1", "0,1", "1"), ("gw2", "0,1", "0"), ("gw3", "4, 5,6", "4"),
    (None, "0,1", None), ("gw0", None, None), ("gw0", "", None), ("master", "0,1", None), ("gwx", "0", None),
])
def test_each_xdist_worker_gets_one_gpu_in_turn(worker, gpus, expected):
    assert gpu_for_worker(worker, gpus) == expected
