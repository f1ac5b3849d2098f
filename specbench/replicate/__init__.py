"""Paper replication: a runner (runners/<paper>.py) describes its paper as a `Paper`: its
sweeps, how each published number maps to one of our runs, its figures and its claims;
`main` runs the sweeps, commits their runs to results/<paper>/<scale>/runs (results.store)
and writes tables, figures and a report beside them from those committed runs alone, so
`--report-only` (make report-<paper>) regenerates them on a clone without outputs/."""

from __future__ import annotations

import argparse
import json
import sys
import time
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Callable

import pandas as pd
import torch

from specbench import ROOT
from specbench.costs.contention import DEFAULT_CONTENDED_CORES
from specbench.costs.fingerprint import device_fingerprint, fingerprint_id
from specbench.errors import ConfigError, require
from specbench.replicate import regime, report, results, runsets, sweep, tables, verdicts

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
    # (scale, prompts, max new tokens, results dir) -> the multiruns
    sweeps: Callable[[str, int, int, Path], list[sweep.Sweep]]
    defaults: dict[str, dict]  # method -> its paper shape {"config.<key>": value}, pinned on every sweep (sweep.pin)
    locate: Callable[[str], tables.Locator]  # scale -> the run (or the reason there is none) of each published row
    speedup: str  # the summary column the paper's speedup convention reads (tables.compare)
    figures: Callable[[pd.DataFrame, Path], list[Path]]  # (runs, figures dir) -> the files it wrote
    claims: list[report.Claim]  # what the report checks the direction of
    # scale -> {table: why none of its cells can have a number of ours}: written as published numbers only
    published_only: dict[str, dict[str, str]] = field(default_factory=dict)
    relative_to: str = "eagle3"  # the baseline method the tables' relative view divides by
    headlines: list[report.Headline] = field(default_factory=list)  # the report's opening: its abstract's claims


FUNCTIONS = ("sweeps", "locate", "figures")
MAY_BE_EMPTY = ("defaults", "published_only")  # a runner whose sweeps set every shape themselves (EntMTP) pins none


def check(paper: Paper) -> None:
    """ConfigError naming the runner and every part it left out (None, empty, not callable, or
    a scale without its setup line), so it fails before any sweep, not halfway through a report."""
    missing = []
    for part in fields(Paper):
        value = getattr(paper, part.name)
        if part.name in FUNCTIONS:
            absent = not callable(value)
        else:
            absent = value is None or (
                part.name not in MAY_BE_EMPTY and isinstance(value, (str, list, dict)) and not value
            )
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
    parser = argparse.ArgumentParser(
        prog=f"runners/{paper.name}.py",
        description=paper.description,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument(
        "--scale",
        choices=sweep.SCALES,
        default="cpu",
        help="cpu: the embedded model on a seeded prompt subset; paper: the paper's setup (GPUs, hub)",
    )
    parser.add_argument("--prompts", type=int, default=paper.cpu_prompts, help="prompts per dataset at cpu scale")
    parser.add_argument(
        "--max-new-tokens", type=int, default=paper.cpu_max_new_tokens, help="new tokens per answer at cpu scale"
    )
    parser.add_argument(
        "--launcher",
        choices=sweep.LAUNCHERS,
        default="basic",
        help="Hydra launcher: in this process, local processes (one at a time), or SLURM jobs",
    )
    parser.add_argument("--only", nargs="+", metavar="NAME", help="run only these sweeps (table1, figure3, ...)")
    parser.add_argument(
        "--datasets", nargs="+", metavar="NAME", help="run the sweeps on these datasets only (gsm8k, humaneval, ...)"
    )
    parser.add_argument("--dry-run", action="store_true", help="print the multiruns instead of running them")
    parser.add_argument(
        "--report-only",
        action="store_true",
        help="write tables, figures and report from the committed runs (results/<paper>/<scale>/runs), or from "
        "--outputs when given",
    )
    parser.add_argument("--outputs", type=Path, help="where runs go (default outputs/replicate/<paper>/<scale>)")
    parser.add_argument(
        "--results",
        type=Path,
        help="where tables, figures, report and the committed runs go (default results/<paper>/<scale>)",
    )
    parser.add_argument(
        "overrides", nargs="*", help="extra Hydra overrides for every run, e.g. hydra.launcher.partition=gpu"
    )
    parser.error = lambda message: sys.exit(print(f"error: {message}", file=sys.stderr) or 2)  # one line, no usage dump
    args = parser.parse_args(argv)
    if args.prompts < 1 or args.max_new_tokens < 1:
        parser.error("--prompts and --max-new-tokens must be >= 1")
    results_dir = args.results or ROOT / "results" / paper.name / args.scale
    committed = results_dir / RUNS
    if args.report_only:
        try:
            regenerate(paper, args.scale, args.outputs or committed, results_dir)
        except ConfigError as error:  # no runs to write from
            parser.error(str(error))
        return
    # a runner's sweeps may write into its results (EntMTP's offline stage writes its tree bank there)
    sweeps = sweep.pin(paper.sweeps(args.scale, args.prompts, args.max_new_tokens, results_dir), paper.defaults)
    unknown = sorted(set(args.only or ()) - {s.name for s in sweeps})
    if unknown:
        names = ", ".join(dict.fromkeys(s.name for s in sweeps))
        hint = " (Hydra overrides go before --only)" if any("=" in name for name in unknown) else ""
        parser.error(f"--only: unknown sweep(s) {', '.join(unknown)}{hint}; choose from {names}")
    sweeps = [s for s in sweeps if not args.only or s.name in args.only]
    if args.datasets:
        unknown = sorted(set(args.datasets) - sweep.datasets_of(sweeps))
        if unknown:
            parser.error(
                f"--datasets: no sweep runs {', '.join(unknown)}; choose from "
                f"{', '.join(sorted(sweep.datasets_of(sweeps)))}"
            )
        sweeps = sweep.on_datasets(sweeps, args.datasets)
    # a machine's own outputs: a sweep resumed on another machine starts that machine's run set
    machine = fingerprint_id(device_fingerprint("auto"))
    outputs = (args.outputs or ROOT / "outputs" / "replicate" / paper.name / args.scale / machine).resolve()
    no_gpu = args.scale == "paper" and args.launcher != "slurm" and not torch.cuda.is_available()
    if args.dry_run or no_gpu:
        sweep.launch(sweeps, outputs, args.launcher, tuple(args.overrides), dry_run=True)
        if no_gpu:
            print(
                "scale=paper needs GPUs and the Hugging Face hub: the multiruns above were printed, not launched "
                "(run them on a GPU node, or add --launcher slurm)"
            )
        return
    timed_launch(sweeps, outputs, args.launcher, tuple(args.overrides))
    stored = runsets.store(outputs, committed)
    size = results.committed_mb(committed)
    print(f"committed {len(stored)} runs to {committed} ({size:.1f} MB)")
    if size > results.COMMITTED_MB:
        print(
            f"warning: {committed} holds {size:.1f} MB, more than the ~{results.COMMITTED_MB} MB a paper's "
            "committed runs should keep"
        )
    try:
        regenerate(paper, args.scale, committed, results_dir)
    except ConfigError as error:  # the sweeps finished no run (an offline stage alone)
        parser.error(str(error))


RUNS = "runs"  # the committed runs' directory inside a paper's results


def timed_launch(sweeps: list[sweep.Sweep], outputs: Path, launcher: str, overrides: tuple[str, ...]) -> None:
    """Launch the sweeps and append the session's wall time, the runs it finished and each
    sweep's wall time to outputs/sessions.jsonl (a failed sweep's session too: a resumed
    replication adds up)."""
    before = set(results.collect(outputs)["run"]) if outputs.is_dir() else set()
    start, per_sweep = time.monotonic(), {}
    try:
        sweep.launch(sweeps, outputs, launcher, overrides, dry_run=False, seconds=per_sweep)
    finally:
        finished = len(set(results.collect(outputs)["run"]) - before) if outputs.is_dir() else 0
        if finished:
            session = {
                "wall_seconds": round(time.monotonic() - start),
                "finished_runs": finished,
                "sweep_seconds": {name: round(s) for name, s in per_sweep.items()},
            }
            with open(outputs / results.SESSIONS, "a", encoding="utf-8") as log:
                log.write(json.dumps(session) + "\n")


def regenerate(paper: Paper, scale: str, runs_dir: Path, out_dir: Path) -> None:
    """Tables, figures and report in `out_dir` from the runs in `runs_dir` (committed run sets,
    or a sweep's outputs). With no finished run there, neither a report already in `out_dir`
    nor a paper's committed results (whose own runs are missing) are replaced by tables that
    say nothing was run: ConfigError."""
    sets = runsets.read(runs_dir)
    if not sets and (
        (Path(out_dir) / "report.md").is_file() or Path(runs_dir).resolve() == (Path(out_dir) / RUNS).resolve()
    ):
        raise ConfigError(
            f"no finished runs in {runs_dir}: nothing to regenerate {out_dir} from (runners/{paper.name}.py runs "
            "and commits them)"
        )
    write_results(paper, scale, sets, out_dir)


def write_results(paper: Paper, scale: str, sets: list[runsets.RunSet], out_dir: Path) -> None:
    """Each claim read on the run sets (report.read_on_sets) in their order (runsets.order);
    tables and figures of the first set in out_dir, of each other in out_dir/sets/<set>."""
    reference = tables.read_reference(ROOT / "results" / "reference" / f"{paper.name}.csv")
    for runset in sets:
        runset.regime = regime.regime(paper.name, runset.runs)
    sets = runsets.order(sets)
    published_only = paper.published_only.get(scale, {})
    outputs = []
    for index, runset in enumerate(sets or [runsets.RunSet("", "", results.no_runs())]):
        directory = Path(out_dir) if index == 0 else Path(out_dir) / SETS / runset.name
        compared = tables.compare(
            reference,
            runset.runs,
            paper.locate(scale),
            OUR_MODEL if scale == "cpu" else None,
            paper.speedup,
            paper.relative_to,
        )
        written = tables.write(compared, directory / "tables", paper.title, published_only, paper.relative_to)
        figures = (
            paper.figures(runset.runs, directory / "figures") if len(runset.runs) else []
        )  # every figure draws runs
        outputs.append((runset.label, f"{SETS}/{runset.name}", sorted({p.stem for p in written}), figures))
    rows = report.read_on_sets(paper.claims, sets)
    header = [paper.setup[scale] + (" " + runs_line(pd.DataFrame()) if not sets else "")]
    for index, runset in enumerate(sets):
        header += set_lines(index, runset, rows, len(sets))
    header += [verdicts.REGIME_RULE, verdicts.INTERVALS]
    (_, _, names, figures), others = outputs[0], outputs[1:]
    report.write(
        out_dir / "report.md",
        f"{paper.title}: {scale}-scale replication",
        header,
        rows,
        names,
        figures,
        published_only,
        others,
        paper.headlines,
    )
    print(f"wrote {len(outputs)} set(s) of tables and figures and {out_dir / 'report.md'}")


SETS = "sets"  # where a report's second and later run sets write their tables and figures


def set_lines(index: int, runset: runsets.RunSet, rows: list[dict], count: int) -> list[str]:
    """A run set in the report's header: its name and where it sits, what its runs decoded,
    machine, wall time, losslessness, and the regime it measured in."""
    decided = sum(r.get("set") == runset.label for r in rows if not r["source"].startswith(report.FURTHER))
    where = "tables/ and figures/" if index == 0 else f"{SETS}/{runset.name}/"
    lines = [
        f"**Run set {index + 1} of {count}: {runset.label}** (runs/{runset.name}; its tables and figures in {where}; "
        f"{decided} of the paper's claims read from it): {runset.fit}. " + runs_line(runset.runs)
    ]
    lines += machine_lines(runset.runs, runset.sessions) + identity_lines(runset.runs) + null_lines(runset.runs)
    return lines + [f"Regime of run set {index + 1}: " + runset.regime.header()]


def runs_line(runs) -> str:
    """How many runs, how many prompts and new tokens they decoded."""
    if runs.empty:
        return "No finished runs: every table holds the published numbers, and each of our cells says it was not run."
    methods = method_names(runs)
    sizes = pd.DataFrame(
        {
            "limit": runs["config.dataset.limit"].astype(str),
            "tokens": runs["config.gen.max_new_tokens"],
            "method": methods.astype(str),
        }
    )
    by_size = sizes.groupby(["limit", "tokens"])["method"].agg(lambda m: (len(m), sorted(set(m))))
    sized = "; ".join(
        f"{limit} prompts x {tokens} new tokens: {count} runs ({', '.join(methods)})"
        for (limit, tokens), (count, methods) in sorted(by_size.items(), key=lambda kv: -kv[1][0])
    )
    line = f"{len(runs)} finished runs (prompts per dataset x new tokens, as the runner's sweeps set them: {sized})"
    if "environment.dtype" in runs:  # what the runs computed in (summaries from before `precision` name their dtype)
        precision = runs.get("environment.precision", runs["environment.dtype"]).fillna(runs["environment.dtype"])
        line += f"; ran in {', '.join(sorted(set(precision.dropna())))}"
    return line + "."


def method_names(runs) -> pd.Series:
    """Each run's method name: the summary's, else its config's (summaries written by hand
    may lack both: "?")."""
    if "method" in runs:
        return runs["method"]
    return runs.get("config.method.name", pd.Series(["?"] * len(runs), index=runs.index))


def identity_lines(runs) -> list[str]:
    """How many of the T=0 runs gave AR's tokens exactly (every prompt, every token), and
    which did not: the losslessness a greedy speed comparison rests on. Outside fp32 a tie
    between two near-equal logits may break either way in a tree's forward and AR's, so
    only an fp32 set tests it."""
    column = "agreement_with_baseline.exact_match_rate"
    if runs.empty or column not in runs:
        return []
    greedy = runs[(runs["temperature"] == 0) & runs[column].notna() & (runs["method"] != "ar")]
    if greedy.empty:
        return []
    differing = greedy[greedy[column] < 1]
    line = (
        f"Losslessness: {len(greedy) - len(differing)} of {len(greedy)} T=0 runs gave AR's tokens exactly on every "
        "prompt"
    )
    if not differing.empty:
        line += "; not: " + ", ".join(f"{r['run']} ({r[column]:.0%} of prompts)" for _, r in differing.iterrows())
    reduced = "environment.dtype" in runs and (runs.loc[greedy.index, "environment.dtype"] != "float32").any()
    if reduced:
        line += (
            " (runs in reduced precision: a tie between near-equal logits may break differently in a tree's forward "
            "and AR's, so identity is tested on an fp32 set)"
        )
    return [line + "."]


def null_lines(runs) -> list[str]:
    """The protocol's null: in each group of runs sharing an AR decode, AR decoded once more
    as a member (run.group); its speedup over the shared AR should read 1.00, and how far its
    intervals stray from that bounds the bias every speedup of the set carries."""
    from specbench.run.group import NULL  # here, as sweep.py imports run.group: importing replicate stays light

    if runs.empty:
        return []
    nulls = runs[method_names(runs) == NULL]
    if nulls.empty:
        return [
            "Protocol null: none in this set (its groups ran before every group decoded AR once more as a member); "
            "its speedups rest on the block order alone."
        ]
    bounds = [b for b in nulls["speedup_ci95"] if isinstance(b, list | tuple) and len(b) == 2]
    covering = sum(low <= 1.0 <= high for low, high in bounds)
    each = ", ".join(
        f"{row['speedup']:.3f}x"
        + (f" [{row['speedup_ci95'][0]:.3f}, {row['speedup_ci95'][1]:.3f}]" if row["speedup_ci95"] else "")
        for _, row in nulls.sort_values("run").iterrows()
    )
    return [
        f"Protocol null (AR timed as a member of each group against the shared AR decode; it should read 1.00): "
        f"{len(nulls)} groups, {covering} of {len(bounds)} intervals cover 1.00; {each}."
    ]


def machine_lines(runs, sessions: list[dict]) -> list[str]:
    """The machine the runs ran on and the replication's wall time, from the committed run
    summaries and session log (nothing of the machine that writes the report)."""
    if runs.empty:
        return []
    machines = "; ".join(f"{described} ({count} runs)" for described, count in results.machines(runs))
    lines = [f"Machine: {machines}." + other_load(runs)]
    decoding = f"decoding (the method and AR beside it) {duration(results.decode_seconds(runs))} summed over the runs"
    if "baseline.own_seconds" in runs and runs["baseline.own_seconds"].notna().any():
        decoding += " (an AR decode that runs of a group shared counted once)"
    if sessions:
        wall = sum(s["wall_seconds"] for s in sessions)
        finished = sum(s["finished_runs"] for s in sessions)
        lines.append(
            f"Wall time: {duration(wall)} over {len(sessions)} session(s) of the runner, which finished "
            f"{finished} of the runs; {decoding}" + by_sweep(sessions) + "."
        )
    else:
        lines.append(f"Wall time: not recorded (the runs predate the runner's session log); {decoding}.")
    return lines


def other_load(runs) -> str:
    """What other processes kept busy while the runs decoded (each run's mean, recorded by
    costs.contention), and the runs it was enough to call their timings contended (past
    DEFAULT_CONTENDED_CORES)."""
    if "environment.others_cores" not in runs:
        return ""
    known = runs[pd.to_numeric(runs["environment.others_cores"], errors="coerce").notna()]
    if known.empty:
        return ""
    cores = known["environment.others_cores"].astype(float)
    line = (
        f" Other processes beside the runs: {cores.median():.2f} cores (median over {len(known)} runs that recorded "
        f"it), at most {cores.max():.2f}"
    )
    busy = known[
        (cores > DEFAULT_CONTENDED_CORES).to_numpy()
    ]  # the default, not this shell's setting: same bytes anywhere
    if not busy.empty:
        line += "; contended (timings not this machine's alone): " + ", ".join(
            f"{r['run']} ({r['environment.others_cores']:.2f})" for _, r in busy.iterrows()
        )
    return line + "."


def by_sweep(sessions: list[dict]) -> str:
    """ "; by sweep: table1 38 min, ..." (costliest first) from the sessions that timed their
    sweeps (those logged before per-sweep times did not), or nothing."""
    timed = [s["sweep_seconds"] for s in sessions if "sweep_seconds" in s]
    if not timed:
        return ""
    totals: dict[str, float] = {}
    for session in timed:
        for name, seconds in session.items():
            totals[name] = totals.get(name, 0) + seconds
    partly = f" (the {len(timed)} of {len(sessions)} sessions that timed them)" if len(timed) < len(sessions) else ""
    return f"; by sweep{partly}: " + ", ".join(
        f"{name} {duration(s)}" for name, s in sorted(totals.items(), key=lambda kv: (-kv[1], kv[0]))
    )


def duration(seconds: float) -> str:
    minutes = round(seconds / 60)
    return (
        f"{minutes // 60} h {minutes % 60:02d} min"
        if minutes >= 60
        else f"{minutes} min"
        if minutes
        else f"{round(seconds)} s"
    )
