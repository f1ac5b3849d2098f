"""The dtype rule and its probe: which dtype a run's forwards take, timed as the compile choice runs them, weighed with
the tree shape."""

import pytest
import torch
from conftest import MIN_GAIN

from specbench.costs import autotune
from specbench.costs import dtype as dtype_rule
from specbench.engine import methods
from specbench.engine.candidates import DRAFTING_OFF
from specbench.engine.lm import TreeLM

AUTO_EAGLE = ("top_k", "depth", "total_tokens")


# fp16 weights off: the probe then times the dtypes on any CPU (an AVX2-only one settles them untimed otherwise)
TIMED = {"engine": {"fp16_weights": "off"}, "log": lambda *_: None}
CPU = {"dtype": "auto", "device": "cpu", "threads": 2}


@pytest.fixture
def probe_cache(tmp_path, monkeypatch):
    """The dtype probe's cache in `tmp_path`, its model named `m`; no model is loaded."""
    monkeypatch.setenv("SPECBENCH_CACHE", str(tmp_path))
    monkeypatch.setattr(dtype_rule.registry, "cache_name", lambda entry, **_: "m")
    monkeypatch.setattr(dtype_rule, "forward_in", lambda model_cfg, dtype, *_: dtype)
    return tmp_path / "costs"


def timed_as(table: dict, timed: list):
    """A dtype probe that reads `table` (dtype -> {str(n): ms}), noting the sizes it is asked for."""

    def measure(lms, sizes, **_):
        timed.append(sizes)
        return {d: {str(n): table[d][str(n)] for n in sizes} for d in lms}

    return measure


def zen3_rows(method_ms: list[float], ar_ms: float) -> list[dict]:
    return [
        {"tree": {"gamma": g + 1}, "ar_ms": ar_ms, "method_ms": m, "predicted_speedup": ar_ms / m}
        for g, m in enumerate(method_ms)
    ]


def test_dtype_rule():
    avx2 = {"bfloat16": {"1": 42, "4": 80, "16": 259, "64": 947}, "float32": {"1": 57, "4": 70, "16": 128, "64": 266}}
    native = {"bfloat16": {"1": 26, "4": 27, "16": 34, "64": 57}, "float32": {"1": 40, "4": 44, "16": 60, "64": 120}}
    assert dtype_rule.choose(avx2) == "float32"
    assert dtype_rule.choose(native) == "bfloat16"
    assert dtype_rule.resolve({"dtype": "float32"}, {"name": "m"}) == ("float32", None)
    # one-token forwards within 5% are a tie the probe cannot break: the ISA's dtype for wide forwards
    zen3_fp16_weights = {"bfloat16": {"1": 33.1}, "float32": {"1": 34.5}}
    assert dtype_rule.choose(zen3_fp16_weights, dtype_rule.ONE_TOKEN, tie="float32") == "float32"
    assert dtype_rule.choose(zen3_fp16_weights, dtype_rule.ONE_TOKEN, tie="bfloat16") == "bfloat16"
    assert (
        dtype_rule.choose(avx2, dtype_rule.ONE_TOKEN) == "bfloat16"
        and dtype_rule.choose(native, dtype_rule.ONE_TOKEN) == "bfloat16"
    )


def test_dtype_probe_times_each_dtype_as_its_compile_choice_runs_it(monkeypatch, tmp_path):
    """Packing can help one dtype much more than the other, so each dtype's forward is timed
    packed or not as engine.compile chooses for that dtype's model; the cached probe names the
    compile mode it was timed under."""
    from conftest import tiny_llama

    from specbench.engine.kernels import Compiled

    monkeypatch.setenv("SPECBENCH_CACHE", str(tmp_path))
    monkeypatch.setattr(dtype_rule.registry, "cache_name", lambda entry, **_: "m")
    monkeypatch.setattr(
        dtype_rule.pool, "target", lambda entry, dtype, device: (tiny_llama(3).to(getattr(torch, dtype)),)
    )
    choice = {torch.bfloat16: Compiled(packed_from=1), torch.float32: Compiled(packed_from=4)}
    monkeypatch.setattr(
        dtype_rule.compile_rule, "resolve", lambda mode, model, *_, **__: (choice[next(model.parameters()).dtype], {})
    )
    built = []

    def make_lm(model, forward, compiled):
        built.append((next(model.parameters()).dtype, compiled))
        return TreeLM(model)

    monkeypatch.setattr(dtype_rule, "make_lm", make_lm)
    _, record = dtype_rule.resolve(
        CPU, {"name": "m"}, engine={"compile": "auto", "fp16_weights": "off"}, log=lambda *_: None
    )
    assert built == [(torch.bfloat16, Compiled(packed_from=1)), (torch.float32, Compiled(packed_from=4))]
    assert record["compile"] == "auto" and set(record["probe"]) == {"bfloat16", "float32"}
    assert [p.name.split("-")[1:5] for p in (tmp_path / "costs").glob("dtype-*.json")] == [
        ["m", "auto", "compile", "auto"]
    ]


def test_dtype_probe_times_both_dtypes_in_the_same_passes(monkeypatch):
    """bf16 truly costs 30 ms a token against fp32's 40, but the machine runs 1.5x slow for
    the probe's first 16 forwards. Timed one dtype after the other, every bf16 timing fell in
    that spell (45 ms) and AR would decode in fp32; timed in shared shuffled passes, the
    spell falls on one of each point's first four timings, and the probe reads the true costs."""
    from specbench.costs import profile as profile_mod

    clock = {"now": 0.0, "forwards": 0}
    cost = {"bfloat16": {1: 30.0, 4: 60.0, 16: 200.0, 64: 800.0}, "float32": {1: 40.0, 4: 50.0, 16: 90.0, 64: 300.0}}

    class FakeLM:
        vocab_size, batch_size = 100, 1

        def __init__(self, dtype):
            self.dtype = dtype

        def forward(self, contexts=None, trees=None, nodes=None):
            if trees is not None:
                clock["forwards"] += 1
                clock["now"] += cost[self.dtype][len(nodes[0])] * (1.5 if clock["forwards"] <= 16 else 1.0) / 1000

        def commit(self, paths):
            pass

    monkeypatch.setattr(profile_mod.time, "perf_counter", lambda: clock["now"])
    probe = dtype_rule.measure({dtype: FakeLM(dtype) for dtype in dtype_rule.CANDIDATES})
    assert probe == {d: {str(n): pytest.approx(ms) for n, ms in per.items()} for d, per in cost.items()}
    assert dtype_rule.choose(probe, dtype_rule.ONE_TOKEN) == "bfloat16" and dtype_rule.choose(probe) == "float32"


def test_auto_dtype_follows_the_forward_sizes_the_method_verifies(probe_cache, monkeypatch):
    """AMD EPYC Zen 3 (AVX2 only), measured: bf16 halves a one-token forward and loses from
    16 tokens on. AR (one token a step) decodes in bf16; a drafting method in fp32, with a
    note that plain AR would be faster in bf16; where bf16 wins everywhere, no note."""
    zen3 = {
        "bfloat16": {"1": 37, "4": 90, "16": 317, "60": 1100, "64": 1180},
        "float32": {"1": 67, "4": 129, "16": 151, "60": 300, "64": 315},
    }
    timed = []
    monkeypatch.setattr(dtype_rule, "measure", timed_as(zen3, timed))
    ar = {"drafter": None, "tree": DRAFTING_OFF}
    eagle3 = {  # auto shapes: the sizes up to the widest candidate's
        "drafter": {"_target_": "specbench.drafters.eagle.load"},
        "tree": {"_target_": "specbench.trees.eagle.EagleDynamicTree", **dict.fromkeys(AUTO_EAGLE, "auto")},
    }
    assert dtype_rule.run_sizes(ar) == (1,) and dtype_rule.run_sizes(eagle3) == (1, 4, 16, 60)
    dtype, record = dtype_rule.resolve(CPU, {"name": "m"}, ar, **TIMED)
    assert dtype == "bfloat16" and "note" not in record and timed == [(1,)]  # AR times one-token forwards alone
    dtype, record = dtype_rule.resolve(CPU, {"name": "m"}, eagle3, **TIMED)
    assert timed[-1] == (4, 16, 60)  # the drafting method adds the sizes the cached probe lacks
    assert dtype == "float32" and record["note"].startswith(
        "plain AR would run in bfloat16 here (one-token forward 37 vs 67 ms)"
    )
    native = {"bfloat16": {"1": 26, "4": 27, "16": 34, "64": 57}, "float32": {"1": 40, "4": 44, "16": 60, "64": 120}}
    monkeypatch.setattr(dtype_rule, "measure", timed_as(native, timed))
    dtype, record = dtype_rule.resolve(CPU, {"name": "m"}, None, refresh=True, **TIMED)  # no method: every size
    assert dtype == "bfloat16" and "note" not in record and timed[-1] == dtype_rule.DTYPE_SIZES
    # one-token forwards within 5%: the ISA's wide-forward dtype, and no wider forward is timed
    tie = {
        "bfloat16": {"1": 33.1, "4": 90.7, "16": 276, "64": 1114},
        "float32": {"1": 34.5, "4": 44.4, "16": 85, "64": 294},
    }
    monkeypatch.setattr(dtype_rule, "measure", timed_as(tie, timed))
    for isa, expected in ((["avx2", "fma"], "float32"), (["avx2", "avx512_bf16"], "bfloat16")):
        monkeypatch.setattr(
            dtype_rule, "device_fingerprint", lambda *_, isa=isa: {"device": "cpu", "cpu_model": "test", "isa": isa}
        )
        dtype, record = dtype_rule.resolve(CPU, {"name": "m"}, ar, **TIMED)
        assert dtype == expected and timed[-1] == (1,) and "wider forwards not timed" in record["rule"]


def test_a_cpu_without_native_bf16_settles_the_dtype_without_timing(probe_cache, monkeypatch):
    """No avx512_bf16, AMX or Arm bf16 (or torch capped to AVX2), and fp16 weights on offer:
    fp32, bf16 never timed; with fp16 weights off, or with native bf16, the probe decides."""

    def fail(*_, **__):
        raise AssertionError("timed")

    monkeypatch.setattr(dtype_rule, "measure", fail)
    monkeypatch.setattr(dtype_rule.compile_rule, "has_fp16_weights", lambda: True)
    quiet = {"log": lambda *_: None}
    zen2 = {"device": "cpu", "cpu_model": "test", "isa": ["avx2", "fma"]}
    capped = {
        "device": "cpu",
        "cpu_model": "test",
        "isa": ["avx2", "avx512_bf16"],
        "isa_limits": {"ATEN_CPU_CAPABILITY": "avx2"},
    }
    for fingerprint in (zen2, capped):
        monkeypatch.setattr(dtype_rule, "device_fingerprint", lambda *_, f=fingerprint: f)
        dtype, record = dtype_rule.resolve(CPU, {"name": "m"}, **quiet)  # engine.fp16_weights: auto
        assert dtype == "float32" and record["ar_dtype"] == "float32" and "bf16 not timed" in record["rule"]
        with pytest.raises(AssertionError, match="timed"):
            dtype_rule.resolve(CPU, {"name": "m"}, **TIMED)
    assert dtype_rule.settled_by_isa({"device": "cpu", "isa": ["avx2", "amx_bf16"]}, fp16_weights=True) is None


def test_auto_dtype_of_a_fixed_tree_is_decided_at_its_widest_forward(probe_cache, monkeypatch):
    """An AMX Xeon (Emerald Rapids), measured: fp32 wins the one-token forward, bf16 every
    wider one. TALON at budget 60 verifies 60 tokens a step, so it decodes in bf16 (in fp32 it
    ran at 0.58x AR), noting that plain AR would run in fp32; a method whose tree shape is
    still `auto` stays in the every-size rule's fp32, with bf16 named as the contender that
    calibration prices too (plan.weigh_dtype)."""
    amx = {
        "bfloat16": {"1": 37, "4": 37, "16": 35, "60": 54, "64": 56},
        "float32": {"1": 32, "4": 50, "16": 65, "60": 121, "64": 129},
    }
    timed = []
    monkeypatch.setattr(dtype_rule, "measure", timed_as(amx, timed))
    talon = {
        "drafter": {"_target_": "specbench.drafters.eagle.load"},
        "tree": {"_target_": "specbench.trees.talon.TalonTree", "budget": 60, "mu": 0.03, "top_k": 10},
    }
    assert methods.widest(talon) == 60 and dtype_rule.verified_sizes(talon, methods.widest(talon)) == (60,)
    dtype, record = dtype_rule.resolve(CPU, {"name": "m"}, talon, **TIMED)
    assert dtype == "bfloat16" and timed == [(1, 60)]  # one token too: what plain AR would run in
    assert (
        record["ar_dtype"] == "float32"
        and record["note"].startswith("plain AR would run in float32 here")
        and "contender" not in record
    )
    dtype, record = dtype_rule.resolve(CPU, {"name": "m"}, None, **TIMED)  # every size, as an auto shape's
    assert dtype == "float32" and record["contender"] == "bfloat16" and "note" not in record


def test_dtype_and_shape_are_chosen_together_by_throughput():
    """AMD EPYC Zen 3 (AVX2 only): a one-token bf16 forward costs about 0.6 of an fp32 one
    and a wide one several times more. PLD's gamma 7 is 1.3x fp32 AR there and still slower
    than bf16 AR, so a bf16 shape that pays over bf16 AR wins; when none does, drafting is
    off in bf16 (AR's faster dtype), not on in fp32. With native bf16 nothing changes."""
    options = [{"gamma": g} for g in (1, 2, 3)]
    fp32 = zen3_rows([900.0, 800.0, 770.0], ar_ms=1000.0)  # 1.11-1.30x over fp32 AR
    bf16_pays = zen3_rows([500.0, 700.0, 1400.0], ar_ms=600.0)  # gamma 1: 1.2x over bf16 AR
    chosen = autotune.choose_dtype({"float32": fp32, "bfloat16": bf16_pays}, options, MIN_GAIN)
    assert (
        chosen["dtype"] == "bfloat16"
        and chosen["chosen"] == {"gamma": 1}
        and chosen["predicted_gain"] == pytest.approx(1.2)
    )
    assert chosen["best_gain"] == {"float32": pytest.approx(600 / 770, abs=1e-3), "bfloat16": pytest.approx(1.2)}
    bf16_never = zen3_rows([620.0, 700.0, 1400.0], ar_ms=600.0)
    off = autotune.choose_dtype({"float32": fp32, "bfloat16": bf16_never}, options, MIN_GAIN)
    assert (
        off["dtype"] == "bfloat16"
        and off["chosen"] == DRAFTING_OFF
        and "decoding without drafting in bfloat16" in off["note"]
    )
    native = autotune.choose_dtype(
        {"bfloat16": zen3_rows([300.0, 250.0, 400.0], ar_ms=400.0), "float32": fp32}, options, MIN_GAIN
    )
    assert (
        native["dtype"] == "bfloat16"
        and native["chosen"] == {"gamma": 2}
        and native["predicted_gain"] == pytest.approx(1.6)
    )
    fp32_wins = autotune.choose_dtype(
        {"float32": zen3_rows([450.0, 800.0, 900.0], 1000.0), "bfloat16": bf16_never}, options, MIN_GAIN
    )
    assert (
        fp32_wins["dtype"] == "float32"
        and fp32_wins["chosen"] == {"gamma": 1}
        and fp32_wins["predicted_gain"] == pytest.approx(600 / 450, abs=1e-3)
    )
    # at the threshold the rule reads the gain the record shows: 1.0502x is shown as 1.05, not more than 5% faster
    edge = autotune.choose_dtype(
        {"bfloat16": zen3_rows([600.0 / 1.0502, 700.0, 1400.0], ar_ms=600.0)}, options, MIN_GAIN
    )
    assert edge["chosen"] == DRAFTING_OFF and edge["best_gain"] == {"bfloat16": 1.05}


def test_a_contender_that_cannot_pay_even_at_its_cheapest_forward_is_not_weighed():
    """AMD EPYC Zen 4 (avx512_bf16), measured: bf16 wins forwards of 4 tokens and more, fp32
    the one-token one. CAST's best decoded tau 1.64 at bf16's cheapest forward (27 ms) against
    fp32 AR's 17 ms gives at most 1.03x: bf16 is not profiled and priced; at tau 2 it is; and
    where the other dtype is plain AR's, AR alone may be faster there, so it is always weighed."""
    from specbench.run.plan import contender_ceiling

    zen4 = {"bfloat16": {"1": 32, "4": 27, "16": 39, "64": 91}, "float32": {"1": 17, "4": 31, "16": 70, "64": 226}}
    choice = {"probe": zen4, "ar_dtype": "float32", "contender": "bfloat16"}

    def rows(*taus):
        return {"candidates": [{"tau": t} for t in taus] + [{"tau": 9.0, "measured": False}]}  # a guess: left out

    bound, note = contender_ceiling(rows(1.2, 1.64), choice, "bfloat16")
    assert bound == pytest.approx(1.64 * 17 / 27) and note.startswith("bfloat16 not weighed: at most 1.03x AR")
    assert contender_ceiling(rows(2.0), choice, "bfloat16")[0] == pytest.approx(2.0 * 17 / 27)
    assert contender_ceiling(rows(1.2), {**choice, "ar_dtype": "bfloat16"}, "bfloat16") is None


def test_the_weighed_dtype_is_profiled_only_as_wide_as_the_recorded_steps(monkeypatch):
    """The other dtype of a joint weighing prices the calibration decodes already recorded,
    so its profile is timed up to the widest step they verified (EAGLE-3's pilot: 32 tokens,
    its 60-token candidate left out for its ceiling), not to the method's widest candidate;
    a profile for shapes still to decode goes to that candidate's width."""
    from types import SimpleNamespace

    from specbench.run import plan

    pilot = [{"tree_widths": [[8, 8, 8, 4, 2, 1], [8, 2]]}] * 2
    confirmed = [{"tree_widths": [[1]] * 5}]
    assert plan.widest_step([pilot, confirmed, []]) == 32 and plan.widest_step([[], []]) is None
    asked = []
    monkeypatch.setattr(plan.costs, "ensure_profile", lambda *args, max_n, **kw: asked.append(max_n))
    monkeypatch.setattr(plan.registry, "cache_name", lambda entry, model=None: "m")
    monkeypatch.setattr(plan.methods, "reach", lambda method_cfg: 60)
    setting = SimpleNamespace(
        cfg={"model": {}, "method": {}, "costs": {"repeats": 3, "max_n": 64}},
        samples=[SimpleNamespace(turns=["hi"])],
        tokenizer=lambda text: SimpleNamespace(input_ids=[1, 2]),
        prompts=SimpleNamespace(context_length=2048),
        limits=SimpleNamespace(max_new_tokens=64),
        batch_size=1,
    )
    target = plan.Target("bfloat16", {"device": "cpu"}, None, SimpleNamespace(model=None, kind="LeanTreeLM"), None, "")
    plan.cost_profile(setting, target, None, widest=plan.widest_step([pilot, confirmed]))
    plan.cost_profile(setting, target, None)
    assert asked == [32, 60]


def test_drafting_off_with_no_shape_decoded_runs_in_plain_ars_dtype(monkeypatch):
    """AMD EPYC Zen 3 without fp16 weights, measured: bf16 halves the one-token forward, fp32
    wins from 16 tokens, so a drafting method's tree sizes take fp32. Where every shape's
    ceiling is below AR, nothing is decoded or weighed and the run is plain AR: it decodes in
    bf16, AR's dtype, with the dtype record saying why; where AR's dtype is the run's, as it was."""
    from types import SimpleNamespace

    from specbench.run import plan

    loaded = []
    monkeypatch.setattr(plan.pool, "target", lambda entry, dtype, device: (loaded.append(dtype) or dtype, None))
    monkeypatch.setattr(plan, "forward_of", lambda cfg, model, dtype: plan.Target(dtype, {}, model, None, None, ""))
    setting = SimpleNamespace(cfg={"model": {"name": "m"}, "hardware": {"device": "cpu"}})
    fp32 = plan.Target("float32", {}, "float32", None, None, "")
    off = plan.Decision(DRAFTING_OFF)
    shaped = plan.Shaped(fp32, object(), off, plan.Decision("float32", "rule", {"ar_dtype": "bfloat16"}), None)
    ar = plan.plain_ar_dtype(setting, shaped)
    assert (ar.target.dtype, ar.dtype.value, ar.drafter, ar.tree, loaded) == (
        "bfloat16",
        "bfloat16",
        None,
        off,
        ["bfloat16"],
    )
    assert "plain AR's dtype here, not in float32" in ar.dtype.measured["note"]
    same = plan.Shaped(fp32, None, off, plan.Decision("float32", "rule", {"ar_dtype": "float32"}), None)
    assert plan.plain_ar_dtype(setting, same) is same and loaded == ["bfloat16"]
