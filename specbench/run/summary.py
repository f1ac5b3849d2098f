"""A run's summary: speed, τ and δ of its finished samples beside the baseline's, quality
metrics, the cost model's prediction, what measured costs decided (decisions.json, kept
beside the samples) and the environment the samples were timed in."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import torch
import transformers

from specbench.costs.fingerprint import device_fingerprint
from specbench.costs.predict import predict
from specbench.costs.profile import CostProfile
from specbench.data.questions import Sample
from specbench.metrics import quality, speed
from specbench.run.config import config_hash


def summarize(
    cfg: dict, samples: list[Sample], records: list[dict], out_dir: Path, paired: bool, cached_baseline: dict | None
) -> dict:
    """The summary of `records` (the finished samples among `samples`), in sample order."""
    decisions_file = out_dir / "decisions.json"
    decisions = json.loads(decisions_file.read_text()) if decisions_file.is_file() else {}
    by_id = {r["id"]: r for r in records}
    ordered = [by_id[s.id] for s in samples if s.id in by_id]
    method_runs = [r["method"] for r in ordered]
    summary = {
        "method": cfg["method"]["name"],
        "model": cfg["model"]["name"],
        "dataset": cfg["dataset"]["name"],
        "config_hash": config_hash(cfg),
        "results": {**speed.totals(method_runs), **speed.intervals(method_runs)},
        "environment": {**environment(cfg, decisions), "others_cores": mean_others_cores(ordered)},
        "out_dir": str(out_dir),
        "config": cfg,
    }
    if decisions.get("tree_choice"):
        summary["tree_choice"] = decisions["tree_choice"]
    if decisions.get("profile") and method_runs:
        summary["cost_model"] = predict(
            method_runs,
            CostProfile.from_json(decisions["profile"]),
            decisions.get("drafter"),
            decisions.get("tree_overhead"),
        )
    metrics = list(cfg["dataset"].get("metrics") or [])
    scored = [s for s in samples if s.id in by_id]
    if metrics and scored:
        summary["quality"] = scores(metrics, scored, [r["turn_texts"] for r in method_runs])
    baseline_runs, source = baseline_pairs(cfg, ordered, paired, cached_baseline)
    if baseline_runs:
        if metrics and len(baseline_runs) == len(scored):
            summary["baseline_quality"] = scores(metrics, scored, [b["turn_texts"] for _, b in baseline_runs])
        summary["baseline"] = speed.totals([b for _, b in baseline_runs])
        if any(r.get("block_methods", 1) > 1 for r in ordered):
            summary["baseline"]["own_seconds"] = round(own_share(ordered), 4)
        summary["baseline_source"] = source
        method_side = [m for m, _ in baseline_runs]
        summary["agreement_with_baseline"] = speed.agreement(method_side, [b for _, b in baseline_runs])
        if source != "cached run, outputs only":
            summary.update(speed.speedup(method_side, [b for _, b in baseline_runs]))
    return summary


def own_share(records: list[dict]) -> float:
    """This run's share of the AR decodes it shared with its group (specbench.run.group): each
    decode's time divided by the runs that shared it, so time summed over runs counts it once."""

    def share(baseline: dict, block: int) -> dict:
        return {
            **baseline,
            "seconds": baseline["seconds"] / block,
            "batch_seconds": baseline.get("batch_seconds", 0.0) / block,
        }

    return speed.wall_seconds([share(r["baseline"], r.get("block_methods", 1)) for r in records if "baseline" in r])


def scores(metrics: list[str], samples: list[Sample], texts: list[list[str]]) -> dict:
    """The dataset's metrics; a failing one (e.g. the judge endpoint is down) is recorded,
    not raised, so the speed results of a finished run are still written."""
    try:
        return quality.score(metrics, samples, texts)
    except Exception as error:  # noqa: BLE001
        print(f"warning: quality metrics failed: {error!r}; re-run the same command to retry", file=sys.stderr)
        return {"error": repr(error)}


def baseline_pairs(
    cfg: dict, ordered: list[dict], paired: bool, cached_baseline: dict | None
) -> tuple[list[tuple[dict, dict]], str | None]:
    """(method run, baseline run) per sample that has both, and where the baseline came from."""
    if paired:
        shared = max((r.get("block_methods", 1) for r in ordered if "baseline" in r), default=1)
        source = (
            "paired in this run (side by side)"
            if shared == 1
            else (
                f"paired in this run (side by side: per prompt, one AR decode in one block with up to {shared} "
                "runs of its group, specbench.run.group)"
            )
        )
        return [(r["method"], r["baseline"]) for r in ordered if "baseline" in r], source
    if cached_baseline is not None:
        pairs = [(r["method"], cached_baseline[r["id"]]) for r in ordered if r["id"] in cached_baseline]
        if cfg["baseline"].get("cached_timings"):
            return pairs, "cached run, timings NOT side by side"
        return pairs, "cached run, outputs only"
    return [], None


def mean_others_cores(records: list[dict]) -> float | None:
    """Cores other processes kept busy while these samples were timed, on average (the
    speed figures of a run beside another job are not this machine's)."""
    known = [r["others_cores"] for r in records if r.get("others_cores") is not None]
    return round(sum(known) / len(known), 2) if known else None


def git_state(checkout: Path = Path(__file__).parent) -> tuple[str | None, bool | None]:
    """(HEAD's commit, whether the checkout has uncommitted changes: modified, staged or new
    files), or (None, None) outside a git checkout. Files under results/ do not count: the
    bench scripts write their tables there between the runs of a sweep."""

    def git(*args: str) -> str:
        return subprocess.run(["git", *args], capture_output=True, text=True, check=True, cwd=checkout).stdout

    try:
        return git("rev-parse", "HEAD").strip(), bool(
            git("status", "--porcelain", "--", ":(top)", ":(top,exclude)results").strip()
        )
    except (OSError, subprocess.CalledProcessError):
        return None, None


def environment(cfg: dict, decisions: dict) -> dict:
    """Where and how the samples were decoded. `dtype` is the torch dtype the model was
    loaded in (what programs reading summaries compare); `precision` says what the forward
    computed in, which differs where the weights were rounded (fp32 activations on fp16 weights)."""
    commit, dirty = git_state()
    dtype = decisions.get("dtype", cfg["hardware"]["dtype"])
    return {
        "git_commit": commit,
        "git_dirty": dirty,
        "torch": torch.__version__,
        "transformers": transformers.__version__,
        "python": sys.version.split()[0],
        "torch_threads": torch.get_num_threads(),
        "dtype": dtype,
        "precision": decisions.get("precision") or dtype,
        "dtype_rule": (decisions.get("dtype_choice") or {}).get("rule")
        if cfg["hardware"]["dtype"] == "auto"
        else "set by hardware.dtype",
        "dtype_note": (decisions.get("dtype_choice") or {}).get("note") if cfg["hardware"]["dtype"] == "auto" else None,
        "forward": decisions.get("forward"),
        "forward_note": decisions.get("forward_note"),
        "device": cfg["hardware"]["device"],
        "hardware": cfg["hardware"]["name"],
        "fingerprint": decisions.get("fingerprint")
        or device_fingerprint(cfg["hardware"]["device"], torch.get_num_threads()),
        "seed": cfg["seed"],
        "choices_contended_cores": choices_contended_cores(decisions, cfg["gen"]["batch_size"]),
    }


def choices_contended_cores(decisions: dict, batch: int) -> float | None:
    """The most cores other processes used while the probes, profile curves and calibration
    behind this run's choices were timed (None: none recorded); cached measurements carry it,
    and are timed again by the first run on an idle machine."""
    values = [
        (decisions.get(k) or {}).get("contended_cores") for k in ("dtype_choice", "compile_choice", "tree_choice")
    ]
    if decisions.get("profile"):
        values.append(CostProfile.from_json(decisions["profile"]).contended_for(decisions.get("drafter"), batch))
    known = [v for v in values if v is not None]
    return max(known) if known else None
