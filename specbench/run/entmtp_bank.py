"""EntMTP out of the box: a run whose `method.tree.bank` is null (the default) gets this
machine's tree bank for its task, searched on first use (specbench.run.entmtp_search) and
cached, as `auto` tree shapes are: the frontier is searched with the run's heads, verifier
and temperature, on `costs.calibration_prompts` prompts of `costs.calibration_tokens`
tokens (outside those the run decodes, where the dataset has enough), and ranked by this
machine's cost profile. A bank given by path is used as it is."""

from __future__ import annotations

import hashlib
import json
import time
from pathlib import Path

from omegaconf import OmegaConf

from specbench.costs.fingerprint import device_fingerprint, fingerprint_id
from specbench.data import questions
from specbench.models import registry
from specbench.run.config import CONF_DIR
from specbench.trees.entmtp import BANK_VERSION, ScheduledTree, bank_version, load_bank

# the replication's search shape (runners/entmtp.py): frontier trees up to 12 draft nodes, 3 deep
BUDGET, MAX_DEPTH = 12, 3
STATIC_METHOD = CONF_DIR / "method" / "hydra.yaml"  # the static tree of the heads the search grows from


def banked(cfg: dict) -> bool:
    """Whether the run's tree policy reads a bank and none is given."""
    tree = cfg["method"].get("tree") or {}
    return tree.get("_target_") == f"{ScheduledTree.__module__}.{ScheduledTree.__name__}" and not tree.get("bank")


def bank_path(cfg: dict) -> Path:
    """This machine's bank for the run's model, heads, verifier and temperature (every task in one file)."""
    key = {
        "model": cfg["model"]["name"],
        "heads": cfg["method"]["drafter"],
        "verifier": cfg["method"]["verifier"],
        "temperature": cfg["gen"]["temperature"],
        "dtype": cfg["hardware"].get("dtype"),
        "machine": fingerprint_id(device_fingerprint(cfg["hardware"]["device"], cfg["hardware"].get("threads"))),
    }
    digest = hashlib.sha256(json.dumps(key, sort_keys=True, default=str).encode()).hexdigest()[:12]
    return registry.cache_dir() / "entmtp" / f"bank-{cfg['model']['name']}-{digest}.json"


def search_config(cfg: dict) -> dict:
    """The run's config with the heads' static tree (conf/method/hydra.yaml's, all its nodes) in
    place of the scheduler, decoding `costs.calibration_tokens` tokens a prompt, one at a time,
    from the whole dataset."""
    static = OmegaConf.to_container(OmegaConf.load(STATIC_METHOD).tree, resolve=True)
    return {
        **cfg,
        "method": {**cfg["method"], "name": "hydra", "tree": {**static, "size": None}},
        "gen": {**cfg["gen"], "max_new_tokens": cfg["costs"]["calibration_tokens"], "batch_size": 1},
        "dataset": {**cfg["dataset"], "limit": None},  # the search picks its prompts (with_bank)
    }


def with_bank(cfg: dict) -> dict:
    """`cfg` with its bank path set: unchanged where the policy reads no bank or one is given;
    else this machine's cached bank, the run's task searched into it first where it lacks it."""
    if not banked(cfg):
        return cfg
    path, task = bank_path(cfg), cfg["dataset"]["name"]
    if not (bank_version(path) == BANK_VERSION and task in load_bank(str(path))[0]):
        from specbench.run.entmtp_search import search

        prompts = cfg["costs"]["calibration_prompts"]
        limit = cfg["dataset"].get("limit") or 0
        spare = limit and len(questions.load({**cfg["dataset"], "limit": None})) - limit >= prompts
        print(
            f"method.tree.bank: none given, so this machine's EntMTP trees for {task} are searched once "
            f"({prompts} prompts x {cfg['costs']['calibration_tokens']} tokens"
            f"{', outside the ones this run decodes' if spare else ', among the ones this run decodes'}; "
            f"about 3 min on a 2-core CPU the first time; cached in {path})"
        )
        start = time.monotonic()
        search(
            search_config(cfg),
            path,
            BUDGET,
            MAX_DEPTH,
            prompts,
            cfg["costs"]["calibration_tokens"],
            exclude_limit=limit if spare else 0,
        )
        print(f"method.tree.bank: {task} searched in {time.monotonic() - start:.0f} s")
    return {**cfg, "method": {**cfg["method"], "tree": {**cfg["method"]["tree"], "bank": str(path)}}}
