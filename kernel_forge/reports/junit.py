"""JUnit XML for CI systems (``kforge eval --junit``, ``kforge gate --junit``).

The file follows the JUnit XML that Jenkins, GitLab and the GitHub Actions reporters read (the
Ant/Jenkins form): ``<testsuites>`` holding one ``<testsuite>`` per kernel, each with
``name``, ``tests``, ``failures``, ``errors``, ``skipped``, ``time``, ``timestamp`` and
``hostname``, optional ``<properties>``, and one ``<testcase classname= name= time=>`` per case.
A failed case holds ``<failure type="REASON" message="...">`` whose text repeats the message
(GitLab shows the text, not the attribute); a problem of the task or the harness rather than
of the kernel is an ``<error>``; a case that did not run is ``<skipped>``.  Per-case numbers
(median, % of peak) go to the test case's ``<system-out>``.
"""
from __future__ import annotations

import re
import socket
import time
import xml.etree.ElementTree as ET
from dataclasses import dataclass, field
from pathlib import Path

#: reasons that say the task or kernel_forge failed, not the kernel: JUnit errors, not failures
ERROR_REASONS = {"reference_error", "harness_error", "worker_died", "error"}
_BAD_XML = re.compile(r"[\x00-\x08\x0b\x0c\x0e-\x1f\ufffe\uffff]")


def _text(s) -> str:
    """Text safe for XML 1.0 (control characters dropped)."""
    return _BAD_XML.sub("", "" if s is None else str(s))


@dataclass
class TestCase:
    classname: str
    name: str
    time: float = 0.0
    outcome: str = "passed"          #: passed | failure | error | skipped
    type: str = ""                   #: the reason code of a failure or error
    message: str = ""
    output: str = ""                 #: <system-out>: the numbers a reader wants beside the verdict


@dataclass
class TestSuite:
    name: str
    cases: list[TestCase] = field(default_factory=list)
    time: float = 0.0
    properties: dict = field(default_factory=dict)

    def count(self, outcome: str) -> int:
        return sum(c.outcome == outcome for c in self.cases)


def to_xml(suites: list[TestSuite], *, name: str = "kforge") -> bytes:
    root = ET.Element("testsuites", {
        "name": name, "tests": str(sum(len(s.cases) for s in suites)),
        "failures": str(sum(s.count("failure") for s in suites)),
        "errors": str(sum(s.count("error") for s in suites)),
        "skipped": str(sum(s.count("skipped") for s in suites)),
        "time": f"{sum(s.time for s in suites):.3f}"})
    stamp = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime())
    host = _text(socket.gethostname()) or "localhost"
    for i, s in enumerate(suites):
        el = ET.SubElement(root, "testsuite", {
            "name": _text(s.name), "tests": str(len(s.cases)), "failures": str(s.count("failure")),
            "errors": str(s.count("error")), "skipped": str(s.count("skipped")), "time": f"{s.time:.3f}",
            "timestamp": stamp, "hostname": host, "id": str(i)})
        if s.properties:
            props = ET.SubElement(el, "properties")
            for k, v in s.properties.items():
                ET.SubElement(props, "property", {"name": _text(k), "value": _text(v)})
        for c in s.cases:
            tc = ET.SubElement(el, "testcase", {"classname": _text(c.classname), "name": _text(c.name),
                                                "time": f"{c.time:.3f}"})
            if c.outcome == "skipped":
                ET.SubElement(tc, "skipped", {"message": _text(c.message)})
            elif c.outcome in ("failure", "error"):
                f = ET.SubElement(tc, c.outcome, {"type": _text(c.type or c.outcome), "message": _text(c.message)})
                f.text = _text(c.message)
            if c.output:
                ET.SubElement(tc, "system-out").text = _text(c.output)
    ET.indent(root)
    return b'<?xml version="1.0" encoding="UTF-8"?>\n' + ET.tostring(root, encoding="utf-8") + b"\n"


def write(path: str | Path, suites: list[TestSuite], *, name: str = "kforge") -> Path:
    from kernel_forge.evidence.run_dir import atomic_write

    p = Path(path)
    atomic_write(p, to_xml(suites, name=name), private=False)
    return p


def _unique(cases: list[TestCase]) -> list[TestCase]:
    """Test case names unique within a class (GitLab keeps only the first of equal names)."""
    seen: dict[tuple[str, str], int] = {}
    for c in cases:
        k = (c.classname, c.name)
        seen[k] = seen.get(k, 0) + 1
        if seen[k] > 1:
            c.name = f"{c.name} ({seen[k]})"
    return cases


def _numbers(case: dict) -> str:
    t = case.get("timing") or {}
    parts = []
    if t.get("median") is not None:
        parts.append(f"median {t['median']:.2f} us (p20-p80 {t.get('p20', 0):.2f}-{t.get('p80', 0):.2f})")
    for key, label in (("pct_peak_bw", "% of peak bandwidth"), ("pct_peak_flops", "% of fp32 peak")):
        if case.get(key) is not None:
            parts.append(f"{case[key]:.1f} {label}")
    if case.get("speedup_vs_initial"):
        parts.append(f"x{case['speedup_vs_initial']:.2f} vs initial")
    if case.get("variant"):          # a dispatch rule: the line this case ran with
        v = case["variant"]
        parts.append(f"dispatch line {v['branch'] + 1} ({v['when']}): "
                     + ", ".join(f"{k}={x}" for k, x in sorted(v["defines"].items())))
    return "; ".join(parts)


def case_outcome(passed: bool, reason: str) -> str:
    if passed:
        return "passed"
    if reason == "skipped":
        return "skipped"
    return "error" if reason in ERROR_REASONS else "failure"


def evaluation_cases(classname: str, ev: dict) -> list[TestCase]:
    """One test case per case of an Evaluation JSON (or per eval result); an evaluation that
    failed before any case ran (compile error, static rule) is one test case named after it."""
    cases = []
    for c in ev.get("cases") or []:
        cases.append(TestCase(classname, c["name"], outcome=case_outcome(c.get("passed", False), c.get("reason", "")),
                              type=c.get("reason", ""), message=c.get("message", ""), output=_numbers(c)))
    if not cases:
        cases.append(TestCase(classname, "kernel", outcome=case_outcome(ev.get("passed", False), ev.get("reason", "")),
                              type=ev.get("reason", ""), message=ev.get("message", "")))
    n = len(cases)
    for c in cases:
        c.time = float(ev.get("seconds") or 0.0) / n
    return _unique(cases)


def eval_suites(result: dict) -> list[TestSuite]:
    """The suite of one ``kforge eval`` result (report.eval_json)."""
    label = Path(str(result.get("candidate", "kernel"))).name
    classname = f"{result['task']}.{label}"
    device = result.get("device") or {}
    suite = TestSuite(name=f"kforge eval {result['task']} {label}", cases=evaluation_cases(classname, result),
                      time=float(result.get("wall_seconds") or result.get("seconds") or 0.0),
                      properties={k: v for k, v in {"task": result["task"], "manifest": result.get("manifest"),
                                                    "kernel": result.get("candidate"),
                                                    "device": device.get("name"), "arch": device.get("arch"),
                                                    "score_us": (result.get("score") or {}).get("candidate_us")}.items()
                                  if v is not None})
    return [suite]


def error_suites(command: str, exc: BaseException, *, subject: str = "") -> list[TestSuite]:
    """A suite of one ``<error>`` test case saying why ``command`` could not run (no GPU, bad
    input, an internal error): CI then shows the reason instead of a missing report."""
    code = 130 if isinstance(exc, KeyboardInterrupt) else getattr(exc, "exit_code", 4)
    kind = {1: "failed", 2: "bad_input", 3: "environment", 130: "interrupted"}.get(code, "internal_error")
    message = (str(exc) if code in (1, 2, 3) else "interrupted (Ctrl-C)" if code == 130
               else f"internal error: {type(exc).__name__}: {exc}")
    case = TestCase(f"kforge.{command}", subject or command, outcome="error", type=kind,
                    message=f"{message} (kforge {command} exited with code {code})")
    return [TestSuite(name=f"kforge {command}" + (f" {subject}" if subject else ""), cases=[case],
                      properties={"exit_code": code})]


def gate_suites(rows: list[dict]) -> list[TestSuite]:
    """One suite per approved kernel of ``kforge gate`` (regression.run_regression rows): a test
    case per case of its evaluation, and one for the speedup it must keep."""
    suites = []
    for r in rows:
        classname = f"{r['task']}.{Path(str(r['kernel'])).name}"
        cases = []
        ev = r.get("evaluation")
        if ev is not None:
            cases = evaluation_cases(classname, ev)
        if "speedup" in r:
            ok = r["ok"]
            cases.append(TestCase(classname, "speedup", outcome="passed" if ok else "failure",
                                  type="" if ok else "slower", message="" if ok else r["detail"], output=r["detail"]))
        elif not cases or all(c.outcome == "passed" for c in cases):
            # it never reached a timed comparison: missing, changed, or re-measurement failed
            cases.append(TestCase(classname, "approved kernel", outcome="passed" if r["ok"] else "failure",
                                  type=r.get("verdict") or r.get("problem") or "gate", message=r["detail"]))
        suites.append(TestSuite(name=f"kforge gate {r['task']} {r['kernel']}", cases=_unique(cases),
                                time=float(r.get("seconds") or 0.0),
                                properties={k: v for k, v in {"task": r["task"], "kernel": r["kernel"],
                                                              "approved_speedup": r.get("approved_speedup"),
                                                              "speedup": r.get("speedup"), "floor": r.get("floor")}.items()
                                            if v is not None}))
    return suites
