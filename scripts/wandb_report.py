"""Compare specbench runs logged with `logger=wandb`: tok/s, speedup, τ and δ per method,
model and dataset as one table, and (online) a W&B report with the same comparison as panels.

    python scripts/wandb_report.py --offline outputs                  # offline run files under a directory
    python scripts/wandb_report.py --project specbench --entity me    # the W&B API (needs WANDB_API_KEY)
    python scripts/wandb_report.py --project specbench --entity me --save-report "MARS vs EAGLE-3"
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import pandas as pd

from specbench.errors import run_command
from specbench.run.tracking import read_offline_run

METRICS = {"speedup": "speedup", "tau": "results/tau", "delta": "results/delta", "tok_per_s": "results/tok_per_s"}


def row(name: str, config: dict, summary: dict) -> dict:
    return {
        "run": name,
        "method": config["method"]["name"],
        "model": config["model"]["name"],
        "dataset": config["dataset"]["name"],
        "temperature": config["gen"]["temperature"],
        **{k: summary.get(v) for k, v in METRICS.items()},
    }


def offline_rows(root: Path) -> list[dict]:
    rows = []
    for path in sorted(root.rglob("run-*.wandb")):
        run = read_offline_run(path)
        if run["config"].get("method") and run["summary"]:
            rows.append(row(run.get("name", path.stem), run["config"], run["summary"]))
    return rows


def online_rows(entity: str | None, project: str) -> list[dict]:
    import wandb

    api = wandb.Api()
    path = f"{entity or api.default_entity}/{project}"
    return [row(r.name, r.config, dict(r.summary)) for r in api.runs(path) if r.config.get("method")]


def comparison(rows: list[dict]) -> pd.DataFrame:
    """One row per model, dataset and temperature; per method its speedup and τ."""
    frame = pd.DataFrame(rows)
    table = frame.pivot_table(
        index=["model", "dataset", "temperature"], columns="method", values=["speedup", "tau"], aggfunc="mean"
    )
    table.columns = [f"{method} {metric}" for metric, method in table.columns]
    return table.sort_index(axis=1).reset_index()


def save_report(entity: str | None, project: str, title: str) -> str:
    import wandb_workspaces.reports.v2 as wr

    runs = wr.Runset(entity=entity, project=project) if entity else wr.Runset(project=project)
    report = wr.Report(
        project=project,
        title=title,
        description="specbench: speedup, tau and delta by method",
        blocks=[
            wr.H1(text=title),
            wr.P(
                text="Each run is one method on one model and dataset, with the AR baseline run beside it on every "
                "prompt."
            ),
            wr.PanelGrid(
                runsets=[runs],
                panels=[
                    wr.BarPlot(title="speedup over AR", metrics=["speedup"], groupby="config.method.name"),
                    wr.BarPlot(
                        title="tau (tokens per target forward)", metrics=["results/tau"], groupby="config.method.name"
                    ),
                    wr.ScatterPlot(title="delta vs tau", x="results/tau", y="results/delta"),
                ],
            ),
        ],
        **({"entity": entity} if entity else {}),
    )
    report.save()
    return report.url


def main(argv: list[str]) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    source = parser.add_mutually_exclusive_group(required=True)
    source.add_argument(
        "--offline", type=Path, help="directory holding offline W&B runs (logger=wandb writes <output_root>/wandb)"
    )
    source.add_argument("--project", help="W&B project to read through the API")
    parser.add_argument("--entity", help="W&B entity (default: the API key's)")
    parser.add_argument(
        "--save-report", metavar="TITLE", help="also save a W&B report with the comparison panels (online only)"
    )
    args = parser.parse_args(argv)
    if args.offline and args.save_report:
        sys.exit(
            print(
                "error: --save-report needs --project (reports live on the W&B server; `wandb sync` the offline "
                "runs first)",
                file=sys.stderr,
            )
            or 2
        )
    try:
        rows = offline_rows(args.offline) if args.offline else online_rows(args.entity, args.project)
    except Exception as error:  # noqa: BLE001  (no key, no network, unknown project: one line)
        first = str(error).strip().splitlines()[0] if str(error).strip() else error.__class__.__name__
        sys.exit(print(f"error: could not read W&B runs of project {args.project!r}: {first}", file=sys.stderr) or 2)
    if not rows:
        sys.exit(
            print(f"error: no finished specbench runs found in {args.offline or args.project}", file=sys.stderr) or 2
        )
    print(comparison(rows).to_markdown(index=False, floatfmt=".2f"))
    if args.save_report:
        print(f"report: {save_report(args.entity, args.project, args.save_report)}")


if __name__ == "__main__":
    run_command(main, sys.argv[1:])
