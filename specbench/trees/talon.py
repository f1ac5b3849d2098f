"""TALON: a budget-driven adaptive draft tree (Algorithm 2 of the TALON paper).

The tree (root included) grows one depth per draft forward until it holds `budget`
nodes. The first `robust_layers` depths keep the top-K candidates by cumulative path
probability p(u) (robust initialisation; the paper uses one such layer). Every later
depth gathers all children of the current parents and keeps those with
p(u) >= mu * max p(u) (confidence gating); if that is more than the budget has room
for, the most probable ones. A confident drafter thus yields a deep, narrow tree and an
uncertain one a shallow, wide tree. Children are deterministic (the most probable
ones), so the verifier treats them as point masses: lossless at any temperature.
"""

from __future__ import annotations

import math

from specbench.engine.parts import NestedStep, TreePolicy
from specbench.engine.tree import DraftTree, TopTokens, top_tokens
from specbench.engine.values import integer, number
from specbench.trees.eagle import best_first


class TalonTree(TreePolicy):
    # shapes `auto` chooses from (specbench.costs.autotune), small to large
    AUTO_CANDIDATES = [
        {"budget": n, "top_k": k}
        for n, k in ((2, 1), (3, 2), (4, 2), (6, 3), (8, 4), (12, 4), (16, 6), (24, 8), (32, 10), (60, 10))
    ]
    SIZE_KEYS = ("budget", "top_k", "robust_layers")

    def __init__(self, budget: int = 60, mu: float = 0.03, top_k: int = 10, robust_layers: int = 1):
        self.budget = integer("method.tree.budget", budget, at_least=2)
        self.mu = number("method.tree.mu", mu, above=0, at_most=1)
        self.top_k = integer("method.tree.top_k", top_k, at_least=1)
        self.robust_layers = integer("method.tree.robust_layers", robust_layers, at_least=0)

    def widest(self) -> int:
        return self.budget

    def nested_step(self, tree: DraftTree, path: list[int], draft_forwards: int, context: int) -> NestedStep:
        """This budget's tree read off a wider TALON tree's, as `grow` builds it from the same
        draft scores: depth by depth, each parent's best children (top-K in the robust layers,
        else as many as the budget has room for) ranked by cumulative log-prob, gated by mu
        outside the robust layers, the best that fit kept. An estimate where the wider tree's
        own gate or budget cut a child this one would keep: the confirming decodes decide."""
        children = tree.child_lists()
        kept, parents, depth = {0}, [0], 0
        while parents and len(kept) < self.budget:
            keep = self._keep(len(kept), depth)
            found = best_first(tree, [c for p in parents for c in best_first(tree, children[p])[:keep]])
            if depth >= self.robust_layers and found:
                floor = self._floor(tree.logps[found[0]])
                found = [c for c in found if tree.logps[c] >= floor]
            parents = found[:keep]
            kept.update(parents)
            depth += 1
        levels = depth - (not parents)  # the last drafter call found nothing where parents ran out
        inside = next((i for i, node in enumerate(path) if node not in kept), len(path))
        return NestedStep(
            accepted=inside - 1, nodes=len(kept), draft_forwards=min(draft_forwards, depth), reach=max(levels, 1)
        )

    def grow(self, drafter, contexts, roots, sampling, generators) -> list[DraftTree]:
        trees = [DraftTree.root(root) for root in roots]
        parents = [[0] for _ in trees]
        depth = 0
        while any(parents):
            asked = [p if len(t) < self.budget else [] for t, p in zip(trees, parents)]
            if not any(asked):
                break
            rows = top_tokens(
                drafter.logits(contexts, trees, asked), max(self._keep(len(tree), depth) for tree in trees)
            )
            parents = [
                self._grow(tree, row_parents, top, depth) if top is not None else []
                for tree, row_parents, top in zip(trees, asked, rows)
            ]
            depth += 1
        return trees

    def _keep(self, size: int, depth: int) -> int:
        """How many children one depth may add to a row's tree of `size` nodes: top-K in the
        robust layers, else the room left."""
        room = self.budget - size
        return min(room, self.top_k) if depth < self.robust_layers else room

    def _floor(self, best: float) -> float:
        """The confidence gate's cut below the best candidate's cumulative log-prob:
        p(u) >= mu * max p(u), in logs."""
        return best + math.log(self.mu)

    def _grow(self, tree: DraftTree, parents: list[int], top: TopTokens, depth: int) -> list[int]:
        """One depth of Algorithm 2 for one row; returns the new nodes (next parents)."""
        robust = depth < self.robust_layers
        keep = self._keep(len(tree), depth)
        candidates = self._candidates(tree, parents, top, keep)
        if not robust and candidates:
            floor = self._floor(candidates[0][0])
            candidates = [c for c in candidates if c[0] >= floor]
        return [tree.add(parent, token, logp) for _, parent, token, logp in candidates[:keep]]

    @staticmethod
    def _candidates(
        tree: DraftTree, parents: list[int], top: TopTokens, keep: int
    ) -> list[tuple[float, int, int, float]]:
        """(cumulative log p, parent, token, token log p) of the best `keep` children of
        each parent, best first (no other child can make the cut)."""
        found = []
        for parent, values, tokens in zip(parents, *top):
            for value, token in zip(values[:keep], tokens[:keep]):
                if value > float("-inf"):
                    found.append((tree.logps[parent] + value, parent, token, value))
        found.sort(key=lambda c: -c[0])
        return found
