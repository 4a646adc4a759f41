"""One launch of a loaded CUDA kernel (gpu/launch.py), on a stand-in for the driver: no GPU."""
from __future__ import annotations

import types

import kernel_forge.gpu.launch as launch_mod
from kernel_forge.gpu.launch import KernelLaunch


def test_a_kernel_launch_reads_the_module_at_each_call_so_a_reloaded_module_is_the_one_launched(monkeypatch):
    """A module whose globals cannot be restored in place is loaded afresh before every launch
    (LoadedModule.initial_state): the launch must not hold on to the module it was bound with."""
    launched = []
    monkeypatch.setattr(launch_mod.driver, "launch",
                        lambda module, grid, block, smem, stream, args, *, cooperative: launched.append(
                            (module, grid, block, smem, stream, args, cooperative)))
    loaded = types.SimpleNamespace(module="first load")
    config = types.SimpleNamespace(grid=(4, 1, 1), block=(256, 1, 1), shared_mem=1024)
    launch = KernelLaunch(loaded, config, 0x5000, "packed", True)
    launch()
    loaded.module = "second load"
    launch()
    assert launched == [("first load", (4, 1, 1), (256, 1, 1), 1024, 0x5000, "packed", True),
                        ("second load", (4, 1, 1), (256, 1, 1), 1024, 0x5000, "packed", True)]
