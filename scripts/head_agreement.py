"""Teacher-forced top-1 per TTT step and chain τ of an EAGLE-3 head on the text the target
wrote in benchmark runs, beside the held-out sets its trainer scores (a corpus folder's
validation.json and validation-<name>.json): which validation set predicts which benchmark.

A run's outputs are the target's greedy text when the run is lossless at T=0 (every method
here is), so chain τ on them is what greedy chain drafting of that depth would accept. Only
first turns are scored.

    python scripts/head_agreement.py --head specbench/weights/smollm2-135m-eagle3 \\
        --data runs/corpus corpus/smollm2-135m --runs outputs/multirun/eagle3/*
"""

from __future__ import annotations

import argparse
import sys
from argparse import Namespace
from pathlib import Path

import torch

from specbench.errors import require, run_command
from specbench.models import registry
from specbench.train import eagle3
from specbench.train.data import TARGET, read_answers
from specbench.train.shared_pass import target_passes
from specbench.train.validation import COMMITTED_SET, committed_set, curve_point, domain_sets, require_greedy, run_rows


def main(argv: list[str]) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--head", required=True, help="an EAGLE-3 head directory")
    parser.add_argument("--data", nargs="+", default=[], help="corpus folders whose committed validation sets to score")
    parser.add_argument("--runs", nargs="+", default=[], help="run directories of python -m specbench (samples.jsonl, .hydra/)")
    parser.add_argument("--ttt-steps", type=int, default=6, help="draft steps scored (the chain's depth)")
    parser.add_argument("--length", type=int, default=640, help="tokens of prompt + answer kept per row")
    parser.add_argument("--target-dtype", default="float32")
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)
    tokenizer = registry.load_tokenizer(TARGET)
    sets = {}
    committed = committed_set(args.data)
    extra = domain_sets(args.data)
    if committed or extra:
        answers = read_answers(args.data, tokenizer)
        greedy = {r["key"]: r for r in answers if r.get("temperature") == 0.0}
        for name, keys in (({COMMITTED_SET: committed[1]} if committed else {}) | extra).items():
            require_greedy(keys, answers, f"keys of validation set {name!r}")
            sets[name] = [greedy[k] for k in keys]
    for run in map(Path, args.runs):
        name, rows = run_rows(run, tokenizer)
        sets[f"{name} outputs ({run.name})"] = rows
    require(bool(sets), "--data/--runs", "nothing to score: give corpus folders with validation sets or run directories")
    target = registry.load_model(TARGET, args.target_dtype, "cpu")
    # the trainer's own scoring of a warm start (its export is never called here)
    head = eagle3.trainee(Namespace(init=args.head, ttt_steps=args.ttt_steps, layers=None, draft_vocab=None), target, tokenizer, [],
                          Path(args.head), None)
    head.module.eval()
    print(f"| set | answers | tokens | top-1 per draft step | chain τ (depth {args.ttt_steps}) |\n| --- | --- | --- | --- | --- |")
    for name, rows in sets.items():
        with torch.no_grad():
            kept = [head.keep(batch) for batch in target_passes(target, rows, 8, args.length)]
            point = curve_point(0, 0, (head.hits(k) for k in kept), head.chain)
        top1 = " / ".join(f"{x:.3f}" for x in point["top1"])
        print(f"| {name} | {len(rows)} | {sum(len(r['answer']) for r in rows)} | {top1} | {point['chain_tau']:.3f} |", flush=True)


if __name__ == "__main__":
    run_command(main, sys.argv[1:])
