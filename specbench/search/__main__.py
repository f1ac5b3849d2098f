"""`python -m specbench.search [--budget N] [--max-depth D] [--prompts P] [--tokens T] --bank FILE [overrides]`:
EntMTP's offline stage for one task (the dataset): the acceptance frontier of the
method's heads (Algorithm 1), every frontier tree re-measured by self-rollout, the
throughput-Pareto trees by predicted speedup from this machine's cost profile, added
to the bank FILE under the dataset's name (other tasks in the file are kept).

    python -m specbench.search --bank results/entmtp/bank-smollm2-135m.json method=hydra dataset=gsm8k gen.temperature=0.7
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path

from specbench.__main__ import compose_config
from specbench.engine.loop import Limits
from specbench.errors import require, run_command
from specbench.search.frontier import acceptance_frontier, self_rollout, task_trees
from specbench.trees.entmtp import load_bank, save_bank


def main(argv: list[str]) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--bank", required=True, type=Path)
    parser.add_argument("--budget", type=int, default=32, help="frontier trees up to this many nodes, root included")
    parser.add_argument("--max-depth", type=int, default=4)
    parser.add_argument("--prompts", type=int, default=8, help="first turns of the dataset's samples (seeded order)")
    parser.add_argument("--tokens", type=int, default=64, help="tokens per rollout")
    args, overrides = parser.parse_known_args(argv)
    require(args.budget >= 2, "--budget", f"must be >= 2 (the root and one node), got {args.budget}")
    require(args.max_depth >= 1, "--max-depth", f"must be >= 1, got {args.max_depth}")
    cfg = compose_config(overrides)
    from specbench.run import Runner

    runner = Runner(cfg, Path(tempfile.mkdtemp(prefix="specbench-search-")))
    runner.load()
    method = runner.method
    require(method.drafter is not None, "method", f"{cfg['method']['name']} has no drafter to search trees for")
    samples = runner.samples[: args.prompts]
    prompts = [runner.prompt_ids([{"role": "user", "content": s.turns[0]}], s.id) for s in samples]
    limits = Limits(args.tokens, runner.limits.stop_token_ids)
    history = acceptance_frontier(runner.target, method.drafter, method.verifier, prompts, runner.sampling, limits, args.max_depth, args.budget)
    for entry in history:
        entry["accept_unbiased"] = self_rollout(runner.target, method.drafter, method.verifier, entry["choices"], prompts, runner.sampling, limits)
    costs = method.costs
    require(costs is not None, "costs.profile", "the throughput re-ranking needs this machine's cost profile; leave costs.profile=true")
    context = sum(map(len, prompts)) / len(prompts) + args.tokens / 2
    task = cfg["dataset"]["name"]
    bank, meta = load_bank(str(args.bank)) if args.bank.is_file() else ({}, {})
    bank[task] = task_trees(history, costs, context)
    meta = {**meta, "model": cfg["model"]["name"], "heads": cfg["method"]["drafter"], "temperature": runner.sampling.temperature,
            "verifier": cfg["method"]["verifier"], "fingerprint": runner.profile.key["fingerprint"],
            f"search_{task}": {"samples": [s.id for s in samples], "tokens": args.tokens, "budget": args.budget, "max_depth": args.max_depth, "frontier": history}}
    save_bank(args.bank, bank, meta)
    trees = bank[task]
    print(f"{task}: {len(history)} frontier trees, {len(trees.trees)} on the throughput-Pareto front -> {args.bank}")
    for i, t in enumerate(trees.trees):
        roles = [name for name in ("static", "conservative", "aggressive") if getattr(trees, name) == i]
        print(f"  {t['size']:3d} nodes, depth {t['depth']}: accept {t['accept_biased']:.2f} one-step / {t['accept_unbiased']:.2f} self-rollout, "
              f"predicted {t['predicted_speedup']:.2f}x {' '.join(roles)}")
    print(json.dumps({"static": trees.static, "conservative": trees.conservative, "aggressive": trees.aggressive}))


if __name__ == "__main__":
    run_command(main, sys.argv[1:])
