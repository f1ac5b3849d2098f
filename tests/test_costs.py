"""Cost profiles and the decisions made from them: round trip and cache key, the dtype
rule, auto tree shapes, the predicted speedup, and the clock's boundary."""

import time

import pytest
import torch

from specbench import costs, methods
from specbench.auto import DRAFTING_OFF, candidates
from specbench.costs import autotune, dtype as dtype_rule, fingerprint, predict as predict_mod
from specbench.costs.profile import VERSION, CostProfile, Curve, context_grid, load, measure_drafter, measure_target, save
from specbench.drafters.prompt_lookup import PromptLookupDrafter
from specbench.drafters.small_lm import SmallLMDrafter
from specbench.engine import loop
from specbench.engine.lm import TreeLM
from specbench.engine.loop import Limits, Method, generate
from specbench.engine.sampling import Sampling
from specbench.errors import ConfigError
from specbench.models import registry
from specbench.replicate.sweep import Sweep, pin
from specbench.trees.autoregressive import Autoregressive
from specbench.trees.chain import Chain
from specbench.verify.standard import StandardVerifier

from conftest import CALIBRATION_TOKENS, MIN_GAIN, VOCAB

AVX2_CPUINFO = "processor\t: 0\nvendor_id\t: AuthenticAMD\ncpu family\t: 25\nmodel\t\t: 1\nmodel name\t: AMD EPYC\nflags\t\t: fpu sse avx avx2 fma bmi2\n"
AMX_CPUINFO = "model name\t: Intel(R) Xeon(R) Platinum 8480+\nflags\t\t: avx2 fma avx512f avx512_bf16 amx_bf16 amx_tile\n"


def flat_curve(ms_at_1: float, per_token: float, max_n: int = 64) -> Curve:
    row = [ms_at_1 + per_token * (n - 1) for n in range(1, max_n + 1)]
    return Curve(contexts=[128], max_n=max_n, ms=[row], spread=[[0.0] * max_n])


def synthetic_profile(per_token: float, drafter_ms: float = 0.0, base: float = 10.0) -> CostProfile:
    key = {"model": "tiny", "dtype": "float32", "fingerprint": {"device": "cpu", "cpu_model": "test"}}
    drafters = {"d": flat_curve(drafter_ms, 0.0)} if drafter_ms else {}
    return CostProfile(key=key, target=flat_curve(base, per_token), drafters=drafters)


def test_fingerprint_names_the_cpu_and_its_matmul_flags():
    avx2 = fingerprint.cpu_info(AVX2_CPUINFO)
    assert avx2["cpu_model"] == "AMD EPYC" and avx2["isa"] == ["avx2", "fma"] and avx2["cpu_family_model"] == "25/1"
    amx = fingerprint.cpu_info(AMX_CPUINFO)
    assert {"avx512_bf16", "amx_bf16"} <= set(amx["isa"])
    here = fingerprint.device_fingerprint("cpu", 2)
    assert here["threads"] == 2 and here["torch"] == torch.__version__ and here["cpu_model"] != "x86_64"
    assert fingerprint.fingerprint_id(here) != fingerprint.fingerprint_id({**here, "threads": 1})


def test_a_cpu_capped_to_avx2_is_another_fingerprint(monkeypatch):
    """ATEN_CPU_CAPABILITY=avx2 ONEDNN_MAX_CPU_ISA=AVX2 makes an avx512_bf16 CPU run bf16 linear
    layers as an AVX2-only one does: its profiles must not be cached as the native CPU's."""
    for name in fingerprint.ISA_LIMITS:
        monkeypatch.delenv(name, raising=False)
    native = fingerprint.device_fingerprint("cpu", 2)
    monkeypatch.setenv("ATEN_CPU_CAPABILITY", "avx2")
    monkeypatch.setenv("ONEDNN_MAX_CPU_ISA", "AVX2")
    capped = fingerprint.device_fingerprint("cpu", 2)
    assert "isa_limits" not in native and capped["isa_limits"] == {"ATEN_CPU_CAPABILITY": "avx2", "ONEDNN_MAX_CPU_ISA": "AVX2"}
    assert fingerprint.fingerprint_id(capped) != fingerprint.fingerprint_id(native)


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
    first = costs.ensure_profile(key, lm, 100, {"pld": PromptLookupDrafter(VOCAB)}, repeats=1, max_n=4, log=lambda *_: None)
    again = costs.ensure_profile(key, lm, 100, {"pld": PromptLookupDrafter(VOCAB)}, repeats=1, max_n=4, log=lambda *_: None)
    assert len(calls) == 1 and again == first and "pld" in again.drafters
    longer = costs.ensure_profile(key, lm, 100, {"pld": PromptLookupDrafter(VOCAB)}, repeats=1, max_n=6, log=lambda *_: None)
    assert longer.target.max_n == 6 and longer.drafters["pld"].max_n == 6  # a shorter cached curve is measured again
    assert costs.profile_path(key).with_suffix(".png").is_file()


def test_a_profile_run_that_needs_longer_contexts_times_only_those(tmp_path, monkeypatch, target):
    """A cached curve is extended, never thrown away: a run reaching 600 tokens times the
    512 and 2048 rows the cache lacks, and a run adding a drafter times only the drafter."""
    monkeypatch.setenv("SPECBENCH_CACHE", str(tmp_path))
    contexts = []
    real = costs.measure_target
    monkeypatch.setattr(costs, "measure_target", lambda lm, cs, *a, **k: contexts.append(list(cs)) or real(lm, cs, *a, **k))
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


def busy(others: float):
    """contention.watch as it reads a machine where others keep `others` cores busy."""
    from contextlib import contextmanager

    from specbench.costs import contention

    @contextmanager
    def watch():
        yield contention.Usage(others=others)

    return watch


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
    monkeypatch.setattr(contention, "idle_now", pytest.fail)  # nothing this run needs is contended: no look, no refining
    again = costs.ensure_profile(key, TreeLM(target), 100, repeats=1, max_n=4, log=lambda *_: None)
    assert len(calls) == 2 and again.contended_for(None) == 0.0 and again.contended_for("other") == 1.4


def test_a_probe_times_only_the_parts_a_run_needs_and_keeps_a_contended_record(tmp_path, monkeypatch):
    from specbench.costs import contention

    monkeypatch.setenv("SPECBENCH_CONTENDED_CORES", "0.25")
    monkeypatch.setattr(contention, "watch", busy(1.4))
    monkeypatch.setattr(contention, "idle_now", lambda: False)
    timed = []

    def measure(parts):
        timed.append(parts)
        return {"probe": {"plain": {p: 1.0 for p in parts}}}

    path, quiet = tmp_path / "probe.json", {"log": lambda *_: None}
    record, seconds = fingerprint.cached_probe(path, {"cpu": "x"}, measure, ["1"], **quiet)
    assert record["contended_cores"] == 1.4 and path.is_file() and seconds is not None
    record, seconds = fingerprint.cached_probe(path, {"cpu": "x"}, measure, ["1", "16"], **quiet)
    assert timed == [["1"], ["16"]] and record["probe"]["plain"] == {"1": 1.0, "16": 1.0}  # merged, not replaced
    assert fingerprint.cached_probe(path, {"cpu": "x"}, measure, ["16"], **quiet)[1] is None and len(timed) == 2
    monkeypatch.setattr(contention, "watch", busy(0.0))
    monkeypatch.setattr(contention, "idle_now", lambda: True)
    record, _ = fingerprint.cached_probe(path, {"cpu": "x"}, measure, ["16"], **quiet)
    assert timed[-1] == ["1", "16"] and record["contended_cores"] == 0.0  # refined: every part it held, timed again
    fingerprint.cached_probe(path, {"cpu": "y"}, measure, ["16"], **quiet)
    assert timed[-1] == ["16"]  # another machine's record is not this one's


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


@pytest.mark.parametrize("method, parts", [
    ({"drafter": None, "tree": DRAFTING_OFF}, ["n=1"]),  # AR: one-token forwards, no drafter projections
    ({"drafter": {"_target_": "specbench.drafters.prompt_lookup.load"}, "tree": {"_target_": "specbench.trees.chain.Chain"}},
     [f"n={n}" for n in (1, 2, 4, 8, 16, 64)]),  # PLD drafts without layers: no int8 projections to time
    ({"drafter": {"_target_": "specbench.drafters.eagle3.load"}, "tree": {"_target_": "specbench.trees.eagle.EagleDynamicTree"}},
     [*(f"n={n}" for n in (1, 2, 4, 8, 16, 64)), "int8"]),
])
def test_the_compile_probe_times_what_the_method_runs(method, parts, tmp_path, monkeypatch):
    from specbench.costs import compile as compile_rule

    from conftest import tiny_llama

    monkeypatch.setenv("SPECBENCH_CACHE", str(tmp_path))
    monkeypatch.setattr(compile_rule, "measure", lambda model, forward, sizes, **_: {"plain": {str(n): 1.0 for n in sizes}})
    monkeypatch.setattr(compile_rule, "measure_int8", lambda model, packed: {k: {str(n): 1.0 for n in compile_rule.INT8_ROWS} for k in ("float", "int8")})
    model = tiny_llama(0)
    model.config.save_pretrained(tmp_path / "tiny")  # caches are named by the weights' files: here config.json alone
    cfg = {"model": {"name": "tiny", "path": str(tmp_path / "tiny")}, "hardware": {"dtype": "float32", "device": "cpu", "threads": 1}, "engine": {}, "method": method}
    _, record = costs.target_lm(model, cfg, cfg["hardware"], drafter_layers=methods.drafter_layers(method))
    assert record["parts"] == parts


def test_runs_in_one_process_share_the_targets_lm_and_let_a_replaced_model_go():
    """A group's runs (specbench.group) ask for the same model, forward and compile choice:
    they get one LM, so the packed weights are built once, and a decode finds nothing of an
    earlier one; another compile choice gets its own LM; a new model drops the old model's."""
    from conftest import tiny_llama
    from specbench.engine.kernels import Compiled

    model, other = tiny_llama(0), tiny_llama(1)
    first = costs.shared_lm(model, "auto", Compiled())
    assert costs.shared_lm(model, "auto", Compiled()) is first and first.model is model
    packed = costs.shared_lm(model, "auto", Compiled(packed_from=1))
    assert packed is not first and costs.shared_lm(model, "auto", Compiled(packed_from=1)) is packed
    first.features = [torch.zeros(3, 8)]  # what an EAGLE-3 run's last forward left
    first.reset(2)  # the next decode, perhaps another run's whose drafter reads no features
    assert first.features is None
    replaced = costs.shared_lm(other, "auto", Compiled())
    assert replaced.model is other and all(lm.model is other for lm in costs._built_lms.values())


def test_contention_counts_busy_cpu_time_outside_this_process(monkeypatch):
    from specbench.costs import contention

    clocks = {"busy": iter([100.0, 103.0]), "own": iter([10.0, 11.0]), "wall": iter([5.0, 7.0])}
    monkeypatch.setattr(contention, "_busy_seconds", lambda: next(clocks["busy"]))
    monkeypatch.setattr(contention.time, "process_time", lambda: next(clocks["own"]))
    monkeypatch.setattr(contention.time, "perf_counter", lambda: next(clocks["wall"]))
    with contention.watch() as usage:
        pass
    assert usage.others == (3.0 - 1.0) / 2.0  # 3 busy CPU seconds, 1 of them ours, over 2 s
    monkeypatch.setenv("SPECBENCH_CONTENDED_CORES", "0.25")
    assert contention.contended(1.0) and not contention.contended(0.1) and not contention.contended(None)


def test_measurements_cover_every_n_and_leave_the_model_usable(target, draft, prompts):
    lm = TreeLM(target)
    curve = measure_target(lm, [8, 24], max_n=5, repeats=1)
    assert [len(r) for r in curve.ms] == [5, 5] and all(v > 0 for r in curve.ms for v in r)
    drafter_curve = measure_drafter(SmallLMDrafter(draft, VOCAB), lm, [8], max_n=3, repeats=1)
    assert len(drafter_curve.ms[0]) == 3
    method = Method(Autoregressive(), StandardVerifier())
    limits = Limits(max_new_tokens=12)
    assert generate(lm, method, prompts[0], Sampling(), limits).ids == generate(TreeLM(target), method, prompts[0], Sampling(), limits).ids


def test_dtype_rule():
    avx2 = {"bfloat16": {"1": 42, "4": 80, "16": 259, "64": 947}, "float32": {"1": 57, "4": 70, "16": 128, "64": 266}}
    native = {"bfloat16": {"1": 26, "4": 27, "16": 34, "64": 57}, "float32": {"1": 40, "4": 44, "16": 60, "64": 120}}
    assert dtype_rule.choose(avx2) == "float32"
    assert dtype_rule.choose(native) == "bfloat16"
    assert dtype_rule.resolve({"dtype": "float32"}, "m", None, None) == ("float32", None)
    # one-token forwards within 5% are a tie, decided by the wider sizes (AR then decodes as drafting does)
    zen3_fp16_weights = {"bfloat16": {"1": 33.1, "4": 90.7, "16": 276, "64": 1114}, "float32": {"1": 34.5, "4": 44.4, "16": 85, "64": 294}}
    assert dtype_rule.choose(zen3_fp16_weights, dtype_rule.ONE_TOKEN) == "float32"
    assert dtype_rule.choose(avx2, dtype_rule.ONE_TOKEN) == "bfloat16" and dtype_rule.choose(native, dtype_rule.ONE_TOKEN) == "bfloat16"


def test_dtype_probe_times_each_dtype_as_its_compile_choice_runs_it(monkeypatch, tmp_path):
    """Packing can help one dtype much more than the other, so each dtype's forward is timed
    packed or not as engine.compile chooses for that dtype's model; the cached probe names the
    compile mode it was timed under."""
    from specbench.engine.kernels import Compiled

    from conftest import tiny_llama

    built = []

    def make_lm(model, forward, compiled):
        built.append((next(model.parameters()).dtype, compiled))
        return TreeLM(model)

    monkeypatch.setattr(dtype_rule, "make_lm", make_lm)
    choice = {torch.bfloat16: Compiled(packed_from=1), torch.float32: Compiled(packed_from=4)}
    _, record = dtype_rule.resolve({"dtype": "auto", "device": "cpu", "threads": 2}, "m", lambda d: tiny_llama(3).to(getattr(torch, d)),
                                   tmp_path, log=lambda *_: None, compile_choice=lambda m, sizes: choice[next(m.parameters()).dtype], compile_mode="auto")
    assert built == [(torch.bfloat16, Compiled(packed_from=1)), (torch.float32, Compiled(packed_from=4))]
    assert record["compile"] == "auto" and set(record["probe"]) == {"bfloat16", "float32"}
    assert [p.name.split("-")[1:5] for p in tmp_path.glob("dtype-*.json")] == [["m", "auto", "compile", "auto"]]


def test_dtype_probe_times_both_dtypes_in_the_same_passes(monkeypatch):
    """bf16 truly costs 30 ms a token against fp32's 40, but the machine runs 1.5x slow for
    the probe's first 16 forwards. Timed one dtype after the other, every bf16 timing fell in
    that spell (45 ms) and AR would decode in fp32; timed in shared shuffled passes, each
    point gets at most two slow timings of five, and the probe reads the true costs."""
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
    monkeypatch.setattr(dtype_rule, "make_lm", lambda model, forward, compiled: FakeLM(model))
    probe = dtype_rule.measure(lambda dtype: dtype)
    assert probe == {d: {str(n): pytest.approx(ms) for n, ms in per.items()} for d, per in cost.items()}
    assert dtype_rule.choose(probe, dtype_rule.ONE_TOKEN) == "bfloat16" and dtype_rule.choose(probe) == "float32"


def test_auto_dtype_follows_the_forward_sizes_the_method_verifies(tmp_path, monkeypatch):
    """AMD EPYC Zen 3 (AVX2 only), measured: bf16 halves a one-token forward and loses from
    16 tokens on. AR (one token a step) decodes in bf16; a drafting method in fp32, with a
    note that plain AR would be faster in bf16; where bf16 wins everywhere, no note."""
    zen3 = {"bfloat16": {"1": 37, "4": 90, "16": 317, "64": 1180}, "float32": {"1": 67, "4": 129, "16": 151, "64": 315}}
    timed = []

    def probe(table):
        def measure(load_model, sizes, forward="auto", **_):
            timed.append(sizes)
            return {d: {str(n): per[str(n)] for n in sizes} for d, per in table.items()}
        return measure

    monkeypatch.setattr(dtype_rule, "measure", probe(zen3))
    ar = {"drafter": None, "tree": DRAFTING_OFF}
    eagle3 = {"drafter": {"_target_": "specbench.drafters.eagle.load"}, "tree": {"_target_": "specbench.trees.eagle.EagleDynamicTree"}}
    assert dtype_rule.verified_sizes(ar) == (1,) and dtype_rule.verified_sizes(eagle3) == dtype_rule.PROBE_SIZES
    cpu = {"dtype": "auto", "device": "cpu", "threads": 2}
    quiet = {"log": lambda *_: None}
    dtype, record = dtype_rule.resolve(cpu, "m", None, tmp_path, sizes=dtype_rule.verified_sizes(ar), **quiet)
    assert dtype == "bfloat16" and "note" not in record and timed == [(1,)]  # AR times one-token forwards alone
    dtype, record = dtype_rule.resolve(cpu, "m", None, tmp_path, sizes=dtype_rule.verified_sizes(eagle3), **quiet)
    assert timed[-1] == (4, 16, 64)  # the drafting method adds the sizes the cached probe lacks
    assert dtype == "float32" and record["note"].startswith("plain AR would run in bfloat16 here (one-token forward 37 vs 67 ms)")
    native = tmp_path / "native"
    monkeypatch.setattr(dtype_rule, "measure", probe({"bfloat16": {"1": 26, "4": 27, "16": 34, "64": 57}, "float32": {"1": 40, "4": 44, "16": 60, "64": 120}}))
    dtype, record = dtype_rule.resolve(cpu, "m", None, native, sizes=dtype_rule.PROBE_SIZES, **quiet)
    assert dtype == "bfloat16" and "note" not in record
    tie = tmp_path / "tie"  # one-token forwards within 5%: AR's dtype is the wider sizes', so those are timed too
    monkeypatch.setattr(dtype_rule, "measure", probe({"bfloat16": {"1": 33.1, "4": 90.7, "16": 276, "64": 1114}, "float32": {"1": 34.5, "4": 44.4, "16": 85, "64": 294}}))
    dtype, _ = dtype_rule.resolve(cpu, "m", None, tie, sizes=dtype_rule.ONE_TOKEN, **quiet)
    assert dtype == "float32" and timed[-2:] == [(1,), (4, 16, 64)]


def test_auto_dtype_of_a_fixed_tree_is_decided_at_its_widest_forward(tmp_path, monkeypatch):
    """An AMX Xeon (Emerald Rapids), measured: fp32 wins the one-token forward, bf16 every
    wider one. TALON at budget 60 verifies 60 tokens a step, so it decodes in bf16 (in fp32 it
    ran at 0.58x AR), noting that plain AR would run in fp32; a method whose tree shape is
    still `auto` stays in the every-size rule's fp32, with bf16 named as the contender that
    calibration prices too (plan.weigh_dtype)."""
    amx = {"bfloat16": {"1": 37, "4": 37, "16": 35, "60": 54, "64": 56}, "float32": {"1": 32, "4": 50, "16": 65, "60": 121, "64": 129}}
    timed = []

    def measure(load_model, sizes, forward="auto", **_):
        timed.append(sizes)
        return {d: {str(n): per[str(n)] for n in sizes} for d, per in amx.items()}

    monkeypatch.setattr(dtype_rule, "measure", measure)
    talon = {"drafter": {"_target_": "specbench.drafters.eagle.load"},
             "tree": {"_target_": "specbench.trees.talon.TalonTree", "budget": 60, "mu": 0.03, "top_k": 10}}
    assert methods.widest(talon) == 60 and dtype_rule.verified_sizes(talon, methods.widest(talon)) == (60,)
    cpu, quiet = {"dtype": "auto", "device": "cpu", "threads": 2}, {"log": lambda *_: None}
    dtype, record = dtype_rule.resolve(cpu, "m", None, tmp_path, sizes=(60,), **quiet)
    assert dtype == "bfloat16" and timed == [(1, 60)]  # one token too: what plain AR would run in
    assert record["ar_dtype"] == "float32" and record["note"].startswith("plain AR would run in float32 here") and "contender" not in record
    dtype, record = dtype_rule.resolve(cpu, "m", None, tmp_path, sizes=dtype_rule.PROBE_SIZES, **quiet)
    assert dtype == "float32" and record["contender"] == "bfloat16" and "note" not in record


@pytest.mark.parametrize("tree, width", [
    ({"_target_": "specbench.trees.talon.TalonTree", "budget": 48}, 48),
    ({"_target_": "specbench.trees.eagle.EagleDynamicTree", "top_k": 10, "depth": 6, "total_tokens": 50}, 50),
    ({"_target_": "specbench.trees.cast.CastTree", "total_tokens": 72, "c1": 3, "c2": 3, "c3": 3}, 72),
    ({"_target_": "specbench.trees.chain.Chain", "gamma": 7}, 8),
    ({"_target_": "specbench.trees.static.StaticTree", "choices": [[0], [1], [0, 0]]}, 4),
    ({"_target_": "specbench.trees.opt.OptTree", "nodes": 60}, 61),
    ({"_target_": "specbench.trees.eagle.EagleDynamicTree", "top_k": 10, "depth": 6, "total_tokens": "auto"}, None),
    ({"_target_": "specbench.trees.lookahead.LookaheadTree", "window": 4, "ngram": 3, "candidates": 2}, None),
])
def test_a_tree_policy_names_the_widest_forward_its_settings_fix(tree, width):
    """Root included, as the verification forward feeds it; None where the draft decides
    (Lookahead's n-gram pool) or calibration still will (`auto` keys)."""
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


def test_predicted_speedup_from_counters():
    # 3 steps of a 4-node chain accepting 3, 2 and 4 tokens after the prefill token
    run = {"prompt_tokens": [50], "turn_ids": [list(range(10))], "accept_lengths": [3, 2, 4],
           "tree_widths": [[1, 1, 1]] * 3, "step_draft_forwards": [3] * 3, "seconds": 1.0, "prefill_seconds": 0.1}
    flat = predict_mod.predict([run], synthetic_profile(0.0), None)
    assert flat["predicted_decode_speedup"] == pytest.approx(9 / 3)  # AR: 9 steps of 10 ms; method: 3
    # the 50-token prefill (10 ms here) is in both, as the measured speedup counts it
    assert flat["predicted_prefill_seconds"] == pytest.approx(0.010) and flat["predicted_speedup"] == pytest.approx(100 / 40)
    costly = predict_mod.predict([run], synthetic_profile(10.0, drafter_ms=2.0), "d")
    assert costly["predicted_decode_speedup"] == pytest.approx(90 / (3 * (40 + 3 * 2)))
    assert costly["predicted_prefill_seconds"] == pytest.approx(0.500) and costly["predicted_speedup"] == pytest.approx(590 / 638)
    # tree work calibrated at 2 ms + 1 ms a node: 6 ms more on each 4-node step
    with_tree = predict_mod.predict([run], synthetic_profile(10.0, drafter_ms=2.0), "d", {"ms": 2.0, "ms_per_node": 1.0})
    assert with_tree["predicted_decode_speedup"] == pytest.approx(90 / (3 * (40 + 3 * 2 + 6)))
    assert with_tree["tree_overhead_ms_per_step"] == pytest.approx(6.0) and costly["tree_overhead_ms_per_step"] is None


def test_tree_overhead_is_a_line_in_tree_size_over_the_calibrated_shapes():
    shapes = [{"mean_tree_size": n, "unpriced_ms_per_step": 1.0 + 0.5 * n} for n in (2, 4, 8)]
    assert autotune.overhead_line(shapes) == {"ms": pytest.approx(1.0), "ms_per_node": pytest.approx(0.5), "ms_per_draft": 0.0}
    one = [{"mean_tree_size": 12.0, "delta": 3.0, "unpriced_ms_per_step": 7.0}]
    assert autotune.overhead_line(one) == {"ms": 7.0, "ms_per_node": 0.0, "ms_per_draft": 0.0}  # a fixed shape: a constant
    assert predict_mod.tree_step_ms({"ms": -3.0, "ms_per_node": 0.5}, 2.0, 1.0) == 0.0  # a fit never prices work below zero


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
    shapes = [{"mean_tree_size": g + 1.0, "delta": float(g), "unpriced_ms_per_step": 0.5 + 0.4 * (g + 1)} for g in range(1, 7)]
    assert autotune.overhead_line(shapes) == {"ms": pytest.approx(0.5), "ms_per_node": pytest.approx(0.4), "ms_per_draft": 0.0}


def test_one_contended_timing_does_not_tilt_the_tree_overhead_line():
    """A shape timed while another job ran (here 3x its true cost) leaves the line of the
    other shapes as it is: least squares would have moved both slope and intercept."""
    shapes = [{"mean_tree_size": n, "unpriced_ms_per_step": 2.0 + 0.25 * n} for n in (2, 4, 6, 8, 12, 16)]
    shapes[1]["unpriced_ms_per_step"] *= 3
    assert autotune.overhead_line(shapes) == {"ms": pytest.approx(2.0), "ms_per_node": pytest.approx(0.25), "ms_per_draft": 0.0}


def tune_on(profile, target, draft, prompts, tmp_path, batch_size=1):
    cfg = {"_target_": "specbench.trees.chain.Chain", "gamma": "auto"}
    drafter = SmallLMDrafter(draft, VOCAB)
    setup = autotune.Calibration(lambda: prompts[:batch_size], "test-prompts", Sampling(), frozenset(), tmp_path, "d", weights="",
                                 max_new_tokens=CALIBRATION_TOKENS, batch_size=batch_size, min_gain=MIN_GAIN, log=lambda *_: None)
    return autotune.tune(cfg, drafter, StandardVerifier(), TreeLM(target), profile, setup)


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
    row_a = {**common, "prompt_tokens": [10], "turn_ids": [list(range(7))], "accept_lengths": [3, 3],
             "tree_widths": [[1, 1], [1, 1, 1]], "step_draft_forwards": [2, 3]}
    row_b = {**common, "prompt_tokens": [20], "turn_ids": [list(range(4))], "accept_lengths": [3],
             "tree_widths": [[2, 2]], "step_draft_forwards": [2], "seconds": 0.4}
    forecast = predict_mod.predict([row_a, row_b], profile, "d")
    assert forecast["steps"] == 2 and forecast["predicted_decode_speedup"] == pytest.approx(123 / 57)
    assert forecast["predicted_speedup"] == pytest.approx((123 + 53) / (57 + 53))
    assert forecast["measured_decode_seconds"] == pytest.approx(1.0)  # the batch's time, once


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
    assert autotune.describe(record).endswith(f"tau {best['tau']:.2f} where {best['tau'] / best['predicted_speedup']:.2f} breaks even)")
    # flat verification and nearly free drafting: a longer chain wins, predicted faster than AR
    flat = synthetic_profile(per_token=0.0, drafter_ms=0.01, base=1000.0)
    chosen, record = tune_on(flat, target, draft, prompts, tmp_path / "b")
    assert record["predicted_speedup"] >= 1.0 and chosen["gamma"] > 1 and "note" not in record
    chosen_again, _ = tune_on(flat, target, draft, prompts, tmp_path / "b")
    assert chosen_again == chosen  # cached


def test_a_policy_with_new_candidates_chooses_again(target, draft, prompts, tmp_path, monkeypatch):
    """A cached choice was made among the policy's candidates of its day: once the grid
    changes (a new threshold pair for CAST, say), the choice is measured again."""
    from specbench.trees.chain import Chain

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
    key = (tmp_path, synthetic_profile(0.0), "d", {"gamma": "auto"}, Sampling(), ["p", 8], autotune.verifier_id(StandardVerifier()))
    assert autotune.cache_file(*key, before) != autotune.cache_file(*key, after)


def test_drafting_off_decodes_as_ar_without_running_the_drafter(target, draft, prompts):
    method_cfg = {"drafter": {"_target_": "specbench.drafters.prompt_lookup.load"},
                  "tree": {"_target_": "specbench.trees.chain.Chain", "gamma": "auto"},
                  "verifier": {"_target_": "specbench.verify.standard.StandardVerifier"}}
    with pytest.raises(ConfigError, match="^method.tree: gamma = auto is chosen by a run from measured costs; set a value here$"):
        methods.assemble(method_cfg, target, {})
    method = methods.assemble({**method_cfg, "tree": DRAFTING_OFF}, target, {})
    assert method.drafter is None
    ar = generate(TreeLM(target), Method(Autoregressive(), StandardVerifier()), prompts[2], Sampling(), Limits(20))
    off = generate(TreeLM(target), method, prompts[2], Sampling(), Limits(20))
    assert off.ids == ar.ids and off.draft_forwards == 0 and set(off.accept_lengths) == {1}


def test_bookkeeping_is_outside_the_clock(target, draft, prompts, monkeypatch):
    lm = TreeLM(target)
    method = Method(Chain(3), StandardVerifier(), SmallLMDrafter(draft, VOCAB))
    limits = Limits(max_new_tokens=24)
    real_nll = loop._nll_rows

    def slow_nll(*args):
        time.sleep(0.05)
        return real_nll(*args)

    monkeypatch.setattr(loop, "_nll_rows", slow_nll)
    start = time.perf_counter()
    out = generate(lm, method, prompts[1], Sampling(), limits, on_step=lambda n, rows: time.sleep(0.05))
    wall = time.perf_counter() - start
    slept = 0.05 * (1 + 2 * out.target_forwards)
    assert wall >= slept and out.seconds < wall - 0.9 * slept


def test_runners_pin_paper_shapes_unless_a_sweep_sets_them():
    defaults = {"eagle3": {"config.method.tree.depth": 8, "config.method.tree.total_tokens": 60}, "talon": {"config.method.tree.budget": 60}}
    pinned = pin([Sweep("t", ["method=talon,eagle3", "method.tree.total_tokens=32"])], defaults)
    assert [s.overrides for s in pinned] == [
        ["method=talon", "method.tree.total_tokens=32", "method.tree.budget=60"],
        ["method=eagle3", "method.tree.total_tokens=32", "method.tree.depth=8"],
    ]


def test_profile_command_prints_the_curves_and_rejects_bad_input():
    import sys

    from conftest import run_in_process

    args = [sys.executable, "-m", "specbench.costs", "method=pld", "hardware=cpu-fp32", "costs.max_n=4", "costs.repeats=1"]
    result = run_in_process(args)
    assert result.returncode == 0, result.stderr[-2000:]
    assert "target c=" in result.stdout and "n=4" in result.stdout and "prompt_lookup" in result.stdout
    assert "tau a step must reach against AR in" in result.stdout and "1.3x: n=2 " in result.stdout
    bad = run_in_process([sys.executable, "-m", "specbench.costs", "method=nope"])
    assert bad.returncode == 2 and bad.stderr.strip().count("\n") == 0 and "method" in bad.stderr


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


def zen3_rows(method_ms: list[float], ar_ms: float) -> list[dict]:
    return [{"tree": {"gamma": g + 1}, "ar_ms": ar_ms, "method_ms": m, "predicted_speedup": ar_ms / m} for g, m in enumerate(method_ms)]


def test_dtype_and_shape_are_chosen_together_by_throughput():
    """AMD EPYC Zen 3 (AVX2 only): a one-token bf16 forward costs about 0.6 of an fp32 one
    and a wide one several times more. PLD's gamma 7 is 1.3x fp32 AR there and still slower
    than bf16 AR, so a bf16 shape that pays over bf16 AR wins; when none does, drafting is
    off in bf16 (AR's faster dtype), not on in fp32. With native bf16 nothing changes."""
    options = [{"gamma": g} for g in (1, 2, 3)]
    fp32 = zen3_rows([900.0, 800.0, 770.0], ar_ms=1000.0)  # 1.11-1.30x over fp32 AR
    bf16_pays = zen3_rows([500.0, 700.0, 1400.0], ar_ms=600.0)  # gamma 1: 1.2x over bf16 AR
    chosen = autotune.choose_dtype({"float32": fp32, "bfloat16": bf16_pays}, options, MIN_GAIN)
    assert chosen["dtype"] == "bfloat16" and chosen["chosen"] == {"gamma": 1} and chosen["predicted_gain"] == pytest.approx(1.2)
    assert chosen["best_gain"] == {"float32": pytest.approx(600 / 770, abs=1e-3), "bfloat16": pytest.approx(1.2)}
    bf16_never = zen3_rows([620.0, 700.0, 1400.0], ar_ms=600.0)
    off = autotune.choose_dtype({"float32": fp32, "bfloat16": bf16_never}, options, MIN_GAIN)
    assert off["dtype"] == "bfloat16" and off["chosen"] == DRAFTING_OFF and "decoding without drafting in bfloat16" in off["note"]
    native = autotune.choose_dtype({"bfloat16": zen3_rows([300.0, 250.0, 400.0], ar_ms=400.0), "float32": fp32}, options, MIN_GAIN)
    assert native["dtype"] == "bfloat16" and native["chosen"] == {"gamma": 2} and native["predicted_gain"] == pytest.approx(1.6)
    fp32_wins = autotune.choose_dtype({"float32": zen3_rows([450.0, 800.0, 900.0], 1000.0), "bfloat16": bf16_never}, options, MIN_GAIN)
    assert fp32_wins["dtype"] == "float32" and fp32_wins["chosen"] == {"gamma": 1} and fp32_wins["predicted_gain"] == pytest.approx(600 / 450, abs=1e-3)
    # at the threshold the rule reads the gain the record shows: 1.0502x is shown as 1.05, not more than 5% faster
    edge = autotune.choose_dtype({"bfloat16": zen3_rows([600.0 / 1.0502, 700.0, 1400.0], ar_ms=600.0)}, options, MIN_GAIN)
    assert edge["chosen"] == DRAFTING_OFF and edge["best_gain"] == {"bfloat16": 1.05}


def test_a_calibration_is_priced_again_under_another_profile(target, draft, prompts, tmp_path):
    """The recorded calibration decodes priced under the profile they were decoded with give
    the record's own predictions back, exactly (both charge tree work step by step); under a profile whose wide forwards cost more, every
    shape is predicted slower and AR alike."""
    flat = synthetic_profile(per_token=0.0, drafter_ms=0.01, base=1000.0)
    _, record = tune_on(flat, target, draft, prompts, tmp_path)
    again = autotune.reprice(record, flat, "d")
    assert [r["tree"] for r in again] == [c["tree"] for c in record["candidates"]]
    assert [{k: r[k] for k in ("predicted_speedup", "ar_ms", "method_ms")} for r in record["candidates"]] == [
        {k: r[k] for k in ("predicted_speedup", "ar_ms", "method_ms")} for r in again]  # priced alike, to the last digit kept
    steep = autotune.reprice(record, synthetic_profile(per_token=300.0, drafter_ms=0.01, base=1000.0), "d")
    assert all(s["predicted_speedup"] < f["predicted_speedup"] for s, f in zip(steep, again))
    assert [s["ar_ms"] for s in steep] == pytest.approx([f["ar_ms"] for f in again])


def test_unpriced_work_is_read_at_the_profiles_pace():
    """A 4-node chain, 3 steps: priced 10 ms a verification + 3 x 1 ms of drafts; at the
    profile's pace the decode took 1 ms more a step (tree work). Timed while the machine ran
    1.5x slower, the same decode is 63 ms with 45 ms of verification: the tree work stays
    1 ms a step, where reading the decode as timed charged the slowdown to it (8 ms)."""
    profile = synthetic_profile(per_token=0.0, drafter_ms=1.0)
    run = {"prompt_tokens": [50], "turn_ids": [list(range(10))], "accept_lengths": [3, 2, 4],
           "tree_widths": [[1, 1, 1]] * 3, "step_draft_forwards": [3] * 3, "prefill_seconds": 0.01}
    slow = run | {"seconds": 0.01 + 1.5 * 0.042, "verify_seconds": 1.5 * 0.030}

    def unpriced(r):
        return autotune.price([({"gamma": 3}, [r], predict_mod.predict([r], profile, "d"))], ["gamma"], profile, "d")[0]["unpriced_ms_per_step"]

    assert unpriced(slow) == pytest.approx(1.0)
    assert unpriced({k: v for k, v in slow.items() if k != "verify_seconds"}) == pytest.approx(8.0)  # a record that did not time them
    wild = run | {"seconds": 0.01 + 0.150, "verify_seconds": 10 * 0.030}  # 10x the profile's price: not this machine's profile
    assert unpriced(wild) == pytest.approx((150 / predict_mod.MAX_PACE - 39) / 3)
    # the summary's engine share reads the forwards at the same pace: 1 ms a step of 21, not 8
    assert predict_mod.predict([slow], profile, "d")["engine_overhead_share"] == pytest.approx(1 - 1.5 * 39 / 63)


def test_the_loop_times_its_verification_forwards(target, draft, prompts):
    method = Method(Chain(2), StandardVerifier(), SmallLMDrafter(draft, VOCAB))
    out = generate(TreeLM(target), method, prompts[0], Sampling(), Limits(max_new_tokens=8))
    assert 0 < out.verify_seconds < out.batch_seconds - out.prefill_seconds


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


def test_calibration_prompts_are_english_chat(monkeypatch):
    from specbench.data import calibration, sharegpt

    english = ["Can you coach me through each of these points?", "Tell me about the negatives of farming meat"]
    other = ["estoy en 6to semestre de mecatronica, necesito un nombre para mi equipo, asi que quiero",
             "我需要建立一個powerpoint你幫我摘要一篇內容分配每一頁的標題和應該要有的內容，可以嗎？謝謝你的幫忙",
             "SELECT id, name, email FROM users WHERE active ORDER BY name"]  # no English function words
    monkeypatch.setattr(sharegpt, "conversations", lambda: [{"conversations": [{"from": "human", "value": t}]} for t in other + english])
    monkeypatch.setattr(calibration, "evaluation_index", lambda: type("Index", (), {"overlaps": lambda self, text: False})())
    monkeypatch.setattr(calibration, "chat_prompt", lambda tokenizer, messages: messages[0]["content"])
    assert sorted(calibration.calibration_prompts(None, count=2)) == sorted(english)


@pytest.mark.parametrize("kind", ["code", "math"])
def test_code_and_math_calibration_prompts_are_the_held_out_ones(monkeypatch, kind):
    """Code and math datasets calibrate on the prompts of their corpus source whose answers the
    committed corpus holds out of every drafter's training text, asked as HumanEval and GSM8K
    ask; a batch bigger than the set repeats prompts; the cache key names the kind."""
    import json

    from specbench.data import calibration
    from specbench.data.benchmarks import GSM8K_INSTRUCTION, HUMANEVAL_INSTRUCTION
    from specbench.data.prompt_sources import COMMITTED_PACKS, prompt_key, source_texts

    source, name = calibration.HELD_OUT_SOURCES[kind]
    monkeypatch.setattr(calibration, "chat_prompt", lambda tokenizer, messages: messages[0]["content"])
    held_out = set(json.loads((COMMITTED_PACKS / name).read_text()))
    prompts = calibration.calibration_prompts(None, count=6, kind=kind)
    instruction = HUMANEVAL_INSTRUCTION if kind == "code" else GSM8K_INSTRUCTION
    assert len(set(prompts)) == 6 and all(prompt_key(p) in held_out and p.startswith(instruction) for p in prompts)
    assert calibration.calibration_prompts(None, count=6, kind=kind) == prompts  # seeded
    every = calibration.calibration_prompts(None, count=len(held_out) + 3, kind=kind)
    assert len(every) == len(held_out) + 3 and len(set(every)) == len(held_out)
    assert {prompt_key(p) for p in source_texts(source)} >= held_out
    assert calibration.calibration_id(6, kind=kind) != calibration.calibration_id(6)
