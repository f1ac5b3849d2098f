"""Which wall-clock comparisons carry from the papers' GPUs to the machine the runs ran on.

On the papers' GPUs a verification of tens of tokens costs about one token's forward
(memory-bound): a wide tree is almost free to verify, and speed follows τ. On a CPU the
forward is compute-bound past a few tokens: a 60-node tree costs several one-token forwards,
so a comparison of trees of different sizes, or of any wide trees, measures the CPU. The
regime of each side comes from numbers, not from a label:

- this machine: f(n)/f(1) from the committed cost profile of the runs' model, dtype, forward
  and machine (results/bench/profile-*.json; the smallest ratio over its contexts);
- the paper: f(N)/f(1) <= τ/speedup for each of its published cells (speedup = τ·f(1) /
  (f(N) + drafting) can exceed τ·f(1)/f(N) in no cell), the median over its cells with both
  numbers; a paper that publishes no τ (CAST) takes the other three papers' cells.

`out_of_regime` (verdicts.py) applies the rule; `Regime` carries both figures for a report
and is what verdicts.compared consults for every speed comparison (`gating`).
"""

from __future__ import annotations

import contextvars
import csv
import json
import statistics
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from specbench import ROOT
from specbench.costs.fingerprint import fingerprint_id
from specbench.costs.profile import CostProfile, Curve
from specbench.replicate import results

PAPERS = ("mars", "cast", "entmtp", "talon")
SIZES = (8, 32, 60)  # the tree sizes the papers' claims compare (chains and small trees, EAGLE-3's 32-60, TALON's 60)
PROFILES = ROOT / "results" / "bench"


@dataclass(frozen=True)
class Regime:
    """The runs' machine's cost profile (None: none committed) and the paper's bound."""

    paper: str
    here: CostProfile | None
    profile: str | None  # the committed profile it comes from, and how it was matched
    paper_bound: float  # median over the cells of tau / speedup: f(N)/f(1) is at most this
    paper_cells: int
    paper_range: tuple[float, float]
    paper_source: str  # whose cells
    left_out: int  # cells whose speedup exceeds their tau (paper_cells)

    def here_at(self, n: float, batch: int = 1, context: float | None = None) -> float | None:
        """f(n)/f(1) here at batch size `batch` and `context` cached tokens (None: the smallest
        over the profiled contexts), read at the tree's own size (linear between profiled n and
        contexts, extrapolated past the largest n as costs.profile.Curve does); None without a
        profile."""
        if self.here is None:
            return None
        contexts = self.here.target.contexts if context is None else [context]
        return min(self.here.target_ms(batch, c, n) / self.here.target_ms(batch, c, 1) for c in contexts)

    def header(self) -> str:
        """The report's line on the regime a run set measured in and the paper's."""
        if self.here is None:
            here = "no committed cost profile of this machine (results/bench), so no speed comparison can be placed"
        else:
            here = (
                ", ".join(f"f({n})/f(1) = {self.here_at(n):.2f}" for n in SIZES)
                + f" ({self.profile}, the smallest over its contexts)"
            )
        low, high = self.paper_range
        dropped = (
            f"; {self.left_out} cells whose speedup exceeds their tau left out: no ratio of tok/s over AR can"
            if self.left_out
            else ""
        )
        return (
            f"a target forward over n new tokens costs {here}. On the paper's GPUs it costs at most "
            "tau/speedup one-token forwards (speedup = tau f(1) / (f(N) + drafting)): median "
            f"{self.paper_bound:.2f} (range {low:.2f}-{high:.2f}) "
            f"over {self.paper_cells} published cells with both numbers ({self.paper_source}{dropped})."
        )


def published(paper: str) -> dict[tuple, dict[str, float]]:
    """The paper's published tau and speedup by (table, model, method, dataset, temperature, setting)."""
    with open(ROOT / "results" / "reference" / f"{paper}.csv", newline="", encoding="utf-8") as handle:
        rows = list(csv.DictReader(handle))
    cells: dict[tuple, dict[str, float]] = {}
    for row in rows:
        if row["metric"] in ("tau", "speedup") and row["value"]:
            cells.setdefault(
                (row["table"], row["model"], row["method"], row["dataset"], row["temperature"], row["setting"]), {}
            )[row["metric"]] = float(row["value"])
    return cells


# tokens per target forward = the paper's tau + this: EntMTP's tau counts accepted draft tokens
# per step, without the target's own token (results/reference/entmtp.notes.md)
TAU_CONVENTION = {"entmtp": 1.0}


def paper_cells(paper: str) -> tuple[list[float], int]:
    """(tokens per target forward / speedup of every published cell of `paper` that gives
    both, AR's excluded; how many cells were left out for a speedup above that: no
    wall-clock ratio over AR can exceed the tokens per target forward, so those cells
    measure something else)."""
    offset = TAU_CONVENTION.get(paper, 0.0)
    ratios = [
        (c["tau"] + offset) / c["speedup"]
        for key, c in published(paper).items()
        if key[2] != "ar" and "tau" in c and c.get("speedup")
    ]
    return [r for r in ratios if r >= 1], sum(r < 1 for r in ratios)


def published_tau_lead(paper: str, names: tuple[str, str]) -> tuple[int, int]:
    """In how many of the paper's cells that give both methods' tau (same table, model,
    dataset, temperature) the first has the higher tau: (that many, of how many)."""
    by_cell: dict[tuple, dict[str, float]] = {}
    for (table, model, method, dataset, temperature, _), values in published(paper).items():
        if method in names and "tau" in values:
            by_cell.setdefault((table, model, dataset, temperature), {})[method] = values["tau"]
    pairs = [(c[names[0]], c[names[1]]) for c in by_cell.values() if names[0] in c and names[1] in c]
    return sum(a > b for a, b in pairs), len(pairs)


def machine_profile(runs: pd.DataFrame) -> tuple[CostProfile | None, str | None]:
    """The committed cost profile of the runs' model, machine and the (dtype, forward) most of
    them ran in: that profile, else the one of the same model, dtype and machine whose forward
    shares most of its parts among those of its kind (the target's packing first: a drafter's
    int8 leaves the target's cost alone); with none committed for that machine, the dtype probe its runs recorded
    (probed_profile); (None, None) without either."""
    if runs.empty or "environment.forward" not in runs:
        return None, None
    first = runs.iloc[0]
    machine = fingerprint_id(
        json.loads((Path(first["run_dir"]) / results.SUMMARY).read_text())["environment"]["fingerprint"]
    )
    ran = runs[["environment.dtype", "environment.forward"]].dropna().astype(str).value_counts()
    if ran.empty:
        return None, None
    (dtype, forward), _ = sorted(ran.items(), key=lambda kv: (-kv[1], kv[0]))[0]
    prefix, suffix = f"profile-{first['config.model.name']}-{dtype}-", f"-{machine}.json"
    kind = forward_kind(forward)
    found = {
        name: path
        for path in PROFILES.glob(f"{prefix}*{suffix}")
        if forward_kind(name := path.name[len(prefix) : -len(suffix)]) == kind
    }
    if not found:
        return probed_profile(runs, dtype)
    chosen = forward if forward in found else max(sorted(found), key=lambda f: forward_likeness(f, forward))
    path = found[chosen]
    note = "" if chosen == forward else f"; the nearest committed forward to the runs' {forward}"
    return CostProfile.from_json(path.read_text()), f"results/bench/{path.name}{note}"


def probed_profile(runs: pd.DataFrame, dtype: str) -> tuple[CostProfile | None, str | None]:
    """A one-context cost curve from the target forwards the runs' own plans timed on their
    machine (decisions.json: the dtype probe, in `dtype`, at its context; one timing per n,
    the median over runs where their probes differ), for a machine no profile was committed
    from; (None, None) when no run recorded one."""
    timings: dict[int, list[float]] = {}
    context = None
    for _, run in runs.iterrows():
        choice = (results.decisions(run) or {}).get("dtype_choice") or {}
        probe = (choice.get("probe") or {}).get(dtype) or {}
        for n, ms in probe.items():
            timings.setdefault(int(n), []).append(float(ms))
        if probe:
            context = choice.get("context", context)
    if 1 not in timings or len(timings) < 2:
        return None, None
    ns = sorted(timings)
    curve = Curve(
        contexts=[int(context or 0)],
        max_n=ns[-1],
        ms=[[statistics.median(timings[n]) for n in ns]],
        spread=[[0.0] * len(ns)],
        ns=ns,
    )
    return CostProfile(key={}, target=curve), (
        f"no profile of this machine committed: its runs' own dtype probe (decisions.json, {dtype}, context "
        f"{context}, n = {', '.join(map(str, ns))})"
    )


def forward_kind(forward: str) -> str:
    """The forward's class without its options ("LeanTreeLM" of "LeanTreeLM-packed>=1+int8-drafts<8")."""
    return forward.split("+")[0].split("-")[0]


def forward_likeness(profiled: str, ran: str) -> tuple:
    """How alike two forward names are for the target's cost: same packing or not, same
    attention, then parts in common ("LeanTreeLM-packed>=1+fp32-attention" has two)."""
    a, b = profiled.split("+"), ran.split("+")
    return (
        ("packed" in a[0]) == ("packed" in b[0]),
        ("fp32-attention" in a) == ("fp32-attention" in b),
        len(set(a) & set(b)),
    )


def regime(paper: str, runs: pd.DataFrame) -> Regime:
    own, left_out = paper_cells(paper)
    source = f"{paper}'s tables"
    if not own and not left_out:
        others = [paper_cells(other) for other in PAPERS if other != paper]
        own, left_out = [r for cells, _ in others for r in cells], sum(n for _, n in others)
        source = (
            f"{paper} publishes no tau: the cells of {', '.join(p for p in PAPERS if p != paper)}, on the same class "
            "of GPU"
        )
    here, profile = machine_profile(runs)
    return Regime(
        paper, here, profile, round(statistics.median(own), 4), len(own), (min(own), max(own)), source, left_out
    )


def verified_nodes(run: pd.Series) -> float:
    """Mean nodes per verification of a run (the root and every drafted node), over every
    step of every prompt: 1 for AR."""
    steps = [1 + sum(widths) for record in results.samples(run) for widths in record["method"].get("tree_widths") or []]
    return sum(steps) / len(steps) if steps else 1.0


def mean_context(run: pd.Series) -> float | None:
    """Mean cached tokens at a run's verifications: each prompt's first turn plus half its
    answer; None for records that did not keep their prompt lengths."""
    records = results.samples(run)
    spans = [
        r["method"]["prompt_tokens"][0] + r["method"]["new_tokens"] / 2
        for r in records
        if r["method"].get("prompt_tokens")
    ]
    return sum(spans) / len(spans) if spans else None


_current: contextvars.ContextVar[Regime | None] = contextvars.ContextVar("regime", default=None)


@contextmanager
def gating(current: Regime):
    """Within the block, verdicts.compared gates its speed comparisons by `current`."""
    token = _current.set(current)
    try:
        yield current
    finally:
        _current.reset(token)


def current() -> Regime | None:
    return _current.get()


_gated: contextvars.ContextVar[list | None] = contextvars.ContextVar("gated", default=None)


@contextmanager
def collecting():
    """Within the block, every speed comparison the gate marks not testable is listed as
    (case, a's run, b's run, names): a report judges them again on tau, in a row of its own."""
    found: list = []
    token = _gated.set(found)
    try:
        yield found
    finally:
        _gated.reset(token)


def note_gated(case: str, a: pd.Series, b: pd.Series, names: tuple[str, str]) -> None:
    found = _gated.get()
    if found is not None:
        found.append((case, a, b, names))
