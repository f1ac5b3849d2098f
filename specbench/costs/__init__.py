"""Measured costs decide speed settings: profiles of forward time per machine, the
dtype they imply, the tree shapes they favour, and the speedup they predict."""

from __future__ import annotations

import hashlib
import json
import time
from pathlib import Path

import torch

from specbench.costs import compile as compile_rule
from specbench.costs import contention
from specbench.costs import dtype as dtype_rule
from specbench.costs.fingerprint import device_fingerprint, fingerprint_id
from specbench.costs.profile import CostProfile, context_grid, load, measure_commit, measure_drafter, measure_target, save
from specbench.engine.lean import make_lm
from specbench.engine.lm import TreeLM
from specbench.models import registry


def cache_root() -> Path:
    return registry.cache_dir() / "costs"


def resolve_dtype(hardware: dict, model_cfg: dict, refresh: bool = False, method_cfg: dict | None = None,
                  engine: dict | None = None) -> tuple[str, dict | None]:
    """(dtype, the probe behind it) for `hardware.dtype`, `auto` decided for this model on
    this machine (specbench.costs.dtype) at the forward sizes `method_cfg` verifies (all
    probed sizes without one), each dtype run as `engine.compile` would run it; explicit
    dtypes pass through."""
    def load_model(dtype: str):
        return registry.load_model(model_cfg, dtype, hardware["device"])

    mode = (engine or {}).get("compile", "auto")
    fp16 = compile_rule.fp16_mode(engine or {}, hardware.get("dtype"))

    def compile_choice(model):
        return compile_rule.resolve(mode, model, model_cfg["name"], hardware, cache_root(), fp16=fp16)[0]

    sizes = dtype_rule.verified_sizes(method_cfg) if method_cfg is not None else dtype_rule.PROBE_SIZES
    return dtype_rule.resolve(hardware, model_cfg["name"], load_model, cache_root(), refresh=refresh, sizes=sizes,
                              compile_choice=compile_choice, compile_mode=mode if fp16 == "off" else f"{mode}-fp16-weights-{fp16}")


def target_lm(model: torch.nn.Module, cfg: dict, hardware: dict, refresh: bool = False) -> tuple[TreeLM, dict | None]:
    """(the target's KV-cached LM as hardware.forward and engine.compile ask, the probe
    behind an `auto` compile choice or None)."""
    engine = cfg.get("engine") or {}
    requested_dtype = (cfg.get("hardware") or {}).get("dtype")
    compiled, record = compile_rule.resolve(engine.get("compile", "auto"), model, cfg["model"]["name"], hardware, cache_root(), refresh=refresh,
                                            int8_mode=engine.get("int8_drafts", "auto"), fp16=compile_rule.fp16_mode(engine, requested_dtype))
    return make_lm(model, hardware.get("forward", "auto"), compiled), record


def profile_key(model_name: str, dtype: str, device: str, threads: int | None, forward: str = "TreeLM") -> dict:
    """What a profile is valid for; `forward` names the forward implementation (the lean
    Llama forward and the model's own cost differently)."""
    return {"model": model_name, "dtype": dtype, "forward": forward, "fingerprint": device_fingerprint(device, threads)}


def profile_path(key: dict) -> Path:
    return cache_root() / f"{key['model']}-{key['dtype']}-{key.get('forward', 'TreeLM')}-{fingerprint_id(key['fingerprint'])}.json"


def drafter_id(drafter_cfg: dict | None) -> str | None:
    """A drafter's identity for its cost curve: its builder and a hash of its settings."""
    if not drafter_cfg:
        return None
    blob = json.dumps(drafter_cfg, sort_keys=True, default=str)
    name = str(drafter_cfg.get("_target_", "drafter")).rsplit(".", 2)[-2]
    return f"{name}-{hashlib.sha256(blob.encode()).hexdigest()[:8]}"


def ensure_profile(
    key: dict, target: TreeLM, longest_context: int, drafters: dict | None = None, *,
    repeats: int, max_n: int, refresh: bool = False, log=print, batch: int = 1,
) -> CostProfile:
    """The cached profile for `key`, measuring what is missing: the target's curve (when
    the cache has none, or its contexts stop short of `longest_context`) and the curve of
    every drafter in `drafters` (id -> drafter) not profiled yet up to `max_n`; at batch
    size `batch` > 1, the same curves at that batch size too."""
    path = profile_path(key)
    profile = None if refresh else load(path, key)
    with contention.watch() as usage:
        profile, measured = _measure_missing(profile, path, key, target, longest_context, drafters, repeats, max_n, log, batch)
    if measured and usage.others is not None:
        profile.contended_cores = max(profile.contended_cores, round(usage.others, 2))
        if not profile.trusted:
            log(f"warning: other processes kept {usage.others:.1f} cores busy while profiling; these timings are used "
                f"for this run only (not cached): profile again on an idle machine")
    if measured and profile.trusted:
        save(profile, path)
    if measured or not path.with_suffix(".png").is_file():
        draw_curves(profile, path.with_suffix(".png"), log)
    return profile


def _measure_missing(profile, path, key, target, longest_context, drafters, repeats, max_n, log, batch) -> tuple[CostProfile, bool]:
    """(the profile with every missing curve measured, whether anything was)."""
    measured = False
    contexts = context_grid(longest_context)
    if profile is None or profile.target.contexts[-1] < longest_context or profile.target.max_n < max_n:
        log(f"profiling {key['model']} ({key['dtype']}) forwards for n = 1..{max_n} new tokens at contexts {contexts} (cached in {path})")
        start = time.perf_counter()
        curve = measure_target(target, contexts, max_n, repeats)
        kept = {"drafters": profile.drafters, "target_batches": profile.target_batches, "drafter_batches": profile.drafter_batches} if profile else {}
        profile = CostProfile(key=key, target=curve, **kept)
        profile.commit_ms = measure_commit(target, contexts[0], repeats)
        profile.step_overhead_ms = measure_step_overhead(target, profile, contexts[0])
        log(f"  target profiled in {time.perf_counter() - start:.0f} s: n=1 {curve.at(contexts[0], 1):.1f} ms, n={max_n} {curve.at(contexts[0], max_n):.1f} ms at c={contexts[0]}")
        measured = True
    for name, drafter in (drafters or {}).items():
        known = profile.drafters.get(name)
        if (known is not None and known.max_n >= max_n) or drafter is None:
            continue
        log(f"profiling drafter {name} (n = 1..{max_n})")
        profile.drafters[name] = measure_drafter(drafter, target, draft_contexts(profile, longest_context), max_n, repeats)
        measured = True
    if batch > 1:
        measured = _ensure_batch(profile, target, drafters or {}, batch, longest_context, repeats, max_n, log) or measured
    return profile, measured


def _ensure_batch(profile, target, drafters, batch, longest_context, repeats, max_n, log) -> bool:
    """Target and drafter curves at batch size `batch`, where missing or too short."""
    measured = False
    known = profile.target_batches.get(str(batch))
    if known is None or known.contexts[-1] < longest_context or known.max_n < max_n:
        log(f"profiling {profile.key['model']} forwards at batch size {batch}")
        profile.target_batches[str(batch)] = measure_target(target, profile.target.contexts, max_n, repeats, batch=batch)
        measured = True
    if str(batch) not in profile.step_overhead_batches:
        profile.step_overhead_batches[str(batch)] = measure_step_overhead(target, profile, profile.target.contexts[0], batch=batch)
        log(f"  engine work per AR step at batch size {batch}: {profile.step_overhead_batches[str(batch)]:.2f} ms (alone: {profile.step_overhead_ms:.2f})")
        measured = True
    for name, drafter in drafters.items():
        known = profile.drafter_batches.get(name, {}).get(str(batch))
        if drafter is None or (known is not None and known.max_n >= max_n):
            continue
        log(f"profiling drafter {name} at batch size {batch}")
        curve = measure_drafter(drafter, target, draft_contexts(profile, longest_context), max_n, repeats, batch=batch)
        profile.drafter_batches.setdefault(name, {})[str(batch)] = curve
        measured = True
    return measured


def draft_contexts(profile: CostProfile, longest_context: int) -> list[int]:
    """Contexts a drafter is profiled at: the target's grid points up to the run's longest
    context, capped at 1024 to keep drafter profiling short."""
    return [c for c in profile.target.contexts if c <= min(longest_context, 1024)] or profile.target.contexts[:1]


def draw_curves(profile: CostProfile, path: Path, log) -> None:
    """The curves as a PNG beside the profile; a figure never stops a run."""
    try:
        from specbench.costs.plot import draw

        draw(profile, path)
    except Exception as error:  # noqa: BLE001
        log(f"warning: cost curve figure not drawn: {error!r}")


def measure_step_overhead(target: TreeLM, profile: CostProfile, context: int, steps: int = 32, batch: int = 1) -> float:
    """Wall ms per AR step of the decoding loop beyond the target forward itself
    (sampling, bookkeeping, cache growth): AR through the engine minus f_T(B, c, 1). At
    batch size B > 1 the rows' prompts differ in length, as real prompts do."""
    from specbench.engine.loop import Limits, Method, generate_batch
    from specbench.engine.sampling import Sampling
    from specbench.trees.autoregressive import Autoregressive
    from specbench.verify.standard import StandardVerifier

    prompts = [torch.randint(3, target.vocab_size, (context + 7 * row,)).tolist() for row in range(batch)]
    method = Method(Autoregressive(), StandardVerifier())
    limits = Limits(max_new_tokens=steps + 1)
    generate_batch(target, method, prompts, Sampling(), limits)
    runs = [generate_batch(target, method, prompts, Sampling(), limits)[0] for _ in range(3)]
    best = min(runs, key=lambda g: g.batch_seconds)
    per_step = (best.batch_seconds - best.prefill_seconds) * 1000 / max(best.target_forwards, 1)
    return round(max(per_step - profile.target_ms(batch, context + 3.5 * (batch - 1), 1), 0.0), 3)
