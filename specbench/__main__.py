"""`python -m specbench [group=choice ...] [key=value ...]`: one benchmark run."""

from __future__ import annotations

import sys
from pathlib import Path

import hydra
from hydra.core.hydra_config import HydraConfig
from omegaconf import DictConfig, OmegaConf

from specbench.config import CONF_DIR, HASHED_KEYS, run_name

GROUPS = ("model", "dataset", "method", "hardware", "logger")


def _run_name(*, _root_: DictConfig) -> str:
    """The run's directory name, hashed from the same keys as config_hash (plus baseline)."""
    parts = {}
    for key in (*HASHED_KEYS, "baseline"):
        value = _root_[key]
        parts[key] = OmegaConf.to_container(value, resolve=True) if OmegaConf.is_config(value) else value
    return run_name(parts)


OmegaConf.register_new_resolver("run_name", _run_name, replace=True)


def check_choices(argv: list[str]) -> None:
    """Unknown group choices get one line listing the valid ones (Hydra prints a page)."""
    for arg in argv:
        key, sep, value = arg.lstrip("+~").partition("=")
        group = key.split("@")[0]
        if not sep or group not in GROUPS or "," in value or value.startswith(("choice(", "range(", "glob(")):
            continue
        choices = sorted(p.stem for p in (CONF_DIR / group).glob("*.yaml"))
        if value not in choices:
            print(f"error: {key}: unknown {group} {value!r}; choose one of {', '.join(choices)}", file=sys.stderr)
            sys.exit(2)


def compose_config(overrides: list[str]) -> dict:
    """The resolved run config for `overrides`, outside a Hydra app (for the other
    commands: python -m specbench.costs, specbench.search)."""
    from hydra import compose, initialize_config_dir
    from omegaconf import open_dict

    check_choices(overrides)
    with initialize_config_dir(str(CONF_DIR), version_base="1.3"):
        cfg = compose("config", overrides)
    with open_dict(cfg):
        cfg.hydra = None
    return OmegaConf.to_container(cfg, resolve=True)


@hydra.main(version_base="1.3", config_path="../conf", config_name="config")
def main(cfg: DictConfig) -> None:
    from specbench.errors import ConfigError
    from specbench.run import Runner

    out_dir = Path(HydraConfig.get().runtime.output_dir)
    try:
        Runner(OmegaConf.to_container(cfg, resolve=True), out_dir).run()
    except ConfigError as error:
        print(f"error: {error}", file=sys.stderr)
        sys.exit(2)
    except KeyboardInterrupt:
        print(f"\ninterrupted: finished samples are kept in {out_dir / 'samples.jsonl'}; run the same command to resume", file=sys.stderr)
        sys.exit(130)


if __name__ == "__main__":
    check_choices(sys.argv[1:])
    main()
