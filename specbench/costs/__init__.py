"""Measured costs decide speed settings: profiles of forward time per machine, the
dtype they imply, the tree shapes they favour, and the speedup they predict."""

from __future__ import annotations

import hashlib
import json
import time
from pathlib import Path

import torch

from specbench.costs import cache, contention, pool
from specbench.costs import compile as compile_rule
from specbench.costs import dtype as dtype_rule
from specbench.costs.contention import contended
from specbench.costs.fingerprint import device_fingerprint, fingerprint_id
from specbench.costs.profile import (
    CostProfile,
    Curve,
    context_grid,
    load,
    measure_commit,
    measure_drafter,
    measure_target,
    save,
)
from specbench.engine.lm import TreeLM
from specbench.models import registry


def target_lm(
    model: torch.nn.Module, cfg: dict, hardware: dict, refresh: bool = False, drafter_layers: bool = True
) -> tuple[TreeLM, dict | None]:
    """(the target's KV-cached LM as hardware.forward and engine.compile ask, the probe
    behind an `auto` compile choice or None), chosen at the forward sizes the run's method
    verifies; `drafter_layers`: whether its drafter has layers (methods.drafter_layers)."""
    engine = cfg.get("engine") or {}
    requested_dtype = (cfg.get("hardware") or {}).get("dtype")
    compiled, record = compile_rule.resolve(
        engine.get("compile", "auto"),
        model,
        registry.cache_name(cfg["model"], model=model),
        hardware,
        cache.root(),
        refresh=refresh,
        int8_mode=engine.get("int8_drafts", "auto"),
        fp16=compile_rule.fp16_mode(engine, requested_dtype),
        sizes=dtype_rule.compile_sizes(dtype_rule.run_sizes(cfg.get("method"))),
        drafter_layers=drafter_layers,
        batch=(cfg.get("gen") or {}).get("batch_size", 1),
    )
    return pool.lm(model, hardware.get("forward", "auto"), compiled), record


def profile_key(model_name: str, dtype: str, device: str, threads: int | None, forward: str = "TreeLM") -> dict:
    """What a profile is valid for: `model_name` is the target's registry.cache_name (its
    config name and a hash of its weights); `forward` names the forward implementation (the
    lean forward and the model's own cost differently)."""
    return {"model": model_name, "dtype": dtype, "forward": forward, "fingerprint": device_fingerprint(device, threads)}


def profile_path(key: dict) -> Path:
    return (
        cache.root()
        / f"{key['model']}-{key['dtype']}-{key.get('forward', 'TreeLM')}-{fingerprint_id(key['fingerprint'])}.json"
    )


def drafter_id(drafter_cfg: dict | None) -> str | None:
    """A drafter's identity for its cost curve: its builder and a hash of its settings."""
    if not drafter_cfg:
        return None
    blob = json.dumps(drafter_cfg, sort_keys=True, default=str)
    name = str(drafter_cfg.get("_target_", "drafter")).rsplit(".", 2)[-2]
    return f"{name}-{hashlib.sha256(blob.encode()).hexdigest()[:8]}"


def ensure_profile(
    key: dict,
    target: TreeLM,
    longest_context: int,
    drafters: dict | None = None,
    *,
    repeats: int,
    max_n: int,
    refresh: bool = False,
    log=print,
    batch: int = 1,
) -> CostProfile:
    """The cached profile for `key`, measuring only what is missing: the target's curve at
    the grid contexts up to `longest_context` it lacks, the curve of every drafter in
    `drafters` (id -> drafter) not profiled yet up to `max_n`, and at batch size `batch` > 1
    the same curves at that batch size. What was there stays. A curve timed while other
    processes used the CPU is cached with that note and reused while the machine is busy;
    the first run that needs it on an idle machine times it again."""
    path = profile_path(key)
    profile = None if refresh else load(path, key)

    def contended_here() -> float:  # over the curves that price this run's drafters at its batch size
        return max(profile.contended_for(name, batch) for name in drafters or [None])

    refine = profile is not None and cache.refine_now(
        f"the curves of {path.name} this run needs", contended_here(), log
    )
    profile, measured = _measure_missing(
        profile, path, key, target, longest_context, drafters, repeats, max_n, log, batch, refine
    )
    if measured:
        save(profile, path)
        contention.kept("cost profile", contended_here(), log)
    if measured or not path.with_suffix(".png").is_file():
        draw_curves(profile, path.with_suffix(".png"), log)
    return profile


def timed_curve(measure) -> Curve:
    """`measure()`'s curve, noting how many cores other processes used meanwhile."""
    with contention.watch() as usage:
        curve = measure()
    curve.contended_cores = round(usage.others or 0.0, 2)
    return curve


def stale(curve: Curve | None, max_n: int, refine: bool) -> bool:
    """Whether a cached curve must be timed (again): absent, shorter in n than this run
    needs, or contended on a machine idle now."""
    return curve is None or curve.max_n < max_n or (refine and contended(curve.contended_cores))


def to_time(curve: Curve | None, contexts: list[int], max_n: int, refine: bool) -> list[int]:
    """The contexts of `contexts` whose rows must be timed: all of them when the curve is
    stale, else those it lacks."""
    return list(contexts) if stale(curve, max_n, refine) else [c for c in contexts if c not in curve.contexts]


def with_contexts(curve: Curve | None, contexts: list[int], measure, max_n: int, refine: bool) -> Curve:
    """`curve` covering `contexts`: every row timed (`measure(contexts, max_n)`) when it is
    stale, else the rows it lacks, over the n it already holds, added beside its others."""
    if stale(curve, max_n, refine):
        return timed_curve(lambda: measure(contexts, max_n))
    added = timed_curve(lambda: measure(to_time(curve, contexts, max_n, refine), curve.max_n))
    rows = sorted(zip(curve.contexts + added.contexts, curve.ms + added.ms, curve.spread + added.spread))
    return Curve(
        contexts=[r[0] for r in rows],
        max_n=curve.max_n,
        ms=[r[1] for r in rows],
        spread=[r[2] for r in rows],
        ns=curve.ns,
        contended_cores=max(curve.contended_cores, added.contended_cores),
    )


def _measure_missing(
    profile, path, key, target, longest_context, drafters, repeats, max_n, log, batch, refine
) -> tuple[CostProfile, bool]:
    """(the profile with every missing curve measured, whether anything was)."""
    contexts = context_grid(longest_context)
    known = profile.target if profile is not None else None
    new = to_time(known, contexts, max_n, refine)
    if new:
        log(
            f"profiling {key['model']} ({key['dtype']}) forwards for n = 1..{max_n} new tokens at contexts {new} "
            f"(cached in {path})"
        )
        start = time.perf_counter()
        curve = with_contexts(known, contexts, lambda cs, n: measure_target(target, cs, n, repeats), max_n, refine)
        if profile is None:
            profile = CostProfile(key=key, target=curve)
        else:
            profile.target = curve
        if stale(known, max_n, refine) or not profile.commit_ms:
            profile.commit_ms = measure_commit(target, contexts[0], repeats)
            profile.step_overhead_ms = measure_step_overhead(target, profile, contexts[0])
        log(
            f"  target profiled in {time.perf_counter() - start:.0f} s: n=1 {curve.at(contexts[0], 1):.1f} ms, "
            f"n={max_n} {curve.at(contexts[0], max_n):.1f} ms at c={contexts[0]}"
        )
        measured = True
    else:
        measured = False
    for name, drafter in (drafters or {}).items():
        if drafter is None or not stale(profile.drafters.get(name), max_n, refine):
            continue
        log(f"profiling drafter {name} (n = 1..{max_n})")
        profile.drafters[name] = timed_curve(
            lambda: measure_drafter(drafter, target, draft_contexts(profile, longest_context), max_n, repeats)
        )
        measured = True
    if batch > 1:
        measured = (
            _ensure_batch(profile, target, drafters or {}, batch, longest_context, repeats, max_n, log, refine)
            or measured
        )
    return profile, measured


def _ensure_batch(profile, target, drafters, batch, longest_context, repeats, max_n, log, refine) -> bool:
    """Target and drafter curves at batch size `batch`, where missing, too short or contended."""
    measured = False
    known = profile.target_batches.get(str(batch))
    contexts = profile.target.contexts
    if to_time(known, contexts, max_n, refine):
        log(f"profiling {profile.key['model']} forwards at batch size {batch}")
        profile.target_batches[str(batch)] = with_contexts(
            known, contexts, lambda cs, n: measure_target(target, cs, n, repeats, batch=batch), max_n, refine
        )
        measured = True
    if str(batch) not in profile.step_overhead_batches or measured:
        profile.step_overhead_batches[str(batch)] = measure_step_overhead(
            target, profile, profile.target.contexts[0], batch=batch
        )
        log(
            f"  engine work per AR step at batch size {batch}: {profile.step_overhead_batches[str(batch)]:.2f} "
            f"ms (alone: {profile.step_overhead_ms:.2f})"
        )
        measured = True
    for name, drafter in drafters.items():
        if drafter is None or not stale(profile.drafter_batches.get(name, {}).get(str(batch)), max_n, refine):
            continue
        log(f"profiling drafter {name} at batch size {batch}")
        curve = timed_curve(
            lambda: measure_drafter(
                drafter, target, draft_contexts(profile, longest_context), max_n, repeats, batch=batch
            )
        )
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


def measure_step_overhead(target: TreeLM, profile: CostProfile, context: int, steps: int = 16, batch: int = 1) -> float:
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
