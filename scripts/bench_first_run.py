"""What a new user waits for: each command's first run from an empty cache, then the same again.

Every command runs as `python -m specbench <overrides>` in a process of its own, with
SPECBENCH_CACHE an empty folder (the model `make install` converted is found in the
environment, not the cache) and its own output folder. The script watches that folder and
reads three times from the command's start: decided (decisions.json written: every probe,
profile and calibration done), first sample (samples.jsonl's first line) and done (exit).
Each command has a cache of its own; the second pass runs every command again on the
cache its first run filled, in a fresh output folder, as a later run of it on the same
machine and model would. Writes results/bench/first-run-<fingerprint>.md and .json.

    .venv/bin/python scripts/bench_first_run.py
    .venv/bin/python scripts/bench_first_run.py --commands "method=pld dataset.limit=2 gen.max_new_tokens=32"
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass
from pathlib import Path

from specbench.costs.fingerprint import device_fingerprint, fingerprint_id

README_FIRST = "dataset.limit=3 gen.max_new_tokens=64"
DRAFTING = "dataset.limit=2 gen.max_new_tokens=64"
COMMANDS = [README_FIRST, *(f"method={m} {DRAFTING}" for m in ("sps", "eagle3", "cast"))]
POLL_S = 0.1


@dataclass
class Timing:
    command: str
    cache: str  # "empty", or "filled" by the command's first run
    decided_s: float | None
    first_sample_s: float | None
    done_s: float
    returncode: int


def first_time(folder: Path, name: str, ready) -> Path | None:
    """A file `name` under `folder` for which ready(path) holds, else None."""
    return next((p for p in folder.rglob(name) if ready(p)), None)


def specbench_command(overrides: str, runs: Path) -> list[str]:
    return [sys.executable, "-m", "specbench", *shlex.split(overrides), f"output_root={runs}"]


def timed_run(args: list[str], cache: Path, runs: Path, log, command: str, cache_state: str) -> Timing:
    """Run `args`, polling its output folder `runs` for the decision and the first sample;
    `command` and `cache_state` label the row."""
    env = {**os.environ, "SPECBENCH_CACHE": str(cache), "PYTHONUNBUFFERED": "1"}
    start = time.perf_counter()
    process = subprocess.Popen(args, env=env, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
    decided = first_sample = None
    while True:
        finished = process.poll() is not None
        elapsed = time.perf_counter() - start
        if decided is None and first_time(runs, "decisions.json", Path.is_file):
            decided = elapsed
        if first_sample is None and first_time(runs, "samples.jsonl", lambda p: p.stat().st_size > 0):
            first_sample = elapsed
        if finished:
            return Timing(command, cache_state, decided, first_sample, elapsed, process.returncode)
        time.sleep(POLL_S)


def seconds(value: float | None) -> str:
    return "-" if value is None else f"{value:.1f}"


def report(timings: list[Timing], fingerprint: dict) -> str:
    limits = fingerprint.get("isa_limits")
    lines = [
        "# First runs and later runs",
        "",
        f"Machine: {fingerprint['cpu_model']} (family/model {fingerprint['cpu_family_model']}; "
        f"{', '.join(fingerprint['isa'])}{'; capped: ' + str(limits) if limits else ''}), "
        f"torch {fingerprint['torch']}, {fingerprint['threads']} threads; "
        f"written {time.strftime('%Y-%m-%d %H:%M')} by scripts/bench_first_run.py.",
        "Seconds from the command's start: decided (decisions.json written), first sample, done. "
        "Each command starts from an empty cache of its own, then runs again on what it filled.",
        "",
        "| command | cache | decided | first sample | done | exit |",
        "| --- | --- | --- | --- | --- | --- |",
    ]
    for t in timings:
        lines.append(
            f"| `{t.command}` | {t.cache} | {seconds(t.decided_s)} | {seconds(t.first_sample_s)} | "
            f"{seconds(t.done_s)} | {t.returncode} |"
        )
    return "\n".join(lines) + "\n"


def main(argv: list[str]) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--commands", nargs="+", default=COMMANDS, help="each a quoted list of Hydra overrides")
    parser.add_argument("--out", type=Path, default=Path("results/bench"))
    parser.add_argument("--log", type=Path, help="the commands' output (default: in the temporary folder)")
    args = parser.parse_args(argv)
    fingerprint = device_fingerprint("cpu")
    name = f"first-run-{fingerprint_id(fingerprint)}"
    args.out.mkdir(parents=True, exist_ok=True)
    log_path = args.log or Path(tempfile.gettempdir()) / f"{name}.log"
    timings = []
    with tempfile.TemporaryDirectory(prefix="specbench-first-run-") as scratch, open(log_path, "w") as log:
        for cache_state in ("empty", "filled"):
            for i, command in enumerate(args.commands):
                log.write(f"\n### {command} ({cache_state} cache)\n")
                log.flush()
                cache, runs = Path(scratch) / f"cache-{i}", Path(scratch) / f"runs-{cache_state}-{i}"
                timing = timed_run(specbench_command(command, runs), cache, runs, log, command, cache_state)
                timings.append(timing)
                print(
                    f"{command} ({cache_state} cache): decided {seconds(timing.decided_s)} s, first sample "
                    f"{seconds(timing.first_sample_s)} s, done {seconds(timing.done_s)} s, exit {timing.returncode}",
                    flush=True,
                )
    (args.out / f"{name}.json").write_text(
        json.dumps({"fingerprint": fingerprint, "timings": [asdict(t) for t in timings]}, indent=1)
    )
    (args.out / f"{name}.md").write_text(report(timings, fingerprint))
    print(f"wrote {args.out / name}.md (the commands' output: {log_path})")
    if any(t.returncode for t in timings):
        sys.exit(f"a command failed: see {log_path}")


if __name__ == "__main__":
    main(sys.argv[1:])
