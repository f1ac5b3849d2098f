"""logger=wandb, offline: what a run logs, and the comparison built from offline runs."""

import os
import subprocess
import sys
from pathlib import Path

from specbench.run.tracking import read_offline_run

# a small cost profile and calibration: these tests check logging, not speed
CHEAP_COSTS = [
    "hardware.dtype=float32",
    "costs.max_n=8",
    "costs.repeats=1",
    "costs.calibration_prompts=1",
    "costs.calibration_tokens=12",
]

ROOT = Path(__file__).resolve().parents[2]


def env(**extra):
    base = {k: v for k, v in os.environ.items() if not k.startswith("WANDB_")}
    return {**base, "WANDB_SILENT": "true", **extra}


def test_offline_wandb_run_has_config_samples_summary_and_accept_lengths(tmp_path):
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "specbench",
            "logger=wandb",
            "method=pld",
            "dataset.limit=2",
            "dataset.max_turns=1",
            "gen.max_new_tokens=8",
            *CHEAP_COSTS,
            f"output_root={tmp_path}",
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=600,
        env=env(HOME=str(tmp_path)),
    )
    assert result.returncode == 0, result.stderr[-2000:]
    [path] = (tmp_path / "wandb").glob("offline-run-*/run-*.wandb")
    run = read_offline_run(path)
    assert run["config"]["method"]["name"] == "pld" and run["config"]["gen"]["max_new_tokens"] == 8
    assert (
        run["summary"]["results/samples"] == 2 and run["summary"]["speedup"] > 0 and run["summary"]["results/tau"] >= 1
    )
    assert [h["_step"] for h in run["history"] if "sample/tau" in h] == [0, 1]
    assert list(path.parent.glob("files/media/table/accept_lengths_*.table.json"))
    report = subprocess.run(
        [sys.executable, "scripts/wandb_report.py", "--offline", str(tmp_path)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert report.returncode == 0 and "pld speedup" in report.stdout and "mt_bench" in report.stdout


def test_bad_logger_mode_is_one_line(tmp_path):
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "specbench",
            "logger=wandb",
            "logger.mode=sometimes",
            "dataset.limit=1",
            *CHEAP_COSTS,
            f"output_root={tmp_path}",
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=600,
        env=env(HOME=str(tmp_path)),
    )
    assert result.returncode == 2 and "Traceback" not in result.stderr
    [line] = [l for l in result.stderr.splitlines() if l.startswith("error:")]
    assert "logger.mode" in line and "offline" in line


def test_online_comparison_without_a_key_is_one_line(tmp_path):
    result = subprocess.run(
        [sys.executable, "scripts/wandb_report.py", "--project", "specbench"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        env=env(HOME=str(tmp_path)),
    )
    assert (
        result.returncode == 2
        and result.stderr.strip().startswith("error:")
        and len(result.stderr.strip().splitlines()) == 1
    )
