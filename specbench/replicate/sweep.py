"""Sweeps: the Hydra multiruns behind a paper's tables and figures, at two scales.

A runner (runners/<paper>.py) lists its sweeps per scale; this module turns them into
`python -m specbench -m ...` commands and prints them (dry run, or `scale=paper` on a
machine without a GPU), hands them to a cluster launcher, or, on this machine, runs their
runs in groups that share one AR decode per prompt (specbench.run.group). Every run lands in a
directory named by its config hash, so a re-run skips finished runs and finished samples,
and two sweeps that ask for the same run share it.
"""

from __future__ import annotations

import itertools
import json
import shlex
import subprocess
import sys
import time
from dataclasses import dataclass, replace
from pathlib import Path

from hydra.core.override_parser.overrides_parser import OverridesParser

from specbench import ROOT

SCALES = ("cpu", "paper")
# basic: jobs one after another in one process; submitit_local: one after another, a local
# process each (conf/hydra/launcher/submitit_local.yaml, hydra_plugins/specbench_launcher);
# slurm: conf/hydra/launcher/slurm.yaml (hydra-submitit-launcher, GPUs per model's hardware)
LAUNCHERS = ("basic", "submitit_local", "slurm")


@dataclass
class Sweep:
    """One Hydra multirun; comma-separated values in `overrides` are swept."""

    name: str  # what it produces, e.g. "table1" or "figure3"
    overrides: list[str]
    program: list[str] | None = (
        None  # another entry point and its options (an offline stage), run once with `overrides`
    )


def per_method(sweeps: list[Sweep]) -> list[Sweep]:
    """Hydra composes a multirun's base config with the swept overrides left out, so a
    `method.*` override beside a swept `method=a,b` would be checked against the default
    method (ar) and fail: such sweeps become one sweep per method."""
    split = []
    for sweep in sweeps:
        if any(o.startswith("method.") for o in sweep.overrides):
            split += [one for _, one in each_method(sweep)]
        else:
            split.append(sweep)
    return split


def each_method(sweep: Sweep) -> list[tuple[str | None, Sweep]]:
    """(method, the sweep for that method alone) for each method a `method=a,b` sweep
    lists; (None, the sweep) when it names no method."""
    methods = next((o.split("=", 1)[1] for o in sweep.overrides if o.startswith("method=")), None)
    if methods is None:
        return [(None, sweep)]
    return [
        (
            method,
            Sweep(
                sweep.name,
                [f"method={method}" if o.startswith("method=") else o for o in sweep.overrides],
                sweep.program,
            ),
        )
        for method in methods.split(",")
    ]


def on_datasets(sweeps: list[Sweep], names: list[str]) -> list[Sweep]:
    """The sweeps narrowed to these datasets: a sweep left with none is dropped, one that
    names no dataset (an offline stage) is kept."""
    kept = []
    for sweep in sweeps:
        at = next((i for i, o in enumerate(sweep.overrides) if o.startswith("dataset=")), None)
        if at is None:
            kept.append(sweep)
            continue
        left = [d for d in sweep.overrides[at].split("=", 1)[1].split(",") if d in names]
        if left:
            kept.append(
                replace(
                    sweep, overrides=[*sweep.overrides[:at], "dataset=" + ",".join(left), *sweep.overrides[at + 1 :]]
                )
            )
    return kept


def datasets_of(sweeps: list[Sweep]) -> set[str]:
    return {d for s in sweeps for o in s.overrides if o.startswith("dataset=") for d in o.split("=", 1)[1].split(",")}


def pin(sweeps: list[Sweep], defaults: dict[str, dict]) -> list[Sweep]:
    """The paper's shapes: method configs default to `auto` shapes chosen from this
    machine's costs, so every swept method gets its paper values (`defaults`: method ->
    {"config.<key>": value}) as overrides, except keys the sweep sets itself."""
    pinned = []
    for sweep in sweeps:
        keys = {o.split("=", 1)[0] for o in sweep.overrides}
        for method, one in each_method(sweep):
            extra = [
                f"{k.removeprefix('config.')}={v}"
                for k, v in defaults.get(method, {}).items()
                if k.removeprefix("config.") not in keys
            ]
            pinned.append(Sweep(one.name, one.overrides + extra, one.program))
    return pinned


# a replication reads measured speed only: the summary's predicted speedup goes without the
# tree-building time, which a fixed shape would otherwise time on calibration prompts first
# (CAST's re-run spent 19 of its 127 minutes on it, ~29 s a run). Not a hashed key: finished runs stay valid.
UNTIMED = ("costs.calibrate_tree=false",)


def command(sweep: Sweep, output_root: Path, launcher: str = "basic", extra: tuple[str, ...] = ()) -> list[str]:
    """The exact command line that runs `sweep`."""
    if sweep.program:
        return [sys.executable, "-m", *sweep.program, *sweep.overrides]
    launch = [] if launcher == "basic" else [f"hydra/launcher={launcher}"]
    return [
        sys.executable,
        "-m",
        "specbench",
        "-m",
        f"output_root={output_root}",
        *sweep.overrides,
        *UNTIMED,
        *launch,
        *extra,
    ]


def show(cmd: list[str]) -> str:
    return shlex.join(["python", *cmd[1:]])


def launch(
    sweeps: list[Sweep],
    output_root: Path,
    launcher: str,
    extra: tuple[str, ...],
    dry_run: bool,
    seconds: dict[str, float] | None = None,
) -> None:
    """Run (or print) every sweep; stop at the first that fails, naming it. On one machine
    (the basic launcher) the runs of all sweeps that differ only in their method run as
    groups that share one AR decode per prompt (specbench.run.group); the offline stages first,
    in their order. `seconds` adds up the wall time of each sweep name (or group of names,
    "table1+table3"), a failed one's too, so a replication can say where its time went."""
    sweeps = per_method(sweeps)
    if launcher == "basic" and not dry_run:
        for stage in [s for s in sweeps if s.program]:
            cmd = command(stage, output_root)
            print(f"[offline stage] {stage.name}: {show(cmd)}", flush=True)
            timed(stage.name, cmd, seconds)
        decoding = [s for s in sweeps if not s.program]
        planned = grouped(decoding, output_root, extra)
        for index, (names, jobs) in enumerate(planned, 1):
            path = output_root / "groups" / f"{index:02d}.json"
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(json.dumps(jobs, indent=1))
            cmd = [sys.executable, "-m", "specbench.run.group", str(path)]
            print(f"[{index}/{len(planned)}] {'+'.join(names)}: {len(jobs)} runs: {show(cmd)}", flush=True)
            timed("+".join(names), cmd, seconds)
        return
    for index, sweep in enumerate(sweeps, 1):
        cmd = command(sweep, output_root, launcher, extra)
        print(f"[{index}/{len(sweeps)}] {sweep.name}: {show(cmd)}", flush=True)
        if not dry_run:
            timed(sweep.name, cmd, seconds)


def timed(name: str, cmd: list[str], seconds: dict[str, float] | None) -> None:
    start = time.monotonic()
    try:
        result = subprocess.run(cmd, cwd=ROOT)
    finally:
        if seconds is not None:
            seconds[name] = seconds.get(name, 0.0) + time.monotonic() - start
    if result.returncode != 0:
        raise SystemExit(f"error: sweep {name} failed (exit {result.returncode}); re-run the same command to resume it")


def jobs(sweep: Sweep, output_root: Path, extra: tuple[str, ...] = ()) -> list[list[str]]:
    """The override list of each run a sweep's multirun makes: every combination of its
    swept values, as Hydra's basic sweeper expands them."""
    parsed = OverridesParser.create().parse_overrides(
        [f"output_root={output_root}", *sweep.overrides, *UNTIMED, *extra]
    )
    choices = [
        [f"{o.get_key_element()}={v}" for v in o.sweep_string_iterator()] if o.is_sweep_override() else [o.input_line]
        for o in parsed
    ]
    return [list(combination) for combination in itertools.product(*choices)]


def grouped(sweeps: list[Sweep], output_root: Path, extra: tuple[str, ...]) -> list[tuple[list[str], list[list[str]]]]:
    """(sweep names, the runs' override lists) per group of runs that share their AR
    decode (specbench.run.group.shared_key), in the order their first run appears; a run two
    sweeps ask for is run once."""
    from specbench.run.config import compose_config
    from specbench.run.group import out_dir, shared_key

    found: dict[str, tuple[list[str], list[list[str]]]] = {}
    # a run's directory (its identity: specbench.run.config.config_hash) -> its group's key
    group_of: dict[str, str] = {}
    for sweep in sweeps:
        for overrides in jobs(sweep, output_root, extra):
            cfg = compose_config(overrides)
            identity = str(out_dir(cfg))
            known = identity in group_of
            key = group_of.setdefault(identity, shared_key(cfg) or identity)
            names, runs = found.setdefault(key, ([], []))
            if sweep.name not in names:
                names.append(sweep.name)
            if not known:
                runs.append(overrides)
    return list(found.values())
