"""Expert patterns (the kernel library's patterns, kernel_forge/kernels): the library, a manifest's
kind checked, retrieval and the tuner picking them up (the kind classifier itself:
tests/kinds/test_fit.py); every pattern compiles with NVRTC for sm_90 and parses as a candidate
against the bundled task it is written for (signature, launch on every case).  Host emulation
against the reference and the NVRTC sample of settings run through tests/kernels/test_tuner_templates.py
(the bundled manifests list every pattern as a template).  On a GPU: every pattern passes the
strict gate, holdout included."""
from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest

from kernel_forge.kernels import library
from kernel_forge.kinds import fit
from kernel_forge.common import static_rules
from kernel_forge.model.candidate import load_candidate
from kernel_forge.search.retrieval import Example, pattern_example, render_examples, retrieve_for_run, with_pattern
from kernel_forge.model.task import load_task

ROOT = Path(__file__).resolve().parents[2]
MANIFESTS = ROOT / "manifests"
PATTERNS = list(library.patterns())
IDS = [p.stem for p in PATTERNS]


def task_of(name: str):
    return load_task(MANIFESTS / f"{name}.json")


def anonymous(task, **raw):
    """The task with its name and description told nothing (only structure is left), plus ``raw``."""
    return dataclasses.replace(task, name="k", description="", raw={**{k: v for k, v in task.raw.items()
                                                                        if k != "kind"}, **raw})


# -- the library ---------------------------------------------------------------------------------

def test_the_index_lists_every_pattern_file_once_with_a_known_kind_and_a_bundled_task():
    assert all(p.path.is_file() for p in PATTERNS) and len(IDS) == len(set(IDS))
    for p in PATTERNS:
        assert p.kind in fit.KINDS and p.kind != "other"
        assert (MANIFESTS / f"{p.task}.json").is_file() and p.technique and p.name == f"{p.kind}/{Path(p.file).stem}"
    # every kind the issue names has a pattern
    assert {"gemm", "row_norm", "row_softmax", "transpose", "histogram", "elementwise", "reduction"} <= {
        p.kind for p in PATTERNS}


@pytest.mark.parametrize("pat", PATTERNS, ids=IDS)
def test_every_pattern_carries_its_task_s_signature_and_launches_on_every_case(pat):
    task = task_of(pat.task)
    cand = load_candidate(pat.path)
    assert fit.signature_matches(pat, task)
    assert cand.launch is not None and cand.tunables, "a pattern carries its launch and tunables"
    assert cand.satisfies_constraints() and static_rules.check(cand.source) == []
    for d in cand.configurations():
        for case in task.cases:
            grid, block, smem = cand.launch.resolve({**case.vars, **d})
            assert min(grid) >= 1 and 32 <= block[0] * block[1] * block[2] <= 1024, (d, case.name)
            # dynamic shared memory beyond 48 KiB is opted into by the harness (up to 227 KiB on sm_90)
            assert grid[1] <= 65535 and 0 <= smem <= 227 * 1024, (d, case.name)


@pytest.mark.parametrize("pat", PATTERNS, ids=IDS)
def test_every_pattern_compiles_for_sm90_without_spills(pat):
    pytest.importorskip("cuda.bindings.nvrtc")
    from kernel_forge.gpu.nvrtc import compile_source

    cand = load_candidate(pat.path)
    r = compile_source(cand.source, arch="sm_90", defines=cand.compile_defines(), file_label=pat.file)
    assert r.cubin and "warning" not in r.log.lower(), r.log
    assert r.resources.get("spill_stores", 0) + r.resources.get("spill_loads", 0) == 0, r.resources


def test_the_sgemm_space_holds_the_settings_strong_sgemms_use_and_small_ones():
    cand = load_candidate(library.by_name("gemm_simt_warptile").path)
    cfgs = [tuple(sorted(d.items())) for d in cand.configurations()]
    want = [dict(BM=128, BN=128, BK=8, WM=32, WN=64, TM=8, TN=8, MINB=2),     # 8 warps 4 x 2, 8 x 8 per lane
            dict(BM=128, BN=128, BK=16, WM=64, WN=32, TM=8, TN=8, MINB=1),
            dict(BM=128, BN=256, BK=8, WM=64, WN=64, TM=8, TN=16, MINB=1),     # 128 x 256: 8 warps, 8 x 16 per lane
            dict(BM=64, BN=128, BK=16, WM=32, WN=64, TM=8, TN=8, MINB=2),
            dict(BM=32, BN=64, BK=32, WM=16, WN=32, TM=4, TN=4, MINB=2)]      # small sizes: 4 warps, 4 x 4
    for w in want:
        assert tuple(sorted(w.items())) in cfgs, w
    assert 100 <= len(cfgs) <= 400


def test_the_sgemm_tiling_writes_every_element_of_c_exactly_once():
    """A host replica of the pattern's index arithmetic (tile, warp, lane, sub-tile) on small
    tiles of every valid setting: each element of a BM x BN block tile is owned by exactly one
    (thread, i, j), and each thread's A/B fragments are 16-byte aligned slices of the tile."""
    cand = load_candidate(library.by_name("gemm_simt_warptile").path)
    seen_settings = set()
    for d in cand.configurations():
        key = (d["BM"], d["BN"], d["WM"], d["WN"], d["TM"], d["TN"])
        if key in seen_settings:
            continue
        seen_settings.add(key)
        BM, BN, WM, WN, TM, TN = key
        wn_, lm, ln = BN // WN, WM // TM, WN // TN
        owner = {}
        for tid in range(32 * (BM // WM) * wn_):
            lane, warp = tid % 32, tid // 32
            a_frag = (warp // wn_) * WM + (lane // ln) * 4
            b_frag = (warp % wn_) * WN + (lane % ln) * 4
            assert a_frag % 4 == 0 and b_frag % 4 == 0
            for i in range(TM):
                row = a_frag + (i // 4) * lm * 4 + i % 4
                for j in range(TN):
                    col = b_frag + (j // 4) * ln * 4 + j % 4
                    assert (row, col) not in owner, (key, row, col)
                    owner[(row, col)] = tid
        assert len(owner) == BM * BN and max(r for r, _ in owner) == BM - 1 and max(c for _, c in owner) == BN - 1
        # the loads: every float4 slot of the A and B tiles filled exactly once per k-step
        threads = 32 * (BM // WM) * wn_
        for bk in (8, 16, 32):
            if (BM * bk) % (4 * threads) or (BN * bk) % (4 * threads):
                continue
            a = sorted(((f % BM), (f // BM) * 4) for f in range(BM * bk // 4))
            assert len(set(a)) == BM * bk // 4
            b = sorted((f // (BN // 4), (f % (BN // 4)) * 4) for f in range(bk * BN // 4))
            assert len(set(b)) == bk * BN // 4 and max(r for r, _ in b) == bk - 1


# -- kinds ------------------------------------------------------------------------------------------

def test_a_manifest_with_an_unknown_kind_is_refused_with_its_json_path(tmp_path):
    from kernel_forge.common.errors import ManifestError

    data = json.loads((MANIFESTS / "vector_add.json").read_text())
    for k in ("reference",):
        data[k] = {"python": str((MANIFESTS / data[k]["python"]).resolve())}
    data["initial"] = str((MANIFESTS / data["initial"]).resolve())
    data["baselines"] = {k: {"python": str((MANIFESTS / v["python"]).resolve())} for k, v in data["baselines"].items()}
    data["templates"] = []
    data.pop("$schema")
    data["kind"] = "convolution"
    path = tmp_path / "t.json"
    path.write_text(json.dumps(data))
    with pytest.raises(ManifestError) as info:
        load_task(path)
    assert "kind" in str(info.value)
    data["kind"] = "elementwise"
    path.write_text(json.dumps(data))
    assert fit.classify(load_task(path)).source == "manifest"


# -- the tuner and retrieval ---------------------------------------------------------------------------

def test_the_tuner_searches_the_patterns_of_a_task_that_lists_no_templates():
    from kernel_forge.config.proposer import ProposerConfig
    from kernel_forge.app.run_setup import make_proposer

    t = dataclasses.replace(task_of("softmax_rows"), templates=())
    prop = make_proposer(ProposerConfig(), t)
    assert [p.name for p in prop.templates] == ["rowsoftmax_online.cu"]
    # a task whose signature no pattern carries gets none (a pattern is gated as it is, never renamed)
    other = dataclasses.replace(t, signature=dataclasses.replace(t.signature, name="my_softmax"))
    assert fit.tuner_templates(other) == []
    # the bundled manifests list theirs, first where they are the stronger template
    assert task_of("matmul_f32").templates[0] == library.by_name("gemm_simt_warptile").path
    assert task_of("layernorm").templates[0] == library.by_name("rownorm_layernorm").path


def test_retrieval_offers_the_pattern_of_the_kind_when_the_archive_has_none_of_this_task(tmp_path):
    t = task_of("matmul_f32")
    got = retrieve_for_run(t, path=tmp_path / "none.sqlite", k=3)            # no archive at all
    assert [e.pattern for e in got.examples] == ["gemm_simt_warptile"] and got.kind["kind"] == "gemm"
    ex = got.examples[0]
    assert ex.source == library.by_name("gemm_simt_warptile").source() and not ex.truncated
    text = render_examples(got.examples)
    assert "expert pattern gemm_simt_warptile for gemm kernels" in text and "holdout" not in text
    # an archived kernel of this very task is something better: no pattern then
    same = Example(id=7, content_hash="0" * 64, task_name="matmul_f32", description="", source="// k",
                   launch=None, defines={}, score_us=3.0, speedup_vs_initial=2.0, cases=[], bound="compute",
                   run="runs/run-001", attempt="a0003", label="x.cu", gpu_name="H200", same_task=True)
    assert with_pattern([same], t, 3) == [same]
    other = dataclasses.replace(same, task_name="softmax_rows", same_task=False, content_hash="1" * 64)
    assert [e.pattern for e in with_pattern([other], t, 3)] == ["gemm_simt_warptile", ""]
    assert with_pattern([other], t, 1)[0].pattern == "gemm_simt_warptile"
    assert with_pattern([], t, 0) == []
    # a kind without a pattern
    assert pattern_example(dataclasses.replace(anonymous(task_of("softmax_rows")))) is None


def test_the_retrieval_record_with_a_pattern_round_trips_through_its_schema(tmp_path):
    import jsonschema

    from kernel_forge.search.retrieval import Retrieved

    got = retrieve_for_run(task_of("layernorm"), path=tmp_path / "none.sqlite", k=2)
    rec = json.loads(json.dumps(got.to_json()))
    schema = json.loads((ROOT / "kernel_forge" / "schemas" / "retrieval.schema.json").read_text())
    jsonschema.validate(rec, schema)
    back = Retrieved.from_json(rec)
    assert back.examples[0].pattern == "rownorm_layernorm" and back.kind["kind"] == "row_norm"


def test_the_dry_run_prompt_carries_the_pattern_of_the_task_s_kind():
    from kernel_forge.app.run_setup import first_prompt_parts

    _, static, _ = first_prompt_parts(MANIFESTS / "matmul_f32.json")      # fixed for a run: the cached prefix
    assert "## Expert pattern gemm_simt_warptile for gemm kernels" in static
    assert "acc[i][j] = fmaf(fa[i], fb[j], acc[i][j]);" in static          # the main loop is shown, never clipped


# -- GPU --------------------------------------------------------------------------------------------

@pytest.mark.gpu
@pytest.mark.parametrize("pat", PATTERNS, ids=IDS)
def test_every_pattern_passes_the_strict_gate_with_holdout(pat):
    from kernel_forge.config.gate_settings import GateOptions
    from kernel_forge.gate.gate import Gate

    task = task_of(pat.task)
    gate = Gate(task, GateOptions())
    try:
        ev = gate.evaluate(load_candidate(pat.path), roles=("correctness", "performance", "holdout"))
    finally:
        gate.close()
    print(f"{pat.name} on {task.name}: {ev.reason} (score {ev.score_us} us)")
    assert ev.passed and ev.score_us, f"{pat.name}: {ev.reason}: {ev.message}"
