"""The verdict rules every claim of every paper goes through (specbench.replicate.verdicts),
on hand-made per-prompt values."""

import json

import numpy as np
import pandas as pd
import pytest
from scipy import stats

from specbench.metrics import intervals
from specbench.replicate import verdicts as v

# per-prompt taus with a wide spread between prompts (some prompts are easy, some hard)
BASE = [2.0, 3.1, 1.4, 2.6, 1.9, 3.5, 2.3, 1.2, 2.8, 1.7, 3.0, 2.2]


def run_on_disk(tmp_path, name, taus, speedups=None, batch=1):
    """A run whose prompt i has tau taus[i] (and speedups[i] times AR's speed); at batch > 1,
    `batch` rows per value, one batch each."""
    run_dir = tmp_path / name
    run_dir.mkdir()
    lines = []
    for i, tau in enumerate(taus):
        speedup = (speedups or [1.0] * len(taus))[i]
        for row in range(batch):
            common = (
                {"batch_size": batch, "batch_id": f"b{i}", "draft_forwards": 0, "accept_lengths": []}
                if batch > 1
                else {}
            )
            method = {
                "new_tokens": 61,
                "turn_ids": [[0]],
                "target_forwards": 60 / tau,
                "seconds": 1.0,
                "batch_seconds": 1.0,
                **common,
            }
            baseline = {
                "new_tokens": 61,
                "turn_ids": [[0]],
                "target_forwards": 60,
                "seconds": speedup,
                "batch_seconds": speedup,
                **common,
            }
            lines.append(json.dumps({"id": f"{i}-{row}", "method": method, "baseline": baseline}))
    (run_dir / "samples.jsonl").write_text("\n".join(lines))
    return pd.Series({"run_dir": str(run_dir)})


def test_intervals_are_scipys_bca_and_say_so():
    values = [0.3, -0.1, 0.5, 0.2, 0.9, 0.1, 0.4, -0.2, 0.6, 0.3, 0.0, 0.7]
    found = v.mean_interval(values)
    direct = stats.bootstrap(
        (np.array(values),),
        np.mean,
        n_resamples=intervals.RESAMPLES,
        method="BCa",
        rng=np.random.default_rng(intervals.SEED),
    )
    assert found.method == "BCa" and (found.low, found.high) == pytest.approx(tuple(direct.confidence_interval))
    assert v.mean_interval(values) == found  # seeded: a report regenerates the same
    assert "95% BCa CI" in found.text("prompts") and "BCa" in v.INTERVALS and "scipy.stats.bootstrap" in v.INTERVALS


def test_bca_falls_back_to_percentile_on_degenerate_data_and_names_it():
    found = v.mean_interval([0.5] * 12)  # every resample gives 0.5: BCa is undefined
    assert (found.low, found.high, found.method) == (0.5, 0.5, "percentile")
    verdict, text = v.judge(found)
    assert verdict is True and "95% percentile CI +0.5, +0.5" in text


def test_no_interval_from_fewer_than_ten_groups():
    verdict, text = v.judge(v.mean_interval([0.4, 0.5, 0.6, 0.5, 0.4, 0.5, 0.6, 0.5, 0.45]))
    assert verdict is None and "cannot tell: n=9 groups, at least 10 needed" in text
    assert v.judge(v.mean_interval([0.4, 0.5, 0.6, 0.5, 0.4, 0.5, 0.6, 0.5, 0.45, 0.55]))[0] is True
    assert v.unpaired_difference([1.0] * 12, [0.1, 0.0, 0.2, 0.1, 0.05])[0] is None  # too few on one side
    verdict, text = v.unpaired_difference([1.0, 1.1, 0.9, 1.05, 0.95] * 2, [0.1, 0.0, 0.2, 0.1, 0.05, 0.12] * 2)
    assert verdict is True and "n=10 and 12 groups" in text


def test_one_verdict_rule_for_every_claim_above_zero():
    """Agrees only when the interval excludes <= 0; disagrees when it excludes > 0 (an
    interval ending at 0 included); cannot tell in between."""
    assert v.above_zero(0.1, 0.3) is True
    assert v.above_zero(-0.3, -0.1) is False and v.above_zero(-0.3, 0.0) is False
    assert v.above_zero(0.0, 0.3) is None and v.above_zero(-0.1, 0.3) is None


def test_an_undecided_claim_says_which_way_it_leans_and_how_many_would_settle_it_that_way():
    toward = v.Interval(0.1, (20,), -0.05, 0.3, "BCa")
    verdict, text = v.judge(toward)
    # the side towards 0 is 0.15 wide around 0.1: it clears 0 at 20 * 1.5^2 = 45 prompts
    assert verdict is None and text.endswith("leans toward the claim; about 45 prompts would settle it")
    verdict, text = v.judge(v.Interval(-0.1, (20,), -0.3, 0.02, "BCa"), "batches")
    assert verdict is None and text.endswith("leans against the claim; about 29 batches would settle it")
    verdict, text = v.judge(v.Interval(0.1, (20,), -0.05, 0.3, "BCa"), falls=True)  # a claim that the quantity falls
    assert verdict is None and "leans against the claim" in text
    assert "settle" not in v.judge(v.Interval(0.2, (20,), 0.1, 0.3, "BCa"))[1]  # settled: nothing to add
    assert "settle" not in v.judge(v.Interval(0.0, (20,), -0.1, 0.1, "BCa"))[1]  # no lean, no direction to settle


def test_an_equivalence_claim_needs_the_whole_interval_inside_its_tolerance():
    """MARS's ROUGE-L within 0.002 of AR, EntMTP's bias within ±5%: inside only when the whole
    interval is; outside only when all of it is; cannot tell across an edge."""
    assert v.within(-0.0015, 0.0019, 0.002) is True
    assert v.within(-0.001, 0.003, 0.002) is None  # reaches across an edge: cannot tell
    assert v.within(-0.03, 0.03, 0.002) is None  # too wide to say either way
    assert v.within(0.0021, 0.01, 0.002) is False and v.within(-0.01, -0.0025, 0.002) is False


def test_an_undecided_equivalence_claim_leans_by_where_its_estimate_lies():
    # inside ±5, reaching 3 past the upper edge from an estimate 4 below it: 20 * (7/4)^2 = 61.25
    verdict, text = v.equivalent(v.Interval(1.0, (20,), -2.0, 8.0, "BCa"), 5.0)
    assert verdict is None and text.endswith("leans toward the claim; about 62 prompts would settle it")
    # across both edges: the side further from settled decides (lower: 20 * (10/6)^2 = 55.6; upper: 20 * (5/4)^2 =
    # 31.25)
    assert v.equivalent(v.Interval(1.0, (20,), -9.0, 6.0, "BCa"), 5.0)[1].endswith("about 56 prompts would settle it")
    # outside, reaching back across the lower edge: 20 * (8/2)^2 = 320 (a sign test's lean would be "toward")
    verdict, text = v.equivalent(v.Interval(-7.0, (20,), -12.0, 1.0, "BCa"), 5.0)
    assert verdict is None and text.endswith("leans against the claim; about 320 prompts would settle it")
    assert v.equivalent(v.Interval(-7.0, (20,), -9.0, -6.0, "BCa"), 5.0) == (
        False,
        "-7 [95% BCa CI -9, -6], n=20 prompts",
    )
    assert v.equivalent(v.Interval(0.5, (20,), -1.0, 2.0, "BCa"), 5.0)[0] is True
    assert v.equivalent(v.Interval(0.5, (9,)), 5.0)[1].endswith("cannot tell: n=9 groups, at least 10 needed")


def test_a_quantity_that_never_moves_is_not_testable_never_does_not_agree():
    verdict, text = v.judge(v.mean_interval([0.0] * 12), flat_reason="the tree does not grow with K")
    assert verdict == v.BEYOND_MODEL and text == "not testable at this scale: the tree does not grow with K"
    assert v.positive(list(range(12)), lambda picked: 0.0)[0] == v.BEYOND_MODEL


def test_a_claim_for_every_case_combines_its_cases():
    assert v.all_hold([True, True]) is True
    assert v.all_hold([True, None]) is None and v.all_hold([]) is None
    assert v.all_hold([True, v.BEYOND_MODEL, None]) == v.BEYOND_MODEL  # more prompts cannot settle that case
    assert v.all_hold([v.BEYOND_MODEL, False]) is False  # one case against is enough
    # each case's cause kept apart; a claim names the first in UNTESTABLE's order
    assert v.all_hold([v.TOO_FEW, v.OUT_OF_REGIME, True]) == v.OUT_OF_REGIME
    assert len(set(v.UNTESTABLE)) == 4 and all(cause.startswith("not testable: ") for cause in v.UNTESTABLE)


def test_a_claim_for_most_cases_needs_more_than_half():
    assert v.most_hold([True, True, True, True, False, False]) is True
    assert v.most_hold([True, True, True, False, False, False]) is False  # half against: not most
    assert v.most_hold([True, True, True, None, False, False]) is None
    assert v.most_hold([True, v.OUT_OF_REGIME, v.BEYOND_MODEL, False]) == v.OUT_OF_REGIME
    assert v.most_hold([]) is None


def test_every_higher_pairs_per_prompt_and_prints_n_per_case(tmp_path):
    # +0.3 on every prompt: hidden between prompts, clear per prompt
    high = run_on_disk(tmp_path, "high", [t + 0.3 for t in BASE])
    low = run_on_disk(tmp_path, "low", BASE)
    assert v.unpaired_difference([t + 0.3 for t in BASE], BASE)[0] is None
    verdict, text = v.every_higher([("a", high, low), ("b", high, low)], "tau", ("x", "y"))
    assert verdict is True and text.count("n=12 prompts") == 2
    assert v.every_higher([("a", high, low), ("b", low, high)], "tau", ("x", "y"))[0] is False  # one case clearly lower
    noisy = run_on_disk(tmp_path, "noisy", [t + (0.6 if i % 2 else -0.55) for i, t in enumerate(BASE)])
    verdict, text = v.every_higher([("a", high, low), ("b", noisy, low)], "tau", ("x", "y"))
    assert verdict is None and "b +0.025 [" in text and "leans toward the claim; about" in text.split("; b ")[1]
    few = run_on_disk(tmp_path, "few", BASE[:3])
    verdict, text = v.every_higher([("a", few, low)], "tau", ("x", "y"))
    assert verdict is None and "n=3 groups, at least 10 needed" in text
    faster = run_on_disk(tmp_path, "faster", BASE, speedups=[1.5 + 0.01 * i for i in range(12)])
    slower = run_on_disk(tmp_path, "slower", BASE, speedups=[1.1 + 0.01 * i for i in range(12)])
    assert v.every_higher([("a", faster, slower)], "speedup", ("x", "y"))[0] is True
    with pytest.raises(KeyError):
        v.every_higher([], "tau", ("x", "y"))


def test_a_case_without_a_run_makes_an_every_case_claim_cannot_tell_and_is_named(tmp_path):
    high = run_on_disk(tmp_path, "high", [t + 0.3 for t in BASE])
    low = run_on_disk(tmp_path, "low", BASE)
    verdict, text = v.every_higher(
        [("gsm8k", high, low), ("alpaca", None, low), ("nq", None, None)], "tau", ("cast", "eagle3")
    )
    assert (
        verdict is None
        and "alpaca: cannot tell: no cast run" in text
        and "nq: cannot tell: no cast and eagle3 run" in text
    )
    # ... and a clear loss elsewhere still settles it
    assert v.every_higher([("gsm8k", low, high), ("alpaca", None, low)], "tau", ("cast", "eagle3"))[0] is False


def test_two_methods_equal_on_every_prompt_are_not_testable(tmp_path):
    low = run_on_disk(tmp_path, "low", BASE)
    same = run_on_disk(tmp_path, "same", BASE)
    verdict, text = v.every_higher([("a", same, low)], "tau", ("mars", "eagle3"))
    assert verdict == v.BEYOND_MODEL and "mars and eagle3 give the same tau on each of the 12 prompts" in text


def test_mostly_higher_counts_the_cases(tmp_path):
    high = run_on_disk(tmp_path, "high", [t + 0.3 for t in BASE])
    low = run_on_disk(tmp_path, "low", BASE)
    pairs = [("a", high, low), ("b", high, low), ("c", low, high)]
    verdict, text = v.mostly_higher(pairs, "tau", ("x", "y"))
    assert verdict is True and text.startswith("2 of 3 cases higher")
    # 2 of 4 so far: the missing case decides
    assert v.mostly_higher(pairs + [("d", None, low)], "tau", ("x", "y"))[0] is None
    assert v.mostly_higher(pairs + [("d", low, high)], "tau", ("x", "y"))[0] is False  # 2 of 4 is not most


def test_batched_runs_count_batches(tmp_path):
    a = run_on_disk(tmp_path, "a", [2.0] * 12, speedups=[1.5 + 0.01 * i for i in range(12)], batch=4)
    b = run_on_disk(tmp_path, "b", [2.0] * 12, speedups=[1.2 + 0.01 * i for i in range(12)], batch=4)
    verdict, text = v.every_higher([("B=4", a, b)], "speedup", ("cast", "eagle3"))
    assert verdict is True and "n=12 batches" in text


def test_a_trend_claim_needs_every_slope_interval_on_its_side(tmp_path):
    """Slopes over a sweep are fitted to per-prompt means and resampled over the prompts the
    runs share: a rise hidden in prompt noise is 'cannot tell', a flat sweep is not testable."""
    rising = [(x, run_on_disk(tmp_path, f"rise{x}", [t + 0.1 * x for t in BASE])) for x in (1, 2, 3)]
    falling = [(x, run_on_disk(tmp_path, f"fall{x}", [t - 0.1 * x for t in BASE])) for x in (1, 2, 3)]
    # half the prompts rise steeply, half fall: the mean slope is inside prompt noise
    noisy = [
        (x, run_on_disk(tmp_path, f"noise{x}", [t + (0.31 if i % 2 else -0.29) * x for i, t in enumerate(BASE)]))
        for x in (1, 2, 3)
    ]
    assert v.every_slope([("a", rising), ("b", rising)], "tau", rising=True, axis="K")[0] is True
    assert v.every_slope([("a", rising), ("b", falling)], "tau", rising=True, axis="K")[0] is False
    assert v.every_slope([("a", falling)], "tau", rising=False, axis="theta")[0] is True
    flat = [(x, run_on_disk(tmp_path, f"flat{x}", BASE)) for x in (1, 2, 3)]
    verdict, text = v.every_slope([("a", flat)], "tau", rising=True, axis="K")
    assert (
        verdict == v.BEYOND_MODEL
        and "a not testable at this scale: tau is the same at every K on each of the 12 prompts" in text
    )
    verdict, text = v.every_slope([("a", rising), ("b", noisy)], "tau", rising=True, axis="K")
    assert verdict is None and text.startswith("slope of tau per unit K") and "a +0.1 [95% " in text
    # only the undecided case
    assert "would settle it" in text.split("; b ")[1] and "settle" not in text.split("; b ")[0]
    verdict, text = v.every_slope([("a", rising), ("b", rising[:1])], "tau", rising=True, axis="K")
    assert verdict is None and "b: cannot tell: runs at 1 K value(s), two needed" in text  # one point is no slope
    with pytest.raises(KeyError):
        v.every_slope([], "tau", rising=True, axis="K")


def test_positive_resamples_any_groups():
    assert v.positive([1.0, 1.2, 0.9, 1.1, 1.0] * 2, lambda g: sum(g) / len(g))[0] is True
    verdict, text = v.positive([1.0, -1.2, 0.9, -1.1, 0.3] * 2, lambda g: sum(g) / len(g))
    assert verdict is None and "would settle it" in text  # straddles 0: says how many prompts would decide
    assert v.positive([1.0, 1.2], lambda g: sum(g) / len(g))[0] is None  # too few for an interval
    verdict, text = v.positive(list(range(12)), lambda picked: None if picked.count(0) > 1 else 1.0)
    assert verdict is None and "undefined on some resamples" in text


def test_the_report_prints_not_testable_as_its_own_verdict():
    from specbench.replicate import report

    flat = report.Claim(
        "Table 2",
        "A longer draft gives a larger tau",
        lambda runs: v.every_slope([("a", [])], "tau", rising=True, axis="K"),
    )
    assert report.verdicts([flat], pd.DataFrame())[0]["verdict"] == "cannot tell"  # no runs at two K values
    untestable = report.Claim(
        "Table 2",
        "A longer draft gives a larger tau",
        lambda runs: (v.BEYOND_MODEL, "not testable at this scale: the tree does not grow with K"),
    )
    assert report.verdicts([untestable], pd.DataFrame())[0]["verdict"] == "not testable: beyond the model"


def test_a_batch_size_of_the_sweep_without_runs_is_named(tmp_path):
    """CAST Table 3 at cpu scale sweeps batch sizes 1, 4 and 8: with runs at 1 and 8 only,
    "faster at every batch size" cannot tell, naming B=4, though both runs agree."""
    from runners import cast

    def row(method, batch, speedups):
        shape = cast.cast_filters("smollm2-135m", batch) if method == "cast" else cast.eagle3_filters("smollm2-135m")
        run = run_on_disk(tmp_path, f"{method}{batch}", [2.0] * 12, speedups, batch=batch)
        return {
            **shape,
            "config.method.name": method,
            "config.model.name": "smollm2-135m",
            "config.dataset.name": "humaneval",
            "temperature": 0.0,
            "config.gen.batch_size": batch,
            "speedup": speedups[0],
            "speedup_ci95": None,
            "results.tok_per_s": 10.0,
            "results.samples": 12 * batch,
            "run_dir": run["run_dir"],
        }

    runs = pd.DataFrame(
        [row("cast", b, [1.5 + 0.01 * i for i in range(12)]) for b in (1, 8)]
        + [row("eagle3", b, [1.2 + 0.01 * i for i in range(12)]) for b in (1, 8)]
    )
    verdict, text = cast._never_behind(runs)
    assert verdict is None and "B=4: cannot tell: no cast and eagle3 run" in text
    assert "B=1 +0.3 [95% " in text and "n=12 prompts" in text and "n=12 batches" in text


def costs(paper: str, ratios: dict[int, float], bound: float, batches: dict[int, dict[int, float]] = None):
    """A Regime whose machine's forward over n tokens costs ratios[n] one-token forwards
    (linear between, one context), at batch size b batches[b][n]; the paper's bound `bound`."""
    from specbench.costs.profile import CostProfile, Curve
    from specbench.replicate import regime

    def curve(points):
        ns = sorted(points)
        return Curve(contexts=[128], max_n=ns[-1], ms=[[points[n] for n in ns]], spread=[[0.0] * len(ns)], ns=ns)

    profile = CostProfile(
        key={}, target=curve(ratios), target_batches={str(b): curve(p) for b, p in (batches or {}).items()}
    )
    return regime.Regime(paper, profile, "profile", bound, 10, (1.0, 2.1), "test", 0)


def test_the_regime_gate_on_hand_made_cases():
    from specbench.replicate import regime

    """verdicts.out_of_regime: the larger tree's verification costing here more than
    REGIME_COST_FACTOR x the paper's bound, or (cost-blind sides) the larger tree costing more
    than REGIME_COST_FACTOR x the smaller, against the paper's same ratio; at the trees' own
    size and the run's batch size."""
    amx = costs("talon", {1: 1.0, 8: 1.1, 64: 1.7}, 1.6)
    zen3 = costs("talon", {1: 1.0, 2: 1.05, 8: 1.9, 60: 7.0, 64: 7.4}, 1.6)
    assert v.out_of_regime((60, 60), amx) == ""  # like sizes, GPU-like cost: a wall-clock claim carries
    assert v.out_of_regime((2.5, 60), amx) == ""  # a small tree against a large one: the cost, not the sizes, decides
    assert "costs 7.0 one-token forwards here against at most 1.60" in v.out_of_regime((60, 60), zen3)
    assert v.out_of_regime((2, 8), zen3) == ""  # small trees are cheap to verify here too
    edge = costs("talon", {1: 1.0, 60: 3.2, 64: 3.5}, 1.6)
    assert v.out_of_regime((60, 60), edge) == "" and v.out_of_regime((61, 61), edge) != ""  # the factor's edge
    # no clamp at the profiled 64: 96 nodes read along the curve's upper half
    assert v.out_of_regime((96, 96), amx) == "" and "96 nodes costs 10.6" in v.out_of_regime((96, 96), zen3)
    # the ratio rule: 2 against 8 nodes costs 1.9x here, about 1.06x on the GPUs
    steep = costs("talon", {1: 1.0, 2: 1.0, 8: 2.9, 64: 3.0}, 1.6)
    assert "costs 2.9x one of 2.0 here against about 1.06x" in v.out_of_regime((2, 8), steep)
    assert v.out_of_regime((2, 8), steep, cost_aware=True) == ""  # CAST's smaller tree is the method
    # the batch size's own curve
    batched = costs("cast", {1: 1.0, 60: 1.6, 64: 1.7}, 1.6, batches={8: {1: 1.0, 60: 5.0, 64: 5.5}})
    assert v.out_of_regime((60, 60), batched) == "" and "at B=8" in v.out_of_regime((60, 60), batched, batch=8)
    assert "unknown" in v.out_of_regime((60, 60), regime_without_profile())
    # the run's own context: short prompts in regime where long ones (CNN/DM's) are not
    from specbench.costs.profile import CostProfile, Curve

    two = Curve(
        contexts=[128, 2048], max_n=64, ms=[[1.0, 1.6, 1.7], [1.0, 6.0, 6.4]], spread=[[0.0] * 3] * 2, ns=[1, 60, 64]
    )
    by_context = regime.Regime("talon", CostProfile(key={}, target=two), "p", 1.6, 10, (1.0, 2.1), "t", 0)
    assert v.out_of_regime((60, 60), by_context) == "" and v.out_of_regime((60, 60), by_context, context=200) == ""
    assert "over 1500 cached tokens" in v.out_of_regime((60, 60), by_context, context=1500)
    assert f"{v.REGIME_COST_FACTOR:g}x" in v.REGIME_RULE


def regime_without_profile():
    from specbench.replicate import regime

    return regime.Regime("talon", None, None, 1.6, 10, (1.0, 2.1), "test", 0)


def gated_run(tmp_path, name, speedups, nodes):
    """A run whose prompt i ran speedups[i] times AR's speed with trees of `nodes` nodes."""
    run_dir = tmp_path / name
    run_dir.mkdir()
    lines = [
        json.dumps(
            {
                "id": str(i),
                "method": {
                    "new_tokens": 61,
                    "turn_ids": [[0]],
                    "target_forwards": 30,
                    "seconds": 1.0,
                    "tree_widths": [[nodes - 1]] * 30,
                },
                "baseline": {"new_tokens": 61, "turn_ids": [[0]], "target_forwards": 60, "seconds": s},
            }
        )
        for i, s in enumerate(speedups)
    ]
    (run_dir / "samples.jsonl").write_text("\n".join(lines))
    return pd.Series({"run_dir": str(run_dir)})


def test_a_speed_comparison_out_of_regime_is_not_testable_and_names_both_speedups(tmp_path):
    from specbench.replicate import regime

    slow = [0.3 + 0.01 * i for i in range(12)]
    wide, narrow = gated_run(tmp_path, "wide", slow, 60), gated_run(tmp_path, "narrow", [s + 0.4 for s in slow], 8)
    cpu = costs("talon", {1: 1.0, 8: 1.9, 60: 7.0}, 1.6)
    with regime.gating(cpu), regime.collecting() as gated:
        verdict, text = v.every_higher([("gsm8k", narrow, wide)], "speedup", ("a", "b"))
    assert verdict == v.OUT_OF_REGIME and "60 nodes costs 7.0" in text and "a 0.76x, b 0.35x over AR" in text
    assert [case for case, *_ in gated] == ["gsm8k"]
    assert v.every_higher([("gsm8k", narrow, wide)], "speedup", ("a", "b"))[0] is True  # no gate outside a report
    like = gated_run(tmp_path, "like", slow, 8)
    with regime.gating(cpu):
        # 8 nodes cost 1.9 here: in regime
        assert v.every_higher([("gsm8k", narrow, like)], "speedup", ("a", "b"))[0] is True


def test_sides_that_verify_the_same_tree_are_never_gated(tmp_path):
    """MARS against EAGLE-3 (the same drafter and tree, another accept rule) pays the same
    verification on any hardware: compared even where a 50-node tree costs 6.4 one-token
    forwards; another tree, or a shape left to auto, is gated as before."""
    from specbench.replicate import regime

    slow = [0.3 + 0.01 * i for i in range(12)]
    tree = {"config.method.tree._target_": "EagleDynamicTree", "config.method.tree.total_tokens": 50}
    drafter = {"config.method.drafter.head": "eagle3-head"}

    def run(name, speedups, **config):
        return pd.concat([gated_run(tmp_path, name, speedups, 50), pd.Series({**tree, **drafter, **config})])

    mars = run("mars", [s + 0.1 for s in slow], **{"config.method.verifier.theta": 0.9})
    eagle3 = run("eagle3", slow, **{"config.method.verifier.theta": None})
    wider = run("wider", slow, **{"config.method.tree.total_tokens": 60})
    auto = [run(f"auto{i}", s, **{"config.method.tree.total_tokens": "auto"}) for i, s in enumerate((slow, slow))]
    cpu = costs("mars", {1: 1.0, 50: 6.4, 64: 7.0}, 1.55)
    with regime.gating(cpu):
        assert v.every_higher([("gsm8k", mars, eagle3)], "speedup", ("mars", "eagle3"))[0] is True
        assert v.every_higher([("gsm8k", mars, wider)], "speedup", ("mars", "b"))[0] == v.OUT_OF_REGIME
        assert v.every_higher([("gsm8k", auto[0], auto[1])], "speedup", ("a", "b"))[0] == v.OUT_OF_REGIME
        points = [(theta, run(f"theta{theta}", [s - 0.02 * theta for s in slow])) for theta in range(4)]
        assert v.every_slope([("gsm8k", points)], "speedup", rising=False, axis="theta")[0] is True


def test_the_papers_regime_comes_from_their_own_tau_and_speedup():
    from specbench.replicate import regime

    ratios, left_out = regime.paper_cells("talon")
    assert len(ratios) == 168 and left_out == 0 and 1 <= min(ratios) and 1.2 < sorted(ratios)[len(ratios) // 2] < 2.2
    # the paper's MAT: TALON above Medusa everywhere
    assert regime.published_tau_lead("talon", ("talon", "medusa")) == (12, 12)
    lead, cells = regime.published_tau_lead("talon", ("talon", "eagle3"))
    assert cells == 60 and lead * 2 < cells  # below EAGLE-3's in most cells: no tau claim follows from its speed claim


def test_a_speed_trend_out_of_regime_is_not_testable(tmp_path):
    from specbench.replicate import regime

    points = [(x, gated_run(tmp_path, f"t{x}", [0.5 - 0.02 * x + 0.001 * i for i in range(12)], 50)) for x in range(4)]
    cpu = costs("mars", {1: 1.0, 50: 6.4, 64: 7.0}, 1.55)
    # no gate outside a report
    assert v.every_slope([("gsm8k", points)], "speedup", rising=False, axis="theta")[0] is True
    with regime.gating(cpu):
        verdict, text = v.every_slope([("gsm8k", points)], "speedup", rising=False, axis="theta")
        assert verdict == v.OUT_OF_REGIME and "verifying 50 nodes costs 6.4" in text
        # tau is not gated
        assert "one-token forwards" not in v.every_slope([("gsm8k", points)], "tau", rising=False, axis="theta")[1]


def test_a_method_faster_than_ar_is_judged_on_its_own_runs_and_gated_as_its_tree_against_one_token(tmp_path):
    """verdicts.faster_than_ar: per case, the method's per-prompt speedup over the AR decode
    beside it, minus 1; out of regime where verifying its tree costs too much against AR's one
    token; a cost-aware policy's small tree is not held against it."""
    from specbench.replicate import regime

    fast = gated_run(tmp_path, "fast", [1.2 + 0.01 * i for i in range(12)], 60)
    verdict, text = v.faster_than_ar([("gsm8k", fast, None)], "speedup", ("talon", "eagle3"))
    assert verdict is True and text.startswith("talon speedup over AR minus 1 per prompt") and "gsm8k +0.2" in text
    slow = gated_run(tmp_path, "slow", [0.8 + 0.01 * i for i in range(12)], 60)
    assert v.faster_than_ar([("a", fast, None), ("b", slow, None)], "speedup", ("talon", "x"))[0] is False
    assert v.faster_than_ar([("a", None, None)], "speedup", ("talon", "x"))[0] is None
    with regime.gating(costs("talon", {1: 1.0, 60: 7.0, 64: 7.4}, 1.6)):
        verdict, text = v.faster_than_ar([("gsm8k", fast, None)], "speedup", ("talon", "eagle3"))
    assert verdict == v.OUT_OF_REGIME and "talon 1.26x over AR; 60.0 nodes per verification" in text
    with regime.gating(costs("talon", {1: 1.0, 60: 1.7, 64: 1.8}, 1.6)):
        assert v.faster_than_ar([("gsm8k", fast, None)], "speedup", ("talon", "eagle3"))[0] is True


def test_cost_aware_policies_declare_it():
    assert v.cost_aware(pd.Series({"config.method.tree._target_": "specbench.trees.cast.CastTree"}))
    assert v.cost_aware(pd.Series({"config.method.tree._target_": "specbench.trees.entmtp.ScheduledTree"}))
    assert not v.cost_aware(pd.Series({"config.method.tree._target_": "specbench.trees.talon.TalonTree"}))
    assert not v.cost_aware(pd.Series({"config.method.tree._target_": "no.such.Policy"}))
    assert not v.cost_aware(pd.Series(dtype=object))
