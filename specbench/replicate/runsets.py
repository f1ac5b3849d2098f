"""Run sets: a paper's runs grouped by the machine and precision they ran on, never mixed.

A set is every run of one machine (its fingerprint id: CPU or GPU, ISA flags, torch,
threads) at one requested `hardware.dtype`. Its name is the machine id and the precision
(the requested dtype, or under `auto` the dtype most of its runs computed in), and it is
the directory its committed runs live in: results/<paper>/<scale>/runs/<set>/<run>.

Speed measured on one machine says nothing of another's, so a report judges every claim
on each set by that set's own regime and reads it from the first set, in `order`, that
holds the claim's runs: the set whose verification cost is nearest the papers' GPUs first.
"""

from __future__ import annotations

import json
import shutil
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd

from specbench.costs.fingerprint import fingerprint_id
from specbench.replicate import results
from specbench.replicate.regime import Regime
from specbench.replicate.verdicts import PAPER_TREE, REGIME_COST_FACTOR

UNRECORDED = "machine-not-recorded"
# the matmul feature a set's label names: the best one its CPU has, in this order
LEADING_ISA = ("amx_bf16", "avx512_bf16", "avx512f", "avx2", "sve", "asimd")


@dataclass
class RunSet:
    name: str  # directory and key: <machine id>-<precision>
    label: str  # what a report's verdict names: CPU model (its best matmul ISA), precision
    runs: pd.DataFrame
    sessions: list[dict] = field(default_factory=list)
    regime: Regime | None = None  # the paper's and this machine's costs, set by the report

    @property
    def cost(self) -> float | None:
        """What verifying a PAPER_TREE-node tree costs on the set's machine, in one-token
        forwards (None: no cost profile of it)."""
        return self.regime.here_at(PAPER_TREE) if self.regime is not None and self.regime.here is not None else None

    @property
    def fit(self) -> str:
        """Whether the set is in the papers' regime, in numbers: `cost` against its bound,
        REGIME_COST_FACTOR x the paper's."""
        if self.cost is None:
            return "regime unknown (no cost profile of its machine)"
        bound = REGIME_COST_FACTOR * self.regime.paper_bound
        side = "in regime" if self.cost <= bound else "out of regime"
        return f"{PAPER_TREE}-node trees {side} ({self.cost:.2f} one-token forwards, bound {bound:.2f})"


def order(sets: list[RunSet]) -> list[RunSet]:
    """The order a claim reads the sets in: the lowest `cost` first (nearest the papers'
    GPUs), sets without a cost profile last; then the most runs, then the name."""
    return sorted(sets, key=lambda s: (float("inf") if s.cost is None else s.cost, -len(s.runs), s.name))


def environment(run: pd.Series) -> dict:
    """The run's recorded environment (its summary's, whole: the fingerprint's nested keys intact)."""
    path = Path(run["run_dir"]) / results.SUMMARY
    return json.loads(path.read_text()).get("environment", {}) if path.is_file() else {}


def machine_id(run: pd.Series) -> str:
    fingerprint = environment(run).get("fingerprint")
    return fingerprint_id(fingerprint) if fingerprint else UNRECORDED


def requested_dtype(run: pd.Series) -> str:
    value = run.get("config.hardware.dtype")
    return value if isinstance(value, str) else "auto"


def key(run: pd.Series) -> tuple[str, str]:
    """(machine id, requested dtype): the runs that belong to one set."""
    return machine_id(run), requested_dtype(run)


def precision(runs: pd.DataFrame, requested: str) -> str:
    """The set's precision: the dtype asked for, or under auto the one most runs resolved to."""
    if requested != "auto" or "environment.dtype" not in runs:
        return requested
    counts = Counter(d for d in runs["environment.dtype"] if isinstance(d, str))
    return sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))[0][0] if counts else requested


def label(run: pd.Series, dtype: str, machine: str | None = None) -> str:
    """ "<CPU model> (<its best matmul ISA>), <precision>"; with `machine` (a set's machine id)
    its fingerprint hash too, for two machines that would read alike."""
    fingerprint = environment(run).get("fingerprint") or {}
    isa = fingerprint.get("isa") or []
    leading = next((flag for flag in LEADING_ISA if flag in isa), None)
    model = fingerprint.get("gpu") or fingerprint.get("cpu_model") or "machine not recorded"
    named = [leading] if leading and not fingerprint.get("gpu") else []
    named += [f"machine {machine.rsplit('-', 1)[-1]}"] if machine else []
    return f"{model} ({', '.join(named)}), {dtype}" if named else f"{model}, {dtype}"


def split(runs: pd.DataFrame) -> list[RunSet]:
    """The runs as sets, unordered and without their session logs (read gives those); each
    run's `run` name without its set's directory."""
    if runs.empty:
        return []
    keys = runs.apply(key, axis=1)
    found = []  # (machine id, precision, set)
    for machine, requested in sorted(set(keys)):
        members = runs[keys == (machine, requested)].copy()
        dtype = precision(members, requested)
        members["run"] = [within(r, machine) for r in members["run"]]
        found.append((machine, dtype, RunSet(f"{machine}-{dtype}", label(members.iloc[0], dtype), members)))
    alike = Counter(runset.label for _, _, runset in found)
    for machine, dtype, runset in found:  # two machines of one CPU model and ISA: each named by its fingerprint
        if alike[runset.label] > 1:
            runset.label = label(runset.runs.iloc[0], dtype, machine)
    return [runset for _, _, runset in found]


def within(run: str, machine: str) -> str:
    """A run's name inside its set: without the set's directory, whatever precision it named."""
    first, _, rest = run.partition("/")
    return rest if rest and first.startswith(f"{machine}-") else run


def read(root: Path) -> list[RunSet]:
    """The sets under `root`, each with its session log: a committed set's in its directory;
    a sweep's outputs keep one log for the whole root, a set's where the root holds one set."""
    root = Path(root)
    sets = split(results.collect(root))
    for runset in sets:
        runset.sessions = results.sessions(root / runset.name) or (results.sessions(root) if len(sets) == 1 else [])
    return sets


def store(outputs: Path, committed: Path) -> pd.DataFrame:
    """Commit a sweep's finished runs (results.store_runs) into their sets' directories under
    `committed`, a set's older copies kept; a set whose name moved (the precision most of its
    runs resolved to) is moved with it. The sweep's session log goes to the set that took its
    runs (to none when they span machines: a line says so). Returns the runs copied."""
    committed = Path(committed)
    fresh = results.collect(outputs)
    kept = results.collect(committed) if committed.is_dir() else results.no_runs()
    everything = pd.concat([kept.assign(_source="kept"), fresh.assign(_source="fresh")], ignore_index=True)
    taken = set()
    legacy = committed / results.SESSIONS  # one set's log from before sets had directories
    sets = split(everything)
    kept_sets = sum((runset.runs["_source"] == "kept").any() for runset in sets)
    for runset in sets:
        for _, run in runset.runs[runset.runs["_source"] == "kept"].iterrows():
            old = Path(run["run_dir"])
            new = committed / runset.name / run["run"]
            if old.resolve() != new.resolve():
                new.parent.mkdir(parents=True, exist_ok=True)
                shutil.move(str(old), str(new))
        if legacy.is_file() and kept_sets == 1 and (runset.runs["_source"] == "kept").any():
            legacy.replace(committed / runset.name / results.SESSIONS)
        mine = runset.runs[runset.runs["_source"] == "fresh"]
        if not mine.empty:
            results.store_runs(mine, committed / runset.name)
            taken.add(runset.name)
    for empty in sorted(committed.rglob("*"), reverse=True):  # directories a moved set left behind
        if empty.is_dir() and not any(empty.iterdir()):
            empty.rmdir()
    log = Path(outputs) / results.SESSIONS
    if log.is_file() and len(taken) == 1:
        shutil.copyfile(log, committed / taken.pop() / results.SESSIONS)
    elif log.is_file():
        print(f"warning: {outputs}'s runs span {len(taken)} run sets; its session log ({log}) was not committed")
    return fresh.drop(columns="_source", errors="ignore")
