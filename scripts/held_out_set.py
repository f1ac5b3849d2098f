"""Pick a held-out set of the target's greedy answers whose text is as new to the training
answers as a benchmark's outputs are, and write it as a corpus folder's domain set
(validation-<name>.json, scored apart by every trainer).

Answers held out at random from the corpus share phrasing with the training answers, so a
curve scored on them flatters a head (the shipped EAGLE-3 head: top-1 0.59 on them, 0.47 on
its MT-Bench outputs). The measure here is the share of an answer's 8-token spans that occur
in the training answers: it prints that share for each benchmark run's outputs (--runs), and
keeps the --count candidates of 64+ tokens whose share is at most --max-overlap, smallest
keys first. Candidates are the greedy answers of --candidates (answers to prompts no head has
trained on, e.g. a fresh shard); the training answers are every other answer of --data,
minus the held-out sets already committed there.

    python scripts/held_out_set.py --candidates runs/corpus/answers-t0-1of2.jsonl \\
        --data runs/corpus corpus/smollm2-135m --runs outputs/multirun/eagle3/* \\
        --max-overlap 0.05 --out corpus/smollm2-135m/validation-chat.json
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path

from specbench.errors import require, run_command
from specbench.models import registry
from specbench.train.data import TARGET
from specbench.train.packed import read_answers
from specbench.train.validation import MAIN_SET, held_out_keys, run_rows

SPAN = 8  # tokens: long enough that a shared span is shared phrasing, not shared grammar


def windows(ids: list[int]) -> list[tuple[int, ...]]:
    """The answer's 8-token spans, in order, with repeats."""
    return [tuple(ids[i : i + SPAN]) for i in range(len(ids) - SPAN + 1)]


def overlap(ids: list[int], seen: set[tuple[int, ...]]) -> float:
    """Share of the answer's 8-token spans (with repeats) that occur in `seen`."""
    spans = windows(ids)
    return sum(w in seen for w in spans) / len(spans) if spans else 0.0


def main(argv: list[str]) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--candidates", nargs="+", required=True, help="answer files or folders to pick from")
    parser.add_argument("--data", nargs="+", required=True, help="the training answers (corpus folders, packs, shards)")
    parser.add_argument(
        "--runs", nargs="*", default=[], help="T=0 benchmark run directories whose outputs' share to print"
    )
    parser.add_argument("--count", type=int, default=32)
    parser.add_argument("--min-tokens", type=int, default=64)
    parser.add_argument(
        "--max-overlap",
        type=float,
        required=True,
        help="largest share of an answer's 8-token spans found in training answers",
    )
    parser.add_argument("--out", required=True, help="validation-<name>.json to write")
    parser.add_argument(
        "--replace", action="store_true", help="overwrite an existing set (the curves scored on it stop comparing)"
    )
    args = parser.parse_args(argv)
    name = Path(args.out).stem.removeprefix("validation-")
    require(
        Path(args.out).name.startswith("validation-") and Path(args.out).suffix == ".json" and name != MAIN_SET,
        "--out",
        f"{args.out}: a domain set is a file validation-<name>.json, and <name> may not be {MAIN_SET!r}",
    )
    require(
        args.replace or not Path(args.out).exists(),
        "--out",
        f"{args.out} exists; runs that read it score their curves on it (--replace to pick anew)",
    )
    require(0.0 <= args.max_overlap <= 1.0, "--max-overlap", f"{args.max_overlap} is no share (allowed: 0 to 1)")
    tokenizer = registry.load_tokenizer(TARGET)
    candidates = [r for r in read_answers(args.candidates, tokenizer) if r.get("temperature") == 0.0]
    require(bool(candidates), "--candidates", "no greedy answer found there")
    excluded = {r["key"] for r in candidates} | held_out_keys(args.data)
    seen = set()
    for row in read_answers(args.data, tokenizer):
        if row.get("key") not in excluded:
            seen.update(windows(row["answer"]))
    print(f"training answers: {len(seen):,} distinct {SPAN}-token spans\n")
    print(
        f"| text | answers | share of {SPAN}-token spans in training answers: median | mean |\n| --- | --- | --- "
        "| --- |"
    )
    for run in map(Path, args.runs):
        dataset, rows = run_rows(run, tokenizer)
        shares = [overlap(r["answer"], seen) for r in rows]
        print(
            f"| {dataset} outputs ({run.name}) | {len(rows)} | {statistics.median(shares):.3f} | "
            f"{statistics.mean(shares):.3f} |"
        )
    shares = {r["key"]: overlap(r["answer"], seen) for r in candidates}
    print(
        f"| candidates | {len(shares)} | {statistics.median(shares.values()):.3f} | "
        f"{statistics.mean(shares.values()):.3f} |"
    )
    picked = sorted(
        r["key"] for r in candidates if len(r["answer"]) >= args.min_tokens and shares[r["key"]] <= args.max_overlap
    )[: args.count]
    require(
        len(picked) == args.count,
        "--max-overlap",
        f"only {len(picked)} candidates of {args.min_tokens}+ tokens share at most {args.max_overlap} of their "
        "spans; generate more or allow more",
    )
    kept = [shares[k] for k in picked]
    picked_keys = set(picked)
    tokens = sum(len(r["answer"]) for r in candidates if r["key"] in picked_keys)
    print(
        f"| picked ({name}) | {len(picked)} | {statistics.median(kept):.3f} | {statistics.mean(kept):.3f} "
        f"|\n\n{tokens:,} answer tokens -> {args.out}"
    )
    Path(args.out).write_text(json.dumps(picked))


if __name__ == "__main__":
    run_command(main, sys.argv[1:])
