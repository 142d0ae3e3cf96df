"""The package's layout is its architecture: api -> engine -> cache -> runner -> models, each
layer importing only those below it, and no import circle between any two dllm modules.

Every import statement counts, also those inside functions and under ``TYPE_CHECKING``: a
circle hidden behind a local import is still a circle.
"""
from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "dllm"
# top to bottom; a layer may import the ones after it, never those before it
LAYERS = ("api", "engine", "cache", "runner", "models")
# what sits on the layers and that nothing inside them may import
ABOVE = ("serve", "eval", "cli", "bench", "train")
TOP_LEVEL_MODULES = {"__init__.py", "__main__.py", "validation.py"}


def _module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _import_graph() -> dict[str, set[str]]:
    """dllm module -> the dllm modules it imports (a package's name where no module matches)."""
    files = {_module_name(p): p for p in PACKAGE.rglob("*.py")}
    graph: dict[str, set[str]] = {}
    for name, path in files.items():
        deps: set[str] = set()
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and node.level == 0 and (node.module or "").startswith("dllm"):
                for alias in node.names:
                    sub = f"{node.module}.{alias.name}"
                    deps.add(sub if sub in files else node.module)
            elif isinstance(node, ast.Import):
                deps |= {a.name for a in node.names if a.name.startswith("dllm")}
        graph[name] = {d for d in deps if d in files and d != name}
    return graph


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        for w in graph[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return found


def _layer(module: str) -> str | None:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else None


def test_no_import_circle_between_modules():
    assert _cycles(_import_graph()) == []


def test_cycle_finder_sees_a_circle():
    """The check above can fail: two modules importing each other are found."""
    assert _cycles({"a": {"b"}, "b": {"a"}, "c": {"a"}}) == [["a", "b"]]


def test_each_layer_imports_only_the_layers_below_it():
    upward = []
    for module, deps in _import_graph().items():
        layer = _layer(module)
        if layer not in LAYERS:
            continue
        forbidden = set(LAYERS[:LAYERS.index(layer)]) | set(ABOVE)
        upward += [f"{module} -> {d}" for d in sorted(deps) if _layer(d) in forbidden]
    assert upward == []


def test_top_level_holds_packages_and_no_loose_modules():
    loose = {p.name for p in PACKAGE.glob("*.py")} - TOP_LEVEL_MODULES
    assert loose == set(), f"modules belong in a layer's package: {sorted(loose)}"
    for layer in LAYERS:
        assert (PACKAGE / layer / "__init__.py").is_file(), layer


# packages that import no other dllm package (docs/ARCHITECTURE.md: "a leaf"); kernels/ too
LEAVES = ("validation", "kernels", "data")


def _imported_packages(graph: dict[str, set[str]], package: str) -> set[str]:
    """The other dllm packages (or top-level modules) that ``package``'s modules import."""
    return {_layer(d) or d for m, deps in graph.items() if _layer(m) == package for d in deps} - {package}


def test_leaves_import_no_other_dllm_package():
    graph = _import_graph()
    imports = {leaf: sorted(_imported_packages(graph, leaf)) for leaf in LEAVES}
    assert imports == {leaf: [] for leaf in LEAVES}


def test_leaf_check_sees_an_import():
    """A leaf module importing another package is caught (the check above can fail)."""
    graph = {"dllm.data.names": {"dllm.models.config"}, "dllm.models.config": set(), "dllm.validation": set()}
    assert _imported_packages(graph, "data") == {"models"}
    assert _imported_packages(graph, "validation") == set()
