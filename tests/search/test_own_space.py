"""Every kernel gets a search: the initial kernel's own tune lines are searched with no
``templates`` entry (and, listed as a template too, as fast as any other: many settings an
iteration, never the old stall), and a kernel with no tune lines on a task no template fits is
searched through a space derived from its source (:mod:`kernel_forge.search.own_space`).  The
gate is the scripted one (tests/support/fakes.py); the kernels are the corpus's 3x3 blur
(bench/wild/blur3x3): ``naive.cu`` (no tune lines) and ``tuned.cu`` (BX/BY/RY, 54 valid settings).
"""
from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import pytest

from kernel_forge.app.budget_line import estimate, render
from kernel_forge.app.run_setup import make_proposer, start_run
from kernel_forge.config.gate_settings import GateOptions
from kernel_forge.config.loop_settings import LoopConfig
from kernel_forge.config.proposer import ProposerConfig
from kernel_forge.model.candidate import Launch, load_candidate, parse_candidate
from kernel_forge.model.task import load_task
from kernel_forge.search.own_space import derive

from tests.support.blur_task import BLUR, blur_task, own_attempts
from tests.support.fakes import ScriptedGate

ROOT = Path(__file__).resolve().parents[2]


class BlurGate(ScriptedGate):
    """Every blur setting passes; its time falls with the distance from BX=64, BY=4, RY=2."""

    def time_us(self, cand, case=None):
        d = cand.defines
        if "RY" not in d:
            return super().time_us(cand, case)
        return 100.0 * (1 + 0.1 * abs(d["BX"].bit_length() - 7) + 0.1 * abs(d["BY"].bit_length() - 3)
                        + 0.1 * abs(d["RY"] - 2))


def run(manifest: Path, tmp_path: Path, gate_cls=BlurGate, **loop):
    loop.setdefault("archive", "off")
    loop.setdefault("dispatch", False)
    loop.setdefault("roof_stop", 0)
    task = load_task(manifest)
    lines: list[str] = []
    opt = start_run(manifest, LoopConfig(**loop), GateOptions(), ProposerConfig(), runs_dir=tmp_path / "runs",
                    gate=gate_cls(task), progress=lines.append)
    summary = opt.run()
    hist = json.loads((opt.run_dir.path / "history.json").read_text())["attempts"]
    return summary, hist, lines


def gated_tuned(hist) -> list[tuple]:
    """The settings gated: the initial kernel's (its declared one) and the tuner's (the bound
    patterns of the blur's kind left out)."""
    return [tuple(sorted(a["defines"].items())) for a in own_attempts(hist)]


# ------------------------------------------------------------------------------ own tune lines

@pytest.mark.parametrize("listed", [False, True], ids=["no templates entry", "also listed as a template"])
def test_an_initial_kernels_own_tune_lines_are_all_gated_in_a_few_large_batches(tmp_path, listed):
    manifest = blur_task(tmp_path, "tuned.cu", ["tuned.cu"] if listed else None)
    summary, hist, lines = run(manifest, tmp_path, tune_time_limit_s=0)
    gated = gated_tuned(hist)
    assert len(gated) == len(set(gated)) == 54 == len(load_candidate(BLUR / "tuned.cu").configurations())
    assert summary["stop_reason"].startswith("proposer_exhausted: every setting")
    # the old stall recorded every setting as a pending "initial" attempt of iteration 0 and
    # printed "iteration 0: 1 gated" until the time limit; now the initial kernel is one attempt
    assert [a["proposer"] for a in hist].count("initial") == 1 and not any(a["status"] == "pending" for a in hist)
    per_iteration = [int(m.group(1)) for m in (re.search(r"iteration \d+: (\d+) gated", x) for x in lines) if m]
    own = [a["iteration"] for a in own_attempts(hist) if a["proposer"] == "tune"]
    assert max(own) <= 3 and per_iteration[0] >= 24       # a full batch from the first iteration (then the bound pattern's)
    assert "tuned.cu: 54 of 54 settings gated" in summary["stop_detail"]   # the initial's setting counted too
    assert summary["best"]["defines"] == {"BX": 64, "BY": 4, "RY": 2}


def test_the_budget_line_names_the_initial_kernels_own_tune_lines(tmp_path):
    task = load_task(blur_task(tmp_path, "tuned.cu", of_no_kind=True))
    line = render(estimate(LoopConfig(), ProposerConfig(), task))[0]
    assert "gates at most 54 settings (every setting of tuned.cu's own tune lines (54))" in line
    assert [t.name for t in make_proposer(ProposerConfig(), task).templates] == ["tuned.cu"]


def test_the_budget_line_names_the_bound_pattern_of_the_blurs_kind_beside_its_own_tune_lines(tmp_path):
    task = load_task(blur_task(tmp_path, "tuned.cu"))
    line = render(estimate(LoopConfig(), ProposerConfig(), task))[0]
    assert "tuned.cu's own tune lines (54)" in line
    assert "bound_stencil2d.cu bound to the task's signature, gated at its default first" in line
    tuner = make_proposer(ProposerConfig(), task)
    assert [t.name for t in tuner.templates] == ["tuned.cu"] and [p.name for p in tuner.bound] == ["bound_stencil2d.cu"]


# ------------------------------------------------------------------------------ derived space

def test_a_kernel_with_no_tune_lines_is_searched_over_a_space_derived_from_its_source(tmp_path):
    task = load_task(blur_task(tmp_path, of_no_kind=True))
    line = render(estimate(LoopConfig(), ProposerConfig(), task))[0]
    assert "at most 0 settings" not in line and "naive.own-space.cu derived from the initial kernel" in line
    assert "block x (KF_BX" in line and "unroll factor of 2 #pragma unroll loops" in line
    summary, hist, lines = run(task.path, tmp_path, max_iterations=2)
    tuned = [a for a in hist if a["proposer"] == "tune"]
    assert len(tuned) >= 40 and all(a["label"] == "naive.own-space.cu" for a in tuned)
    assert {a["defines"]["KF_BX"] for a in tuned} != {16}       # the block shape moves
    assert summary["search"]["spaces"][0]["settings"] > 500


def test_the_derived_space_holds_the_kernel_as_written_and_makes_the_grid_follow_the_block():
    src = (BLUR / "naive.cu").read_text()
    d = derive(src, Launch(("cdiv(w, 16)", "cdiv(h, 16)"), (16, 16)))
    cand = parse_candidate(d.source)
    assert cand.launch.grid == ("cdiv(w, KF_BX)", "cdiv(h, KF_BY)") and cand.launch.block == ("KF_BX", "KF_BY")
    assert cand.defines == {"KF_BX": 16, "KF_BY": 16, "KF_MINB": 1, "KF_U0": 0, "KF_U1": 0}
    assert cand.satisfies_constraints()
    for case_vars in ({"w": 53, "h": 37}, {"w": 4096, "h": 4096}):
        for s in cand.configurations()[:50]:
            grid, block, _ = cand.with_defines(s).launch.resolve({**case_vars, **s})
            assert grid[0] * block[0] >= case_vars["w"] > (grid[0] - 1) * block[0]
            assert block[0] * block[1] <= 1024
    # every kernel line is kept, in order (two pragma lines become macro lines)
    body = [l for l in d.source.splitlines() if not l.startswith(("// kforge:", "#define KF", "#if KF", "#else",
                                                                  "#endif"))]
    assert len(body) == len(src.splitlines())
    assert sum("KF_UNROLL" in l for l in body) == 2 and "__launch_bounds__((KF_BX * KF_BY), KF_MINB)" in d.source


def test_a_kernel_of_no_kind_written_as_projects_write_them_gets_its_space_and_compiles_under_its_name():
    """An RGBA image kernel of C++ linkage taking uchar4 pixels (no kind matches a per-lane map): its
    own space is derived, the entry stays found where it was, and NVRTC compiles each setting to an
    entry the driver finds by the kernel's own name."""
    pytest.importorskip("cuda.bindings.nvrtc")
    from kernel_forge.gpu.nvrtc import compile_source
    from kernel_forge.model.signature import find_entry

    task = load_task(Path(__file__).resolve().parents[1] / "data" / "kinds" / "invert_rgba.json")
    src = ("__global__ void invert_rgba(const uchar4* src, uchar4* dst, int width, int height)\n{\n"
           "    int x = blockIdx.x * blockDim.x + threadIdx.x, y = blockIdx.y * blockDim.y + threadIdx.y;\n"
           "    if (x >= width || y >= height) return;\n    uchar4 p = src[y * width + x];\n"
           "    dst[y * width + x] = make_uchar4(255 - p.x, 255 - p.y, 255 - p.z, p.w);\n}\n")
    d = derive(src, task.launch)
    assert set(d.tunables) == {"KF_BX", "KF_BY", "KF_MINB"}
    assert find_entry(d.source, "invert_rgba")[0].params == task.signature.params
    cand = parse_candidate(d.source)
    for s in cand.configurations()[:3]:
        res = compile_source(d.source, arch="sm_90", defines=s, use_cache=False)
        assert re.findall(r"^\.visible \.entry (\w+)\(", res.ptx, re.M) == ["invert_rgba"]


def test_a_block_size_written_into_the_code_is_not_tuned_but_its_unroll_loops_are():
    src = """extern "C" __global__ void rowsum(const float* x, float* y, int n, int c)
{
    __shared__ float part[256];
    int row = blockIdx.x;
    float s = 0.0f;
    #pragma unroll 4
    for (int i = threadIdx.x; i < c; i += blockDim.x) s += x[row * c + i];
    part[threadIdx.x] = s;
    __syncthreads();
    if (threadIdx.x == 0) { float t = 0; for (int i = 0; i < blockDim.x; ++i) t += part[i]; y[row] = t; }
}
"""
    d = derive(src, Launch(("n",), (256,)))
    cand = parse_candidate(d.source)
    assert "KF_BX" not in cand.tunables and cand.tunables["KF_U0"] == (4, 1, 2, 8)
    assert cand.launch.block == (256,) and "__launch_bounds__(256, KF_MINB)" in d.source
    # a grid-stride kernel whose grid does not name the block may still change its block
    stride = """extern "C" __global__ void scale(float* x, int n)
{
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += blockDim.x * gridDim.x) x[i] *= 2.0f;
}
"""
    assert parse_candidate(derive(stride, Launch((1024,), (128,))).source).launch.block == ("KF_BX",)
    # a fixed grid with a block-indexed kernel and no stride: the grid does not follow, not tuned
    fixed = stride.replace("i += blockDim.x * gridDim.x", "i += 1000000000")
    assert "KF_BX" not in parse_candidate(derive(fixed, Launch((1024,), (128,))).source).tunables


def test_nothing_safe_to_tune_gives_no_space_and_the_tuner_says_what_to_add(tmp_path):
    src = 'extern "C" __global__ void one(float* x, int n)\n{\n    if (threadIdx.x == 0) x[0] = 1.0f;\n}\n'
    assert derive(src, Launch(("n",), ("B",))) is None
    from kernel_forge.proposers.base import Exhausted, ProposalRequest
    from kernel_forge.search.tuner import TuneProposer
    with pytest.raises(Exhausted, match="add // kforge: tune lines"):
        TuneProposer([]).propose(ProposalRequest(system="", prompt="", n=1, iteration=1))


@pytest.mark.parametrize("setting", [{"KF_BX": 16, "KF_BY": 16, "KF_MINB": 1, "KF_U0": 0, "KF_U1": 0},
                                     {"KF_BX": 128, "KF_BY": 2, "KF_MINB": 4, "KF_U0": 1, "KF_U1": 2}])
def test_derived_settings_compile_with_nvrtc(setting):
    from kernel_forge.gpu.nvrtc import compile_source
    d = derive((BLUR / "naive.cu").read_text(), Launch(("cdiv(w, 16)", "cdiv(h, 16)"), (16, 16)))
    res = compile_source(parse_candidate(d.source).source, arch="sm_90", defines=setting, file_label="own.cu")
    assert "warning" not in res.log.lower()


@pytest.mark.slow
def test_a_run_recorded_with_the_old_stall_resumes_and_searches(tmp_path):
    """Runs of the release before hold the initial kernel's further settings as pending "initial"
    attempts that nothing gates; resumed, they are ruled out and the tuner searches."""
    from kernel_forge.app.run_setup import resume_run

    manifest = blur_task(tmp_path, "tuned.cu")
    task = load_task(manifest)
    opt = start_run(manifest, LoopConfig(archive="off", dispatch=False, roof_stop=0, max_iterations=1), GateOptions(),
                    ProposerConfig(), runs_dir=tmp_path / "runs", gate=BlurGate(task))
    opt.run()
    path = opt.run_dir.path / "history.json"
    hist = json.loads(path.read_text())
    first = hist["attempts"][0]
    stray = dict(first, id="a9999", status="pending", reason="", score_us=None, evaluation=None,
                 defines={"BX": 8, "BY": 8, "RY": 1}, best=False, baseline=False)
    (opt.run_dir.path / "attempts" / "a9999.cu").write_text((opt.run_dir.path / first["source_file"]).read_text())
    stray["source_file"] = "attempts/a9999.cu"
    hist["attempts"].insert(1, stray)
    path.write_text(json.dumps(hist))
    resumed = resume_run(opt.run_dir.path, overrides={"max_iterations": 5, "time_limit_s": 30},   # the stall: time_limit
                         gate=BlurGate(task))
    summary = resumed.run()
    assert summary["stop_reason"].startswith("proposer_exhausted: every setting")
    after = {a["id"]: a for a in json.loads(path.read_text())["attempts"]}
    assert after["a9999"]["status"] == "failed" and after["a9999"]["reason"] == "duplicate"


ALL_MANIFESTS = sorted((ROOT / "manifests").glob("*.json")) + sorted((ROOT / "bench" / "wild").glob("*/*.json"))


@pytest.mark.parametrize("manifest", ALL_MANIFESTS, ids=lambda p: p.stem)
def test_no_bundled_or_corpus_kernel_gets_zero_settings(manifest):
    line = render(estimate(LoopConfig(), ProposerConfig(), load_task(manifest)))[0]
    assert "nothing to search" not in line and "at most 0 settings" not in line
    assert re.search(r"gates at most [1-9]\d* settings \(every setting of \S", line), line


def test_the_kernels_own_defines_and_header_launch_are_kept_in_its_derived_space():
    src = """// kforge: grid = [cdiv(n, 128)]
// kforge: block = [128]
// kforge: define SCALE = 3
extern "C" __global__ void scale(float* x, int n)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) x[i] *= SCALE;
}
"""
    cand = parse_candidate(src)
    d = derive(cand.source, cand.launch, own_defines=cand.defines)
    got = parse_candidate(d.source)
    assert got.defines["SCALE"] == 3 and got.defines["KF_BX"] == 128 and "SCALE" not in got.tunables
    assert got.launch.grid == ("cdiv(n, KF_BX)",) and got.launch.block == ("KF_BX",)


def test_the_initial_kernels_tune_lines_get_a_label_of_their_own_beside_a_template_of_the_same_file_name(tmp_path):
    manifest = blur_task(tmp_path, "tuned.cu")
    (tmp_path / "other").mkdir()
    shutil.copy(BLUR / "tuned.cu", tmp_path / "other" / "tuned.cu")
    data = json.loads(manifest.read_text())
    data["templates"] = ["other/tuned.cu"]
    manifest.write_text(json.dumps(data))
    names = [t.name for t in make_proposer(ProposerConfig(), load_task(manifest)).templates]
    assert names == ["tuned.cu", "tuned.initial.cu"]



def _derived_passes_the_checks_before_launch(manifest: Path) -> None:
    from kernel_forge.gate.preflight import check_kernel
    from kernel_forge.search.tuner import own_templates

    task = load_task(manifest)
    if load_candidate(task.initial).tunables:
        pytest.skip("searched over its own tune lines, as written")
    derived = own_templates(task, [])
    if not derived:
        pytest.skip("nothing of it is safe to tune")
    cand = parse_candidate(derived[0].text, name=derived[0].name)
    assert check_kernel(task, cand) > 0          # the entry point's line: found, signature right, launches valid


@pytest.mark.parametrize("manifest", ALL_MANIFESTS, ids=lambda p: p.stem)
def test_a_derived_space_passes_the_gates_checks_before_any_launch(manifest):
    """What the own-space search rewrites must still be a kernel of the task to the gate: its entry
    point found (the __launch_bounds__ it adds has nested parentheses; on the GPU every one of
    1,800 blur-max settings was refused as signature_mismatch once), its signature right, its
    launch valid at every setting."""
    _derived_passes_the_checks_before_launch(manifest)


def test_the_derived_space_of_a_kernel_of_no_kind_passes_the_gates_checks(tmp_path):
    _derived_passes_the_checks_before_launch(blur_task(tmp_path, of_no_kind=True))


def test_a_template_kernels_instance_arguments_and_its_own_bounds_are_respected_and_its_space_compiles():
    from kernel_forge.gpu.nvrtc import compile_source
    from tests.support.template_kernels import RMS

    def space(source, block=256):
        src = f"// kforge: grid = [tokens]\n// kforge: block = [{block}]\n" + source.replace("i += THREADS", "i += blockDim.x")
        return derive(src, parse_candidate(src).launch)

    # the block's literal sizes the kernel through the instance (red[THREADS], THREADS = 256): no block axis
    assert space(RMS.replace("<__half, BLOCK>", "<__half, 256>")) is None
    # bounds written over a template parameter are the kernel's own: no second __launch_bounds__ is added
    d = space(RMS.replace("<__half, BLOCK>", "<__half, 512>"))
    assert d.tunables == {"KF_BX": (256, 32, 64, 128, 512, 1024)} and d.source.count("__launch_bounds__") == 1
    # without bounds: both heads, the declaration's and the definition's, get the same
    d = space(RMS.replace("<__half, BLOCK>", "<__half, 512>").replace("__launch_bounds__(THREADS)\n", "\n"))
    assert d.source.count("__launch_bounds__((KF_BX), KF_MINB)") == 2
    cand = parse_candidate(d.source)
    for setting in ({"KF_BX": 128, "KF_MINB": 2}, {"KF_BX": 1024, "KF_MINB": 1}):
        ptx = compile_source(d.source, arch="sm_90", defines={**cand.defines, **setting}, use_cache=False).ptx
        assert re.search(r"\.maxntid (\d+)", ptx).group(1) == str(setting["KF_BX"])
        assert re.search(r"\.minnctapersm (\d+)", ptx).group(1) == str(setting["KF_MINB"])
