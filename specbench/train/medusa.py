"""Train Medusa heads for any target (CPU or GPU) by self-distillation.

Head i at position t learns the target's own distribution for token t+2+i (the target's
logits at t+1+i), restricted to a draft vocabulary of the most frequent answer tokens,
from the target's final normed hidden state at t; the projection is the target's lm_head
(shared, frozen), so only the residual blocks train. Loss weights 0.8^i, as Medusa's.
The validation curve reports each head's top-1 agreement with the target's greedy token
and the chain τ of drafting every head's top-1 in a row.

    python -m specbench.train.medusa --data runs/corpus --out runs/smollm2-135m-medusa --steps 600 --minutes 90
"""

from __future__ import annotations

import argparse
import json

import torch
from safetensors.torch import save_file

from specbench.models.medusa import MedusaHeads, load_heads
from specbench.train.data import TARGET, batches, collate
from specbench.train.eagle3 import draft_vocabulary
from specbench.train.loop import add_fit_arguments, add_head_arguments, fit
from specbench.train.validation import append_point, curve_point, export, prepare

DECAY = 0.8


def head_hits(top1: torch.Tensor, target_top1: torch.Tensor, mask: torch.Tensor) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """Per head i: (hit, scored) [B, n]: whether head i's top-1 at anchor t is the
    target's top-1 for token t+2+i, and whether that token is a labelled answer token.
    top1 [B, n, K] (target ids); target_top1 and mask [B, >= n + K - 1], index j being
    token j+2."""
    n, heads = top1.shape[1], top1.shape[2]
    return [((top1[:, :, i] == target_top1[:, i : i + n]) & mask[:, i : i + n], mask[:, i : i + n]) for i in range(heads)]


def chain_tau(hits: list[tuple[torch.Tensor, torch.Tensor]]) -> tuple[int, int]:
    """(accepted draft tokens, anchors) of drafting every head's top-1 in a chain from
    every anchor whose whole chain is labelled: head i counts only if heads 0..i-1 hit."""
    alive = torch.ones_like(hits[0][0])
    accepted = torch.zeros(alive.shape, dtype=torch.long)
    for hit, _ in hits:
        alive = alive & hit
        accepted += alive
    valid = hits[-1][1]
    return int(accepted[valid].sum()), int(valid.sum())


def heads_loss(draft, probs, top1, mask, vocab_ids) -> tuple[torch.Tensor, list[float]]:
    """Distillation loss of K heads and their top-1 agreement: draft [B, n, K, V'] logits
    at n anchors, head i scored on the target's draft-vocabulary distribution `probs` and
    top-1 `top1` at index t+i (token t+2+i), where `mask` labels it; weights 0.8^i."""
    n = draft.shape[1]
    loss, metrics = 0.0, []
    for i in range(draft.shape[2]):
        m = mask[:, i : i + n]
        ce = -(probs[:, i : i + n] * torch.log_softmax(draft[:, :, i], -1)).sum(-1)
        loss = loss + DECAY**i * (ce * m).sum() / m.sum().clamp_min(1)
        hit = vocab_ids[draft[:, :, i].argmax(-1)] == top1[:, i : i + n]
        metrics.append(float((hit & m).sum() / m.sum().clamp_min(1)))
    return loss, metrics


def train(args) -> None:
    target, tokenizer, out, checkpoint, curve_path, validation, rows, n_target = prepare(args)
    if checkpoint.exists():  # the resumed heads keep the vocabulary they were trained with
        vocab_ids = torch.load(checkpoint)["module"]["draft_vocab"]
    else:
        vocab_ids = draft_vocabulary(rows, args.draft_vocab, target.config.vocab_size, {tokenizer.eos_token_id})
    lm_head = target.get_output_embeddings().weight.detach().float()
    heads = MedusaHeads(target.config.hidden_size, target.config.vocab_size, args.heads, args.blocks, shared=lm_head, draft_vocab=vocab_ids)
    for head in heads:  # every head starts as the target's own next-token guess: identity blocks
        for block in head:
            torch.nn.init.zeros_(block.linear.weight)
            torch.nn.init.zeros_(block.linear.bias)
    k = args.heads

    def target_pass(ids, labels):
        """Hidden at t (for t with all K future tokens inside the window), the target's
        draft-vocabulary distribution for tokens t+2.., its top-1 ids and label mask."""
        with torch.no_grad():
            result = target(input_ids=ids, output_hidden_states=True)
            hidden = result.hidden_states[-1].float()
            logits = result.logits.float()
        n = ids.shape[1] - k - 1
        probs = logits[..., vocab_ids].softmax(-1)
        return hidden[:, :n], probs[:, 1:], logits.argmax(-1)[:, 1:], labels[:, 2:] != -100

    def loss_fn(ids, labels):
        hidden, probs, top1, mask = target_pass(ids, labels)
        return heads_loss(heads.draft_logits(hidden), probs, top1, mask, vocab_ids)

    validation_passes = []

    def evaluate(step: int, seen: int) -> None:
        if not validation_passes:
            for start in range(0, len(validation), args.batch):
                hidden, _, top1, mask = target_pass(*collate(validation[start : start + args.batch], args.length))
                validation_passes.append((hidden, top1, mask))
        with torch.no_grad():
            point = curve_point(step, seen, (
                head_hits(vocab_ids[heads.draft_logits(hidden).argmax(-1)], top1, mask) for hidden, top1, mask in validation_passes
            ), chain_tau)
        append_point(curve_path, point)

    config = {"medusa_num_heads": k, "medusa_num_layers": args.blocks, "shared_lm_head": True, "draft_vocab_size": len(vocab_ids), "base_model": TARGET["name"]}
    fit_and_export(args, heads, (target, out, checkpoint, curve_path, validation, rows, n_target), loss_fn, evaluate, vocab_ids,
                   "medusa", config, "medusa_lm_head.safetensors", heads.state_dict, load_heads)


def fit_and_export(args, heads, prepared, loss_fn, evaluate, vocab_ids, name, config, weights_file, state, load_heads) -> None:
    """What the head trainers (Medusa, Hydra) share after building their heads: the fit
    with checkpoints and the validation curve, then config.json, the weights (`state()`),
    a strict reload through the method's own loader, and training.json."""
    target, out, checkpoint, curve_path, validation, rows, n_target = prepared
    result = fit(
        heads, lambda step: batches(rows, args.batch, args.length, args.seed + step), loss_fn,
        checkpoint, args.steps, args.minutes, args.lr, 0.0, f"{name} training (top-1 per head)",
        evaluate=evaluate if validation else None, checkpoint_every=args.checkpoint_every,
    )
    out.mkdir(parents=True, exist_ok=True)
    (out / "config.json").write_text(json.dumps(config, indent=2))
    save_file({key: t.contiguous() for key, t in state().items()}, out / weights_file)
    load_heads(str(out), target, torch.float32, key="trained heads")  # the shipped files load strictly
    export(out, curve_path, {
        "target": TARGET["name"], "data": [str(d) for d in args.data], "target_answers": n_target, "sharegpt_answers": len(rows) - n_target,
        "validation_answers": len(validation),
        **result,  # final_metrics_ema: top-1 agreement with the target per head (training batches)
        "heads": args.heads, "blocks": args.blocks, "draft_vocab": len(vocab_ids), "batch": args.batch, "length": args.length,
        "lr": args.lr, "schedule_steps": args.steps, "seed": args.seed, "target_dtype": args.target_dtype,
        "parameters": sum(p.numel() for p in heads.parameters()),
    }, step_label="head")
    print(f"saved {out}: {result}")


def head_arguments(doc: str, heads: int):
    """The command line of a heads trainer (`heads` by default)."""
    parser = argparse.ArgumentParser(description=doc, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_fit_arguments(parser, sharegpt_answers=4000, length=256, steps=600, minutes=90, lr=1e-3)
    add_head_arguments(parser)
    parser.add_argument("--heads", type=int, default=heads)
    parser.add_argument("--blocks", type=int, default=1)
    return parser.parse_args()


if __name__ == "__main__":
    train(head_arguments(__doc__, heads=4))
