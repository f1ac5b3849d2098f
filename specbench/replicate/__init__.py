"""Paper replication: a runner (runners/<paper>.py) describes its paper as a `Paper`: its
sweeps, how each published number maps to one of our runs, its figures and its claims;
`main` runs the sweeps and writes tables, figures and a report under
results/<paper>/<scale>/."""

from __future__ import annotations

import argparse
import sys
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Callable

import pandas as pd
import torch

from specbench import ROOT
from specbench.errors import ConfigError, require
from specbench.replicate import report, results, sweep, tables

OUR_MODEL = "smollm2-135m"  # the embedded default that cpu scale runs


@dataclass(frozen=True, kw_only=True)
class Paper:
    """Everything `main` takes from a paper's runner, built once at the bottom of runners/<name>.py."""

    name: str  # runners/<name>.py, results/<name>/ and results/reference/<name>.csv
    title: str  # the report's and the tables' heading
    description: str  # the runner's docstring: its --help
    cpu_prompts: int  # --prompts' default: prompts per dataset of the headline sweeps at cpu scale
    cpu_max_new_tokens: int  # --max-new-tokens' default
    setup: dict[str, str]  # scale -> the report's setup line
    sweeps: Callable[[str, int, int, Path], list[sweep.Sweep]]  # (scale, prompts, max new tokens, results dir) -> the multiruns
    defaults: dict[str, dict]  # method -> its paper shape {"config.<key>": value}, pinned on every sweep (sweep.pin)
    locate: Callable[[str], tables.Locator]  # scale -> the run (or the reason there is none) of each published row
    speedup: str  # the summary column the paper's speedup convention reads (tables.compare)
    figures: Callable[[pd.DataFrame, Path], list[Path]]  # (runs, figures dir) -> the files it wrote
    claims: list[report.Claim]  # what the report checks the direction of


FUNCTIONS = ("sweeps", "locate", "figures")
MAY_BE_EMPTY = ("defaults",)  # a runner whose sweeps set every shape themselves (EntMTP) pins none


def check(paper: Paper) -> None:
    """ConfigError naming the runner and every part it left out (None, empty, not callable, or
    a scale without its setup line), so it fails before any sweep, not halfway through a report."""
    missing = []
    for part in fields(Paper):
        value = getattr(paper, part.name)
        if part.name in FUNCTIONS:
            absent = not callable(value)
        else:
            absent = value is None or (part.name not in MAY_BE_EMPTY and isinstance(value, (str, list, dict)) and not value)
        if absent:
            missing.append(part.name)
    if paper.setup:
        missing += [f"setup['{scale}']" for scale in sweep.SCALES if not paper.setup.get(scale)]
    require(not missing, f"runners/{paper.name or '<no name>'}.py", f"its Paper lacks {', '.join(missing)}")


def main(paper: Paper, argv: list[str] | None = None) -> None:
    try:
        check(paper)
    except ConfigError as error:  # specbench.errors' convention: one line, exit 2, no traceback
        sys.exit(print(f"error: {error}", file=sys.stderr) or 2)
    parser = argparse.ArgumentParser(prog=f"runners/{paper.name}.py", description=paper.description, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--scale", choices=sweep.SCALES, default="cpu", help="cpu: the embedded model on a seeded prompt subset; paper: the paper's setup (GPUs, hub)")
    parser.add_argument("--prompts", type=int, default=paper.cpu_prompts, help="prompts per dataset at cpu scale")
    parser.add_argument("--max-new-tokens", type=int, default=paper.cpu_max_new_tokens, help="new tokens per answer at cpu scale")
    parser.add_argument("--launcher", choices=sweep.LAUNCHERS, default="basic", help="Hydra launcher: in this process, local processes (one at a time), or SLURM jobs")
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
    results_dir = args.results or ROOT / "results" / paper.name / args.scale
    # a runner's sweeps may write into its results (EntMTP's offline stage writes its tree bank there)
    sweeps = sweep.pin(paper.sweeps(args.scale, args.prompts, args.max_new_tokens, results_dir), paper.defaults)
    unknown = sorted(set(args.only or ()) - {s.name for s in sweeps})
    if unknown:
        parser.error(f"--only: unknown sweep(s) {', '.join(unknown)}; choose from {', '.join(s.name for s in sweeps)}")
    sweeps = [s for s in sweeps if not args.only or s.name in args.only]
    if args.datasets:
        unknown = sorted(set(args.datasets) - sweep.datasets_of(sweeps))
        if unknown:
            parser.error(f"--datasets: no sweep runs {', '.join(unknown)}; choose from {', '.join(sorted(sweep.datasets_of(sweeps)))}")
        sweeps = sweep.on_datasets(sweeps, args.datasets)
    outputs = (args.outputs or ROOT / "outputs" / "replicate" / paper.name / args.scale).resolve()
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


def write_results(paper: Paper, scale: str, runs, out_dir: Path) -> None:
    reference = tables.read_reference(ROOT / "results" / "reference" / f"{paper.name}.csv")
    compared = tables.compare(reference, runs, paper.locate(scale), OUR_MODEL if scale == "cpu" else None, paper.speedup)
    written = tables.write(compared, out_dir / "tables", paper.title)
    figures = paper.figures(runs, out_dir / "figures")
    names = sorted({p.stem for p in written})
    setup = paper.setup[scale] + f" {len(runs)} finished runs"
    if len(runs):
        setup += f"; prompts per dataset {sorted(set(runs['config.dataset.limit'].astype(str)))}, new tokens {sorted(set(runs['config.gen.max_new_tokens']))}"
        if "environment.dtype" in runs:  # what the runs computed in (summaries from before `precision` name their dtype)
            precision = runs.get("environment.precision", runs["environment.dtype"]).fillna(runs["environment.dtype"])
            setup += f"; ran in {', '.join(sorted(set(precision.dropna())))}"
    setup += "."
    report.write(out_dir / "report.md", f"{paper.title}: {scale}-scale replication", setup, report.verdicts(paper.claims, runs), names, figures)
    print(f"wrote {len(names)} tables, {len(figures)} figure files and {out_dir / 'report.md'}")
