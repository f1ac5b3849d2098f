"""Train an EAGLE-3 head for any target (CPU or GPU), with training-time test.

Row t pairs the target's fused feature at position t with token t+1 and learns the
target's distribution for token t+2 (soft labels over the reduced draft vocabulary,
which holds the most frequent answer tokens). Training-time test unrolls `--ttt-steps`
draft steps: at step j the row at position t continues anchor a = t - j, takes as
feature the step j-1 hidden state at t-1 (no `fc`), and attends to the anchor's
committed rows (step 0, positions <= a) plus its own chain (step i at a + i), exactly
what a depth-j tree node sees at inference.

    python -m specbench.train.eagle3 --data runs/corpus --out runs/smollm2-135m-eagle3 --steps 12000 --minutes 600
"""

from __future__ import annotations

import argparse
import sys
from collections import Counter
from pathlib import Path

import torch

from specbench.drafters.small_lm import DraftVocab
from specbench.errors import require, run_command
from specbench.models.eagle3 import Eagle3Head, feature_layers, head_config, load_head, trained_state
from specbench.train.loop import add_fit_arguments, add_head_arguments
from specbench.train.shared_pass import TargetPass, Trainee, train_alone
from specbench.train.validation import export as export_record
from specbench.train.validation import save_head


def head_config_for(target_config, draft_vocab_size: int, layers: int = 1) -> dict:
    """config.json of a head whose layers are shaped like the target's."""
    return {
        "architectures": ["LlamaForCausalLMEagle3"],
        "hidden_size": target_config.hidden_size,
        "intermediate_size": target_config.intermediate_size,
        "num_attention_heads": target_config.num_attention_heads,
        "num_key_value_heads": target_config.num_key_value_heads,
        "head_dim": getattr(target_config, "head_dim", None)
        or target_config.hidden_size // target_config.num_attention_heads,
        "num_hidden_layers": layers,
        "rms_norm_eps": target_config.rms_norm_eps,
        "max_position_embeddings": target_config.max_position_embeddings,
        "rope_theta": target_config.rope_parameters["rope_theta"],
        "rope_parameters": dict(target_config.rope_parameters),
        "vocab_size": target_config.vocab_size,
        "draft_vocab_size": draft_vocab_size,
        "hidden_act": target_config.hidden_act,
        "tie_word_embeddings": False,
    }


def draft_vocabulary(rows: list[dict], size: int, vocab_size: int, always: set[int]) -> torch.Tensor:
    """The `size` most frequent answer tokens (plus `always`), sorted by id."""
    counts = Counter(t for row in rows for t in row["answer"])
    chosen = set(always) | {t for t, _ in counts.most_common(size)}
    chosen = sorted(chosen)[: max(size, len(always))]
    if len(chosen) < size:  # pad with unseen ids so the head has the configured shape
        unseen = (t for t in range(vocab_size) if t not in set(chosen))
        chosen = sorted(chosen + [next(unseen) for _ in range(size - len(chosen))])
    return torch.tensor(chosen)


def draft_top1(logits: torch.Tensor, vocab_ids: torch.Tensor) -> torch.Tensor:
    """The target's top-1 over its whole vocabulary (`logits` [..., V]) as a draft-vocabulary
    index, -1 where the draft vocabulary lacks it: the engine's verifier rejects every draft
    there, so a held-out score must count it a miss (the best in-vocabulary token, which the
    soft labels teach, would count a hit the engine never sees)."""
    return DraftVocab(vocab_ids, logits.shape[-1]).rows(logits.argmax(-1), missing=-1)


def ttt_mask(n: int, step: int) -> torch.Tensor:
    """Bool [n, (step+1)*n]: query t sees step-0 keys at s <= t-step and, for each
    later step i, only the key at s = t-step+i (its own chain, itself last). Rows
    t < step have no anchor and are not scored; scored rows never read them."""
    t = torch.arange(n)[:, None]
    s = torch.arange(n)[None, :]
    blocks = [s <= t - step] + [s == t - step + i for i in range(1, step + 1)]
    return torch.cat(blocks, dim=1)  # the last block (i = step) is the row itself


def ttt_unroll(head, embeds, features, steps: int, rows: torch.Tensor | None = None) -> list[torch.Tensor]:
    """Logits [B, n, Vd] of each unrolled step (row t: target feature t, embedding of
    token t+1), for any EAGLE head (EAGLE-1 or EAGLE-3: `project` and `forward`); with
    `rows` (bool [B, n]) only those rows' logits, [N, Vd]."""
    n = embeds.shape[1]
    positions = torch.arange(n)[None].expand(embeds.shape[0], n)
    feats = head.project(features)
    past, logits = None, []
    for step in range(steps):
        hidden, step_logits, past = head(embeds, feats, positions, past, ttt_mask(n, step), logits_at=rows)
        logits.append(step_logits)
        feats = torch.cat([hidden[:, :1], hidden[:, :-1]], dim=1)  # step j+1 at t reads step j at t-1
    return logits


def step_hits(logits: list[torch.Tensor], target_top1, loss_mask) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """(hits, scored) bool [B, n] per unrolled step: the draft's top-1 (`logits` of the
    `loss_mask` rows, [N, Vd]) equals the target's (`target_top1` [B, n], draft-vocabulary
    ids; -1, never a hit, where the target's top-1 is outside them), at rows with a label and
    an anchor (t >= step)."""
    out = []
    for step, step_logits in enumerate(logits):
        scored = loss_mask.clone()
        scored[:, :step] = False
        hits = torch.zeros_like(loss_mask)
        hits[loss_mask] = step_logits.argmax(-1) == target_top1[loss_mask]
        out.append((hits & scored, scored))
    return out


def ttt_loss(head: Eagle3Head, embeds, features, target_probs, target_top1, loss_mask, steps: int, decay: float = 0.8):
    """Soft cross-entropy over the draft vocabulary (`target_probs`), summed over unrolled
    steps (weights decay**j); also returns each step's top-1 agreement with the target's
    greedy token (`target_top1`, draft_top1) for logging."""
    logits = ttt_unroll(head, embeds, features, steps, rows=loss_mask)
    hits = step_hits(logits, target_top1, loss_mask)
    probs = target_probs[loss_mask]
    total = 0.0
    for step, (step_logits, (_, scored)) in enumerate(zip(logits, hits)):
        weight = scored[loss_mask].float()
        loss = -(probs * step_logits.float().log_softmax(-1)).sum(-1)
        total = total + decay**step * (loss * weight).sum() / weight.sum().clamp_min(1)
    return total, [float(h.sum() / s.sum().clamp_min(1)) for h, s in hits]


def chain_acceptance(hits: list[tuple[torch.Tensor, torch.Tensor]]) -> tuple[int, int]:
    """(accepted draft tokens, anchors) of greedy chain drafting `len(hits)` deep from every
    anchor a whose whole chain is labelled: step j of anchor a is row a + j, and a chain
    stops at its first miss. With the target's greedy answers as text this is exactly
    what chain decoding would accept, so tau = 1 + accepted / anchors."""
    depth = len(hits)
    anchors = hits[0][0].shape[1] - depth + 1
    if anchors <= 0:
        return 0, 0
    alive = torch.ones_like(hits[0][0][:, :anchors])
    accepted = torch.zeros(alive.shape, dtype=torch.long)
    for j, (hit, _) in enumerate(hits):
        alive = alive & hit[:, j : j + anchors]
        accepted += alive
    valid = hits[0][1][:, :anchors] & hits[-1][1][:, depth - 1 : depth - 1 + anchors]
    return int(accepted[valid].sum()), int(valid.sum())


def eagle_hits(head, steps: int):
    """A Trainee's `hits` for any EAGLE head: top-1 per unrolled draft step on what
    `keep` held of a validation batch (embeds, features, target top-1, mask)."""
    return lambda kept: step_hits(ttt_unroll(head, kept[0], kept[1], steps, rows=kept[3]), kept[2], kept[3])


def head_layers(asked: int | None, warm: Eagle3Head | None, saved: dict | None) -> int:
    """The head's decoder layers: a resumed run keeps its checkpoint's; otherwise --layers,
    else the warm start's, else 1. A warm start may have fewer layers (see deepen)."""
    if saved is not None:
        held = 1 + len({k.split(".")[1] for k in saved if k.startswith("layers.")})
        require(
            asked in (None, held),
            "--layers",
            f"the run's checkpoint holds a head of {held} layers, not {asked}: resume with --layers {held} or "
            "choose another --out",
        )
        return held
    if warm is not None:
        require(
            asked is None or asked >= warm.config.num_hidden_layers,
            "--layers",
            f"{asked} is fewer than the warm start's {warm.config.num_hidden_layers}",
        )
    return asked or (warm.config.num_hidden_layers if warm is not None else 1)


def deepen(head: Eagle3Head, warm_state: dict) -> None:
    """Load a warm start of the same or fewer layers. Layers it lacks start as the identity:
    their output projections (attention o_proj, MLP down_proj) are zero, so the deeper
    head computes exactly what the warm start did and training only adds to it."""
    missing, unexpected = head.load_state_dict(warm_state, strict=False)
    assert not unexpected and all(k.startswith("layers.") for k in missing), (missing, unexpected)
    new = {int(k.split(".")[1]) for k in missing}
    with torch.no_grad():
        for i in new:
            head.layers[i].self_attn.o_proj.weight.zero_()
            head.layers[i].mlp.down_proj.weight.zero_()


def trainee(args, target, tokenizer, rows: list[dict], out: Path, saved: dict | None) -> Trainee:
    """The EAGLE-3 head of a run (resumed from `saved`, or warm-started from --init)."""
    warm = load_head(args.init, torch.float32, "cpu", key="--init") if args.init and saved is None else None
    if saved is not None:  # the resumed head keeps the vocabulary it was trained with
        vocab_ids = saved["d2t"] + torch.arange(len(saved["d2t"]))
    elif warm is not None:  # so does a warm start
        vocab_ids = warm.d2t + torch.arange(len(warm.d2t))
    else:
        vocab_ids = draft_vocabulary(rows, args.draft_vocab, target.config.vocab_size, {tokenizer.eos_token_id})
    layers = head_layers(args.layers, warm, saved)
    raw_config = head_config_for(target.config, len(vocab_ids), layers)
    head = Eagle3Head(head_config(raw_config))
    if warm is not None:
        deepen(head, trained_state(warm))
    head.d2t.copy_(vocab_ids - torch.arange(len(vocab_ids)))
    head.t2d.zero_()
    head.t2d[vocab_ids] = True
    fused = feature_layers(target.config.num_hidden_layers)
    embedding = target.get_input_embeddings()

    def rows_of(batch: TargetPass):
        """Row t: feature t, token t+1, and the target's distribution at t+1 over the draft
        vocabulary and its greedy token there (token t+2)."""
        with torch.no_grad():
            features = torch.cat([batch.hidden_states[i] for i in fused], dim=-1).float()
            probs = batch.logits.softmax(-1)[..., vocab_ids]
            embeds = embedding(batch.ids).float()
        n = batch.ids.shape[1] - 2
        top1 = draft_top1(batch.logits[:, 1 : n + 1], vocab_ids)
        return embeds[:, 1 : n + 1], features[:, :n], probs[:, 1 : n + 1], top1, batch.labels[:, 2 : n + 2] != -100

    def keep(batch: TargetPass):
        embeds, features, _, top1, mask = rows_of(batch)
        return embeds, features, top1, mask

    def export(curve_path: Path, record: dict) -> None:
        save_head(out, raw_config, head)
        load_head(str(out), torch.float32, "cpu", key="trained head")  # the shipped files load strictly
        export_record(
            out,
            curve_path,
            {  # final_metrics_ema: top-1 agreement with the target per TTT step (training batches)
                **record,
                "draft_vocab": len(vocab_ids),
                "ttt_steps": args.ttt_steps,
                "init": args.init,
                "feature_layers": list(fused),
                "layers": layers,
                "parameters": sum(p.numel() for p in head.parameters()),
            },
            step_label="TTT step",
        )

    return Trainee(
        "eagle3",
        out,
        head,
        lambda batch: ttt_loss(head, *rows_of(batch), args.ttt_steps),
        keep,
        eagle_hits(head, args.ttt_steps),
        chain_acceptance,
        export,
    )


def add_layers_argument(parser: argparse.ArgumentParser, flag: str) -> None:
    parser.add_argument(
        flag,
        dest="layers",
        type=int,
        choices=range(1, 9),
        metavar="1-8",
        help="decoder layers of the EAGLE-3 head (default: the warm start's or the checkpoint's, else 1); "
        "layers a warm start lacks start as the identity",
    )


def main(argv: list[str]) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_fit_arguments(parser, sharegpt_answers=4000, length=256, steps=800, minutes=60, lr=1e-3)
    add_head_arguments(parser)
    parser.add_argument("--ttt-steps", type=int, default=3)
    add_layers_argument(parser, "--layers")
    parser.add_argument(
        "--init",
        help="warm start from a head directory (config.json + model.safetensors, e.g. the shipped one) when no "
        "checkpoint exists yet",
    )
    train_alone(parser.parse_args(argv), "eagle3", trainee, "eagle3 training (top-1 per TTT step)")


if __name__ == "__main__":
    run_command(main, sys.argv[1:])
