"""kernel_forge/model/limits.py: launch limits known without a GPU, and a launch's problems in words."""
from __future__ import annotations

import pytest

from kernel_forge.model.limits import MAX_BLOCK, MAX_GRID, arch_cc, arch_limits, launch_limits, launch_problem, target_arch

KB = 1024


@pytest.mark.parametrize("arch, cc", [("sm_90a", (9, 0)), ("sm_120", (12, 0)), ("sm_86", (8, 6)), ("sm_100f", (10, 0)),
                                      ("sm_70", (7, 0))])
def test_an_arch_name_is_its_compute_capability(arch, cc):
    assert arch_cc(arch) == cc


def test_a_hopper_gpu_is_compiled_for_its_feature_target_and_other_gpus_for_their_own_arch():
    assert target_arch("sm_90") == "sm_90a"                     # wgmma, setmaxnreg
    for arch in ("sm_80", "sm_86", "sm_89", "sm_100", "sm_120", "sm_90a"):
        assert target_arch(arch) == arch                        # an sm_100a CUBIN would not load on sm_103


def test_every_compile_for_sm_90_asks_nvrtc_for_sm_90a():
    pytest.importorskip("cuda.bindings.nvrtc")
    from kernel_forge.gpu.nvrtc import build_options, compile_source

    assert "--gpu-architecture=sm_90a" in build_options("sm_90") and "--gpu-architecture=sm_86" in build_options("sm_86")
    wgmma = 'extern "C" __global__ void k() { asm volatile("wgmma.fence.sync.aligned;"); }'
    assert compile_source(wgmma, arch="sm_90", use_cache=False).cubin


def test_an_unknown_arch_takes_the_nearest_older_known_one_and_one_older_than_all_the_oldest():
    assert arch_limits((8, 6))["max_smem_per_sm"] == 100 * KB and arch_limits((8, 6))["max_threads_per_sm"] == 1536
    assert arch_limits((9, 5)) == arch_limits((9, 0))
    assert arch_limits((13, 0)) == arch_limits((12, 0))
    assert arch_limits((6, 1)) == arch_limits((7, 0))
    assert arch_limits((9, 0))["reserved_smem_per_block"] == KB and arch_limits((7, 5))["reserved_smem_per_block"] == 0


def test_without_arch_or_device_the_limits_are_the_most_any_supported_gpu_allows():
    lim = launch_limits()
    assert lim == {"label": "any supported GPU", "max_threads_per_block": 1024, "max_block": (1024, 1024, 64),
                   "max_grid": (2**31 - 1, 65535, 65535), "max_smem_per_block_optin": 227 * KB}   # sm_90: 228 KB - 1 KB
    assert launch_limits("sm_86")["max_smem_per_block_optin"] == 99 * KB and launch_limits("sm_86")["label"] == "sm_86"
    assert launch_limits("sm_75")["max_smem_per_block_optin"] == 64 * KB                          # nothing reserved


def test_a_described_device_s_own_limits_win():
    lim = launch_limits("sm_90", {"name": "Tiny GPU", "max_threads_per_block": 512, "max_smem_per_block_optin": 48 * KB})
    assert lim == {"label": "Tiny GPU", "max_threads_per_block": 512, "max_block": MAX_BLOCK, "max_grid": MAX_GRID,
                   "max_smem_per_block_optin": 48 * KB}
    assert launch_limits(device={"max_smem_per_block_optin": 1})["label"] == "the described GPU"


@pytest.mark.parametrize("grid, block, smem, problem", [
    ((0, 1, 1), (32, 1, 1), 0, "grid [0, 1, 1] and block [32, 1, 1] need every dimension >= 1"),
    ((1, 1, 1), (32, 32, 2), 0, "block [32, 32, 2] has 2048 threads; a block holds at most 1024 (sm_86)"),
    ((1, 1, 1), (1, 1, 128), 0, "block dimension z = 128 exceeds 64 (sm_86)"),
    ((1, 65536, 1), (32, 1, 1), 0, "grid dimension y = 65536 exceeds 65535 (sm_86)"),
    ((1, 1, 1), (32, 1, 1), -1, "shared_mem = -1 is negative"),
    ((1, 1, 1), (32, 1, 1), 99 * KB + 1, "shared_mem = 101377 bytes exceeds the 101376 bytes of shared memory a block "
                                         "can have (sm_86)"),
    ((2**31 - 1, 65535, 65535), (1024, 1, 1), 99 * KB, None),          # every limit reached, none passed
])
def test_what_is_wrong_with_a_launch_is_said_with_its_numbers_and_the_limit_s_source(grid, block, smem, problem):
    assert launch_problem(grid, block, smem, launch_limits("sm_86")) == problem


def test_a_kernel_that_stops_itself_without_a_feature_target_names_that_target():
    from kernel_forge.kernels import library
    from kernel_forge.model.limits import needed_target

    assert needed_target(library.by_name("gemm_f16_wgmma").text()) == "sm_90a"
    assert needed_target(library.by_name("gemm_f16_wg").text()) == "sm_90a"
    assert needed_target(library.by_name("gemm_f16_mma").text()) is None
    assert needed_target("#if defined(__CUDA_ARCH_FEAT_SM90_ALL)\n#endif") is None       # a use, not a refusal
    assert needed_target("# if __CUDA_ARCH__ && !defined( __CUDA_ARCH_FEAT_SM100_ALL )\n#error x") == "sm_100a"
