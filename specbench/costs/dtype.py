"""`hardware.dtype: auto`: bf16 where the hardware runs it at least as fast as fp32 over
the tree sizes speculative decoding verifies, fp32 otherwise.

On GPUs bf16 is the answer without measuring. On a CPU the answer depends on its ISA:
with native bf16 matmul (avx512_bf16, AMX) a bf16 forward over 16 tokens costs little
more than over one; on AVX2-only CPUs torch runs a bf16 linear layer as one GEMV per
token, so a 64-token bf16 forward costs many times the fp32 one. So we measure: one
forward at a few sizes in both dtypes, each run as `engine.compile` runs it in that dtype
(packed weights where they win for it: packing can help one dtype much more than the
other), cached per model, compile mode and device fingerprint. Only the sizes a run's
decision needs are timed (one token for AR, unless the dtypes tie there), each at most
once per machine: a later run adds the sizes it lacks to the same record.
"""

from __future__ import annotations

import time
from pathlib import Path

import torch

from specbench.costs import cache, contention, pool
from specbench.costs import compile as compile_rule
from specbench.costs.fingerprint import device_fingerprint, fingerprint_id
from specbench.costs.profile import PROBE_CONTEXT, compared, tree_forward
from specbench.engine.candidates import DRAFTING_OFF
from specbench.engine.lean import make_lm
from specbench.models import registry

# the dtype probe's sizes: coarser than the compile probe's (compile.PROBE_SIZES), which needs every
# size to find the smallest from which packing wins; four bracket where bf16 and fp32 cross
DTYPE_SIZES = (1, 4, 16, 64)
ONE_TOKEN = (1,)
CANDIDATES = ("bfloat16", "float32")
# timings of a size whose two dtypes the probe cannot yet tell apart (profile.compared), as many
# as a noisy point got when every point was timed alike: with 3 timed one dtype after the other,
# AMD EPYC Zen 3 read AR's one-token forward 39.4 ms in bf16 and 39.7 on fp16 weights, and AR
# decoded in bf16, where fp16 weights decoded 1.16x as fast side by side
MOST = 15
# a probe recorded under another version is timed again (what each version changed: docs/speed.md)
PROBE_VERSION = 3
# one-token forwards this close are a tie: AMD EPYC Zen 3, fp32 on fp16 weights against bf16, two
# probes an hour apart read 40.7 / 42.5 ms and 34.5 / 33.1 ms
ONE_TOKEN_TIE = 0.05


def verified_sizes(method_cfg: dict | None, widest: int | None = None, reach: int | None = None) -> tuple[int, ...]:
    """The forward sizes whose cost decides a method's dtype: one token for a method that
    drafts nothing; for one whose settings fix the widest forward it verifies (`widest`,
    TreePolicy.widest: TALON's budget, EAGLE's total_tokens, a chain's gamma + 1), that width,
    where its step's cost lies (an AMX Xeon: fp32 32 vs bf16 37 ms at one token, 129 vs 56 at
    64; TALON at budget 60 decoded at 0.58x AR in fp32); every probed size otherwise (and
    without a method), up to `reach`, the widest forward any of its `auto` shapes verifies
    (methods.reach; an SpS chain of at most 10 drafts is not timed at 64 tokens)."""
    if method_cfg is None:
        return DTYPE_SIZES
    drafts = (
        method_cfg.get("drafter") is not None
        or (method_cfg.get("tree") or {}).get("_target_") != DRAFTING_OFF["_target_"]
    )
    if not drafts:
        return ONE_TOKEN
    return (widest,) if widest else up_to(DTYPE_SIZES, reach)


def run_sizes(method_cfg: dict | None) -> tuple[int, ...]:
    """The forward sizes whose cost decides a run of this method (verified_sizes)."""
    verified = verified_sizes(method_cfg)
    if verified == ONE_TOKEN or "_target_" not in (method_cfg or {}).get("tree", {}):
        return verified  # AR's one token; a tree with no policy named: every probed size
    from specbench.engine import methods  # here, not at import: the engine path (device_check) runs without hydra

    return verified_sizes(method_cfg, methods.widest(method_cfg), methods.reach(method_cfg))


def compile_sizes(verified: tuple[int, ...]) -> tuple[int, ...]:
    """The forward sizes the compile probe times for a run that verifies `verified`
    (verified_sizes): one token for AR, its grid up to the widest verified for a method that
    drafts (packing is chosen from the smallest size where it wins at every larger one)."""
    return verified if verified == ONE_TOKEN else up_to(compile_rule.PROBE_SIZES, max(verified))


def up_to(grid: tuple[int, ...], reach: int | None) -> tuple[int, ...]:
    """The grid's sizes below `reach` and `reach` itself (the whole grid without one)."""
    return grid if reach is None or reach >= grid[-1] else (*(n for n in grid if n < reach), reach)


def choose(probe: dict[str, dict[str, float]], sizes: tuple[int, ...] = DTYPE_SIZES, tie: str = "bfloat16") -> str:
    """bf16 when its forward is at most fp32's at every probed size, else fp32. One-token
    forwards within ONE_TOKEN_TIE of each other are a tie the probe cannot break, and timing
    wider forwards to break it cost an AR run minutes: `tie` then, the dtype of this ISA's
    wide forwards (bf16 with native bf16 matmul, else fp32). `probe` maps dtype -> {str(n): ms}."""
    bf16, fp32 = probe["bfloat16"], probe["float32"]
    if sizes == ONE_TOKEN and one_token_tie(probe):
        return tie
    return "bfloat16" if all(bf16[str(n)] <= fp32[str(n)] for n in sizes) else "float32"


def contender(probe: dict[str, dict[str, float]], chosen: str, sizes: tuple[int, ...]) -> str | None:
    """The other dtype where it is faster at some of `sizes` (the rule chose `chosen` for
    being at most as slow at every size): a method whose tree shape is still to be calibrated
    is then priced in both dtypes (plan.weigh_dtype), since its shape decides which sizes it
    verifies."""
    other = next(d for d in CANDIDATES if d != chosen)
    return other if any(probe[other][str(n)] < probe[chosen][str(n)] for n in sizes) else None


def one_token_tie(probe: dict[str, dict[str, float]]) -> bool:
    """Whether the one-token forwards are too close to tell the dtypes apart."""
    bf16, fp32 = probe["bfloat16"]["1"], probe["float32"]["1"]
    return abs(bf16 - fp32) <= ONE_TOKEN_TIE * min(bf16, fp32)


def native_bf16(fingerprint: dict) -> bool:
    """Whether the CPU multiplies bf16 matrices natively (avx512_bf16, AMX, Arm's bf16) and no
    ISA cap in the environment keeps torch and oneDNN off those kernels."""
    capped = any(v.lower().startswith(("avx2", "default")) for v in (fingerprint.get("isa_limits") or {}).values())
    return not capped and any(f in fingerprint.get("isa", []) for f in ("avx512_bf16", "amx_bf16", "bf16"))


def settled_by_isa(fingerprint: dict, fp16_weights: bool) -> dict | None:
    """The choice where the ISA makes it without timing: no native bf16 matmul and fp16
    weights on offer. fp32 activations on fp16 weights read a bf16 forward's bytes (one-token
    forwards tie: AMD EPYC Zen 3, 35 against bf16's 37 ms) while bf16 runs a wide forward as
    one GEMV per token there (1,180 against fp32's 315 ms at 64 tokens), so fp32 wins every
    size a run verifies and bf16 is never timed."""
    if native_bf16(fingerprint) or not fp16_weights:
        return None
    isa = ", ".join(fingerprint.get("isa", [])) or "none listed"
    return {
        "rule": "no native bf16 matmul on this CPU (ISA: "
        f"{isa}{'; capped by ' + str(fingerprint['isa_limits']) if fingerprint.get('isa_limits') else ''}): fp32, "
        "its forward on fp16 weights where the compile probe finds them fastest; bf16 not timed",
        "ar_dtype": "float32",
        "sizes": [],
    }


def probe_path(cache: Path, model_name: str, fingerprint: dict) -> Path:
    return cache / f"dtype-{model_name}-{fingerprint_id(fingerprint)}.json"


def forward_in(
    model_cfg: dict, dtype: str, hardware: dict, engine: dict, sizes: tuple[int, ...], batch: int, name: str
):
    """The target's forward in `dtype` as engine.compile runs it in that dtype for a run
    verifying `sizes` (packing can help one dtype much more than the other), freshly built
    so the probe's cache holds its own rows; `name`: the model's registry.cache_name. The
    target alone is timed: no drafter layers."""
    model = pool.target(model_cfg, dtype, hardware["device"])[0]
    compiled, _ = compile_rule.resolve(
        engine.get("compile", "auto"),
        model,
        name,
        {**hardware, "dtype": dtype},
        cache.root(),
        fp16=compile_rule.fp16_mode(engine, hardware.get("dtype")),
        sizes=compile_sizes(sizes),
        drafter_layers=False,
        batch=batch,
    )
    return make_lm(model, hardware.get("forward", "auto"), compiled)


def measure(lms: dict, sizes: tuple[int, ...] = DTYPE_SIZES) -> dict[str, dict[str, float]]:
    """Forward ms over n tree rows after PROBE_CONTEXT rows at each n in `sizes`, per dtype
    of `lms` (dtype -> its forward, forward_in). Both dtypes' points are timed in the same
    shuffled passes, so a slow spell of the machine cannot fall on one dtype alone, and a
    size stops being timed once its two dtypes are told apart (profile.compared: most sizes
    differ 1.5-3x and do after 4 timings; a near tie is timed up to MOST)."""
    with torch.inference_mode():
        for lm in lms.values():
            lm.forward(contexts=[torch.randint(3, lm.vocab_size, (PROBE_CONTEXT,)).tolist()])
        points = {(d, n): (tree_forward(lm, n), None) for d, lm in lms.items() for n in sizes}
        pairs = [tuple((d, n) for d in lms) for n in sizes]
        timings, _ = compared(points, pairs, MOST)
    return {d: {str(n): round(timings[d, n][0], 3) for n in sizes} for d in lms}


def resolve(
    hardware: dict,
    model_cfg: dict,
    method_cfg: dict | None = None,
    engine: dict | None = None,
    batch: int = 1,
    refresh: bool = False,
    log=print,
) -> tuple[str, dict | None]:
    """(dtype, the probe it came from or None) for `hardware.dtype`: explicit dtypes pass
    through; `auto` is bf16 on GPUs, fp32 where the ISA settles it (settled_by_isa), else
    decided at the forward sizes `method_cfg` verifies (run_sizes; every probed size without
    one), those the cached probe lacks timed (`refresh`: timed again), each dtype's forward
    as `engine.compile` runs it (forward_in; its attention probe at batch size `batch`)."""
    if hardware.get("dtype") != "auto":
        return hardware.get("dtype"), None
    engine = engine or {}
    fingerprint = device_fingerprint(hardware.get("device", "cpu"), hardware.get("threads"))
    if fingerprint["device"] == "cuda":
        return "bfloat16", {"rule": "bf16 on GPUs"}
    mode, fp16 = engine.get("compile", "auto"), compile_rule.fp16_mode(engine, "auto")
    fp16_weights = fp16 != "off" and compile_rule.has_fp16_weights() and hardware.get("forward", "auto") != "hf"
    if (settled := settled_by_isa(fingerprint, fp16_weights)) is not None:
        log(f"hardware.dtype=auto: float32 ({settled['rule']})")
        return "float32", settled
    name = registry.cache_name(model_cfg)
    compile_mode = mode if fp16 == "off" else f"{mode}-fp16-weights-{fp16}"
    path = probe_path(cache.root(), f"{name}-{hardware.get('forward', 'auto')}-compile-{compile_mode}", fingerprint)
    sizes = run_sizes(method_cfg)
    needed = sizes if 1 in sizes else (1, *sizes)  # one token too: AR's dtype, for the note
    record, missing = cache.lacking(path, fingerprint, [f"n={n}" for n in needed], refresh, PROBE_VERSION, log)
    if missing:
        ns = tuple(int(part[2:]) for part in missing)
        log(
            f"hardware.dtype=auto: timing bf16 and fp32 forwards of {name} on this CPU at n = "
            f"{', '.join(map(str, ns))} (once; cached in {path})"
        )
        start = time.perf_counter()
        lms = {d: forward_in(model_cfg, d, hardware, engine, needed, batch, name) for d in CANDIDATES}
        with contention.watch() as usage:
            fresh = {"context": PROBE_CONTEXT, "compile": compile_mode, "probe": measure(lms, ns)}
        record = cache.added(path, fingerprint, record, missing, fresh, usage.others, PROBE_VERSION, log)
        seconds = time.perf_counter() - start
    chosen, record = decided(record, sizes, "bfloat16" if native_bf16(fingerprint) else "float32")
    if missing:
        log(f"  {chosen} at n in {list(sizes)} ({shown(record['probe'])}; {seconds:.0f} s)")
    return chosen, record


def shown(probe: dict[str, dict[str, float]]) -> str:
    """The probe's timings for the console."""
    return ", ".join(
        f"n={n}: bf16 {probe['bfloat16'][n]:.0f} / fp32 {probe['float32'][n]:.0f} ms"
        for n in sorted(probe["float32"], key=int)
    )


def decided(record: dict, sizes: tuple[int, ...], tie: str) -> tuple[str, dict]:
    """(dtype, the probe record with its rule, AR's dtype, a contender and a note) at the
    run's `sizes`; `tie`: the dtype of a one-token tie (choose)."""
    probe = record["probe"]
    chosen = choose(probe, sizes, tie)
    if sizes == ONE_TOKEN:
        why = (
            f" (one-token forwards within {ONE_TOKEN_TIE:.0%}, which the probe cannot tell apart: {tie}, the dtype "
            f"of this ISA's wide forwards; wider forwards not timed)"
            if one_token_tie(probe)
            else ""
        )
    else:
        why = ", the widest forward this method's settings verify" if len(sizes) == 1 else ""
    record = {**record, "rule": f"bf16 if <= fp32 at every n in {list(sizes)}{why}", "sizes": list(sizes)}
    # a tie: the dtype drafting uses
    plain = record["ar_dtype"] = chosen if one_token_tie(probe) else choose(probe, ONE_TOKEN, tie)
    rival = contender(probe, chosen, sizes)
    if rival:
        record["contender"] = rival
    if plain != chosen:
        record["note"] = (
            f"plain AR would run in {plain} here (one-token forward {probe[plain]['1']:.0f} vs "
            f"{probe[chosen]['1']:.0f} ms): "
            f"this method's speedup is over AR in {chosen}, the dtype of the tree sizes it verifies"
        )
    return chosen, record
