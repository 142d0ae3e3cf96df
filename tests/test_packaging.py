"""pyproject's dependencies match what dllm imports, extras hold what only some uses need, and
`make test` prints pytest's summary line."""
from __future__ import annotations

import ast
import re
import sys
import tomllib
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
PYPROJECT = tomllib.loads((REPO / "pyproject.toml").read_text())
# distribution name -> the module it is imported as
MODULE_OF = {"pyyaml": "yaml"}
# declared dependencies dllm needs without importing them itself, with the reason
USED_INDIRECTLY = {"jinja2": "transformers' apply_chat_template renders the chat templates"}
OPTIONAL = {"matplotlib": "plot", "triton": "gpu", "fastapi": "serve", "uvicorn": "serve", "h11": "serve",
            "prometheus_client": "serve", "httpx": "serve", "lm_eval": "eval",
            "torchao": "quant", "interegular": "structured", "jsonschema": "structured",
            "referencing": "structured",
            "outlines_core": "structured"}  # imported lazily / guarded, from an extra


def _name(requirement: str) -> str:
    return re.split(r"[<>=!~;\[ ]", requirement, maxsplit=1)[0].lower().replace("-", "_")


def _imported_modules() -> set[str]:
    """Top-level third-party modules imported anywhere in the dllm package."""
    found = set()
    for file in (REPO / "dllm").rglob("*.py"):
        for node in ast.walk(ast.parse(file.read_text())):
            if isinstance(node, ast.Import):
                found |= {alias.name.split(".")[0] for alias in node.names}
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                found.add(node.module.split(".")[0])
    return {m for m in found if m not in sys.stdlib_module_names and m not in ("dllm", "__future__")}


def test_every_base_dependency_is_imported_or_used_indirectly():
    imported = _imported_modules()
    for dep in map(_name, PYPROJECT["project"]["dependencies"]):
        assert MODULE_OF.get(dep, dep) in imported or dep in USED_INDIRECTLY, (
            f"{dep} is declared but dllm never imports it")


def test_every_import_is_declared():
    extras = PYPROJECT["project"]["optional-dependencies"]
    declared = {MODULE_OF.get(d, d) for d in map(_name, PYPROJECT["project"]["dependencies"])}
    optional = {MODULE_OF.get(_name(r), _name(r)) for reqs in extras.values() for r in reqs}
    for module in _imported_modules():
        assert module in declared or module in optional, f"dllm imports {module} but pyproject does not declare it"


def test_optional_packages_live_in_extras_and_the_test_install():
    base = set(map(_name, PYPROJECT["project"]["dependencies"]))
    extras = {k: set(map(_name, v)) for k, v in PYPROJECT["project"]["optional-dependencies"].items()}
    for package, extra in OPTIONAL.items():
        assert package not in base, f"{package} is needed by some uses only: move it to the {extra!r} extra"
        assert package in extras[extra] and package in extras["test"], package


def test_make_test_keeps_pytest_summary_line():
    """pytest's addopts already has -q; a second -q (-qq) drops the "N passed" line."""
    addopts = PYPROJECT["tool"]["pytest"]["ini_options"].get("addopts", "").split()
    recipe = re.search(r"^test:.*\n((?:\t.*\n)+)", (REPO / "Makefile").read_text(), re.M).group(1)
    quiet = addopts.count("-q") + sum(line.split().count("-q") for line in recipe.splitlines() if "pytest" in line)
    assert quiet <= 1, f"make test runs pytest with {quiet} x -q"


def test_make_installs_the_pinned_cpu_torch_first():
    install = re.search(r"^\$\(STAMP\):.*\n((?:\t.*\n)+)", (REPO / "Makefile").read_text(), re.M).group(1)
    pips = [line for line in install.splitlines() if "pip install" in line and "--upgrade pip" not in line]
    assert "torch==" in pips[0], pips
