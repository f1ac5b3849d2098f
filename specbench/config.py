"""Run identity: the hash that names a run's directory, so re-running resumes it."""

from __future__ import annotations

import hashlib
import json

HASHED_KEYS = ("model", "dataset", "method", "gen", "hardware", "seed")


def config_hash(cfg: dict) -> str:
    """Everything that changes a run's results, nothing that doesn't (paths, logging)."""
    keys = {k: cfg[k] for k in HASHED_KEYS}
    if cfg["method"] != cfg["baseline"]["method"]:
        keys["baseline_mode"] = cfg["baseline"]["mode"]
    blob = json.dumps(keys, sort_keys=True, default=str)
    return hashlib.sha256(blob.encode()).hexdigest()[:10]


def run_name(cfg: dict) -> str:
    return f"{cfg['model']['name']}-{cfg['dataset']['name']}-{config_hash(cfg)}"
