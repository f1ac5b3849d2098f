"""`engine.compile`: how the lean forward runs its decoder layers, `auto` decided by
timing on this machine.

- `packed`: the projections' and the output layer's weights are reordered once into oneDNN's blocked layout
  (what inductor's freezing does for CPU linears) instead of on every call. Measured on
  an AMX CPU (2 threads, SmolLM2-135M): bf16 1.2x faster per decoding step and 1.1x over
  64 tree rows; fp32 0.88x at one token but 1.05-1.14x from 4 tokens on.
- `torch`: torch.compile of the decoder layer (one graph for all 30 layers, dynamic
  shapes). Same CPU: 0.90-1.02x eager after ~20 s of compiling per process, so `auto`
  does not try it; whole-model compiles with freezing did not finish in 12 minutes on 2
  cores.
- `off`: the plain lean forward.
- `static`: forwards of up to 64 tokens per row with static shapes, each width padded to a
  bucket, captured as a CUDA graph per batch size and bucket on a GPU
  (StaticTreeLM in specbench/engine/lean.py); on a CPU the same forward runs eagerly (to check it).
- `auto`: on a CPU, the plain and packed forwards are timed over n new tokens at the
  sizes the run verifies (every probe size for a method that drafts, one token for AR; a
  size is timed once per machine and kept in the record beside the others), and packing
  is used from the smallest of them where it wins at that size and every larger one (the
  plain weights stay for smaller forwards); in a dtype other than
  fp32, one-token forwards are also timed with fp32 attention at batch sizes 1 and 8,
  which is used where it wins at both (see `Compiled.float_attention`); and drafter-sized
  projections are timed on int8 and on float weights, each call after the cache is flushed
  as a target forward flushes it, and drafters' projections run on int8 weights below the
  smallest probed row count where int8 stops winning (`Compiled.int8_drafts_below`;
  `engine.int8_drafts=off` never, nor where the drafter has no layers). Cached per model, dtype and device
  fingerprint. Each comparison is timed until a Mann-Whitney test tells the two apart, at most
  6 timings each (profile.compared); one still within the noise is a tie, which keeps the
  weights as they are (no packing, no int8 drafts, model-dtype attention) except that fp16
  weights need only be at least as fast. On a GPU, `static`; elsewhere off.
- fp16 weights (`engine.fp16_weights`; Compiled.fp16_weights): an fp32 model's linear
  layers on FBGEMM's fp16-weight matmul. It rounds the weights, so `auto` considers it
  only where hardware.dtype is `auto` (the run left the numbers to the tool, as it does
  when auto picks bf16): timed with the probe above and used where it is at least as fast
  as the plain or packed forward at every probed size up to 16 (`fp16_wins`); `on` uses it,
  `off` never. Neither is offered where torch no longer has FBGEMM's fp16-weight ops
  (`has_fp16_weights`; docs/fp16-weights.md).
"""

from __future__ import annotations

from pathlib import Path

import torch

from specbench.costs.cache import measured_parts
from specbench.costs.fingerprint import device_fingerprint, fingerprint_id
from specbench.costs.profile import PROBE_CONTEXT, compared, tree_forward
from specbench.engine.kernels import Compiled, has_fp16_weights, int8_linear, pack, packed_linear, packs, quantize_int8
from specbench.engine.lean import forward_note, make_lm, supports
from specbench.errors import require

MODES = ("auto", "packed", "torch", "static", "off")
PROBE_SIZES = (1, 2, 4, 8, 16, 64)
FP16_SIZES = (1, 2, 4, 8, 16)  # decoding steps on a CPU: trees auto picks there verify at most 16 tokens
PROBE_MOST = 6  # timings of a point whose comparison is still open before it is called a tie (profile.compared)
ATTENTION_BATCHES = (1, 8)
# a record of another version is timed again (what each version changed: docs/speed.md)
PROBE_VERSION = 6
INT8_MODES = ("auto", "off")
FP16_MODES = ("auto", "on", "off")
INT8_ROWS = (1, 2, 4, 8, 16, 32)
CACHE_FLUSH_BYTES = 256 * 2**20  # written between timed calls: more than any CPU's last-level cache here


def packed_from(probe: dict[str, dict], sizes: tuple[int, ...] = PROBE_SIZES) -> int | None:
    """The smallest probed n where packed weights are measurably faster with no larger
    probed size where they are measurably slower (None: faster nowhere, or not probed because
    this CPU cannot pack the dtype). `probe` maps "plain"/"packed" -> {str(n): ms}. A tie the
    probe could not break (`probe["ties"]`, "packed=plain") is neither: packing is not chosen
    for it (it changes the weights' layout for nothing measurable), but it does not stop
    packing from a smaller size that wins (AMD EPYC Zen 4, bf16: packed 31-42 against plain
    39-60 ms at n = 1..16, a tie at 64, once left the whole forward unpacked)."""
    chosen = None
    if "packed" not in probe:
        return None
    ties = probe.get("ties", {})
    for n in sorted(sizes, reverse=True):
        if "packed=plain" in ties.get(str(n), []):
            continue
        if probe["packed"][str(n)] >= probe["plain"][str(n)]:
            break
        chosen = n
    return chosen


def probed_ms(chosen: Compiled, record: dict | None) -> dict[int, float]:
    """The chosen forward's probed ms per forward size, at PROBE_CONTEXT rows (empty without
    a timed probe): fp16 weights at every size, else packed from `packed_from` and plain below."""
    probe = (record or {}).get("probe") or {}

    def variant(n: int) -> str:
        if chosen.fp16_weights:
            return "fp16"
        return "packed" if chosen.packed_from and n >= chosen.packed_from else "plain"

    sizes = sorted(int(n) for n in probe.get("plain", {}))
    return {n: probe[variant(n)][str(n)] for n in sizes if str(n) in probe.get(variant(n), {})}


def measure(
    model: torch.nn.Module,
    forward: str,
    sizes: tuple[int, ...] = PROBE_SIZES,
    most: int = PROBE_MOST,
    packed: bool = True,
    fp16: bool = False,
) -> dict[str, dict]:
    """Forward ms over n tree rows after PROBE_CONTEXT rows at each n in `sizes`, plain,
    (where `packed`) packed and (where `fp16`) fp16 weights, every point in the same shuffled
    passes (drift hits all alike), timed until the comparisons the rules make are told apart
    (profile.compared: plain against packed at every size, fp16 against each up to
    FP16_SIZES), and under "ties" (str(n) -> ["packed=plain", "fp16=plain", ...]) those that
    stayed within the noise."""
    lms = {"plain": make_lm(model, forward)} | (
        {"packed": make_lm(model, forward, Compiled(packed_from=1))} if packed else {}
    )
    lms |= {"fp16": make_lm(model, forward, Compiled(fp16_weights=True))} if fp16 else {}
    context = torch.randint(3, model.config.vocab_size, (PROBE_CONTEXT,)).tolist()
    pairs = [(("packed", n), ("plain", n)) for n in sizes if packed]
    pairs += [
        (("fp16", n), (other, n)) for n in sizes if fp16 and n <= FP16_SIZES[-1] for other in lms if other != "fp16"
    ]
    with torch.inference_mode():
        for lm in lms.values():
            lm.forward(contexts=[context])
        timings, tied = compared(
            {(name, n): (tree_forward(lm, n), None) for name, lm in lms.items() for n in sizes}, pairs, most
        )
    return {name: {str(n): round(timings[name, n][0], 3) for n in sizes} for name in lms} | {
        "ties": ties_by_size(tied, sizes)
    }


def measure_attention(
    model: torch.nn.Module, forward: str, batches: tuple[int, ...] = ATTENTION_BATCHES, most: int = PROBE_MOST
) -> dict[str, dict]:
    """One-token forward ms after PROBE_CONTEXT rows at each of `batches`, with attention in
    the model's dtype and in fp32 timed in the same shuffled passes until told apart
    (profile.compared), and under "ties" (str(batch) -> ["float32=model dtype"]) where not."""
    lms = {"model dtype": make_lm(model, forward), "float32": make_lm(model, forward, Compiled(float_attention=True))}
    probe = {name: {} for name in lms} | {"ties": {}}
    with torch.inference_mode():
        for batch in batches:  # each batch size needs its own cache state: timed per batch size
            contexts = [torch.randint(3, model.config.vocab_size, (PROBE_CONTEXT,)).tolist() for _ in range(batch)]
            for lm in lms.values():
                lm.reset(batch)
                lm.forward(contexts=contexts)
            points = {name: (tree_forward(lm, 1), None) for name, lm in lms.items()}
            timings, tied = compared(points, [("float32", "model dtype")], most)
            for name in lms:
                probe[name][str(batch)] = round(timings[name][0], 3)
            probe["ties"][str(batch)] = ["float32=model dtype"] if tied else []
    return probe


def measure_int8(model: torch.nn.Module, packed: bool, most: int = PROBE_MOST) -> dict[str, dict]:
    """Microseconds of the target's first-layer q, up and down projections in a row (a
    drafter's projections have these shapes) over n rows, on int8 weights and on float
    weights (packed where `packed`, from whichever is faster at n), each call after a write
    over CACHE_FLUSH_BYTES, since a draft forward starts with the drafter's weights evicted
    by the target forward before it; every point in the same shuffled passes, until int8 is
    told apart from each float kind (profile.compared), and under "ties" (str(n) ->
    ["int8=plain", ...]) where it was not."""
    layer = model.model.layers[0]
    weights = [layer.self_attn.q_proj.weight, layer.mlp.up_proj.weight, layer.mlp.down_proj.weight]
    kernels = {
        "plain": [lambda x, w=w: torch.nn.functional.linear(x, w) for w in weights],
        "int8": [lambda x, q=quantize_int8(w): int8_linear(x, *q) for w in weights],
    }
    if packed:
        kernels["packed"] = [lambda x, p=pack(w): packed_linear(x, p) for w in weights]
    flush = torch.empty(CACHE_FLUSH_BYTES // 4)

    def projections(row: list, n: int):
        inputs = [torch.randn(n, w.shape[1], dtype=w.dtype) for w in weights]
        return lambda: [kernel(x) for kernel, x in zip(row, inputs)]

    points = {
        (kind, n): (projections(row, n), lambda: flush.add_(1.0)) for kind, row in kernels.items() for n in INT8_ROWS
    }
    pairs = [(("int8", n), (kind, n)) for n in INT8_ROWS for kind in kernels if kind != "int8"]
    with torch.inference_mode():
        timings, tied = compared(points, pairs, most)
    return {
        "int8": {str(n): round(1000 * timings["int8", n][0], 1) for n in INT8_ROWS},
        "float": {str(n): round(1000 * min(timings[k, n][0] for k in kernels if k != "int8"), 1) for n in INT8_ROWS},
        "ties": ties_by_size(tied, INT8_ROWS),
    }


def ties_by_size(tied: list[tuple], sizes: tuple[int, ...]) -> dict[str, list[str]]:
    """The pairs profile.compared left tied, points keyed (kind, n), as the records keep
    them: str(n) -> ["packed=plain", ...] at every size (empty where none tied)."""
    return {str(n): [f"{a}={b}" for (a, m), (b, _) in tied if m == n] for n in sizes}


def int8_below(probe: dict[str, dict], rows: tuple[int, ...] = INT8_ROWS) -> int:
    """Drafters use int8 weights below the smallest probed row count where int8 is not
    faster (0: not even at one row; past the largest probed when it always wins); a tie
    with a float kind (`probe["ties"]`) is not faster: int8 rounds the drafter's weights."""
    ties = probe.get("ties", {})
    for n in rows:
        if probe["int8"][str(n)] >= probe["float"][str(n)] or ties.get(str(n)):
            return n if n > rows[0] else 0
    return 2 * rows[-1]


def fp16_wins(probe: dict[str, dict], sizes: tuple[int, ...] = FP16_SIZES) -> bool:
    """fp16 weights: at most the plain (or packed) forward's time at every probed size in
    `sizes`, a tie the probe could not break (`probe["ties"]`, "fp16=plain") counting as
    at most. They hold the same weights at every size (AR and verification must compute
    alike), so unlike packing they cannot be switched on from some n; wider forwards are
    prefill, a few percent of a run's time (AMD EPYC Zen 3, AVX2: fp16 35 / 51 / 104 ms at
    n = 1 / 4 / 16 against packed fp32's 55 / 98 / 134, and 304 against 268 at n = 64)."""
    if "fp16" not in probe:
        return False
    ties = probe.get("ties", {})
    return all(
        probe["fp16"][str(n)] <= probe[kind][str(n)] or f"fp16={kind}" in ties.get(str(n), [])
        for n in sizes
        for kind in ("plain", "packed")
        if kind in probe
    )


def check(engine: dict) -> None:
    """A bad engine.compile, engine.int8_drafts or engine.fp16_weights as one error line,
    before any model loads or probe runs."""
    mode, int8_mode = engine.get("compile", "auto"), engine.get("int8_drafts", "auto")
    require(mode in MODES, "engine.compile", f"unknown {mode!r}; choose one of {', '.join(MODES)}")
    require(
        int8_mode in INT8_MODES, "engine.int8_drafts", f"unknown {int8_mode!r}; choose one of {', '.join(INT8_MODES)}"
    )
    fp16_mode(engine, None)


def fp16_mode(engine: dict, requested_dtype: str | None) -> str:
    """engine.fp16_weights as it applies to a run that asked for `requested_dtype`
    (hardware.dtype before `auto` is resolved): `auto` rounds weights only for auto."""
    mode = engine.get("fp16_weights", "auto")
    require(mode in FP16_MODES, "engine.fp16_weights", f"unknown {mode!r}; choose one of {', '.join(FP16_MODES)}")
    return mode if mode != "auto" or requested_dtype == "auto" else "off"


def float_attention_wins(probe: dict[str, dict[str, float]], batches: tuple[int, ...] | None = None) -> bool:
    """fp32 attention for one-token forwards: faster at every probed batch size (of
    `batches`, the run's: batch size 1 alone, or every probed one for a batched run), where
    a tie the probe could not break (`probe["ties"]`) is not faster."""
    keys = [str(b) for b in batches] if batches else list(probe["model dtype"])
    ties = probe.get("ties", {})
    return all(probe["float32"][b] < probe["model dtype"][b] and not ties.get(b) for b in keys)


def attention_batches(batch: int) -> tuple[int, ...]:
    """The batch sizes whose one-token attention a run's choice rests on."""
    return (1,) if batch == 1 else ATTENTION_BATCHES


def probe_parts(sizes: tuple[int, ...], dtype: str, int8: bool, batch: int = 1) -> list[str]:
    """The parts of the compile probe a run needs: its forward sizes, one-token attention in
    fp32 (a dtype other than fp32; at batch size 8 too for a batched run), and drafter
    projections on int8 weights (a drafter with layers, `int8`)."""
    attention = (["attention"] + (["attention-batched"] if batch > 1 else [])) if dtype != "float32" else []
    return [f"n={n}" for n in sizes] + attention + (["int8"] if int8 else [])


def with_int8(path: Path, fingerprint: dict, timed_parts, parts: list[str], seconds: float | None, log):
    """The probe record with the drafters' int8 timings added where missing, and the seconds
    probed in all (None: nothing timed)."""
    record, more = measured_parts(path, fingerprint, timed_parts, [*parts, "int8"], version=PROBE_VERSION, log=log)
    return record, more if seconds is None else seconds + (more or 0.0)


def resolve(
    mode: str,
    model: torch.nn.Module,
    model_name: str,
    hardware: dict,
    cache: Path,
    log=print,
    refresh: bool = False,
    int8_mode: str = "auto",
    fp16: str = "off",
    sizes: tuple[int, ...] = PROBE_SIZES,
    drafter_layers: bool = True,
    batch: int = 1,
) -> tuple[Compiled, dict | None]:
    """(how to run the lean forward, the probe behind an `auto` choice or None); `int8_mode`
    is engine.int8_drafts, `fp16` engine.fp16_weights as it applies (fp16_mode). `auto`
    times, and chooses over, only the forward `sizes` the run verifies (every probed size
    for a method that drafts, one token for AR: packing from the smallest of them where it
    wins at every larger one), and drafter projections only where a drafter with layers
    (`drafter_layers`) runs."""
    check({"compile": mode, "int8_drafts": int8_mode})
    weight_dtype = next(model.parameters()).dtype
    lean = hardware.get("forward", "auto") != "hf" and supports(model)
    device = hardware.get("device", "cpu")
    fp16_possible = lean and device == "cpu" and weight_dtype == torch.float32 and has_fp16_weights()
    fixed = set_without_timing(mode, model, hardware, fp16, fp16_possible, lean)
    if fixed is not None:
        return fixed
    dtype = str(weight_dtype).removeprefix("torch.")
    fingerprint = device_fingerprint(device, hardware.get("threads"))
    path = cache / f"compile-{model_name}-{dtype}-{fingerprint_id(fingerprint)}.json"
    int8 = int8_mode == "auto" and drafter_layers

    def timed_parts(missing: list[str]) -> dict:
        log(
            f"engine.compile=auto: timing plain and packed-weight forwards of {model_name} ({dtype}) on this "
            f"CPU: {', '.join(missing)} (once; cached in {path})"
        )
        return probe_record(model, hardware.get("forward", "auto"), missing, fp16_possible)

    parts = probe_parts(sizes, dtype, False, batch)
    record, seconds = measured_parts(path, fingerprint, timed_parts, parts, refresh, version=PROBE_VERSION, log=log)
    probe = record["probe"]
    # fp16_possible again: a probe cached under a torch that had the fp16 ops holds their timings
    if fp16 == "auto" and fp16_possible and fp16_wins(probe, tuple(n for n in sizes if n <= FP16_SIZES[-1])):
        chosen, int8 = Compiled(fp16_weights=True), False  # drafters then run on fp16 weights too: no int8
    else:
        if int8:  # timed only where the forward stays in the model's dtype
            record, seconds = with_int8(path, fingerprint, timed_parts, parts, seconds, log)
        chosen = Compiled(
            packed_from=packed_from(record["probe"], sizes),
            float_attention="attention" in record
            and float_attention_wins(record["attention"], attention_batches(batch)),
            int8_drafts_below=int8_below(record["int8"]) if int8 else 0,
        )
    if seconds is not None:
        log(f"  {chosen} ({shown(record, dtype, sizes, int8, batch)}; {seconds:.0f} s)")
    return chosen, record | {"sizes": list(sizes)}


def set_without_timing(
    mode: str, model: torch.nn.Module, hardware: dict, fp16: str, fp16_possible: bool, lean: bool
) -> tuple[Compiled, dict | None] | None:
    """The choice where the config or the device makes it (None: `auto` on a CPU, timed)."""
    device = hardware.get("device", "cpu")
    weight_dtype = next(model.parameters()).dtype
    if fp16 == "on":
        require(
            fp16_possible,
            "engine.fp16_weights",
            "on needs the lean forward of a float32 model on a CPU whose torch has FBGEMM's fp16-weight ops "
            f"(here: {device}, {str(weight_dtype).removeprefix('torch.')}); use auto or off",
        )
        return Compiled(fp16_weights=True), None
    if mode == "off" or not lean:
        require(
            mode in ("off", "auto"),
            "engine.compile",
            f"{mode} needs the lean forward, and this run's is {forward_note(model, hardware.get('forward', 'auto'))}",
        )
        return Compiled(), None
    if mode in ("torch", "static"):
        return Compiled(torch=mode == "torch", static=mode == "static"), None
    if next(model.parameters()).is_cuda:
        return Compiled(static=True), {
            "rule": "auto on a GPU: static shapes, each forward's width padded to a bucket, CUDA graphs per batch size "
            "and bucket"
        }
    on_cpu = device == "cpu" and torch.backends.mkldnn.is_available()
    if mode == "packed":
        require(
            on_cpu,
            "engine.compile",
            f"packed weights are oneDNN's CPU layout; hardware.device is {device!r} (use auto, torch or off)",
        )
        require(
            packs(weight_dtype),
            "engine.compile",
            f"oneDNN cannot pack {str(weight_dtype).removeprefix('torch.')} weights on this CPU (bf16 needs "
            "avx512bw/vl/dq or avx_ne_convert); use auto, off or hardware.dtype=float32",
        )
        return Compiled(packed_from=1), None
    if not on_cpu:
        return Compiled(), {"rule": "auto compiles nothing off the CPU (engine.compile=torch to try torch.compile)"}
    return None


def probe_record(model: torch.nn.Module, forward: str, missing: list[str], fp16_possible: bool) -> dict:
    """The compile probe's `missing` parts, timed: forward sizes ("n=4"), one-token attention
    ("attention", "attention-batched") and drafter projections on int8 weights ("int8")."""
    weight_dtype = next(model.parameters()).dtype
    record = {
        "dtype": str(weight_dtype).removeprefix("torch."),
        "context": PROBE_CONTEXT,
        "rule": "packed weights from the smallest of the run's forward sizes where they are faster at every larger "
        "one; fp32 attention for one-token forwards where it is faster at every probed batch size; fp16 weights "
        "(where hardware.dtype=auto) where they are at least as fast as plain or packed at every size of the run "
        "up to 16",
    }
    ns = tuple(int(part[2:]) for part in missing if part.startswith("n="))
    if ns:
        record["probe"] = measure(model, forward, ns, packed=packs(weight_dtype), fp16=fp16_possible)
    batches = [b for part, b in (("attention", 1), ("attention-batched", 8)) if part in missing]
    if batches:
        record["attention"] = measure_attention(model, forward, tuple(batches))
    if "int8" in missing:
        record["int8"] = measure_int8(model, packs(weight_dtype))
    return record


def shown(record: dict, dtype: str, sizes: tuple[int, ...], int8: bool, batch: int) -> str:
    """A compile probe's timings at the run's sizes, for the console."""
    probe = record["probe"]
    kinds = [kind for kind in ("plain", "packed", "fp16") if kind in probe]
    text = " / ".join(kinds) + ": "
    text += ", ".join(f"n={n}: " + " / ".join(f"{probe[kind][str(n)]:.1f}" for kind in kinds) + " ms" for n in sizes)
    if "attention" in record:
        attention = record["attention"]
        text += f"; one token, {dtype} / fp32 attention: " + ", ".join(
            f"B={b}: {attention['model dtype'][b]:.1f} / {attention['float32'][b]:.1f} ms"
            for b in map(str, attention_batches(batch))
        )
    if int8:
        text += "; drafter projections after a cache flush, float / int8: " + ", ".join(
            f"n={n}: {record['int8']['float'][str(n)]:.0f} / {record['int8']['int8'][str(n)]:.0f} us" for n in INT8_ROWS
        )
    ties = [
        f"{pair} at {unit}{key}"
        for part, unit in (("probe", "n="), ("attention", "B="), ("int8", "n="))
        for key, pairs in record.get(part, {}).get("ties", {}).items()
        if part != "probe" or int(key) in sizes
        for pair in pairs
    ]
    if ties:
        text += f"; within this machine's noise, taken as equal: {', '.join(ties)}"
    return text
