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
import sys
from pathlib import Path

import torch
from safetensors.torch import save_file

from specbench.errors import run_command
from specbench.models.medusa import MedusaHeads, load_heads
from specbench.train.data import target_entry
from specbench.train.eagle3 import draft_vocabulary
from specbench.train.loop import add_fit_arguments, add_head_arguments
from specbench.train.shared_pass import TargetPass, Trainee, train_alone
from specbench.train.validation import export as export_record

DECAY = 0.8


def head_hits(
    top1: torch.Tensor, target_top1: torch.Tensor, mask: torch.Tensor
) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """Per head i: (hit, scored) [B, n]: whether head i's top-1 at anchor t is the
    target's top-1 for token t+2+i, and whether that token is a labelled answer token.
    top1 [B, n, K] (target ids); target_top1 and mask [B, >= n + K - 1], index j being
    token j+2."""
    n, heads = top1.shape[1], top1.shape[2]
    return [
        ((top1[:, :, i] == target_top1[:, i : i + n]) & mask[:, i : i + n], mask[:, i : i + n]) for i in range(heads)
    ]


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


def answer_rows(mask: torch.Tensor, n: int, heads: int) -> torch.Tensor:
    """bool [B, n]: the anchors some head is scored at (head i at t where `mask` labels
    t+i), the only rows a loss reads: prompt rows skip the vocabulary projection."""
    return torch.stack([mask[:, i : i + n] for i in range(heads)]).any(0)


def heads_loss(draft, probs, top1, mask, vocab_ids, rows) -> tuple[torch.Tensor, list[float]]:
    """Distillation loss of K heads and their top-1 agreement: draft [N, K, V'] logits at
    the anchors `rows` (bool [B, n], answer_rows), head i scored on the target's
    draft-vocabulary distribution `probs` and top-1 `top1` at index t+i (token t+2+i),
    where `mask` labels it; weights 0.8^i."""
    n = rows.shape[1]
    loss, metrics = 0.0, []
    for i in range(draft.shape[1]):
        m = mask[:, i : i + n][rows]
        ce = -(probs[:, i : i + n][rows] * torch.log_softmax(draft[:, i], -1)).sum(-1)
        loss = loss + DECAY**i * (ce * m).sum() / m.sum().clamp_min(1)
        hit = vocab_ids[draft[:, i].argmax(-1)] == top1[:, i : i + n][rows]
        metrics.append(float((hit & m).sum() / m.sum().clamp_min(1)))
    return loss, metrics


def heads_vocabulary(args, target, tokenizer, rows: list[dict], saved: dict | None) -> torch.Tensor:
    """The draft vocabulary of Medusa or Hydra heads: the checkpoint's when resumed."""
    if saved is not None:
        return saved["draft_vocab"]
    return draft_vocabulary(rows, args.draft_vocab, target.config.vocab_size, {tokenizer.eos_token_id})


def distilled(batch: TargetPass, vocab_ids: torch.Tensor):
    """The target's draft-vocabulary distribution for tokens t+2.. (index t+1+i: token
    t+2+i), its top-1 ids and the label mask, as Medusa and Hydra heads learn them."""
    probs = batch.logits[..., vocab_ids].softmax(-1)
    return probs[:, 1:], batch.logits.argmax(-1)[:, 1:], batch.labels[:, 2:] != -100


def trainee(args, target, tokenizer, rows: list[dict], out: Path, saved: dict | None) -> Trainee:
    """The Medusa heads of a run (resumed from `saved`)."""
    vocab_ids = heads_vocabulary(args, target, tokenizer, rows, saved)
    lm_head = target.get_output_embeddings().weight.detach().float()
    heads = MedusaHeads(
        target.config.hidden_size,
        target.config.vocab_size,
        args.heads,
        args.blocks,
        shared=lm_head,
        draft_vocab=vocab_ids,
    )
    for head in heads:  # every head starts as the target's own next-token guess: identity blocks
        for block in head:
            torch.nn.init.zeros_(block.linear.weight)
            torch.nn.init.zeros_(block.linear.bias)

    def hidden_of(batch: TargetPass) -> torch.Tensor:
        """Hidden at t, for t with all K future tokens inside the window."""
        return batch.hidden_states[-1][:, : batch.ids.shape[1] - args.heads - 1].float()

    def loss(batch: TargetPass):
        hidden, (probs, top1, mask) = hidden_of(batch), distilled(batch, vocab_ids)
        rows = answer_rows(mask, hidden.shape[1], args.heads)
        return heads_loss(heads.draft_logits(hidden[rows]), probs, top1, mask, vocab_ids, rows)

    def keep(batch: TargetPass):
        _, top1, mask = distilled(batch, vocab_ids)
        return hidden_of(batch), top1, mask

    def hits(kept):
        hidden, top1, mask = kept
        return head_hits(vocab_ids[heads.draft_logits(hidden).argmax(-1)], top1, mask)

    config = {
        "medusa_num_heads": args.heads,
        "medusa_num_layers": args.blocks,
        "shared_lm_head": True,
        "draft_vocab_size": len(vocab_ids),
        "base_model": target_entry(tuple(args.target))["name"],
    }
    return Trainee(
        "medusa",
        out,
        heads,
        loss,
        keep,
        hits,
        chain_tau,
        heads_export(args, out, target, config, "medusa_lm_head.safetensors", heads.state_dict, load_heads, heads),
    )


def heads_export(args, out: Path, target, config: dict, weights_file: str, state, load_heads, heads: torch.nn.Module):
    """The export of Medusa or Hydra heads: config.json, the weights (`state()`), a strict
    reload through the method's own loader, and training.json with the curve."""

    def export(curve_path: Path, record: dict) -> None:
        out.mkdir(parents=True, exist_ok=True)
        (out / "config.json").write_text(json.dumps(config, indent=2))
        save_file({key: t.contiguous() for key, t in state().items()}, out / weights_file)
        load_heads(str(out), target, torch.float32, key="trained heads")  # the shipped files load strictly
        export_record(
            out,
            curve_path,
            {  # final_metrics_ema: top-1 agreement with the target per head (training batches)
                **record,
                "heads": args.heads,
                "blocks": args.blocks,
                "draft_vocab": config["draft_vocab_size"],
                "parameters": sum(p.numel() for p in heads.parameters()),
            },
            step_label="head",
        )

    return export


def head_arguments(doc: str, heads: int, argv: list[str]):
    """The command line of a heads trainer (`heads` by default)."""
    parser = argparse.ArgumentParser(description=doc, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_fit_arguments(parser, sharegpt_answers=4000, length=256, steps=600, minutes=90, lr=1e-3)
    add_head_arguments(parser)
    parser.add_argument("--heads", type=int, default=heads)
    parser.add_argument("--blocks", type=int, default=1)
    return parser.parse_args(argv)


if __name__ == "__main__":
    run_command(
        lambda argv: train_alone(
            head_arguments(__doc__, 4, argv), "medusa", trainee, "medusa training (top-1 per head)"
        ),
        sys.argv[1:],
    )
