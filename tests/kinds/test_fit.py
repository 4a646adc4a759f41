"""kernel_forge/kinds/fit.py: the kind classifier and which library patterns fit a task."""
from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from kernel_forge.kernels import library
from kernel_forge.kinds import fit
from kernel_forge.model.task import load_task

ROOT = Path(__file__).resolve().parents[2]
MANIFESTS = ROOT / "manifests"


def task_of(name: str):
    return load_task(MANIFESTS / f"{name}.json")


def anonymous(task, **raw):
    """The task with its name and description told nothing (only structure is left), plus ``raw``."""
    return dataclasses.replace(task, name="k", description="", raw={**{k: v for k, v in task.raw.items()
                                                                        if k != "kind"}, **raw})


# -- the classifier (moved from tests/kernels/test_patterns.py) ----------------------------------------

@pytest.mark.parametrize("name, kind", [("matmul_f32", "gemm"), ("matmul_f16", "gemm"), ("layernorm", "row_norm"),
                                        ("softmax_rows", "row_softmax"), ("transpose", "transpose"),
                                        ("histogram", "histogram"), ("vector_add", "elementwise"),
                                        ("gelu_bf16", "elementwise"), ("reduce_sum", "reduction")])
def test_every_bundled_task_is_classified_by_its_name(name, kind):
    k = fit.classify(task_of(name))
    assert (k.kind, k.source) == (kind, "name")


@pytest.mark.parametrize("name, kind", [("matmul_f32", "gemm"), ("transpose", "transpose"),
                                        ("histogram", "histogram"), ("vector_add", "elementwise"),
                                        ("reduce_sum", "reduction")])
def test_without_name_or_description_the_structure_still_tells_the_kind(name, kind):
    k = fit.classify(anonymous(task_of(name)))
    assert (k.kind, k.source) == (kind, "structure"), k


def test_the_manifest_s_kind_wins_and_the_description_is_read():
    t = task_of("layernorm")
    assert fit.classify(anonymous(t, kind="row_softmax")) == fit.Kind(
        "row_softmax", "manifest", 'the manifest says "kind": "row_softmax"')
    k = fit.classify(dataclasses.replace(anonymous(t), description="RMS norm over each row"))
    assert (k.kind, k.source) == ("row_norm", "name") and "description" in k.why
    # rows in, rows out, nothing said: not guessed
    assert fit.classify(anonymous(task_of("softmax_rows"))).kind == "other"


# -- the patterns that fit ----------------------------------------------------------------------------

def test_the_patterns_of_a_kind_come_in_the_library_s_order_and_a_kind_without_any_has_none():
    assert [p.name for p in fit.of_kind("gemm")] == ["gemm/gemm_simt_warptile", "gemm/gemm_tf32x3_mma",
                                                     "gemm/gemm_tf32x3_wgmma", "gemm/gemm_f16_mma",
                                                     "gemm/gemm_f16_wgmma"]
    assert fit.of_kind("scan") == [] and fit.of_kind("other") == []


def test_a_pattern_fits_only_a_task_with_its_entry_point_and_exactly_its_parameters():
    f16, simt = library.by_name("gemm_f16_mma"), library.by_name("gemm_simt_warptile")
    t = task_of("matmul_f16")
    assert fit.signature_matches(f16, t) and not fit.signature_matches(simt, t)      # float operands, not __half
    a, *rest = t.signature.params
    renamed = dataclasses.replace(t, signature=dataclasses.replace(t.signature, params=(
        dataclasses.replace(a, name="A"), *rest)))
    assert not fit.signature_matches(f16, renamed)
    other_entry = dataclasses.replace(t, signature=dataclasses.replace(t.signature, name="my_gemm"))
    assert not fit.signature_matches(f16, other_entry)


def test_the_patterns_carrying_the_task_s_signature_come_first_and_only_they_go_to_the_tuner():
    t = task_of("matmul_f16")
    assert [p.name for p in fit.for_task(t)] == ["gemm/gemm_f16_mma", "gemm/gemm_f16_wgmma", "gemm/gemm_simt_warptile",
                                                 "gemm/gemm_tf32x3_mma", "gemm/gemm_tf32x3_wgmma"]
    assert fit.tuner_templates(t) == [library.by_name("gemm_f16_mma").path, library.by_name("gemm_f16_wgmma").path]
    assert fit.tuner_templates(task_of("matmul_f32")) == [library.by_name("gemm_simt_warptile").path,
                                                          library.by_name("gemm_tf32x3_mma").path,
                                                          library.by_name("gemm_tf32x3_wgmma").path]
