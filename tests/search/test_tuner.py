"""Search spaces of a kernel's tunables: counted without listing them, sampled within a budget."""
from __future__ import annotations

import time

import pytest

from kernel_forge.model import candidate as C
from kernel_forge.model.candidate import ConfigCount, configuration_message, parse_candidate

HEAD = "// kforge: grid = [1]\n// kforge: block = [BX * BY]\n"
BODY = 'extern "C" __global__ void k(float* a) { a[0] = 1; }\n'


def kernel(*lines: str) -> C.Candidate:
    return parse_candidate(HEAD + "".join(f"// kforge: {l}\n" for l in lines) + BODY, name="k.cu")


SMALL = [
    ("tune BX = [32, 64, 128]", "tune BY = [1, 2, 4]", "constraint BX * BY <= 256"),
    ("tune BX = [32, 64]", "tune BY = [1, 2]", "tune U = [1, 2, 4]"),
    ("tune BX = [32, 64]", "tune BY = [1, 2]", "tune U = [1, 2, 4]", "constraint U <= BY", "constraint BX > 32"),
    ("tune BX = [32, 64]", "tune BY = [1, 2]", "constraint BX < 0"),
    ("tune BX = [32]", "tune BY = [1]"),                                  # one setting (a repeated value is refused)
    ("tune BX = [32, 64]", "define BY = 4", "constraint BX * BY <= 128"),  # a fixed define in a constraint
    ("tune BX = [32, 64]", "tune BY = [1, 2]", "constraint NOPE > 1"),    # an unknown name: nothing valid
]


@pytest.mark.parametrize("lines", SMALL)
def test_count_agrees_with_listing_on_small_spaces(lines):
    c = kernel(*lines)
    n = c.count_configurations()
    assert isinstance(n, int) and n.exact
    assert n == len(c.configurations())


def test_a_large_space_is_counted_exactly_by_groups_without_listing_it(monkeypatch):
    monkeypatch.setattr(C.Candidate, "configurations", lambda self: pytest.fail("listed the whole space"))
    c = kernel("tune BX = [1, 2, 4, 8, 16, 32, 64, 128, 256, 512]", "tune BY = [1, 2, 4, 8, 16, 32, 64, 128, 256, 512]",
               "tune TM = [1, 2, 3, 4, 5, 6, 7, 8]", "tune TN = [1, 2, 3, 4, 5, 6, 7, 8]", "tune U = [1, 2, 4, 8, 16]",
               "tune S = [0, 1]", "tune V = [1, 2, 4, 8, 16, 32, 64, 128, 256, 512]", "tune W = [1, 2, 3, 4, 5]",
               "constraint BX * BY <= 1024", "constraint TM * TN * U <= 64")
    t0 = time.perf_counter()
    n = c.count_configurations()
    assert time.perf_counter() - t0 < 2
    # BX*BY <= 1024 over two 10-value powers of two: pairs with i + j <= 10 -> 55 + ... counted by hand below
    bx_by = sum(1 for i in range(10) for j in range(10) if 2 ** (i + j) <= 1024)
    tm_tn_u = sum(1 for a in range(1, 9) for b in range(1, 9) for u in (1, 2, 4, 8, 16) if a * b * u <= 64)
    assert n == bx_by * tm_tn_u * 2 * 10 * 5 and n.exact
    assert n.product == 10 * 10 * 8 * 8 * 5 * 2 * 10 * 5 == 3_200_000
    assert configuration_message(n, 24) == f"{int(n)} configurations, gating a sample of 24"


def test_a_group_too_large_to_list_is_estimated_and_says_so(monkeypatch):
    monkeypatch.setattr(C, "ENUMERATE_LIMIT", 100)
    c = kernel("tune A = [" + ", ".join(map(str, range(1, 41))) + "]", "tune B = [" + ", ".join(map(str, range(1, 41))) + "]",
               "constraint A + B <= 40")
    exact = sum(1 for a in range(1, 41) for b in range(1, 41) if a + b <= 40)         # 780 of 1600
    n = c.count_configurations()
    assert not n.exact and abs(int(n) - exact) / exact < 0.1
    assert n.describe().startswith("about ") and configuration_message(n, 10).startswith("about ")


def test_sampling_stays_within_the_budget_is_valid_distinct_and_seeded(monkeypatch):
    monkeypatch.setattr(C.Candidate, "configurations", lambda self: pytest.fail("listed the whole space"))
    c = kernel("tune BX = [1, 2, 4, 8, 16, 32, 64, 128, 256, 512]", "tune BY = [1, 2, 4, 8, 16, 32, 64, 128, 256, 512]",
               "tune TM = [1, 2, 3, 4, 5, 6, 7, 8]", "tune TN = [1, 2, 3, 4, 5, 6, 7, 8]", "tune U = [1, 2, 4, 8, 16]",
               "tune V = [1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18, 19, 20]",
               "constraint BX * BY <= 1024", "constraint TM * TN * U <= 64")
    must = [{}, {"BX": 512}, {"BX": 1024}, {"BX": 512, "BY": 512}]       # defaults, valid, not a value, too big
    t0 = time.perf_counter()
    s = c.sample_configurations(24, 7, must=must)
    assert time.perf_counter() - t0 < 2
    assert len(s) == 24 and len({tuple(sorted(d.items())) for d in s}) == 24
    assert s[0] == c.defines and s[1] == {**c.defines, "BX": 512}
    assert all(d["BX"] * d["BY"] <= 1024 and d["TM"] * d["TN"] * d["U"] <= 64 for d in s)
    assert s == c.sample_configurations(24, 7, must=must)
    assert s != c.sample_configurations(24, 8, must=must)


def test_sampling_a_small_space_gives_all_of_it_at_most():
    c = kernel("tune BX = [32, 64, 128]", "tune BY = [1, 2, 4]", "constraint BX * BY <= 256")
    everything = c.configurations()
    got = c.sample_configurations(100, 0)
    assert sorted(map(sorted, map(dict.items, got))) == sorted(map(sorted, map(dict.items, everything)))
    assert len(c.sample_configurations(3, 0)) == 3
    assert c.sample_configurations(0, 0) == []
    assert kernel("tune BX = [32]", "tune BY = [1]", "constraint BX > 64").sample_configurations(5, 0) == []


def test_config_count_is_an_int():
    n = ConfigCount(5, exact=False, product=9)
    assert n + 1 == 6 and n > 4 and f"{n}" == "5" and n.describe() == "about 5 (estimated)"
    assert configuration_message(3, 24) == "3 configurations, gating all of them"


def test_validate_says_how_large_a_template_space_is_and_stays_fast(tmp_path):
    import json
    import shutil
    from pathlib import Path

    from kernel_forge.authoring.validate import validate_manifest

    root = Path(__file__).resolve().parents[2]
    for name in ("vector_add.cu",):
        shutil.copy(root / "manifests" / name, tmp_path / name)
    shutil.copy(root / "references" / "vector_add.py", tmp_path / "vector_add.py")
    data = json.loads((root / "manifests" / "vector_add.json").read_text())
    data.update(reference={"python": "vector_add.py:reference"}, baselines={}, templates=["big.cu"])
    data["cases"] = [c for c in data["cases"] if c["name"] in ("tiny", "n16M")]
    tunes = "".join(f"// kforge: tune {k} = [{', '.join(str(2 ** i) for i in range(10))}]\n" for k in "ABCDEFG")
    (tmp_path / "big.cu").write_text("// kforge: grid = [cdiv(n, 256)]\n// kforge: block = [256]\n" + tunes
                                     + "// kforge: constraint A * B <= 64\n"
                                     + (root / "manifests" / "vector_add.cu").read_text())
    (tmp_path / "m.json").write_text(json.dumps(data))
    t0 = time.perf_counter()
    report = validate_manifest(tmp_path / "m.json", compile=False)
    assert time.perf_counter() - t0 < 5
    pairs = sum(1 for i in range(10) for j in range(10) if i + j <= 6)
    assert f"template big.cu: {pairs * 10 ** 5} configurations of its tunables" in " ".join(report.warnings)
