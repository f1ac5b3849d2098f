"""The cost model's predictions: speedup from counters, the tree overhead line, engine and tree work per step, batched
pricing, the tau a step needs."""

import pytest
from cost_fixtures import flat_curve, synthetic_profile

from specbench.costs import autotune
from specbench.costs import predict as predict_mod
from specbench.costs.profile import Curve


def test_predicted_speedup_from_counters():
    # 3 steps of a 4-node chain accepting 3, 2 and 4 tokens after the prefill token
    run = {
        "prompt_tokens": [50],
        "turn_ids": [list(range(10))],
        "accept_lengths": [3, 2, 4],
        "tree_widths": [[1, 1, 1]] * 3,
        "step_draft_forwards": [3] * 3,
        "seconds": 1.0,
        "prefill_seconds": 0.1,
    }
    flat = predict_mod.predict([run], synthetic_profile(0.0), None)
    assert flat["predicted_decode_speedup"] == pytest.approx(9 / 3)  # AR: 9 steps of 10 ms; method: 3
    # the 50-token prefill (10 ms here) is in both, as the measured speedup counts it
    assert flat["predicted_prefill_seconds"] == pytest.approx(0.010) and flat["predicted_speedup"] == pytest.approx(
        100 / 40
    )
    costly = predict_mod.predict([run], synthetic_profile(10.0, drafter_ms=2.0), "d")
    assert costly["predicted_decode_speedup"] == pytest.approx(90 / (3 * (40 + 3 * 2)))
    assert costly["predicted_prefill_seconds"] == pytest.approx(0.500) and costly["predicted_speedup"] == pytest.approx(
        590 / 638
    )
    # tree work calibrated at 2 ms + 1 ms a node: 6 ms more on each 4-node step
    with_tree = predict_mod.predict(
        [run], synthetic_profile(10.0, drafter_ms=2.0), "d", {"ms": 2.0, "ms_per_node": 1.0}
    )
    assert with_tree["predicted_decode_speedup"] == pytest.approx(90 / (3 * (40 + 3 * 2 + 6)))
    assert with_tree["tree_overhead_ms_per_step"] == pytest.approx(6.0) and costly["tree_overhead_ms_per_step"] is None


def test_tree_overhead_is_a_line_in_tree_size_over_the_calibrated_shapes():
    shapes = [{"mean_tree_size": n, "unpriced_ms_per_step": 1.0 + 0.5 * n} for n in (2, 4, 8)]
    assert autotune.overhead_line(shapes) == {
        "ms": pytest.approx(1.0),
        "ms_per_node": pytest.approx(0.5),
        "ms_per_draft": 0.0,
    }
    one = [{"mean_tree_size": 12.0, "delta": 3.0, "unpriced_ms_per_step": 7.0}]
    # a fixed shape: a constant
    assert autotune.overhead_line(one) == {"ms": 7.0, "ms_per_node": 0.0, "ms_per_draft": 0.0}
    # a fit never prices work below zero
    assert predict_mod.tree_step_ms({"ms": -3.0, "ms_per_node": 0.5}, 2.0, 1.0) == 0.0


def test_engine_work_per_step_follows_the_batch_size():
    """Per-row sampling and bookkeeping grow with the rows: a step over 8 rows is priced at
    the work measured there, between measured sizes on the line, beyond them at the nearest;
    a profile with no batch measurement prices every batch as one row."""
    profile = synthetic_profile(0.0)
    profile.step_overhead_ms = 1.0
    assert profile.step_overhead(8) == 1.0
    profile.step_overhead_batches = {"8": 8.0}
    assert [profile.step_overhead(b) for b in (1, 4, 8, 16)] == [1.0, pytest.approx(4.0), 8.0, 8.0]
    # AR over 8 rows for 3 steps: 3 forwards over the 8 rows plus the batch's 8 ms a step
    rows = [(50, 4)] * 8
    assert predict_mod.ar_turn_ms(rows, profile) == pytest.approx(3 * (profile.target_ms(8, 51, 1) + 8.0))


def test_tree_work_per_draft_forward_is_fitted_apart_from_tree_size():
    """CAST-like shapes: the verified size and the draft depth vary independently, and each
    draft layer costs 3 ms the profile does not price. A line in size alone would blame the
    nodes; the plane recovers both, and one contended timing among nine does not move it."""
    grid = [(size, delta) for delta in (1.0, 1.5, 2.0) for size in (2.0, 3.5, 5.0)]
    shapes = [{"mean_tree_size": n, "delta": d, "unpriced_ms_per_step": 1.0 + 0.2 * n + 3.0 * d} for n, d in grid]
    exact = {"ms": pytest.approx(1.0), "ms_per_node": pytest.approx(0.2), "ms_per_draft": pytest.approx(3.0)}
    assert autotune.overhead_line(shapes) == exact
    shapes[4]["unpriced_ms_per_step"] *= 3
    assert autotune.overhead_line(shapes) == exact
    assert predict_mod.tree_step_ms(autotune.overhead_line(shapes), 4.0, 2.0) == pytest.approx(1.0 + 0.8 + 6.0)


def test_a_chains_draft_forwards_follow_its_length_so_only_size_is_fitted():
    """gamma draft forwards for gamma + 1 nodes: the two cannot be told apart, so the work is
    a line in size (as before the plane), not an arbitrary split between the two."""
    shapes = [
        {"mean_tree_size": g + 1.0, "delta": float(g), "unpriced_ms_per_step": 0.5 + 0.4 * (g + 1)} for g in range(1, 7)
    ]
    assert autotune.overhead_line(shapes) == {
        "ms": pytest.approx(0.5),
        "ms_per_node": pytest.approx(0.4),
        "ms_per_draft": 0.0,
    }


def test_one_contended_timing_does_not_tilt_the_tree_overhead_line():
    """A shape timed while another job ran (here 3x its true cost) leaves the line of the
    other shapes as it is: least squares would have moved both slope and intercept."""
    shapes = [{"mean_tree_size": n, "unpriced_ms_per_step": 2.0 + 0.25 * n} for n in (2, 4, 6, 8, 12, 16)]
    shapes[1]["unpriced_ms_per_step"] *= 3
    assert autotune.overhead_line(shapes) == {
        "ms": pytest.approx(2.0),
        "ms_per_node": pytest.approx(0.25),
        "ms_per_draft": 0.0,
    }


def test_batched_prediction_prices_the_rows_still_decoding():
    """Two rows decoded together: step 0 verifies both (the widest tree, 5 rows, at their mean
    context 15), step 1 only row a (4 rows). Target: alone 10 + (n - 1) ms; for two rows
    15 + 2 (n - 1) ms at context 0, 30 ms more at context 30. Drafting: 1 ms alone, 1.5 for two.
    Method: (38 + 2 x 1.5) + (13 + 3 x 1) = 57 ms. AR, one token per step: rows a and b together
    at contexts 15, 16, 17 (30 + 31 + 32), then row a alone 3 x 10: 123 ms. Both prefill the
    two prompts together, 20 tokens wide at context 0: 15 + 2 x 19 = 53 ms."""
    profile = synthetic_profile(per_token=1.0, drafter_ms=1.0)
    pair = [[15.0 + 2 * (n - 1) for n in range(1, 65)], [45.0 + 2 * (n - 1) for n in range(1, 65)]]
    profile.target_batches = {"2": Curve(contexts=[0, 30], max_n=64, ms=pair, spread=[[0.0] * 64] * 2)}
    profile.drafter_batches = {"d": {"2": flat_curve(1.5, 0.0)}}
    common = {"prefill_seconds": 0.0, "batch_seconds": 1.0, "seconds": 1.0, "batch_size": 2, "batch_id": "a"}
    row_a = {
        **common,
        "prompt_tokens": [10],
        "turn_ids": [list(range(7))],
        "accept_lengths": [3, 3],
        "tree_widths": [[1, 1], [1, 1, 1]],
        "step_draft_forwards": [2, 3],
    }
    row_b = {
        **common,
        "prompt_tokens": [20],
        "turn_ids": [list(range(4))],
        "accept_lengths": [3],
        "tree_widths": [[2, 2]],
        "step_draft_forwards": [2],
        "seconds": 0.4,
    }
    forecast = predict_mod.predict([row_a, row_b], profile, "d")
    assert forecast["steps"] == 2 and forecast["predicted_decode_speedup"] == pytest.approx(123 / 57)
    assert forecast["predicted_speedup"] == pytest.approx((123 + 53) / (57 + 53))
    assert forecast["measured_decode_seconds"] == pytest.approx(1.0)  # the batch's time, once


def test_tau_needed_is_the_step_cost_over_ar_times_the_gain():
    """A target forward of n tokens costing 10 + 2(n-1) ms, 1 ms of engine work a step and
    0.5 ms to commit: a 4-token step costs 17.5 ms against AR's 11, so 1.3x needs
    1.3 * 17.5 / 11 tokens a step. Against AR in a dtype whose step is 0.6 of this
    profile's (bf16 AR beside an fp32 profile on an AVX2 CPU), 1/0.6 times more, and at
    64 tokens even 1.0x is out of any tree's reach (tau above n)."""
    profile = synthetic_profile(per_token=2.0)
    profile.step_overhead_ms, profile.commit_ms = 1.0, 0.5
    assert predict_mod.tau_needed(profile, 128, 4, 1.3) == pytest.approx(1.3 * 17.5 / 11)
    assert predict_mod.tau_needed(profile, 128, 1, 1.0) == pytest.approx(11.5 / 11)
    assert predict_mod.tau_needed(profile, 128, 4, 1.3, ar_ratio=0.6) == pytest.approx(1.3 * 17.5 / 11 / 0.6)
    steep = synthetic_profile(per_token=20.0)
    assert predict_mod.tau_needed(steep, 128, 64, 1.0, ar_ratio=0.6) > 64


def test_unpriced_work_is_read_at_the_profiles_pace():
    """A 4-node chain, 3 steps: priced 10 ms a verification + 3 x 1 ms of drafts; at the
    profile's pace the decode took 1 ms more a step (tree work). Timed while the machine ran
    1.5x slower, the same decode is 63 ms with 45 ms of verification: the tree work stays
    1 ms a step, where reading the decode as timed charged the slowdown to it (8 ms)."""
    profile = synthetic_profile(per_token=0.0, drafter_ms=1.0)
    run = {
        "prompt_tokens": [50],
        "turn_ids": [list(range(10))],
        "accept_lengths": [3, 2, 4],
        "tree_widths": [[1, 1, 1]] * 3,
        "step_draft_forwards": [3] * 3,
        "prefill_seconds": 0.01,
    }
    slow = run | {"seconds": 0.01 + 1.5 * 0.042, "verify_seconds": 1.5 * 0.030}

    def unpriced(r):
        return autotune.price([({"gamma": 3}, [r], predict_mod.predict([r], profile, "d"))], ["gamma"], profile, "d")[
            0
        ]["unpriced_ms_per_step"]

    assert unpriced(slow) == pytest.approx(1.0)
    # a record that did not time them
    assert unpriced({k: v for k, v in slow.items() if k != "verify_seconds"}) == pytest.approx(8.0)
    # 10x the profile's price: not this machine's profile
    wild = run | {"seconds": 0.01 + 0.150, "verify_seconds": 10 * 0.030}
    assert unpriced(wild) == pytest.approx((150 / predict_mod.MAX_PACE - 39) / 3)
    # the summary's engine share reads the forwards at the same pace: 1 ms a step of 21, not 8
    assert predict_mod.predict([slow], profile, "d")["engine_overhead_share"] == pytest.approx(1 - 1.5 * 39 / 63)
