"""Experiment tracking (`logger=wandb`): what a run logs besides its own files.

The run directory stays the record of truth (resume, tables); W&B gets a copy to compare
runs in its UI: the resolved config, one step per finished sample (tok/s, tau, delta,
speedup), every verification's accept length, and the summary.
"""

from __future__ import annotations

import os

from specbench.errors import ConfigError
from specbench.metrics import speed

MODES = ("offline", "online", "disabled")


class WandbTracker:
    def __init__(self, cfg: dict, run_name: str):
        import wandb

        logger = cfg["logger"]
        mode = os.environ.get("WANDB_MODE") or logger.get("mode") or "offline"
        if mode not in MODES:
            raise ConfigError(f"logger.mode: unknown {mode!r}; choose one of {', '.join(MODES)}")
        os.makedirs(logger["dir"], exist_ok=True)
        self.wandb = wandb
        self.run = wandb.init(
            project=logger["project"],
            entity=logger.get("entity"),
            mode=mode,
            dir=logger["dir"],
            name=run_name,
            group=logger.get("group") or f"{cfg['model']['name']}-{cfg['dataset']['name']}",
            job_type=cfg["method"]["name"],
            tags=list(logger.get("tags") or []),
            config=cfg,
            reinit="finish_previous",
        )
        self.accept_lengths: list[int] = []

    def sample(self, record: dict) -> None:
        method = record["method"]
        steps = method["target_forwards"] or 1
        row = {
            "sample/tok_per_s": method["new_tokens"] / method["seconds"] if method["seconds"] else 0.0,
            "sample/tau": speed.cycle_tokens(method) / steps,
            "sample/delta": method["draft_forwards"] / steps,
        }
        if "baseline" in record and record["baseline"]["seconds"] and method["seconds"]:
            baseline = record["baseline"]
            row["sample/speedup"] = row["sample/tok_per_s"] / (baseline["new_tokens"] / baseline["seconds"])
        self.accept_lengths += method["accept_lengths"]
        self.run.log(row)

    def finish(self, summary: dict) -> None:
        self.run.summary.update(flatten({k: v for k, v in summary.items() if k not in ("config", "environment")}))
        self.run.summary["environment"] = summary["environment"]
        if self.accept_lengths:
            table = self.wandb.Table(
                columns=["verification", "accept_length"], data=list(enumerate(self.accept_lengths))
            )
            self.run.log({"accept_lengths": table, "accept_length_hist": self.wandb.Histogram(self.accept_lengths)})
        self.run.finish()


def flatten(tree: dict, prefix: str = "") -> dict:
    """{'a': {'b': 1}} -> {'a/b': 1}: W&B charts and report panels address flat keys."""
    flat = {}
    for key, value in tree.items():
        if isinstance(value, dict):
            flat.update(flatten(value, f"{prefix}{key}/"))
        elif not isinstance(value, list):
            flat[f"{prefix}{key}"] = value
    return flat


def start(cfg: dict, run_name: str) -> WandbTracker | None:
    name = (cfg.get("logger") or {}).get("name", "none")
    if name == "none":
        return None
    if name != "wandb":
        raise ConfigError(f"logger.name: unknown {name!r}; choose none or wandb")
    return WandbTracker(cfg, run_name)


def read_offline_run(path) -> dict:
    """config, summary and history of an offline W&B run file (run-<id>.wandb), so runs
    logged here can be compared before (or without) `wandb sync`. The file is a LevelDB-style
    log of protobuf records after a 7-byte header: 32 KiB blocks, each record chunk with a
    7-byte header (crc32, length, type: 1 full, 2 first, 3 middle, 4 last)."""
    import json
    import struct

    from wandb.proto import wandb_internal_pb2

    raw = open(path, "rb").read()
    if not raw.startswith(b":W&B"):
        raise ValueError(f"{path} is not a W&B run file")
    block, position, chunks, pending = 32768, 7, [], b""
    while position + 7 <= len(raw):
        if block - position % block < 7:  # block trailer too short for a header: padding
            position += block - position % block
            continue
        _, length, kind = struct.unpack("<IHB", raw[position : position + 7])
        data = raw[position + 7 : position + 7 + length]
        position += 7 + length
        if kind == 1:
            chunks.append(data)
        elif kind in (2, 3):
            pending = data if kind == 2 else pending + data
        elif kind == 4:
            chunks.append(pending + data)
    run = {"config": {}, "summary": {}, "history": []}
    for data in chunks:
        record = wandb_internal_pb2.Record()
        record.ParseFromString(data)
        kind = record.WhichOneof("record_type")
        if kind == "run":
            run["name"] = record.run.display_name
            run["config"].update({item.key: json.loads(item.value_json) for item in record.run.config.update})
        elif kind == "summary":
            run["summary"].update(
                {item.key or "/".join(item.nested_key): json.loads(item.value_json) for item in record.summary.update}
            )
        elif kind == "history":
            run["history"].append(
                {item.key or "/".join(item.nested_key): json.loads(item.value_json) for item in record.history.item}
            )
    return run
