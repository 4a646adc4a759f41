"""JUnit XML from ``kforge eval --junit`` and ``kforge gate --junit``, checked against the form
CI systems read.

:func:`check_junit` is a structural validator of the Jenkins/Ant JUnit schema (the
``junit-10.xsd`` that Jenkins ships, which GitLab's and the GitHub Actions reporters' parsers
accept): ``testsuites`` holds only ``testsuite`` elements; a ``testsuite`` must have ``name``,
``tests``, ``failures``, ``errors`` and ``time`` (plus the optional ``skipped``, ``timestamp``,
``hostname``, ``id``, ``package``), counts that agree with its test cases, and children in the
order ``properties?``, ``testcase*``, ``system-out?``, ``system-err?``; a ``testcase`` must have
``name``, ``classname`` and a numeric ``time`` and holds at most one of ``skipped``, ``error``,
``failure``, then ``system-out``/``system-err``; ``failure`` and ``error`` carry ``message`` and
``type``.  GitLab shows a failure's text and keeps only the first of equal test names, so those
are checked too.
"""
from __future__ import annotations

import hashlib
import json
import re
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest
from click.testing import CliRunner

from kernel_forge.ci import evaluate
from kernel_forge.reports import junit
from kernel_forge.app.cli import cli

from tests.support.fakes import ScriptedGate, vector_add

ROOT = Path(__file__).resolve().parents[2]
DECIMAL = re.compile(r"^\d+(\.\d+)?$")
TIMESTAMP = re.compile(r"^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}$")
SUITES_ATTRS = {"name", "time", "tests", "failures", "errors", "skipped", "disabled"}
SUITE_ATTRS = {"name", "tests", "failures", "errors", "skipped", "disabled", "time", "timestamp", "hostname", "id",
               "package", "file"}
SUITE_REQUIRED = {"name", "tests", "failures", "errors", "time"}
CASE_ATTRS = {"name", "classname", "time", "assertions", "status", "file", "line"}
OUTCOMES = ("skipped", "error", "failure")


class NotJUnit(AssertionError):
    pass


def _need(cond: bool, what: str) -> None:
    if not cond:
        raise NotJUnit(what)


def check_junit(data: bytes) -> ET.Element:
    """Raise NotJUnit unless ``data`` is JUnit XML of the Jenkins/Ant form (see the module)."""
    root = ET.fromstring(data)
    _need(root.tag == "testsuites", f"root is <{root.tag}>, not <testsuites>")
    _need(set(root.attrib) <= SUITES_ATTRS, f"testsuites attributes {set(root.attrib) - SUITES_ATTRS}")
    totals = dict.fromkeys(("tests", "failures", "errors", "skipped"), 0)
    for suite in root:
        _need(suite.tag == "testsuite", f"<{suite.tag}> in <testsuites>")
        _need(SUITE_REQUIRED <= set(suite.attrib), f"testsuite lacks {SUITE_REQUIRED - set(suite.attrib)}")
        _need(set(suite.attrib) <= SUITE_ATTRS, f"testsuite attributes {set(suite.attrib) - SUITE_ATTRS}")
        _need(suite.get("name") != "", "empty testsuite name")
        _need(DECIMAL.match(suite.get("time")) is not None, f"testsuite time {suite.get('time')!r}")
        if "timestamp" in suite.attrib:
            _need(TIMESTAMP.match(suite.get("timestamp")) is not None, f"timestamp {suite.get('timestamp')!r}")
        order = [c.tag for c in suite]
        rank = {"properties": 0, "testcase": 1, "system-out": 2, "system-err": 3}
        _need(all(t in rank for t in order), f"unexpected children {set(order) - set(rank)}")
        _need([rank[t] for t in order] == sorted(rank[t] for t in order), f"children out of order: {order}")
        _need(order.count("properties") <= 1, "several <properties>")
        for props in suite.findall("properties"):
            for p in props:
                _need(p.tag == "property" and {"name", "value"} <= set(p.attrib), "a malformed property")
        counts = dict.fromkeys(("failure", "error", "skipped"), 0)
        names = set()
        cases = suite.findall("testcase")
        for case in cases:
            _need({"name", "classname", "time"} <= set(case.attrib), f"testcase lacks {set(case.attrib) ^ {'name'}}")
            _need(set(case.attrib) <= CASE_ATTRS, f"testcase attributes {set(case.attrib) - CASE_ATTRS}")
            _need(DECIMAL.match(case.get("time")) is not None, f"testcase time {case.get('time')!r}")
            key = (case.get("classname"), case.get("name"))
            _need(key not in names, f"duplicate test case {key}")
            names.add(key)
            tags = [c.tag for c in case]
            outcome = [t for t in tags if t in OUTCOMES]
            _need(len(outcome) <= 1, f"testcase {key} has {outcome}")
            _need(all(t in OUTCOMES + ("system-out", "system-err") for t in tags), f"testcase children {tags}")
            _need(tags[:len(outcome)] == outcome, f"testcase {key}: the outcome must come first ({tags})")
            for c in case:
                if c.tag in ("failure", "error"):
                    _need({"message", "type"} <= set(c.attrib), f"<{c.tag}> lacks message/type")
                    _need((c.text or "").strip() == c.get("message").strip(), "failure text differs from its message")
                counts[c.tag] = counts.get(c.tag, 0) + 1
        _need(int(suite.get("tests")) == len(cases), "tests count")
        _need(int(suite.get("failures")) == counts["failure"], "failures count")
        _need(int(suite.get("errors")) == counts["error"], "errors count")
        _need(int(suite.get("skipped", 0)) == counts["skipped"], "skipped count")
        for k, n in (("tests", len(cases)), ("failures", counts["failure"]), ("errors", counts["error"]),
                     ("skipped", counts["skipped"])):
            totals[k] += n
    for k, n in totals.items():
        if k in root.attrib:
            _need(int(root.get(k)) == n, f"testsuites {k} count")
    return root


# ------------------------------------------------------------------------------ the validator itself

GOOD = b"""<testsuites><testsuite name="s" tests="2" failures="1" errors="0" skipped="0" time="0.5">
<testcase classname="t.k" name="a" time="0.1"><failure type="mismatch" message="m">m</failure></testcase>
<testcase classname="t.k" name="b" time="0.1"/></testsuite></testsuites>"""


@pytest.mark.parametrize("broken", [
    GOOD.replace(b' name="s"', b""),                                        # testsuite without a name
    GOOD.replace(b'failures="1"', b'failures="0"'),                         # counts disagree
    GOOD.replace(b'name="b"', b'name="a"'),                                 # duplicate test name
    GOOD.replace(b'<testcase classname="t.k" name="b" time="0.1"/>', b'<testcase classname="t.k" name="b" time="0.1">'
                 b'<failure type="x" message="y">y</failure><error type="x" message="y">y</error></testcase>')
    .replace(b'failures="1"', b'failures="2"'),                             # two outcomes
    GOOD.replace(b'time="0.5"', b'time="soon"'),                            # a time that is not a number
    GOOD.replace(b"<testsuites>", b"<results>").replace(b"</testsuites>", b"</results>"),
    GOOD.replace(b' type="mismatch"', b""),                                 # failure without a type
])
def test_the_validator_rejects_what_ci_systems_reject(broken):
    check_junit(GOOD)
    with pytest.raises(NotJUnit):
        check_junit(broken)


def test_messages_with_markup_and_control_characters_survive():
    case = junit.TestCase("t.k", "n<16M> & more", outcome="failure", type="mismatch",
                          message='c[3] = 1.5 < 2 & "x"\x07\x1b[31m')
    root = check_junit(junit.to_xml([junit.TestSuite("s", [case])]))
    f = root.find("testsuite/testcase/failure")
    assert f.get("message") == 'c[3] = 1.5 < 2 & "x"[31m' and f.text == f.get("message")
    assert root.find("testsuite/testcase").get("name") == "n<16M> & more"


# ------------------------------------------------------------------------------ eval and gate

@pytest.fixture
def scripted(monkeypatch):
    """`kforge eval` / `kforge gate` with the scripted gate in place of the GPU."""
    made = []

    def factory(task, options):
        g = ScriptedGate(task)
        made.append(g)
        return g

    monkeypatch.setattr(evaluate, "default_gate", factory)
    return made


@pytest.fixture
def kforge(monkeypatch):
    monkeypatch.chdir(ROOT)
    runner = CliRunner()
    return lambda *a: runner.invoke(cli, [str(x) for x in a], catch_exceptions=False)


def test_eval_junit_one_case_per_test_case_failures_with_reason_and_message(kforge, scripted, tmp_path):
    k = tmp_path / "wrong.cu"
    k.write_text(vector_add("mismatch 300"))
    out = tmp_path / "eval.xml"
    r = kforge("eval", "manifests/vector_add.json", k, "--junit", out, "--no-baselines")
    assert r.exit_code == 1, r.output
    root = check_junit(out.read_bytes())
    (suite,) = root.findall("testsuite")
    assert suite.get("name") == "kforge eval vector_add wrong.cu"
    cases = {c.get("name"): c for c in suite.findall("testcase")}
    assert list(cases) == ["odd", "tiny", "n16M", "n64M", "holdout"]
    assert {c.get("classname") for c in cases.values()} == {"vector_add.wrong.cu"}
    fail = cases["odd"].find("failure")
    assert fail.get("type") == "mismatch" and "7 elements differ" in fail.get("message")
    assert cases["n16M"].find("failure") is None and "median 150.00 us (p20-p80" in cases["n16M"].findtext("system-out")
    assert (suite.get("tests"), suite.get("failures"), suite.get("errors")) == ("5", "1", "0")
    props = {p.get("name"): p.get("value") for p in suite.find("properties")}
    assert props["task"] == "vector_add" and props["device"] == "NVIDIA H200 (scripted)"


def test_eval_junit_of_a_kernel_that_does_not_compile_is_one_failed_case(kforge, scripted, tmp_path):
    k = tmp_path / "broken.cu"
    k.write_text(vector_add("compile_error 0"))
    out = tmp_path / "eval.xml"
    r = kforge("eval", "manifests/vector_add.json", k, "--junit", out)
    assert r.exit_code == 1
    (case,) = check_junit(out.read_bytes()).findall("testsuite/testcase")
    assert case.get("name") == "kernel" and case.find("failure").get("type") == "compile_error"


def _approvals(tmp_path: Path, entries: list[tuple[str, str, float]]) -> Path:
    """An approvals file over copies of vector_add: (kernel file name, fake script, approved speedup)."""
    manifest = ROOT / "manifests" / "vector_add.json"
    rows = []
    for name, fake, speedup in entries:
        k = tmp_path / name
        if fake is not None:
            k.write_text(vector_add(fake))
        sha = hashlib.sha256(k.read_bytes()).hexdigest() if k.exists() else "0" * 64
        rows.append({"task": "vector_add", "manifest": str(manifest), "kernel": name, "sha256": sha,
                     "speedup_vs_initial": speedup, "tolerance": 0.05})
    ap = tmp_path / "approved.json"
    ap.write_text(json.dumps({"approved": rows}))
    return ap


def test_gate_junit_a_suite_per_kernel_a_case_per_case_and_the_speedup(kforge, scripted, tmp_path):
    ap = _approvals(tmp_path, [("fast.cu", "pass 300", 2.0), ("slower.cu", "pass 400", 3.0),
                               ("wrong.cu", "mismatch 300", 2.0)])
    _approvals_missing = json.loads(ap.read_text())
    _approvals_missing["approved"].append({**_approvals_missing["approved"][0], "kernel": "gone.cu"})
    ap.write_text(json.dumps(_approvals_missing))
    out = tmp_path / "gate.xml"
    r = kforge("gate", ap, "--junit", out, "--json", tmp_path / "gate.json")
    assert r.exit_code == 1, r.output
    root = check_junit(out.read_bytes())
    suites = {s.get("name"): s for s in root.findall("testsuite")}
    assert list(suites) == [f"kforge gate vector_add {k}" for k in ("fast.cu", "slower.cu", "wrong.cu", "gone.cu")]

    fast = {c.get("name"): c for c in suites["kforge gate vector_add fast.cu"].findall("testcase")}
    assert list(fast) == ["odd", "tiny", "n16M", "n64M", "holdout", "speedup"]
    assert all(c.find("failure") is None for c in fast.values())
    assert "x2.00 vs initial" in fast["speedup"].findtext("system-out")

    slower = suites["kforge gate vector_add slower.cu"].find("testcase[@name='speedup']/failure")
    assert slower.get("type") == "slower" and "SLOWER" in slower.get("message")

    wrong = {c.get("name"): c for c in suites["kforge gate vector_add wrong.cu"].findall("testcase")}
    assert wrong["odd"].find("failure").get("type") == "mismatch" and "speedup" not in wrong

    (gone,) = suites["kforge gate vector_add gone.cu"].findall("testcase")
    assert gone.get("name") == "approved kernel" and gone.find("failure").get("type") == "missing"
    assert root.get("failures") == "3"        # slower, wrong, gone


def test_gate_passes_with_exit_0_and_a_clean_report(kforge, scripted, tmp_path):
    ap = _approvals(tmp_path, [("fast.cu", "pass 300", 2.0)])
    out = tmp_path / "gate.xml"
    r = kforge("gate", ap, "--junit", out)
    assert r.exit_code == 0, r.output
    root = check_junit(out.read_bytes())
    assert (root.get("tests"), root.get("failures"), root.get("errors")) == ("6", "0", "0")
    assert len(scripted) == 1 and scripted[0].closed


def test_junit_file_beside_a_missing_folder_is_refused_before_any_gating(kforge, scripted, tmp_path):
    ap = _approvals(tmp_path, [("fast.cu", "pass 300", 2.0)])
    r = kforge("gate", ap, "--junit", tmp_path / "no" / "gate.xml")
    assert r.exit_code == 2 and "--junit" in r.stderr and "does not exist" in r.stderr
    assert scripted == []
