"""The rules on the compiled code (common/compiled_rules.py): what the PTX calls and reads, however
the source spelled it, refused by `kforge compile` (exit 2, with the line), `kforge validate` and the
gate (static_rule, before any GPU); every honest kernel passes them.  NVRTC, no GPU."""
from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from kernel_forge.app.cli import cli
from kernel_forge.common import compiled_rules, static_rules
from kernel_forge.config.gate_settings import GateOptions
from kernel_forge.gate.gate import Gate
from kernel_forge.gpu.nvrtc import compile_source
from kernel_forge.kernels import library
from kernel_forge.model.candidate import load_candidate, parse_candidate
from kernel_forge.model.task import load_task

ROOT = Path(__file__).resolve().parents[2]
MANIFESTS = ROOT / "manifests"

HEAD = "// kforge: grid = [cdiv(n, 256)]\n// kforge: block = [256]\n"
BODY = "    int i = blockIdx.x * blockDim.x + threadIdx.x;\n    if (i < n) c[i] = a[i] + b[i];\n"
ENTRY = 'extern "C" __global__ void vector_add(const float* a, const float* b, float* c, int n)\n{\n'

#: name -> (source, the rule, the kernel line the finding must name): each spelled past the text rules
SPELLINGS = {
    "malloc pasted by a macro": (HEAD + "#define CAT(x, y) x##y\n" + ENTRY + BODY
                                 + "    float* p = (float*)CAT(mal, loc)(16);\n    if (p) c[0] = p[0];\n"
                                 + "    CAT(fr, ee)(p);\n}\n", "device_heap", 8),
    "malloc declared by the kernel itself under another spelling": (
        HEAD + '#define ALLOC mall##oc\nextern "C" __device__ void* ALLOC(size_t);\n' + ENTRY + BODY
        + "    float* p = (float*)ALLOC(64);\n    if (p) c[0] = p[0];\n}\n", "device_heap", 9),
    "a heap allocation through a macro that hides new": (
        HEAD + "#define MAKE(T) ne##w T[4]\n" + ENTRY + BODY + "    float* p = MAKE(float);\n"
        + "    p[0] = 1.0f;\n    c[0] = p[0];\n}\n", "device_heap", 8),
    "the aligned device malloc": (HEAD + ENTRY + BODY + "    void* p = __nv_aligned_device_malloc(64, 16);\n"
                                  "    if (p) c[0] = *(float*)p;\n}\n", "device_heap", 7),
    "clock64 called as a function": (HEAD + ENTRY + BODY + "    if (i == 0 && clock64() == 7) c[0] = 0.0f;\n}\n",
                                     "timer", 7),
    "globaltimer in an inline assembly string split in two": (
        HEAD + ENTRY + BODY + "    unsigned long long t;\n"
        + '    asm volatile("mov.u64 %0, %%global" "timer;" : "=l"(t));\n    if (t == 7) c[0] = 0.0f;\n}\n',
        "timer", 8),
    "managed memory declared through a macro": (
        HEAD + "#define MANAGED __mana##ged__\n__device__ MANAGED unsigned int g_key;\n" + ENTRY + BODY
        + "    if (i == 0) g_key = n;\n}\n", "managed_memory", 9),
    "printf": (HEAD + ENTRY + BODY + '    if (i == 0) printf("%d\\n", n);\n}\n', "device_printf", 7),
}


def _honest_files() -> list[Path]:
    files = sorted((ROOT / "tests" / "honest").glob("*.cu")) + sorted(k.path for k in library.patterns())
    for manifest in sorted(MANIFESTS.glob("*.json")):
        task = load_task(manifest)
        files += [p for p in [task.initial, *task.templates] if p is not None]
    return files


HONEST = _honest_files()


@pytest.fixture
def kforge():
    runner = CliRunner()
    return lambda *args: runner.invoke(cli, [str(a) for a in args], catch_exceptions=False)


@pytest.mark.slow
@pytest.mark.parametrize("path", HONEST, ids=[f"{p.parent.name}/{p.stem}" for p in HONEST])
def test_every_honest_kernel_passes_the_compiled_code_rules(path):
    """CUB, cooperative groups (grid sync too), templates, inline PTX, double atomics: no external
    call, no timer in what NVRTC makes of them."""
    cand = load_candidate(path)
    result = compile_source(cand.source, arch="sm_90", defines=cand.compile_defines(), file_label=path.name)
    assert result.ptx and compiled_rules.check(result.ptx, file_label=path.name) == []


@pytest.mark.parametrize("name", sorted(SPELLINGS))
def test_kforge_compile_refuses_what_the_program_does_however_it_is_spelled(name, kforge, tmp_path):
    source, rule, line = SPELLINGS[name]
    path = tmp_path / "k.cu"
    path.write_text(source)
    assert not [f for f in static_rules.check(source) if f.rule == rule], "the text rules see this one already"
    r = kforge("compile", path, "--arch", "sm_90")
    assert r.exit_code == 2, r.output
    assert f"{path}:{line}:" in r.output and f"({rule})" in r.output and "Traceback" not in r.output, r.output


def test_a_plain_malloc_is_still_refused_by_the_text_rule_first_naming_its_line(kforge, tmp_path):
    path = tmp_path / "k.cu"
    path.write_text(HEAD + ENTRY + BODY + "    float* p = (float*)malloc(16);\n    if (p) c[0] = p[0];\n}\n")
    r = kforge("compile", path, "--arch", "sm_90")
    assert r.exit_code == 2 and f"{path}:7:" in r.output and "(device_heap)" in r.output, r.output
    assert "in the compiled code" not in r.output           # the text rule's own message


def test_assert_is_allowed_and_the_kernel_compiles(kforge, tmp_path):
    path = tmp_path / "k.cu"
    path.write_text(HEAD + ENTRY + BODY + "    assert(n >= 0);\n}\n")
    r = kforge("compile", path, "--arch", "sm_90")
    assert r.exit_code == 0, r.output


def test_validate_refuses_a_template_that_allocates_on_the_heap_by_macro(kforge, tmp_path):
    data = json.loads((MANIFESTS / "vector_add.json").read_text())
    data.pop("$schema", None)
    data.pop("templates", None)
    data["reference"] = {"python": str(ROOT / "references" / "vector_add.py") + ":reference"}
    data["baselines"] = {}
    source = SPELLINGS["malloc pasted by a macro"][0]
    (tmp_path / "k.cu").write_text(source)
    data["initial"] = str(tmp_path / "k.cu")
    (tmp_path / "t.json").write_text(json.dumps(data))
    r = kforge("validate", tmp_path / "t.json", "--arch", "sm_90")
    assert r.exit_code == 2 and "(device_heap)" in r.output and "k.cu:8" in r.output, r.output


@pytest.mark.parametrize("name", ["malloc pasted by a macro", "clock64 called as a function", "printf"])
def test_the_gate_refuses_it_as_static_rule_before_touching_the_gpu(name, monkeypatch):
    import kernel_forge.gate.gate as gate_mod
    import kernel_forge.gpu.driver as driver_mod

    def no_gpu(*_a, **_k):
        raise AssertionError("the gate touched the GPU for a kernel its rules refuse")

    monkeypatch.setattr(gate_mod, "Worker", no_gpu)
    monkeypatch.setattr(gate_mod, "probe_gpu", no_gpu)
    monkeypatch.setattr(driver_mod, "probe", no_gpu)
    source, rule, line = SPELLINGS[name]
    gate = Gate(load_task(MANIFESTS / "vector_add.json"), GateOptions(arch="sm_90"))
    try:
        ev = gate.evaluate(parse_candidate(source, name="k.cu"))
    finally:
        gate.close()
    assert ev.reason == "static_rule" and not ev.passed and ev.cases == [], ev.message
    assert f"line {line}:" in ev.message and f"({rule})" in ev.message, ev.message


PTX_INLINED = """
.extern .func  (.param .b64 func_retval0) malloc
(
	.param .b64 malloc_param_0
)
;
.visible .entry k(
	.param .u64 k_param_0
)
{
	.loc	1 4 0
	ld.param.u64 	%rd1, [k_param_0];
	.loc	2 30 5, function_name $L__info_string0, inlined_at 1 12 9
	call.uni (retval0),
	malloc,
	(
	param0
	);
	.loc	1 13 1
	mov.u64 	%rd4, %clock64;
	ret;
}
	.file	1 "/home/someone/k.cu"
	.file	2 "/usr/include/helper.h"
"""


def test_a_call_inlined_from_a_header_names_the_kernel_line_it_was_inlined_at():
    found = compiled_rules.check(PTX_INLINED, file_label="k.cu")
    assert [(f.rule, f.line, f.name) for f in found] == [("device_heap", 12, "malloc"), ("timer", 13, "%clock64")]
    assert str(found[0]).startswith("line 12: allocates on the device heap (malloc in the compiled code)")


def test_an_unknown_external_function_is_refused_and_one_without_a_program_line_has_no_line():
    ptx = ".extern .func mystery\n(\n)\n;\n.visible .entry k()\n{\n\tcall.uni mystery, ();\n}\n"
    (f,) = compiled_rules.check(ptx, file_label="k.cu")
    assert (f.rule, f.line, f.name) == ("external_call", None, "mystery") and str(f).startswith("calls mystery")
    assert compiled_rules.check(ptx.replace("mystery", "__assertfail"), file_label="k.cu") == []


@pytest.mark.parametrize("reg", ["%clock", "%clock_hi", "%clock64", "%globaltimer", "%globaltimer_lo", "%globaltimer_hi"])
def test_every_timer_register_is_found_and_no_compiler_register_is(reg):
    ptx = (".visible .entry k()\n{\n\t.reg .b64 %rd<4>;\n\t.loc\t1 5 3\n\tmov.u64 \t%rd1, %clockwise_rd2;\n"
           f"\t.loc\t1 6 3\n\tmov.u64 \t%rd2, {reg};\n\tret;\n}}\n\t.file\t1 \"k.cu\"\n")
    (f,) = compiled_rules.check(ptx, file_label="k.cu")
    assert (f.rule, f.line, f.name) == ("timer", 6, reg)
