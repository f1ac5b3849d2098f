"""Finding our runs: a published row's setting as run-config filters (or why it has no
run), and the runs, per-prompt values and re-scored answers that claims and figures read."""

from __future__ import annotations

import numpy as np
import pandas as pd

from specbench import ROOT
from specbench.data import questions
from specbench.metrics import quality
from specbench.metrics.speed import batch_groups, sample_speedup, sample_tau, totals
from specbench.replicate import results


def not_run(method: str) -> str:
    """Why a published row of `method` has no run: specbench lacks the method, or has it
    (conf/method) but this runner does not sweep it yet."""
    if (ROOT / "conf" / "method" / f"{method}.yaml").is_file():
        return f"{method} is in specbench but not in this runner's sweeps"
    return f"no {method} in specbench"


def parse_setting(setting: str) -> dict[str, str]:
    """'draft=qwen3-0.6b;gamma=6' -> {'draft': 'qwen3-0.6b', 'gamma': '6'}."""
    return dict(part.split("=", 1) for part in setting.split(";") if part)


def base_filters(row: pd.Series) -> dict:
    return {
        "config.model.name": row["model"],
        "config.dataset.name": row["dataset"],
        "temperature": float(row["temperature"]),
    }


def number(text: str) -> float | int:
    value = float(text)
    return int(value) if value.is_integer() and "." not in text else value


def matching(runs: pd.DataFrame, **filters) -> pd.DataFrame:
    """The runs matching `filters` (short names: method, dataset, temperature, or a config column)."""
    columns = {
        ("config.method.name" if k == "method" else "config.dataset.name" if k == "dataset" else k): v
        for k, v in filters.items()
    }
    return results.select(runs, columns)


def one(runs: pd.DataFrame, **filters) -> pd.Series:
    """The run matching `filters` with the most samples; KeyError when there is none, so a
    claim that needs it says 'cannot tell'."""
    found = matching(runs, **filters)
    if found.empty:
        raise KeyError(", ".join(f"{k}={v}" for k, v in filters.items()))
    return found.sort_values("results.samples").iloc[-1]


SWEEP_SIZE = ("config.model.name", "config.dataset.limit", "config.gen.max_new_tokens")


def size_keys(runs: pd.DataFrame, columns=SWEEP_SIZE) -> pd.Series:
    """Each run's model, prompt count and answer length as one string (a null limit, the
    whole dataset, is "None": pandas' astype(str) would keep it missing, unequal to itself)."""
    present = [c for c in columns if c in runs]
    return runs[present].apply(lambda row: "|".join(str(None if pd.isna(v) else v) for v in row), axis=1)


def sweep_runs(runs: pd.DataFrame, axis: str, values: list, **filters) -> dict:
    """One run per value of a sweep's `axis` (a config column), all of one model, prompt count
    and answer length: the one found at the most values (ties: the first found), so a
    headline table's run that repeats a point of a reduced sweep with more prompts is left
    out and the points share prompts and lengths."""
    per_value = {value: matching(runs, **filters, **{axis: value}) for value in values}
    per_value = {value: found for value, found in per_value.items() if not found.empty}
    sizes = {value: size_keys(found) for value, found in per_value.items()}
    counts = pd.Series([size for found in sizes.values() for size in dict.fromkeys(found)], dtype=object).value_counts(
        sort=False
    )
    if counts.empty:
        return {}
    size = counts.index[counts.argmax()]
    return {
        value: found[sizes[value] == size].sort_values("results.samples").iloc[-1]
        for value, found in per_value.items()
        if (sizes[value] == size).any()
    }


def per_prompt(run: pd.Series) -> pd.DataFrame:
    """τ and δ of every prompt of a run (TALON Figure 6's points)."""
    rows = []
    for record in results.samples(run):
        method = record["method"]
        steps = method["target_forwards"]
        rows.append(
            {
                "id": record["id"],
                "tau": sample_tau(method) if steps else np.nan,
                "delta": method["draft_forwards"] / steps if steps else np.nan,
            }
        )
    return pd.DataFrame(rows)


def prompt_values(run: pd.Series, metric: str) -> dict[str, float]:
    """Per prompt of a run: `tau` (cycle tokens per target forward) or `speedup` (its tok/s over
    AR's on the same prompt in the same run). Batched runs give one value per batch (keyed
    by its batch id): its rows share one wall time, and speedup there is throughput."""
    records = results.samples(run)
    if any(r["method"].get("batch_size", 1) > 1 for r in records):
        return batch_values(records, metric)
    values = {}
    for record in records:
        m, b = record["method"], record.get("baseline")
        if metric == "tau":
            value = sample_tau(m)
        else:
            value = sample_speedup(m, b) if b else None
        if value is not None:
            values[record["id"]] = value
    if not values:
        raise KeyError(f"per-prompt {metric} of {run.get('run_dir')}")
    return values


def group_unit(run: pd.Series) -> str:
    """What prompt_values gives one value per in this run: "batches" in a batched run, else "prompts"."""
    return "batches" if any(r["method"].get("batch_size", 1) > 1 for r in results.samples(run)) else "prompts"


def one_or_none(runs: pd.DataFrame, **filters) -> pd.Series | None:
    """`one`, or None when no run matches: a case of a claim "in every case" that has no run
    is named, not skipped (replicate.verdicts.every_higher)."""
    try:
        return one(runs, **filters)
    except KeyError:
        return None


def answers(run: pd.Series) -> dict[str, tuple[questions.Sample, list[str], list[str] | None]]:
    """Per prompt of a run: its dataset sample (references included: the committed copy, or
    reloaded from the run's own dataset config), the method's answer turns and AR's beside
    them (None without)."""
    samples = results.questions(run)
    return {
        r["id"]: (samples[r["id"]], r["method"]["turn_texts"], r.get("baseline", {}).get("turn_texts"))
        for r in results.samples(run)
        if r["id"] in samples
    }


def scored(found: dict, picked: list[str], metric: str, key: str, baseline: bool = False) -> float | None:
    """Quality `metric` (a specbench.metrics.quality function) over the prompts `picked`
    (repeats allowed, as resampling draws them), its value `key`."""
    chosen = [found[p] for p in picked]
    return quality.METRICS[metric]([s for s, _, _ in chosen], [b if baseline else m for _, m, b in chosen]).get(key)


def prompt_quality(run: pd.Series, metric: str, key: str, baseline: bool = False) -> dict[str, float]:
    """A per-answer quality (accuracy, pass@1, ROUGE-L: a mean over answers) of every prompt
    of a run, each scored once, so resampling averages them instead of re-scoring."""
    # AR's only where it ran beside
    found = {p: answer for p, answer in answers(run).items() if answer[2] is not None or not baseline}
    values = {p: scored(found, [p], metric, key, baseline) for p in found}
    return {p: v for p, v in values.items() if v is not None}


def shared_prompts(per_run: list[dict], what: str) -> list[str]:
    """The prompts (keys) every run's values have, sorted; KeyError naming `what` when none."""
    shared = sorted(set.intersection(*(set(v) for v in per_run))) if per_run else []
    if not shared:
        raise KeyError(f"prompts {what}")
    return shared


def batch_values(records: list[dict], metric: str) -> dict[str, float]:
    """Per batch of a batched run (keyed by its batch id): tau over its rows, or its
    throughput over AR's on the same batch."""
    values = {}
    for group in batch_groups([r["method"] for r in records]):
        rows = [records[i] for i in group]
        method = totals([r["method"] for r in rows])
        if metric == "tau":
            value = method["tau"]
        else:
            base = totals([r["baseline"] for r in rows]) if all("baseline" in r for r in rows) else {}
            value = method["tok_per_s"] / base["tok_per_s"] if method["tok_per_s"] and base.get("tok_per_s") else None
        if value is not None:
            values[rows[0]["method"]["batch_id"]] = value
    if not values:
        raise KeyError(f"per-batch {metric}")
    return values
