"""The optimisation loop both drafter trainers share: cosine schedule with warm-up,
gradient clipping, a wall-time budget, and a checkpoint to resume from."""

from __future__ import annotations

import math
import os
import signal
import time
from argparse import ArgumentParser
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import torch
from tqdm import tqdm

from specbench.train.data import add_target_argument

WARMUP = 50
CHECKPOINT_EVERY = 50


def add_fit_arguments(
    parser: ArgumentParser, *, sharegpt_answers: int, length: int, steps: int, minutes: float, lr: float
) -> None:
    """The options every drafter trainer takes, with that trainer's defaults."""
    parser.add_argument(
        "--data",
        nargs="*",
        default=[],
        help="the target's answers: JSONL files (specbench.train.sps_draft generate) or corpus directories "
        "(specbench.train.corpus)",
    )
    parser.add_argument(
        "--answers",
        type=int,
        default=0,
        metavar="PROMPTS",
        help="first have the target answer this many training prompts (greedy and sampled, as specbench.train.corpus "
        "does, into OUT.corpus/, resumed when re-run) and train on those answers too",
    )
    add_target_argument(parser)
    parser.add_argument("--out", required=True)
    parser.add_argument("--sharegpt-answers", type=int, default=sharegpt_answers)
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--length", type=int, default=length)
    parser.add_argument("--steps", type=int, default=steps)
    parser.add_argument("--minutes", type=float, default=minutes, help="stop after this long (re-run to continue)")
    parser.add_argument("--lr", type=float, default=lr)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--checkpoint-every",
        type=int,
        default=CHECKPOINT_EVERY,
        help="steps between checkpoints (and learning-curve points)",
    )
    parser.add_argument(
        "--validation-rows", type=int, default=32, help="held-out greedy target answers for the learning curve"
    )
    parser.add_argument(
        "--validation-after",
        type=int,
        default=0,
        help="hold out only greedy answers after this many (in corpus order), e.g. those a warm start never trained on",
    )


def add_head_arguments(parser: ArgumentParser) -> None:
    """The options of the trainers of heads on the target's features (EAGLE-3, Medusa, Hydra)."""
    parser.add_argument("--draft-vocab", type=int, default=8192)
    parser.add_argument(
        "--target-dtype",
        default="float32",
        help="bfloat16 only where the CPU has native bf16 matmul (see the cost profile)",
    )
    add_autocast_argument(parser)


def add_autocast_argument(parser: ArgumentParser) -> None:
    """--head-autocast, for every trainer of heads on the target's features."""
    parser.add_argument(
        "--head-autocast",
        action="store_true",
        help="the heads' forward and backward under bf16 autocast (weights and optimizer stay fp32): ~1.5x faster "
        "where the CPU has native bf16 matmul (avx512_bf16, AMX), slower on AVX2-only CPUs",
    )


def ema(average: float | None, value: float) -> float:
    """The running average training logs and records show (None: no value yet)."""
    return value if average is None else 0.98 * average + 0.02 * value


def grouped(optimizer_state: dict, sizes: list[int]) -> dict:
    """A saved optimizer state with one parameter group per head (`sizes`: parameters in
    each). Checkpoints of joint runs from before heads had their own groups hold one group
    of all parameters, in the same order: it is split, the moments unchanged."""
    groups = optimizer_state["param_groups"]
    if len(groups) == len(sizes) or len(groups) != 1:
        return optimizer_state
    indices, start, split = groups[0]["params"], 0, []
    for size in sizes:
        split.append({**groups[0], "params": indices[start : start + size]})
        start += size
    return {**optimizer_state, "param_groups": split}


def fit(
    module: torch.nn.Module,
    make_batches: Callable[[int], Iterator[tuple[torch.Tensor, torch.Tensor]]],
    loss_fn: Callable[[torch.Tensor, torch.Tensor], tuple[torch.Tensor, list[float]]],
    checkpoint: Path,
    steps: int,
    minutes: float,
    lr: float | list[float],
    weight_decay: float,
    desc: str,
    evaluate: Callable[[int, int], None] | None = None,
    checkpoint_every: int = CHECKPOINT_EVERY,
) -> dict:
    """Train until `steps` or `minutes`; `make_batches(step)` yields (ids, labels) and
    `loss_fn` returns the loss and metrics to show (a loss without a graph: loss_fn has
    run the backward). Re-running resumes from `checkpoint`. `lr` is the peak of the
    schedule; a list gives each head of a ModuleDict its own.
    `evaluate(step, tokens_seen)` runs before the first step (the curve starts at the
    initial or warm-started weights) and at every checkpoint. SIGTERM or Ctrl-C ends
    training after the current step, with a checkpoint, like the wall-time budget does,
    so a long run can be stopped at any time without losing steps."""
    # a ModuleDict holds heads trained together: each is clipped on its own, as if alone, and
    # is its own parameter group, so that it can have its own learning rate
    parts = list(module.values()) if isinstance(module, torch.nn.ModuleDict) else [module]
    clipped = [[p for p in part.parameters() if p.requires_grad] for part in parts]
    peaks = lr if isinstance(lr, list) else [lr] * len(parts)
    assert len(peaks) == len(parts), (len(peaks), len(parts))
    optimizer = torch.optim.AdamW([{"params": group} for group in clipped], lr=peaks[0], weight_decay=weight_decay)
    step, seen = 0, 0
    if checkpoint.exists():
        state = torch.load(checkpoint)
        module.load_state_dict(state["module"])
        optimizer.load_state_dict(grouped(state["optimizer"], [len(group) for group in clipped]))
        step, seen = state["step"], state["tokens"]
    batches = make_batches(step)
    if step == 0 and evaluate is not None:
        module.eval()
        evaluate(0, 0)
    deadline = time.time() + minutes * 60
    bar = tqdm(total=steps, initial=step, desc=desc)
    loss_ema, metrics_ema = None, None
    module.train()
    with stop_requests() as stopped:
        while step < steps and time.time() < deadline and not stopped:
            ids, labels = next(batches)
            for group, peak in zip(optimizer.param_groups, peaks):
                group["lr"] = learning_rate(peak, step, steps)
            optimizer.zero_grad()
            loss, metrics = loss_fn(ids, labels)
            if loss.requires_grad:  # else loss_fn ran the backward itself (heads trained together: one at a time)
                loss.backward()
            for group in clipped:
                torch.nn.utils.clip_grad_norm_(group, 1.0)
            optimizer.step()
            step += 1
            seen += int((labels != -100).sum())
            loss_ema = ema(loss_ema, loss.item())
            metrics_ema = metrics if metrics_ema is None else [ema(a, b) for a, b in zip(metrics_ema, metrics)]
            bar.update(1)
            bar.set_postfix(loss=f"{loss_ema:.3f}", metrics="/".join(f"{m:.2f}" for m in metrics_ema), tokens=seen)
            if step % checkpoint_every == 0:
                save_checkpoint(checkpoint, module, optimizer, step, seen)
                if evaluate is not None:
                    module.eval()
                    evaluate(step, seen)
                    module.train()
    if stopped:
        bar.write(f"stopped by signal {stopped[0]} at step {step} of {steps}: re-run to continue")
    save_checkpoint(checkpoint, module, optimizer, step, seen)
    bar.close()
    module.eval()
    return {"steps": step, "answer_tokens_seen": seen, "final_loss_ema": loss_ema, "final_metrics_ema": metrics_ema}


def learning_rate(peak: float, step: int, steps: int) -> float:
    """Linear warm-up over WARMUP steps, then a cosine decay to zero at `steps`."""
    return peak * min(1.0, (step + 1) / WARMUP) * 0.5 * (1 + math.cos(math.pi * step / steps))


def save_checkpoint(
    checkpoint: Path, module: torch.nn.Module, optimizer: torch.optim.Optimizer, step: int, seen: int
) -> None:
    partial = checkpoint.with_name(checkpoint.name + ".partial")
    torch.save(
        {"module": module.state_dict(), "optimizer": optimizer.state_dict(), "step": step, "tokens": seen}, partial
    )
    os.replace(partial, checkpoint)  # a kill mid-write leaves the last checkpoint whole


@contextmanager
def stop_requests() -> Iterator[list[int]]:
    """The signals (SIGTERM, SIGINT) received inside the block, recorded instead of acted on,
    so training can end after its current step with a checkpoint; a second signal acts at
    once, as usual. The handlers before the block are restored after it."""
    received, handlers = [], {}

    def request_stop(signum, frame):
        received.append(signum)
        for sig, handler in handlers.items():
            signal.signal(sig, handler)

    handlers.update({sig: signal.signal(sig, request_stop) for sig in (signal.SIGTERM, signal.SIGINT)})
    try:
        yield received
    finally:
        for sig, handler in handlers.items():
            signal.signal(sig, handler)
