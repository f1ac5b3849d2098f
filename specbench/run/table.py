"""The summary table printed at the end of a run."""

from __future__ import annotations

from rich.console import Console
from rich.markup import escape
from rich.table import Table

from specbench.costs.autotune import describe
from specbench.costs.contention import contended, note


def _ci(interval) -> str:
    return f", 95% CI {_fmt(interval[0])}-{_fmt(interval[1])}" if interval else ""


def _fmt(value, digits: int = 2) -> str:
    return "-" if value is None else f"{value:.{digits}f}" if isinstance(value, float) else str(value)


def _skipped(value) -> bool:
    """A quality entry that says why its metric was not scored (e.g. no judge configured)."""
    return isinstance(value, str) and value.startswith("skipped")


def print_summary(summary: dict) -> None:
    table = Table(
        title=escape(f"{summary['method']} on {summary['model']} / {summary['dataset']}  [{summary['config_hash']}]")
    )
    for column in ("", "samples", "tokens", "tok/s", "tau", "delta"):
        table.add_column(column, justify="right")
    rows = [(summary["method"], summary["results"])]
    if "baseline" in summary:
        rows.append(("baseline (ar)", summary["baseline"]))
    for name, r in rows:
        table.add_row(name, str(r["samples"]), str(r["tokens"]), _fmt(r["tok_per_s"]), _fmt(r["tau"]), _fmt(r["delta"]))
    console = Console()
    console.print(table)
    if "baseline" in summary:
        agreement = summary.get("agreement_with_baseline", {})
        console.print(
            f"speedup {_fmt(summary.get('speedup'))}x{_ci(summary.get('speedup_ci95'))} at batch size "
            f"{summary['results'].get('batch_size', 1)} "
            f"(median per sample {_fmt(summary.get('speedup_median_per_sample'))}x), "
            f"baseline: {summary['baseline_source']}; "
            f"outputs identical to baseline: {_fmt(agreement.get('exact_match_rate'))}"
        )
    model = summary.get("cost_model") or {}
    if model.get("note") and "predicted_speedup" not in model:
        console.print(f"cost model: {model['note']}")
    elif model:
        measured = f"measured {_fmt(summary.get('speedup'))}x, " if summary.get("speedup") is not None else ""
        console.print(
            f"cost model ({model['profile']['dtype']} profile of this machine): predicted "
            f"{_fmt(model['predicted_speedup'])}x"
            + (
                f" (decoding alone {_fmt(model['predicted_decode_speedup'])}x; prefill is in both)"
                if "predicted_decode_speedup" in model
                else ""
            )
            + f", {measured}engine overhead {_fmt(100 * (model.get('engine_overhead_share') or 0), 0)}% of decode time"
            + (
                f" (tree building {_fmt(model['tree_overhead_ms_per_step'])} ms a step, timed on calibration "
                "prompts, is in the prediction)"
                if model.get("tree_overhead_ms_per_step") is not None
                else ""
            )
        )
    if env_note := (summary["environment"].get("dtype_note")):
        console.print(f"dtype: {env_note}")
    choice = summary.get("tree_choice")
    if choice:
        chosen = choice.get("note") or f"{describe(choice)} (predicted {_fmt(choice['predicted_speedup'])}x)"
        console.print(f"tree shape chosen from measured costs: {chosen}")
    skipped = {}  # why a metric was not scored, the same for the method and the baseline: shown once
    for key, label in (("quality", summary["method"]), ("baseline_quality", "baseline")):
        scores = summary.get(key) or {}
        skipped |= dict.fromkeys(f"{k} {v}" for k, v in scores.items() if _skipped(v))
        shown = ", ".join(f"{k} {_fmt(v, 3)}" for k, v in scores.items() if not _skipped(v))
        if shown:
            console.print(f"{label} quality: {shown}")
    for line in skipped:
        console.print(line)
    env = summary["environment"]
    fingerprint = env.get("fingerprint") or {}
    device = (
        fingerprint.get("gpu")
        or f"{fingerprint.get('cpu_model', env['device'])} [{' '.join(fingerprint.get('isa', []))}]"
    )
    commit = (
        f"commit {env['git_commit'][:10]}{' (uncommitted changes)' if env.get('git_dirty') else ''} "
        if env.get("git_commit")
        else ""
    )
    forward = (
        f"{env.get('forward') or ''} (forward: {env['forward_note']})"
        if env.get("forward_note")
        else env.get("forward") or ""
    )
    console.print(
        f"{env['hardware']}: {device} {env['precision']} {forward} threads={env['torch_threads']} "
        f"torch {env['torch']} {commit}-> {summary['out_dir']}"
    )
    if contended(env.get("choices_contended_cores")):
        console.print(
            "note: the probes, profile or calibration behind this run's choices were "
            f"{note(env['choices_contended_cores'])} "
            "(cached with that note; the first run on an idle machine times them again)"
        )
    if contended(env.get("others_cores")):
        console.print(
            f"warning: other processes kept {env['others_cores']:.1f} cores busy while this run was timed: its "
            "speeds are not this machine's"
        )
