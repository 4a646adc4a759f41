"""The error edge: an exception raised in a command becomes an exit code in one place only,
``kernel_forge.app.cli_common.handle_errors``.  Elsewhere in the package an ``except`` block may
word, record or re-raise, but never end the process with a status (``sys.exit``, ``exit``,
``quit``, ``raise SystemExit``, a click ``Exit``, ``ctx.exit``); and below ``app/`` nothing ends
the process at all, except a child program's own ``if __name__ == "__main__":`` block.
(``os._exit``, a child worker's hard stop with status 0, is not an exit code of kforge.)"""
from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[2] / "kernel_forge"

#: (file under kernel_forge/, function): the one place
EDGE = {("app/cli_common.py", "handle_errors.wrapper")}
#: where a command may set its status from what it found (not from an exception)
DOORS = ("app/", "entry.py")


def _is_exit(node: ast.AST) -> bool:
    """A call or raise that ends the process with a status."""
    if isinstance(node, ast.Raise) and node.exc is not None:
        target = node.exc.func if isinstance(node.exc, ast.Call) else node.exc
        return ast.unparse(target).split(".")[-1] in ("SystemExit", "Exit")
    if isinstance(node, ast.Call):
        name = ast.unparse(node.func)
        return name in ("sys.exit", "exit", "quit") or name.endswith("ctx.exit") or name.endswith("context().exit")
    return False


def _owners(tree: ast.AST) -> dict[int, str]:
    """{id(node): the qualified name of the function it is in ("handle_errors.wrapper"; "" at module level)}."""
    owner: dict[int, str] = {}

    def visit(node: ast.AST, name: str) -> None:
        for child in ast.iter_child_nodes(node):
            inner = name
            if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                inner = f"{name}.{child.name}" if name else child.name
            owner[id(child)] = inner
            visit(child, inner)

    visit(tree, "")
    return owner


def exits_in_handlers(source: str) -> list[tuple[int, str]]:
    """(line, enclosing function) of every process exit inside an ``except`` block."""
    tree = ast.parse(source)
    owner = _owners(tree)
    out = set()
    for handler in ast.walk(tree):
        if isinstance(handler, ast.ExceptHandler):
            for node in ast.walk(handler):
                if _is_exit(node):
                    out.add((node.lineno, owner.get(id(node), "")))
    return sorted(out)


def exits_outside_main(source: str) -> list[int]:
    """Lines of every process exit that is not inside an ``if __name__ == "__main__":`` block."""
    tree = ast.parse(source)
    guarded = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and "__name__" in ast.unparse(node.test) and "__main__" in ast.unparse(node.test):
            guarded |= {id(n) for n in ast.walk(node)}
    return sorted(n.lineno for n in ast.walk(tree) if _is_exit(n) and id(n) not in guarded)


def violations(sources: dict[str, str]) -> list[str]:
    out = []
    for rel, src in sorted(sources.items()):
        for line, fn in exits_in_handlers(src):
            if (rel, fn) not in EDGE:
                out.append(f"kernel_forge/{rel}:{line} ({fn or 'module'}): an exception becomes an exit code "
                           "outside cli_common.handle_errors")
        if not rel.startswith(DOORS):
            out += [f"kernel_forge/{rel}:{line}: ends the process below app/" for line in exits_outside_main(src)]
    return out


def package_sources() -> dict[str, str]:
    return {p.relative_to(PACKAGE).as_posix(): p.read_text(encoding="utf-8") for p in sorted(PACKAGE.rglob("*.py"))}


def test_only_handle_errors_turns_an_exception_into_an_exit_code():
    assert violations(package_sources()) == []


def test_the_edge_itself_is_found_so_the_check_looks_at_the_right_place():
    sources = package_sources()
    found = exits_in_handlers(sources["app/cli_common.py"])
    assert {fn for _, fn in found} == {"handle_errors.wrapper"}, found
    assert len(found) == 4          # a kforge error, Ctrl-C, Ctrl-C inside an import, an internal error


@pytest.mark.slow
def test_a_planted_exit_in_an_except_block_or_below_app_is_found():
    sources = package_sources()
    planted = dict(sources)
    planted["app/cli_run.py"] += ("\n\ndef _planted():\n    try:\n        pass\n    except KeyError:\n"
                                  "        sys.exit(2)\n")
    planted["ci/regression.py"] += "\n\ndef _planted():\n    raise SystemExit(1)\n"
    planted["authoring/validate.py"] += ("\n\ndef _planted(ctx):\n    try:\n        pass\n    except ValueError:\n"
                                         "        ctx.exit(2)\n")
    found = sorted(set(violations(planted)) - set(violations(sources)))
    n_run = sources["app/cli_run.py"].count("\n") + 7
    assert f"kernel_forge/app/cli_run.py:{n_run} (_planted): an exception becomes an exit code outside " \
           "cli_common.handle_errors" in found
    assert any(v.startswith("kernel_forge/ci/regression.py:") and v.endswith("ends the process below app/")
               for v in found)
    assert sum(v.startswith("kernel_forge/authoring/validate.py:") for v in found) == 2   # in a handler, below app/
    assert len(found) == 4


def test_a_child_programs_own_main_block_may_set_its_status():
    src = "import sys\n\ndef main():\n    return 0\n\nif __name__ == '__main__':\n    sys.exit(main())\n"
    assert exits_outside_main(src) == []
    assert exits_outside_main(src.replace("if __name__ == '__main__':\n    ", "")) == [6]


def click_imports(source: str) -> list[int]:
    """Lines that import click (at any depth)."""
    return sorted(n.lineno for n in ast.walk(ast.parse(source))
                  if (isinstance(n, ast.Import) and any(a.name.split(".")[0] == "click" for a in n.names))
                  or (isinstance(n, ast.ImportFrom) and (n.module or "").split(".")[0] == "click"))


def test_only_the_doors_import_click():
    """The rooms below app/ (authoring, ci, ...) take plain arguments: options are parsed at the door."""
    found = {rel: lines for rel, src in package_sources().items()
             if not rel.startswith(DOORS) and (lines := click_imports(src))}
    assert found == {}
    assert click_imports("def f():\n    from click.testing import CliRunner\n") == [2]
