"""`python -m specbench.run.entmtp_search [--budget N] [--max-depth D] [--prompts P] [--tokens T] --bank FILE
[overrides]`:
EntMTP's offline stage for one task (the dataset): the acceptance frontier of the
method's heads (Algorithm 1), every frontier tree re-measured by self-rollout, the
throughput-Pareto trees by predicted speedup from this machine's cost profile, added
to the bank FILE under the dataset's name (other tasks in the file are kept). The
method's own static tree (its default) is measured the same way, for comparison.
`--exclude-limit K` draws the prompts from those a run with dataset.limit=K (and the
same dataset.seed) does not decode, so a tree is never chosen on its evaluation prompts;
`--keep-existing` leaves a task the bank already holds alone (resumable sweeps; a bank
written by an older version is searched again and replaced);
`--min-prompts N` refuses a search left with fewer prompts than that.

    python -m specbench.run.entmtp_search --bank results/entmtp/bank-smollm2-135m.json method=hydra dataset=gsm8k
    gen.temperature=0.7
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import torch

from specbench.data import questions
from specbench.engine.loop import Limits
from specbench.errors import require, run_command
from specbench.run.config import compose_config
from specbench.trees.entmtp import BANK_VERSION, bank_version, load_bank, predicted_speedup, save_bank, task_trees
from specbench.trees.entmtp_frontier import acceptance_frontier, self_rollout
from specbench.trees.static import StaticTree


def search(
    cfg: dict,
    bank_path: Path,
    budget: int,
    max_depth: int,
    prompt_count: int,
    tokens: int,
    min_prompts: int = 1,
    exclude_limit: int = 0,
):
    """Search `cfg`'s task (its dataset) with `cfg`'s method (a static tree of the heads) and
    add its trees to the bank at `bank_path` (other tasks kept; a bank of an older version
    replaced). Returns the task's trees and the frontier they were picked from."""
    task = cfg["dataset"]["name"]
    current = bank_version(bank_path) == BANK_VERSION
    from specbench.run import plan

    plan.check(cfg)
    if cfg["hardware"].get("threads") is not None:
        torch.set_num_threads(cfg["hardware"]["threads"])
    samples = questions.load(cfg["dataset"])
    if exclude_limit:
        evaluated = {
            s.id
            for s in questions.select(questions.read_source(cfg["dataset"]), {**cfg["dataset"], "limit": exclude_limit})
        }
        samples = [s for s in samples if s.id not in evaluated]
    least = max(min_prompts, 1)
    require(
        len(samples) >= least,
        "--min-prompts",
        f"{task} has {len(samples)} prompts left to search on (after --exclude-limit {exclude_limit}), "
        f"fewer than {least}",
    )
    require(prompt_count >= least, "--prompts", f"must be >= --min-prompts {least}, got {prompt_count}")
    samples = samples[:prompt_count]  # the cost profile covers these prompts' contexts only
    decided, parts = plan.decide(cfg, samples, paired=False, cached_baseline=False)
    method, target, sampling = parts.method, parts.target, parts.sampling
    require(method.drafter is not None, "method", f"{cfg['method']['name']} has no drafter to search trees for")
    prompts = [parts.prompts.ids([{"role": "user", "content": s.turns[0]}], s.id) for s in samples]
    limits = Limits(tokens, parts.limits.stop_token_ids)
    history = acceptance_frontier(target, method.drafter, method.verifier, prompts, sampling, limits, max_depth, budget)
    for entry in history:
        entry.update(self_rollout(target, method.drafter, method.verifier, entry["choices"], prompts, sampling, limits))
    costs = method.costs
    require(
        costs is not None,
        "costs.profile",
        "the throughput re-ranking needs this machine's cost profile; leave costs.profile=true",
    )
    context = sum(map(len, prompts)) / len(prompts) + tokens / 2
    default = None
    if isinstance(method.tree, StaticTree):  # the method's own tree: the default the frontier is compared with
        choices = [list(c) for c in method.tree.topology.choices]
        default = {
            "nodes": len(choices),
            "size": len(choices) + 1,
            "depth": max(map(len, choices), default=0),
            "choices": choices,
            **self_rollout(target, method.drafter, method.verifier, choices, prompts, sampling, limits),
        }
    for entry in history + ([default] if default else []):
        entry["predicted_speedup"] = round(
            predicted_speedup(entry["accept_unbiased"], entry["choices"], costs, context), 4
        )
    bank, meta = load_bank(str(bank_path)) if current else ({}, {})
    bank[task] = task_trees(history, costs, context)
    meta = {
        **meta,
        "model": cfg["model"]["name"],
        "heads": cfg["method"]["drafter"],
        "temperature": sampling.temperature,
        "verifier": cfg["method"]["verifier"],
        "fingerprint": decided.profile.key["fingerprint"],
        f"search_{task}": {
            "samples": [s.id for s in samples],
            "tokens": tokens,
            "budget": budget,
            "max_depth": max_depth,
            "context": context,
            "frontier": history,
            "default": default,
        },
    }
    save_bank(bank_path, bank, meta)
    return bank[task], history


def main(argv: list[str]) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--bank", required=True, type=Path)
    parser.add_argument(
        "--budget",
        type=int,
        default=32,
        help="frontier trees up to this many draft nodes (Algorithm 1's B; the root excluded)",
    )
    parser.add_argument("--max-depth", type=int, default=4)
    parser.add_argument("--prompts", type=int, default=8, help="first turns of the dataset's samples (seeded order)")
    parser.add_argument("--tokens", type=int, default=64, help="tokens per rollout")
    parser.add_argument(
        "--min-prompts",
        type=int,
        default=1,
        help="refuse to search on fewer prompts (the replication's intervals resample them)",
    )
    parser.add_argument(
        "--exclude-limit", type=int, default=0, help="skip the prompts a run with dataset.limit=K decodes"
    )
    parser.add_argument("--keep-existing", action="store_true", help="do nothing when the bank already has this task")
    args, overrides = parser.parse_known_args(argv)
    require(args.budget >= 2, "--budget", f"must be >= 2 draft nodes (Algorithm 1 starts from one), got {args.budget}")
    require(args.max_depth >= 1, "--max-depth", f"must be >= 1, got {args.max_depth}")
    require(args.exclude_limit >= 0, "--exclude-limit", f"must be >= 0, got {args.exclude_limit}")
    # the profile then covers the rollouts' contexts only
    if not any(o.startswith("gen.max_new_tokens=") for o in overrides):
        overrides = [*overrides, f"gen.max_new_tokens={args.tokens}"]
    cfg = compose_config(overrides)
    task = cfg["dataset"]["name"]
    current = bank_version(args.bank) == BANK_VERSION  # an older bank's tasks are searched again, the file replaced
    if args.keep_existing and current and task in load_bank(str(args.bank))[0]:
        print(f"{task}: already in {args.bank}, kept")
        return
    trees, frontier = search(
        cfg, args.bank, args.budget, args.max_depth, args.prompts, args.tokens, args.min_prompts, args.exclude_limit
    )
    print(f"{task}: {len(frontier)} frontier trees, {len(trees.trees)} on the throughput-Pareto front -> {args.bank}")
    for i, t in enumerate(trees.trees):
        roles = [name for name in ("static", "conservative", "aggressive") if getattr(trees, name) == i]
        print(
            f"  {t['nodes']:3d} nodes, depth {t['depth']}: accept {t['accept_biased']:.2f} one-step / "
            f"{t['accept_unbiased']:.2f} self-rollout, "
            f"predicted {t['predicted_speedup']:.2f}x {' '.join(roles)}"
        )
    print(json.dumps({"static": trees.static, "conservative": trees.conservative, "aggressive": trees.aggressive}))


if __name__ == "__main__":
    run_command(main, sys.argv[1:])
