"""The docs name what exists: docs/ARCHITECTURE.md's package listing holds every module of
``dllm/`` under its package, and every file path the docs and the README name is in the tree."""
from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "dllm"
ARCHITECTURE = (ROOT / "docs" / "ARCHITECTURE.md").read_text()
DOCS = sorted((ROOT / "docs").glob("*.md")) + [ROOT / "README.md"]
# a path from the repository root, not the tail of a longer one (dllm/bench/x.py is no bench/x.py)
PATH = re.compile(r"(?<![\w/.-])((?:dllm|tests|bench|docs)/[\w/.-]*\.(?:py|sh|json|md))(?![\w/*{-])")


def listing_entries(text: str) -> dict[str, str]:
    """The layout listing (the first code block) as top-level name -> its text: an entry starts
    at a line indented two spaces ("  cache/  ...", "  validation.py ...") and runs on through
    the deeper lines after it."""
    block = text.split("```", 2)[1]
    entries: dict[str, str] = {}
    name = None
    for line in block.splitlines():
        if re.match(r"  \S", line):
            name = line.split()[0].rstrip("/")
            entries[name] = ""
        if name is not None:
            entries[name] += line + "\n"
    return entries


def unlisted_modules(text: str) -> list[str]:
    entries = listing_entries(text)
    missing = []
    for path in sorted(PACKAGE.rglob("*.py")):
        rel = path.relative_to(PACKAGE)
        if path.name in ("__init__.py", "__main__.py"):
            continue
        entry = entries.get(rel.parts[0], "")  # a package's entry, or a top-level module's own
        if not re.search(rf"\b{re.escape(path.stem)}\b", entry):
            missing.append(str(rel))
    return missing


def listed_but_missing(text: str) -> list[str]:
    """Files a listing entry names that are not in the tree: a bare name (``kv.py``) is looked up
    in its package, a path (``cli/models.py``, ``tests/oracles.py``) from dllm/ or the root."""
    missing = []
    for name, entry in listing_entries(text).items():
        held = {p.name for p in (PACKAGE / name).rglob("*")} | {p.name for p in ROOT.glob("bench/**/*")}
        for f in re.findall(r"[\w./]+\.(?:py|sh|json)\b", entry):
            if not (f in held or (PACKAGE / f).exists() or (ROOT / f).exists()):
                missing.append(f"{name}: {f}")
    return sorted(set(missing))


def missing_paths(doc: Path) -> list[str]:
    return sorted({p for p in PATH.findall(doc.read_text()) if not (ROOT / p).exists()})


def test_layout_listing_names_every_module():
    missing = unlisted_modules(ARCHITECTURE)
    assert not missing, f"docs/ARCHITECTURE.md's package listing lacks {missing}"


def test_listing_check_sees_a_module_left_out():
    """The check reads each package's own entry: a module named only in another one is missing."""
    entries = listing_entries(ARCHITECTURE)
    assert "uniform_state" in entries["samplers"] and "decoding.py" in entries["engine"]
    without = ARCHITECTURE.replace(entries["engine"], entries["engine"].replace("uniform_state", "?"))
    assert set(unlisted_modules(without)) - set(unlisted_modules(ARCHITECTURE)) == {"engine/uniform_state.py"}


def test_paths_named_in_the_docs_exist():
    missing = {doc.name: paths for doc in DOCS if (paths := missing_paths(doc))}
    assert not missing, f"paths named in the docs that are not in the tree: {missing}"


def test_path_pattern_takes_whole_paths_only():
    text = "`dllm/bench/roofline.py`, `bench/gpu_check.sh`, bench/results/x.{json,md}, tests/*.py"
    assert PATH.findall(text) == ["dllm/bench/roofline.py", "bench/gpu_check.sh"]


def test_listing_names_only_modules_that_exist():
    missing = listed_but_missing(ARCHITECTURE)
    assert not missing, f"docs/ARCHITECTURE.md's package listing names files not in the tree: {missing}"


def test_listed_check_sees_a_file_that_is_not_there():
    entries = listing_entries(ARCHITECTURE)
    renamed = ARCHITECTURE.replace(entries["cache"], entries["cache"].replace("kv.py", "kv_buffers.py"))
    assert listed_but_missing(renamed) == ["cache: kv_buffers.py"]


def families_table_gaps(text: str) -> list[str]:
    """Registered families (``FAMILIES``) without a row in the "Families" table, or whose row's
    ``model_type`` column leaves out one the family is loaded by (case-insensitive)."""
    from dllm.models.registry import FAMILIES

    section = text.split("### Families", 1)[1].split("\n#", 1)[0]
    table = next(part for part in section.split("\n\n") if part.startswith("| family |"))
    # family name -> its model_type column, lowercased
    rows = {line.split("`")[1]: line.split("|")[3].lower() for line in table.splitlines() if line.startswith("| `")}
    gaps = [name for name in FAMILIES if name not in rows]
    gaps += [f"{name}: {t}" for name, fam in FAMILIES.items() if name in rows
             for t in fam.model_types if f"`{t}`" not in rows[name]]
    return gaps


def test_families_table_has_every_family_and_model_type():
    assert families_table_gaps(ARCHITECTURE) == []


def test_families_check_sees_a_missing_model_type():
    without = ARCHITECTURE.replace("`sdar_moe`", "`sdar-moe`")
    assert set(families_table_gaps(without)) - set(families_table_gaps(ARCHITECTURE)) == {"sdar: sdar_moe"}
