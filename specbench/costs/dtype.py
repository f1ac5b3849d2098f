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

from pathlib import Path

import torch

from specbench.costs.cache import measured_parts
from specbench.costs.fingerprint import device_fingerprint, fingerprint_id
from specbench.costs.profile import PROBE_CONTEXT, interleaved, tree_forward
from specbench.engine.candidates import DRAFTING_OFF
from specbench.engine.kernels import Compiled
from specbench.engine.lean import make_lm

PROBE_SIZES = (1, 4, 16, 64)
ONE_TOKEN = (1,)
CANDIDATES = ("bfloat16", "float32")
# 5 timings a point, each dtype's in the same passes: with 3 timed one dtype after the other,
# AMD EPYC Zen 3 read AR's one-token forward 39.4 ms in bf16 and 39.7 on fp16 weights, and
# AR decoded in bf16, where fp16 weights decoded 1.16x as fast side by side
REPEATS = 5
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
        return PROBE_SIZES
    drafts = (
        method_cfg.get("drafter") is not None
        or (method_cfg.get("tree") or {}).get("_target_") != DRAFTING_OFF["_target_"]
    )
    if not drafts:
        return ONE_TOKEN
    return (widest,) if widest else up_to(PROBE_SIZES, reach)


def up_to(grid: tuple[int, ...], reach: int | None) -> tuple[int, ...]:
    """The grid's sizes below `reach` and `reach` itself (the whole grid without one)."""
    return grid if reach is None or reach >= grid[-1] else (*(n for n in grid if n < reach), reach)


def choose(probe: dict[str, dict[str, float]], sizes: tuple[int, ...] = PROBE_SIZES, tie: str = "bfloat16") -> str:
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


def measure(
    load_model,
    sizes: tuple[int, ...] = PROBE_SIZES,
    repeats: int = REPEATS,
    forward: str = "auto",
    compile_choice=lambda model: Compiled(),
) -> dict[str, dict[str, float]]:
    """Forward ms over n tree rows after PROBE_CONTEXT rows at each n in `sizes`, per
    candidate dtype; `load_model(dtype)` returns the model in that dtype; `forward` as
    hardware.forward; `compile_choice(model)` how a run would compile that model
    (engine.compile). Both dtypes' points are timed in the same shuffled passes
    (profile.interleaved), so a slow spell of the machine cannot fall on one dtype alone."""
    lms = {}
    with torch.inference_mode():
        for dtype in CANDIDATES:
            model = load_model(dtype)
            lms[dtype] = make_lm(model, forward, compile_choice(model))
            lms[dtype].forward(contexts=[torch.randint(3, lms[dtype].vocab_size, (PROBE_CONTEXT,)).tolist()])
        timings = interleaved(
            {(dtype, n): (tree_forward(lm, n), None) for dtype, lm in lms.items() for n in sizes}, repeats
        )
    return {dtype: {str(n): round(timings[dtype, n][0], 3) for n in sizes} for dtype in CANDIDATES}


def resolve(
    hardware: dict,
    model_name: str,
    load_model,
    cache: Path,
    log=print,
    refresh: bool = False,
    sizes: tuple[int, ...] = PROBE_SIZES,
    compile_choice=lambda model, sizes: Compiled(),
    compile_mode: str = "off",
    fp16_weights: bool = False,
) -> tuple[str, dict | None]:
    """(dtype, the probe it came from or None) for a hardware config; `auto` is decided
    here at the forward sizes `sizes`, timed where the cached probe lacks them (`refresh`:
    timed again), each dtype's model run as `compile_choice(model, sizes)` says (the choice
    of engine.compile=`compile_mode` for a run of those sizes); explicit dtypes pass through.
    `fp16_weights`: fp32 may run on fp16 weights, so a CPU without native bf16 needs no
    timing (settled_by_isa)."""
    dtype = hardware.get("dtype")
    if dtype != "auto":
        return dtype, None
    fingerprint = device_fingerprint(hardware.get("device", "cpu"), hardware.get("threads"))
    if fingerprint["device"] == "cuda":
        return "bfloat16", {"rule": "bf16 on GPUs"}
    if (settled := settled_by_isa(fingerprint, fp16_weights)) is not None:
        log(f"hardware.dtype=auto: float32 ({settled['rule']})")
        return "float32", settled
    path = probe_path(cache, f"{model_name}-{hardware.get('forward', 'auto')}-compile-{compile_mode}", fingerprint)
    needed = sizes if 1 in sizes else (1, *sizes)  # one token too: AR's dtype, for the note

    def timed_parts(missing: list[str]) -> dict:
        ns = tuple(int(part[2:]) for part in missing)
        log(
            f"hardware.dtype=auto: timing bf16 and fp32 forwards of {model_name} on this CPU at n = "
            f"{', '.join(map(str, ns))} (once; cached in {path})"
        )
        forward = hardware.get("forward", "auto")
        probe = measure(load_model, ns, forward=forward, compile_choice=lambda model: compile_choice(model, needed))
        return {"context": PROBE_CONTEXT, "compile": compile_mode, "probe": probe}

    record, seconds = measured_parts(
        path, fingerprint, timed_parts, [f"n={n}" for n in needed], refresh, version=PROBE_VERSION, log=log
    )
    chosen, record = decided(record, sizes, "bfloat16" if native_bf16(fingerprint) else "float32")
    if seconds is not None:
        probe = record["probe"]
        shown = ", ".join(
            f"n={n}: bf16 {probe['bfloat16'][n]:.0f} / fp32 {probe['float32'][n]:.0f} ms"
            for n in sorted(probe["float32"], key=int)
        )
        log(f"  {chosen} at n in {list(sizes)} ({shown}; {seconds:.0f} s)")
    return chosen, record


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
