"""Paper replication: a runner (runners/<paper>.py) names its sweeps, how each published
number maps to one of our runs, its figures and its claims; `main` runs the sweeps and
writes tables, figures and a report under results/<paper>/<scale>/."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from types import ModuleType

import torch

from specbench import ROOT
from specbench.replicate import report, results, sweep, tables

OUR_MODEL = "smollm2-135m"  # the embedded default that cpu scale runs


def main(paper: ModuleType, argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog=f"runners/{paper.NAME}.py", description=paper.__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--scale", choices=sweep.SCALES, default="cpu", help="cpu: the embedded model on a seeded prompt subset; paper: the paper's setup (GPUs, hub)")
    parser.add_argument("--prompts", type=int, default=paper.CPU_PROMPTS, help="prompts per dataset at cpu scale")
    parser.add_argument("--max-new-tokens", type=int, default=paper.CPU_MAX_NEW_TOKENS, help="new tokens per answer at cpu scale")
    parser.add_argument("--launcher", choices=sweep.LAUNCHERS, default="basic", help="Hydra launcher: in this process, local processes, or SLURM jobs")
    parser.add_argument("--only", nargs="+", metavar="NAME", help="run only these sweeps (table1, figure3, ...)")
    parser.add_argument("--datasets", nargs="+", metavar="NAME", help="run the sweeps on these datasets only (gsm8k, humaneval, ...)")
    parser.add_argument("--dry-run", action="store_true", help="print the multiruns instead of running them")
    parser.add_argument("--report-only", action="store_true", help="write tables, figures and report from the runs already finished")
    parser.add_argument("--outputs", type=Path, help="where runs go (default outputs/replicate/<paper>/<scale>)")
    parser.add_argument("--results", type=Path, help="where tables, figures and report go (default results/<paper>/<scale>)")
    parser.add_argument("overrides", nargs="*", help="extra Hydra overrides for every run, e.g. hydra.launcher.partition=gpu")
    parser.error = lambda message: sys.exit(print(f"error: {message}", file=sys.stderr) or 2)  # one line, no usage dump
    args = parser.parse_args(argv)
    if args.prompts < 1 or args.max_new_tokens < 1:
        parser.error("--prompts and --max-new-tokens must be >= 1")
    results_dir = args.results or ROOT / "results" / paper.NAME / args.scale
    # a runner's sweeps may write into its results (EntMTP's offline stage writes its tree bank there)
    sweeps = sweep.pin(paper.sweeps(args.scale, args.prompts, args.max_new_tokens, results_dir), paper.DEFAULTS)
    unknown = sorted(set(args.only or ()) - {s.name for s in sweeps})
    if unknown:
        parser.error(f"--only: unknown sweep(s) {', '.join(unknown)}; choose from {', '.join(s.name for s in sweeps)}")
    sweeps = [s for s in sweeps if not args.only or s.name in args.only]
    if args.datasets:
        unknown = sorted(set(args.datasets) - sweep.datasets_of(sweeps))
        if unknown:
            parser.error(f"--datasets: no sweep runs {', '.join(unknown)}; choose from {', '.join(sorted(sweep.datasets_of(sweeps)))}")
        sweeps = sweep.on_datasets(sweeps, args.datasets)
    outputs = (args.outputs or ROOT / "outputs" / "replicate" / paper.NAME / args.scale).resolve()
    no_gpu = args.scale == "paper" and args.launcher != "slurm" and not torch.cuda.is_available()
    if not args.report_only:
        sweep.launch(sweeps, outputs, args.launcher, tuple(args.overrides), dry_run=args.dry_run or no_gpu)
    if no_gpu and not args.report_only:
        print("scale=paper needs GPUs and the Hugging Face hub: the multiruns above were printed, not launched "
              "(run them on a GPU node, or add --launcher slurm)")
        return
    if args.dry_run:
        return
    write_results(paper, args.scale, results.collect(outputs), results_dir)


def write_results(paper: ModuleType, scale: str, runs, out_dir: Path) -> None:
    reference = tables.read_reference(ROOT / "results" / "reference" / f"{paper.NAME}.csv")
    compared = tables.compare(reference, runs, paper.locate(scale), OUR_MODEL if scale == "cpu" else None, paper.SPEEDUP)
    written = tables.write(compared, out_dir / "tables", paper.TITLE)
    figures = paper.figures(runs, out_dir / "figures")
    names = sorted({p.stem for p in written})
    setup = paper.SETUP[scale] + f" {len(runs)} finished runs"
    if len(runs):
        setup += f"; prompts per dataset {sorted(set(runs['config.dataset.limit'].astype(str)))}, new tokens {sorted(set(runs['config.gen.max_new_tokens']))}"
        if "environment.dtype" in runs:
            setup += f"; dtype {', '.join(sorted(set(runs['environment.dtype'].dropna())))}"
    setup += "."
    report.write(out_dir / "report.md", f"{paper.TITLE}: {scale}-scale replication", setup, report.verdicts(paper.CLAIMS, runs), names, figures)
    print(f"wrote {len(names)} tables, {len(figures)} figure files and {out_dir / 'report.md'}")
