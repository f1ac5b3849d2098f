"""What a run will use, decided from its config and this machine before it decodes: the
dtype, how the target's forward runs, the tree shape and the cost profile, with why each
was chosen. Deciding measures what it must (dtype and compile probes, cost profiles,
calibration decodes; each cached per machine), so `decide` returns the plan together with
the parts it built for it; the Runner only executes them."""

from __future__ import annotations

from dataclasses import dataclass, replace

import torch

from specbench import costs
from specbench.costs import autotune, cache, pool
from specbench.costs import compile as compile_rule
from specbench.costs import dtype as dtype_rule
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
class Decision:
    """One stage's choice: the value the run uses, why (the rule, in words) and the
    measurement it rests on (None where the config set it or nothing was timed)."""

    value: object
    why: str | None = None
    measured: dict | None = None


@dataclass(frozen=True)
class RunPlan:
    """What the run uses, and why: the one schema of decisions.json (to_json / from_json),
    from which the summary's "why" fields come."""

    dtype: Decision  # hardware.dtype; measured: the dtype probe and rule (joint weighing included)
    # what the target computes in (Compiled.precision): e.g. fp32 activations on fp16 weights under dtype float32
    precision: str
    # the target forward that runs (its TreeLM.kind: LeanTreeLM-packed>=4, TreeLM, ...); why: lean.forward_note
    # ("lean", or "hf (Qwen3MoeForCausalLM: ...)"); measured: the compile probe behind engine.compile=auto
    forward: Decision
    tree: Decision  # the concrete tree config (DRAFTING_OFF when no shape pays); measured: its calibration record
    profile: CostProfile | None
    drafter: str | None  # the drafter's id in the profile
    tree_overhead: dict | None  # per-step tree work the summary's prediction adds to the priced forwards

    def to_json(self, device: str) -> dict:
        """decisions.json: kept beside the samples, so a resumed run's summary reports them
        without measuring again."""
        return {
            "dtype": self.dtype.value,
            "precision": self.precision,
            "dtype_choice": self.dtype.measured,
            "tree": self.tree.value,
            "tree_choice": self.tree.measured,
            "forward": self.forward.value,
            "forward_note": self.forward.why,
            "compile_choice": self.forward.measured,
            "fingerprint": device_fingerprint(device, torch.get_num_threads()),
            "profile": self.profile.to_json() if self.profile else None,
            "drafter": self.drafter,
            "tree_overhead": self.tree_overhead,
        }

    @classmethod
    def from_json(cls, data: dict) -> RunPlan:
        """A plan as decisions.json recorded it (older records hold no `tree`)."""
        choice = data.get("dtype_choice") or {}
        return cls(
            dtype=Decision(data["dtype"], choice.get("rule"), data.get("dtype_choice")),
            precision=data.get("precision", data["dtype"]),
            forward=Decision(data["forward"], data.get("forward_note"), data.get("compile_choice")),
            tree=Decision(data.get("tree"), None, data.get("tree_choice")),
            profile=CostProfile.from_json(data["profile"]) if data.get("profile") else None,
            drafter=data.get("drafter"),
            tree_overhead=data.get("tree_overhead"),
        )


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


@dataclass(frozen=True)
class Shaped:
    """The tree shape stage's outcome: the target and drafter in the dtype the run decodes
    in (the joint weighing may change it), the concrete tree and the profile pricing it."""

    target: Target
    drafter: object
    tree: Decision
    dtype: Decision
    profile: CostProfile | None


def decide(cfg: dict, samples: list[Sample], paired: bool, cached_baseline: bool) -> tuple[RunPlan, RunParts]:
    """The run's plan and its parts, stage by stage (docs/speed.md, "How a run is decided"):
    sizes bounded, the dtype, the forward, the tree shape (with the dtype where the two
    interact), then the cost profile and the methods it prices."""
    # not on this machine: refused before the dtype probe announces timing it; sizes bounded by its context
    bounds.check_run(cfg, registry.context_length(cfg["model"]))
    dtype = dtype_stage(cfg)
    model, tokenizer = pool.target(cfg["model"], dtype.value, cfg["hardware"]["device"])
    setting = setting_for(cfg, samples, model, tokenizer)
    for sample in samples:  # a first turn that cannot fit fails before any cost is measured
        setting.prompts.ids([{"role": "user", "content": sample.turns[0]}], sample.id)
    shaped = shape_stage(setting, forward_of(cfg, model, dtype.value), dtype)
    pool.keep(cfg["model"], shaped.target.dtype, cfg["hardware"]["device"])  # the other dtype priced: let go
    if cached_baseline:
        check_cached_dtype(cfg, shaped.target.dtype)
    return assemble(setting, shaped, paired)


def dtype_stage(cfg: dict) -> Decision:
    """hardware.dtype, `auto` decided at the forward sizes the run verifies (costs.dtype)."""
    dtype, choice = dtype_rule.resolve(
        dict(cfg["hardware"]),
        cfg["model"],
        method_cfg=cfg["method"],
        engine=cfg.get("engine"),
        batch=cfg["gen"]["batch_size"],
    )
    return Decision(dtype, (choice or {}).get("rule"), choice)


def shape_stage(setting: Setting, target: Target, dtype: Decision) -> Shaped:
    """The concrete tree: as set, or `auto` keys calibrated (costs.autotune) and, where the
    other dtype is faster for plain AR or at some tree sizes, weighed in both (weigh_dtype)."""
    method_cfg = setting.cfg["method"]
    drafter = methods.load_drafter(method_cfg, target.model, target.hardware, target.lm.compiled)
    tree = method_cfg["tree"]
    if not auto_keys(tree):
        return Shaped(target, drafter if drafts(tree) else None, Decision(tree), dtype, None)
    verifier = methods.instantiate_part(method_cfg["verifier"], "method.verifier")
    profile = cost_profile(setting, target, drafter, widest=profiled_width(setting, target, drafter))
    chosen, choice = autotune.tune(tree, drafter, verifier, target.lm, profile, calibration(setting))
    runs = choice.pop("runs", None)  # kept apart: the summary needs the choice, not every decode
    shaped = Shaped(target, drafter, Decision(chosen, autotune.describe(choice), choice), dtype, profile)
    other = weighed_against(dtype.value, dtype.measured)
    if other and runs is not None and any(runs):  # nothing decoded: no shape's ceiling beat AR
        ceiling = contender_ceiling(choice, dtype.measured, other)
        if ceiling is None or ceiling[0] > 1.0 + setting.cfg["costs"]["min_gain"]:
            shaped = weigh_dtype(setting, shaped, runs, other)
        else:
            print(f"hardware.dtype: {ceiling[1]}")
            shaped = replace(shaped, dtype=replace(dtype, measured={**dtype.measured, "contender_note": ceiling[1]}))
    elif runs is not None and not any(runs):  # every shape past its ceiling: drafting off, nothing weighed
        shaped = plain_ar_dtype(setting, shaped)
    if not drafts(shaped.tree.value):  # no shape pays on this machine: the drafter is not run at all
        shaped = replace(shaped, drafter=None)
    return shaped


def profiled_width(setting: Setting, target: Target, drafter) -> int | None:
    """How wide the shape stage's cost profile is timed: to the widest candidate whose
    ceiling at the forward stage's probed times could pay (autotune.live_width), where the
    calibration bounds shapes by their width (batch size 1, a drafter that always proposes);
    None (the method's reach) elsewhere. The ceilings themselves are taken on the profile."""
    probed = compile_rule.probed_ms(target.lm.compiled, target.compile_choice)
    if not probed or not autotune.width_bounded(setting.batch_size, drafter):
        return None
    trees = [methods.instantiate_part(cfg, "method.tree") for cfg in candidates(setting.cfg["method"]["tree"])]
    return autotune.live_width(trees, probed, setting.cfg["costs"]["min_gain"])


def check_cached_dtype(cfg: dict, dtype: str) -> None:
    """baseline.mode=cached: the cached AR run decoded in the dtype this run decodes in."""
    cached = cached_baseline_dtype(cfg)
    require(
        cached in (None, dtype),
        "baseline.mode",
        f"cached, but the cached {cfg['baseline']['method']['name']} run decoded in {cached} and this one "
        f"decodes in {dtype} "
        f"(hardware.dtype=auto decides per method); set hardware.dtype={dtype} for both runs or use "
        "baseline.mode=paired",
    )


def assemble(setting: Setting, shaped: Shaped, paired: bool) -> tuple[RunPlan, RunParts]:
    """The cost profile (where the run drafts and has none yet) and the methods it prices."""
    cfg, target = setting.cfg, shaped.target
    method_cfg, tree = cfg["method"], shaped.tree.value
    profile = shaped.profile
    if cfg["costs"]["profile"] and profile is None and drafts(tree):  # AR has no speedup to predict
        profile = cost_profile(setting, target, shaped.drafter)
    baseline = (
        methods.assemble(cfg["baseline"]["method"], target.model, target.hardware, target.lm.compiled)
        if paired
        else None
    )
    drafter_id = costs.drafter_id(method_cfg.get("drafter"))
    method = methods.assemble(
        {**method_cfg, "tree": tree},
        target.model,
        target.hardware,
        target.lm.compiled,
        costs=ProfileCosts(profile, drafter_id) if profile is not None else None,
        drafter=shaped.drafter,
    )
    overhead = tree_overhead(setting, method, target, profile, shaped.tree.measured) if profile is not None else None
    plan = RunPlan(
        dtype=shaped.dtype,
        precision=target.lm.compiled.precision(target.dtype),
        forward=Decision(target.lm.kind, target.forward_note, target.compile_choice),
        tree=shaped.tree,
        profile=profile,
        drafter=drafter_id,
        tree_overhead=overhead,
    )
    parts = RunParts(target.lm, setting.prompts, setting.sampling, setting.limits, method, baseline)
    return plan, parts


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


def plain_ar_dtype(setting: Setting, shaped: Shaped) -> Shaped:
    """Drafting off without a shape decoded: the run is plain AR, so it decodes in plain AR's
    dtype where the dtype probe found that faster than the dtype of the tree sizes (an AVX2
    CPU without fp16 weights: bf16 one-token forwards, fp32 wide ones); no weighing priced it."""
    measured = shaped.dtype.measured or {}
    ar_dtype = measured.get("ar_dtype", shaped.dtype.value)
    if ar_dtype == shaped.dtype.value:
        return shaped
    cfg = setting.cfg
    model, _ = pool.target(cfg["model"], ar_dtype, cfg["hardware"]["device"])
    note = (
        f"no tree shape could beat AR even accepting every draft: decoding without drafting in {ar_dtype}, "
        f"plain AR's dtype here, not in {shaped.dtype.value}, the dtype of the tree sizes"
    )
    print(f"hardware.dtype: {note}")
    dtype = Decision(ar_dtype, shaped.dtype.why, {**measured, "note": note})
    return Shaped(forward_of(cfg, model, ar_dtype), None, shaped.tree, dtype, None)


def contender_ceiling(tree_choice: dict, dtype_choice: dict, other: str) -> tuple[float, str] | None:
    """(the most drafting in `other` could gain over the faster AR, that in words), where
    `other` is the dtype probe's contender (faster at some tree size, slower for AR): the best
    decoded shape's tau, every step at `other`'s cheapest probed forward, drafting free. None
    where `other` is plain AR's dtype (AR itself may then be faster there) or nothing was probed."""
    probe = dtype_choice.get("probe")
    if probe is None or dtype_choice.get("ar_dtype") == other:
        return None
    tau = max(row["tau"] for row in tree_choice["candidates"] if row.get("measured", True))
    ar_ms, cheapest = min(per["1"] for per in probe.values()), min(probe[other].values())
    bound = tau * ar_ms / cheapest
    return bound, (
        f"{other} not weighed: at most {bound:.2f}x AR even at the best decoded tau {tau:.2f} with every step at "
        f"its cheapest probed forward ({cheapest:.0f} ms against AR's {ar_ms:.0f} ms) and drafting free"
    )


def weigh_dtype(setting: Setting, calibrated: Shaped, runs: list, other: str) -> Shaped:
    """Price the shapes calibrated in one dtype in `other` too (weighed_against) and decode
    in the dtype and shape predicted fastest."""
    cfg, tree_choice = setting.cfg, calibrated.tree.measured
    model, _ = pool.target(cfg["model"], other, cfg["hardware"]["device"])
    target = forward_of(cfg, model, other)
    other_drafter = methods.load_drafter(cfg["method"], model, target.hardware, target.lm.compiled)
    profile = cost_profile(setting, target, other_drafter, widest=widest_step(runs))
    drafter_id = costs.drafter_id(cfg["method"].get("drafter"))
    priced = {
        calibrated.target.dtype: tree_choice["candidates"],
        other: autotune.reprice(tree_choice | {"runs": runs}, profile, drafter_id),
    }
    decision = autotune.choose_dtype(priced, candidates(cfg["method"]["tree"]), cfg["costs"]["min_gain"])
    chosen = decision["chosen"]
    dtype_choice = {**calibrated.dtype.measured, "joint": decision, "note": joint_note(cfg, decision)}
    dtype = Decision(decision["dtype"], calibrated.dtype.why, dtype_choice)
    if decision["dtype"] != other:  # the gain over the faster AR ranks the shapes
        tree_choice = {**tree_choice, "chosen": chosen}
        return replace(calibrated, tree=Decision(chosen, autotune.describe(tree_choice), tree_choice), dtype=dtype)
    tree_choice = {k: v for k, v in tree_choice.items() if k != "note"} | {
        "chosen": chosen,
        "predicted_speedup": decision["predicted_gain"],
        "dtype": other,
        "calibrated_in": calibrated.target.dtype,
    }
    if "note" in decision:
        tree_choice["note"] = decision["note"]
    return Shaped(target, other_drafter, Decision(chosen, autotune.describe(tree_choice), tree_choice), dtype, profile)


def joint_note(cfg: dict, decision: dict) -> str:
    """What the joint weighing decided, in words (the summary's dtype note)."""
    if "note" in decision:
        return decision["note"]
    chosen, ar_ms = decision["chosen"], decision["ar_ms"]
    shape = {k: chosen[k] for k in auto_keys(cfg["method"]["tree"])} if chosen != DRAFTING_OFF else "drafting off"
    return (
        f"{decision['dtype']} with {shape} is predicted {decision['predicted_gain']:.2f}x the speed of plain AR in "
        f"{min(ar_ms, key=ar_ms.get)}, AR's faster dtype on this "
        f"profile ({' vs '.join(f'{d} {ms:.0f} ms' for d, ms in ar_ms.items())} on the calibration prompts); "
        f"this run's speedup is over AR in {decision['dtype']}"
    )


def widest_step(runs: list[list[dict]]) -> int | None:
    """The most tokens any step of the calibration `runs` verified (None: no step recorded)."""
    return max((1 + sum(w) for shape in runs for run in shape for w in run["tree_widths"]), default=None)


def cost_profile(setting: Setting, target: Target, drafter, widest: int | None = None) -> CostProfile:
    """The cached cost profile of `target` (and `drafter`) on this machine, measured on first
    use up to the longest context the run's samples reach and up to `widest` where that is
    known (the widest shape that could pay: profiled_width; the widest step of recorded
    decodes: widest_step), else the widest forward the method may verify."""
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
        max_n=min(cfg["costs"]["max_n"], widest or methods.reach(cfg["method"]) or cfg["costs"]["max_n"]),
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
        cache.root(),
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
        return tree_choice["tree_work"]
    tree_cfg = setting.cfg["method"]["tree"]
    if not drafts(tree_cfg) or not setting.cfg["costs"]["calibrate_tree"]:
        return None
    return autotune.tree_overhead(tree_cfg, method, target.lm, profile, calibration(setting))
