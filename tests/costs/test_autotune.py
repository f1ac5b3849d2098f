"""Auto tree shapes: the candidates, the calibration that chooses among them, when a choice is reused and when it is
made again."""

from dataclasses import replace
from types import SimpleNamespace

import pytest
import torch
from conftest import MIN_GAIN, VOCAB
from cost_fixtures import calibration, flat_curve, synthetic_profile

from specbench.costs import autotune
from specbench.drafters.small_lm import SmallLMDrafter
from specbench.engine import methods
from specbench.engine.candidates import DRAFTING_OFF, candidates
from specbench.engine.lm import TreeLM
from specbench.engine.loop import Method
from specbench.engine.sampling import Sampling
from specbench.errors import ConfigError
from specbench.models import registry
from specbench.trees.autoregressive import Autoregressive
from specbench.trees.chain import Chain
from specbench.verify.standard import StandardVerifier


def tune_on(profile, target, draft, prompts, tmp_path, batch_size=1):
    cfg = {"_target_": "specbench.trees.chain.Chain", "gamma": "auto"}
    drafter = SmallLMDrafter(draft, VOCAB)
    setup = calibration(prompts[:batch_size], tmp_path, batch_size)
    return autotune.tune(cfg, drafter, StandardVerifier(), TreeLM(target), profile, setup)


def test_a_contended_calibration_is_reused_while_busy_and_redone_when_idle(tmp_path, monkeypatch):
    from specbench.costs import autotune, contention

    monkeypatch.setenv("SPECBENCH_CONTENDED_CORES", "0.25")
    path = tmp_path / "autotune.json"
    autotune.keep({"candidates": [], "contended_cores": 1.4}, path, lambda *_: None)
    monkeypatch.setattr(contention, "idle_now", lambda: False)
    assert autotune.reusable(path, lambda *_: None) == {"candidates": [], "contended_cores": 1.4}
    monkeypatch.setattr(contention, "idle_now", lambda: True)
    assert autotune.reusable(path, lambda *_: None) is None
    autotune.keep({"candidates": [], "contended_cores": 0.1}, path, lambda *_: None)
    assert autotune.reusable(path, lambda *_: None) is not None


@pytest.mark.parametrize(
    "tree, width",
    [
        ({"_target_": "specbench.trees.talon.TalonTree", "budget": 48}, 48),
        ({"_target_": "specbench.trees.eagle.EagleDynamicTree", "top_k": 10, "depth": 6, "total_tokens": 50}, 50),
        ({"_target_": "specbench.trees.cast.CastTree", "total_tokens": 72, "c1": 3, "c2": 3, "c3": 3}, 72),
        ({"_target_": "specbench.trees.chain.Chain", "gamma": 7}, 8),
        ({"_target_": "specbench.trees.static.StaticTree", "choices": [[0], [1], [0, 0]]}, 4),
        ({"_target_": "specbench.trees.opt.OptTree", "nodes": 60}, 61),
        ({"_target_": "specbench.trees.eagle.EagleDynamicTree", "top_k": 10, "depth": 6, "total_tokens": "auto"}, None),
        ({"_target_": "specbench.trees.lookahead.LookaheadTree", "window": 4, "ngram": 3, "candidates": 2}, 13),
    ],
)
def test_a_tree_policy_names_the_widest_forward_its_settings_fix(tree, width):
    """Root included, as the verification forward feeds it (Lookahead: its window's levels and
    pooled n-grams at most); None where calibration still will (`auto` keys)."""
    assert methods.widest({"tree": tree}) == width


def test_auto_candidates_fill_only_auto_keys():
    cfg = {"_target_": "specbench.trees.eagle.EagleDynamicTree", "top_k": 4, "depth": "auto", "total_tokens": "auto"}
    options = candidates(cfg)
    assert all(o["top_k"] == 4 and isinstance(o["depth"], int) for o in options)
    assert len({(o["depth"], o["total_tokens"]) for o in options}) == len(options)
    with pytest.raises(ConfigError, match="mu"):
        candidates({"_target_": "specbench.trees.talon.TalonTree", "budget": 60, "mu": "auto", "top_k": 10})


def test_static_tree_sizes_past_the_tree_are_one_candidate():
    """A 6-node tree: sizes 1-4 cut it, 6 and every larger size is the whole tree (calibrated once)."""
    choices = [[0], [1], [2], [0, 0], [0, 1], [0, 0, 0]]
    options = candidates({"_target_": "specbench.trees.static.StaticTree", "choices": choices, "size": "auto"})
    assert [o["size"] for o in options] == [1, 2, 3, 4, None]  # 6 (the node count) and up: the whole tree


def test_drafting_needs_a_predicted_gain_above_min_gain():
    """A shape predicted 1.04x (CAST's best on an AVX2 CPU, measured 0.92-0.97x) does not
    turn drafting on at the default margin; with no margin it does. A cached record is
    decided again, so a changed margin applies without re-measuring."""
    options = [{"gamma": g} for g in (1, 2, 3)]
    record = {"candidates": [{"tree": o, "predicted_speedup": p} for o, p in zip(options, (0.9, 1.04, 0.8))]}
    off = autotune.decide(record, options, MIN_GAIN)
    assert off["chosen"] == DRAFTING_OFF and off["predicted_speedup"] == 1.04
    assert off["note"].startswith("no shape is predicted more than 5% faster than AR") and "{'gamma': 2}" in off["note"]
    on = autotune.decide(off, options, 0.0)
    assert on["chosen"] == {"gamma": 2} and "note" not in on


def test_auto_shape_is_chosen_at_the_runs_batch_size(target, draft, prompts, tmp_path):
    """Verification is flat in n alone but steep for two rows: a long chain pays at B=1,
    and at B=2 no chain does (drafting off); each batch size keeps its own cached choice."""
    profile = synthetic_profile(per_token=0.0, drafter_ms=0.01, base=1000.0)
    profile.target_batches = {"2": flat_curve(2000.0, 3000.0)}
    alone, _ = tune_on(profile, target, draft, prompts, tmp_path)
    batched, record = tune_on(profile, target, draft, prompts, tmp_path, batch_size=2)
    assert alone["gamma"] > 1 and batched == DRAFTING_OFF
    assert record["calibration"]["batch_size"] == 2 and record["calibration"]["prompts"] == 2
    assert len(list(tmp_path.glob("autotune-*.json"))) == 2


def test_auto_shape_is_never_predicted_slower_than_ar(target, draft, prompts, tmp_path):
    # (profiled forwards of seconds, so the tiny model's real time, the unpriced part, is noise)
    # verification cost grows steeply with n and drafting is dear: no chain pays, so drafting
    # is turned off (the smallest chain would still be slower than AR)
    steep = synthetic_profile(per_token=3000.0, drafter_ms=800.0, base=1000.0)
    chosen, record = tune_on(steep, target, draft, prompts, tmp_path / "a")
    assert chosen == DRAFTING_OFF and "no shape" in record["note"]
    assert all(c["predicted_speedup"] < 1.0 for c in record["candidates"])
    assert autotune.describe(record).startswith("drafting off (best shape {'gamma': ")
    best = max(record["candidates"], key=lambda c: c["predicted_speedup"])
    assert autotune.describe(record).endswith(
        f"tau {best['tau']:.2f} where {best['tau'] / best['predicted_speedup']:.2f} breaks even)"
    )
    # flat verification and nearly free drafting: a longer chain wins, predicted faster than AR
    flat = synthetic_profile(per_token=0.0, drafter_ms=0.01, base=1000.0)
    chosen, record = tune_on(flat, target, draft, prompts, tmp_path / "b")
    assert record["predicted_speedup"] >= 1.0 and chosen["gamma"] > 1 and "note" not in record
    chosen_again, _ = tune_on(flat, target, draft, prompts, tmp_path / "b")
    assert chosen_again == chosen  # cached


def test_a_shape_that_cannot_beat_ar_even_accepting_every_draft_is_not_decoded(target, draft, prompts, tmp_path):
    """Forwards of up to 4 tokens cost one token's 1000 ms, wider ones 1000 ms a token: a chain
    of gamma >= 4 verifies gamma + 1 tokens for at most gamma + 1 a step, 1.0x at best, so it is
    left out of the calibration with its ceiling; the shorter chains are calibrated."""
    row = [1000.0 * n if n > 4 else 1000.0 for n in range(1, 65)]
    profile = synthetic_profile(per_token=0.0, drafter_ms=0.01, base=1000.0)
    profile.target.ms, profile.step_overhead_ms = [row], 0.0
    assert autotune.ceiling(3, 4, profile) == pytest.approx(4.0)
    assert autotune.ceiling(5, 6, profile) == pytest.approx(1.0)
    profile.step_overhead_ms = 500.0  # AR's engine work per step counts on both sides
    assert autotune.ceiling(5, 6, profile) == pytest.approx(6 * 1500 / 6500)
    profile.step_overhead_ms = 0.0
    chosen, record = tune_on(profile, target, draft, prompts, tmp_path)
    rows = {c["tree"]["gamma"]: c for c in record["candidates"]}
    assert all(rows[g]["ceiling"] and not rows[g]["measured"] and record["runs"][g - 1] == [] for g in range(4, 11))
    assert not any(rows[g].get("ceiling") for g in (1, 2, 3)) and chosen["gamma"] <= 3
    assert autotune.reprice(record, profile, "d")[5]["predicted_speedup"] == pytest.approx(
        rows[6]["predicted_speedup"], abs=1e-3
    )


def test_the_profile_is_timed_no_wider_than_a_shape_that_could_pay():
    """EAGLE-3's candidates at the forward probe of an AVX2 CPU (AMD EPYC Zen 4 capped to
    AVX2, fp32 on fp16 weights, measured): the 60-token shape could reach 7 x 21.5 / 226 =
    0.67x, so the profile stops at the 32-token one (1.02x here, kept within the slack: the
    profile's kindest context read it 1.08x). Where the probe is flat (a GPU) every shape
    stays, and a policy whose width follows the draft, or a shape wider than the probe,
    keeps the method's full reach."""
    from specbench.costs.compile import probed_ms
    from specbench.engine.kernels import Compiled

    record = {
        "probe": {
            "plain": {"1": 68.0, "2": 103.7, "4": 101.1, "8": 81.0, "16": 100.1, "60": 207.7},
            "packed": {"1": 49.8, "2": 71.2, "4": 75.9, "8": 89.8, "16": 109.1, "60": 200.4},
            "fp16": {"1": 21.5, "2": 27.1, "4": 25.8, "8": 41.3, "16": 70.2, "60": 226.2},
            "ties": {"16": ["packed=plain"]},
        }
    }
    fp16 = probed_ms(Compiled(fp16_weights=True), record)
    assert fp16 == {1: 21.5, 2: 27.1, 4: 25.8, 8: 41.3, 16: 70.2, 60: 226.2}
    assert probed_ms(Compiled(packed_from=4), record) == {1: 68.0, 2: 103.7, 4: 75.9, 8: 89.8, 16: 109.1, 60: 200.4}
    assert probed_ms(Compiled(), None) == {}
    eagle_cfg = {"_target_": "specbench.trees.eagle.EagleDynamicTree", "top_k": "auto", "depth": "auto"}
    eagle = [methods.instantiate_part(c, "t") for c in candidates(eagle_cfg | {"total_tokens": "auto"})]
    assert max(t.widest() for t in eagle) == 60
    assert autotune.live_width(eagle, fp16, MIN_GAIN) == 32
    assert autotune.live_width(eagle, {1: 10.0, 64: 11.0}, MIN_GAIN) == 60
    assert autotune.live_width(eagle, {1: 21.5, 16: 70.2}, MIN_GAIN) is None  # 60 lies past the probe
    cast_cfg = {"_target_": "specbench.trees.cast.CastTree", "top_k": 12, "depth": 13, "total_tokens": 72}
    cast = [methods.instantiate_part(c, "t") for c in candidates(cast_cfg | {"c1": "auto", "c2": "auto", "c3": "auto"})]
    assert autotune.live_width(cast, fp16, MIN_GAIN) is None


def test_a_policy_with_new_candidates_chooses_again(target, draft, prompts, tmp_path, monkeypatch):
    """A cached choice was made among the policy's candidates of its day: once the grid
    changes (a new threshold pair for CAST, say), the choice is measured again."""

    profile = synthetic_profile(per_token=0.0, drafter_ms=0.01, base=1000.0)
    monkeypatch.setattr(Chain, "AUTO_CANDIDATES", [{"gamma": 1}, {"gamma": 2}])
    _, first = tune_on(profile, target, draft, prompts, tmp_path)
    _, cached = tune_on(profile, target, draft, prompts, tmp_path)
    monkeypatch.setattr(Chain, "AUTO_CANDIDATES", [{"gamma": 1}, {"gamma": 2}, {"gamma": 3}])
    _, again = tune_on(profile, target, draft, prompts, tmp_path)
    assert len(first["candidates"]) == len(cached["candidates"]) == 2 and len(again["candidates"]) == 3


def test_a_lossy_verifier_gets_its_own_shape_choice(tmp_path):
    """MARS accepts more than exact matching, so it must not reuse EAGLE-3's choice."""
    from specbench.verify.mars import MarsVerifier

    key = (tmp_path, synthetic_profile(0.0), "d", {"gamma": "auto"}, Sampling(), ["p", 8])
    standard, mars = autotune.verifier_id(StandardVerifier()), autotune.verifier_id(MarsVerifier(0.9))
    assert autotune.cache_file(*key, standard) != autotune.cache_file(*key, mars)
    assert autotune.cache_file(*key, mars) != autotune.cache_file(*key, autotune.verifier_id(MarsVerifier(0.8)))
    assert autotune.cache_file(*key, mars) == autotune.cache_file(*key, autotune.verifier_id(MarsVerifier(0.9)))


def test_retrained_drafter_weights_get_their_own_shape_choice(tmp_path):
    """A head retrained in place accepts differently: the cached shape choice must not
    outlive its weights, while an unchanged head keeps it."""
    head = tmp_path / "head"
    head.mkdir()
    (head / "config.json").write_text("{}")
    (head / "model.safetensors").write_bytes(b"v1" * 1000)
    cfg = {"_target_": "specbench.drafters.eagle3.load", "head": {"name": "h", "path": str(head)}}
    before = registry.weights_id(cfg)
    assert registry.weights_id(cfg) == before and registry.weights_id({"_target_": "x.prompt_lookup.load"}) != before
    (head / "model.safetensors").write_bytes(b"v2" * 1000)
    after = registry.weights_id(cfg)
    assert after != before
    key = (
        tmp_path,
        synthetic_profile(0.0),
        "d",
        {"gamma": "auto"},
        Sampling(),
        ["p", 8],
        autotune.verifier_id(StandardVerifier()),
    )
    assert autotune.cache_file(*key, before) != autotune.cache_file(*key, after)


def test_a_calibration_is_priced_again_under_another_profile(target, draft, prompts, tmp_path):
    """The recorded calibration decodes priced under the profile they were decoded with give
    the record's own predictions back, exactly (both charge tree work step by step); under a profile whose wide forwards
    cost more, every
    shape is predicted slower and AR alike."""
    flat = synthetic_profile(per_token=0.0, drafter_ms=0.01, base=1000.0)
    _, record = tune_on(flat, target, draft, prompts, tmp_path)
    again = autotune.reprice(record, flat, "d")
    assert [r["tree"] for r in again] == [c["tree"] for c in record["candidates"]]
    # priced alike, to the last digit kept
    assert [{k: r[k] for k in ("predicted_speedup", "ar_ms", "method_ms")} for r in record["candidates"]] == [
        {k: r[k] for k in ("predicted_speedup", "ar_ms", "method_ms")} for r in again
    ]
    steep = autotune.reprice(record, synthetic_profile(per_token=300.0, drafter_ms=0.01, base=1000.0), "d")
    assert all(s["predicted_speedup"] < f["predicted_speedup"] for s, f in zip(steep, again))
    assert [s["ar_ms"] for s in steep] == pytest.approx([f["ar_ms"] for f in again])


def test_auto_is_refused_for_a_target_that_is_not_a_tree_policy_and_for_a_policy_without_candidates():
    """The candidates come from what TreePolicy declares: a `_target_` that is no policy, or
    a policy that lists no AUTO_CANDIDATES (AR), is one line naming the key."""
    with pytest.raises(ConfigError, match=r"method\.tree\._target_: .*StandardVerifier is not a TreePolicy"):
        candidates({"_target_": "specbench.verify.standard.StandardVerifier", "gamma": "auto"})
    with pytest.raises(ConfigError, match=r"gamma cannot be auto for .*Autoregressive \(auto supported for: none\)"):
        candidates({"_target_": "specbench.trees.autoregressive.Autoregressive", "gamma": "auto"})


def test_shapes_that_do_not_nest_race_on_the_first_prompt(target, draft, prompts, tmp_path, monkeypatch):
    """Shapes decoded one by one (no pilot) are all decoded on the first calibration prompt
    and on the others only where predicted within RACE_MARGIN of the best there: a shape
    left behind keeps its first prompt's row, not measured, never chosen; the shapes that
    went on read what decoding every shape on every prompt reads."""
    from specbench.costs import pilot
    from specbench.costs.predict import predict

    monkeypatch.setattr(pilot, "nested", lambda trees: False)
    monkeypatch.setattr(Chain, "AUTO_CANDIDATES", [{"gamma": g} for g in (1, 2, 4, 8)])
    profile = synthetic_profile(per_token=400.0, drafter_ms=0.01, base=1000.0)
    cfg = {"_target_": "specbench.trees.chain.Chain", "gamma": "auto"}

    def tune(cache, margin):
        monkeypatch.setattr(autotune, "RACE_MARGIN", margin)
        setup = calibration(prompts[:2], cache)
        return autotune.tune(cfg, SmallLMDrafter(draft, VOCAB), StandardVerifier(), TreeLM(target), profile, setup)

    chosen, raced = tune(tmp_path / "raced", 0.15)
    _, every = tune(tmp_path / "every", 1.0)
    assert all(c.get("measured", True) for c in every["candidates"])
    behind = [i for i, c in enumerate(raced["candidates"]) if not c.get("measured", True)]
    ahead = [i for i in range(len(raced["candidates"])) if i not in behind]
    assert behind and ahead and all(raced["candidates"][i]["raced_out"] for i in behind)
    assert [len(raced["runs"][i]) for i in behind] == [1] * len(behind)
    assert [len(raced["runs"][i]) for i in ahead] == [2] * len(ahead)
    options = candidates(cfg)
    first = [(o, runs[:1], predict(runs[:1], profile, "d")) for o, runs in zip(options, raced["runs"])]
    speed = [row["predicted_speedup"] for row in autotune.price(first, ["gamma"], profile, "d")]
    assert all((speed[i] < max(speed) * 0.85) == (i in behind) for i in range(len(speed)))
    for i in ahead:
        assert raced["candidates"][i]["tau"] == pytest.approx(every["candidates"][i]["tau"])
    if chosen != DRAFTING_OFF:
        assert options.index(chosen) in ahead


def test_calibration_seeds_its_generators_on_the_targets_device(target, prompts, tmp_path, monkeypatch):
    """Sampling on a GPU refuses a CPU generator: the calibration's decodes (warm-up and timed)
    seed theirs on the device the target reports (here cuda:1, decoded on the CPU)."""
    requested = []

    class Recorded:
        def __init__(self, device=None):
            requested.append(device)

        def manual_seed(self, seed):
            return self

    lm, real = TreeLM(target), autotune.generate_batch

    def on_the_cpu(_target, method, batch, sampling, limits, generators):
        return real(lm, method, batch, sampling, limits)

    on_gpu = SimpleNamespace(device=torch.device("cuda", 1))
    monkeypatch.setattr(torch, "Generator", Recorded)
    monkeypatch.setattr(autotune, "generate_batch", on_the_cpu)
    setup = replace(calibration(prompts[:4], tmp_path, batch_size=2), max_new_tokens=4)
    setup.decode([Method(Autoregressive(), StandardVerifier())], on_gpu, synthetic_profile(0.0))
    assert requested == [torch.device("cuda", 1)] * 6
