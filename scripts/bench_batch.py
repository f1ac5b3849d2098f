"""`make bench-batch`: speedup and throughput against batch size (CAST's Table 3 and
Figure 5 on this machine), each method beside AR at the same batch size on the same
prompts, through the runner (AR back to back with the method on every batch, order
alternating), with 95% bootstrap intervals over batches.

    python scripts/bench_batch.py --batches 1 2 4 8 16 --prompts 10 --datasets humaneval mt_bench

Rows: the defaults (eagle3 and cast, both with auto shapes) and cast at Appendix E's shape for the
batch size (depth 13, threshold 3 below batch size 8; depth 9, threshold 2.5 from 8) with each
ablation (no breadth / depth pruning, no dynamic reranking). A point at batch size B decodes at
least MIN_GROUPS batches (MIN_GROUPS * B prompts, or the whole dataset), the fewest its interval is
drawn from. Written to results/bench/batch-<fingerprint>.{md,json,png}.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

from specbench import ROOT  # noqa: E402
from specbench.costs import autotune  # noqa: E402
from specbench.costs.fingerprint import device_fingerprint, fingerprint_id  # noqa: E402
from specbench.errors import run_command  # noqa: E402
from specbench.metrics.intervals import MIN_GROUPS  # noqa: E402

sys.path.append(str(ROOT))  # Appendix E's shape is a paper setting: it lives in CAST's runner
from bench_speed import add_run_arguments, run_method  # noqa: E402
from bench_vs_transformers import config  # noqa: E402

from runners.cast import cast_filters, tree_overrides  # noqa: E402


def paper_shape(**switches: bool):
    """Overrides at a batch size: Appendix E's shape (threshold 3, the 8B models'), shared by the
    paper's rows so the ablations compare one tree rule, with `switches` (component: on?)."""
    return lambda batch: tree_overrides(
        {**cast_filters("llama3.1-8b", batch), **{f"config.method.tree.{k}": v for k, v in switches.items()}}
    )


# each variant's method and its overrides at a batch size
VARIANTS = {
    "eagle3": ("eagle3", lambda batch: []),
    "cast": ("cast", lambda batch: []),
    "cast-appE": ("cast", paper_shape()),
    "cast-appE-BP": ("cast", paper_shape(breadth_pruning=False)),
    "cast-appE-DP": ("cast", paper_shape(depth_pruning=False)),
    "cast-appE-DR": ("cast", paper_shape(dynamic_rerank=False)),
}


def figure(rows: list[dict], path: Path) -> None:
    fig, axes = plt.subplots(1, 2, figsize=(10, 3.8))
    # one colour per variant, one line style per dataset
    for dataset, style in zip(sorted({r["dataset"] for r in rows}), ("-", "--", ":", "-.")):
        for colour, variant in enumerate(VARIANTS):
            points = sorted((r["batch"], r) for r in rows if r["variant"] == variant and r["dataset"] == dataset)
            if not points:
                continue
            line = {"marker": "o", "color": f"C{colour}", "linestyle": style, "label": f"{variant} ({dataset})"}
            axes[0].plot([b for b, _ in points], [r["speedup"] for _, r in points], **line)
            axes[1].plot([b for b, _ in points], [r["tok_s"] for _, r in points], **line)
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


def point(variant: str, dataset: str, batch: int, summary: dict) -> dict:
    """One measured point: its run's speeds and shape, the dtype it loaded and what it computed in."""
    return {
        "variant": variant,
        "dataset": dataset,
        "batch": batch,
        "prompts": summary["results"]["samples"],
        "tau": summary["results"]["tau"],
        "delta": summary["results"]["delta"],
        "tok_s": summary["results"]["tok_per_s"],
        "ar_tok_s": summary["baseline"]["tok_per_s"],
        "speedup": summary["speedup"],
        "ci95": summary.get("speedup_ci95"),
        "latency_s": summary["results"]["mean_latency_s"],
        "dtype": summary["environment"]["dtype"],
        "precision": summary["environment"]["precision"],
        "predicted": (summary.get("cost_model") or {}).get("predicted_speedup"),
        "shape": autotune.describe(summary["tree_choice"]) if summary.get("tree_choice") else "",
    }


def write(rows: list[dict], args, base: dict, fingerprint: dict) -> list[str]:
    """The table, JSON and figure of the points measured so far."""
    args.out.mkdir(parents=True, exist_ok=True)
    stem = args.out / f"batch-{fingerprint_id(fingerprint)}"
    lines = [
        f"# Speedup against batch size on {fingerprint.get('cpu_model') or fingerprint.get('gpu')}",
        "",
        f"Fingerprint: `{json.dumps(fingerprint)}`. ran in {' / '.join(sorted({r['precision'] for r in rows}))} "
        f"(hardware.dtype={base['hardware']['dtype']}), T=0, "
        f"{args.max_new_tokens} new tokens, first turn only; AR at the same batch size on the same prompts, back "
        "to back.",
        "",
        "| dataset | batch | variant | shape (auto) | prompts | tau | delta | tok/s | AR tok/s | speedup (95% "
        "CI) | predicted | mean latency s |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        ci = f" ({r['ci95'][0]:.2f}-{r['ci95'][1]:.2f})" if r["ci95"] else ""
        predicted = f"{r['predicted']:.2f}x" if r["predicted"] else "-"
        lines.append(
            f"| {r['dataset']} | {r['batch']} | {r['variant']} | {r['shape']} | {r['prompts']} | {r['tau']:.2f} "
            f"| {r['delta']:.2f} | "
            f"{r['tok_s']:.1f} | {r['ar_tok_s']:.1f} | {r['speedup']:.2f}x{ci} | {predicted} | {r['latency_s']:.1f} |"
        )
    stem.with_suffix(".md").write_text("\n".join(lines) + "\n")
    stem.with_suffix(".json").write_text(json.dumps({"fingerprint": fingerprint, "rows": rows}, indent=1))
    figure(rows, stem.with_suffix(".png"))
    return lines


def main(argv: list[str]) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--batches", type=int, nargs="+", default=[1, 2, 4, 8, 16])
    parser.add_argument("--variants", nargs="+", default=list(VARIANTS), choices=list(VARIANTS))
    parser.add_argument("--datasets", nargs="+", default=["humaneval", "mt_bench"])
    add_run_arguments(parser, prompts=10)
    args = parser.parse_args(argv)
    base = config(*args.overrides)
    fingerprint = device_fingerprint(base["hardware"]["device"], base["hardware"]["threads"])
    rows, lines = [], []
    for dataset in args.datasets:
        for batch in args.batches:
            for variant in args.variants:
                method, extra = VARIANTS[variant]
                prompts = max(args.prompts, MIN_GROUPS * batch)  # dataset.limit stops at the dataset's size
                overrides = [*args.overrides, f"gen.batch_size={batch}", *extra(batch)]
                run_args = argparse.Namespace(**{**vars(args), "prompts": prompts, "overrides": overrides})
                rows.append(point(variant, dataset, batch, run_method(method, dataset, run_args)))
                lines = write(rows, args, base, fingerprint)  # after every point: a stopped sweep keeps its table
    print("\n".join(lines))


if __name__ == "__main__":
    run_command(main, sys.argv[1:])
