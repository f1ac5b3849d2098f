"""Shrink a trained EAGLE-3 head's draft vocabulary to its most frequent tokens.

The head keeps the `--size` tokens of its draft vocabulary that the target's answers use
most (plus EOS): their lm_head rows unchanged, the rest dropped, d2t/t2d rebuilt. The
kept tokens score exactly as before, so the head drafts as it did wherever the target's
next token is among them. This trades a little coverage for a smaller, cheaper head
(the lm_head is the largest matrix of a one- or two-layer head over 8,192 tokens);
the coverage of the held-out answers before and after is printed and recorded.

    python -m specbench.train.shrink_vocab --head runs/smollm2-135m-eagle3-v8 --data runs/corpus corpus/smollm2-135m \\
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
from specbench.train.data import TARGET, read_answers
from specbench.train.validation import committed_set, save_head, split_held_out


def kept_tokens(head_ids: list[int], counts: Counter, size: int, always: set[int]) -> list[int]:
    """The `size` ids of `head_ids` to keep: `always` first, then by count (ties: smaller
    id), returned sorted by id as a draft vocabulary is."""
    ranked = sorted(head_ids, key=lambda t: (t not in always, -counts[t], t))
    return sorted(ranked[:size])


def shrink(head: Eagle3Head, raw_config: dict, keep: list[int]) -> tuple[Eagle3Head, dict]:
    """A copy of `head` whose draft vocabulary is `keep` (target ids, all in the head's)."""
    row_of = {t: row for row, t in enumerate(head.target_ids().tolist())}
    rows = torch.tensor([row_of[t] for t in keep])
    config = {**raw_config, "draft_vocab_size": len(keep)}
    small = Eagle3Head(head_config(config))
    state = trained_state(head)
    state["lm_head.weight"] = state["lm_head.weight"][rows]
    ids = torch.tensor(keep)
    state["d2t"] = ids - torch.arange(len(keep))
    state["t2d"] = torch.zeros_like(state["t2d"]).index_fill(0, ids, True)
    small.load_state_dict(state)
    return small, config


def coverage(rows: list[dict], vocabulary: set[int]) -> float:
    """Share of the answers' tokens a head over `vocabulary` could draft."""
    tokens = [t for r in rows for t in r["answer"]]
    return sum(t in vocabulary for t in tokens) / max(1, len(tokens))


def main(argv: list[str]) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--head", required=True, help="a trained EAGLE-3 head directory (config.json + model.safetensors)")
    parser.add_argument("--data", required=True, nargs="+", help="the target's answers whose token counts rank the vocabulary (as the trainers read them)")
    parser.add_argument("--size", required=True, type=int, help="draft-vocabulary tokens to keep")
    parser.add_argument("--out", required=True)
    args = parser.parse_args(argv)
    head = load_head(args.head, torch.float32, "cpu", key="--head")
    old = head.target_ids().tolist()
    require(0 < args.size < len(old), "--size", f"{args.size}: must be at least 1 and fewer than the head's {len(old)} draft tokens")
    tokenizer = registry.load_tokenizer(TARGET)
    answers = read_answers(args.data, tokenizer)
    committed = committed_set(args.data)
    held_out = set(committed[1]) if committed else set()
    training, validation = split_held_out(answers, held_out)
    require(bool(training), "--data", f"no target answers in {' '.join(args.data)}")
    keep = kept_tokens(old, Counter(t for r in training for t in r["answer"]), args.size, {tokenizer.eos_token_id})
    small, config = shrink(head, read_config(Path(args.head), "--head"), keep)
    out = Path(args.out)
    save_head(out, config, small)
    load_head(str(out), torch.float32, "cpu", key="shrunk head")  # the shipped files load strictly
    record = {
        "from": args.head, "data": args.data, "draft_vocab": args.size, "draft_vocab_before": len(old),
        "ranked_by": f"token counts of {len(training)} target answers (held-out keys excluded)",
        "validation_coverage": {"before": coverage(validation, set(old)), "after": coverage(validation, set(keep))} if validation else None,
    }
    source = Path(args.head)
    previous = json.loads((source / "training.json").read_text()) if (source / "training.json").is_file() else {}
    (out / "training.json").write_text(json.dumps({**previous, "shrunk_vocabulary": record}, indent=2))
    for name in ("curve.jsonl", "curve.png"):  # the learning curve of the head before shrinking
        if (source / name).is_file():
            shutil.copy(source / name, out / name)
    print(f"saved {out}: {json.dumps(record)}")


if __name__ == "__main__":
    run_command(main, sys.argv[1:])
