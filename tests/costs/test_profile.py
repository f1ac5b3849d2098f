"""Cost profiles: round trip and cache key, interpolation, measuring once and reusing, timings taken on a busy machine,
and the shared target LM."""

import pytest
import torch
from conftest import VOCAB
from cost_fixtures import busy, synthetic_profile

from specbench import costs
from specbench.costs import pool
from specbench.costs.profile import VERSION, Curve, context_grid, load, measure_drafter, measure_target, save
from specbench.drafters.prompt_lookup import PromptLookupDrafter
from specbench.drafters.small_lm import SmallLMDrafter
from specbench.engine.lm import TreeLM
from specbench.engine.loop import Limits, Method, generate
from specbench.engine.sampling import Sampling
from specbench.trees.autoregressive import Autoregressive
from specbench.verify.standard import StandardVerifier


def test_profile_round_trip_and_cache_key(tmp_path):
    profile = synthetic_profile(1.5, drafter_ms=0.7)
    path = tmp_path / "p.json"
    save(profile, path)
    assert load(path, profile.key) == profile
    assert load(path, {**profile.key, "dtype": "bfloat16"}) is None  # another key: not reused
    path.write_text(path.read_text().replace(f'"version": {VERSION}', f'"version": {VERSION - 1}'))
    assert load(path, profile.key) is None  # another version: measured again


def test_curve_interpolates_context_and_extrapolates_n():
    curve = Curve(contexts=[100, 300], max_n=3, ms=[[1.0, 2.0, 3.0], [3.0, 4.0, 5.0]], spread=[[0] * 3] * 2)
    assert curve.at(100, 2) == 2.0 and curve.at(200, 2) == 3.0 and curve.at(50, 1) == 1.0 and curve.at(900, 1) == 3.0
    assert curve.at(100, 5) == 5.0  # past max_n along the last slope
    falling = Curve(contexts=[100], max_n=2, ms=[[3.0, 2.0]], spread=[[0, 0]])
    assert falling.at(100, 9) == 2.0  # never cheaper than the last measured point
    bumpy = Curve(contexts=[100], max_n=8, ms=[[1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 8.0, 7.0]], spread=[[0] * 8])
    assert bumpy.at(100, 12) == 10.0  # along the secant from n 4 to 8, not flat after one noisy point
    assert context_grid(300) == [128, 512] and context_grid(512) == [128, 512] and context_grid(40) == [128]


def test_ensure_profile_measures_once_then_reuses(tmp_path, monkeypatch, target):
    monkeypatch.setenv("SPECBENCH_CACHE", str(tmp_path))
    calls = []
    real = costs.measure_target
    monkeypatch.setattr(costs, "measure_target", lambda *a, **k: calls.append(1) or real(*a, **k))
    key = costs.profile_key("tiny", "float32", "cpu", 1)
    lm = TreeLM(target)
    first = costs.ensure_profile(
        key, lm, 100, {"pld": PromptLookupDrafter(VOCAB)}, repeats=1, max_n=4, log=lambda *_: None
    )
    again = costs.ensure_profile(
        key, lm, 100, {"pld": PromptLookupDrafter(VOCAB)}, repeats=1, max_n=4, log=lambda *_: None
    )
    assert len(calls) == 1 and again == first and "pld" in again.drafters
    longer = costs.ensure_profile(
        key, lm, 100, {"pld": PromptLookupDrafter(VOCAB)}, repeats=1, max_n=6, log=lambda *_: None
    )
    assert longer.target.max_n == 6 and longer.drafters["pld"].max_n == 6  # a shorter cached curve is measured again
    assert costs.profile_path(key).with_suffix(".png").is_file()


def test_a_profile_run_that_needs_longer_contexts_times_only_those(tmp_path, monkeypatch, target):
    """A cached curve is extended, never thrown away: a run reaching 600 tokens times the
    512 and 2048 rows the cache lacks, and a run adding a drafter times only the drafter."""
    monkeypatch.setenv("SPECBENCH_CACHE", str(tmp_path))
    contexts = []
    real = costs.measure_target
    monkeypatch.setattr(
        costs, "measure_target", lambda lm, cs, *a, **k: contexts.append(list(cs)) or real(lm, cs, *a, **k)
    )
    key = costs.profile_key("tiny", "float32", "cpu", 1)
    quiet = {"repeats": 1, "max_n": 3, "log": lambda *_: None}
    short = costs.ensure_profile(key, TreeLM(target), 100, **quiet)
    longer = costs.ensure_profile(key, TreeLM(target), 600, {"pld": PromptLookupDrafter(VOCAB)}, **quiet)
    assert contexts == [[128], [512, 2048]] and longer.target.contexts == [128, 512, 2048]
    assert longer.target.ms[0] == short.target.ms[0]  # the cached row is kept as it was
    costs.ensure_profile(key, TreeLM(target), 600, {"pld": PromptLookupDrafter(VOCAB)}, **quiet)
    assert len(contexts) == 2 and "pld" in costs.load(costs.profile_path(key), key).drafters
    # a run that needs fewer n reaching a longer context adds rows as wide as the curve's
    wider = costs.ensure_profile(key, TreeLM(target), 3000, **{**quiet, "max_n": 2})
    assert wider.target.contexts == [128, 512, 2048, 8192] and {len(row) for row in wider.target.ms} == {3}


def test_timings_taken_beside_another_job_are_cached_with_a_note_and_refined_when_idle(tmp_path, monkeypatch, target):
    """Thrown away, a profile timed beside another job would be paid again by every run while
    the machine stays busy; trusted, it would price every later run too high. So it is
    cached with the contention noted, reused while the machine is busy, and timed again by
    the first run that finds it idle."""
    from specbench.costs import contention

    monkeypatch.setenv("SPECBENCH_CACHE", str(tmp_path))
    monkeypatch.setenv("SPECBENCH_CONTENDED_CORES", "0.25")
    monkeypatch.setattr(contention, "watch", busy(1.4))
    monkeypatch.setattr(contention, "idle_now", lambda: False)
    calls, logged = [], []
    real = costs.measure_target
    monkeypatch.setattr(costs, "measure_target", lambda *a, **k: calls.append(1) or real(*a, **k))
    key = costs.profile_key("tiny", "float32", "cpu", 1)
    first = costs.ensure_profile(key, TreeLM(target), 100, repeats=1, max_n=4, log=logged.append)
    assert first.contended_cores == 1.4 and not first.trusted and costs.profile_path(key).is_file()
    assert any("timed while other processes kept 1.4 cores busy" in line for line in logged)
    again = costs.ensure_profile(key, TreeLM(target), 100, repeats=1, max_n=4, log=lambda *_: None)
    assert len(calls) == 1 and again.contended_cores == 1.4  # the machine is still busy: reused
    monkeypatch.setattr(contention, "watch", busy(0.0))
    monkeypatch.setattr(contention, "idle_now", lambda: True)
    refined = costs.ensure_profile(key, TreeLM(target), 100, repeats=1, max_n=4, log=lambda *_: None)
    assert len(calls) == 2 and refined.trusted and costs.load(costs.profile_path(key), key).trusted
    # another drafter's curve timed beside a job says nothing about the curves this run prices with
    refined.drafters["other"] = Curve(contexts=[128], max_n=1, ms=[[1.0]], spread=[[0.0]], contended_cores=1.4)
    save(refined, costs.profile_path(key))
    # nothing this run needs is contended: no look, no refining
    monkeypatch.setattr(contention, "idle_now", pytest.fail)
    again = costs.ensure_profile(key, TreeLM(target), 100, repeats=1, max_n=4, log=lambda *_: None)
    assert len(calls) == 2 and again.contended_for(None) == 0.0 and again.contended_for("other") == 1.4


def test_runs_in_one_process_share_the_targets_lm_and_let_a_replaced_model_go():
    """A group's runs (specbench.run.group) ask for the same model, forward and compile choice:
    they get one LM, so the packed weights are built once, and a decode finds nothing of an
    earlier one; another compile choice gets its own LM; a new model drops the old model's."""
    from conftest import tiny_llama

    from specbench.engine.kernels import Compiled

    model, other = tiny_llama(0), tiny_llama(1)
    first = pool.lm(model, "auto", Compiled())
    assert pool.lm(model, "auto", Compiled()) is first and first.model is model
    packed = pool.lm(model, "auto", Compiled(packed_from=1))
    assert packed is not first and pool.lm(model, "auto", Compiled(packed_from=1)) is packed
    first.features = [torch.zeros(3, 8)]  # what an EAGLE-3 run's last forward left
    first.reset(2)  # the next decode, perhaps another run's whose drafter reads no features
    assert first.features is None
    replaced = pool.lm(other, "auto", Compiled())
    assert replaced.model is other and all(lm.model is other for lm in pool._lms.values())


def test_one_pool_holds_the_targets_a_run_decides_between(monkeypatch):
    """The dtype probe's models are the run's: asked again, the same object; while deciding both
    dtypes of one model are held, `keep` lets the other go, and another model replaces them."""
    loads = []

    def load(entry, dtype, device):
        loads.append((entry["name"], dtype))
        return object(), None

    monkeypatch.setattr(pool, "_models", {})
    monkeypatch.setattr(pool.registry, "load", load)
    entry = {"name": "m"}
    bf16 = pool.target(entry, "bfloat16", "cpu")
    fp32 = pool.target(entry, "float32", "cpu")
    assert pool.target(entry, "bfloat16", "cpu") is bf16 and pool.target(entry, "float32", "cpu") is fp32
    pool.keep(entry, "float32", "cpu")
    assert pool.target(entry, "float32", "cpu") is fp32 and len(loads) == 2
    pool.target(entry, "bfloat16", "cpu")
    assert loads[-1] == ("m", "bfloat16")  # let go: loaded again
    pool.target({"name": "n"}, "float32", "cpu")
    assert list(pool._models) == ['[{"name": "n"}, "cpu"]']


def test_measurements_cover_the_grid_and_leave_the_model_usable(target, draft, prompts):
    lm = TreeLM(target)
    curve = measure_target(lm, [8, 24], max_n=11, repeats=1)
    assert curve.ns == [1, 2, 3, 4, 5, 6, 7, 8, 11] and [len(r) for r in curve.ms] == [9, 9]
    assert all(v > 0 for r in curve.ms for v in r)
    assert curve.at(8, 10) == pytest.approx(curve.ms[0][7] + (curve.ms[0][8] - curve.ms[0][7]) * 2 / 3)
    drafter_curve = measure_drafter(SmallLMDrafter(draft, VOCAB), lm, [8], max_n=3, repeats=1)
    assert drafter_curve.ns == [1, 2, 3] and len(drafter_curve.ms[0]) == 3
    method = Method(Autoregressive(), StandardVerifier())
    limits = Limits(max_new_tokens=12)
    assert (
        generate(lm, method, prompts[0], Sampling(), limits).ids
        == generate(TreeLM(target), method, prompts[0], Sampling(), limits).ids
    )


def test_a_slow_spell_of_the_machine_does_not_price_a_point(monkeypatch):
    """8 points of 1 ms each, 5 timed passes after a warm-up; for 6 calls in a row the
    machine runs 5x slower. Timed back to back, one point's repeats would all fall in the
    spell; in shuffled passes each point gets at most two slow timings, so every median is
    1 ms, and the points the spell hit are timed 10 more times (they spread past NOISY_SPREAD)."""
    from specbench.costs import profile as profile_mod

    clock = {"now": 0.0, "calls": 0}
    calls = {n: 0 for n in range(8)}

    def call(n):
        calls[n] += 1
        clock["calls"] += 1
        clock["now"] += 0.005 if 20 <= clock["calls"] < 26 else 0.001

    monkeypatch.setattr(profile_mod.time, "perf_counter", lambda: clock["now"])
    timings = profile_mod.interleaved({n: (lambda n=n: call(n), None) for n in range(8)}, repeats=5)
    assert all(mid == pytest.approx(1.0) for mid, _ in timings.values())
    assert max(spread for _, spread in timings.values()) == pytest.approx(4.0)  # the spell shows in the spread
    hit = {n for n, (_, spread) in timings.items() if spread > 0}
    assert 3 <= len(hit) <= 6 and all(calls[n] == (16 if n in hit else 6) for n in range(8))


def test_a_comparison_stops_once_told_apart_and_a_tie_at_the_cap(monkeypatch):
    """Three points on a fake clock: "fast" takes 1 ms, "slow" 2 ms, and "twin" alternates 1.9
    and 2.1 ms. fast against slow separates in the first passes (4 timings each: the least at
    which the test can), slow against twin never does, so those two are timed to the cap and
    the pair is reported tied, while fast stops at 4."""
    from specbench.costs import profile as profile_mod

    clock = {"now": 0.0}
    calls = {"fast": 0, "slow": 0, "twin": 0}

    def call(name):
        calls[name] += 1
        clock["now"] += {"fast": 0.001, "slow": 0.002, "twin": 0.0019 + 0.0002 * (calls["twin"] % 2)}[name]

    monkeypatch.setattr(profile_mod.time, "perf_counter", lambda: clock["now"])
    points = {name: (lambda name=name: call(name), None) for name in calls}
    timings, tied = profile_mod.compared(points, [("fast", "slow"), ("slow", "twin")], most=9)
    assert tied == [("slow", "twin")]
    assert calls == {"fast": 1 + 4, "slow": 1 + 9, "twin": 1 + 9}  # the warm-up call, then the timed ones
    assert timings["fast"][0] == pytest.approx(1.0) and timings["slow"][0] == pytest.approx(2.0)


def test_a_point_timed_mostly_in_a_fast_spell_is_timed_again(monkeypatch):
    """Three timings, two of them in a spell where the machine ran 20% fast (a profile
    priced a two-token bf16 forward 20% under what decoding then took): the median of three
    is the fast one; the point spreads past NOISY_SPREAD, is timed 6 more times, and its
    median is the machine's usual time. A steady point is timed 3 times only."""
    from specbench.costs import profile as profile_mod

    clock = {"now": 0.0}
    durations = {"steady": iter([1.0] * 20), "noisy": iter([1.0, 0.8, 0.8] + [1.0] * 20)}

    def call(name):
        clock["now"] += next(durations[name]) / 1000

    monkeypatch.setattr(profile_mod.time, "perf_counter", lambda: clock["now"])
    timings = profile_mod.interleaved({name: (lambda name=name: call(name), None) for name in durations}, repeats=3)
    assert timings["noisy"][0] == pytest.approx(1.0) and timings["steady"][0] == pytest.approx(1.0)
    assert timings["steady"][1] == pytest.approx(0.0, abs=1e-9)
    assert len(list(durations["steady"])) == 20 - 4 and len(list(durations["noisy"])) == 23 - 10
