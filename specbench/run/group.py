"""Runs that differ only in their method, decoded together so AR is decoded once per prompt.

A replication sweeps one setting (theta, a tree size, a component switch) or sets methods
side by side on the same prompts; run one by one, each run decodes the same AR baseline
again beside it (a fifth of a replication's time went to such repeats). A group decodes,
per batch of prompts, AR once and then every method of the group that still lacks that
batch, all in one block, in one process, in the order `runner.block_order` gives: each
method has AR before it in half the blocks and after it in the other half, so drift within
a block hits all alike. Each run keeps its own directory, records, resume and summary, exactly as it would
alone; its records say how many methods shared their AR decode (`block_methods`).

    python -m specbench.run.group JOBS.json   # a JSON list of override lists, one per run

Every group of two or more runs also decodes the protocol's null: AR once more per batch,
timed as a member against the shared AR decode (method name `null`, its own directory
under multirun/null/). Its speedup should read 1.00; how far its interval strays from that
is the bias the block order and the machine leave in every other member's speedup.

Runs join a group only when everything but the method (and what does not change decoding:
costs, output_root) is equal, the baseline is paired, nothing is logged to W&B, and their
plans chose the same target forward (dtype and kind); the rest run on their own, as
`python -m specbench` would.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from specbench.errors import ConfigError, run_command
from specbench.run.config import check_output_root, compose_config, run_name
from specbench.run.runner import Runner, decode_in_blocks

UNSHARED_KEYS = ("method", "costs", "output_root")  # what may differ within a group: none of it changes the AR decode


def out_dir(cfg: dict) -> Path:
    """Where a multirun job of this config writes (conf/config.yaml hydra.sweep), so a run
    resumes the same directory whether it ran in a group or in a Hydra multirun."""
    return Path(cfg["output_root"]) / "multirun" / cfg["method"]["name"] / run_name(cfg)


def shared_key(cfg: dict) -> str | None:
    """Runs with equal keys decode the same AR baseline; None: a run that pairs no AR, or
    one logged to W&B (one W&B run per process at a time: it runs on its own)."""
    if cfg["baseline"]["mode"] != "paired" or cfg["method"] == cfg["baseline"]["method"]:
        return None
    if (cfg.get("logger") or {}).get("name", "none") != "none":
        return None
    return json.dumps({k: v for k, v in cfg.items() if k not in UNSHARED_KEYS}, sort_keys=True, default=str)


def groups(cfgs: list[dict]) -> list[list[int]]:
    """Indexes of `cfgs` in groups that may share AR, in order of first appearance; a run
    that cannot share is a group of its own."""
    found: dict[str, list[int]] = {}
    alone = []
    for index, cfg in enumerate(cfgs):
        key = shared_key(cfg)
        if key is None:
            alone.append([index])
        else:
            found.setdefault(key, []).append(index)
    return sorted([*found.values(), *alone], key=lambda g: g[0])


def forward_of(runner: Runner) -> tuple:
    """What AR's cost and outputs depend on beyond the shared config: the target's dtype and
    forward (its kind names every engine.compile setting, kernels.Compiled). Not the compile
    probe's record, which grows as each run of a group probes the sizes it verifies."""
    decided = runner.decided
    return decided.dtype.value, decided.precision, decided.forward.value


NULL = "null"  # the method name of a group's null member


def null_config(cfg: dict) -> dict:
    """A group member's config with the baseline's method as its own, named NULL: AR timed
    as a member (paired, as it is not the baseline's method by name)."""
    return {**cfg, "method": {**cfg["baseline"]["method"], "name": NULL}}


def null_runner(cfg: dict) -> Runner:
    """The group's null member, in its own directory (a multirun of the config it writes)."""
    cfg = null_config(cfg)
    path = out_dir(cfg)
    path.mkdir(parents=True, exist_ok=True)
    return Runner(cfg, path)


def run_group(runners: list[Runner]) -> list[dict]:
    """Decode the runners (one shared AR config) block by block, and the group's null in
    the blocks of the first runner that decodes, on its plan and target; returns their
    summaries, the null's last."""
    left = {id(r): r.prepare() for r in runners}
    decoding = [r for r in runners if left[id(r)]]
    by_forward: dict[tuple, list[Runner]] = {}
    for runner in decoding:
        by_forward.setdefault(forward_of(runner), []).append(runner)
    null = null_runner(runners[0].cfg)
    # with every member finished the null decodes in blocks of its own, against its own AR
    left[id(null)] = null.prepare_beside(decoding[0]) if decoding else null.prepare()
    if left[id(null)]:
        by_forward.setdefault(forward_of(decoding[0] if decoding else null), []).append(null)
    for members in by_forward.values():
        decode_in_blocks(members, [left[id(r)] for r in members])
    return [runner.finish() for runner in (*runners, null)]


def main(argv: list[str]) -> None:
    if len(argv) != 1:
        raise ConfigError("usage: python -m specbench.run.group JOBS.json (a JSON list of override lists, one per run)")
    jobs = json.loads(Path(argv[0]).read_text())
    cfgs = [compose_config(list(overrides)) for overrides in jobs]
    for cfg in cfgs:
        check_output_root(str(cfg["output_root"]))
    for indexes in groups(cfgs):
        runners = []
        for i in indexes:
            path = out_dir(cfgs[i])
            path.mkdir(parents=True, exist_ok=True)
            runners.append(Runner(cfgs[i], path))
        if len(runners) == 1:
            runners[0].run()
        else:
            print(null_line(run_group(runners)[-1]))


def null_line(summary: dict) -> str:
    """The null's speedup and interval, said after the group's summaries."""
    speedup, bounds = summary.get("speedup"), summary.get("speedup_ci95")
    measured = f"{speedup:.3f}x" if speedup else "not timed"
    spread = f"[{bounds[0]:.3f}, {bounds[1]:.3f}]" if bounds else "none (fewer than 10 batches)"
    return f"protocol null (AR timed as a member against the shared AR): {measured}, 95% interval {spread}"


if __name__ == "__main__":
    try:
        run_command(main, sys.argv[1:])
    except KeyboardInterrupt:
        print(
            "\ninterrupted: finished samples are kept in each run's samples.jsonl; run the same command to resume",
            file=sys.stderr,
        )
        sys.exit(130)
