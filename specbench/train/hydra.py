"""Train Hydra heads (grounded prefix-MLP, the released architecture) for any target by
self-distillation, on the same data and loop as the Medusa and EAGLE-3 trainers.

The prefix layer runs causally over the target's final normed hidden states of the
text; head h at anchor t reads the prefix output at t and the embeddings of the text's
tokens t+1..t+1+h (the root and the h tokens drafted before it, teacher-forced), and
learns the target's own distribution for token t+2+h, restricted to a draft vocabulary
of the most frequent answer tokens. Projection and input embedding are the target's own
(shared, frozen), so the file holds the prefix layer and the residual blocks only. Loss
weights 0.8^h, Medusa's loss (train.medusa.heads_loss). The validation curve reports each head's top-1 agreement
with the target's greedy token, and the chain τ of drafting every head's top-1 in a row
(exact on the target's greedy answers, where the text is what greedy drafting would
have proposed).

    python -m specbench.train.hydra --data runs/corpus --out runs/smollm2-135m-hydra --steps 600 --minutes 90
"""

from __future__ import annotations

import sys
from pathlib import Path

import torch

from specbench.errors import run_command
from specbench.models.hydra import HydraHeads, load_heads
from specbench.train.data import target_entry
from specbench.train.medusa import (
    answer_rows,
    chain_tau,
    distilled,
    head_arguments,
    head_hits,
    heads_export,
    heads_loss,
    heads_vocabulary,
)
from specbench.train.shared_pass import TargetPass, Trainee, train_alone


def path_tokens(ids: torch.Tensor, n: int, h: int) -> torch.Tensor:
    """[B, n, h+1]: for anchor t the text's tokens t+1..t+1+h."""
    return torch.stack([ids[:, 1 + j : 1 + j + n] for j in range(h + 1)], dim=-1)


def trainee(args, target, tokenizer, rows: list[dict], out: Path, saved: dict | None) -> Trainee:
    """The Hydra heads of a run (resumed from `saved`)."""
    vocab_ids = heads_vocabulary(args, target, tokenizer, rows, saved)
    shared = (
        target.get_output_embeddings().weight.detach().float(),
        target.get_input_embeddings().weight.detach().float(),
    )
    heads = HydraHeads(target.config, args.heads, args.blocks, shared=shared, draft_vocab=vocab_ids)
    for mlp in heads.hydra_mlp:  # every head starts as the target's own guess from the prefix
        first = mlp[1]
        torch.nn.init.zeros_(first.linear.weight)
        torch.nn.init.zeros_(first.linear.bias)
        with torch.no_grad():
            first.res_connection.weight.zero_()
            first.res_connection.weight[:, : target.config.hidden_size] = torch.eye(target.config.hidden_size)
            first.res_connection.bias.zero_()
    k = args.heads

    def head_logits(ids, hidden, rows=None):
        """[B, n, K, V'] for the n anchors that have all K path tokens in the window
        ([N, K, V'] at `rows`, bool [B, n], only)."""
        n = ids.shape[1] - k - 1
        prefix = heads.prefix_embeding_layer(inputs_embeds=hidden).last_hidden_state[:, :n]
        paths = [path_tokens(ids, n, h) for h in range(k)]
        if rows is not None:
            prefix, paths = prefix[rows], [p[rows] for p in paths]
        return torch.stack([heads.draft_logits(h, prefix, p) for h, p in enumerate(paths)], dim=-2)

    def loss(batch: TargetPass):
        probs, top1, mask = distilled(batch, vocab_ids)
        rows = answer_rows(mask, batch.ids.shape[1] - k - 1, k)
        return heads_loss(
            head_logits(batch.ids, batch.hidden_states[-1].float(), rows), probs, top1, mask, vocab_ids, rows
        )

    def keep(batch: TargetPass):
        _, top1, mask = distilled(batch, vocab_ids)
        return batch.ids, batch.hidden_states[-1].float(), top1, mask

    def hits(kept):
        ids, hidden, top1, mask = kept
        return head_hits(vocab_ids[head_logits(ids, hidden).argmax(-1)], top1, mask)

    config = {
        "hydra_head_arch": "prefix-mlp",
        "grounded_heads": True,
        "hidden_state_offset": 0,
        "hydra_num_heads": k,
        "hydra_num_layers": args.blocks,
        "shared_lm_head": True,
        "draft_vocab_size": len(vocab_ids),
        "base_model": target_entry(tuple(args.target))["name"],
    }

    def bf16_state():  # the prefix layer and blocks in bf16 keep SmolLM2's 3-head file under 25 MB
        return {name: t.to(torch.bfloat16) if t.is_floating_point() else t for name, t in heads.state_dict().items()}

    return Trainee(
        "hydra",
        out,
        heads,
        loss,
        keep,
        hits,
        chain_tau,
        heads_export(args, out, target, config, "hydra_lm_head.safetensors", bf16_state, load_heads, heads),
    )


if __name__ == "__main__":
    # 3 heads by default: a 4th head's (5 x hidden)-wide blocks would take SmolLM2's file past 25 MB
    run_command(
        lambda argv: train_alone(head_arguments(__doc__, 3, argv), "hydra", trainee, "hydra training (top-1 per head)"),
        sys.argv[1:],
    )
