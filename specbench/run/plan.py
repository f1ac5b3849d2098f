"""What a run will use, decided from its config and this machine before it decodes: the
dtype, how the target's forward runs, the tree shape and the cost profile, with why each
was chosen. Deciding measures what it must (dtype and compile probes, cost profiles,
calibration decodes; each cached per machine), so `decide` returns the plan together with
the parts it built for it; the Runner only executes them."""

from __future__ import annotations

import json
from dataclasses import dataclass

import torch

from specbench import costs
from specbench.costs import autotune
from specbench.costs import compile as compile_rule
from specbench.costs.fingerprint import device_fingerprint
from specbench.costs.profile import CostProfile, ProfileCosts
from specbench.data.calibration import CALIBRATION_KINDS, calibration_id, calibration_prompts
from specbench.data.chat import TREE_MARGIN, PromptFormat, stop_token_ids
from specbench.data.questions import Sample
from specbench.engine import methods
from specbench.engine.candidates import DRAFTING_OFF, auto_keys, candidates, drafts
from specbench.engine.lean import FORWARDS, forward_note
from specbench.engine.lm import TreeLM
from specbench.engine.loop import Limits, Method
from specbench.engine.sampling import Sampling
from specbench.engine.values import choice, integer, is_integer, number, switch
from specbench.errors import require
from specbench.metrics import quality
from specbench.models import registry
from specbench.run import bounds
from specbench.run.baseline import cached_baseline_dtype

BASELINE_MODES = ("paired", "cached", "none")
DTYPES = ("auto", *registry.DTYPES)  # auto: measured per model and CPU (costs.dtype)
MAX_BATCH = 32


def check(cfg: dict) -> None:
    """Refuse a bad run config with one line before any model loads."""
    gen = cfg["gen"]
    integer("gen.max_new_tokens", gen["max_new_tokens"], at_least=1)
    batch_size = gen["batch_size"]
    require(
        is_integer(batch_size) and 1 <= batch_size <= MAX_BATCH,
        "gen.batch_size",
        f"must be an integer from 1 to {MAX_BATCH}, got {batch_size!r}",
    )
    Sampling(gen["temperature"], gen["top_p"], gen["top_k"])  # refuses a bad temperature, top_p or top_k
    stop_strings = gen["stop_strings"]
    require(
        stop_strings is None
        or (isinstance(stop_strings, list) and all(isinstance(s, str) and s for s in stop_strings)),
        "gen.stop_strings",
        f"must be a list of non-empty strings, e.g. gen.stop_strings=[abc,xyz], got {stop_strings!r}",
    )
    switch("gen.truncate_prompt", gen["truncate_prompt"])
    integer("seed", cfg["seed"], at_least=0)
    dataset_seed = cfg["dataset"]["seed"]
    require(
        dataset_seed is None or is_integer(dataset_seed),
        "dataset.seed",
        "must be an integer (it draws the dataset.limit samples) or null (the first ones in order), got "
        f"{dataset_seed!r}",
    )
    choice("baseline.mode", cfg["baseline"]["mode"], BASELINE_MODES)
    number(
        "costs.min_gain",
        cfg["costs"]["min_gain"],
        at_least=0,
        meaning="the predicted gain over AR below which drafting stays off",
    )
    check_hardware(cfg["hardware"])
    kind = cfg["dataset"]["calibration"]
    require(
        kind in CALIBRATION_KINDS,
        "dataset.calibration",
        f"unknown {kind!r}; choose one of {', '.join(CALIBRATION_KINDS)} (the prompts `auto` shapes are calibrated on)",
    )
    unknown = [m for m in cfg["dataset"].get("metrics") or [] if m not in quality.METRICS]
    require(not unknown, "dataset.metrics", f"unknown {unknown}; choose from {', '.join(quality.METRICS)}")
    compile_rule.check(cfg.get("engine") or {})
    registry.check_part(cfg["model"], "model", "target")
    methods.check(cfg["method"])
    if cfg["baseline"]["mode"] == "paired" and cfg["method"] != cfg["baseline"]["method"]:
        methods.check(cfg["baseline"]["method"])
    bounds.check_run(cfg, cfg["model"].get("context_length"))  # the model's own, once located (decide)


def check_hardware(hardware: dict) -> None:
    """A hardware config this machine and torch can run (weights load only after this)."""
    dtype = hardware["dtype"]
    require(dtype in DTYPES, "hardware.dtype", f"unknown {dtype!r}; choose one of {', '.join(DTYPES)}")
    choice("hardware.forward", hardware["forward"], FORWARDS)
    device = str(hardware["device"])
    require(
        not device.startswith("cuda") or torch.cuda.is_available(),
        "hardware.device",
        f"{device} needs a CUDA GPU and this torch {torch.__version__} sees none; use hardware=cpu (or cpu-fp32, "
        "cpu-bf16)",
    )
    if hardware.get("threads") is not None:
        integer("hardware.threads", hardware["threads"], at_least=1)


@dataclass(frozen=True)
class RunPlan:
    """What the run uses, and why (the summary's "why" fields come from here)."""

    dtype: str
    # what the target computes in (Compiled.precision): e.g. fp32 activations on fp16 weights under dtype float32
    precision: str
    dtype_choice: dict | None  # the probe and rule behind hardware.dtype=auto; None when set by hand
    forward: str  # the target forward that runs (its TreeLM.kind: LeanTreeLM-packed>=4, TreeLM, ...)
    # which forward that is and why (lean.forward_note): "lean", or "hf (Qwen3MoeForCausalLM: mixture-of-experts ...)"
    forward_note: str
    compile_choice: dict | None  # the probe behind engine.compile=auto (packed / fp16 weights / int8 drafts)
    tree: dict  # the method's concrete tree config; DRAFTING_OFF when no shape pays
    tree_choice: dict | None  # the calibration record behind `auto` tree keys
    profile: CostProfile | None
    drafter: str | None  # the drafter's id in the profile
    tree_overhead: dict | None  # per-step tree work the summary's prediction adds to the priced forwards

    def decisions(self, device: str) -> dict:
        """decisions.json: kept beside the samples, so a resumed run's summary reports them
        without measuring again."""
        return {
            "dtype": self.dtype,
            "precision": self.precision,
            "dtype_choice": self.dtype_choice,
            "tree_choice": self.tree_choice,
            "forward": self.forward,
            "forward_note": self.forward_note,
            "compile_choice": self.compile_choice,
            "fingerprint": device_fingerprint(device, torch.get_num_threads()),
            "profile": self.profile.to_json() if self.profile else None,
            "drafter": self.drafter,
            "tree_overhead": self.tree_overhead,
        }


@dataclass(frozen=True)
class RunParts:
    """What the plan built: the target as the run decodes with it, and both methods."""

    target: TreeLM
    prompts: PromptFormat
    sampling: Sampling
    limits: Limits
    method: Method
    baseline: Method | None


@dataclass(frozen=True)
class Setting:
    """What the config and the samples fix before anything is measured."""

    cfg: dict
    samples: list[Sample]
    sampling: Sampling
    batch_size: int
    tokenizer: object
    prompts: PromptFormat
    limits: Limits


@dataclass(frozen=True)
class Target:
    """The target model in one dtype, and its KV-cached forward as this machine runs it."""

    dtype: str
    hardware: dict  # the run's hardware config, with this dtype
    model: torch.nn.Module
    lm: TreeLM
    compile_choice: dict | None
    forward_note: str  # lean.forward_note


def decide(cfg: dict, samples: list[Sample], paired: bool, cached_baseline: bool) -> tuple[RunPlan, RunParts]:
    """The run's plan and its parts. `auto` values are decided here from measured costs:
    the dtype (costs.dtype), then any `auto` tree keys (costs.autotune, calibration decodes
    priced with the cost profile), then, where the other dtype is faster for plain AR or at
    some tree sizes, dtype and shape together (weigh_dtype)."""
    method_cfg = cfg["method"]
    # not on this machine: refused before the dtype probe announces timing it; sizes bounded by its context
    bounds.check_run(cfg, registry.context_length(cfg["model"]))
    dtype, dtype_choice = costs.resolve_dtype(
        dict(cfg["hardware"]),
        cfg["model"],
        method_cfg=method_cfg,
        engine=cfg.get("engine"),
        batch=cfg["gen"]["batch_size"],
    )
    model, tokenizer = load_target(cfg["model"], dtype, cfg["hardware"]["device"])
    setting = setting_for(cfg, samples, model, tokenizer)
    for sample in samples:  # a first turn that cannot fit fails before any cost is measured
        setting.prompts.ids([{"role": "user", "content": sample.turns[0]}], sample.id)
    target = forward_of(cfg, model, dtype)
    drafter = methods.load_drafter(method_cfg, model, target.hardware, target.lm.compiled)
    tree, tree_choice, profile = method_cfg["tree"], None, None
    if auto_keys(tree):
        verifier = methods.instantiate_part(method_cfg["verifier"], "method.verifier")
        profile = cost_profile(setting, target, drafter)
        tree, tree_choice = autotune.tune(tree, drafter, verifier, target.lm, profile, calibration(setting))
        runs = tree_choice.pop("runs", None)  # kept apart: the summary needs the choice, not every decode
        other = weighed_against(dtype, dtype_choice)
        if other and runs is not None:
            target, drafter, tree, tree_choice, profile, dtype_choice = weigh_dtype(
                setting, target, drafter, profile, tree_choice, runs, dtype_choice, other
            )
    if not drafts(tree):  # no shape pays on this machine: the drafter is not run at all
        drafter = None
    if cached_baseline:
        cached = cached_baseline_dtype(cfg)
        require(
            cached in (None, target.dtype),
            "baseline.mode",
            f"cached, but the cached {cfg['baseline']['method']['name']} run decoded in {cached} and this one "
            f"decodes in {target.dtype} "
            f"(hardware.dtype=auto decides per method); set hardware.dtype={target.dtype} for both runs or use "
            "baseline.mode=paired",
        )
    baseline = (
        methods.assemble(cfg["baseline"]["method"], target.model, target.hardware, target.lm.compiled)
        if paired
        else None
    )
    if cfg["costs"]["profile"] and profile is None and drafts(tree):  # AR has no speedup to predict
        profile = cost_profile(setting, target, drafter)
    drafter_id = costs.drafter_id(method_cfg.get("drafter"))
    step_costs = ProfileCosts(profile, drafter_id) if profile is not None else None
    method = methods.assemble(
        {**method_cfg, "tree": tree},
        target.model,
        target.hardware,
        target.lm.compiled,
        costs=step_costs,
        drafter=drafter,
    )
    overhead = tree_overhead(setting, method, target, profile, tree_choice) if profile is not None else None
    plan = RunPlan(
        dtype=target.dtype,
        precision=target.lm.compiled.precision(target.dtype),
        dtype_choice=dtype_choice,
        forward=target.lm.kind,
        forward_note=target.forward_note,
        compile_choice=target.compile_choice,
        tree=tree,
        tree_choice=tree_choice,
        profile=profile,
        drafter=drafter_id,
        tree_overhead=overhead,
    )
    return plan, RunParts(
        target=target.lm,
        prompts=setting.prompts,
        sampling=setting.sampling,
        limits=setting.limits,
        method=method,
        baseline=baseline,
    )


def setting_for(cfg: dict, samples: list[Sample], model, tokenizer) -> Setting:
    gen = cfg["gen"]
    context_length = cfg["model"].get("context_length") or model.config.max_position_embeddings
    limits = Limits(
        max_new_tokens=gen["max_new_tokens"],
        stop_token_ids=frozenset(stop_token_ids(model, tokenizer, cfg["model"])),
        stop_strings=tuple(gen["stop_strings"] or ()),
    )
    prompts = PromptFormat(tokenizer, context_length, gen["max_new_tokens"], gen["truncate_prompt"])
    sampling = Sampling(gen["temperature"], gen["top_p"], gen["top_k"])
    return Setting(cfg, samples, sampling, gen["batch_size"], tokenizer, prompts, limits)


def forward_of(cfg: dict, model, dtype: str) -> Target:
    """The target's forward as hardware.forward and engine.compile ask (the compile probe
    times it on first use); the console says which forward runs and why."""
    hardware = {**cfg["hardware"], "dtype": dtype}
    lm, compile_choice = costs.target_lm(model, cfg, hardware, drafter_layers=methods.drafter_layers(cfg["method"]))
    note = forward_note(model, hardware["forward"])
    print(f"forward: {note} [{lm.kind}, {dtype}]")
    return Target(dtype, hardware, model, lm, compile_choice, note)


def weighed_against(dtype: str, dtype_choice: dict | None) -> str | None:
    """The other dtype a calibrated shape is priced in too: plain AR's where that differs
    (an AVX2-only CPU: bf16 wins one-token forwards, fp32 wide ones), else one faster at
    some of the probed tree sizes (an AMX Xeon: fp32 wins one token, bf16 16 and more)."""
    choice = dtype_choice or {}
    ar_dtype = choice.get("ar_dtype", dtype)
    return ar_dtype if ar_dtype != dtype else choice.get("contender")


def weigh_dtype(
    setting: Setting,
    calibrated: Target,
    drafter,
    calibrated_profile: CostProfile,
    tree_choice: dict,
    runs: list,
    dtype_choice: dict,
    other: str,
):
    """Price the shapes calibrated in one dtype in `other` too (weighed_against) and decode
    in the dtype and shape predicted fastest. Returns the
    target, drafter, tree, shape choice, profile and dtype choice the run goes on with."""
    cfg = setting.cfg
    model, _ = load_target(cfg["model"], other, cfg["hardware"]["device"])
    target = forward_of(cfg, model, other)
    other_drafter = methods.load_drafter(cfg["method"], model, target.hardware, target.lm.compiled)
    profile = cost_profile(setting, target, other_drafter)
    drafter_id = costs.drafter_id(cfg["method"].get("drafter"))
    calibrated_record = {"candidates": tree_choice["candidates"], "runs": runs}
    priced = {
        calibrated.dtype: tree_choice["candidates"],
        other: autotune.reprice(calibrated_record, profile, drafter_id),
    }
    decision = autotune.choose_dtype(priced, candidates(cfg["method"]["tree"]), cfg["costs"]["min_gain"])
    gain, chosen, ar_ms = decision["predicted_gain"], decision["chosen"], decision["ar_ms"]
    shape = {k: chosen[k] for k in auto_keys(cfg["method"]["tree"])} if chosen != DRAFTING_OFF else "drafting off"
    faster_ar = min(ar_ms, key=ar_ms.get)
    dtype_choice = {**dtype_choice, "joint": decision}
    dtype_choice["note"] = decision.get("note") or (
        f"{decision['dtype']} with {shape} is predicted {gain:.2f}x the speed of plain AR in {faster_ar}, AR's "
        "faster dtype on this "
        f"profile ({' vs '.join(f'{d} {ms:.0f} ms' for d, ms in ar_ms.items())} on the calibration prompts); "
        f"this run's speedup is over AR in {decision['dtype']}"
    )
    if decision["dtype"] != other:  # the gain over the faster AR ranks the shapes
        return calibrated, drafter, chosen, {**tree_choice, "chosen": chosen}, calibrated_profile, dtype_choice
    tree_choice = {k: v for k, v in tree_choice.items() if k != "note"} | {
        "chosen": chosen,
        "predicted_speedup": gain,
        "dtype": other,
        "calibrated_in": calibrated.dtype,
    }
    if "note" in decision:
        tree_choice["note"] = decision["note"]
    return target, other_drafter, chosen, tree_choice, profile, dtype_choice


def cost_profile(setting: Setting, target: Target, drafter) -> CostProfile:
    """The cached cost profile of `target` (and `drafter`) on this machine, measured on first
    use up to the longest context the run's samples reach."""
    cfg, hardware = setting.cfg, target.hardware
    key = costs.profile_key(
        registry.cache_name(cfg["model"], model=target.lm.model),
        target.dtype,
        hardware["device"],
        hardware.get("threads"),
        target.lm.kind,
    )
    turns = max((len(s.turns) for s in setting.samples), default=1)
    longest = max((len(setting.tokenizer(t).input_ids) for s in setting.samples for t in s.turns[:1]), default=64)
    longest = min(setting.prompts.context_length, turns * (longest + 32 + setting.limits.max_new_tokens) + TREE_MARGIN)
    name = costs.drafter_id(cfg["method"].get("drafter"))
    return costs.ensure_profile(
        key,
        target.lm,
        longest,
        {name: drafter} if drafter is not None else None,
        repeats=cfg["costs"]["repeats"],
        max_n=min(cfg["costs"]["max_n"], methods.reach(cfg["method"]) or cfg["costs"]["max_n"]),
        batch=setting.batch_size,
    )


def calibration(setting: Setting) -> autotune.Calibration:
    """The calibration decodes' shared settings: at least one full batch of prompts."""
    costs_cfg, drafter_cfg = setting.cfg["costs"], setting.cfg["method"].get("drafter")
    count = max(costs_cfg["calibration_prompts"], setting.batch_size)
    kind, tokenizer = setting.cfg["dataset"]["calibration"], setting.tokenizer
    return autotune.Calibration(
        lambda: calibration_prompts(tokenizer, count, kind=kind),
        calibration_id(count, kind=kind),
        setting.sampling,
        setting.limits.stop_token_ids,
        costs.cache_root(),
        costs.drafter_id(drafter_cfg),
        weights=registry.weights_id(drafter_cfg),
        max_new_tokens=costs_cfg["calibration_tokens"],
        batch_size=setting.batch_size,
        min_gain=costs_cfg["min_gain"],
    )


def tree_overhead(
    setting: Setting, method: Method, target: Target, profile: CostProfile, tree_choice: dict | None
) -> dict | None:
    """The per-step tree work the summary's prediction adds to the profiled forwards: from
    the shape choice when the tree was `auto`, else timed once for this shape."""
    if tree_choice is not None:
        return autotune.overhead_line(tree_choice["candidates"])
    tree_cfg = setting.cfg["method"]["tree"]
    if not drafts(tree_cfg) or not setting.cfg["costs"]["calibrate_tree"]:
        return None
    return autotune.tree_overhead(tree_cfg, method, target.lm, profile, calibration(setting))


_loaded_target: dict = {}


def load_target(entry: dict, dtype: str, device: str):
    """(model, tokenizer), reused by the next run in this process when it asks for the same
    model: the jobs of a Hydra multirun (one process) then load the target only once."""
    key = json.dumps([entry, dtype, device], sort_keys=True, default=str)
    if key not in _loaded_target:
        _loaded_target.clear()
        _loaded_target[key] = registry.load(entry, dtype, device)
    return _loaded_target[key]
