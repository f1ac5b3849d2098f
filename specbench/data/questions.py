"""Benchmark prompts as samples of one shape (id, category, turns, reference), read from
a local file (`dataset.path`), the pip package that ships the data, or the hub.

A file may be in the EAGLE / Spec-Bench question format (one object a line with
`question_id`, `category`, `turns`, optional `reference`) or in the source's own format,
which the dataset's `loader` turns into a sample (see `specbench.data.benchmarks`)."""

from __future__ import annotations

import gzip
import json
import random
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field, replace
from pathlib import Path

from hydra.utils import get_method

from specbench.data.sharegpt import json_array_records
from specbench.errors import ConfigError, require
from specbench.package_data import package_dir


@dataclass
class Sample:
    id: str
    category: str
    turns: list[str]
    reference: list[str] = field(default_factory=list)
    meta: dict = field(default_factory=dict)  # source fields a metric needs (e.g. HumanEval task_id)


def load(cfg: dict) -> list[Sample]:
    """Samples for a dataset config: source, categories, then a (seeded) limit."""
    return select(read_source(cfg), cfg)


def select(samples: list[Sample], cfg: dict) -> list[Sample]:
    """Categories, then (with the optional `exclude_limit` K) without the prompts a run with
    dataset.limit=K and the same seed decodes (a calibration split beside an evaluated one),
    then the seeded limit, turns and repeats."""
    if cfg.get("categories"):
        known = sorted({s.category for s in samples})
        unknown = [c for c in cfg["categories"] if c not in known]
        require(not unknown, "dataset.categories", f"unknown {unknown}; {cfg['name']} has {known}")
        samples = [s for s in samples if s.category in cfg["categories"]]
    if (excluded := cfg.get("exclude_limit")) is not None:
        require(
            isinstance(excluded, int) and excluded >= 1,
            "dataset.exclude_limit",
            f"must be an integer >= 1, got {excluded!r}",
        )
        evaluated = {s.id for s in select(samples, {**cfg, "exclude_limit": None, "limit": excluded, "repeats": 1})}
        samples = [s for s in samples if s.id not in evaluated]
        require(samples, "dataset.exclude_limit", f"leaves no prompt of {cfg['name']} (it has {len(evaluated)})")
    limit = cfg.get("limit")
    if limit is not None:
        require(isinstance(limit, int) and limit >= 1, "dataset.limit", f"must be an integer >= 1, got {limit!r}")
        if cfg.get("seed") is not None and limit < len(samples):
            chosen = sorted(random.Random(cfg["seed"]).sample(range(len(samples)), limit))
            samples = [samples[i] for i in chosen]
        samples = samples[:limit]
    max_turns = cfg.get("max_turns")
    if max_turns is not None:
        require(
            isinstance(max_turns, int) and max_turns >= 1,
            "dataset.max_turns",
            f"must be an integer >= 1, got {max_turns!r}",
        )
        for s in samples:
            s.turns = s.turns[:max_turns]
    repeats = 1 if cfg.get("repeats") is None else cfg["repeats"]
    require(isinstance(repeats, int) and repeats >= 1, "dataset.repeats", f"must be an integer >= 1, got {repeats!r}")
    if repeats > 1:  # n answers per prompt (e.g. HumanEval avg@4 at T>0), each with its own seed
        samples = [
            replace(s, id=f"{s.id}#{r}", meta={**s.meta, "repeat_of": s.id}) for s in samples for r in range(repeats)
        ]
    return samples


def read_source(cfg: dict) -> list[Sample]:
    """`dataset.path` when given, else the package file, else the hub."""
    convert = None
    if cfg.get("loader"):
        try:
            convert = get_method(cfg["loader"])
        except Exception:  # noqa: BLE001 - hydra wraps import errors of any kind
            raise ConfigError(
                f"dataset.loader: cannot import {cfg['loader']!r}; use a function of specbench.data.benchmarks"
            ) from None
    if cfg.get("path"):
        path = Path(cfg["path"]).expanduser()
        require(
            not path.is_dir(),
            "dataset.path",
            f"{path} is a directory; point it at a question file (.jsonl, .jsonl.gz or a .json array)",
        )
        require(path.is_file(), "dataset.path", f"{path} does not exist")
        return to_samples(read_rows(path), convert, str(path))
    if cfg.get("package"):
        directory = package_dir(cfg["package"])
        if directory is not None:
            path = directory / cfg["file"]
            require(path.is_file(), "dataset.file", f"{path} is missing from package {cfg['package']}")
            return to_samples(read_rows(path), convert, str(path))
    if cfg.get("hub"):
        hub = cfg["hub"]
        return to_samples(hub_rows(cfg), convert, f"hub {hub['id']} {hub.get('config') or ''} {hub['split']}")
    raise ConfigError(
        f"dataset.path: no local copy of {cfg['name']} ({cfg.get('source', 'no package or hub source')}); "
        f"install the package or point dataset.path at a local file ({cfg.get('offline_hint') or 'a question JSONL'})"
    )


def read_rows(path: Path) -> Iterable[tuple[int, dict]]:
    """(line number, object) from JSONL (optionally .gz), or (index, record) from a
    JSON array, parsed record by record so a truncated file yields its whole records."""
    if path.suffix == ".json":
        yield from enumerate(json_array_records(path), 1)
        return
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "rt", encoding="utf-8") as f:
        for number, line in enumerate(f, 1):
            if not line.strip():
                continue
            try:
                yield number, json.loads(line)
            except json.JSONDecodeError as error:
                raise ConfigError(f"dataset.path: {path} line {number}: not JSON ({error.msg})") from None


def to_samples(
    rows: Iterable[tuple[int, dict]], convert: Callable[[dict, int], Sample | None] | None, where: str
) -> list[Sample]:
    """Question-format rows as they are, others through the dataset's converter (which
    may skip a row by returning None)."""
    samples = []
    try:
        for number, row in rows:
            try:
                if not isinstance(row, dict):
                    raise ValueError("not a JSON object")
                sample = question_sample(row) if "turns" in row or convert is None else convert(row, len(samples))
            except (ValueError, KeyError, TypeError, AttributeError) as error:
                raise ConfigError(f"dataset.path: {where} line {number}: {error!r}") from None
            if sample is not None:
                samples.append(sample)
    except (UnicodeError, OSError, EOFError, ValueError) as error:  # unreadable file: bad gzip, encoding, no JSON array
        raise ConfigError(f"dataset.path: cannot read {where}: {error!r}") from None
    require(bool(samples), "dataset.path", f"{where} holds no questions")
    return samples


def question_sample(row: dict) -> Sample:
    """One line of the EAGLE / Spec-Bench question format."""
    turns = row["turns"]
    if not (isinstance(turns, list) and turns and all(isinstance(t, str) for t in turns)):
        raise ValueError("'turns' must be a non-empty list of strings")
    reference = row.get("reference") or []
    reference = [reference] if isinstance(reference, str) else list(reference)
    return Sample(str(row["question_id"]), str(row.get("category", "")), turns, reference)


def hub_rows(cfg: dict) -> Iterable[tuple[int, dict]]:
    """Rows of a hub dataset through `datasets`; offline, from its local cache or one line."""
    from specbench.models.registry import hub_reachable

    hub = cfg["hub"]
    try:
        import datasets

        was_offline = datasets.config.HF_HUB_OFFLINE
        # unreachable hub: this one load reads the local cache only and fails fast
        datasets.config.HF_HUB_OFFLINE = was_offline or not hub_reachable()
        try:
            rows = datasets.load_dataset(hub["id"], hub.get("config"), split=hub["split"])
        finally:
            datasets.config.HF_HUB_OFFLINE = was_offline
    except Exception as error:  # noqa: BLE001 - datasets raises many types for "not available"
        raise ConfigError(
            f"dataset.path: {cfg['name']} comes from the hub ({hub['id']}, split {hub['split']}), which is not "
            f"available here ({type(error).__name__}); point dataset.path at a local copy "
            f"({cfg.get('offline_hint', 'a question JSONL')})"
        ) from None
    return enumerate(rows, 1)
