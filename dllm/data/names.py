"""The waiting-line name pool: every "First Last" pair of first_last_names.yaml."""
from __future__ import annotations

from pathlib import Path

import yaml


def load_names(data_dir: Path) -> list[str]:
    """Full names in Cartesian-product order (first names outer, last names inner).

    The file is ``[first_names, last_names]``. Repeated last names are kept on purpose: the
    official generator samples from exactly this list, so order and duplicates fix its output.
    """
    first, last = yaml.safe_load((Path(data_dir) / "first_last_names.yaml").read_text())
    return [f"{f} {l}" for f in first for l in last]
