"""The search strategy (kernel_forge/search/spaces.py): settings to gate, neighbours, and kernel identity."""
from __future__ import annotations

from pathlib import Path

import pytest

from kernel_forge.search import spaces as search
from kernel_forge.model.candidate import parse_candidate
from kernel_forge.records.attempt import Attempt
from kernel_forge.model.task import load_task

ROOT = Path(__file__).resolve().parents[2]
TASK = load_task(ROOT / "manifests" / "vector_add.json")

KERNEL = '''// kforge: grid = [cdiv(n, BLOCK)]
// kforge: block = [BLOCK]
// kforge: tune BLOCK = [64, 128, 256, 512]
extern "C" __global__ void vector_add(const float* a, const float* b, float* c, int n)
{
    int i = blockIdx.x * BLOCK + threadIdx.x;   // one element per thread
    if (i < n) c[i] = a[i] + b[i];
}
'''
# the same kernel: other comments, other whitespace, the header in another order and spacing
REFORMATTED = '''/* vector add, reformatted */
// kforge: tune BLOCK = [64, 128, 256, 512]
// kforge:   block = [ BLOCK ]
// kforge: grid = [cdiv(n,BLOCK)]
extern "C" __global__ void vector_add(const float* a,
                                      const float* b, float* c, int n) {
  int i=blockIdx.x*BLOCK+threadIdx.x;
  if(i<n)c[i]=a[i]+b[i];   // same
}
'''


def cand(text=KERNEL, **defines):
    c = parse_candidate(text, name="k.cu")
    return c.with_defines(defines) if defines else c


# ------------------------------------------------------------------------------- identity

def test_normalised_source_ignores_comments_whitespace_and_header():
    assert search.normalise_source(KERNEL) == search.normalise_source(REFORMATTED)
    assert "kforge" not in search.normalise_source(KERNEL) and "one element" not in search.normalise_source(KERNEL)
    assert search.kernel_key(cand(), TASK) == search.kernel_key(cand(REFORMATTED), TASK)
    assert search.body_key(cand()) == search.body_key(cand(REFORMATTED))


def test_normalisation_keeps_what_changes_the_kernel():
    changed = KERNEL.replace("a[i] + b[i]", "a[i] - b[i]")
    assert search.normalise_source(changed) != search.normalise_source(KERNEL)
    # string literals and preprocessor lines are kept as they are
    with_macro = "#define X 1\n#define Y \\\n  2\n" + KERNEL
    norm = search.normalise_source(with_macro)
    assert "\n# define X 1\n" in f"\n{norm}\n" and "# define Y \\\n2" in norm
    assert search.normalise_source('const char* s = "a  //  b";') == 'const char * s = "a  //  b" ;'
    assert search.normalise_source("int a; /* x\n y */ int b;") == search.normalise_source("int a; int b;")


def test_kernel_key_tells_defines_and_launches_apart():
    base = search.kernel_key(cand(BLOCK=128), TASK)
    assert search.kernel_key(cand(BLOCK=256), TASK) != base
    assert search.kernel_key(cand(BLOCK=128.0), TASK) == base                     # 128 and 128.0 are one setting
    # another launch expression that resolves to the same grid on every case: the same kernel
    same = KERNEL.replace("cdiv(n, BLOCK)", "(n + BLOCK - 1) // BLOCK")
    assert search.kernel_key(cand(same, BLOCK=128), TASK) == base
    # a launch that differs on a case: another kernel
    other = KERNEL.replace("cdiv(n, BLOCK)", "cdiv(n, 2 * BLOCK)")
    assert search.kernel_key(cand(other, BLOCK=128), TASK) != base


def test_a_launch_that_does_not_resolve_is_compared_as_text():
    bad = KERNEL.replace("cdiv(n, BLOCK)", "cdiv(n, BLOCK - BLOCK)")   # division by zero on every case
    key = search.launch_key(cand(bad), TASK)
    assert key[0] == "expr" and key[1] == ["cdiv(n,BLOCK-BLOCK)"]
    assert search.kernel_key(cand(bad), TASK) != search.kernel_key(cand(), TASK)


# ------------------------------------------------------------------------------- settings

def test_expand_takes_every_setting_within_the_budget_and_leaves_out_the_tried():
    c = cand()
    assert [d["BLOCK"] for d in search.expand(c, 10)] == [64, 128, 256, 512]
    tried = {(("BLOCK", 64),), (("BLOCK", 256),)}
    assert [d["BLOCK"] for d in search.expand(c, 10, exclude=tried)] == [128, 512]
    everything = {(("BLOCK", v),) for v in (64, 128, 256, 512)}
    assert search.expand(c, 10, exclude=everything) == []


def test_expand_samples_defaults_and_extremes_first_over_budget():
    c = cand()
    picked = [d["BLOCK"] for d in search.expand(c, 3, seed=5)]
    assert picked[:2] == [64, 512] and len(picked) == 3 and len(set(picked)) == 3
    assert picked == [d["BLOCK"] for d in search.expand(c, 3, seed=5)]   # seeded: the same again


def test_expand_of_an_untuned_kernel_is_its_one_setting_or_nothing():
    plain = parse_candidate(KERNEL.replace("// kforge: tune BLOCK = [64, 128, 256, 512]\n", "")
                            .replace("BLOCK", "256"), name="p.cu")
    assert search.expand(plain, 5) == [{}]
    assert search.expand(plain, 5, exclude={()}) == []


def test_refine_steps_one_value_each_way_skipping_the_tried():
    c = cand()
    assert [d["BLOCK"] for d in search.refine(c, {"BLOCK": 128})] == [64, 256]
    assert [d["BLOCK"] for d in search.refine(c, {"BLOCK": 128}, exclude={(("BLOCK", 64),)})] == [256]
    assert [d["BLOCK"] for d in search.refine(c, {"BLOCK": 512})] == [256]


def test_refine_groups_one_per_tuned_proposal_without_neighbours():
    def att(i, label, parent=None, status="passed", tunables=True):
        return Attempt(id=f"a{i:04d}", iteration=1, proposer="m", label=label, parent=parent, status=status,
                       score_us=100.0 + i, tunables={"BLOCK": [64, 128]} if tunables else {})
    batch = [att(1, "x", "a0000"), att(2, "x", "a0000"), att(3, "y", "a0000"), att(4, "y", "a0000", status="failed"),
             att(5, "x", "a0001"),                      # a neighbour of a0001: not a group of its own
             att(6, "z", "a0000", tunables=False)]      # nothing to tune
    groups = search.refine_groups(batch)
    assert [[a.id for a in g] for g in groups] == [["a0001", "a0002"], ["a0003"]]


def test_tune_proposer_reexports_the_search_functions():
    from kernel_forge.search import tuner as tune

    assert tune.configurations_to_try is search.configurations_to_try and tune.neighbours is search.neighbours
    assert tune.TuneProposer.needs_prompt is False


@pytest.mark.parametrize("text", [KERNEL, REFORMATTED])
def test_strip_comments_keeps_line_structure(text):
    assert len(search.strip_comments(text).splitlines()) == len(text.splitlines())
