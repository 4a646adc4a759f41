"""The package's layers: every module lives in a layer folder, imports only its own layer and
the layers below it, the import graph has no circle, and no chain of module-level imports is
longer than ten modules.  Lazy imports (inside functions) and TYPE_CHECKING imports count too.
Only kernel_forge/gpu/ imports a CUDA module (CuPy, cuda.bindings, cuda.core, CUPTI), lazily or not.
No file name is used twice, and every module has its own test file (tests mirror the package).

The order, lowest first (README, "Architecture"):

    common < proposers < config < kernels < model < kinds < gpu < records, analysis < gate < evidence < archive
        < reports < search < authoring < ci < app

(proposers stand on common only; config sits above them, since ``ProposerConfig`` extends the provider
options they declare)

plus the package root (``__version__`` only, importable from anywhere) and the entry point above
everything.
"""
from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "kernel_forge"

LAYERS = {"common": 0, "proposers": 0.5, "config": 1, "kernels": 1.5, "model": 2, "kinds": 2.5, "gpu": 3, "records": 3.2,
          "analysis": 3.5, "gate": 4, "evidence": 5, "archive": 6, "reports": 8, "search": 9, "authoring": 9.4, "ci": 9.7,
          "app": 10}
TOP = {"kernel_forge": -1, "kernel_forge.__main__": 11, "kernel_forge.entry": 11}
MAX_CHAIN = 10


def module_name(path: Path, root: Path) -> str:
    parts = list(path.relative_to(root.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts = parts[:-1]
    return ".".join(parts)


def layer_of(module: str) -> int | None:
    """The layer's rank, or None for a module outside every layer folder."""
    if module in TOP:
        return TOP[module]
    parts = module.split(".")
    return LAYERS.get(parts[1]) if len(parts) > 2 or (len(parts) == 2 and parts[1] in LAYERS) else None


def imports_of(module: str, source: str, known: set[str], is_package: bool = False) -> dict[str, bool]:
    """{imported kernel_forge module: imported at module level?} for one module's source."""
    tree = ast.parse(source)
    top_level = set()
    for node in tree.body:           # module level, also inside if/try at module level (TYPE_CHECKING)
        for inner in ast.walk(node) if not isinstance(node, (ast.FunctionDef, ast.ClassDef,
                                                             ast.AsyncFunctionDef)) else ():
            top_level.add(id(inner))
    found: dict[str, bool] = {}
    for node in ast.walk(tree):
        targets = []
        if isinstance(node, ast.Import):
            targets = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = module.split(".") if is_package else module.split(".")[:-1]
                parts = parts[:len(parts) - node.level + 1]
                base = ".".join(parts + ([node.module] if node.module else []))
            targets = [f"{base}.{a.name}" if f"{base}.{a.name}" in known else base for a in node.names]
        for t in targets:
            while t and t not in known:           # kernel_forge.x.y.Name -> kernel_forge.x.y
                t = t.rpartition(".")[0]
            if t and t != module and t.startswith("kernel_forge"):
                found[t] = found.get(t, False) or id(node) in top_level
    return found


def graph(sources: dict[str, tuple[str, bool]]) -> dict[str, dict[str, bool]]:
    known = set(sources)
    return {m: imports_of(m, src, known, pkg) for m, (src, pkg) in sources.items()}


def package_sources(root: Path = PACKAGE) -> dict[str, tuple[str, bool]]:
    return {module_name(p, root): (p.read_text(encoding="utf-8"), p.name == "__init__.py")
            for p in sorted(root.rglob("*.py"))}


def upward(g: dict[str, dict[str, bool]]) -> list[str]:
    out = []
    for m, targets in g.items():
        if layer_of(m) is None:
            out.append(f"{m}: not in a layer folder ({', '.join(LAYERS)})")
            continue
        for t in targets:
            if t != "kernel_forge" and (layer_of(t) is None or layer_of(t) > layer_of(m)):
                out.append(f"{m} imports {t}, a higher layer")
    return sorted(out)


def circles(g: dict[str, dict[str, bool]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan)."""
    index, low, stack, on, out = {}, {}, [], set(), []

    def visit(v):
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in g.get(v, ()):
            if w not in g:
                continue
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    for v in g:
        if v not in index:
            visit(v)
    return out


def longest_chain(g: dict[str, dict[str, bool]]) -> list[str]:
    """The longest path of module-level imports (the graph has no circle)."""
    memo: dict[str, list[str]] = {}

    def path(v):
        if v not in memo:
            memo[v] = [v] + max((path(w) for w, top in g[v].items() if top and w in g), key=len, default=[])
        return memo[v]

    return max((path(v) for v in g), key=len)


def guarded_own_imports(sources: dict[str, tuple[str, bool]]) -> list[str]:
    """Imports of our own modules inside ``try: ... except ImportError``: a broken module would
    make a command vanish instead of failing."""
    out = []
    for m, (src, _) in sources.items():
        for node in ast.walk(ast.parse(src)):
            if not isinstance(node, ast.Try):
                continue
            catches = {getattr(h.type, "id", None) for h in node.handlers} | \
                      {getattr(e, "id", None) for h in node.handlers if isinstance(h.type, ast.Tuple) for e in h.type.elts}
            if not catches & {"ImportError", "ModuleNotFoundError"}:
                continue
            for inner in node.body:
                for n in ast.walk(inner):
                    name = (n.module or "") if isinstance(n, ast.ImportFrom) else \
                        (n.names[0].name if isinstance(n, ast.Import) else "")
                    if name.startswith("kernel_forge") or (isinstance(n, ast.ImportFrom) and n.level):
                        out.append(f"{m}:{n.lineno}")
    return out


#: the CUDA modules: only kernel_forge/gpu/ imports them (README, "How it is put together")
CUDA_MODULES = ("cupy", "cuda", "cupti")


def cuda_imports(sources: dict[str, tuple[str, bool]]) -> list[str]:
    """``module:line imports NAME`` for every import of a CUDA module (CuPy, the CUDA bindings,
    cuda.core, CUPTI) outside kernel_forge/gpu/, at module level or inside a function."""
    out = []
    for m, (src, _) in sources.items():
        if m == "kernel_forge.gpu" or m.startswith("kernel_forge.gpu."):
            continue
        for node in ast.walk(ast.parse(src)):
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and not node.level:
                names = [node.module or ""]
            else:
                continue
            for name in names:
                if name.split(".")[0] in CUDA_MODULES:
                    out.append(f"{m}:{node.lineno} imports {name}")
    return sorted(out)


@pytest.fixture(scope="module")
def package():
    sources = package_sources()
    return sources, graph(sources)


def test_every_module_is_in_a_layer_and_imports_nothing_above_it(package):
    _, g = package
    assert upward(g) == []


def test_the_import_graph_has_no_circle(package):
    _, g = package
    assert circles(g) == []


def test_no_chain_of_module_level_imports_is_longer_than_ten_modules(package):
    _, g = package
    chain = longest_chain(g)
    assert len(chain) <= MAX_CHAIN, " -> ".join(chain)


def test_no_own_module_is_imported_under_except_import_error(package):
    sources, _ = package
    assert guarded_own_imports(sources) == []


def test_the_checks_catch_a_planted_upward_import_a_circle_and_a_guarded_import():
    sources = package_sources()
    planted = dict(sources)
    src, pkg = planted["kernel_forge.common.errors"]
    planted["kernel_forge.common.errors"] = (src + "\n\ndef _planted():\n    from kernel_forge.app.cli import cli\n", pkg)
    assert upward(graph(planted)) == ["kernel_forge.common.errors imports kernel_forge.app.cli, a higher layer"]
    assert circles(graph(planted))            # cli imports errors, errors now imports cli

    relative = dict(sources)
    src, pkg = relative["kernel_forge.model.task"]
    relative["kernel_forge.model.task"] = (src + "\nfrom ..search import loop\n", pkg)
    assert "kernel_forge.model.task imports kernel_forge.search.loop, a higher layer" in upward(graph(relative))

    guarded = {"kernel_forge.app.x": ("try:\n    from kernel_forge.app import cli_run\nexcept ImportError:\n    pass\n",
                                      False)}
    assert guarded_own_imports(guarded) == ["kernel_forge.app.x:2"]
    stray = {"kernel_forge.misc": ("", False)}
    assert upward(graph(stray)) == ["kernel_forge.misc: not in a layer folder (" + ", ".join(LAYERS) + ")"]


def names_used_twice(paths) -> dict[str, list[str]]:
    """{file name: the folders that hold it} for every module name (``__init__.py`` aside) found in
    more than one folder of the package."""
    seen: dict[str, list[str]] = {}
    for p in paths:
        if p.name != "__init__.py":
            seen.setdefault(p.name, []).append(p.parent.name)
    return {name: sorted(folders) for name, folders in seen.items() if len(folders) > 1}


def test_no_file_name_is_used_twice():
    assert names_used_twice(PACKAGE.rglob("*.py")) == {}


def test_a_planted_second_file_name_is_found():
    paths = [PACKAGE / "authoring" / "validate.py", PACKAGE / "ci" / "validate.py", PACKAGE / "app" / "__init__.py",
             PACKAGE / "ci" / "__init__.py"]
    assert names_used_twice(paths) == {"validate.py": ["authoring", "ci"]}


def test_only_the_gpu_folder_imports_cuda_modules(package):
    sources, _ = package
    assert cuda_imports(sources) == []


def test_the_cuda_import_check_catches_module_level_and_lazy_imports_outside_gpu():
    planted = {"kernel_forge.gate.x": ("import cupy\n\ndef f():\n    from cuda.bindings import driver\n"
                                       "    import cupti.cupti\n    from cuda.core.experimental import Device\n", False),
               "kernel_forge.gpu.y": ("import cupy\nfrom cuda.bindings import nvrtc\n", False),
               "kernel_forge.gate.z": ("from kernel_forge.gpu import driver\nimport cupyx_lookalike\n", False)}
    assert cuda_imports(planted) == ["kernel_forge.gate.x:1 imports cupy", "kernel_forge.gate.x:4 imports cuda.bindings",
                                     "kernel_forge.gate.x:5 imports cupti.cupti",
                                     "kernel_forge.gate.x:6 imports cuda.core.experimental"]


TESTS = Path(__file__).resolve().parent


def modules_without_tests(modules, tests) -> list[str]:
    """The package modules (``__init__`` and ``__main__`` aside) with no test file of their own:
    kernel_forge/<room>/<module>.py wants tests/<room>/test_<module>.py or test_<module>_<more>.py
    (kernel_forge/<module>.py: tests/test_<module>...)."""
    have = {(t.parent, t.stem) for t in tests}
    out = []
    for m in sorted(modules):
        if m.stem in ("__init__", "__main__"):
            continue
        folder = TESTS / m.parent.relative_to(PACKAGE)
        if not any(d == folder and (s == f"test_{m.stem}" or s.startswith(f"test_{m.stem}_")) for d, s in have):
            out.append(f"{m.relative_to(PACKAGE.parent)}: no {(folder / f'test_{m.stem}.py').relative_to(TESTS.parent)}")
    return out


def test_every_module_has_its_test_file():
    assert modules_without_tests(PACKAGE.rglob("*.py"), TESTS.rglob("test_*.py")) == []


def test_a_module_without_its_test_file_is_named():
    modules = [PACKAGE / "gate" / "retime.py", PACKAGE / "gate" / "gate.py", PACKAGE / "entry.py",
               PACKAGE / "gate" / "__init__.py"]
    tests = [TESTS / "gate" / "test_gate_protocol.py", TESTS / "search" / "test_retime.py", TESTS / "test_entry.py"]
    assert modules_without_tests(modules, tests) == ["kernel_forge/gate/retime.py: no tests/gate/test_retime.py"]
