"""95% bootstrap intervals, one rule for every run summary, report table and verdict:
scipy.stats.bootstrap, BCa (the percentile interval of the same resamples where BCa is
undefined), over groups (prompts; batches at batch size > 1), seeded so a report
regenerates byte for byte; none from fewer than MIN_GROUPS groups, since a bootstrap over
5 groups is too narrow."""

from __future__ import annotations

import math
import warnings
from dataclasses import dataclass

import numpy as np

MIN_GROUPS = 10
RESAMPLES = 2000
CONFIDENCE = 0.95
SEED = 0


@dataclass(frozen=True)
class Interval:
    """A statistic's estimate and 95% interval over n groups; low and high are None below
    MIN_GROUPS groups and nan where the statistic is undefined on some resample."""

    estimate: float
    sizes: tuple[int, ...]  # groups per sample (two for an unpaired difference)
    low: float | None = None
    high: float | None = None
    method: str = ""  # "BCa" or "percentile"

    @property
    def n(self) -> int:
        return min(self.sizes)

    @property
    def bounds(self) -> list[float] | None:
        """[low, high] where both are defined (what a run summary stores), else None."""
        return None if self.low is None or math.isnan(self.low) else [self.low, self.high]

    def text(self, unit: str) -> str:
        n = f"n={' and '.join(map(str, self.sizes))} {unit}"
        if self.low is None:
            return f"{self.estimate:+.3g}, {n}"
        if math.isnan(self.low):
            return f"{self.estimate:+.3g} (undefined on some resamples), {n}"
        return f"{self.estimate:+.3g} [95% {self.method} CI {self.low:+.3g}, {self.high:+.3g}], {n}"

    @property
    def flat(self) -> bool:
        """0 on every resample: the quantity does not move, so no direction is measured."""
        return self.estimate == 0 and self.low == 0 and self.high == 0


def bootstrap(samples: tuple, statistic, estimate: float, vectorized: bool = False) -> Interval:
    """The BCa interval of `statistic` over resamples of each sample (independently when there
    are several), falling back to the percentile interval of the same resamples where BCa is
    undefined (a degenerate distribution); no interval when a sample has fewer than MIN_GROUPS."""
    from scipy import stats  # here, not at import: the engine path (scripts/device_check.py) runs without scipy

    sizes = tuple(len(s) for s in samples)
    if min(sizes) < MIN_GROUPS:
        return Interval(estimate, sizes)
    with warnings.catch_warnings(), np.errstate(invalid="ignore", divide="ignore"):
        warnings.simplefilter("ignore", (stats.DegenerateDataWarning, RuntimeWarning))
        found = stats.bootstrap(
            samples,
            statistic,
            vectorized=vectorized,
            n_resamples=RESAMPLES,
            confidence_level=CONFIDENCE,
            method="BCa",
            rng=np.random.default_rng(SEED),
        )
        method = "BCa"
        if np.isnan(found.confidence_interval).any() and not np.isnan(found.bootstrap_distribution).any():
            found = stats.bootstrap(
                samples,
                statistic,
                vectorized=vectorized,
                n_resamples=0,
                confidence_level=CONFIDENCE,
                method="percentile",
                bootstrap_result=found,
            )
            method = "percentile"
    low, high = (float(v) for v in found.confidence_interval)
    return Interval(estimate, sizes, low + 0.0, high + 0.0, method)  # + 0.0: no -0 in a report


def of_sums(table: np.ndarray, statistic) -> Interval:
    """The interval of `statistic(column sums)` over resampled rows of `table` (one row per
    group, e.g. a prompt's method tokens, method seconds, AR tokens, AR seconds): a ratio
    of sums resampled as whole groups, the columns of a row (the pairs) kept together.
    `statistic` takes the sums along the last axis and returns nan where undefined."""
    if len(table) < MIN_GROUPS:
        return Interval(math.nan, (len(table),))
    table = np.asarray(table, dtype=float)

    def on_rows(indices, axis=-1):
        return statistic(np.moveaxis(table[indices].sum(axis=-2), -1, 0))

    with np.errstate(invalid="ignore", divide="ignore"):
        estimate = float(statistic(table.sum(axis=0)))
    return bootstrap((np.arange(len(table)),), on_rows, estimate, vectorized=True)
