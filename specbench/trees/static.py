"""Static draft trees from a choice list (Medusa / Hydra style), built once and frozen.

A choice is a tuple of ranks: (i0, i1, ..., id) is the node reached by taking the
i0-th most likely token of the first draft position, then the i1-th of the second under
it, and so on. Choices are sorted by (depth, ranks), so parents precede children and
sibling order follows rank. Everything the engine needs per step that depends on the
shape alone (parents, depths, the ancestor mask, which nodes each depth expands) is
computed here once per topology; a step only fills in tokens, and switching between
topologies (EntMTP's scheduler) is choosing another frozen object.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass, replace
from functools import cached_property
from pathlib import Path

import torch

from specbench.engine.parts import NestedStep, TreePolicy
from specbench.engine.transfer import device_tensor, to_device
from specbench.engine.tree import DraftTree, top_tokens
from specbench.engine.values import integer, is_integer
from specbench.errors import ConfigError, require


@dataclass(frozen=True)
class Level:
    """One depth of a static tree, as filled on the device: the nodes fed to draft it (the
    previous depth's nodes with children, and their slots in the level fed before them) and
    the nodes it fills (a contiguous range: choices sort by depth), each from its parent's
    slot and rank among that parent's candidates."""

    asked: slice | list[int]
    asked_slots: torch.Tensor
    nodes: slice
    slots: torch.Tensor
    ranks: torch.Tensor
    parents: torch.Tensor
    top_k: int


@dataclass(frozen=True)
class Topology:
    choices: tuple[tuple[int, ...], ...]  # node i (1-based) is choices[i - 1]; node 0 the root
    parents: tuple[int, ...]
    depths: tuple[int, ...]
    ranks: tuple[int, ...]  # rank of node i among its parent's candidates (root: -1)
    ancestors: torch.Tensor  # bool [n, n], DraftTree.ancestor_mask of this shape
    expanded: tuple[tuple[int, ...], ...]  # per depth d >= 1: the nodes at depth d - 1 that have children
    children: tuple[tuple[int, ...], ...]  # per node, in rank order
    top_k: tuple[int, ...]  # per node: how many candidates its children need (0: a leaf)

    @classmethod
    def from_choices(cls, choices, key: str = "method.tree.choices") -> "Topology":
        require(
            isinstance(choices, (list, tuple)) and len(choices) > 0,
            key,
            f"must be a non-empty list of rank tuples, got {choices!r}",
        )
        cleaned = []
        for choice in choices:
            ok = isinstance(choice, (list, tuple)) and len(choice) > 0 and all(is_integer(r) and r >= 0 for r in choice)
            require(ok, key, f"every choice is a non-empty list of ranks >= 0, got {choice!r}")
            cleaned.append(tuple(choice))
        require(len(set(cleaned)) == len(cleaned), key, "has duplicate choices")
        ordered = sorted(cleaned, key=lambda c: (len(c), c))
        index = {(): 0} | {c: i + 1 for i, c in enumerate(ordered)}
        orphan = next((c for c in ordered if c[:-1] not in index), None)
        require(orphan is None, key, f"choice {orphan} has no parent {orphan and orphan[:-1]} in the list")
        parents = (-1,) + tuple(index[c[:-1]] for c in ordered)
        depths = (0,) + tuple(len(c) for c in ordered)
        tree = DraftTree(
            tokens=[0] * len(parents), parents=list(parents), depths=list(depths), logps=[0.0] * len(parents)
        )
        children = tuple(tuple(i for i, p in enumerate(parents) if p == node) for node in range(len(parents)))
        top_k = tuple(
            max((c[-1] + 1 for c in ordered if index[c[:-1]] == node), default=0) for node in range(len(parents))
        )
        max_depth = max(depths)
        expanded = tuple(
            tuple(sorted({p for p, d in zip(parents, depths) if d == depth and p >= 0}))
            for depth in range(1, max_depth + 1)
        )
        ranks = (-1,) + tuple(c[-1] for c in ordered)
        return cls(tuple(ordered), parents, depths, ranks, tree.ancestor_mask(), expanded, children, top_k)

    def __len__(self) -> int:
        return len(self.parents)

    @property
    def depth(self) -> int:
        return max(self.depths)

    @cached_property
    def levels(self) -> list["Level"]:
        """Per depth 1, 2, ...: what filling it on the device gathers (static.grow), once per shape."""
        out, fed = [], (0,)
        for depth in range(1, self.depth + 1):
            asked = self.expanded[depth - 1]
            nodes = [node for node, d in enumerate(self.depths) if d == depth]
            out.append(
                Level(
                    asked=slice(asked[0], asked[-1] + 1)
                    if list(asked) == list(range(asked[0], asked[-1] + 1))
                    else list(asked),
                    # depth 1: the root
                    asked_slots=torch.tensor([fed.index(self.parents[node]) for node in asked] if depth > 1 else [0]),
                    nodes=slice(nodes[0], nodes[-1] + 1),
                    slots=torch.tensor([asked.index(self.parents[node]) for node in nodes]),
                    ranks=torch.tensor([self.ranks[node] for node in nodes]),
                    parents=torch.tensor([self.parents[node] for node in nodes]),
                    top_k=max(self.top_k[node] for node in asked),
                )
            )
            fed = asked
        return out

    def levels_on(self, device: torch.device) -> list["Level"]:
        """`levels` with every index on `device`, copied there once per shape and device: a
        step indexes with them and never waits for a copy."""
        placed = self.__dict__.setdefault("_levels_on", {})
        if str(device) not in placed:
            placed[str(device)] = [
                replace(
                    level,
                    asked=level.asked if isinstance(level.asked, slice) else device_tensor(level.asked, device),
                    **{
                        name: to_device(getattr(level, name), device)
                        for name in ("asked_slots", "slots", "ranks", "parents")
                    },
                )
                for level in self.levels
            ]
        return placed[str(device)]


def read_choices(path: str, name: str, key: str = "method.tree.choices_file"):
    """A choice list assigned to `name` in a Python file (e.g. a local clone of a method's
    release), read as a literal without running the file."""
    file = Path(path)
    require(file.is_file(), key, f"no such file {path!r}")
    for node in ast.walk(ast.parse(file.read_text())):
        if isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == name for t in node.targets):
            try:
                return ast.literal_eval(node.value)
            except ValueError:
                raise ConfigError(f"{key}: {name} in {path} is not a literal list") from None
    raise ConfigError(f"{key}: {path} assigns no {name}")


class StaticTree(TreePolicy):
    """The same tree shape every step; the drafter's candidates at each position fill it.
    `size` keeps the first nodes of the choice list in (depth, ranks) order, a subtree
    (parents sort before children); `size: auto` picks it from measured costs, with
    drafting off when no size is predicted to beat AR (specbench/costs/autotune.py)."""

    AUTO_CANDIDATES = [{"size": n} for n in (1, 2, 3, 4, 6, 8, 12, 16, 24, 32, 48, 64)]
    SIZE_KEYS = ("size",)

    @staticmethod
    def distinct_candidate(cfg: dict) -> dict:
        """A size at or past the tree's node count keeps the whole tree: written as `size:
        null`, so autotune calibrates the whole tree once, not once per such size."""
        size = cfg.get("size")
        if size is None:
            return cfg
        choices = cfg.get("choices")
        if cfg.get("choices_file") is not None and cfg.get("choices_name"):
            choices = read_choices(cfg["choices_file"], cfg.get("choices_name"))
        return {**cfg, "size": None} if choices is not None and size >= len(choices) else cfg

    def __init__(
        self, choices=None, choices_file: str | None = None, choices_name: str | None = None, size: int | None = None
    ):
        if choices_file is not None:
            require(
                choices is None and bool(choices_name),
                "method.tree",
                "give either choices, or choices_file with choices_name (and choices=null)",
            )
            choices = read_choices(choices_file, choices_name)
        topology = Topology.from_choices(choices)
        if size is not None:
            size = integer("method.tree.size", size, at_least=1, meaning="nodes after the root; null: all")
            topology = Topology.from_choices(topology.choices[:size])
        self.topology = topology

    def widest(self) -> int:
        return len(self.topology)

    def deepest(self) -> int:
        return self.topology.depth

    def nested_step(self, tree: DraftTree, path: list[int], draft_forwards: int, context: int) -> NestedStep | None:
        """`size` keeps the first nodes of the sorted choice list, so a smaller tree is the
        whole tree's first nodes, each the same rank under the same parent; the drafter is
        called once a depth (Medusa's heads once in all)."""
        kept, depth = len(self.topology), self.topology.depth
        if len(tree) < kept:
            return None
        inside = next((i for i, node in enumerate(path) if node >= kept), len(path))
        return NestedStep(accepted=inside - 1, nodes=kept, draft_forwards=min(draft_forwards, depth), reach=depth)

    def grow(self, drafter, contexts, roots, sampling, generators) -> list[DraftTree]:
        return grow([self.topology] * len(roots), drafter, contexts, roots)


def grow(topologies: list[Topology], drafter, contexts, roots) -> list[DraftTree]:
    """Fill row b's `topologies[b]` depth by depth: one drafter call per depth over the
    nodes each row expands there; a node's token is its rank-th most likely candidate
    under its parent. Draft log-probs are kept (schedulers read path values from them)."""
    trees = [
        DraftTree(
            tokens=[root] + [0] * (len(t) - 1),
            parents=list(t.parents),
            depths=list(t.depths),
            logps=[0.0] * len(t),
            ancestors=t.ancestors,
        )
        for t, root in zip(topologies, roots)
    ]
    if drafter.grows_on_device and len(set(map(id, topologies))) == 1:
        return _fill_on_device(topologies[0], drafter, contexts, trees)
    for depth in range(1, max(t.depth for t in topologies) + 1):
        asked = [list(t.expanded[depth - 1]) if depth <= t.depth else [] for t in topologies]
        rows = drafter.logits(contexts, trees, asked)
        for topology, parents, logits in zip(topologies, asked, rows):
            if parents and (logits is None or logits.shape[0] != len(parents)):
                raise ConfigError(
                    f"method.tree: the drafter proposes nothing at depth {depth}; the tree is {topology.depth} deep"
                )
        k = max(t.top_k[parent] for t, parents in zip(topologies, asked) for parent in parents)
        for topology, tree, parents, top in zip(topologies, trees, asked, top_tokens(rows, k)):
            if not parents:
                continue
            for parent, values, tokens in zip(parents, *top):
                for node in topology.children[parent]:
                    rank = topology.ranks[node]
                    tree.tokens[node] = tokens[rank]
                    tree.logps[node] = tree.logps[parent] + values[rank]
    return trees


def _fill_on_device(topology: Topology, drafter, contexts, trees: list[DraftTree]) -> list[DraftTree]:
    """`grow` for rows sharing one topology, read back once: each depth feeds the nodes
    that have children (their tokens gathered on the device from their parents'
    candidates), and every node's token and log-prob comes back in one transfer."""
    logits = drafter.root_logits(contexts, [tree.tokens[0] for tree in trees])[:, None]
    batch, device = len(trees), logits.device
    tokens = torch.zeros(batch, len(topology), dtype=torch.long, device=device)
    scores = torch.zeros(batch, len(topology), dtype=torch.float64, device=device)  # cumulative log-probs
    for depth, level in enumerate(topology.levels_on(device), start=1):
        if depth > 1:
            logits = drafter.level_logits(tokens[:, level.asked], level.asked_slots.expand(batch, -1))
        top = torch.log_softmax(logits.float(), dim=-1).topk(level.top_k, dim=-1)
        tokens[:, level.nodes] = top.indices[:, level.slots, level.ranks]
        scores[:, level.nodes] = scores[:, level.parents] + top.values[:, level.slots, level.ranks].double()
    values = torch.stack([tokens[:, 1:].double(), scores[:, 1:]]).tolist()
    for tree, row_tokens, row_scores in zip(trees, *values):
        tree.tokens[1:] = [int(t) for t in row_tokens]
        tree.logps[1:] = row_scores
    return trees
