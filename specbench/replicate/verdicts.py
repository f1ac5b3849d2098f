"""A claim's verdict from our runs: a direction is settled by its 95% bootstrap interval
(scipy.stats.bootstrap, BCa) over prompts (batches in a batched run), 'cannot tell' while
the interval holds both sides or rests on too few groups, 'not testable at this scale' when
the measured quantity does not move at all."""

from __future__ import annotations

import importlib
import math

import numpy as np
import pandas as pd

from specbench.metrics.intervals import CONFIDENCE, MIN_GROUPS, RESAMPLES, Interval, bootstrap
from specbench.replicate import regime
from specbench.replicate.lookup import group_unit, prompt_values, shared_prompts

# what an evidence text says where no verdict can come from our runs, and the verdicts that
# say why: the machine's costs, the sample size, the 135M model, or the paper itself
NOT_TESTABLE = "not testable at this scale"
OUT_OF_REGIME = "not testable: out of regime"
TOO_FEW = "not testable: too few samples"
BEYOND_MODEL = "not testable: beyond the model"
NOT_PUBLISHED = "not testable: not published"
UNTESTABLE = (OUT_OF_REGIME, TOO_FEW, BEYOND_MODEL, NOT_PUBLISHED)  # the order a claim over cases names them in


def untestable(verdict) -> bool:
    return verdict in UNTESTABLE


# the report header's one line on how intervals are drawn
INTERVALS = (
    f"Intervals: {CONFIDENCE:.0%} bootstrap intervals from scipy.stats.bootstrap, BCa ({RESAMPLES} seeded resamples; "
    "percentile where BCa is undefined, e.g. when every resample gives one value, and each interval names its method), "
    "over prompts (over batches at batch size > 1), paired per prompt where two runs decoded the same prompts; "
    f"none from fewer than {MIN_GROUPS} groups; a table cell's interval is drawn by the same rule from its run's "
    "records."
)


def mean_interval(values: list[float]) -> Interval:
    """The mean of per-group values (e.g. paired per-prompt differences) and its interval."""
    values = np.asarray(values, dtype=float)
    return bootstrap((values,), np.mean, float(values.mean()), vectorized=True)


def difference_interval(a: list[float], b: list[float]) -> Interval:
    """mean(a) - mean(b) for values of different groups (unpaired), each resampled on its own."""
    a, b = np.asarray(a, dtype=float), np.asarray(b, dtype=float)

    def difference(x, y, axis=-1):
        return np.mean(x, axis=axis) - np.mean(y, axis=axis)

    return bootstrap((a, b), difference, float(difference(a, b)), vectorized=True)


def statistic_interval(groups: list, statistic) -> Interval:
    """`statistic(list of groups)` (any per-group objects, e.g. prompt ids) and its interval
    over resampled groups; a None value of the statistic counts as undefined."""

    def on_indices(indices):
        value = statistic([groups[i] for i in indices])
        return np.nan if value is None else float(value)

    return bootstrap((np.arange(len(groups)),), on_indices, on_indices(range(len(groups))))


def above_zero(low: float, high: float) -> bool | None:
    """The one verdict rule for a claim "the quantity is > 0", from its 95% interval: True
    when the interval excludes <= 0, False when it excludes > 0, None (cannot tell) when it
    holds both."""
    return True if low > 0 else False if high <= 0 else None


def groups_to_settle(n: int, estimate: float, low: float, high: float) -> int | None:
    """About how many groups would settle an interval that holds 0 in the direction its
    estimate points: the interval's side towards 0 shrinking as 1/sqrt(n) around the same
    estimate until it no longer reaches 0; None at estimate 0 (no direction)."""
    if not estimate:
        return None
    spread = estimate - low if estimate > 0 else high - estimate
    return math.ceil(round(n * (spread / abs(estimate)) ** 2, 6))  # round: no float dust past a whole number


def undecidable(interval: Interval) -> str:
    """Why no verdict can come from `interval` ("" when one can): too few groups, or a
    statistic undefined on some resample."""
    if interval.low is None:
        return f"cannot tell: n={interval.n} groups, at least {MIN_GROUPS} needed"
    return "cannot tell" if math.isnan(interval.low) else ""


def judge(
    interval: Interval, unit: str = "prompts", falls: bool = False, flat_reason: str = ""
) -> tuple[bool | str | None, str]:
    """The verdict on a claim "the quantity is > 0" (< 0 when `falls`) from its interval, by
    `above_zero`, with the evidence as text: cannot tell below MIN_GROUPS groups or where the
    statistic is undefined; not testable when it is 0 on every resample (why: `flat_reason`);
    when the interval holds 0, which way the estimate leans and about how many groups would
    settle it that way."""
    text = interval.text(unit)
    if reason := undecidable(interval):
        return None, f"{text}: {reason}"
    if interval.flat:
        flat = f"the statistic is 0 on every resample of the {interval.n} {unit}: nothing moves at this scale"
        return BEYOND_MODEL, f"{NOT_TESTABLE}: {flat_reason or flat}"
    estimate, low, high = interval.estimate, interval.low, interval.high
    if falls:
        estimate, low, high = -estimate, -high, -low
    verdict = above_zero(low, high)
    if verdict is None and estimate:
        lean = "toward" if estimate > 0 else "against"
        text += (
            f": leans {lean} the claim; about {groups_to_settle(interval.n, estimate, low, high)} {unit} would "
            "settle it"
        )
    return verdict, text


def within(low: float, high: float, tolerance: float) -> bool | None:
    """The one verdict rule for an equivalence claim "|quantity| <= tolerance", from its 95%
    interval: True when the whole interval is inside, False when it lies wholly outside,
    None (cannot tell) when it reaches across either edge."""
    if -tolerance <= low and high <= tolerance:
        return True
    if low > tolerance or high < -tolerance:
        return False
    return None


def equivalent(interval: Interval, tolerance: float, unit: str = "prompts") -> tuple[bool | None, str]:
    """The verdict on a claim "|quantity| <= tolerance" from its interval (`within`), with the
    evidence as text, as `judge` words it: cannot tell below MIN_GROUPS groups or where the
    statistic is undefined; when the interval reaches across an edge, which way the estimate
    leans (inside the tolerance is toward the claim) and about how many groups would settle
    it that way: the interval shrinking around the same estimate until it lies wholly inside
    (every edge it crosses) or wholly outside."""
    text = interval.text(unit)
    if reason := undecidable(interval):
        return None, f"{text}: {reason}"
    estimate, low, high = interval.estimate, interval.low, interval.high
    verdict = within(low, high, tolerance)
    if verdict is not None or abs(estimate) == tolerance:
        return verdict, text
    if abs(estimate) < tolerance:  # each crossed edge as a claim "tolerance -+ quantity > 0"
        needed = [
            groups_to_settle(interval.n, tolerance - estimate, tolerance - high, tolerance - low)
            if high > tolerance
            else 0,
            groups_to_settle(interval.n, estimate + tolerance, low + tolerance, high + tolerance)
            if low < -tolerance
            else 0,
        ]
        return None, f"{text}: leans toward the claim; about {max(needed)} {unit} would settle it"
    edge = tolerance if estimate > 0 else -tolerance  # the edge the interval reaches across
    needed = groups_to_settle(interval.n, estimate - edge, low - edge, high - edge)
    return None, f"{text}: leans against the claim; about {needed} {unit} would settle it"


# The regime gate: a wall-clock comparison carries from the papers' GPUs to a run set's
# machine only where verifying the trees costs there about what it costs on the GPUs.
REGIME_COST_FACTOR = 2.0  # f(N)/f(1) here (or f(Na)/f(Nb)) more than this times the paper's
PAPER_TREE = 60  # the tree size the papers' bounds are read at (EAGLE-3's and TALON's trees)
REGIME_RULE = (
    "Regime rule (verdicts.out_of_regime): a speed comparison is out of regime, not testable on a run set, when "
    f"verifying the larger tree costs there more than {REGIME_COST_FACTOR:g}x the paper's bound on f(N)/f(1), or, "
    "unless a side sizes its trees from measured costs (CAST, EntMTP), when the larger tree costs more than "
    f"{REGIME_COST_FACTOR:g}x the smaller there than on the paper's GPUs; each cost read at the tree's own size, "
    "the run's batch size and its mean context. Its tau (accepted tokens per target forward) and each side's "
    "speedup over AR are still given. Two sides with the same drafter and tree (only the accept rule differs) pay "
    "the same verification anywhere: never gated."
)
SPEED_METRICS = ("speedup", "speedup_mean_per_sample", "tok_per_s")


def paper_cost(n: float, paper_bound: float) -> float:
    """f(n)/f(1) on the paper's GPUs as its bound allows: rising linearly from 1 at n = 1 to the
    bound at PAPER_TREE nodes (and on past it)."""
    return 1 + (paper_bound - 1) * (max(n, 1) - 1) / (PAPER_TREE - 1)


def out_of_regime(
    nodes: tuple[float, float],
    gate: regime.Regime,
    batch: int = 1,
    cost_aware: bool = False,
    context: float | None = None,
) -> str:
    """Why a wall-clock comparison of trees of `nodes` mean verified nodes, decoded at batch
    size `batch` over `context` cached tokens (None: the profile's cheapest), cannot carry from
    the paper's GPUs to the machine `gate` profiles ("" when it can); `cost_aware`: a side
    sizes its trees from measured costs, so a smaller tree is the method, not a mismatch."""
    small, large = sorted(nodes)
    if gate.here is None:
        return f"no committed cost profile of this machine: what verifying {large:.0f} nodes costs here is unknown"
    cost_large = gate.here_at(large, batch, context)
    reasons = []
    at = f" at B={batch}" if batch > 1 else ""
    if cost_large > REGIME_COST_FACTOR * gate.paper_bound:
        reasons.append(
            f"verifying {large:.0f} nodes costs {cost_large:.1f} one-token forwards here{at}{over(context)} against "
            "at most "
            f"{gate.paper_bound:.2f} on the paper's GPUs"
        )
    ratio_here = cost_large / gate.here_at(small, batch, context)
    ratio_paper = paper_cost(large, gate.paper_bound) / paper_cost(small, gate.paper_bound)
    if not cost_aware and ratio_here > REGIME_COST_FACTOR * ratio_paper:
        reasons.append(
            f"a tree of {large:.1f} mean verified nodes costs {ratio_here:.1f}x one of {small:.1f} here{at} against "
            f"about {ratio_paper:.2f}x on the paper's GPUs"
        )
    return "; ".join(reasons)


def over(context: float | None) -> str:
    return f" over {context:.0f} cached tokens" if context else ""


def batch_size(run: pd.Series) -> int:
    value = run.get("config.gen.batch_size")
    return int(value) if isinstance(value, (int, float)) and not math.isnan(value) else 1


def cost_aware(run: pd.Series) -> bool:
    """Whether the run's tree policy sizes its trees from measured costs (TreePolicy.COST_AWARE)."""
    target = run.get("config.method.tree._target_")
    if not isinstance(target, str) or "." not in target:
        return False
    module, _, name = target.rpartition(".")
    try:
        return bool(getattr(getattr(importlib.import_module(module), name), "COST_AWARE", False))
    except (ImportError, AttributeError):
        return False


def regime_reason(runs: list[pd.Series]) -> str:
    """Why the current report's regime gate sets a speed comparison of `runs` aside ("" when
    it does not, or no report gates): their smallest and largest trees (mean verified nodes),
    read at the largest batch size and longest mean context among them."""
    gate = regime.current()
    if gate is None or not runs or same_verification(runs):
        return ""
    nodes = [regime.verified_nodes(run) for run in runs]
    return out_of_regime(
        (min(nodes), max(nodes)),
        gate,
        max(batch_size(run) for run in runs),
        any(cost_aware(run) for run in runs),
        max((c for c in map(regime.mean_context, runs) if c is not None), default=None),
    )


def speed_sides(a: pd.Series, b: pd.Series, names: tuple[str, str]) -> tuple[str, str]:
    """(each side's mean speedup over AR and tree size, in words; why the report's regime
    gate sets the comparison aside, "" when it does not or no report gates)."""
    speeds = [float(np.mean(list(prompt_values(run, "speedup").values()))) for run in (a, b)]
    nodes = (regime.verified_nodes(a), regime.verified_nodes(b))
    sides = (
        f"{names[0]} {speeds[0]:.2f}x, {names[1]} {speeds[1]:.2f}x over AR; {nodes[0]:.1f} and {nodes[1]:.1f} nodes "
        "per verification"
    )
    return sides, regime_reason([a, b])


VERIFICATION_KEYS = ("config.method.drafter", "config.method.tree")


def same_verification(runs: list[pd.Series]) -> bool:
    """Whether the runs draft with the same drafter and grow their trees by the same policy and
    shape, so only the accept rule differs (MARS against EAGLE-3, a theta sweep): they pay the
    same verification on any hardware, and no regime gates their comparison. A shape left to
    `auto` may be decided differently per run, and runs without their config are unknown: not
    the same."""
    keys = sorted({k for run in runs for k in run.index if k.startswith(VERIFICATION_KEYS)})

    def setting(run: pd.Series, key: str) -> str:
        value = run.get(key)
        return "null" if value is None or (isinstance(value, float) and math.isnan(value)) else repr(value)

    settings = [[setting(run, k) for k in keys] for run in runs]
    return bool(keys) and all(s == settings[0] for s in settings) and "'auto'" not in settings[0]


def gated(verdict, text: str, runs: list[pd.Series]) -> tuple:
    """A speed claim over `runs` (a sweep, an advantage across settings) as the report's regime
    gate has it: not testable, with the reason and what was measured, when verifying their
    trees puts it out of regime; else as judged."""
    reason = regime_reason(runs)
    return (OUT_OF_REGIME, f"{NOT_TESTABLE} ({reason}): measured {text}") if reason else (verdict, text)


def all_hold(verdicts: list) -> bool | str | None:
    """A claim made for every case: False when one case's does not hold; else not testable
    when one case's cannot be tested at this scale; True when every case's holds; cannot
    tell otherwise (a case undecided or missing, or no case at all)."""
    if False in verdicts:
        return False
    if causes := [v for v in UNTESTABLE if v in verdicts]:
        return causes[0]
    return True if verdicts and all(v is True for v in verdicts) else None


def most_hold(verdicts: list) -> bool | str | None:
    """A claim made for most cases (more than half): True when more than half hold; False
    when at least half do not; not testable when so many cannot be tested that more than
    half cannot hold; cannot tell otherwise."""
    n, held, failed = len(verdicts), sum(v is True for v in verdicts), sum(v is False for v in verdicts)
    causes = [v for v in UNTESTABLE if v in verdicts]
    untestable_cases = sum(untestable(v) for v in verdicts)
    if not n:
        return None
    if held * 2 > n:
        return True
    if failed * 2 >= n:
        return False
    return causes[0] if causes and (n - failed - untestable_cases) * 2 <= n else None


def positive(groups: list, statistic, unit: str = "prompts", flat_reason: str = "") -> tuple[bool | str | None, str]:
    """Whether `statistic(groups) > 0` is settled by its interval over resampled groups (judge)."""
    return judge(statistic_interval(groups, statistic), unit, flat_reason=flat_reason)


def unpaired_difference(a: list[float], b: list[float], unit: str = "groups") -> tuple[bool | str | None, str]:
    """Whether mean(a) - mean(b) > 0 for values of different groups (judge)."""
    return judge(difference_interval(a, b), unit)


def slope(xs: list[float], ys: list[float]) -> float:
    """Least-squares slope (the direction of a sweep)."""
    return float(np.polyfit(np.asarray(xs, dtype=float), np.asarray(ys, dtype=float), 1)[0])


def picked_mean(values: dict[str, float], picked: list[str]) -> float:
    """The mean of a run's per-prompt values over the prompts `picked` (a resample: repeats count)."""
    return sum(values[p] for p in picked) / len(picked)


def settled(slope_value: float) -> float:
    """A fitted slope without float dust: a flat sweep fits to +-1e-17, which is 0 (not -0)."""
    return round(slope_value, 9) + 0.0


def every_slope(
    cases: list[tuple[str, list[tuple[float, pd.Series]]]], metric: str, rising: bool, axis: str
) -> tuple[bool | str | None, str]:
    """A claim "`metric` rises (falls) along `axis` in every case" (case, [(x, run)]): the
    least-squares slope of the per-prompt mean against x, with its interval over the prompts
    every run of the case decoded (seeded subsets: the same prompts at each x). A case with
    runs at fewer than two x values cannot tell; one whose every prompt gives the same value
    at every x is not testable (nothing moves)."""
    if not cases:
        raise KeyError(f"{axis} sweep")
    parts, verdicts = [], []
    for case, points in cases:
        xs = [float(x) for x, _ in points]
        if len(set(xs)) < 2:
            verdicts.append(None)
            parts.append(f"{case}: cannot tell: runs at {len(set(xs))} {axis} value(s), two needed")
            continue
        values = [prompt_values(run, metric) for _, run in points]
        prompts = shared_prompts(values, f"shared by {case}'s runs")
        unit = group_unit(points[0][1])

        def fitted(picked: list[str]) -> float:
            return settled(slope(xs, [picked_mean(v, picked) for v in values]))

        unmoved = all(len({v[p] for v in values}) == 1 for p in prompts)
        reason = (
            f"{metric} is the same at every {axis} on each of the {len(prompts)} {unit}: the sweep does not move it "
            "at this scale"
        )
        verdict, text = judge(
            statistic_interval(prompts, fitted), unit, falls=not rising, flat_reason=reason if unmoved else ""
        )
        if metric in SPEED_METRICS:
            verdict, text = gated(verdict, text, [run for _, run in points])
        verdicts.append(verdict)
        parts.append(f"{case} {text}")
    return all_hold(verdicts), f"slope of {metric} per unit {axis}, per-prompt means: " + "; ".join(parts)


def paired_interval(a: pd.Series, b: pd.Series, metric: str) -> tuple[Interval, list[float]]:
    """The mean of a - b over the prompts (batches) both runs decoded, paired per prompt, its
    interval, and the differences."""
    va, vb = prompt_values(a, metric), prompt_values(b, metric)
    differences = [va[k] - vb[k] for k in va if k in vb]
    if not differences:
        raise KeyError(f"prompts shared by {a.get('run_dir')} and {b.get('run_dir')}")
    return mean_interval(differences), differences


def compared(
    pairs: list[tuple[str, pd.Series | None, pd.Series | None]], metric: str, names: tuple[str, str]
) -> tuple[list, list[str]]:
    """Per case (case, a's run, b's run; None where it has no run): the verdict on "a has
    the higher `metric`", by the mean of the per-prompt differences (judge), and its text."""
    if not pairs:
        raise KeyError(f"{names[0]} and {names[1]} runs")
    verdicts, parts = [], []
    for case, a, b in pairs:
        if a is None or b is None:
            absent = " and ".join(name for name, run in zip(names, (a, b)) if run is None)
            verdicts.append(None)
            parts.append(f"{case}: cannot tell: no {absent} run")
            continue
        unit = group_unit(a)
        interval, differences = paired_interval(a, b, metric)
        same = (
            f"{names[0]} and {names[1]} give the same {metric} on each of the {interval.n} {unit}"
            if not any(differences)
            else ""
        )
        verdict, text = judge(interval, unit, flat_reason=same)
        if metric in SPEED_METRICS and regime.current() is not None:
            sides, reason = speed_sides(a, b, names)
            text += f" ({sides})"
            if reason:
                verdict, text = OUT_OF_REGIME, f"{NOT_TESTABLE} ({reason}): measured {text}"
                regime.note_gated(case, a, b, names)
        verdicts.append(verdict)
        parts.append(f"{case} {text}")
    return verdicts, parts


def every_higher(
    pairs: list[tuple[str, pd.Series | None, pd.Series | None]], metric: str, names: tuple[str, str]
) -> tuple[bool | str | None, str]:
    """A claim "a has the higher `metric` in every case": agrees when every case's does
    (compared), does not when one case's does not, cannot tell while a case is undecided
    or has no run (named)."""
    verdicts, parts = compared(pairs, metric, names)
    return all_hold(verdicts), f"{names[0]} - {names[1]} {metric} per prompt (per batch at B > 1), mean: " + "; ".join(
        parts
    )


def faster_than_ar(
    pairs: list[tuple[str, pd.Series | None, pd.Series | None]], metric: str, names: tuple[str, str]
) -> tuple[bool | str | None, str]:
    """A claim "a is faster than AR in every case", read off the pairs a comparison of a with b
    selects (so it takes that claim's runs): each case's a run, its per-prompt `metric` (a
    speedup over the AR decode beside it) minus 1. Gated like any speed comparison, as a's
    tree against AR's one token."""
    if not pairs:
        raise KeyError(f"{names[0]} runs")
    verdicts, parts = [], []
    gate = regime.current()
    for case, run, _ in pairs:
        if run is None:
            verdicts.append(None)
            parts.append(f"{case}: cannot tell: no {names[0]} run")
            continue
        values = list(prompt_values(run, metric).values())
        verdict, text = judge(mean_interval([v - 1 for v in values]), group_unit(run))
        if gate is not None:
            nodes = regime.verified_nodes(run)
            text += f" ({names[0]} {np.mean(values):.2f}x over AR; {nodes:.1f} nodes per verification)"
            if reason := out_of_regime((1.0, nodes), gate, batch_size(run), cost_aware(run), regime.mean_context(run)):
                verdict, text = OUT_OF_REGIME, f"{NOT_TESTABLE} ({reason}): measured {text}"
        verdicts.append(verdict)
        parts.append(f"{case} {text}")
    return all_hold(
        verdicts
    ), f"{names[0]} speedup over AR minus 1 per prompt (per batch at B > 1), mean: " + "; ".join(parts)


def mostly_higher(
    pairs: list[tuple[str, pd.Series | None, pd.Series | None]], metric: str, names: tuple[str, str]
) -> tuple[bool | str | None, str]:
    """A claim "a has the higher `metric` in most cases" (more than half of them, most_hold):
    a case without a run counts as undecided."""
    verdicts, parts = compared(pairs, metric, names)
    held = sum(v is True for v in verdicts)
    return (
        most_hold(verdicts),
        f"{held} of {len(verdicts)} cases higher; {names[0]} - {names[1]} {metric} per prompt (per batch at B > "
        "1), mean: " + "; ".join(parts),
    )
