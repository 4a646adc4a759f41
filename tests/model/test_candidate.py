"""kernel_forge.model.candidate: the `// kforge:` header of a candidate kernel, its launch and tunables."""
from __future__ import annotations

from pathlib import Path

import pytest

from kernel_forge.model.candidate import Candidate, Launch, load_candidate, parse_candidate
from kernel_forge.common.errors import CandidateError, ExpressionError

MANIFESTS = Path(__file__).resolve().parents[2] / "manifests"

BODY = 'extern "C" __global__ void k(const float* a, float* c, int n)\n{\n    c[0] = a[0];\n}\n'

FULL = """// kforge: grid = [cdiv(n, BLOCK * VEC)]
// kforge: block = [BLOCK]
// kforge: shared_mem = BLOCK * 4
// kforge: tune BLOCK = [64, 128, 256]
// kforge: tune VEC = [1, 2, 4]
// kforge: define BLOCK = 128
// kforge: constraint BLOCK * VEC <= 512
""" + BODY


def cand_error(source: str, name: str = "cand.cu") -> CandidateError:
    with pytest.raises(CandidateError) as ei:
        parse_candidate(source, name=name)
    return ei.value


# -- parsing -----------------------------------------------------------------------------------

def test_full_header():
    c = parse_candidate(FULL, name="k.cu")
    assert c.name == "k.cu"
    assert c.source == FULL
    assert c.launch == Launch(grid=("cdiv(n, BLOCK * VEC)",), block=("BLOCK",), shared_mem="BLOCK * 4")
    assert c.tunables == {"BLOCK": (64, 128, 256), "VEC": (1, 2, 4)}
    # the explicit define wins; VEC defaults to its first tune value
    assert c.defines == {"BLOCK": 128, "VEC": 1}
    assert c.constraints == ("BLOCK * VEC <= 512",)
    assert c.compile_defines() == {"BLOCK": 128, "VEC": 1}
    assert list(c.compile_defines()) == ["BLOCK", "VEC"]


def test_numbers_in_lists_are_numbers():
    c = parse_candidate("// kforge: grid = [4, 2]\n// kforge: block = [32, 8, 1]\n" + BODY)
    assert c.launch.grid == (4, 2)
    assert c.launch.block == (32, 8, 1)
    assert all(isinstance(x, int) for x in c.launch.grid + c.launch.block)
    assert c.launch.shared_mem == 0


def test_scalar_value_is_a_one_dimensional_list():
    c = parse_candidate("// kforge: grid = cdiv(n, 256)\n// kforge: block = 256\n" + BODY)
    assert c.launch.grid == ("cdiv(n, 256)",)
    assert c.launch.block == (256,)


def test_commas_inside_calls_do_not_split():
    c = parse_candidate("// kforge: grid = [max(1, cdiv(n, 256)), min(m, 65535)]\n"
                        "// kforge: block = [256]\n" + BODY)
    assert c.launch.grid == ("max(1, cdiv(n, 256))", "min(m, 65535)")


def test_header_spacing_and_placement():
    src = BODY + "   //kforge:block=[64]\n\t//  kforge:   grid = [2]   \n"
    c = parse_candidate(src)
    assert c.launch.block == (64,)
    assert c.launch.grid == (2,)


def test_float_tunables_and_defines():
    c = parse_candidate("// kforge: tune ALPHA = [0.5, 1.5]\n// kforge: define EPS = 1e-05\n" + BODY)
    assert c.tunables == {"ALPHA": (0.5, 1.5)}
    assert c.defines == {"ALPHA": 0.5, "EPS": 1e-05}


def test_no_header_uses_manifest_launch():
    c = parse_candidate(BODY, name="plain.cu")
    assert c.launch is None
    assert c.tunables == {} and c.defines == {} and c.constraints == ()
    assert c.configurations() == [{}]
    assert c.render() == BODY.rstrip("\n")


def test_plain_comments_are_not_headers():
    c = parse_candidate("// grid = [1]\n// kforge is great\n" + BODY)
    assert c.launch is None


@pytest.mark.parametrize("path", sorted(MANIFESTS.glob("*.cu")), ids=lambda p: p.stem)
def test_bundled_kernels_parse(path):
    c = load_candidate(path)
    assert c.name == str(path)
    assert c.source == path.read_text()


# -- errors ------------------------------------------------------------------------------------

def test_unknown_header_names_file_and_line():
    exc = cand_error(BODY + "// kforge: gird = [1]\n")
    assert exc.file == "cand.cu" and exc.line == 5
    assert str(exc).startswith("cand.cu:5: unknown kforge header 'gird = [1]'")
    assert "tune NAME = [...]" in exc.hint


def test_bad_expression_names_file_and_line():
    exc = cand_error("// kforge: block = [256]\n\n// kforge: grid = [cdiv(n,]\n" + BODY)
    assert exc.line == 3
    msg = str(exc)
    assert msg.startswith("cand.cu:3: bad expression in kforge header: syntax error")
    assert "'cdiv(n,'" in msg


def test_unsafe_expression_is_refused():
    exc = cand_error("\n\n// kforge: grid = [__import__('os')]\n// kforge: block = [1]\n")
    assert exc.line == 3
    assert "unknown function '__import__'" in str(exc)


def test_attribute_in_define_is_refused():
    exc = cand_error("// kforge: define X = a.b\n")
    assert exc.line == 1
    assert "Attribute is not allowed" in str(exc)


def test_tune_values_must_be_numbers():
    exc = cand_error("// kforge: tune B = [64, n]\n")
    assert str(exc) == "cand.cu:1: tunable values must be numbers, got 'n'"


def test_define_must_be_a_number():
    exc = cand_error("\n// kforge: define B = n * 2\n")
    assert str(exc) == "cand.cu:2: tunable values must be numbers, got 'n * 2'"


def test_empty_tune_list():
    assert str(cand_error("// kforge: tune B = []\n")) == "cand.cu:1: empty list"


def test_too_many_dimensions():
    exc = cand_error("// kforge: grid = [1, 1, 1, 1]\n// kforge: block = [32]\n")
    assert str(exc) == "cand.cu:1: grid needs 1 to 3 dimensions"


def test_define_not_among_tune_values():
    exc = cand_error("// kforge: tune B = [64, 128]\n// kforge: define B = 100\n" + BODY)
    assert "define B = 100 is not among its tune values [64, 128]" in str(exc)
    assert exc.file == "cand.cu"


@pytest.mark.parametrize("header", ["// kforge: grid = [1]\n", "// kforge: block = [32]\n"])
def test_grid_without_block_and_block_without_grid(header):
    exc = cand_error(BODY + header)
    assert "a kforge header needs both grid and block" in str(exc)
    assert str(exc).startswith("cand.cu")


def test_define_not_among_tune_values_has_line():
    exc = cand_error("// kforge: tune B = [64, 128]\n// kforge: define B = 100\n" + BODY)
    assert exc.line == 2
    assert str(exc).startswith("cand.cu:2: ")


def test_grid_without_block_has_line():
    exc = cand_error(BODY + "// kforge: grid = [1]\n")
    assert exc.line == 5
    assert str(exc).startswith("cand.cu:5: ")


def test_load_candidate_missing_file(tmp_path):
    p = tmp_path / "nope.cu"
    with pytest.raises(CandidateError) as ei:
        load_candidate(p)
    assert str(ei.value) == f"{p}: cannot read the kernel file: No such file or directory"
    assert ei.value.exit_code == 2


def test_load_candidate_non_utf8(tmp_path):
    p = tmp_path / "bin.cu"
    p.write_bytes(b"\xff\xfe\x00bad")
    with pytest.raises(CandidateError, match="is not UTF-8 text"):
        load_candidate(p)


def test_load_candidate_reads_file(tmp_path):
    p = tmp_path / "k.cu"
    p.write_text("// kforge: grid = [1]\n// kforge: block = [1]\n" + BODY)
    c = load_candidate(p)
    assert c.name == str(p)
    assert c.launch.grid == (1,)


# -- Launch.resolve ----------------------------------------------------------------------------

def test_resolve_pads_to_three_dims_with_tunables_in_scope():
    c = parse_candidate(FULL)
    grid, block, smem = c.launch.resolve({"n": 1000, **c.defines})
    assert grid == (8, 1, 1)          # cdiv(1000, 128 * 1)
    assert block == (128, 1, 1)
    assert smem == 512


def test_resolve_with_other_tunable_values():
    c = parse_candidate(FULL).with_defines({"BLOCK": 256, "VEC": 2})
    assert c.launch.resolve({"n": 1000, **c.defines}) == ((2, 1, 1), (256, 1, 1), 1024)


def test_resolve_two_and_three_dims():
    assert Launch((4, 3), (32, 8)).resolve({}) == ((4, 3, 1), (32, 8, 1), 0)
    assert Launch(("a", "b", "c"), (1, 2, 3), "a*b").resolve({"a": 2, "b": 5, "c": 7}) == \
        ((2, 5, 7), (1, 2, 3), 10)


def test_resolve_whole_float_is_accepted_fraction_is_not():
    assert Launch(("n / 4",), (32,)).resolve({"n": 64}) == ((16, 1, 1), (32, 1, 1), 0)
    with pytest.raises(ExpressionError, match="grid size must be a whole number, got 16.25"):
        Launch(("n / 4",), (32,)).resolve({"n": 65})
    with pytest.raises(ExpressionError, match="block size must be a whole number"):
        Launch((1,), ("n / 4",)).resolve({"n": 65})
    with pytest.raises(ExpressionError, match="shared memory must be a whole number"):
        Launch((1,), (1,), "n / 4").resolve({"n": 65})


def test_resolve_unknown_variable():
    with pytest.raises(ExpressionError, match=r"unknown variable 'BLOCK' \(known: n\)"):
        parse_candidate(FULL).launch.resolve({"n": 10})


def test_launch_to_json():
    assert Launch(("cdiv(n, 256)",), (256,), "B*4").to_json() == \
        {"grid": ["cdiv(n, 256)"], "block": [256], "shared_mem": "B*4"}


# -- configurations ----------------------------------------------------------------------------

def test_configurations_respect_constraints():
    c = parse_candidate(FULL)
    configs = c.configurations()
    assert len(configs) == 8                      # 9 combinations, 256 * 4 > 512 dropped
    assert {"BLOCK": 256, "VEC": 4} not in configs
    assert {"BLOCK": 256, "VEC": 2} in configs
    assert configs[0] == {"BLOCK": 64, "VEC": 1}
    assert all(d["BLOCK"] * d["VEC"] <= 512 for d in configs)


def test_configurations_keep_fixed_defines():
    c = parse_candidate("// kforge: tune B = [1, 2]\n// kforge: define EXTRA = 7\n" + BODY)
    assert c.configurations() == [{"B": 1, "EXTRA": 7}, {"B": 2, "EXTRA": 7}]


def test_configurations_without_tunables():
    c = parse_candidate("// kforge: define X = 3\n" + BODY)
    assert c.configurations() == [{"X": 3}]


def test_constraint_on_unknown_name_excludes_everything():
    c = parse_candidate("// kforge: tune B = [1, 2]\n// kforge: constraint B <= LIMIT\n" + BODY)
    assert c.configurations() == []
    assert c.satisfies_constraints({"LIMIT": 1}) is True     # B = 1 (the default)


def test_satisfies_constraints():
    c = parse_candidate(FULL)
    assert c.satisfies_constraints()
    assert not c.with_defines({"BLOCK": 256, "VEC": 4}).satisfies_constraints()


def test_with_defines_does_not_mutate():
    c = parse_candidate(FULL)
    d = c.with_defines({"VEC": 4})
    assert c.defines == {"BLOCK": 128, "VEC": 1}
    assert d.defines == {"BLOCK": 128, "VEC": 4}


# -- render ------------------------------------------------------------------------------------

def test_render_text():
    c = parse_candidate(FULL)
    assert c.render().splitlines()[:9] == [
        "// kforge: grid = [cdiv(n, BLOCK * VEC)]",
        "// kforge: block = [BLOCK]",
        "// kforge: shared_mem = BLOCK * 4",
        "// kforge: tune BLOCK = [64, 128, 256]",
        "// kforge: tune VEC = [1, 2, 4]",
        "// kforge: define BLOCK = 128",
        "// kforge: define VEC = 1",
        "// kforge: constraint BLOCK * VEC <= 512",
        'extern "C" __global__ void k(const float* a, float* c, int n)',
    ]


@pytest.mark.parametrize("source", [
    FULL,
    BODY,
    "// kforge: grid = [4, 2]\n// kforge: block = [32, 8]\n" + BODY,
    "// kforge: grid = [max(1, cdiv(n, 256))]\n// kforge: block = [256]\n// kforge: shared_mem = 0\n" + BODY,
    BODY + "// kforge: tune T = [0.5, 2]\n// kforge: define EPS = 1e-05\n// kforge: block = [T]\n"
           "// kforge: grid = [1]\n",
])
def test_render_round_trips(source):
    c = parse_candidate(source, name="x.cu")
    r = c.render()
    c2 = parse_candidate(r, name="x.cu")
    assert c2.launch == c.launch
    assert c2.tunables == c.tunables
    assert c2.defines == c.defines
    assert c2.constraints == c.constraints
    assert c2.render() == r                       # idempotent


def test_render_of_changed_defines_replays():
    c = parse_candidate(FULL).with_defines({"BLOCK": 256, "VEC": 2})
    c2 = parse_candidate(c.render())
    assert c2.defines == {"BLOCK": 256, "VEC": 2}
    assert c2.launch.resolve({"n": 1000, **c2.defines}) == ((2, 1, 1), (256, 1, 1), 1024)


def test_sha256_follows_render():
    a = parse_candidate(FULL)
    assert a.sha256 == parse_candidate(a.render()).sha256
    # header order and spacing do not matter, only what they say
    shuffled = "\n".join(reversed(FULL.splitlines()[:7])) + "\n" + BODY
    assert parse_candidate(shuffled).sha256 == a.sha256
    assert a.with_defines({"VEC": 2}).sha256 != a.sha256
    assert len(a.sha256) == 64


def test_candidate_defaults():
    c = Candidate(source=BODY)
    assert c.name == "candidate" and c.launch is None and c.configurations() == [{}]
