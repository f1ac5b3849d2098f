"""Published numbers beside ours: one row per published cell, then each table in the
paper's layout (rows: model, method, temperature, setting; columns: dataset, metric) as
Markdown, LaTeX and CSV, and in Markdown again relative to the paper's baseline method (each
value over the baseline's in the same column), which is what carries across scales."""

from __future__ import annotations

from pathlib import Path
from typing import Callable

import pandas as pd

from specbench.replicate import results

KEYS = ["table", "model", "method", "dataset", "temperature", "setting", "metric"]
NOT_AT_SCALE = "paper's model: not run at cpu scale"
NOT_RUN = "not run at this scale (not in its sweeps, or unfinished)"
MISSING_METRIC = {"judge_score": "no LLM judge configured (SPECBENCH_JUDGE_URL)"}

# locate(row) -> (filters on the runs table, read the AR baseline beside the run?) or the
# reason our number cannot exist (e.g. a method specbench does not implement)
Locator = Callable[[pd.Series], "tuple[dict, bool] | str"]


def read_reference(path: Path) -> pd.DataFrame:
    reference = pd.read_csv(path, dtype={"setting": str}, keep_default_na=False)
    # a table that prints no temperature (CAST Table 3) leaves it empty: NaN here
    reference["temperature"] = pd.to_numeric(reference["temperature"], errors="coerce")
    return reference.rename(columns={"value": "published"})


def compare(
    reference: pd.DataFrame,
    runs: pd.DataFrame,
    locate: Locator,
    our_model: str | None = None,
    speedup: str = "speedup",
    relative_to: str = "eagle3",
) -> pd.DataFrame:
    """Every published cell with ours and the delta. With `our_model` (cpu scale) the
    paper's models say they were not run, and rows for `our_model` (no published value)
    carry our numbers for every cell the tables have. `speedup` is the summary column
    the paper's speedup convention reads (`speedup_mean_per_sample` for the mean of
    per-prompt ratios); when it is not ours, our aggregate ratio goes in the note beside.
    `published_rel` and `ours_rel` are each value over `relative_to`'s in its column."""
    rows = reference[KEYS + ["published"]].copy()
    if our_model is not None:
        ours = rows.drop_duplicates(subset=[k for k in KEYS if k != "model"]).assign(
            model=our_model, published=float("nan")
        )
        rows = pd.concat([rows, ours], ignore_index=True)
    values, notes, names = [], [], []
    for _, row in rows.iterrows():
        value, note, name = None, "", ""
        if our_model is not None and row["model"] != our_model:
            note = NOT_AT_SCALE
        elif row["dataset"] != "mean":
            found = locate(row)
            if isinstance(found, str):
                note = found
            else:
                filters, baseline = found
                matches = results.select(runs, filters)
                if matches.empty:
                    note = NOT_RUN
                else:
                    run = matches.sort_values("results.samples").iloc[-1]
                    value, name = (
                        results.metric(run, row["metric"], row["dataset"], baseline),
                        run.get("run", run["run_dir"]),
                    )
                    if baseline and row["metric"] == "speedup":
                        note = baseline_speed(run)
                    else:
                        note = (
                            ""
                            if value is not None
                            else MISSING_METRIC.get(row["metric"], f"run has no {row['metric']}")
                        )
                    if row["metric"] == "speedup" and not baseline and speedup != "speedup" and value is not None:
                        convention = results.number(run.get(speedup))
                        note = (
                            f"aggregate ratio {value:.2f}"
                            if convention is not None
                            else f"aggregate ratio: the run predates {speedup}"
                        )
                        value = convention if convention is not None else value
                    if value is not None and not baseline:
                        note = "; ".join(part for part in (note, spread(run, row["metric"])) if part)
        values.append(value)
        notes.append(note)
        names.append(name)
    rows["ours"], rows["note"], rows["run"] = pd.Series(values, dtype=float).values, notes, names
    _fill_means(rows)
    rows["delta"] = rows["ours"] - rows["published"]
    rows["published_rel"], rows["ours_rel"] = (
        relative(rows, relative_to, "published"),
        relative(rows, relative_to, "ours"),
    )
    return rows[KEYS + ["published", "ours", "delta", "note", "run", "published_rel", "ours_rel"]]


COLUMN = ["table", "model", "temperature", "dataset", "metric"]


def relative(rows: pd.DataFrame, baseline: str, side: str) -> pd.Series:
    """`side`'s value over the baseline method's in the same table, model, temperature,
    dataset and metric (its row without a setting first); NaN where either is missing or the
    baseline's is not positive."""
    base = rows[rows["method"] == baseline].sort_values("setting", kind="stable").drop_duplicates(COLUMN)
    merged = rows[COLUMN].merge(base[COLUMN + [side]].rename(columns={side: "base"}), on=COLUMN, how="left")
    ratio = rows[side].to_numpy() / merged["base"].where(merged["base"] > 0).to_numpy()
    return pd.Series(ratio, index=rows.index)


def baseline_speed(run: pd.Series) -> str:
    """An AR row's speedup cell: 1 by definition, so what AR measured instead."""
    measured = results.number(run.get("baseline.tok_per_s"))
    return "AR itself: 1 by definition" + (f"; AR measured {measured:.1f} tok/s" if measured is not None else "")


# the summary column holding a metric's 95% interval (the speedup's is the aggregate ratio's)
INTERVALS = {"tau": "results.tau_ci95", "delta": "results.delta_ci95", "speedup": "speedup_ci95"}


def spread(run: pd.Series, metric: str) -> str:
    """How much a cell rests on: its prompt count, and its 95% interval when the summary has one."""
    text = f"n={int(run['results.samples'])}"
    interval = run.get(INTERVALS.get(metric, ""))
    if isinstance(interval, (list, tuple)) and len(interval) == 2:
        text += f", 95% CI {_fmt(interval[0])}-{_fmt(interval[1])}"
    return text


def _fill_means(rows: pd.DataFrame) -> None:
    """A table's Mean column: the mean of our values over its other datasets, when all exist."""
    group_keys = ["table", "model", "method", "temperature", "setting", "metric"]
    for index in rows.index[(rows["dataset"] == "mean") & (rows["note"] != NOT_AT_SCALE)]:
        row = rows.loc[index]
        same = (rows[group_keys] == row[group_keys]).all(axis=1) & (rows["dataset"] != "mean")
        values = rows.loc[same, "ours"]
        if len(values) and values.notna().all():
            rows.loc[index, "ours"] = values.mean()
        else:
            rows.loc[index, "note"] = "mean needs every dataset of the row"


def _fmt(value: float) -> str:
    return f"{value:.3f}" if abs(value) < 1 else f"{value:.2f}"


def _published(value: float) -> str:
    """A published number at the precision the paper prints it (its shortest form, at least two
    decimals): rounding MARS's four-decimal ROUGE-L to three hid the gaps its claim is about."""
    decimals = len(repr(float(value)).split(".")[1]) if "e" not in repr(float(value)) else 4
    return f"{value:.{max(2, decimals)}f}"


def unit(row: pd.Series) -> str:
    """The paper's unit after a value: x for a speedup."""
    return "x" if row["metric"] == "speedup" else ""


def cell(row: pd.Series, markers: dict[str, str] | None = None) -> str:
    """'published / ours (delta)', with the paper's unit; a cell without ours carries the
    short marker of its reason (`markers`: reason -> marker, legend under the table), or the
    reason itself where it has none."""
    published = "–" if pd.isna(row["published"]) else _published(row["published"]) + unit(row)
    if pd.isna(row["ours"]):
        note = row["note"]
        return (
            f"{published} / n/a"
            if note == NOT_AT_SCALE
            else f"{published} / – " + (markers or {}).get(note, f"({note})")
        )
    delta = "" if pd.isna(row["delta"]) else f" ({row['delta']:+.2f})"
    return f"{published} / {_fmt(row['ours'])}{unit(row)}{delta}" + (f" [{row['note']}]" if row["note"] else "")


def relative_cell(row: pd.Series) -> str:
    """'published / ours', each over the baseline's value in its column; the one that exists
    alone (at cpu scale a row is the paper's model or ours)."""
    sides = [f"{row[side]:.2f}" for side in ("published_rel", "ours_rel") if pd.notna(row[side])]
    return " / ".join(sides)


def markers_of(rows: pd.DataFrame) -> dict[str, str]:
    """A short marker per reason a cell has no number of ours (n/a aside), in order of appearance."""
    reasons = [n for n in dict.fromkeys(rows.loc[rows["ours"].isna(), "note"]) if n and n != NOT_AT_SCALE]
    return {reason: f"[{chr(ord('a') + i)}]" for i, reason in enumerate(reasons)}


def pivot(rows: pd.DataFrame, cells: pd.Series) -> pd.DataFrame:
    shown = rows.assign(cell=cells, T=rows["temperature"].map(lambda t: f"{t:g}"))
    table = shown.pivot_table(
        index=["model", "method", "T", "setting"],
        columns=["dataset", "metric"],
        values="cell",
        aggfunc="first",
        sort=False,
    )
    return table.fillna("")


def layout(rows: pd.DataFrame, markers: dict[str, str]) -> pd.DataFrame:
    """One table in the paper's layout; each cell 'published / ours (delta)', a missing one its marker."""
    return pivot(rows, rows.apply(cell, axis=1, markers=markers))


def flat(table: pd.DataFrame) -> pd.DataFrame:
    flattened = table.copy()
    flattened.columns = [f"{d} {m}" for d, m in flattened.columns]
    return flattened.reset_index()


def write(
    compared: pd.DataFrame,
    out_dir: Path,
    caption: str,
    published_only: dict[str, str] | None = None,
    relative_to: str = "eagle3",
) -> list[Path]:
    """<table>.csv (long form), <table>.md and <table>.tex (layout) per table, the .md
    followed by the reasons behind its markers and the table relative to `relative_to`; a
    table in `published_only` (name -> why none of its cells can have ours) holds the
    published numbers alone, saying why."""
    out_dir.mkdir(parents=True, exist_ok=True)
    written = []
    for name, rows in compared.groupby("table", sort=False):
        reason = (published_only or {}).get(name)
        after = ""
        if reason:
            rows = rows[rows["published"].notna()]
            table = pivot(rows, rows.apply(lambda row: _published(row["published"]) + unit(row), axis=1))
            legend = f"{name}: {caption}. Published only: {reason}."
            long_form = rows[KEYS + ["published"]]
        else:
            markers = markers_of(rows)
            table = layout(rows, markers)
            legend = f"{name}: {caption}. Each cell: published / ours (ours - published); n/a: {NOT_AT_SCALE}."
            long_form = rows
            after = "".join(f"\n{marker} {reason}\n" for reason, marker in markers.items())
            if rows["method"].eq(relative_to).any() and rows[["published_rel", "ours_rel"]].notna().any().any():
                related = pivot(rows, rows.apply(relative_cell, axis=1))
                related = flat(related[(related != "").any(axis=1)])
                after += (
                    f"\nRelative to {relative_to}: each value over {relative_to}'s in the same model, T, dataset "
                    "and metric "
                    f"(published / ours where a row has both; the paper's models' rows are published, ours are ours): "
                    f"what carries across scales.\n\n{related.to_markdown(index=False, disable_numparse=True)}\n"
                )
        flattened = flat(table)
        paths = [out_dir / f"{name}.csv", out_dir / f"{name}.md", out_dir / f"{name}.tex"]
        long_form.to_csv(paths[0], index=False)
        paths[1].write_text(f"{legend}\n\n{flattened.to_markdown(index=False)}\n{after}", encoding="utf-8")
        paths[2].write_text(
            flattened.to_latex(index=False, caption=legend, label=f"tab:{name}", escape=True), encoding="utf-8"
        )
        written += paths
    return written
