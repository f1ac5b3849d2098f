"""Resize a trained EAGLE-3 head's draft vocabulary: shrink it to its most used tokens, or
grow it by the most used tokens it lacks.

A head can only draft tokens of its draft vocabulary, so the vocabulary caps τ: the
shipped one misses ~9% of the target's tokens on the evaluation prompts (mostly words
copied from the prompt). Its lm_head is also the head's largest matrix, and the file must
stay under 25 MB, so the size is a trade against layers.

- Shrinking keeps the `--size` tokens the target's answers use most (plus EOS): their
  lm_head rows unchanged, so they score exactly as before.
- Swapping (`--swap K`) keeps the size: the K least used tokens (never EOS) make room for
  the K most used tokens the head lacks, or fewer pairs where a missing token is not used
  more than the one it would replace. A vocabulary picked from an early corpus misses
  tokens a later one uses often (the shipped head's v15, 500 swapped on 2026-11-28: its
  held-out answers covered 0.916 -> 0.950).
- Growing keeps every row and adds the most used tokens outside the vocabulary. A new
  token's row is its target output-embedding row mapped into the head's space by the
  linear map that best turns the target's rows of the old tokens into the head's
  (least squares), so it starts where the head's own rows of similar tokens are, and
  training goes on from there. The map's R² on old tokens left out of the fit is recorded.

Both record how much of the held-out answers the vocabulary covers before and after.

    python -m specbench.train.resize_vocab --head runs/smollm2-135m-eagle3-v8 --data runs/corpus corpus/smollm2-135m \\
        --size 6144 --out runs/smollm2-135m-eagle3-v8-6144
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
from collections import Counter
from pathlib import Path

import torch

from specbench.errors import require, run_command
from specbench.models import registry
from specbench.models.eagle3 import Eagle3Head, head_config, load_head, read_config, trained_state
from specbench.train.data import TARGET
from specbench.train.packed import read_answers
from specbench.train.validation import held_out_keys, save_head, split_held_out


def kept_tokens(head_ids: list[int], counts: Counter, size: int, always: set[int]) -> list[int]:
    """The `size` ids of `head_ids` to keep: `always` first, then by count (ties: smaller
    id), returned sorted by id as a draft vocabulary is."""
    ranked = sorted(head_ids, key=lambda t: (t not in always, -counts[t], t))
    return sorted(ranked[:size])


def added_tokens(head_ids: list[int], counts: Counter, extra: int) -> list[int]:
    """The `extra` most used ids (ties: smaller id) that occur in the answers and are not
    in `head_ids`, sorted by id."""
    held = set(head_ids)
    ranked = sorted((t for t in counts if t not in held and counts[t] > 0), key=lambda t: (-counts[t], t))
    return sorted(ranked[:extra])


def swapped_tokens(head_ids: list[int], counts: Counter, swap: int, always: set[int]) -> tuple[list[int], list[int]]:
    """(kept, added), each sorted by id: the head's ids less its `swap` least used (never
    `always`; ties: larger id first, as kept_tokens drops them), and the most used ids it
    lacks, one for each dropped id that it is used more than."""
    held = set(head_ids)
    dropping = sorted((t for t in head_ids if t not in always), key=lambda t: (counts[t], -t))[:swap]
    adding = sorted((t for t in counts if t not in held and counts[t] > 0), key=lambda t: (-counts[t], t))[:swap]
    pairs = sum(counts[a] > counts[d] for d, a in zip(dropping, adding))  # a prefix: one side falls, the other rises
    return sorted(held - set(dropping[:pairs])), sorted(adding[:pairs])


def with_vocabulary(
    head: Eagle3Head, raw_config: dict, ids: list[int], lm_head: torch.Tensor
) -> tuple[Eagle3Head, dict]:
    """A copy of `head` drafting the target ids `ids` (sorted) with these lm_head rows."""
    config = {**raw_config, "draft_vocab_size": len(ids)}
    resized = Eagle3Head(head_config(config))
    state = trained_state(head)
    state["lm_head.weight"] = lm_head
    vocab = torch.tensor(ids)
    state["d2t"] = vocab - torch.arange(len(ids))
    state["t2d"] = torch.zeros_like(state["t2d"]).index_fill(0, vocab, True)
    resized.load_state_dict(state)
    return resized, config


def shrink(head: Eagle3Head, raw_config: dict, keep: list[int]) -> tuple[Eagle3Head, dict]:
    """A copy of `head` whose draft vocabulary is `keep` (target ids, all in the head's)."""
    row_of = {t: row for row, t in enumerate(head.target_ids().tolist())}
    return with_vocabulary(head, raw_config, keep, head.lm_head.weight.detach()[[row_of[t] for t in keep]])


def embedding_map(target_rows: torch.Tensor, head_rows: torch.Tensor) -> torch.Tensor:
    """The matrix M minimising |target_rows @ M - head_rows| (least squares, float64)."""
    return torch.linalg.lstsq(target_rows.double(), head_rows.double()).solution.float()


def held_out_r2(target_rows: torch.Tensor, head_rows: torch.Tensor, every: int = 10) -> float:
    """R² of the map fitted without every `every`-th token, on those tokens."""
    out = torch.zeros(len(head_rows), dtype=torch.bool)
    out[::every] = True
    predicted = target_rows[out] @ embedding_map(target_rows[~out], head_rows[~out])
    truth = head_rows[out]
    return float(1 - (predicted - truth).square().sum() / (truth - truth.mean(0)).square().sum())


def grow(head: Eagle3Head, raw_config: dict, added: list[int], target_rows: torch.Tensor) -> tuple[Eagle3Head, dict]:
    """A copy of `head` that also drafts `added` (target ids it lacks); their rows are
    `target_rows` (the target's output embedding, all ids) mapped by embedding_map."""
    old = head.target_ids().tolist()
    old_rows = head.lm_head.weight.detach()
    new_rows = target_rows[added] @ embedding_map(target_rows[old], old_rows)
    by_id = torch.tensor(old + added).argsort()  # a draft vocabulary is sorted by target id
    return with_vocabulary(head, raw_config, sorted(old + added), torch.cat([old_rows, new_rows])[by_id])


def coverage(rows: list[dict], vocabulary: set[int]) -> float:
    """Share of the answers' tokens a head over `vocabulary` could draft."""
    tokens = [t for r in rows for t in r["answer"]]
    return sum(t in vocabulary for t in tokens) / max(1, len(tokens))


def main(argv: list[str]) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument(
        "--head", required=True, help="a trained EAGLE-3 head directory (config.json + model.safetensors)"
    )
    parser.add_argument(
        "--data",
        required=True,
        nargs="+",
        help="the target's answers whose token counts rank the vocabulary (as the trainers read them)",
    )
    resize = parser.add_mutually_exclusive_group(required=True)
    resize.add_argument("--size", type=int, help="draft-vocabulary tokens after resizing")
    resize.add_argument(
        "--swap",
        type=int,
        help="keep the size; trade up to this many of the least used draft tokens for the most used ones the head "
        "lacks",
    )
    parser.add_argument("--out", required=True)
    args = parser.parse_args(argv)
    head = load_head(args.head, torch.float32, "cpu", key="--head")
    old = head.target_ids().tolist()
    if args.swap is None:
        require(
            0 < args.size != len(old),
            "--size",
            f"{args.size}: must be at least 1 and not the head's {len(old)} draft tokens",
        )
        require(
            args.size <= head.config.vocab_size,
            "--size",
            f"{args.size}: more than the target's {head.config.vocab_size} tokens",
        )
    else:
        require(
            0 < args.swap < len(old),
            "--swap",
            f"{args.swap}: must be at least 1 and fewer than the head's {len(old)} draft tokens",
        )
    tokenizer = registry.load_tokenizer(TARGET)
    answers = read_answers(args.data, tokenizer)
    training, validation = split_held_out(answers, held_out_keys(args.data))
    require(bool(training), "--data", f"no target answers in {' '.join(args.data)}")
    counts = Counter(t for r in training for t in r["answer"])
    if args.swap is not None:
        kept, added = swapped_tokens(old, counts, args.swap, {tokenizer.eos_token_id})
        require(bool(added), "--swap", "no token the head lacks is used more than its least used one: nothing to swap")
    elif args.size < len(old):
        kept, added = kept_tokens(old, counts, args.size, {tokenizer.eos_token_id}), []
    else:
        kept, added = old, added_tokens(old, counts, args.size - len(old))
        require(
            len(added) == args.size - len(old),
            "--size",
            f"{args.size}: only {len(added)} tokens outside the head's vocabulary occur in the answers, so at "
            f"most {len(old) + len(added)}",
        )
    raw_config = read_config(Path(args.head), "--head")
    record = {
        "from": args.head,
        "data": args.data,
        "draft_vocab": len(kept) + len(added),
        "draft_vocab_before": len(old),
        "ranked_by": f"token counts of {len(training)} target answers (every held-out set's keys excluded)",
    }
    resized, config = shrink(head, raw_config, kept) if kept != old else (head, raw_config)
    if added:
        target_rows = registry.load_model(TARGET, "float32", "cpu").get_output_embeddings().weight.detach()
        base_ids, base_rows = resized.target_ids().tolist(), resized.lm_head.weight.detach()
        resized, config = grow(resized, config, added, target_rows)
        record["new_rows"] = {
            "tokens": len(added),
            "from": "the target's output-embedding rows, mapped by the least-squares map of the old tokens' rows",
            "map_r2_held_out": held_out_r2(target_rows[base_ids], base_rows),
        }
    ids = resized.target_ids().tolist()
    if validation:
        record["validation_coverage"] = {
            "before": coverage(validation, set(old)),
            "after": coverage(validation, set(ids)),
        }
    out = Path(args.out)
    save_head(out, config, resized)
    load_head(str(out), torch.float32, "cpu", key="resized head")  # the shipped files load strictly
    source = Path(args.head)
    previous = json.loads((source / "training.json").read_text()) if (source / "training.json").is_file() else {}
    (out / "training.json").write_text(json.dumps({**previous, "resized_vocabulary": record}, indent=2))
    for name in ("curve.jsonl", "curve.png"):  # the learning curve of the head before resizing
        if (source / name).is_file():
            shutil.copy(source / name, out / name)
    print(f"saved {out}: {json.dumps(record)}")


if __name__ == "__main__":
    run_command(main, sys.argv[1:])
