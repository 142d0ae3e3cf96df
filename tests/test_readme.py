"""The README lists every registered rule, strategy, stopper and cache by name."""
from __future__ import annotations

import re
from pathlib import Path

import pytest

import dllm.engine.decoding  # noqa: F401  registers every policy and cache
from dllm.cache.base import CACHES
from dllm.samplers.base import RULES, STOPPERS, STRATEGIES

README = (Path(__file__).resolve().parents[1] / "README.md").read_text()


@pytest.mark.parametrize("kind,table", [("policy", RULES), ("strategy", STRATEGIES),
                                        ("stopper", STOPPERS), ("cache", CACHES)])
def test_readme_names_every_registered_policy(kind, table):
    line = next((l for l in README.splitlines() if f"(`{kind}`):" in l), None)
    assert line is not None, f"README has no list of {kind} names"
    block = re.split(r"\n- |\n\n", README[README.index(line):], maxsplit=1)[0]  # the bullet
    missing = [name for name in table if f"`{name}`" not in block]
    assert not missing, f"README's {kind} list lacks {missing}"
