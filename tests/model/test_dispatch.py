"""Dispatch rules (settings per shape) in a kernel's ``// kforge:`` header: parsing, checks that
name the kernel line, the rule against a task's cases, and what uses it before the GPU (its
variants, one per setting: test_dispatch_variants.py)."""
from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner

from kernel_forge.gate import preflight
from kernel_forge.search import spaces as search
from kernel_forge.model.candidate import parse_candidate
from kernel_forge.app.cli import cli
from kernel_forge.model.dispatch import Rule, problem
from kernel_forge.common.errors import CandidateError, CompileError
from kernel_forge.model.task import load_task

from tests.support.dispatch_kernels import HEAD, KERNEL

ROOT = Path(__file__).resolve().parents[2]
VECTOR_ADD = load_task(ROOT / "manifests" / "vector_add.json")       # cases n = 1000003, 37, 16M, 64M, 3145745
MATMUL = load_task(ROOT / "manifests" / "matmul_f32.json")


def kernel(rule: str, head: str = HEAD) -> str:
    return head + rule + KERNEL


TWO = """// kforge: dispatch n >= 16777216 -> BLOCK=512, ITEMS=1
// kforge: dispatch default -> BLOCK=128, ITEMS=2
"""


def test_a_rule_parses_and_the_kernel_defines_are_those_of_its_default_line():
    cand = parse_candidate(kernel(TWO), name="k.cu")
    assert cand.dispatch.describe() == "n >= 16777216 -> BLOCK=512, ITEMS=1; default -> BLOCK=128, ITEMS=2"
    assert cand.defines == {"BLOCK": 128, "ITEMS": 2}
    assert [b.line for b in cand.dispatch.branches] == [6, 7]


def test_a_rendered_rule_reads_back_the_same_and_replays_on_its_own():
    cand = parse_candidate(kernel(TWO), name="k.cu")
    text = cand.render()
    assert "// kforge: dispatch n >= 16777216 -> BLOCK=512, ITEMS=1\n// kforge: dispatch default -> BLOCK=128, ITEMS=2" in text
    again = parse_candidate(text, name="k.cu")
    assert again.dispatch == cand.dispatch and again.defines == cand.defines and again.sha256 == cand.sha256
    assert again.render() == text


def test_each_case_runs_the_first_line_whose_condition_holds():
    rule = parse_candidate(kernel("""// kforge: dispatch n >= 67108864 -> BLOCK=512
// kforge: dispatch n >= 16777216 -> BLOCK=256
// kforge: dispatch default -> BLOCK=128
"""), name="k.cu").dispatch
    picks = {c.name: rule.pick(c.vars) for c in VECTOR_ADD.cases}
    assert picks == {"odd": 2, "tiny": 2, "n16M": 1, "n64M": 0, "holdout": 2}
    assert rule.defines_for({"n": 1 << 26}) == {"BLOCK": 512, "ITEMS": 1}


def test_a_line_that_sets_some_tunables_keeps_the_define_lines_for_the_rest():
    cand = parse_candidate(kernel("""// kforge: define ITEMS = 2
// kforge: define BLOCK = 256
// kforge: dispatch n >= 16777216 -> BLOCK=128
// kforge: dispatch default -> ITEMS=1
"""), name="k.cu")
    assert [b.defines for b in cand.dispatch.branches] == [{"BLOCK": 128, "ITEMS": 2}, {"BLOCK": 256, "ITEMS": 1}]
    assert cand.defines == {"BLOCK": 256, "ITEMS": 1}


def test_a_rule_round_trips_through_json():
    rule = parse_candidate(kernel(TWO), name="k.cu").dispatch
    assert Rule.from_json(rule.to_json()) == rule
    assert rule.to_json()[-1] == {"when": None, "defines": {"BLOCK": 128, "ITEMS": 2}}


@pytest.mark.parametrize("rule, line, words", [
    ("// kforge: dispatch n >= 16777216 -> BLOCK=512\n", 6, "needs a last line `// kforge: dispatch default"),
    ("// kforge: dispatch default -> BLOCK=512\n// kforge: dispatch default -> BLOCK=128\n", 7,
     "a second dispatch default line (the first is line 6)"),
    ("// kforge: dispatch default -> BLOCK=512\n// kforge: dispatch n > 5 -> BLOCK=128\n", 7, "is never reached"),
    ("// kforge: dispatch n >= -> BLOCK=512\n// kforge: dispatch default -> BLOCK=128\n", 6, "bad dispatch condition"),
    ("// kforge: dispatch n * 2 -> BLOCK=512\n// kforge: dispatch default -> BLOCK=128\n", 6, "is not a comparison"),
    ("// kforge: dispatch BLOCK * n > 9 -> BLOCK=512\n// kforge: dispatch default -> BLOCK=128\n", 6,
     "uses BLOCK, a tunable or define"),
    ("// kforge: dispatch n > 9 -> WARPS=4\n// kforge: dispatch default -> BLOCK=128\n", 6,
     "sets WARPS, which is not a tunable of this kernel (tunables: BLOCK, ITEMS)"),
    ("// kforge: dispatch n > 9 -> BLOCK=64\n// kforge: dispatch default -> BLOCK=128\n", 6,
     "BLOCK=64, which is not among its tune values [128, 256, 512]"),
    ("// kforge: dispatch n > 9 -> BLOCK=512, ITEMS=2\n// kforge: dispatch default -> BLOCK=128\n", 6,
     "breaks the constraint BLOCK * ITEMS <= 512"),
    ("// kforge: dispatch n > 9 -> BLOCK\n// kforge: dispatch default -> BLOCK=128\n", 6, "expected NAME=VALUE"),
    ("// kforge: dispatch n > 9 -> BLOCK=big\n// kforge: dispatch default -> BLOCK=128\n", 6, "must be a number"),
    ("// kforge: dispatch n > 9 -> BLOCK=256, BLOCK=512\n// kforge: dispatch default -> BLOCK=128\n", 6, "set twice"),
    ("// kforge: dispatch n > 9 BLOCK=256\n// kforge: dispatch default -> BLOCK=128\n", 6, "bad dispatch line"),
    ("// kforge: dispatch n > 9 ->\n// kforge: dispatch default -> BLOCK=128\n", 6, "needs a setting after `->`"),
    ("// kforge: dispatch exp(n) > 9 -> BLOCK=256\n// kforge: dispatch default -> BLOCK=128\n", 6,
     "unknown function 'exp'"),
])
def test_a_bad_rule_is_refused_naming_the_kernel_line(rule, line, words):
    with pytest.raises(CandidateError) as err:
        parse_candidate(kernel(rule), name="k.cu")
    assert err.value.line == line
    assert f"k.cu:{line}: " in str(err.value) and words in str(err.value)


@pytest.mark.parametrize("task, rule, line, words", [
    (VECTOR_ADD, "// kforge: dispatch rows > 9 -> BLOCK=512\n// kforge: dispatch default -> BLOCK=128\n", 6,
     "uses rows, which is not a variable of every case of task vector_add (case variables: n)"),
    (VECTOR_ADD, "// kforge: dispatch n > 1 << 40 -> BLOCK=512\n// kforge: dispatch default -> BLOCK=128\n", 6,
     "no case of task vector_add takes the dispatch line `n > 1 << 40 -> BLOCK=512, ITEMS=1`"),
    (VECTOR_ADD, "// kforge: dispatch n > 0 -> BLOCK=512\n// kforge: dispatch default -> BLOCK=128\n", 7,
     "no case of task vector_add takes the dispatch line `default -> BLOCK=128, ITEMS=1`"),
    (VECTOR_ADD, "// kforge: dispatch n // (n - 37) > 0 -> BLOCK=512\n// kforge: dispatch default -> BLOCK=128\n", 6,
     "fails on case tiny: division by zero"),
    (VECTOR_ADD, "// kforge: dispatch n > 9 and n -> BLOCK=512\n// kforge: dispatch default -> BLOCK=128\n", 6,
     "must be true or false"),
])
def test_a_rule_that_cannot_run_on_the_task_is_refused_before_the_gpu_naming_the_line(task, rule, line, words):
    cand = parse_candidate(kernel(rule), name="k.cu")
    message, at = problem(task, cand.dispatch)
    assert at == line and words in message
    with pytest.raises(preflight.KernelRefused) as err:
        preflight.check_kernel(task, cand, file="k.cu")
    assert err.value.reason == "bad_candidate" and err.value.line == line and words in str(err.value)


def test_a_rule_on_the_matmul_template_uses_the_case_variables():
    text = (ROOT / "kernel_forge/kernels/gemm/matmul_f32_regblock.cu").read_text()
    text = text.replace("// kforge: constraint 2 * 4 *", "// kforge: dispatch m*n*k >= 1073741824 -> BM=128, BN=128, "
                        "BK=16, TM=8, TN=8\n// kforge: dispatch default -> BM=32, BN=32, BK=32, TM=4, TN=4\n"
                        "// kforge: constraint 2 * 4 *")
    cand = parse_candidate(text, name="regblock.cu")
    assert problem(MATMUL, cand.dispatch) is None
    assert {c.name: cand.dispatch.pick(c.vars) for c in MATMUL.cases} == {
        "odd": 1, "k1": 1, "row": 1, "sq256": 1, "rect": 1, "large": 0, "holdout": 1}
    preflight.check_kernel(MATMUL, cand)


def test_a_rule_is_a_kernel_of_its_own_for_de_duplication_and_is_gated_whole():
    rule = parse_candidate(kernel(TWO), name="k.cu")
    plain = parse_candidate(kernel(""), name="k.cu").with_defines({"BLOCK": 128, "ITEMS": 2})
    assert rule.defines == plain.defines
    assert search.kernel_key(rule, VECTOR_ADD) != search.kernel_key(plain, VECTOR_ADD)
    assert search.expand(rule, 24) == [{"BLOCK": 128, "ITEMS": 2}]          # not its tunables' space
    assert len(search.expand(plain, 24)) == len(plain.configurations()) == 5


def test_every_setting_of_a_rule_is_compiled_before_the_gpu_and_a_failing_one_names_its_line(tmp_path):
    failing = kernel("// kforge: dispatch n >= 16777216 -> BLOCK=512\n// kforge: dispatch default -> BLOCK=128\n",
                     head=HEAD).replace("#ifndef ITEMS", "#if BLOCK == 512\n#error \"no 512 here\"\n#endif\n#ifndef ITEMS")
    cand = parse_candidate(failing, name="k.cu")
    with pytest.raises(CompileError) as err:
        preflight.compile_kernel(cand, "sm_90", file=str(tmp_path / "k.cu"))
    assert "k.cu:6: the setting of dispatch line `n >= 16777216 -> BLOCK=512, ITEMS=1` does not compile" in str(err.value)
    assert "no 512 here" in err.value.log
    good = parse_candidate(kernel(TWO), name="k.cu")
    res = preflight.compile_kernel(good, "sm_90", file="k.cu")
    assert res.cubin


def test_kforge_compile_compiles_every_line_of_a_rule(tmp_path):
    path = tmp_path / "k.cu"
    path.write_text(kernel(TWO))
    r = CliRunner().invoke(cli, ["compile", str(path), "--arch", "sm_90"], catch_exceptions=False)
    assert r.exit_code == 0, r.output
    lines = [l for l in r.output.splitlines() if l.startswith("compiled")]
    assert len(lines) == 2
    assert "(dispatch line 6: n >= 16777216)" in lines[0] and "(dispatch line 7: default)" in lines[1]


def test_kforge_validate_refuses_a_template_whose_rule_no_case_takes(tmp_path):
    import json
    import shutil
    for f in ("vector_add.json", "vector_add.cu"):
        shutil.copy(ROOT / "manifests" / f, tmp_path / f)
    (tmp_path / "rule.cu").write_text(kernel("// kforge: dispatch n > 1 << 40 -> BLOCK=512\n"
                                             "// kforge: dispatch default -> BLOCK=128\n"))
    data = json.loads((tmp_path / "vector_add.json").read_text())
    data["reference"]["python"] = str(ROOT / "references" / data["reference"]["python"].split("/")[-1])
    data["baselines"] = {}
    data["templates"] = ["rule.cu"]
    data.pop("$schema", None)
    (tmp_path / "vector_add.json").write_text(json.dumps(data))
    r = CliRunner().invoke(cli, ["validate", str(tmp_path / "vector_add.json"), "--no-compile"])
    assert r.exit_code == 2, r.output
    assert "no case of task vector_add takes the dispatch line `n > 1 << 40 -> BLOCK=512, ITEMS=1`" in r.output


def test_the_system_prompt_explains_dispatch_lines():
    from kernel_forge.search.prompts import system_prompt
    assert "// kforge: dispatch default" in system_prompt()


def _many_lines(count: int) -> str:
    """vector_add with a rule of ``count`` lines (and a default) over two settings."""
    head = ["// kforge: grid = [cdiv(n, B)]", "// kforge: block = [B]", "// kforge: tune B = [128, 256]"]
    head += [f"// kforge: dispatch n == {i} -> B=128" for i in range(count)] + ["// kforge: dispatch default -> B=256"]
    return "\n".join(head) + "\n" + (ROOT / "manifests" / "vector_add.cu").read_text()


def test_a_rule_of_20000_lines_compiles_each_distinct_setting_once(monkeypatch):
    """Issue 33: 20,000 dispatch lines took 43 s to compile, each line's setting compiled (and
    the whole source hashed) again: time grew as the square of the count."""
    from kernel_forge.gpu import nvrtc

    calls = []
    monkeypatch.setattr(nvrtc, "compile_source",
                        lambda source, *, arch, defines, file_label, headers=None: calls.append(defines) or "res")
    cand = parse_candidate(_many_lines(20_000), name="k.cu")
    assert len(cand.dispatch.branches) == 20_001
    assert preflight.compile_kernel(cand, "sm_90", file="k.cu") == "res"
    assert calls == [{"B": 128}, {"B": 256}]                # the default's setting last: its result is returned
    assert [b.line for b in preflight.distinct_settings(cand.dispatch)] == [4, 20_004]


def test_the_compile_cache_key_hashes_a_source_once_however_many_settings(monkeypatch):
    """The bytes hashed for N settings of one source grow with N times the settings, not N times the
    source (an operation count, not a time)."""
    import hashlib as real

    from kernel_forge.gpu import nvrtc

    hashed = [0]

    class Counting:
        def __init__(self, data=b""):
            self.h = real.sha256(data)
            hashed[0] += len(data)

        def update(self, data):
            hashed[0] += len(data)
            self.h.update(data)

        def hexdigest(self):
            return self.h.hexdigest()

    class Hashlib:
        sha256 = Counting

    monkeypatch.setattr(nvrtc, "hashlib", Hashlib)
    nvrtc.source_digest.cache_clear()
    source = _many_lines(5_000)
    keys = {nvrtc._cache_key(source, (f"-DB={b}", f"-DX={i}"), "13.0") for i in range(1000) for b in (128, 256)}
    assert len(keys) == 2000
    assert hashed[0] < 2 * len(source) + 2000 * 1000, hashed[0]      # was 2000 * len(source): 600 MB
