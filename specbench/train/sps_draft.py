"""Train a small SpS draft LM for a target by sequence-level distillation.

Step 1 (`generate`): the target answers ShareGPT first turns greedily (its own chat
template); the answers are what the draft must learn to predict at T=0.
Step 2 (`train`): a small Llama sharing the target's tokenizer learns those answers
(cross-entropy on answer tokens), mixed with ShareGPT's own answers to other prompts
(`--sharegpt-answers`) where the target's answers are too few. Its tied embedding starts as a PCA projection of the
target's. Both steps checkpoint as they go and resume when re-run. A fixed set of held-out
greedy target answers gives the learning curve: top-1 agreement and chain tau at gamma 4.
`size` picks the shape by measurement: it trains each candidate (a fresh depth and width,
or a cut of the target's layers with or without its own vocabulary) for the same steps,
reads its chain tau per gamma on the held-out answers, times its forward on this machine,
and ranks candidates by the speedup the target's cost profile predicts.
`--from-target 0,1` starts the draft as the target's own layers 0 and 1 and final norm
(the target's width), so training refines pretrained layers instead of building an LM
from a few million tokens. With it, `--draft-vocab N` gives the draft its own output
vocabulary of the N tokens the target's answers use most (drafters.small_lm.DraftVocab),
its rows the target's; the input embedding is the target's own, frozen and not shipped.
At the target's width a full-vocabulary output layer would cost as much as a quarter of
the target, and the file would not fit 25 MB.

    python -m specbench.train.sps_draft generate --out runs/sps_data.jsonl --prompts 3000
    python -m specbench.train.sps_draft train --data runs/corpus --out specbench/weights/smollm2-135m-sps-draft
    python -m specbench.train.sps_draft size --data runs/corpus --out runs/sps-size --shapes 2x192 4x192 cut0,1v6144
    --steps 600
    python -m specbench.train.sps_draft train --data corpus/smollm2-135m --out runs/sps-v3 --from-target 0,1
    --draft-vocab 6144
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
from pathlib import Path

import torch
from safetensors.torch import save_file
from tqdm import tqdm
from transformers import AutoModelForCausalLM, LlamaConfig, LlamaForCausalLM, PreTrainedModel

from specbench.drafters.small_lm import DraftVocab, own_vocab_draft
from specbench.errors import require, run_command
from specbench.models import registry
from specbench.train import sps_sizing
from specbench.train.data import add_target_argument, batches, collate, first_turns, target_entry
from specbench.train.eagle3 import chain_acceptance, draft_vocabulary
from specbench.train.loop import add_fit_arguments, fit
from specbench.train.validation import MAIN_SET, append_point, export, held_out_counts, prepare, set_points

CURVE_GAMMA = 4  # the chain length of the learning curve's tau (issue 17's SpS goal is set at gamma 4)


def generate(args) -> None:
    torch.set_num_threads(args.threads)
    model, tokenizer = registry.load(target_entry(tuple(args.target)), "bfloat16", "cpu", "--target")
    prompts = first_turns(tokenizer, args.prompts, args.seed, args.max_prompt_tokens)
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    done = sum(1 for _ in open(out)) if out.exists() else 0
    pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id
    deadline = time.time() + args.minutes * 60
    with open(out, "a") as f, torch.inference_mode():
        for start in tqdm(
            range(done, len(prompts), args.batch),
            desc="target answers",
            initial=done // args.batch,
            total=math.ceil(len(prompts) / args.batch),
        ):
            if time.time() > deadline:
                break
            batch = prompts[start : start + args.batch]
            width = max(map(len, batch))
            ids = torch.tensor([[pad] * (width - len(p)) + p for p in batch])
            mask = torch.tensor([[0] * (width - len(p)) + [1] * len(p) for p in batch])
            answers = model.generate(
                input_ids=ids,
                attention_mask=mask,
                max_new_tokens=args.max_new_tokens,
                do_sample=False,
                pad_token_id=pad,
            )
            for prompt, answer in zip(batch, answers[:, width:].tolist()):
                if tokenizer.eos_token_id in answer:
                    answer = answer[: answer.index(tokenizer.eos_token_id) + 1]
                f.write(json.dumps({"prompt": prompt, "answer": answer}) + "\n")
            f.flush()


def draft_config(target_config, hidden: int, layers: int) -> LlamaConfig:
    return LlamaConfig(
        vocab_size=target_config.vocab_size,
        hidden_size=hidden,
        intermediate_size=hidden * 8 // 3,
        num_hidden_layers=layers,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=target_config.max_position_embeddings,
        rope_parameters=target_config.rope_parameters,
        rms_norm_eps=target_config.rms_norm_eps,
        tie_word_embeddings=True,
        bos_token_id=target_config.bos_token_id,
        eos_token_id=target_config.eos_token_id,
    )


def pca_embedding(target_embedding: torch.Tensor, dim: int) -> torch.Tensor:
    """The target's embedding projected on its top `dim` principal directions, rescaled
    to the usual init scale: a warm start that keeps similar tokens close."""
    centred = target_embedding.float() - target_embedding.float().mean(0)
    _, _, v = torch.pca_lowrank(centred, q=dim, center=False)
    projected = centred @ v[:, :dim]
    return projected / projected.std() * 0.02


def frozen_embedding(target: LlamaForCausalLM) -> torch.nn.Embedding:
    """The target's input embedding, in fp32 and frozen: what a draft with its own
    vocabulary reads tokens through (decoding shares the target's in memory)."""
    return torch.nn.Embedding.from_pretrained(target.get_input_embeddings().weight.detach().float(), freeze=True)


def target_cut(target: PreTrainedModel, layers: list[int], vocab: DraftVocab | None) -> PreTrainedModel:
    """A draft made of the target's decoder `layers` (in this order) and final norm. With
    a draft vocabulary its output rows are the target's rows of those ids and its input
    embedding is frozen_embedding; without, it has a trainable copy of the target's
    (tied) embedding."""
    kinds = getattr(target.config, "layer_types", None)  # (Qwen families: full or sliding attention per layer)
    config = type(target.config).from_dict(
        {
            **target.config.to_dict(),
            "num_hidden_layers": len(layers),
            "tie_word_embeddings": vocab is None,
            "vocab_size": len(vocab.ids) if vocab else target.config.vocab_size,
            **({"layer_types": [kinds[i] for i in layers]} if kinds else {}),
        }
    )
    draft = type(target)(config)  # the target's own family: its layers' biases and norms load as they are
    output = target.get_output_embeddings().weight.detach()
    state = {
        "model.norm.weight": target.model.norm.weight,
        "lm_head.weight": output[vocab.ids] if vocab else output,
        "model.embed_tokens.weight": target.get_input_embeddings().weight,
    }
    for index, source in enumerate(layers):
        state |= {
            f"model.layers.{index}.{name}": value for name, value in target.model.layers[source].state_dict().items()
        }
    if vocab is not None:
        del state["model.embed_tokens.weight"]
        draft.model.embed_tokens = frozen_embedding(target)
    draft.load_state_dict({k: v.float() for k, v in state.items()}, strict=False)
    return draft


def draft_labels(vocab: DraftVocab, targets: torch.Tensor) -> torch.Tensor:
    """Target-id labels as the draft's output rows; tokens it does not draft (and -100)
    become -100, which cross-entropy ignores."""
    return torch.where(targets == -100, targets, vocab.rows(targets.clamp(min=0), missing=-100))


def shipped_weights(model: LlamaForCausalLM, vocab: DraftVocab | None) -> dict[str, torch.Tensor]:
    """The draft's weights as shipped, in bf16: without a tied output layer (it is the
    embedding), or with a draft vocabulary without the target's input embedding and with
    `draft_vocab` (drafters.small_lm reads both back)."""
    state = model.state_dict()
    dropped = "model.embed_tokens.weight" if vocab is not None else "lm_head.weight"
    weights = {k: v.to(torch.bfloat16).contiguous() for k, v in state.items() if k != dropped}
    if vocab is not None:
        weights["draft_vocab"] = vocab.ids.contiguous()
    return weights


def layer_list(text: str) -> list[int]:
    """argparse type of --from-target: comma-separated target layer indices."""
    try:
        layers = [int(x) for x in text.split(",")]
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not comma-separated layer indices (e.g. 0,1)") from None
    if not layers or min(layers) < 0:
        raise argparse.ArgumentTypeError(f"{text!r}: layer indices start at 0")
    return layers


def answer_loss(
    model: LlamaForCausalLM, ids: torch.Tensor, labels: torch.Tensor, teacher=None, vocab: DraftVocab | None = None
) -> torch.Tensor:
    """Loss on answer tokens: cross-entropy with the text, or with a teacher the KL from
    the teacher's next-token distribution (renormalised over a draft vocabulary: the draft
    can put mass nowhere else). The vocabulary projection runs only where there is a label
    (most of the cost at a 49k vocabulary)."""
    hidden = model.model(input_ids=ids).last_hidden_state[:, :-1]
    targets = labels[:, 1:]
    keep = targets != -100
    logits = model.lm_head(hidden[keep])
    if teacher is None:
        return torch.nn.functional.cross_entropy(logits, draft_labels(vocab, targets[keep]) if vocab else targets[keep])
    with torch.no_grad():
        teacher_hidden = teacher.model(input_ids=ids).last_hidden_state[:, :-1][keep]
        teacher_logits = teacher.lm_head(teacher_hidden).float()
        teacher_logp = (teacher_logits[:, vocab.ids] if vocab else teacher_logits).log_softmax(-1)
    return torch.nn.functional.kl_div(logits.log_softmax(-1), teacher_logp, log_target=True, reduction="batchmean")


def validation_hits(
    model: LlamaForCausalLM, validation: list[dict], batch: int, length: int, vocab: DraftVocab | None = None
):
    """Per batch of held-out rows: (draft top-1 == the target's next token, scored) with the
    true text as context; with greedy target answers as text, a chain of gamma draft tokens
    from anchor a is accepted as far as these hits run from a (chain_acceptance). A draft
    vocabulary's top-1 is among the ids it drafts, as in decoding."""
    with torch.no_grad():
        for start in range(0, len(validation), batch):
            ids, labels = collate(validation[start : start + batch], length)
            top1 = model(input_ids=ids).logits[:, :-1].argmax(-1)
            if vocab is not None:  # draft rows -> target ids
                top1 = vocab.ids[top1]
            targets = labels[:, 1:]
            yield top1 == targets, targets != -100


def chain_taus(hits: list[tuple[torch.Tensor, torch.Tensor]], max_gamma: int) -> list[float]:
    """tau of greedy chain drafting at gamma = 1..max_gamma over the same hits."""
    taus = []
    for gamma in range(1, max_gamma + 1):
        accepted = anchors = 0
        for pair in hits:
            a, n = chain_acceptance([pair] * gamma)
            accepted, anchors = accepted + a, anchors + n
        taus.append(1 + accepted / max(anchors, 1))
    return taus


def train(args) -> dict:
    require(
        not (args.init and (args.from_target or args.draft_vocab)),
        "--init",
        "a saved draft brings its own layers and vocabulary; drop --from-target and --draft-vocab",
    )
    require(
        not args.draft_vocab or args.from_target,
        "--draft-vocab",
        "a draft with its own vocabulary reads the target's input embedding, so has the target's width: give "
        "--from-target too",
    )
    target, tokenizer, out, checkpoint, curve_path, validation, rows, n_target = prepare(args)
    target_vocab, target_layers = target.config.vocab_size, target.config.num_hidden_layers
    require(
        not args.from_target or max(args.from_target) < target_layers,
        "--from-target",
        f"{args.from_target}: the target's layers are 0..{target_layers - 1}",
    )
    require(
        0 <= args.draft_vocab < target_vocab,
        "--draft-vocab",
        f"{args.draft_vocab}: 0 (the target's vocabulary) or fewer than its {target_vocab} tokens",
    )
    # (a checkpoint, when there is one, replaces the starting weights below)
    if args.init:
        own = own_vocab_draft(Path(args.init), target, "--init")
        model, vocab = own if own else (AutoModelForCausalLM.from_pretrained(args.init, dtype=torch.float32), None)
        if own:
            model.float()
            model.model.embed_tokens = frozen_embedding(target)
    else:
        ids = (
            draft_vocabulary(rows[:n_target], args.draft_vocab, target_vocab, {tokenizer.eos_token_id})
            if args.draft_vocab
            else None
        )
        vocab = DraftVocab(ids, target_vocab) if ids is not None else None
        if args.from_target:
            model = target_cut(target, args.from_target, vocab)
        else:
            model = LlamaForCausalLM(draft_config(target.config, args.hidden, args.layers))
            with torch.no_grad():
                model.model.embed_tokens.weight.copy_(pca_embedding(target.model.embed_tokens.weight, args.hidden))
    config = model.config
    teacher = target if args.distill else None
    if teacher is None:
        del target

    def evaluate(step: int, seen: int) -> None:
        by_set = {
            name: ([pair] for pair in validation_hits(model, held, args.batch, args.length, vocab))
            for name, held in validation.items()
        }
        append_point(curve_path, set_points(step, seen, by_set, lambda hits: chain_acceptance(hits * CURVE_GAMMA)))

    result = fit(
        model,
        lambda step: batches(rows, args.batch, args.length, args.seed + step),
        lambda ids, labels: (answer_loss(model, ids, labels, teacher, vocab), []),
        checkpoint,
        args.steps,
        args.minutes,
        args.lr,
        0.01,
        "draft training",
        evaluate=evaluate if validation[MAIN_SET] else None,
        checkpoint_every=args.checkpoint_every,
    )
    out.mkdir(parents=True, exist_ok=True)
    config.save_pretrained(out)
    save_file(shipped_weights(model, vocab), out / "model.safetensors")
    taus = (
        chain_taus(list(validation_hits(model, validation[MAIN_SET], args.batch, args.length, vocab)), 8)
        if validation[MAIN_SET]
        else []
    )
    record = {
        "target": target_entry(tuple(args.target))["name"],
        "data": [str(d) for d in args.data],
        "target_answers": n_target,
        "sharegpt_answers": len(rows) - n_target,
        **held_out_counts(validation),
        **result,
        "hidden": config.hidden_size,
        "layers": config.num_hidden_layers,
        "batch": args.batch,
        "length": args.length,
        "lr": args.lr,
        "schedule_steps": args.steps,
        "seed": args.seed,
        "init": args.init,
        "from_target": args.from_target,
        "draft_vocab": len(vocab.ids) if vocab else None,
        "distill": args.distill,
        "target_dtype": args.target_dtype,
        # what it ships (not the target's frozen embedding)
        "parameters": sum(p.numel() for p in model.parameters() if p.requires_grad),
        "validation_chain_tau_by_gamma": taus,  # gamma = 1..8, greedy chains on the held-out answers
    }
    export(out, curve_path, record, step_label="draft token")
    print(f"saved {out}: {result}")
    return json.loads((out / "training.json").read_text())  # with the last validation point


def size(args) -> None:
    """Train every `--shapes` candidate for the same steps (resuming any that stopped
    short), then rank them by predicted speedup over AR on this machine (sps_sizing)."""
    root = Path(args.out)
    records = {}
    for shape in args.shapes:
        shape_args = argparse.Namespace(**{**vars(args), **sps_sizing.parse_shape(shape), "out": str(root / shape)})
        records[shape] = train(shape_args)  # a shape already trained to --steps is only re-scored
    short = [shape for shape, record in records.items() if record["steps"] < args.steps]
    if short:  # shapes are compared on the same training only
        print(
            f"{', '.join(short)} stopped short of {args.steps} steps (--minutes): re-run the same command to "
            "continue, then rank"
        )
        return
    sps_sizing.rank(records, root, args.context, args.max_gamma, args.max_file_mb)


def main(argv: list[str]) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command", required=True)
    g = sub.add_parser("generate")
    g.add_argument("--out", required=True)
    g.add_argument("--prompts", type=int, default=3000)
    g.add_argument("--batch", type=int, default=16)
    g.add_argument("--max-new-tokens", type=int, default=192)
    g.add_argument("--max-prompt-tokens", type=int, default=384)
    g.add_argument("--minutes", type=float, default=25, help="stop after this long (re-run to continue)")
    g.add_argument("--threads", type=int, default=2)
    g.add_argument("--seed", type=int, default=0)
    add_target_argument(g)
    t = sub.add_parser("train")
    z = sub.add_parser("size")
    for p in (t, z):
        add_fit_arguments(p, sharegpt_answers=8000, length=320, steps=3000, minutes=40, lr=2e-3)
        p.add_argument("--distill", action="store_true", help="KL to the target's distributions instead of the text")
        p.add_argument(
            "--target-dtype",
            default="float32",
            help="the target's dtype (its embedding seeds the draft's; the teacher with --distill)",
        )
    t.add_argument("--init", help="start from this saved draft instead of a fresh one")
    t.add_argument(
        "--from-target",
        type=layer_list,
        help="start from these target layers, e.g. 0,1 (the target's width; --hidden and --layers are ignored)",
    )
    t.add_argument(
        "--draft-vocab",
        type=int,
        default=0,
        help="with --from-target, the draft's own output vocabulary: the N tokens the target's answers use most (0: "
        "the target's)",
    )
    t.add_argument("--hidden", type=int, default=192)
    t.add_argument("--layers", type=int, default=4)
    z.add_argument(
        "--shapes",
        nargs="+",
        required=True,
        type=sps_sizing.shape_argument,
        help="candidates: fresh LAYERSxHIDDEN (e.g. 2x192 4x192) or target cuts cutL1,L2,...[vN] (e.g. cut0,1v6144 "
        "cut0v8192)",
    )
    z.add_argument(
        "--max-file-mb",
        type=float,
        default=25,
        help="choose only drafts whose file fits (what the package ships); 0: no limit",
    )
    z.add_argument("--context", type=int, default=256, help="cached context at which forwards are priced")
    z.add_argument("--max-gamma", type=int, default=8)
    z.set_defaults(init=None)
    args = parser.parse_args(argv)
    {"generate": generate, "train": train, "size": size}[args.command](args)


if __name__ == "__main__":
    run_command(main, sys.argv[1:])
