"""The project stands on its own: what a user reads (README, docs/, conf/) names no file
outside the checkout, every dataset config says how to get its data, and the README's
links lead to files the checkout has."""

import re
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[1]
USER_FACING = [
    ROOT / "README.md",
    *sorted((ROOT / "docs").glob("*.md")),
    *sorted((ROOT / "conf").rglob("*.yaml")),
    *sorted((ROOT / "results" / "reference").glob("*.md")),
]
DATASETS = sorted((ROOT / "conf" / "dataset").glob("*.yaml"))


@pytest.mark.parametrize("path", USER_FACING, ids=lambda p: str(p.relative_to(ROOT)))
def test_no_user_facing_file_points_outside_the_checkout(path):
    text = path.read_text()
    assert not [s for s in ("../shared", "shared/data", "shared/DESIGN", "shared/papers") if s in text], path


def test_the_design_and_dataset_documents_exist():
    assert (ROOT / "docs" / "design.md").is_file() and (ROOT / "docs" / "datasets.md").is_file()
    readme = (ROOT / "README.md").read_text()
    assert "docs/design.md" in readme and "docs/datasets.md" in readme


@pytest.mark.parametrize("path", DATASETS, ids=lambda p: p.stem)
def test_each_dataset_says_how_to_get_its_data(path):
    """offline_hint ends the one-line error a run without the data prints: it names where the
    data comes from (a pip package, the hub or a public repository) and how to give a copy."""
    cfg = yaml.safe_load(path.read_text())
    hint = cfg.get("offline_hint") or ""
    if cfg["name"] == "jsonl":  # the generic file reader: the path is the whole config
        return
    assert "dataset.path=" in hint and "docs/datasets.md" in hint, (path.name, hint)
    if cfg.get("package"):
        assert "pip install" in hint, (path.name, hint)
    if cfg.get("hub"):
        assert cfg["hub"]["id"] in hint, (path.name, hint)


def test_readme_links_resolve():
    readme = (ROOT / "README.md").read_text()
    targets = [t.split("#")[0] for t in re.findall(r"\]\(([^)\s]+)\)", readme) if "://" not in t]
    missing = [t for t in targets if t and not (ROOT / t).exists()]
    assert not missing, missing
