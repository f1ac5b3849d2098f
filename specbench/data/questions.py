"""Question sets in the EAGLE / Spec-Bench JSONL format: one object a line with
`question_id`, `category`, `turns` (user turns) and optionally `reference`."""

from __future__ import annotations

import importlib.util
import json
import random
from dataclasses import dataclass, field
from pathlib import Path

from specbench.errors import ConfigError, require


@dataclass
class Sample:
    id: str
    category: str
    turns: list[str]
    reference: list[str] = field(default_factory=list)


def load(cfg: dict) -> list[Sample]:
    """Samples for a dataset config: source file, categories, then a (seeded) limit."""
    path = source_path(cfg)
    samples = read_jsonl(path)
    if cfg.get("categories"):
        known = sorted({s.category for s in samples})
        unknown = [c for c in cfg["categories"] if c not in known]
        require(not unknown, "dataset.categories", f"unknown {unknown}; {cfg['name']} has {known}")
        samples = [s for s in samples if s.category in cfg["categories"]]
    limit = cfg.get("limit")
    if limit is not None:
        require(isinstance(limit, int) and limit >= 1, "dataset.limit", f"must be an integer >= 1, got {limit!r}")
        if cfg.get("seed") is not None and limit < len(samples):
            chosen = sorted(random.Random(cfg["seed"]).sample(range(len(samples)), limit))
            samples = [samples[i] for i in chosen]
        samples = samples[:limit]
    max_turns = cfg.get("max_turns")
    if max_turns is not None:
        require(isinstance(max_turns, int) and max_turns >= 1, "dataset.max_turns", f"must be an integer >= 1, got {max_turns!r}")
        for s in samples:
            s.turns = s.turns[:max_turns]
    return samples


def source_path(cfg: dict) -> Path:
    """`dataset.path` when given, else the file inside the package that ships it."""
    if cfg.get("path"):
        path = Path(cfg["path"]).expanduser()
        require(path.is_file(), "dataset.path", f"{path} does not exist")
        return path
    package = cfg.get("package")
    spec = importlib.util.find_spec(package) if package else None
    if spec is None or not spec.submodule_search_locations:
        raise ConfigError(
            f"dataset.path: no local copy of {cfg['name']} ({cfg.get('source', 'no package source')}); "
            f"install it or point dataset.path at a question JSONL"
        )
    path = Path(list(spec.submodule_search_locations)[0]) / cfg["file"]
    require(path.is_file(), "dataset.path", f"{path} is missing from package {package}")
    return path


def read_jsonl(path: Path) -> list[Sample]:
    samples = []
    with open(path, encoding="utf-8") as f:
        for number, line in enumerate(f, 1):
            if not line.strip():
                continue
            try:
                row = json.loads(line)
                turns = row["turns"]
                if not (isinstance(turns, list) and turns and all(isinstance(t, str) for t in turns)):
                    raise ValueError("'turns' must be a non-empty list of strings")
                reference = row.get("reference") or []
                samples.append(Sample(str(row["question_id"]), str(row.get("category", "")), turns, list(reference)))
            except (ValueError, KeyError, TypeError) as error:
                raise ConfigError(f"dataset.path: {path} line {number}: {error!r}") from None
    require(bool(samples), "dataset.path", f"{path} holds no questions")
    return samples
