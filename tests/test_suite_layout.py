"""The test suite's own layout: what test files share lives in tests/support/ and is imported as
``tests.support.X``, so

* no file under tests/ imports a test module (``test_*.py``) -- not with ``import``, nor through
  importlib, ``pytest.importorskip`` or a file path;
* nothing under tests/ changes ``sys.path`` (children get the repository root through PYTHONPATH or
  ``python -m``), a Python script in a string literal (a child's program) included;
* every module directly in tests/, or in a folder of tests beside tests/support/, is a test file,
  ``conftest.py`` or ``__init__.py``.

tests/data/ (recorded inputs and the scripts that made them) is left out. Each check reads the
source with :mod:`ast`, and each is shown to catch a planted violation.
"""
from __future__ import annotations

import ast
from pathlib import Path

import pytest

from tests.support.paths import TESTS

#: calls whose first argument names a module to import
IMPORT_CALLS = {"import_module", "importorskip", "__import__"}
#: list methods that change the list they are called on
MUTATORS = {"insert", "append", "extend", "remove", "pop", "clear", "reverse", "sort", "__setitem__",
            "__delitem__", "__iadd__"}


def python_files(tests: Path) -> list[Path]:
    """Every .py file under ``tests``, tests/data/ left out."""
    return sorted(p for p in tests.rglob("*.py")
                  if p.relative_to(tests).parts[0] != "data" and "__pycache__" not in p.parts)


def _names_a_test_module(dotted: str) -> bool:
    return any(part.startswith("test_") for part in dotted.split("."))


def _call_name(call: ast.Call) -> str | None:
    f = call.func
    return f.attr if isinstance(f, ast.Attribute) else f.id if isinstance(f, ast.Name) else None


def cross_test_imports(path: Path) -> list[str]:
    """Where ``path`` imports a test module: ``import test_x``, ``from test_x import ...``,
    ``from tests.layer import test_x``, ``import_module("test_x")``, ``pytest.importorskip("test_x")``,
    ``spec_from_file_location(..., .../"test_x.py")``."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        what = None
        if isinstance(node, ast.Import):
            what = next((a.name for a in node.names if _names_a_test_module(a.name)), None)
        elif isinstance(node, ast.ImportFrom):
            module = node.module or ""
            if _names_a_test_module(module):
                what = module
            else:
                what = next((f"{module}.{a.name}" for a in node.names if a.name.startswith("test_")), None)
        elif isinstance(node, ast.Call):
            name = _call_name(node)
            if name in IMPORT_CALLS and node.args and isinstance(node.args[0], ast.Constant) \
                    and isinstance(node.args[0].value, str) and _names_a_test_module(node.args[0].value):
                what = node.args[0].value
            elif name == "spec_from_file_location":
                what = next((c.value for arg in [*node.args, *(k.value for k in node.keywords)]
                             for c in ast.walk(arg) if isinstance(c, ast.Constant) and isinstance(c.value, str)
                             and Path(c.value).name.startswith("test_") and c.value.endswith(".py")), None)
        if what:
            found.append(f"{path.name}:{node.lineno}: imports the test module {what}")
    return found


def _sys_path_changes(tree: ast.AST, where: str) -> list[str]:
    sys_names = {"sys"}           # what the module sys is bound to
    path_names: set[str] = set()  # what sys.path itself is bound to (from sys import path)
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            sys_names |= {a.asname or a.name for a in node.names if a.name == "sys"}
        elif isinstance(node, ast.ImportFrom) and node.module == "sys":
            path_names |= {a.asname or a.name for a in node.names if a.name == "path"}

    def is_sys_path(e: ast.AST) -> bool:
        if isinstance(e, ast.Subscript):
            e = e.value
        return (isinstance(e, ast.Attribute) and e.attr == "path" and isinstance(e.value, ast.Name)
                and e.value.id in sys_names) or (isinstance(e, ast.Name) and e.id in path_names)

    found = []
    for node in ast.walk(tree):
        hit = None
        if isinstance(node, ast.Call):
            f = node.func
            if isinstance(f, ast.Attribute) and f.attr in MUTATORS and is_sys_path(f.value):
                hit = f"sys.path.{f.attr}"
            elif isinstance(f, ast.Attribute) and f.attr == "addsitedir":
                hit = "site.addsitedir"
        elif isinstance(node, (ast.Assign, ast.AugAssign, ast.AnnAssign, ast.Delete)):
            targets = node.targets if isinstance(node, (ast.Assign, ast.Delete)) else [node.target]
            if any(is_sys_path(t) for t in targets):
                hit = "an assignment to sys.path"
        if hit:
            found.append(f"{where}:{node.lineno}: {hit}")
    return found


def _script_of(node: ast.AST) -> str | None:
    """The text of a string literal (an f-string's fields as ``None``) if it mentions sys.path."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        text = node.value
    elif isinstance(node, ast.JoinedStr):
        text = "".join(v.value if isinstance(v, ast.Constant) else "None" for v in node.values)
    else:
        return None
    return text if "sys" in text and "path" in text else None


def sys_path_changes(path: Path) -> list[str]:
    """Where ``path`` changes sys.path: a call that changes the list, an assignment to it or to a
    slice of it, ``site.addsitedir``; and the same in a string literal that is a Python program."""
    tree = ast.parse(path.read_text(), str(path))
    found = _sys_path_changes(tree, path.name)
    for node in ast.walk(tree):
        script = _script_of(node)
        if script is None:
            continue
        try:
            inner = ast.parse(script)
        except SyntaxError:          # prose, or a fragment: not a program
            continue
        found += [f"{f} (in the string literal at line {node.lineno})"
                  for f in _sys_path_changes(inner, path.name)]
    return found


def stray_modules(tests: Path) -> list[str]:
    """Modules under ``tests`` that are neither a test file, ``conftest.py`` nor ``__init__.py``,
    tests/support/ (where helpers live) and tests/data/ left out."""
    out = []
    for p in python_files(tests):
        if p.relative_to(tests).parts[0] == "support":
            continue
        if not (p.name.startswith("test_") or p.name in ("conftest.py", "__init__.py")):
            out.append(str(p.relative_to(tests)))
    return out


# -- the suite as it is --------------------------------------------------------------------------

def test_no_file_under_tests_imports_a_test_module():
    found = [f for p in python_files(TESTS) for f in cross_test_imports(p)]
    assert found == [], "move what is shared into tests/support/:\n" + "\n".join(found)


def test_nothing_under_tests_changes_sys_path():
    found = [f for p in python_files(TESTS) for f in sys_path_changes(p)]
    assert found == [], "import as tests.support.X; give a child PYTHONPATH or python -m:\n" + "\n".join(found)


def test_every_module_beside_the_tests_is_a_test_file_or_conftest():
    assert stray_modules(TESTS) == [], "helpers belong in tests/support/"


def test_the_shared_helpers_are_a_package():
    assert (TESTS / "__init__.py").is_file() and (TESTS / "support" / "__init__.py").is_file()
    assert not any(p.name.startswith("test_") for p in (TESTS / "support").glob("*.py"))


# -- each check catches a planted violation --------------------------------------------------------

@pytest.mark.parametrize("source", [
    "from test_loop import new_run\n",
    "import test_runner\n",
    "import test_tuner_templates as emu\n",
    "from tests.search.test_loop import read\n",
    "from tests.search import test_loop\n",
    "from . import test_loop\n",
    "def f():\n    from test_bad_input import make_task\n",
    "import pytest\nemu = pytest.importorskip('test_tuner_templates')\n",
    "import importlib\nm = importlib.import_module('tests.kernels.test_tuner_templates')\n",
    "import importlib.util\nfrom pathlib import Path\n"
    "spec = importlib.util.spec_from_file_location('t', Path('tests') / 'kernels' / 'test_tuner_templates.py')\n",
])
def test_a_planted_import_of_a_test_module_is_found(tmp_path, source):
    planted = tmp_path / "test_planted.py"
    planted.write_text(source)
    assert len(cross_test_imports(planted)) == 1


def test_imports_of_support_modules_and_packages_are_not_imports_of_test_modules(tmp_path):
    fine = tmp_path / "test_fine.py"
    fine.write_text("import pytest\nfrom tests.support.loop_runs import new_run\nfrom tests.support import fake_gpu\n"
                    "from kernel_forge.model.task import load_task\nimport importlib\n"
                    "m = importlib.import_module('tests.support.fakes')\n")
    assert cross_test_imports(fine) == []


# the planted programs are put together here, so that this file's own string literals are not programs
# that change sys.path (the check reads those too)
_SP, _P = "sys.path", "path"


@pytest.mark.parametrize("source", [
    f"import sys\n{_SP}.insert(0, 'x')\n",
    f"import sys\n{_SP}.append('x')\n",
    f"import sys\n{_SP}.extend(['x'])\n",
    f"import sys\n{_SP} = ['x']\n",
    f"import sys\n{_SP} += ['x']\n",
    f"import sys\n{_SP}[:0] = ['x']\n",
    f"import sys as s\ns.{_P}.insert(0, 'x')\n",
    f"from sys import {_P}\n{_P}.insert(0, 'x')\n",
    "import site\nsite.addsitedir('x')\n",
    "def f():\n    import sys\n    " + _SP + ".insert(0, 'x')\n",
    "PROGRAM = " + repr(f"import sys\n{_SP}.insert(0, '/repo')\nimport kernel_forge\n") + "\n",
    "ROOT = '/repo'\nPROGRAM = f" + repr(f"import sys\n{_SP}.insert(0, {{ROOT!r}})\n") + "\n",
])
def test_a_planted_change_of_sys_path_is_found(tmp_path, source):
    planted = tmp_path / "test_planted.py"
    planted.write_text(source)
    assert len(sys_path_changes(planted)) == 1


def test_reading_sys_path_and_setting_pythonpath_are_not_changes(tmp_path):
    fine = tmp_path / "test_fine.py"
    fine.write_text("import os, sys\nok = '' in sys.path\nenv = dict(os.environ, PYTHONPATH='/repo')\n"
                    "CHILD = 'import sys\\nprint(sys.path[0])\\n'\nDOC = 'nothing here changes sys.path'\n")
    assert sys_path_changes(fine) == []


def test_a_planted_helper_beside_the_tests_is_found(tmp_path):
    tests = tmp_path / "tests"
    for rel in ("__init__.py", "conftest.py", "test_a.py", "layer/test_b.py", "layer/conftest.py",
                "support/__init__.py", "support/fakes.py", "data/make_recorded.py",
                "fakes.py", "layer/helpers.py"):
        (tests / rel).parent.mkdir(parents=True, exist_ok=True)
        (tests / rel).write_text("")
    assert stray_modules(tests) == ["fakes.py", "layer/helpers.py"]
