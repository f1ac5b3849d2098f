"""Files that pip packages ship (model weights, benchmark data), found without importing
the package: some of them import a CLI or a judge stack we do not install."""

from __future__ import annotations

import importlib.util
from pathlib import Path


def package_dir(package: str) -> Path | None:
    """The installed directory of `package`, or None when it is not installed."""
    spec = importlib.util.find_spec(package)
    if spec is None or not spec.submodule_search_locations:
        return None
    return Path(list(spec.submodule_search_locations)[0])
