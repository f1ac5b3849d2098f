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
from dataclasses import dataclass
from pathlib import Path

import torch

from specbench.engine.parts import TreePolicy
from specbench.engine.tree import DraftTree, top_tokens
from specbench.engine.values import integer, is_integer
from specbench.errors import ConfigError, require


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
        require(isinstance(choices, (list, tuple)) and len(choices) > 0, key, f"must be a non-empty list of rank tuples, got {choices!r}")
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
        tree = DraftTree(tokens=[0] * len(parents), parents=list(parents), depths=list(depths), logps=[0.0] * len(parents))
        children = tuple(tuple(i for i, p in enumerate(parents) if p == node) for node in range(len(parents)))
        top_k = tuple(max((c[-1] + 1 for c in ordered if index[c[:-1]] == node), default=0) for node in range(len(parents)))
        max_depth = max(depths)
        expanded = tuple(
            tuple(sorted({p for p, d in zip(parents, depths) if d == depth and p >= 0})) for depth in range(1, max_depth + 1)
        )
        ranks = (-1,) + tuple(c[-1] for c in ordered)
        return cls(tuple(ordered), parents, depths, ranks, tree.ancestor_mask(), expanded, children, top_k)

    def __len__(self) -> int:
        return len(self.parents)

    @property
    def depth(self) -> int:
        return max(self.depths)


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

    def __init__(self, choices=None, choices_file: str | None = None, choices_name: str | None = None, size: int | None = None):
        if choices_file is not None:
            require(choices is None and bool(choices_name), "method.tree", "give either choices, or choices_file with choices_name (and choices=null)")
            choices = read_choices(choices_file, choices_name)
        topology = Topology.from_choices(choices)
        if size is not None:
            size = integer("method.tree.size", size, at_least=1, meaning="nodes after the root; null: all")
            topology = Topology.from_choices(topology.choices[:size])
        self.topology = topology

    def widest(self) -> int:
        return len(self.topology)

    def grow(self, drafter, contexts, roots, sampling, generators) -> list[DraftTree]:
        return grow([self.topology] * len(roots), drafter, contexts, roots)


def grow(topologies: list[Topology], drafter, contexts, roots) -> list[DraftTree]:
    """Fill row b's `topologies[b]` depth by depth: one drafter call per depth over the
    nodes each row expands there; a node's token is its rank-th most likely candidate
    under its parent. Draft log-probs are kept (schedulers read path values from them)."""
    trees = [
        DraftTree(tokens=[root] + [0] * (len(t) - 1), parents=list(t.parents), depths=list(t.depths), logps=[0.0] * len(t), ancestors=t.ancestors)
        for t, root in zip(topologies, roots)
    ]
    for depth in range(1, max(t.depth for t in topologies) + 1):
        asked = [list(t.expanded[depth - 1]) if depth <= t.depth else [] for t in topologies]
        rows = drafter.logits(contexts, trees, asked)
        for topology, parents, logits in zip(topologies, asked, rows):
            if parents and (logits is None or logits.shape[0] != len(parents)):
                raise ConfigError(f"method.tree: the drafter proposes nothing at depth {depth}; the tree is {topology.depth} deep")
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
