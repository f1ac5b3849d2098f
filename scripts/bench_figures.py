"""Figures and per-prompt views of `make bench-methods` and `make bench-theta` results.

- TALON Figure 6: δ against τ per prompt for `talon` and `eagle3`, from the samples of the
  method benchmark, with each method's slope and mean |δ − τ| (distance from the oracle).
- MARS Figure 3: speedup over AR (median per prompt), τ, accuracy and the target's NLL
  against θ, per dataset, from the θ sweep's summary.

    python scripts/bench_figures.py --methods results/bench/methods_t0 results/bench/methods_t1 \\
        --theta results/bench/theta.json --out results/bench/figures
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd

from specbench.errors import run_command
from specbench.metrics.records import read_records
from specbench.replicate.report import delta_vs_tau_figure, save
from specbench.replicate.verdicts import slope

ACCURACY_KEYS = ("gsm8k_accuracy", "humaneval_pass@1")


def per_prompt_points(stems: list[Path]) -> pd.DataFrame:
    """τ and δ per prompt; rows written before bench_methods kept `cycle_tokens` (the
    committed session files) count the prefill's first token of each turn in τ too."""
    rows = [
        {
            "dataset": r["dataset"],
            "temperature": r["temperature"],
            "method": r["method"],
            "id": r["id"],
            "tau": r.get("cycle_tokens", r["tokens"]) / r["target_forwards"],
            "delta": r["draft_forwards"] / r["target_forwards"],
        }
        for stem in stems
        for r in read_records(stem.with_suffix(".samples.jsonl"))
        if r["method"] in ("talon", "eagle3") and r["target_forwards"]
    ]
    return pd.DataFrame(rows)


def delta_vs_tau_table(points: pd.DataFrame) -> pd.DataFrame:
    rows = []
    for (temperature, method), group in points.groupby(["temperature", "method"]):
        varies = group["tau"].nunique() > 1 and group["delta"].nunique() > 1  # a fixed-depth tree has one δ
        rows.append(
            {
                "T": temperature,
                "method": method,
                "prompts": len(group),
                "tau": group["tau"].mean(),
                "delta": group["delta"].mean(),
                "mean |delta - tau|": (group["delta"] - group["tau"]).abs().mean(),
                "slope of delta on tau": slope(group["tau"], group["delta"]) if varies else 0.0,
                "correlation": group["tau"].corr(group["delta"]) if varies else np.nan,
            }
        )
    return pd.DataFrame(rows)


def theta_table(path: Path) -> pd.DataFrame:
    """One row per dataset and θ of a `bench_methods.py` run whose labels set method.verifier.theta."""
    summary = json.loads(path.read_text())
    thetas = {}
    for spec in summary["settings"]["set"]:
        label, _, override = spec.partition(":")
        key, _, value = override.partition("=")
        if key == "method.verifier.theta":
            thetas[label] = float(value)
    rows = []
    for result in summary["results"]:
        ar = result["methods"]["ar"]
        for label, theta in thetas.items():
            row = result["methods"][label]
            notes = row["verifier"]
            decided = sum(notes.get(k, 0) for k in ("exact", "relaxed", "sampled", "rejected"))
            rows.append(
                {
                    "dataset": result["dataset"],
                    "prompts": result["prompts"],
                    "theta": theta,
                    "tau": row["tau"],
                    "speedup": row["speedup_median_per_prompt"],
                    "tok_per_s": row["tok_per_s"],
                    "accuracy": next((row["quality"][k] for k in ACCURACY_KEYS if k in row["quality"]), np.nan),
                    "ar_accuracy": next((ar["quality"][k] for k in ACCURACY_KEYS if k in ar["quality"]), np.nan),
                    "nll_per_token": row["target_nll_per_token"],
                    "ar_nll_per_token": ar["target_nll_per_token"],
                    "relaxed_share": notes.get("relaxed", 0) / decided if decided else np.nan,
                }
            )
    return pd.DataFrame(rows).sort_values(["dataset", "theta"])


def theta_figure(table: pd.DataFrame, out_dir: Path) -> list[Path]:
    datasets = list(table["dataset"].unique())
    fig, axes = plt.subplots(1, len(datasets), figsize=(6.5 * len(datasets), 4.0), squeeze=False, layout="constrained")
    for ax, dataset in zip(axes[0], datasets):
        part = table[table["dataset"] == dataset]
        ax.plot(part["theta"], part["accuracy"], "o-", color="tab:blue", label="accuracy")
        ax.axhline(part["ar_accuracy"].iloc[0], ls=":", color="tab:blue", label="AR accuracy")
        ax.set(xlabel="theta", ylabel="accuracy", title=f"{dataset}, T=1, {part['prompts'].iloc[0]} prompts")
        right = ax.twinx()
        right.plot(part["theta"], part["speedup"], "s-", color="tab:purple", label="speedup over AR")
        right.set_ylabel("speedup over AR (median per prompt)")
        lines = ax.get_legend_handles_labels()[0] + right.get_legend_handles_labels()[0]
        ax.legend(lines, [line.get_label() for line in lines], fontsize=7)
    fig.suptitle("MARS Figure 3 (ours): theta against accuracy and speedup")
    return save(fig, out_dir, "mars_figure3_theta")


def main(argv: list[str]) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument(
        "--methods", nargs="*", type=Path, default=[], help="--out of bench_methods.py runs (without suffix)"
    )
    parser.add_argument("--theta", type=Path, help="summary JSON of the θ sweep")
    parser.add_argument("--out", type=Path, default=Path("results/bench/figures"))
    args = parser.parse_args(argv)
    missing = [
        str(p)
        for p in [*(s.with_suffix(".samples.jsonl") for s in args.methods), *([args.theta] if args.theta else [])]
        if not p.exists()
    ]
    if missing:
        raise SystemExit(
            f"error: no such results: {', '.join(missing)} (make bench-methods / make bench-theta write them)"
        )
    if args.methods:
        points = per_prompt_points(args.methods)
        print(delta_vs_tau_table(points).to_markdown(index=False, floatfmt=".2f"))
        for path in delta_vs_tau_figure(
            points,
            args.out,
            "talon_figure6_delta_vs_tau",
            "TALON Figure 6 (ours): draft cost vs accepted tokens, per prompt",
        ):
            print(path)
    if args.theta:
        table = theta_table(args.theta)
        print(table.to_markdown(index=False, floatfmt=".3f"))
        for path in theta_figure(table, args.out):
            print(path)


if __name__ == "__main__":
    run_command(main, sys.argv[1:])
