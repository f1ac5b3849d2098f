"""Teacher-forced top-1 per TTT step and chain τ of an EAGLE-3 head on the text the target
wrote in benchmark runs, beside the held-out sets its trainer scores (a corpus folder's
validation.json and validation-<name>.json): which validation set predicts which benchmark.

A run's outputs are the target's greedy text when the run is lossless at T=0 (every method
here is), so chain τ on them is what greedy chain drafting of that depth would accept. Only
first turns are scored. A hit is the target's top-1 over its whole vocabulary, as the engine
verifies; two more columns tell a vocabulary limit from a skill one: how often the target's
token is in the draft vocabulary at all, and the head's step-0 top-1 where the target itself
is sure (p >= 0.9). Run directories of `python -m specbench` and of the bench scripts are read.

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
from specbench.train.data import TARGET
from specbench.train.packed import read_answers
from specbench.train.shared_pass import target_passes
from specbench.train.validation import COMMITTED_SET, committed_set, curve_point, domain_sets, require_greedy, run_rows

CONFIDENT = 0.9  # the target's top-1 probability from which a position counts as one the target is sure of


def main(argv: list[str]) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--head", required=True, help="an EAGLE-3 head directory")
    parser.add_argument("--data", nargs="+", default=[], help="corpus folders whose committed validation sets to score")
    parser.add_argument(
        "--runs", nargs="+", default=[], help="run directories of python -m specbench (samples.jsonl, .hydra/)"
    )
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
    require(
        bool(sets), "--data/--runs", "nothing to score: give corpus folders with validation sets or run directories"
    )
    target = registry.load_model(TARGET, args.target_dtype, "cpu")
    # the trainer's own scoring of a warm start (its export is never called here)
    head = eagle3.trainee(
        Namespace(init=args.head, ttt_steps=args.ttt_steps, layers=None, draft_vocab=None),
        target,
        tokenizer,
        [],
        Path(args.head),
        None,
    )
    head.module.eval()
    print(
        f"| set | answers | tokens | top-1 per draft step | chain τ (depth {args.ttt_steps}) | target's token "
        "draftable "
        f"| step-0 top-1 where the target's p ≥ {CONFIDENT} (share of rows) |\n| --- | --- | --- | --- | --- | "
        "--- | --- |"
    )
    for name, rows in sets.items():
        with torch.no_grad():
            scored = [scored_pass(head, batch) for batch in target_passes(target, rows, 8, args.length)]
            point = curve_point(0, 0, (hits for hits, _, _ in scored), head.chain)
        top1 = " / ".join(f"{x:.3f}" for x in point["top1"])
        draftable, confident_share, confident_top1 = step0_breakdown(scored)
        print(
            f"| {name} | {len(rows)} | {sum(len(r['answer']) for r in rows)} | {top1} | {point['chain_tau']:.3f} "
            f"| {draftable:.3f} "
            f"| {confident_top1:.3f} ({confident_share:.2f}) |",
            flush=True,
        )


def scored_pass(head, batch) -> tuple[list, torch.Tensor, torch.Tensor]:
    """(hits per draft step, whether the target's greedy token is in the draft vocabulary,
    whether the target gave it p >= CONFIDENT) for one target pass, rows as the head's `keep` lays them out."""
    kept = head.keep(batch)
    target_top1 = kept[2]
    logits = batch.logits[:, 1 : target_top1.shape[1] + 1].float()
    top_probability = (logits.amax(-1) - logits.logsumexp(-1)).exp()  # no [B, n, V] softmax kept for one value a row
    return head.hits(kept), target_top1 >= 0, top_probability >= CONFIDENT


def step0_breakdown(scored: list) -> tuple[float, float, float]:
    """Over the step-0 rows scored: the share whose target token the head could draft, the share
    where the target was confident, and the head's top-1 there. A head that misses where the
    target is sure lacks skill; one that misses where the target hesitates meets its limit."""
    hit = torch.cat([hits[0][0][hits[0][1]] for hits, _, _ in scored])
    draftable = torch.cat([d[hits[0][1]] for hits, d, _ in scored])
    confident = torch.cat([c[hits[0][1]] for hits, _, c in scored])
    return share(draftable), share(confident), share(hit[confident])


def share(mask: torch.Tensor) -> float:
    return float(mask.float().mean()) if len(mask) else 0.0


if __name__ == "__main__":
    run_command(main, sys.argv[1:])
