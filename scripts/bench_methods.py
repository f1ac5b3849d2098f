"""Methods against AR on the same prompts, side by side: a sweep of `python -m specbench` runs.

Each (temperature, dataset, method) is one run of the runner itself (specbench.run.runner.Runner:
AR back to back with the method on every prompt, the order alternating; the clock, τ, δ,
speedup, intervals, agreement, quality and the cost-model prediction computed where every
run computes them). Runs resume by config hash under --runs, so an interrupted sweep
keeps every finished sample. Written: --out (per dataset and temperature, a row per
method and one for AR) and --out with suffix .samples.jsonl (a row per prompt and method:
τ and δ per prompt for TALON Figure 6).

    python scripts/bench_methods.py --methods sps pld eagle3 --datasets mt_bench humaneval gsm8k \\
        --prompts 20 --max-new-tokens 256 --temperatures 0 1 --out results/bench/issue3.json
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from bench_vs_transformers import config

from specbench.errors import run_command
from specbench.metrics.records import read_records
from specbench.metrics.speed import cycle_tokens
from specbench.run.config import run_name
from specbench.run.runner import Runner

# the fixed shapes this benchmark has always measured (the MARS/TALON setups); the method
# configs' `auto` shapes are chosen per machine by a run (python -m specbench, make bench)
PAPER_SHAPES = {
    "eagle3": ["method.tree.top_k=10", "method.tree.depth=6", "method.tree.total_tokens=60"],
    "mars": ["method.tree.top_k=10", "method.tree.depth=6", "method.tree.total_tokens=60"],
    "talon": ["method.tree.budget=60", "method.tree.top_k=10"],
    "sps": ["method.tree.gamma=5"],
    "pld": ["method.tree.gamma=10"],
    "sps_tree": ["method.tree.top_k=4", "method.tree.depth=4", "method.tree.total_tokens=24"],
}


def run(label: str, method: str, dataset: str, temperature: float, args) -> tuple[dict, Path]:
    """(summary, run directory) of one runner run: this sweep's settings, the method's
    paper shape, then the --set overrides of its label."""
    overrides = [s.split(":", 1)[1] for s in args.set if s.split(":", 1)[0] == label]
    cfg = config(
        f"method={method}",
        f"dataset={dataset}",
        f"dataset.limit={args.prompts}",
        f"dataset.seed={args.seed}",
        "dataset.max_turns=1",
        f"gen.max_new_tokens={args.max_new_tokens}",
        f"gen.temperature={temperature}",
        f"seed={args.seed}",
        f"output_root={args.runs}",
        *args.overrides,
        *PAPER_SHAPES.get(method, []),
        *overrides,
    )
    out_dir = Path(args.runs) / label / run_name(cfg)
    out_dir.mkdir(parents=True, exist_ok=True)
    return Runner(cfg, out_dir).run(), out_dir


def method_row(summary: dict, out_dir: Path) -> dict:
    results, agreement, model = (
        summary["results"],
        summary.get("agreement_with_baseline", {}),
        summary.get("cost_model") or {},
    )
    return {
        "tok_per_s": results["tok_per_s"],
        "tau": results["tau"],
        "delta": results["delta"],
        "speedup": summary.get("speedup"),
        "speedup_median_per_prompt": summary.get("speedup_median_per_sample"),
        "speedup_ci95": summary.get("speedup_ci95"),
        "predicted_speedup": model.get("predicted_speedup"),
        "engine_overhead_share": model.get("engine_overhead_share"),
        "identical_to_ar": agreement.get("exact_match_rate"),
        "common_prefix_with_ar": agreement.get("mean_common_prefix_fraction"),
        "target_nll_per_token": results["target_nll_per_token"],
        "quality": summary.get("quality") or {},
        "verifier": results["verifier"],
        "run": str(out_dir),
        "precision": summary["environment"]["precision"],
    }


def ar_row(summary: dict) -> dict:
    """AR as paired with a method in its run (the same prompts, back to back)."""
    baseline = summary["baseline"]
    return {
        "tok_per_s": baseline["tok_per_s"],
        "tau": baseline["tau"],
        "delta": baseline["delta"],
        "speedup": 1.0,
        "speedup_median_per_prompt": 1.0,
        "target_nll_per_token": baseline["target_nll_per_token"],
        "quality": summary.get("baseline_quality") or {},
        "verifier": baseline["verifier"],
        "precision": summary["environment"]["precision"],
    }


def per_prompt(label: str, dataset: str, temperature: float, out_dir: Path) -> list[dict]:
    """One row per prompt of a run: the method's tokens and forwards (τ, δ per prompt)."""
    rows = []
    for record in read_records(out_dir / "samples.jsonl"):
        m = record["method"]
        rows.append(
            {
                "dataset": dataset,
                "temperature": temperature,
                "method": label,
                "id": record["id"],
                "tokens": m["new_tokens"],
                "cycle_tokens": cycle_tokens(m),
                "seconds": m["seconds"],
                "target_forwards": m["target_forwards"],
                "draft_forwards": m["draft_forwards"],
            }
        )
    return rows


def print_table(results: list[dict], header: str) -> None:
    print(f"\n{header}")
    print(
        "| dataset | T | method | precision | τ | δ | tok/s | speedup (median) | predicted | same ids as AR | "
        "NLL/token | quality |"
    )
    print("| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |")
    for result in results:
        for label, row in result["methods"].items():
            score = ", ".join(f"{k} {v:.3f}" for k, v in row["quality"].items() if isinstance(v, float))
            nll = "" if row["target_nll_per_token"] is None else f"{row['target_nll_per_token']:.3f}"
            predicted = f"{row['predicted_speedup']:.2f}x" if row.get("predicted_speedup") is not None else ""
            same = f"{row['identical_to_ar']:.2f}" if row.get("identical_to_ar") is not None else ""
            print(
                f"| {result['dataset']} | {result['temperature']:g} | {label} | {row['precision']} | "
                f"{row['tau']:.2f} | {row['delta']:.2f} | {row['tok_per_s']:.1f} | "
                f"{row['speedup']:.2f}x ({row['speedup_median_per_prompt']:.2f}x) | {predicted} | {same} | {nll} "
                f"| {score} |"
            )


def main(argv: list[str]) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument(
        "--methods",
        nargs="+",
        default=["sps", "pld", "eagle3"],
        help="method names; LABEL=METHOD runs a method under another label",
    )
    parser.add_argument("--datasets", nargs="+", default=["mt_bench", "humaneval", "gsm8k"])
    parser.add_argument("--temperatures", nargs="+", type=float, default=[0.0, 1.0])
    parser.add_argument("--prompts", type=int, default=20)
    parser.add_argument("--max-new-tokens", type=int, default=256)
    parser.add_argument("--seed", type=int, default=0, help="seeded prompt subset and sampling")
    parser.add_argument("--out", type=Path, default=Path("results/bench/methods.json"))
    parser.add_argument("--runs", default="outputs/bench-methods", help="where the runs go (resumed by config hash)")
    parser.add_argument("overrides", nargs="*", help="Hydra overrides for every run, e.g. hardware=cpu-fp32")
    parser.add_argument(
        "--set",
        nargs="*",
        default=[],
        metavar="LABEL:KEY=VALUE",
        help="per-method override, e.g. eagle3:method.tree.top_k=4",
    )
    args = parser.parse_args(argv)
    specs = [(spec.partition("=")[0], spec.partition("=")[2] or spec) for spec in args.methods]
    settings = {**vars(args), "out": str(args.out)}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    results, points = [], []
    for temperature in args.temperatures:
        for dataset in args.datasets:
            rows = {}
            for label, method in specs:
                summary, out_dir = run(label, method, dataset, temperature, args)
                rows.setdefault("ar", ar_row(summary))
                rows[label] = method_row(summary, out_dir)
                points += per_prompt(label, dataset, temperature, out_dir)
            results.append({"dataset": dataset, "temperature": temperature, "prompts": args.prompts, "methods": rows})
            args.out.write_text(json.dumps({"settings": settings, "results": results}, indent=2, default=str))
            args.out.with_suffix(".samples.jsonl").write_text("".join(json.dumps(p) + "\n" for p in points))
    print_table(
        results,
        f"settings: {' '.join(args.overrides) or 'defaults'}, prompts={args.prompts}, "
        f"max_new_tokens={args.max_new_tokens}",
    )


if __name__ == "__main__":
    run_command(main, sys.argv[1:])
