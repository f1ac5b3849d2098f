"""One target forward per batch, shared by every head that trains on that batch.

The target's forward with its softmax is ~40% of an EAGLE-3 training step on a CPU (bf16,
8 x 256 tokens, AMD EPYC Zen 4, 2 threads), so heads that learn from the same text (EAGLE-3,
EAGLE-1, Medusa, Hydra) train together for less than apart (specbench.train.joint: 1.53x).
Each head trainer describes its head as a Trainee; a single-head run is a run of one."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import torch

from specbench.errors import require
from specbench.train.data import batches, collate, target_entry
from specbench.train.loop import ema, fit
from specbench.train.validation import MAIN_SET, append_point, held_out_counts, prepare, set_points

Hits = list[tuple[torch.Tensor, torch.Tensor]]


@dataclass
class TargetPass:
    """What one target forward over a batch gives every head: the batch, the target's
    hidden states (in its dtype) and its logits in fp32."""

    ids: torch.Tensor
    labels: torch.Tensor
    hidden_states: tuple[torch.Tensor, ...]
    logits: torch.Tensor


def read_target(target, ids: torch.Tensor, labels: torch.Tensor) -> TargetPass:
    with torch.no_grad():
        result = target(input_ids=ids, output_hidden_states=True)
    return TargetPass(ids, labels, result.hidden_states, result.logits.float())


@dataclass
class Trainee:
    """One head's part of a run: its module, its loss on a target pass, what its learning
    curve keeps of a validation batch (`keep`, computed once) and scores (`hits`: per
    draft step, with `chain` giving accepted drafts and anchors), and its export to `out`
    (called with the curve's path and the fit's record)."""

    name: str
    out: Path
    module: torch.nn.Module
    loss: Callable[[TargetPass], tuple[torch.Tensor, list[float]]]
    keep: Callable[[TargetPass], tuple]
    hits: Callable[[tuple], Hits]
    chain: Callable[[Hits], tuple[int, int]]
    export: Callable[[Path, dict], None]

    @property
    def curve_path(self) -> Path:
        return self.out.with_name(self.out.name + ".curve.jsonl")


def target_passes(target, rows: list[dict], batch: int, length: int) -> Iterator[TargetPass]:
    """The target's pass over `rows`, `batch` rows at a time (collated to `length`)."""
    for start in range(0, len(rows), batch):
        yield read_target(target, *collate(rows[start : start + batch], length))


def saved_states(checkpoint: Path, names: list[str]) -> dict[str, dict | None]:
    """Each head's module state in a run's checkpoint (None before the first), so a
    resumed head is rebuilt with the vocabulary it was trained with. A run of one head
    checkpoints that module as it is; a run of several, one ModuleDict keyed by name."""
    if not checkpoint.exists():
        return dict.fromkeys(names)
    state = torch.load(checkpoint)["module"]
    if len(names) == 1:
        return {names[0]: state}
    held = sorted({k.split(".")[0] for k in state})
    require(
        held == sorted(names),
        "--train",
        f"{checkpoint} holds {' '.join(held)}: train those to resume it, or choose another --out",
    )
    return {name: {k[len(name) + 1 :]: v for k, v in state.items() if k.startswith(name + ".")} for name in names}


def train_heads(
    trainees: list[Trainee],
    target,
    data: tuple[list[dict], int, list[dict]],
    args,
    checkpoint: Path,
    desc: str,
    lrs: dict[str, float] | None = None,
) -> dict:
    """Fit every trainee on the same batches of `data` (training rows, how many of them
    are the target's answers, validation rows), one target forward a batch, then export
    each with its training record. Heads are clipped apart under one schedule, so training
    them together equals training each alone on the same rows. `lrs`: a head's own peak
    learning rate instead of --lr (a warm-started head may need a gentler one)."""
    rows, n_target, validation = data
    module = trainees[0].module if len(trainees) == 1 else torch.nn.ModuleDict({t.name: t.module for t in trainees})

    widths = {}  # how many of the joined metrics are each head's
    losses = {}  # each head's own loss, averaged as fit averages the total

    def loss_fn(ids, labels):
        """One target pass, then each head's loss and backward in turn: a head's graph is
        freed before the next is built (the four heads: 12.2 s a step against 14.4 s for
        one backward of the sum, AMD EPYC Zen 4, 2 threads, bf16 target, 8 x 256 tokens)."""
        batch = read_target(target, ids, labels)
        total, joined = 0.0, []
        for t in trainees:
            with torch.autocast("cpu", dtype=torch.bfloat16, enabled=args.head_autocast):
                loss, metrics = t.loss(batch)
            loss.backward()
            total, joined = total + loss.detach(), joined + metrics
            widths[t.name] = len(metrics)
            losses[t.name] = ema(losses.get(t.name), loss.item())
        return total, joined

    kept = {}  # per validation set, per batch, what each trainee keeps of the target's pass

    def evaluate(step: int, seen: int) -> None:
        for name, held in validation.items():
            if name not in kept:
                kept[name] = [
                    [t.keep(batch) for t in trainees] for batch in target_passes(target, held, args.batch, args.length)
                ]
        with torch.no_grad():
            for i, t in enumerate(trainees):
                by_set = {name: (t.hits(k[i]) for k in batches_kept) for name, batches_kept in kept.items()}
                append_point(t.curve_path, set_points(step, seen, by_set, t.chain))

    peaks = {t.name: (lrs or {}).get(t.name, args.lr) for t in trainees}
    result = fit(
        module,
        lambda step: batches(rows, args.batch, args.length, args.seed + step),
        loss_fn,
        checkpoint,
        args.steps,
        args.minutes,
        [peaks[t.name] for t in trainees],
        0.0,
        desc,
        evaluate=evaluate if validation[MAIN_SET] else None,
        checkpoint_every=args.checkpoint_every,
    )
    common = {
        "target": target_entry(tuple(args.target))["name"],
        "data": [str(d) for d in args.data],
        "target_answers": n_target,
        "sharegpt_answers": len(rows) - n_target,
        **held_out_counts(validation),
        **({"trained_together": [t.name for t in trainees]} if len(trainees) > 1 else {}),
    }
    settings = {
        "batch": args.batch,
        "length": args.length,
        "schedule_steps": args.steps,
        "seed": args.seed,
        "target_dtype": args.target_dtype,
        "head_autocast": args.head_autocast,
    }
    start = 0
    for t in trainees:
        joined, width = result["final_metrics_ema"], widths.get(t.name, 0)
        own = {
            **result,
            "final_loss_ema": losses.get(t.name),
            "final_metrics_ema": joined[start : start + width] if joined else None,
        }
        start += width
        t.export(t.curve_path, {**common, **own, **settings, "lr": peaks[t.name]})
        print(f"saved {t.out}: {own}")
    return result


def train_alone(args, name: str, trainee, desc: str) -> None:
    """A head trainer's own run: `trainee(args, target, tokenizer, rows, out, saved)`
    builds its one head, trained on the shared loop."""
    target, tokenizer, out, checkpoint, _, validation, rows, n_target = prepare(args)
    head = trainee(args, target, tokenizer, rows, out, saved_states(checkpoint, [name])[name])
    train_heads([head], target, (rows, n_target, validation), args, checkpoint, desc)
