"""`make bench-batch`: speedup and throughput against batch size (CAST's Table 3 and
Figure 5 on this machine), each method beside AR at the same batch size on the same
prompts, through the runner (AR back to back with the method on every batch, order
alternating), with 95% bootstrap intervals over batches.

    python scripts/bench_batch.py --batches 1 2 4 8 16 --prompts 16 --datasets humaneval mt_bench

Rows: eagle3 (auto shape) and cast (threshold 3) with each ablation (no breadth / depth pruning, no
dynamic reranking). Written to results/bench/batch-<fingerprint>.{md,json,png}.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

from specbench.costs.fingerprint import device_fingerprint, fingerprint_id  # noqa: E402

from bench_speed import add_run_arguments, run_method  # noqa: E402
from bench_vs_transformers import config  # noqa: E402

# CAST at the paper's threshold 3 (Appendix E, 8B models), so the ablations compare one tree rule
PAPER_THRESHOLD = ["method.tree.c1=3", "method.tree.c2=3", "method.tree.c3=3"]
VARIANTS = {
    "eagle3": ("eagle3", []),
    "cast": ("cast", PAPER_THRESHOLD),
    "cast -BP": ("cast", [*PAPER_THRESHOLD, "method.tree.breadth_pruning=false"]),
    "cast -DP": ("cast", [*PAPER_THRESHOLD, "method.tree.depth_pruning=false"]),
    "cast -DR": ("cast", [*PAPER_THRESHOLD, "method.tree.dynamic_rerank=false"]),
}


def figure(rows: list[dict], path: Path) -> None:
    fig, axes = plt.subplots(1, 2, figsize=(10, 3.8))
    for dataset in sorted({r["dataset"] for r in rows}):
        for variant in VARIANTS:
            points = sorted((r["batch"], r) for r in rows if r["variant"] == variant and r["dataset"] == dataset)
            if not points:
                continue
            label = f"{variant} ({dataset})"
            axes[0].plot([b for b, _ in points], [r["speedup"] for _, r in points], marker="o", label=label)
            axes[1].plot([b for b, _ in points], [r["tok_s"] for _, r in points], marker="o", label=label)
    axes[0].axhline(1.0, color="black", lw=0.8)
    axes[0].set_ylabel("speedup over AR at the same batch size")
    axes[1].set_ylabel("throughput (tokens/s over the batch)")
    for ax in axes:
        ax.set_xscale("log", base=2)
        ax.set_xlabel("batch size")
    axes[0].legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--batches", type=int, nargs="+", default=[1, 2, 4, 8, 16])
    parser.add_argument("--variants", nargs="+", default=list(VARIANTS), choices=list(VARIANTS))
    parser.add_argument("--datasets", nargs="+", default=["humaneval", "mt_bench"])
    add_run_arguments(parser, prompts=16)
    args = parser.parse_args()
    base = config(*args.overrides)
    fingerprint = device_fingerprint(base["hardware"]["device"], base["hardware"]["threads"])
    rows = []
    for dataset in args.datasets:
        for batch in args.batches:
            for variant in args.variants:
                method, extra = VARIANTS[variant]
                run_args = argparse.Namespace(**{**vars(args), "overrides": [*args.overrides, f"gen.batch_size={batch}", *extra]})
                summary = run_method(method, dataset, run_args)
                rows.append({
                    "variant": variant, "dataset": dataset, "batch": batch, "prompts": summary["results"]["samples"],
                    "tau": summary["results"]["tau"], "delta": summary["results"]["delta"],
                    "tok_s": summary["results"]["tok_per_s"], "ar_tok_s": summary["baseline"]["tok_per_s"],
                    "speedup": summary["speedup"], "ci95": summary.get("speedup_ci95"),
                    "latency_s": summary["results"]["mean_latency_s"], "dtype": summary["environment"]["dtype"],
                })
    args.out.mkdir(parents=True, exist_ok=True)
    stem = args.out / f"batch-{fingerprint_id(fingerprint)}"
    lines = [
        f"# Speedup against batch size on {fingerprint.get('cpu_model') or fingerprint.get('gpu')}",
        "",
        f"Fingerprint: `{json.dumps(fingerprint)}`. dtype {', '.join(sorted({r['dtype'] for r in rows}))} (hardware.dtype={base['hardware']['dtype']}), T=0, "
        f"{args.max_new_tokens} new tokens, first turn only; AR at the same batch size on the same prompts, back to back.",
        "",
        "| dataset | batch | variant | prompts | tau | delta | tok/s | AR tok/s | speedup (95% CI) | mean latency s |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        ci = f" ({r['ci95'][0]:.2f}-{r['ci95'][1]:.2f})" if r["ci95"] else ""
        lines.append(
            f"| {r['dataset']} | {r['batch']} | {r['variant']} | {r['prompts']} | {r['tau']:.2f} | {r['delta']:.2f} | "
            f"{r['tok_s']:.1f} | {r['ar_tok_s']:.1f} | {r['speedup']:.2f}x{ci} | {r['latency_s']:.1f} |"
        )
    stem.with_suffix(".md").write_text("\n".join(lines) + "\n")
    stem.with_suffix(".json").write_text(json.dumps({"fingerprint": fingerprint, "rows": rows}, indent=1))
    figure(rows, stem.with_suffix(".png"))
    print("\n".join(lines))


if __name__ == "__main__":
    main()
