"""Train an EAGLE-1 head (the drafter of methods eagle and eagle2) for any target, with the
EAGLE paper's objective.

Row t pairs the target's last hidden state f_t (after its final norm) with token t+1 and
predicts f_{t+1}: loss = SmoothL1(predicted, f_{t+1}) + w_cls * cross-entropy of the
target's lm_head over the prediction against the target's own distribution at t+1 (the
token t+2), with w_cls = 0.1; the input features get uniform noise U(-a, a), a = 0.1
(the paper's augmentation against error accumulation). The learning curve unrolls the head
on its own predictions (train.eagle3.ttt_unroll), so it reports what a chain would accept.

    python -m specbench.train.eagle --data runs/corpus --out runs/smollm2-135m-eagle --steps 3000 --minutes 60
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import torch

from specbench.errors import run_command
from specbench.models.eagle import Eagle1Head, feature_layers, load_head
from specbench.models.eagle3 import head_config, read_config, trained_state
from specbench.train import eagle3
from specbench.train.loop import add_autocast_argument, add_fit_arguments
from specbench.train.shared_pass import TargetPass, Trainee, train_alone
from specbench.train.validation import export as export_record
from specbench.train.validation import save_head

VALIDATION_STEPS = 3  # draft steps the learning curve unrolls (chain depth of its tau)


def head_config_for(target_config) -> dict:
    """config.json of an EAGLE-1 head shaped like one layer of the target (as the
    published ones: the target's config with one layer, fc with a bias)."""
    config = eagle3.head_config_for(target_config, target_config.vocab_size)
    del config["draft_vocab_size"]
    return {**config, "architectures": ["LlamaForCausalLM"], "bias": True}


def eagle_loss(head: Eagle1Head, embeds, features, next_features, target_probs, loss_mask, noise: float, w_cls: float):
    """SmoothL1 on the predicted next feature + w_cls * soft cross-entropy of its logits;
    also returns the top-1 agreement with the target (for the progress bar)."""
    noisy = features + (torch.rand_like(features) * 2 - 1) * noise
    positions = torch.arange(embeds.shape[1])[None].expand(embeds.shape[0], -1)
    causal = eagle3.ttt_mask(embeds.shape[1], 0)
    # logits [N, V]
    predicted, logits, _ = head(embeds, head.project(noisy), positions, None, causal, logits_at=loss_mask)
    weight = loss_mask.float()
    regression = torch.nn.functional.smooth_l1_loss(predicted, next_features, reduction="none").mean(-1)
    probs = target_probs[loss_mask]
    classification = -(probs * logits.float().log_softmax(-1)).sum(-1)
    scored = weight.sum().clamp_min(1)
    loss = ((regression * weight).sum() + w_cls * classification.sum()) / scored
    top1 = (logits.argmax(-1) == probs.argmax(-1)).sum() / scored
    return loss, [float(top1)]


def trainee(args, target, tokenizer, rows: list[dict], out: Path, saved: dict | None) -> Trainee:
    """The EAGLE-1 head of a run (resumed from `saved`, or warm-started from --init)."""
    raw_config = head_config_for(target.config)
    if args.init:  # a warm start keeps the published head's layout (LLaMA3 heads have no fc bias)
        raw_config["bias"] = read_config(Path(args.init), "--init").get("bias", True)
    head = Eagle1Head(head_config(raw_config), target.get_output_embeddings().weight.float())
    if args.init and saved is None:
        head.load_state_dict(
            trained_state(load_head(args.init, head.lm_head_weight, torch.float32, "cpu", key="--init"))
        )
    layer = feature_layers(target.config.num_hidden_layers)[0]
    embedding = target.get_input_embeddings()

    def rows_of(batch: TargetPass):
        """Row t: feature t, token t+1, the feature at t+1 and the target's distribution
        at t+1 (token t+2), and which rows have a label."""
        with torch.no_grad():
            features = batch.hidden_states[layer].float()
            probs = batch.logits.softmax(-1)
            embeds = embedding(batch.ids).float()
        n = batch.ids.shape[1] - 2
        return (
            embeds[:, 1 : n + 1],
            features[:, :n],
            features[:, 1 : n + 1],
            probs[:, 1 : n + 1],
            batch.labels[:, 2 : n + 2] != -100,
        )

    def keep(batch: TargetPass):
        embeds, features, _, probs, mask = rows_of(batch)
        return embeds, features, probs.argmax(-1), mask

    def export(curve_path: Path, record: dict) -> None:
        save_head(out, raw_config, head)
        # the shipped files load strictly
        load_head(str(out), head.lm_head_weight, torch.float32, "cpu", key="trained head")
        export_record(
            out,
            curve_path,
            {  # final_metrics_ema: top-1 agreement with the target (training batches)
                **record,
                "noise": args.noise,
                "w_cls": args.w_cls,
                "init": args.init,
                "feature_layer": layer,
                "parameters": sum(p.numel() for p in head.parameters()),
            },
            step_label="draft step",
        )

    return Trainee(
        "eagle",
        out,
        head,
        lambda batch: eagle_loss(head, *rows_of(batch), args.noise, args.w_cls),
        keep,
        eagle3.eagle_hits(head, VALIDATION_STEPS),
        eagle3.chain_acceptance,
        export,
    )


def main(argv: list[str]) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_fit_arguments(parser, sharegpt_answers=4000, length=256, steps=800, minutes=60, lr=1e-3)
    parser.add_argument(
        "--target-dtype",
        default="float32",
        help="bfloat16 only where the CPU has native bf16 matmul (see the cost profile)",
    )
    parser.add_argument(
        "--noise", type=float, default=0.1, help="half-width of the uniform noise on input features (EAGLE: 0.1)"
    )
    parser.add_argument("--w-cls", type=float, default=0.1, help="weight of the classification loss (EAGLE: 0.1)")
    parser.add_argument(
        "--init",
        help="warm start from a head directory (config.json + model.safetensors) when no checkpoint exists yet",
    )
    add_autocast_argument(parser)
    train_alone(parser.parse_args(argv), "eagle", trainee, "eagle-1 training (top-1)")


if __name__ == "__main__":
    run_command(main, sys.argv[1:])
