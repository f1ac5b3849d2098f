"""What the runners of all papers share: the scales' common overrides, the dataset sources
per scale, matching a published row's setting to run config keys, and figure/claim helpers."""

from __future__ import annotations

import json
import math
import random
from pathlib import Path

import numpy as np
import pandas as pd
import yaml

from specbench import ROOT
from specbench.data import questions
from specbench.metrics import quality
from specbench.metrics.speed import MIN_GROUPS, batch_groups, percentile_interval, resampled_ci, sample_speedup, totals
from specbench.replicate import results
from specbench.replicate.sweep import Sweep

# Spec-Bench's convention (80 prompts) for the speed-only datasets at paper scale; the
# accuracy datasets run in full, as their published accuracies need
PAPER_LIMITS = {"mt_bench": None, "humaneval": None, "gsm8k": None, "alpaca": 80, "cnn_dm": 80, "nq": 80, "wmt19": None}
PAPER_REPEATS = {"humaneval": 4}  # MARS reports HumanEval accuracy as avg@4
PAPER_MAX_NEW_TOKENS = 1024  # TALON E.1; MARS states none and builds on the same EAGLE-3 code
BIG_MODEL_B = 32  # above this a model gets 8 GPUs (both papers' setups)


# offline copies of the datasets no pip package ships (../shared/data, see its README)
OFFLINE_COPIES = {
    "alpaca": "../shared/data/eagle/alpaca.jsonl",
    "cnn_dm": "../shared/data/eagle/sum.jsonl",
    "nq": "../shared/data/eagle/qa.jsonl",
    "wmt19": "../shared/data/mars/wmt19.jsonl",
}


# Lookahead's window as the MARS and CAST baselines run it: neither paper gives theirs, so the
# Lookahead paper's largest (7B) setting, W=15, N=5, G=15
LOOKAHEAD = {"config.method.tree.window": 15, "config.method.tree.ngram": 5, "config.method.tree.candidates": 15}

# cpu scale: a paper's headline sweeps run --prompts x --max-new-tokens (each runner's default:
# enough prompts for an interval to decide); every other sweep at most these, which each
# table cell's note (n=...) and the report's setup line show
REDUCED_PROMPTS, REDUCED_TOKENS = MIN_GROUPS, 64  # the fewest prompts an interval is drawn from


def sweep_size(scale: str, name: str, headline: set[str], prompts: int, max_new_tokens: int) -> tuple[int, int]:
    """(prompts, new tokens) for sweep `name`: reduced at cpu scale unless it is a headline one."""
    if scale != "cpu" or name in headline:
        return prompts, max_new_tokens
    return min(prompts, REDUCED_PROMPTS), min(max_new_tokens, REDUCED_TOKENS)


def dataset_conf(name: str) -> dict:
    return yaml.safe_load((ROOT / "conf" / "dataset" / f"{name}.yaml").read_text())


def cpu_common(prompts: int, max_new_tokens: int) -> list[str]:
    return [f"dataset.limit={prompts}", "dataset.seed=0", "dataset.max_turns=1", f"gen.max_new_tokens={max_new_tokens}"]


def by_source(name: str, datasets: list[str], overrides: list[str], scale: str, models: list[str], prompts: int, max_new_tokens: int) -> list[Sweep]:
    """The sweeps for `datasets` x `models` at a scale.

    cpu: the embedded model; a dataset no pip package ships reads its offline copy
    (OFFLINE_COPIES) in a sweep of its own, and is left out when that copy is absent (its
    cells then say it was not run). paper: the hub, the paper's
    limits and models, 1 GPU per model up to 32B and 8 above."""
    if scale == "cpu":
        common = cpu_common(prompts, max_new_tokens)
        packaged = [d for d in datasets if dataset_conf(d).get("package")]
        sweeps = [Sweep(name, [f"dataset={','.join(packaged)}", *overrides, *common])] if packaged else []
        for dataset in datasets:
            copy = OFFLINE_COPIES.get(dataset)
            if dataset not in packaged and copy and (ROOT / copy).is_file():
                sweeps.append(Sweep(name, [f"dataset={dataset}", f"dataset.path={copy}", *overrides, *common]))
        return sweeps
    sweeps = []
    for big in (False, True):
        group = [m for m in models if (model_params(m) > BIG_MODEL_B) == big]
        if not group:
            continue
        for limit, repeats in sorted({(PAPER_LIMITS.get(d), PAPER_REPEATS.get(d, 1)) for d in datasets}, key=str):
            chosen = [d for d in datasets if (PAPER_LIMITS.get(d), PAPER_REPEATS.get(d, 1)) == (limit, repeats)]
            sweeps.append(Sweep(
                name,
                [f"model={','.join(group)}", f"dataset={','.join(chosen)}", f"dataset.limit={'null' if limit is None else limit}",
                 *([f"dataset.repeats={repeats}"] if repeats > 1 else []),
                 f"gen.max_new_tokens={PAPER_MAX_NEW_TOKENS}", f"hardware={'multi-gpu' if big else 'gpu'}", *overrides],
            ))
    return sweeps


def not_run(method: str) -> str:
    """Why a published row of `method` has no run: specbench lacks the method, or has it
    (conf/method) but this runner does not sweep it yet."""
    if (ROOT / "conf" / "method" / f"{method}.yaml").is_file():
        return f"{method} is in specbench but not in this runner's sweeps"
    return f"no {method} in specbench"


def model_params(name: str) -> float:
    return float(yaml.safe_load((ROOT / "conf" / "model" / f"{name}.yaml").read_text())["params_b"])


def parse_setting(setting: str) -> dict[str, str]:
    """'draft=qwen3-0.6b;gamma=6' -> {'draft': 'qwen3-0.6b', 'gamma': '6'}."""
    return dict(part.split("=", 1) for part in setting.split(";") if part)


def base_filters(row: pd.Series) -> dict:
    return {"config.model.name": row["model"], "config.dataset.name": row["dataset"], "temperature": float(row["temperature"])}


def number(text: str) -> float | int:
    value = float(text)
    return int(value) if value.is_integer() and "." not in text else value


# ---- helpers for claims and figures -------------------------------------------------

def matching(runs: pd.DataFrame, **filters) -> pd.DataFrame:
    """The runs matching `filters` (short names: method, dataset, temperature, or a config column)."""
    columns = {("config.method.name" if k == "method" else "config.dataset.name" if k == "dataset" else k): v for k, v in filters.items()}
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
    counts = pd.Series([size for found in sizes.values() for size in dict.fromkeys(found)], dtype=object).value_counts(sort=False)
    if counts.empty:
        return {}
    size = counts.index[counts.argmax()]
    return {value: found[sizes[value] == size].sort_values("results.samples").iloc[-1] for value, found in per_value.items() if (sizes[value] == size).any()}


def slope(xs: list[float], ys: list[float]) -> float:
    """Least-squares slope (the direction of a sweep)."""
    return float(np.polyfit(np.asarray(xs, dtype=float), np.asarray(ys, dtype=float), 1)[0])


def per_prompt(run: pd.Series) -> pd.DataFrame:
    """τ and δ of every prompt of a run (TALON Figure 6's points)."""
    rows = []
    for record in results.samples(run):
        method = record["method"]
        steps = method["target_forwards"]
        rows.append({"id": record["id"], "tau": method["new_tokens"] / steps if steps else np.nan,
                     "delta": method["draft_forwards"] / steps if steps else np.nan})
    return pd.DataFrame(rows)


# ---- directional claims with intervals ----------------------------------------------

def prompt_values(run: pd.Series, metric: str) -> dict[str, float]:
    """Per prompt of a run: `tau` (tokens per target forward) or `speedup` (its tok/s over
    AR's on the same prompt in the same run). Batched runs give one value per batch (keyed
    by its batch id): its rows share one wall time, and speedup there is throughput."""
    records = results.samples(run)
    if any(r["method"].get("batch_size", 1) > 1 for r in records):
        return batch_values(records, metric)
    values = {}
    for record in records:
        m, b = record["method"], record.get("baseline")
        if metric == "tau":
            value = m["new_tokens"] / m["target_forwards"] if m["target_forwards"] else None
        else:
            value = sample_speedup(m, b) if b else None
        if value is not None:
            values[record["id"]] = value
    if not values:
        raise KeyError(f"per-prompt {metric} of {run.get('run_dir')}")
    return values


def answers(run: pd.Series) -> dict[str, tuple[questions.Sample, list[str], list[str] | None]]:
    """Per prompt of a run: its dataset sample (references included, reloaded from the run's
    own dataset config), the method's answer turns and AR's beside them (None without)."""
    summary = Path(run["run_dir"]) / "summary.json"
    if not summary.is_file():
        raise KeyError(f"summary of {run['run_dir']}")
    config = json.loads(summary.read_text())["config"]["dataset"]
    if config.get("path") and not Path(config["path"]).is_absolute():
        config = {**config, "path": str(ROOT / config["path"])}
    samples = {s.id: s for s in questions.load(config)}
    return {r["id"]: (samples[r["id"]], r["method"]["turn_texts"], r.get("baseline", {}).get("turn_texts"))
            for r in results.samples(run) if r["id"] in samples}


def scored(found: dict, picked: list[str], metric: str, key: str, baseline: bool = False) -> float | None:
    """Quality `metric` (a specbench.metrics.quality function) over the prompts `picked`
    (repeats allowed, as resampling draws them), its value `key`."""
    chosen = [found[p] for p in picked]
    return quality.METRICS[metric]([s for s, _, _ in chosen], [b if baseline else m for _, m, b in chosen]).get(key)


def prompt_quality(run: pd.Series, metric: str, key: str, baseline: bool = False) -> dict[str, float]:
    """A per-answer quality (accuracy, pass@1, ROUGE-L: a mean over answers) of every prompt
    of a run, each scored once, so resampling averages them instead of re-scoring."""
    found = {p: answer for p, answer in answers(run).items() if answer[2] is not None or not baseline}  # AR's only where it ran beside
    values = {p: scored(found, [p], metric, key, baseline) for p in found}
    return {p: v for p, v in values.items() if v is not None}


def picked_mean(values: dict[str, float], picked: list[str]) -> float:
    """The mean of a run's per-prompt values over the prompts `picked` (a resample: repeats count)."""
    return sum(values[p] for p in picked) / len(picked)


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


def unpaired_difference(a: list[float], b: list[float]) -> tuple[bool | None, str]:
    """Whether mean(a) - mean(b) > 0 (above_zero) for values of different prompts or batch
    sizes: each list resampled on its own; cannot tell below MIN_GROUPS values in either."""
    estimate = sum(a) / len(a) - sum(b) / len(b)
    if min(len(a), len(b)) < MIN_GROUPS:
        return None, f"{estimate:+.3g} (n={len(a)} and {len(b)}, too few for an interval)"
    rng = random.Random(0)
    low, high = percentile_interval([sum(rng.choices(a, k=len(a))) / len(a) - sum(rng.choices(b, k=len(b))) / len(b) for _ in range(2000)])
    return above_zero(low, high), f"{estimate:+.3g} [95% CI {low:+.3g}, {high:+.3g}], n={len(a)} and {len(b)}"


def paired_difference(a: pd.Series, b: pd.Series, metric: str) -> tuple[float, float | None, float | None, int]:
    """(mean of a - b over the prompts both runs decoded, its 95% bootstrap interval, the
    prompt count): the runs share prompts (seeded subsets), so the difference is paired."""
    va, vb = prompt_values(a, metric), prompt_values(b, metric)
    differences = [va[k] - vb[k] for k in va if k in vb]
    if not differences:
        raise KeyError(f"prompts shared by {a.get('run_dir')} and {b.get('run_dir')}")
    low, high = resampled_ci(differences, lambda picked: sum(picked) / len(picked))
    return sum(differences) / len(differences), low, high, len(differences)


def above_zero(low: float, high: float) -> bool | None:
    """The one verdict rule for a claim "the quantity is > 0", from its 95% interval: True
    when the interval excludes <= 0, False when it excludes > 0 (a flat [0, 0] included),
    None (cannot tell) when it holds both."""
    return True if low > 0 else False if high <= 0 else None


def all_hold(verdicts: list[bool | None]) -> bool | None:
    """A claim made for every case: False when one case's does not hold, True when every
    case's does, cannot tell otherwise."""
    return False if False in verdicts else True if verdicts and all(v is True for v in verdicts) else None


def groups_to_settle(n: int, estimate: float, low: float, high: float) -> int | None:
    """About how many groups (prompts) would shrink an interval that straddles 0 to one that
    excludes it, the width falling as 1/sqrt(n) around the same estimate; None at estimate 0."""
    return math.ceil(n * ((high - low) / 2 / abs(estimate)) ** 2) if estimate else None


def positive(groups: list, statistic) -> tuple[bool | None, str]:
    """Whether `statistic(groups) > 0` is settled by its 95% interval from resampling the
    groups (prompts), by `above_zero` (None also with too few groups); with the estimate and
    interval as text, and when it cannot tell, about how many groups would settle it."""
    estimate = statistic(groups)
    low, high = resampled_ci(groups, statistic)
    if low is None:
        return None, f"{estimate:+.3g} (n={len(groups)}, too few for an interval; at least {MIN_GROUPS} needed)"
    verdict = above_zero(low, high)
    needed = groups_to_settle(len(groups), estimate, low, high) if verdict is None else None
    settle = f"; about {needed} would settle it" if needed else ""
    return verdict, f"{estimate:+.3g} [95% CI {low:+.3g}, {high:+.3g}], n={len(groups)}{settle}"


def settled(slope_value: float) -> float:
    """A fitted slope without float dust: a flat sweep fits to +-1e-17, which is 0 (not -0)."""
    return round(slope_value, 9) + 0.0


def every_slope(cases: list[tuple[str, list[tuple[float, pd.Series]]]], metric: str, rising: bool, axis: str) -> tuple[bool | None, str]:
    """A claim "`metric` rises (falls) along `axis` in every case" (case, [(x, run)]): the
    least-squares slope of the per-prompt mean against x, with a 95% interval from resampling
    the prompts every run of the case decoded (seeded subsets: the same prompts at each x).
    Agrees when every interval is on the claimed side of 0, does not when one is on the other
    side or at 0 (flat)."""
    if not cases:
        raise KeyError(f"{axis} sweep")
    parts, verdicts = [], []
    for case, points in cases:
        xs = [float(x) for x, _ in points]
        values = [prompt_values(run, metric) for _, run in points]
        prompts = shared_prompts(values, f"shared by {case}'s runs")
        if len(set(xs)) < 2:
            raise KeyError(f"{case}: runs at two {axis} values")

        def fitted(picked: list[str]) -> float:
            return slope(xs, [picked_mean(v, picked) for v in values])

        estimate = settled(fitted(prompts))
        low, high = resampled_ci(prompts, lambda picked: settled(fitted(picked)))
        if low is None:
            parts.append(f"{case} {estimate:+.3g} (n={len(prompts)}, too few for an interval)")
            verdicts.append(None)
            continue
        verdicts.append(above_zero(low, high) if rising else above_zero(-high, -low))  # a flat sweep neither rises nor falls
        needed = groups_to_settle(len(prompts), estimate, low, high) if verdicts[-1] is None else None
        parts.append(f"{case} {estimate:+.3g} [{low:+.3g}, {high:+.3g}]" + (f" (about {needed} prompts would settle it)" if needed else ""))
    return all_hold(verdicts), f"slope of {metric} per unit {axis}, per-prompt means, [95% CI]: " + "; ".join(parts)


def every_higher(pairs: list[tuple[str, pd.Series, pd.Series]], metric: str, names: tuple[str, str]) -> tuple[bool | None, str]:
    """A claim "a has the higher `metric` in every case" (case, a's run, b's run): agrees when
    every case's a - b is above 0 by `above_zero`, does not when some case's is not, and
    cannot tell otherwise, saying how many prompts per case would settle it."""
    if not pairs:
        raise KeyError(f"{names[0]} and {names[1]} runs")
    parts, verdicts, needed = [], [], 0
    for case, a, b in pairs:
        mean, low, high, n = paired_difference(a, b, metric)
        if low is None:
            parts.append(f"{case} {mean:+.2f} (n={n}, too few for an interval)")
            verdicts.append(None)
            needed = max(needed, MIN_GROUPS)
            continue
        parts.append(f"{case} {mean:+.2f} [{low:+.2f}, {high:+.2f}]")
        verdicts.append(above_zero(low, high))
        if verdicts[-1] is None and mean:
            needed = max(needed, groups_to_settle(n, mean, low, high))
    verdict = all_hold(verdicts)
    text = f"{names[0]} - {names[1]} {metric} per prompt, mean [95% CI]: " + "; ".join(parts)
    if verdict is None and needed:
        text += f"; about {needed} prompts per case would settle it"
    return verdict, text
