"""The prompt built from a recorded matmul_f32 run (CPU): what it shows, what it bounds, what it hides.
How it shows failed attempts is in test_prompt_failures.py."""
from __future__ import annotations

import re
from dataclasses import replace

import pytest
from click.testing import CliRunner

from kernel_forge.app.cli import cli
from kernel_forge.analysis.directions import directions
from kernel_forge.search.prompt_blocks import HISTORY_CHARS, normalise
from kernel_forge.search.prompts import PromptContext, build_prompt, render_prompt, system_prompt, write_prompt

from tests.support import recorded_run as rec
from tests.support.recorded_run import prompt_parts, section


# ------------------------------------------------------------------------------ the split

def test_the_static_prefix_is_task_device_reference_and_the_same_for_every_call():
    d = rec.diagnosis()
    s1, d1 = prompt_parts(direction=directions(d, 2)[0])
    s2, d2 = prompt_parts(direction=directions(d, 2)[1], failures=[], history=[])
    assert s1 == s2 and d1 != d2
    assert [h for h in re.findall(r"^# (\w+)", s1, re.M)] == ["Task", "Device", "sm_90", "Reference"]
    assert s1.startswith("# Task: matmul_f32") and "# Current best" not in s1
    assert d1.startswith("# Current best: a0004, score 60.49 µs")
    full = build_prompt(PromptContext(rec.task(), **{k: v for k, v in dict(
        reference_source=rec.task().reference.path.read_text(), device=rec.env()["device"],
        calibration=rec.env()["calibration"], best=rec.prompt_attempt(rec.attempts()["a0004"]), history=[],
        failures=[]).items()}))
    static, dynamic = prompt_parts(history=[], failures=[], diagnosis=None)
    assert full == static + "\n\n" + dynamic


def test_the_device_is_fully_described_and_the_fp32_ceiling_is_the_one_shown():
    static, _ = prompt_parts()
    dev = section(static, "Device")
    assert "- fp32 FMA on CUDA cores: 66.9 TFLOP/s  <- the ceiling for this task" in dev
    assert "tensor cores: not the ceiling for this task" in dev and "split-precision TF32" in dev
    assert "TFLOP/s" in dev and "1070" not in static          # the 16-bit tensor peak is nowhere
    for fact in ("2048 per SM (64 warps of 32)", "at most 32 resident blocks per SM", "at most 255 per thread",
                 "233472 bytes (228 KiB) per SM", "49152 bytes (48 KiB) of static", "232448 bytes (227 KiB)",
                 "L2 60 MiB", "measured copy bandwidth 4260 GB/s", "--gpu-architecture=sm_90a", "no `--use_fast_math`",
                 "cuLaunchCooperativeKernel", "cold L2", "initial globals", "CUPTI"):
        assert fact in dev, fact
    assert "Task hints: m, n and k are arbitrary" in section(static, "Task")


def test_the_system_prompt_explains_kforge_lines():
    s = system_prompt()
    for line in ("`// kforge: grid = [X, Y, Z]`", "`// kforge: shared_mem = EXPR`", "`// kforge: tune NAME = [v1, v2, ...]`",
                 "`// kforge: define NAME = v`", "`// kforge: constraint EXPR`", "-DNAME=v", "Answer format:",
                 "```cuda", "<<<<<<< SEARCH", "predicted_speedup"):
        assert line in s, line
    assert not re.search(r"\bholdout\b", s, re.I)


# ------------------------------------------------------------------------------- the best

def test_the_current_best_carries_its_diagnosis_resources_and_profile():
    _, dyn = prompt_parts()
    best = section(dyn, "Current best")
    assert best.startswith("# Current best: a0004, score 60.49 µs (geometric mean of the performance medians); "
                           "x2.90 vs the initial kernel; x1.15 vs cublas")
    assert "Run with: launch grid [cdiv(n, TILE), cdiv(m, TILE), 1], block [TILE, TILE // RPT, 1]; defines RPT=4 TILE=32" in best
    assert "ridge point 15.7 FLOP/byte" in best
    assert "large (m=4096, n=4096, k=4096): 5270.0 µs" in best and "vs cublas 2900.0 µs: x0.55 (slower)" in best
    assert "Slower than a reference on: large x0.55 vs cublas" in best
    assert "resources (driver): 32 registers/thread, no spills, shared memory 8320 B static" in best
    assert "ncu: DRAM 4.2%, L2 5.7%, SM 71.5% of peak" in best
    assert "// kforge: define TILE = 32" in best                      # its source, complete


def test_an_unmeasured_best_shows_its_ptxas_resources_and_occupancy():
    at = rec.attempts()
    naive = rec.prompt_attempt(at["a0000"])
    naive = replace(naive, score_us=None, cases=[])
    _, dyn = prompt_parts(best=naive, diagnosis=None, history=[], failures=[])
    best = section(dyn, "Current best")
    assert "not measured yet" in best
    assert "Resources (ptxas, compiled for sm_90; not measured yet): 32 registers/thread" in best
    assert "- large: grid [256, 256, 1] x block [16, 16, 1] = 65536 blocks; 8 blocks/SM (100% theoretical occupancy); 62.06 waves" in best


# ---------------------------------------------------------------------------- history

def test_history_is_deduplicated_and_never_repeats_the_best():
    _, dyn = prompt_parts()
    hist = section(dyn, "Earlier correct kernels")
    # a0006 only: a0003/a0005 are the best's source, a0000 (245 µs) is over twice as slow as the best
    assert hist.count("```cuda") == 1 and "## a0000" not in hist
    assert "## a0006: 65.33 µs" in hist and "per case sq256 8.00, rect 8.50, large 4100.0 µs" in hist
    assert "- a0005: 64.54 µs (sq256 6.40, rect 7.50, large 5600.0 µs); same source as the best with RPT=2 TILE=32" in hist
    assert "- a0003: 101.8 µs" in hist
    assert "## a0004" not in hist and "## a0005" not in hist


def test_history_is_bounded_by_count_and_by_characters():
    at = rec.attempts()
    big = rec.prompt_attempt(at["a0006"])
    many = []
    for i in range(12):
        body = big.source + f"\n// variant {i}\n" + "// padding line of a long kernel\n" * 400
        many.append(replace(big, id=f"a{100 + i:04d}", source=body, score_us=70.0 + i))
    _, dyn = prompt_parts(history=many, n_history=5)
    hist = section(dyn, "Earlier correct kernels")
    assert hist.count("```cuda") <= 5
    assert len(hist) < HISTORY_CHARS + 2000
    assert "lines (" in hist and "characters) left out ..." in hist       # long sources clipped, not cut mid-line
    assert "## a0100: 70.00 µs" in hist                                    # the fastest kept first
    _, few = prompt_parts(history=many, n_history=2)
    assert section(few, "Earlier correct kernels").count("```cuda") == 2


def test_normalise_ignores_define_values_and_spacing():
    assert normalise("// kforge: define A = 1\nint  x;\n") == normalise("// kforge: define A = 2\nint x;")


# ---------------------------------------------------------------- crossover, archive, direction

def test_crossover_refers_to_sources_already_shown_and_skips_twins():
    at = rec.attempts()
    a, b = rec.prompt_attempt(at["a0004"]), rec.prompt_attempt(at["a0006"])
    _, dyn = prompt_parts(crossover=(a, b))
    cross = section(dyn, "Start from a0004 and combine it with a0006")
    assert "A ```diff block's edits apply to a0004." in cross
    assert "## a0004: 60.49 µs (per case sq256 6.00, rect 7.00, large 5270.0 µs); its source is under Current best" in cross
    assert "## a0006: 65.33 µs" in cross and "its source is under Earlier correct kernels" in cross
    twin = rec.prompt_attempt(at["a0005"])                                   # a0004's source, other defines
    _, dyn = prompt_parts(crossover=(a, twin))
    assert "combine it with" not in dyn


def test_retrieved_kernels_are_marked_as_other_tasks_or_earlier_runs():
    class Example:           # the attributes of retrieval.Example the prompt reads
        task_name = "transpose"
        description = "Transpose a row-major float32 matrix."
        source = "extern \"C\" __global__ void transpose(const float* x, float* y, int rows, int cols) {}"
        score_us = 12.5
        speedup_vs_initial = 3.1
        bound = "memory"
        same_task = False

    earlier = {"task_name": "matmul_f32", "source": "// an earlier run's best of this task\n", "score_us": 50.0,
               "same_task": True}
    static, dyn = prompt_parts(retrieved=(Example(), {"task": "reduce_sum", "source": "// reduce\n", "score": 3.0,
                                              "speedup": 4.0}, earlier, {"task": "layernorm", "source": ""}))
    sec = section(static, "Kernels from the archive")          # fixed for the run: in the cached prefix
    assert "ideas only: another task's signature, sizes and semantics are not this task's" in sec
    assert "## From task transpose: 12.50 µs, x3.10 vs its initial kernel, memory-bound\nIts task: Transpose a" in sec
    assert "## From task reduce_sum: 3.00 µs, x4.00 vs its initial kernel" in sec
    assert "## From an earlier run of this task: 50.00 µs\n```cuda\n// an earlier run's best" in sec
    assert "layernorm" not in sec                                   # nothing to show


def test_real_archive_examples_render(tmp_path):
    from kernel_forge.search.retrieval import Example

    ex = Example(id=1, content_hash="h", task_name="vector_add", description="Elementwise add.", source="// vec4\n",
                 launch=None, defines={}, score_us=64.5, speedup_vs_initial=1.2, cases=[], bound="memory", run="run-001",
                 attempt="a0003", label="a0003", gpu_name="NVIDIA H200", same_task=False)
    static, _ = prompt_parts(retrieved=[ex])
    assert "## From task vector_add: 64.50 µs, x1.20 vs its initial kernel, memory-bound" in static


def test_the_direction_and_hints_come_last():
    _, dyn = prompt_parts(direction="focus on case large", hints="prefer 128-thread blocks")
    heads = re.findall(r"^# (.+)$", dyn, re.M)
    assert heads[-3:] == ["Hints", "Direction for this proposal", "Your job"]
    assert "# Direction for this proposal\nfocus on case large" in dyn


# ------------------------------------------------------------------------------ honesty

def test_no_holdout_case_its_size_or_its_result_appears():
    at = rec.attempts()
    fix = rec.prompt_attempt(at["a0007"])        # failed on the hidden case; the gate's message named it
    raw = replace(fix, message=at["a0007"]["holdout"]["message"])           # as if a loop passed the details
    hidden_case = {"name": "holdout", "role": "holdout", "passed": False, "reason": "mismatch",
                   "message": "draw 1 (seed 88001), first launch (m=263, n=131, k=67): c: 131 elements differ",
                   "outputs": [{"name": "c", "ok": False, "first": [{"index": [262, 3], "actual": 1.0, "expected": 2.0}]}]}
    raw.cases = [*raw.cases, hidden_case]
    named = replace(rec.prompt_attempt(at["a0002"]), id="a0099", reason="mismatch", cases=[],
                    message=at["a0007"]["holdout"]["message"])          # a gate message naming the hidden case
    naive = rec.prompt_attempt(at["a0000"])
    naive.cases = at["a0000"]["evaluation"]["cases"]                        # with the holdout case left in
    for kw in ({}, {"fix": raw}, {"failures": [raw, named]}, {"fix": named}, {"best": naive, "diagnosis": rec.diagnosis("a0000")},
               {"crossover": (naive, rec.prompt_attempt(at["a0006"]))}):
        static, dyn = prompt_parts(**kw)
        text = system_prompt() + static + dyn
        for mark in rec.HOLDOUT_MARKS:
            assert mark not in text, (kw.keys(), mark)
    _, dyn = prompt_parts()
    assert "- a0007: holdout_failed: failed a hidden case" in dyn


# ------------------------------------------------------------------------- prompt files

def test_write_prompt_writes_one_file_per_iteration(tmp_path):
    static, dyn = prompt_parts()
    name = write_prompt(tmp_path, 2, system_prompt(), static, [dyn, dyn + "\nsecond"])
    assert name == "prompt-002.md"
    text = (tmp_path / name).read_text()
    assert text.index("## system") < text.index("## user: static prefix") < text.index("## user: dynamic part (proposal 1 of 2)")
    assert "## user: dynamic part (proposal 2 of 2)" in text and text.endswith("second\n")
    assert render_prompt("s", "a", "b").count("## user: dynamic part") == 1


# ---------------------------------------------------------------------------- dry run

def test_dry_run_with_a_stored_device_prints_the_whole_prompt_without_a_gpu():
    r = CliRunner().invoke(cli, ["optimize", str(rec.ROOT / "manifests" / "matmul_f32.json"), "--dry-run",
                                 "--device", str(rec.ROOT / "kernel_forge" / "data" / "devices" / "h200.json")])
    assert r.exit_code == 0, r.output
    out = r.stdout
    assert out.index("=== system prompt ===") < out.index("=== user prompt: static prefix") < out.index("=== user prompt: dynamic part")
    assert "NVIDIA H200 (sm_90" in out and "<- the ceiling for this task" in out and "1070" not in out
    assert "// kforge: grid = [X, Y, Z]" in out
    assert "Resources (ptxas, compiled for sm_90; not measured yet): 32 registers/thread" in out
    assert "m=263" not in out
    r = CliRunner().invoke(cli, ["optimize", str(rec.ROOT / "manifests" / "matmul_f32.json"), "--dry-run"])
    assert r.exit_code == 0 and "# Device\n(unknown" in r.stdout


def test_dry_run_with_a_broken_device_file_is_an_input_error(tmp_path):
    bad = tmp_path / "dev.json"
    bad.write_text('{"device": {}}')
    r = CliRunner().invoke(cli, ["optimize", str(rec.ROOT / "manifests" / "matmul_f32.json"), "--dry-run",
                                 "--device", str(bad)])
    assert r.exit_code == 2 and "$.device.name: missing" in r.stderr
    assert "Traceback" not in r.output


@pytest.mark.parametrize("name", ["vector_add", "softmax_rows", "gelu_bf16", "histogram", "layernorm", "transpose",
                                  "reduce_sum", "matmul_f32"])
def test_every_bundled_task_builds_a_dry_run_prompt(name):
    from kernel_forge.app.run_setup import first_prompt_parts

    system, static, (dyn,) = first_prompt_parts(rec.ROOT / "manifests" / f"{name}.json",
                                                device_file=rec.ROOT / "kernel_forge" / "data" / "devices" / "h200.json")
    assert "<- the ceiling for this task" in static and "# Current best: initial, not measured yet" in dyn
    assert not re.search(r"\bholdout\b", system + dyn, re.I)


def test_the_first_prompt_dry_run_shows_every_proposal_and_says_what_is_unmeasured():
    """Issue 32 item 10: it showed an unmeasured initial kernel with no word of what a real first
    prompt has, and only proposal 0."""
    r = CliRunner().invoke(cli, ["optimize", str(rec.ROOT / "manifests" / "matmul_f32.json"), "--dry-run",
                                 "--candidates", "3"])
    assert r.exit_code == 0, r.output
    for i in (1, 2, 3):
        assert f"=== user prompt: dynamic part of proposal {i} of 3 ===" in r.stdout
    assert r.stdout.count("- dry run: nothing was run, so this prompt lacks what a real run's first prompt shows "
                          "here: the initial kernel's median per case, the vendor baselines' times") == 3
    directions = re.findall(r"^# Direction for this proposal\n(.+)$", r.stdout, re.M)
    assert len(directions) == 3 and len(set(directions)) == 3


# ------------------------------------------- issue 32: the next prompt of the recorded s9 run

S9_OLD = rec.ROOT / "bench" / "evidence" / "h200-2026-12-03-s9" / "matmul-defaults" / "next-prompt-matmul_f32.md"


def _old_chars() -> int:
    """What one call of the recorded run's next iteration was sent before issue 32 (system, static
    prefix and proposal 0's dynamic part: the dry run's output without its three marker lines)."""
    text = S9_OLD.read_text()
    return len(text) - sum(len(l) + 1 for l in text.splitlines() if l.startswith("=== ")) - 1


def test_the_next_prompt_of_the_s9_run_starts_half_its_proposals_from_the_best_and_asks_for_the_small_grids():
    from tests.support import s9_run

    opt = s9_run.optimizer()
    req = opt.next_request()
    assert req.n == 4 and sum(s.parent == "a0107" for s in req.slots) >= 2          # the best, a0107
    assert "sq256 (32 blocks), rect (48 blocks) on 132 SMs" in req.slots[0].direction and "split-K" in req.slots[0].direction
    for i in range(req.n):
        full = req.system + req.static_prefix + req.prompt_for(i)
        assert len(full) <= 0.75 * _old_chars(), (i, len(full), _old_chars())
        # nothing lost: the best's whole source and diagnosis, the pattern once, a0207 by name, the ledger
        assert opt._source(opt.state.best).split("// matmul_f32: shared-memory tiled SGEMM")[1][:2000] in full
        assert full.count("const int a_frag = (warp / WARPS_N) * WM + (lane / LN) * 4;") == 1
        assert "## a0207: 71.00 µs" in full and "the expert pattern gemm_simt_warptile" in full
        assert all(f"- {c} (m=" in full for c in ("sq256", "rect", "large"))
        assert "# Attempt ledger" in full and "NVRTC targets `sm_90a`: `wgmma.mma_async`" in full
        # the stable sections come first, this proposal's own last
        assert full.index("# Kernels from the archive") < full.index("# Current best") < full.index("# Attempt ledger") \
            < full.index("# Start from") < full.index("# Direction for this proposal")
        assert "# Earlier correct kernels" in full and "## a0000" not in full and "## a0058" not in full
    # the proposals share everything up to their own section
    shared = {s.prompt[:s.prompt.index("# Start from")] for s in req.slots}
    assert len(shared) == 1


def test_a_diff_edit_lands_on_exactly_the_kernel_the_prompt_shows_as_its_start():
    """Issue 32 item 3: the system prompt said edits apply to the current best while the loop
    applied them to the slot's parent."""
    from tests.support import s9_run
    from kernel_forge.proposers.answer import apply_edits
    from kernel_forge.search.slots import Slot

    opt = s9_run.optimizer()
    by_id = {a.id: a for a in opt.state.attempts}
    other, best = by_id["a0207"], opt.state.best
    req = opt._request([Slot(direction="d1", parent=other), Slot(direction="d2", parent=best)],
                       opt.state.iteration + 1)
    assert "edits to exactly the kernel this proposal starts from" in req.system
    line = "    const int a_frag = (warp / WARPS_N) * WM + (lane / LN) * 4;"     # the warp-tiled code only
    diff = f"<<<<<<< SEARCH\n{line}\n=======\n{line}  // edited\n>>>>>>> REPLACE"
    assert "# Start from a0207 for this proposal" in req.prompt_for(0) and "edits apply to a0207" in req.prompt_for(0)
    assert "# Start from the current best, a0107" in req.prompt_for(1) and "edits apply to a0107" in req.prompt_for(1)
    edited, problem = apply_edits(req.parent_for(0), diff)
    assert problem is None and f"{line}  // edited" in edited and req.parent_for(0) == opt._source(other)
    assert apply_edits(req.parent_for(1), diff)[0] is None                  # the best has no such line
    assert req.parent_for(1) == opt._source(best)
    # a0207 was never profiled in that run: its prompt says so
    assert "(no Nsight Compute profile of a0207 yet" in req.prompt_for(0)


def test_the_resume_dry_run_shows_every_proposal_of_the_iteration():
    from tests.support import s9_run

    r = CliRunner().invoke(cli, ["optimize", "--resume", str(s9_run.run_path()), "--dry-run"])
    assert r.exit_code == 0, r.output
    for i in range(1, 5):
        assert f"=== user prompt: dynamic part of proposal {i} of 4 ===" in r.output
    assert r.output.count("# Direction for this proposal") == 4


def test_a_best_without_a_profile_is_said_to_have_none():
    """Issue 32: every kernel a prompt shows to start from is profiled, or the prompt says it is not."""
    _, dyn = prompt_parts(diagnosis=rec.diagnosis(with_profile=False))
    assert "(no Nsight Compute profile of a0004 yet: the figures above are the harness's own)" in dyn
    _, dyn = prompt_parts()
    assert "no Nsight Compute profile" not in dyn and "\n  ncu: DRAM" in dyn
