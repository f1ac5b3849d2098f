"""Finished runs as one table: every summary.json under a sweep's output root, or under a
paper's committed runs (results/<paper>/<scale>/runs), flattened.

Columns are the summary's keys joined by dots (`results.tau`, `quality.gsm8k_accuracy`,
`config.method.tree.depth`, ...) plus the short `model`, `method`, `dataset` and
`temperature` that tables select on, `run_dir` (where its files are) and `run` (its name
under the root: the same for a sweep's run and its committed copy, so reports name no
machine's paths).

`store_runs` copies a sweep's finished runs into the committed directory (what the tables
are computed from; runsets.store picks each run's set directory): each run's summary and
decisions as they are, its per-sample records and the dataset samples they answered
gzipped, so a report regenerates on a clone that has neither the outputs nor the datasets'
local copies.
"""

from __future__ import annotations

import dataclasses
import gzip
import json
import math
from pathlib import Path

import pandas as pd

from specbench import ROOT
from specbench.data import questions as questions_module
from specbench.errors import ConfigError
from specbench.metrics import speed

SUMMARY, DECISIONS, SAMPLES, DATASET = "summary.json", "decisions.json", "samples.jsonl", "dataset.jsonl.gz"
SESSIONS = "sessions.jsonl"  # one line per replication session that finished runs: its wall time
COMMITTED_MB = 20  # what a paper's committed runs should stay under

# where each published metric lives in a summary; "{side}" is `quality` for the method
# and `baseline_quality` for the AR baseline it ran beside
METRIC_COLUMNS = {
    "speedup": "speedup",
    "tau": "results.tau",
    "delta": "results.delta",
    "tok_per_s": "results.tok_per_s",
    "nll": "results.target_nll_per_token",
    "rouge_l": "{side}.rouge_l",
    "bleu": "{side}.bleu",
    "chrf": "{side}.chrf",
    "judge_score": "{side}.mt_bench_judge_turn1",
}
# the AR baseline's own measurements beside the method's
BASELINE_COLUMNS = {
    "tau": "baseline.tau",
    "delta": "baseline.delta",
    "tok_per_s": "baseline.tok_per_s",
    "nll": "baseline.target_nll_per_token",
}
ACCURACY_COLUMNS = {  # first present wins: HumanEval avg@4 where the paper sampled 4 answers
    "gsm8k": ["{side}.gsm8k_accuracy"],
    "humaneval": ["{side}.humaneval_avg@4", "{side}.humaneval_pass@1"],
}


def collect(root: Path) -> pd.DataFrame:
    """One row per finished run under `root` (runs without a summary are unfinished), in
    the order of their names."""
    root = Path(root).resolve()
    found = []
    for path in root.rglob(SUMMARY):
        summary = json.loads(path.read_text())
        if "config" in summary:
            summary["run_dir"], summary["run"] = str(path.parent), run_name(path.parent, root)
            found.append(redrawn(summary, path.parent))
    if not found:
        return no_runs()
    runs = pd.json_normalize(sorted(found, key=lambda s: s["run"]))
    runs["temperature"] = runs["config.gen.temperature"].astype(float)
    return runs


def no_runs() -> pd.DataFrame:
    return pd.DataFrame(columns=["model", "method", "dataset", "temperature", "run_dir", "run"])


def redrawn(summary: dict, run_dir: Path) -> dict:
    """The summary with tau (method's and AR's) and the 95% intervals (tau, delta, speedup)
    drawn again from the run's records by the current rules (tau's convention in
    specbench.metrics.speed, intervals in specbench.metrics.intervals), so every table cell
    follows the rules its report's header states, whichever version wrote the summary; as
    written when the records are not beside it."""
    try:
        # a sample written twice counts once, as in its summary
        records = list({r["id"]: r for r in read_samples(run_dir)}.values())
    except KeyError:
        return summary
    methods = [r["method"] for r in records]
    summary["results"] = {**summary["results"], "tau": speed.tau(methods), **speed.intervals(methods)}
    pairs = [r for r in records if "baseline" in r]
    if "baseline" in summary and pairs:
        summary["baseline"] = {**summary["baseline"], "tau": speed.tau([r["baseline"] for r in pairs])}
    if "speedup_ci95" in summary and pairs:
        summary["speedup_ci95"] = speed.bootstrap_ci([r["method"] for r in pairs], [r["baseline"] for r in pairs])
    return summary


def run_name(run_dir: Path, root: Path) -> str:
    """A run's directory under `root`, without the `multirun` level a sweep's outputs add."""
    parts = run_dir.relative_to(root).parts
    return "/".join(parts[1:] if parts[:1] == ("multirun",) else parts)


def select(runs: pd.DataFrame, filters: dict) -> pd.DataFrame:
    """Runs whose column equals each filter value (floats compared with a tolerance)."""
    mask = pd.Series(True, index=runs.index)
    for column, wanted in filters.items():
        if column not in runs:
            return runs.iloc[0:0]
        values = runs[column]
        if isinstance(wanted, float) or (isinstance(wanted, int) and not isinstance(wanted, bool)):
            mask &= values.apply(
                lambda v: (
                    isinstance(v, (int, float)) and not isinstance(v, bool) and math.isclose(v, wanted, abs_tol=1e-9)
                )
            )
        else:
            mask &= values == wanted
    return runs[mask]


def metric(run: pd.Series, name: str, dataset: str, baseline: bool = False) -> float | None:
    """A published metric's value in one run; `baseline` reads the AR run beside it, as
    measured (its speedup over itself is no measurement: None, tables say why)."""
    side = "baseline_quality" if baseline else "quality"
    if baseline and name == "speedup":
        return None
    if baseline and name in BASELINE_COLUMNS:
        return number(run.get(BASELINE_COLUMNS[name]))
    columns = ACCURACY_COLUMNS.get(dataset, []) if name == "accuracy" else [METRIC_COLUMNS.get(name, "")]
    for column in columns:
        value = number(run.get(column.format(side=side)))
        if value is not None:
            return value
    return None


def number(value) -> float | None:
    """A finite number in a run's column, else None (missing, NaN, a flag)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or math.isnan(value):
        return None
    return float(value)


def samples(run: pd.Series) -> list[dict]:
    """The per-sample records of one run (samples.jsonl beside its summary, gzipped in a
    committed copy)."""
    return read_samples(Path(run["run_dir"]), run.get("run"))


def read_samples(run_dir: Path, name: str | None = None) -> list[dict]:
    plain, packed = run_dir / SAMPLES, run_dir / f"{SAMPLES}.gz"
    if plain.is_file():
        text = plain.read_text(encoding="utf-8")
    elif packed.is_file():
        text = gzip.decompress(packed.read_bytes()).decode("utf-8")
    else:  # a claim that needs it says which run is missing
        raise KeyError(f"samples of {name or run_dir}")
    return [json.loads(line) for line in text.splitlines() if line.strip()]


def questions(run: pd.Series) -> dict[str, questions_module.Sample]:
    """The dataset samples a run answered, by id: its committed copy when there is one, else
    loaded from the run's dataset config (a relative path read from the project root)."""
    packed = Path(run["run_dir"]) / DATASET
    if packed.is_file():
        lines = gzip.decompress(packed.read_bytes()).decode("utf-8").splitlines()
        return {s.id: s for s in (questions_module.Sample(**json.loads(line)) for line in lines if line.strip())}
    summary = Path(run["run_dir"]) / SUMMARY
    if not summary.is_file():
        raise KeyError(f"summary of {run.get('run', run['run_dir'])}")
    config = json.loads(summary.read_text())["config"]["dataset"]
    if config.get("path") and not Path(config["path"]).is_absolute():
        config = {**config, "path": str(ROOT / config["path"])}
    return {s.id: s for s in questions_module.load(config)}


def decisions(run: pd.Series) -> dict | None:
    """What a run's plan decided (decisions.json: dtype, shapes, the cost profile it was
    priced with), None when the run has none."""
    path = Path(run["run_dir"]) / DECISIONS
    return json.loads(path.read_text()) if path.is_file() else None


# ---- committing runs ----------------------------------------------------------------------


def store_runs(runs: pd.DataFrame, committed: Path) -> None:
    """Copy finished runs (collect's rows) into `committed`, replacing an older copy of the
    same run and keeping the runs only `committed` has (a sweep run with --only adds to the
    others): each run's summary and decisions as they are, its records and the dataset
    samples they answered gzipped. runsets.store files a sweep's runs by their set."""
    loaded: dict[str, dict] = {}  # dataset config -> its samples, loaded once for all its runs
    for _, run in runs.iterrows():
        source, target = Path(run["run_dir"]), Path(committed) / run["run"]
        target.mkdir(parents=True, exist_ok=True)
        for name in (SUMMARY, DECISIONS):
            if (source / name).is_file():
                _write(target / name, (source / name).read_bytes())
        records = samples(run)
        _write(target / f"{SAMPLES}.gz", _gzip("".join(json.dumps(r) + "\n" for r in records)))
        answered = _answered(run, records, loaded)
        if answered is not None:
            _write(target / DATASET, _gzip("".join(json.dumps(dataclasses.asdict(s)) + "\n" for s in answered)))


def _answered(run: pd.Series, records: list[dict], loaded: dict) -> list | None:
    """The dataset samples of a run's records, in their order; None (and a line saying so)
    when its dataset cannot be read here."""
    key = json.dumps({k: run[k] for k in run.index if k.startswith("config.dataset.")}, sort_keys=True, default=str)
    if key not in loaded:
        try:
            loaded[key] = questions(run)
        except (ConfigError, KeyError, OSError) as error:
            print(
                f"warning: {run['run']}: its dataset samples are not committed ({error}); claims that re-score "
                "its answers need the dataset"
            )
            loaded[key] = {}
    found = loaded[key]
    chosen = [found[r["id"]] for r in records if r["id"] in found]
    return chosen or None


def committed_mb(committed: Path) -> float:
    return sum(p.stat().st_size for p in Path(committed).rglob("*") if p.is_file()) / 1e6


def _gzip(text: str) -> bytes:
    """Gzip without a timestamp or file name: the same records give the same bytes."""
    return gzip.compress(text.encode("utf-8"), compresslevel=9, mtime=0)


def _write(path: Path, data: bytes) -> None:
    if not path.is_file() or path.read_bytes() != data:
        path.write_bytes(data)


# ---- the machine and the time a replication took ------------------------------------------


def machine(fingerprint: dict, fallback=None) -> str:
    """A device fingerprint (costs.fingerprint) as a report names it: the CPU model (or GPU)
    and its ISA flags; `fallback` names it where the fingerprint has no model."""
    model = fingerprint.get("cpu_model") or fingerprint.get("gpu") or fallback
    isa = fingerprint.get("isa")
    named = str(model) if isinstance(model, str) else "machine not recorded"
    return named + (", ISA " + " ".join(isa) if isinstance(isa, list) and isa else "")


def machines(runs: pd.DataFrame) -> list[tuple[str, int]]:
    """(the machine and the precision runs computed in, how many runs), from their
    summaries: CPU model (or GPU), ISA flags, threads, torch, dtype."""
    if runs.empty:
        return []
    described = []
    for _, run in runs.iterrows():
        fingerprint = {key: run.get(f"environment.fingerprint.{key}") for key in ("cpu_model", "gpu", "isa")}
        threads = run.get("environment.fingerprint.threads", run.get("environment.torch_threads"))
        precision = run.get("environment.precision")
        precision = precision if isinstance(precision, str) else run.get("environment.dtype")
        parts = [machine(fingerprint, run.get("environment.hardware"))]
        if number(threads) is not None:
            parts.append(f"{int(threads)} threads")
        if isinstance(run.get("environment.torch"), str):
            parts.append(f"torch {run['environment.torch']}")
        described.append(
            ", ".join(parts) + (f"; {precision}" if isinstance(precision, str) else "; dtype not recorded")
        )
    counts = pd.Series(described).value_counts(sort=False)
    return sorted(counts.items(), key=lambda item: (-item[1], item[0]))


def sessions(committed: Path) -> list[dict]:
    """The replication sessions that finished the runs: wall seconds and runs finished each."""
    path = Path(committed) / SESSIONS
    if not path.is_file():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def decode_seconds(runs: pd.DataFrame) -> float:
    """Seconds the runs spent decoding, the method's and AR's beside it (an AR decode that
    runs of a group shared counted once: each run's `own_seconds` share)."""

    def column(name: str) -> pd.Series:
        return pd.to_numeric(runs[name], errors="coerce") if name in runs else pd.Series(float("nan"), index=runs.index)

    baseline = column("baseline.own_seconds").fillna(column("baseline.seconds"))
    return float(column("results.seconds").fillna(0).sum() + baseline.fillna(0).sum())
