"""Finished runs as one table: every summary.json under a sweep's output root, flattened.

Columns are the summary's keys joined by dots (`results.tau`, `quality.gsm8k_accuracy`,
`config.method.tree.depth`, ...) plus the short `model`, `method`, `dataset` and
`temperature` that tables select on.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import pandas as pd

# where each published metric lives in a summary; "{side}" is `quality` for the method
# and `baseline_quality` for the AR baseline it ran beside
METRIC_COLUMNS = {
    "speedup": "speedup",
    "tau": "results.tau",
    "delta": "results.delta",
    "tok_per_s": "results.tok_per_s",
    "nll": "results.target_nll_per_token",
    "rouge_l": "{side}.rouge_l",
    "bleu": "{side}.bleu",
    "chrf": "{side}.chrf",
    "judge_score": "{side}.mt_bench_judge_turn1",
}
ACCURACY_COLUMNS = {  # first present wins: HumanEval avg@4 where the paper sampled 4 answers
    "gsm8k": ["{side}.gsm8k_accuracy"],
    "humaneval": ["{side}.humaneval_avg@4", "{side}.humaneval_pass@1"],
}


def collect(root: Path) -> pd.DataFrame:
    """One row per finished run under `root` (runs without a summary are unfinished)."""
    summaries = []
    for path in sorted(Path(root).rglob("summary.json")):
        summary = json.loads(path.read_text())
        if "config" in summary:
            summary["run_dir"] = str(path.parent)
            summaries.append(summary)
    if not summaries:
        return pd.DataFrame(columns=["model", "method", "dataset", "temperature", "run_dir"])
    runs = pd.json_normalize(summaries)
    runs["temperature"] = runs["config.gen.temperature"].astype(float)
    return runs


def select(runs: pd.DataFrame, filters: dict) -> pd.DataFrame:
    """Runs whose column equals each filter value (floats compared with a tolerance)."""
    mask = pd.Series(True, index=runs.index)
    for column, wanted in filters.items():
        if column not in runs:
            return runs.iloc[0:0]
        values = runs[column]
        if isinstance(wanted, float) or (isinstance(wanted, int) and not isinstance(wanted, bool)):
            mask &= values.apply(lambda v: isinstance(v, (int, float)) and not isinstance(v, bool) and math.isclose(v, wanted, abs_tol=1e-9))
        else:
            mask &= values == wanted
    return runs[mask]


def metric(run: pd.Series, name: str, dataset: str, baseline: bool = False) -> float | None:
    """A published metric's value in one run; `baseline` reads the AR run beside it
    (whose speedup and tau are 1 by definition)."""
    side = "baseline_quality" if baseline else "quality"
    if baseline and name in ("speedup", "tau"):
        return 1.0
    if baseline and name in ("delta", "tok_per_s", "nll"):
        column = {"delta": "baseline.delta", "tok_per_s": "baseline.tok_per_s", "nll": "baseline.target_nll_per_token"}[name]
        return number(run.get(column))
    columns = ACCURACY_COLUMNS.get(dataset, []) if name == "accuracy" else [METRIC_COLUMNS.get(name, "")]
    for column in columns:
        value = number(run.get(column.format(side=side)))
        if value is not None:
            return value
    return None


def number(value) -> float | None:
    """A finite number in a run's column, else None (missing, NaN, a flag)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or math.isnan(value):
        return None
    return float(value)


def samples(run: pd.Series) -> list[dict]:
    """The per-sample records of one run (samples.jsonl beside its summary)."""
    path = Path(run["run_dir"]) / "samples.jsonl"
    if not path.is_file():  # a claim that needs it says which run is missing
        raise KeyError(f"samples of {run['run_dir']}")
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]
