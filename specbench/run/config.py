"""Run configs: composing one from overrides, and its identity (the hash that names a
run's directory, so re-running resumes it)."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import tempfile
from pathlib import Path

from hydra import compose, initialize_config_dir
from hydra.errors import HydraException
from omegaconf import DictConfig, OmegaConf, open_dict

from specbench.costs.fingerprint import isa_limits
from specbench.errors import ConfigError, require
from specbench.models.registry import weights_id
from specbench.run.names import CONF_DIR, choice_names

# engine: how forwards run changes speed (and bf16 rounding)
HASHED_KEYS = ("model", "dataset", "method", "gen", "hardware", "engine", "seed")
# bumped when a key keeps its name but changes meaning, so an old run is not resumed as a new
# one (2: method.tree.depth counts as EAGLE's release does, the layers after the first)
CONVENTIONS = 2
# a model config's drafter entries: a method carries the one it uses, resolved, in
# `method.drafter`, so the others (and a new one added later) do not change a run's identity
DRAFTER_ENTRIES = ("sps_draft", "eagle", "eagle3", "medusa", "hydra")
EMPTY_WEIGHTS = weights_id(None)  # a method with no local drafter weights (AR, PLD, hub heads)
# a dataset config's notes for people (where the data comes from, how to give a local copy):
# rewording them does not change a run's identity
DATASET_NOTES = ("source", "offline_hint")


def config_hash(cfg: dict) -> str:
    """Everything that changes a run's results, nothing that doesn't (paths, logging)."""
    keys = {k: cfg[k] if k != "engine" else cfg.get(k) for k in HASHED_KEYS}
    keys["model"] = {k: v for k, v in cfg["model"].items() if k not in DRAFTER_ENTRIES}
    keys["dataset"] = {k: v for k, v in cfg["dataset"].items() if k not in DATASET_NOTES}
    keys["conventions"] = CONVENTIONS
    weights = weights_id(cfg["method"].get("drafter"))
    if weights != EMPTY_WEIGHTS:  # a head retrained under the same name is a new run
        keys["drafter_weights"] = weights
    if cfg["method"] != cfg["baseline"]["method"]:
        keys["baseline_mode"] = cfg["baseline"]["mode"]
    if limits := isa_limits():  # an emulated older CPU is other hardware: its runs never resume native ones
        keys["isa_limits"] = limits
    blob = json.dumps(keys, sort_keys=True, default=str)
    return hashlib.sha256(blob.encode()).hexdigest()[:10]


def run_name(cfg: dict) -> str:
    return f"{cfg['model']['name']}-{cfg['dataset']['name']}-{config_hash(cfg)}"


def _run_name(*, _root_: DictConfig) -> str:
    """The run's directory name, hashed from the same keys as config_hash (plus baseline)."""
    parts = {}
    for key in (*HASHED_KEYS, "baseline"):
        value = _root_[key]
        parts[key] = OmegaConf.to_container(value, resolve=True) if OmegaConf.is_config(value) else value
    return run_name(parts)


OmegaConf.register_new_resolver("run_name", _run_name, replace=True)


def check_command_line(argv: list[str]) -> None:
    """What Hydra would stop on with a traceback, refused first as one line: an output_root
    that cannot be created, a SLURM launch where there is no SLURM (unknown group choices:
    names.choice_names, run before)."""
    check_output_root(override(argv, "output_root") or OmegaConf.load(CONF_DIR / "config.yaml").output_root)
    multirun = "-m" in argv or "--multirun" in argv
    if multirun and override(argv, "hydra/launcher") == "slurm":  # a single run ignores the launcher
        require(
            shutil.which("srun") is not None,
            "hydra/launcher",
            "slurm submits each run as a SLURM job, and there is no srun on PATH here; "
            "run on a SLURM login node, or drop hydra/launcher=slurm to run the jobs here one after another",
        )


def override(argv: list[str], key: str) -> str | None:
    """The value the command line gives `key` (the last one wins, as in Hydra); None when it
    gives none, or a sweep, or a value with an interpolation (Hydra resolves those)."""
    values = [arg.partition("=")[2] for arg in argv if arg.lstrip("+~").partition("=")[0] == key]
    if not values or "," in values[-1] or "${" in values[-1] or values[-1].startswith(("choice(", "range(", "glob(")):
        return None
    value = values[-1]
    return value[1:-1] if len(value) > 1 and value[0] == value[-1] and value[0] in "'\"" else value


def check_output_root(output_root: str) -> None:
    """Hydra creates the run directory under output_root: refused here when it cannot."""
    root = Path(output_root).expanduser().absolute()
    existing = next(p for p in (root, *root.parents) if os.path.exists(p))  # (False where a parent may not be read)
    cannot = "" if existing == root else f", so {root} cannot be created"
    require(existing.is_dir(), "output_root", f"{existing} is a file, not a directory{cannot}; choose a directory")
    try:
        tempfile.TemporaryDirectory(dir=existing).cleanup()
    except OSError as error:
        raise ConfigError(
            f"output_root: cannot create {root}: {existing} is not writable ({error.strerror}); choose a "
            "writable directory"
        ) from None


def compose_config(overrides: list[str]) -> dict:
    """The resolved run config for `overrides`, outside a Hydra app (for the other
    commands: python -m specbench.run.costs, specbench.run.entmtp_search)."""
    overrides = choice_names(overrides)
    try:
        with initialize_config_dir(str(CONF_DIR), version_base="1.3"):
            cfg = compose("config", overrides)
    except HydraException as error:  # an override Hydra cannot read or place: its words, not its traceback
        said = [line.strip() for line in str(error).splitlines() if line.strip() and not set(line.strip()) <= {"^"}]
        said = [line for line in said if not line.startswith("See https")]
        raise ConfigError(f"overrides {' '.join(overrides)}: {' '.join(said)}") from None
    with open_dict(cfg):
        cfg.hydra = None
    return OmegaConf.to_container(cfg, resolve=True)
