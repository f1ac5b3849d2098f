"""`python -m specbench [group=choice ...] [key=value ...]`: one benchmark run."""

from __future__ import annotations

import sys
from pathlib import Path

import hydra
from hydra.core.hydra_config import HydraConfig
from omegaconf import DictConfig, OmegaConf

from hydra_plugins.specbench_launcher import quiet_schema_match_warning
from specbench.errors import run_command
from specbench.run.config import check_command_line
from specbench.run.names import choice_names


@hydra.main(version_base="1.3", config_path="../conf", config_name="config")
def main(cfg: DictConfig) -> None:
    from specbench.errors import ConfigError
    from specbench.run.runner import Runner

    out_dir = Path(HydraConfig.get().runtime.output_dir)
    try:
        Runner(OmegaConf.to_container(cfg, resolve=True), out_dir).run()
    except ConfigError as error:
        print(f"error: {error}", file=sys.stderr)
        sys.exit(2)
    except KeyboardInterrupt:
        print(
            f"\ninterrupted: finished samples are kept in {out_dir / 'samples.jsonl'}; run the same command to resume",
            file=sys.stderr,
        )
        sys.exit(130)


if __name__ == "__main__":
    sys.argv[1:] = run_command(choice_names, sys.argv[1:])  # Hydra reads sys.argv
    run_command(check_command_line, sys.argv[1:])
    quiet_schema_match_warning()
    main()
