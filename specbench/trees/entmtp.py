"""EntMTP's runtime: a bank of frontier trees per task and a per-step choice among them.

The bank (built offline by `python -m specbench.run.entmtp_search`) holds, per task, the trees of the
throughput-Pareto frontier with their frozen buffers (trees/static.py), and names the
task's throughput-optimal tree (`static`) and the scheduler's conservative and
aggressive pair, as the search machine's costs priced them. A run with a cost profile
prices the searched frontier again with its own (the paper selects by throughput on the
target workload; a tree fastest on one CPU or dtype need not be on another) and picks
from that front. Each step, per row, a policy picks one; switching is choosing another
prebuilt Topology, nothing is rebuilt.

The score s is a path value (EAGLE-2's, as the paper's §4 defines it) from the target's
top-1 probability p0 at the last verification's accepted position (no temperature) and
the heads' top-1 probabilities q_1..q_d along the all-top-1 branch of the tree the step
before drafted (its kept log-probs): g_d = p0 · q_1 ··· q_d. The score reuses what the
last step computed, as the public release does (its head logits are the previous
proposal's), so scheduling makes no drafter call of its own.
- `path_value: best_path_value` (default): s = max(p0, g_1, ..., g_d), the text's
  best_path_value and the public release's default score. Since every q <= 1 this
  always equals p0.
- `path_value: greedy_depth`: s = g_d at the deepest level that branch reaches, an
  option (the release offers path_value_greedy_depth{1..4} beside its default).
Policies: `static` (the task's tree), `binary_tau` (EntMTPτ: aggressive once s > tau_on,
back to conservative once s <= tau_off, tau_off <= tau_on), `ladder` (K-way: the number
of thresholds below s indexes the trees from small to large). The first step of a row
uses the conservative tree: a policy sees no prefill logits (the release scores its
first step from them).
"""

from __future__ import annotations

import bisect
import itertools
import json
import math
import operator
from dataclasses import dataclass, field
from pathlib import Path

import torch

from specbench.engine.parts import TreePolicy
from specbench.engine.tree import DraftTree
from specbench.engine.values import choice, is_number, number
from specbench.errors import ConfigError, require
from specbench.trees.static import Topology, grow

POLICIES = ("static", "binary_tau", "ladder")
# the search replaces a bank of another version (what each version changed: docs/speed.md)
BANK_VERSION = 2
PATH_VALUES = ("best_path_value", "greedy_depth")


@dataclass
class TaskTrees:
    """One task's frontier trees (small to large) and the ones the policies use."""

    trees: list[dict]  # choices, size, accept_biased, accept_unbiased, predicted_speedup, ...
    static: int
    conservative: int
    aggressive: int
    topologies: list[Topology] = field(default_factory=list)


def save_bank(path: Path, bank: dict[str, TaskTrees], meta: dict) -> None:
    tasks = {
        task: {"trees": t.trees, "static": t.static, "conservative": t.conservative, "aggressive": t.aggressive}
        for task, t in bank.items()
    }
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({"version": BANK_VERSION, "meta": meta, "tasks": tasks}, indent=1))


def bank_version(path: Path) -> int | None:
    """The version a bank file was written with (None: no such file, or not a bank)."""
    try:
        return json.loads(path.read_text()).get("version") if path.is_file() else None
    except (json.JSONDecodeError, AttributeError):
        return None


def load_bank(path: str, key: str = "method.tree.bank") -> tuple[dict[str, TaskTrees], dict]:
    """The bank at `path`, every tree's buffers built once."""
    require(
        bool(path),
        key,
        "no tree bank given; build one with python -m specbench.run.entmtp_search (or make replicate-entmtp) and "
        "set its path",
    )
    file = Path(path)
    require(file.is_file(), key, f"no such file {path!r}")
    try:
        raw = json.loads(file.read_text())
        bank = {task: TaskTrees(**entry) for task, entry in raw["tasks"].items()}
    except (json.JSONDecodeError, KeyError, TypeError) as error:
        raise ConfigError(f"{key}: {path} is not a tree bank ({error})") from None
    for task, entry in bank.items():
        with_topologies(entry, key, task)
        for name in ("static", "conservative", "aggressive"):
            require(0 <= getattr(entry, name) < len(entry.trees), key, f"task {task}: {name} is not a tree index")
    return bank, raw.get("meta", {})


def with_topologies(entry: TaskTrees, key: str, task: str) -> TaskTrees:
    """Every tree's buffers, built once."""
    entry.topologies = [Topology.from_choices(t["choices"], key=f"{key} ({task})") for t in entry.trees]
    return entry


# ---- pricing: which frontier trees a machine's cost profile puts on the throughput front --


def step_ms(topology: Topology, costs, context: float) -> float:
    """One step of decoding with this tree shape, as the engine runs it: a target forward
    over the tree's tokens, root included, and the drafter called once per level
    (static.grow) over the nodes that level expands."""
    drafting = sum(costs.draft_ms(1, context, len(level)) for level in topology.expanded)
    return costs.target_ms(1, context, len(topology)) + drafting


def predicted_speedup(accept: float, choices, costs, context: float) -> float:
    """(accepted draft tokens + 1) per step over the step's cost in AR forwards."""
    return (accept + 1) * costs.target_ms(1, context, 1) / step_ms(Topology.from_choices(choices), costs, context)


def task_trees(history: list[dict], costs, context: float, shallow: int = 2) -> TaskTrees:
    """The throughput-Pareto trees of a frontier (each faster than every smaller one, by
    predicted speedup on the unbiased accept length when measured, else the biased one),
    the best (`static`), the best at the frontier's full depth (`aggressive`) and the best
    at most `shallow` deep (`conservative`)."""
    scored = []
    for entry in history:
        accept = entry.get("accept_unbiased", entry["accept_biased"])
        scored.append(
            {**entry, "predicted_speedup": round(predicted_speedup(accept, entry["choices"], costs, context), 4)}
        )
    pareto, best = [], 0.0
    for entry in sorted(scored, key=lambda e: e["size"]):
        if entry["predicted_speedup"] > best:
            pareto.append(entry)
            best = entry["predicted_speedup"]
    speed = [e["predicted_speedup"] for e in pareto]
    deepest = max(e["depth"] for e in pareto)

    def best_of(indices):
        return max(indices, key=lambda i: speed[i]) if indices else max(range(len(pareto)), key=lambda i: speed[i])

    return TaskTrees(
        trees=pareto,
        static=best_of(range(len(pareto))),
        conservative=best_of([i for i, e in enumerate(pareto) if e["depth"] <= shallow]),
        aggressive=best_of([i for i, e in enumerate(pareto) if e["depth"] == deepest]),
    )


def path_value(p0: float, head_top1: list[float], rule: str) -> float:
    values = [p0, *(p0 * g for g in itertools.accumulate(head_top1, operator.mul))]
    return values[-1] if rule == "greedy_depth" else max(values)


def greedy_branch(topology: Topology, tree: DraftTree) -> list[float]:
    """q_1..q_d: the drafter's top-1 probability at each level of the tree's all-top-1
    branch, read back from the log-probs drafting kept (static.grow)."""
    node, probs = 0, []
    while topology.children[node] and topology.ranks[topology.children[node][0]] == 0:
        child = topology.children[node][0]
        probs.append(math.exp(tree.logps[child] - tree.logps[node]))
        node = child
    return probs


class ScheduledTree(TreePolicy):
    COST_AWARE = True  # its bank's trees are searched, and re-priced each run, on measured costs

    def __init__(
        self,
        bank: str | None,
        task: str,
        policy: str = "binary_tau",
        tau_on: float = 0.02,
        tau_off: float | None = None,
        ladder: list[float] | None = None,
        path_value: str = "best_path_value",
    ):
        choice("method.tree.policy", policy, POLICIES)
        choice("method.tree.path_value", path_value, PATH_VALUES)
        tau_on = number("method.tree.tau_on", tau_on, at_least=0, at_most=1)
        tau_off = tau_on if tau_off is None else number("method.tree.tau_off", tau_off, at_least=0, at_most=1)
        require(
            tau_off <= tau_on,
            "method.tree.tau_off",
            f"must satisfy 0 <= tau_off <= tau_on <= 1, got tau_off={tau_off}, tau_on={tau_on}",
        )
        banks, self.meta = load_bank(bank)
        require(
            task in banks, "method.tree.task", f"the bank has no trees for {task!r}; it has {', '.join(sorted(banks))}"
        )
        self.task, self.task_name = banks[task], task
        # the search's measured frontier, which this run's costs price again (begin)
        self.search = self.meta.get(f"search_{task}")
        self.priced_with = None
        self.policy, self.tau_on, self.tau_off, self.rule = policy, tau_on, tau_off, path_value
        self.ladder = list(ladder or []) if policy == "ladder" else ladder
        if policy == "ladder":
            ascending = all(is_number(t) for t in self.ladder) and self.ladder == sorted(self.ladder)
            require(ascending, "method.tree.ladder", f"needs ascending thresholds, got {self.ladder}")
            self._check_ladder("")
        self.p0: list[float | None] = []
        self.branch: list[list[float]] = []
        self.current: list[int] = []

    def _check_ladder(self, priced: str) -> None:
        size = len(self.task.topologies)
        require(
            len(self.ladder) == size - 1,
            "method.tree.ladder",
            f"needs {size - 1} ascending thresholds for the task's {size} trees{priced}, got {self.ladder}",
        )

    def widest(self) -> int:
        """The largest tree this policy can pick for the task: any tree of the searched
        frontier when this run's costs will price it again, else the bank's picks."""
        if self.search:
            return max(entry["size"] for entry in self.search["frontier"])
        if self.policy == "static":
            picked = [self.task.static]
        elif self.policy == "ladder":
            picked = range(len(self.task.topologies))
        else:
            picked = [self.task.conservative, self.task.aggressive]
        return max(len(self.task.topologies[i]) for i in picked)

    def begin(self, batch_size: int, costs) -> None:
        if costs is not None and self.search and costs is not self.priced_with:
            self._price(costs)
        self.p0, self.branch, self.current = (
            [None] * batch_size,
            [[] for _ in range(batch_size)],
            [self.task.conservative] * batch_size,
        )

    def observe(self, trees: list[DraftTree], paths: list[list[int]], logits: list[torch.Tensor]) -> None:
        if self.policy == "static":
            return
        # one read for the batch
        self.p0 = torch.stack([z[p[-1]] for z, p in zip(logits, paths)]).float().softmax(-1).amax(-1).tolist()
        self.branch = [greedy_branch(self.task.topologies[i], tree) for i, tree in zip(self.current, trees)]

    def keep(self, rows: list[int]) -> None:
        self.p0, self.branch, self.current = (
            [self.p0[r] for r in rows],
            [self.branch[r] for r in rows],
            [self.current[r] for r in rows],
        )

    def _price(self, costs) -> None:
        """The task's throughput front and picks as this run's cost profile prices the
        searched frontier: a bank searched on another machine (or dtype) still runs the
        trees that are fastest here, as the paper selects on the target workload."""
        self.task = with_topologies(
            task_trees(self.search["frontier"], costs, self.search["context"]), "method.tree.bank", self.task_name
        )
        self.priced_with = costs
        if self.policy == "ladder":
            self._check_ladder(" this run's costs put on its throughput front")
        picks = {
            "static": [("static", self.task.static)],
            "binary_tau": [("conservative", self.task.conservative), ("aggressive", self.task.aggressive)],
            "ladder": [(f"ladder tree {i}", i) for i in range(len(self.task.trees))],
        }[self.policy]
        print(
            f"method.tree: {self.task_name}'s searched trees priced with this run's cost profile: "
            + ", ".join(
                f"{role} {self.task.trees[i]['nodes']} nodes, depth {self.task.trees[i]['depth']} (predicted "
                f"{self.task.trees[i]['predicted_speedup']:.2f}x)"
                for role, i in picks
            ),
            flush=True,
        )

    def grow(self, drafter, contexts, roots, sampling, generators) -> list[DraftTree]:
        if self.policy == "static":
            chosen = [self.task.static] * len(roots)
        else:
            chosen = [self.choose(b, s) for b, s in enumerate(self.scores())]
        self.current = chosen
        return grow([self.task.topologies[i] for i in chosen], drafter, contexts, roots)

    def scores(self) -> list[float | None]:
        """Per row, the path value s (None before the row's first verification)."""
        return [None if p0 is None else path_value(p0, q, self.rule) for p0, q in zip(self.p0, self.branch)]

    def choose(self, row: int, score: float | None) -> int:
        task = self.task
        if score is None:
            return task.conservative
        if self.policy == "ladder":
            return bisect.bisect_left(self.ladder, score)  # thresholds below s (s on a threshold stays below it)
        if self.current[row] == task.aggressive:
            return task.conservative if score <= self.tau_off else task.aggressive
        return task.aggressive if score > self.tau_on else task.conservative
