"""A claim's verdict from our runs: a direction is settled by its 95% bootstrap interval over
prompts (batches in a batched run), 'cannot tell' while the interval holds both sides, with
about how many prompts would settle it."""

from __future__ import annotations

import math
import random

import numpy as np
import pandas as pd

from specbench.metrics.speed import MIN_GROUPS, percentile_interval, resampled_ci
from specbench.replicate.lookup import prompt_values, shared_prompts


def slope(xs: list[float], ys: list[float]) -> float:
    """Least-squares slope (the direction of a sweep)."""
    return float(np.polyfit(np.asarray(xs, dtype=float), np.asarray(ys, dtype=float), 1)[0])


def picked_mean(values: dict[str, float], picked: list[str]) -> float:
    """The mean of a run's per-prompt values over the prompts `picked` (a resample: repeats count)."""
    return sum(values[p] for p in picked) / len(picked)


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
