"""A cached baseline (baseline.mode=cached): the AR results of an earlier `method=<baseline>`
run with identical settings, read instead of decoding AR again beside the method."""

from __future__ import annotations

import json
from pathlib import Path

from specbench.errors import ConfigError
from specbench.metrics.records import read_records
from specbench.run.config import run_name


def cached_baseline_dir(cfg: dict) -> Path:
    """Where an earlier `method=<baseline>` run with identical settings wrote its samples."""
    ar_cfg = dict(cfg, method=cfg["baseline"]["method"])
    return Path(cfg["output_root"]) / ar_cfg["method"]["name"] / run_name(ar_cfg)


def cached_baseline_dtype(cfg: dict) -> str | None:
    """The dtype the cached baseline run decoded in (None: it recorded none)."""
    decisions = cached_baseline_dir(cfg) / "decisions.json"
    return json.loads(decisions.read_text()).get("dtype") if decisions.is_file() else None


def load_cached_baseline(cfg: dict) -> dict[str, dict]:
    """Per-sample AR results from an earlier `method=<baseline>` run with identical settings."""
    ar_cfg = dict(cfg, method=cfg["baseline"]["method"])
    directory = cached_baseline_dir(cfg)
    records = read_records(directory / "samples.jsonl")
    if not records:
        raise ConfigError(
            f"baseline.mode: cached, but no finished {ar_cfg['method']['name']} run with these settings at "
            f"{directory}; "
            "run it first (same overrides, method=ar) or use baseline.mode=paired"
        )
    return {r["id"]: r["method"] for r in records}
