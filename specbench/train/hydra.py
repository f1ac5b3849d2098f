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

import torch

from specbench.models.hydra import HydraHeads, load_heads
from specbench.train.data import TARGET, collate
from specbench.train.eagle3 import draft_vocabulary
from specbench.train.medusa import chain_tau, fit_and_export, head_arguments, head_hits, heads_loss
from specbench.train.validation import append_point, curve_point, prepare


def path_tokens(ids: torch.Tensor, n: int, h: int) -> torch.Tensor:
    """[B, n, h+1]: for anchor t the text's tokens t+1..t+1+h."""
    return torch.stack([ids[:, 1 + j : 1 + j + n] for j in range(h + 1)], dim=-1)


def train(args) -> None:
    target, tokenizer, out, checkpoint, curve_path, validation, rows, n_target = prepare(args)
    if checkpoint.exists():  # the resumed heads keep the vocabulary they were trained with
        vocab_ids = torch.load(checkpoint)["module"]["draft_vocab"]
    else:
        vocab_ids = draft_vocabulary(rows, args.draft_vocab, target.config.vocab_size, {tokenizer.eos_token_id})
    shared = (target.get_output_embeddings().weight.detach().float(), target.get_input_embeddings().weight.detach().float())
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

    def target_pass(ids, labels):
        """Hidden states [B, T, H] of the text, the target's draft-vocabulary distribution
        for tokens t+2.. (index t+1+h: token t+2+h), its top-1 ids and the label mask."""
        with torch.no_grad():
            result = target(input_ids=ids, output_hidden_states=True)
            hidden = result.hidden_states[-1].float()
            logits = result.logits.float()
        probs = logits[..., vocab_ids].softmax(-1)
        return hidden, probs[:, 1:], logits.argmax(-1)[:, 1:], labels[:, 2:] != -100

    def head_logits(ids, hidden):
        """[B, n, K, V'] for the n anchors that have all K path tokens in the window."""
        n = ids.shape[1] - k - 1
        prefix = heads.prefix_embeding_layer(inputs_embeds=hidden).last_hidden_state[:, :n]
        return torch.stack([heads.draft_logits(h, prefix, path_tokens(ids, n, h)) for h in range(k)], dim=2)

    def loss_fn(ids, labels):
        hidden, probs, top1, mask = target_pass(ids, labels)
        return heads_loss(head_logits(ids, hidden), probs, top1, mask, vocab_ids)

    validation_passes = []

    def evaluate(step: int, seen: int) -> None:
        if not validation_passes:
            for start in range(0, len(validation), args.batch):
                ids, labels = collate(validation[start : start + args.batch], args.length)
                hidden, _, top1, mask = target_pass(ids, labels)
                validation_passes.append((ids, hidden, top1, mask))
        with torch.no_grad():
            point = curve_point(step, seen, (
                head_hits(vocab_ids[head_logits(ids, hidden).argmax(-1)], top1, mask) for ids, hidden, top1, mask in validation_passes
            ), chain_tau)
        append_point(curve_path, point)

    config = {"hydra_head_arch": "prefix-mlp", "grounded_heads": True, "hidden_state_offset": 0, "hydra_num_heads": k,
              "hydra_num_layers": args.blocks, "shared_lm_head": True, "draft_vocab_size": len(vocab_ids), "base_model": TARGET["name"]}

    def bf16_state():  # the prefix layer and blocks in bf16 keep SmolLM2's 3-head file under 25 MB
        return {name: t.to(torch.bfloat16) if t.is_floating_point() else t for name, t in heads.state_dict().items()}

    fit_and_export(args, heads, (target, out, checkpoint, curve_path, validation, rows, n_target), loss_fn, evaluate, vocab_ids,
                   "hydra", config, "hydra_lm_head.safetensors", bf16_state, load_heads)


if __name__ == "__main__":
    # 3 heads by default: a 4th head's (5 x hidden)-wide blocks would take SmolLM2's file past 25 MB
    train(head_arguments(__doc__, heads=3))
