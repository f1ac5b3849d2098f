"""OPT-Tree (Wang et al., "OPT-Tree: Speculative Decoding with Adaptive Draft Tree
Structure", TACL 2025; TALON's tree baseline): the draft tree of `nodes` tokens that
maximises the expected acceptance length E(T) = sum over its nodes of the draft's path
probability, grown layer by layer while that pays.

Each layer: one draft forward over the previous layer's nodes, each adding its top-`nodes`
children (path probability = parent's x child's); the layer keeps the `nodes` most
probable of them (the release's per-layer width). After each layer, T_i is the best
`nodes`-node tree over every layer kept so far, which is their `nodes` most probable
nodes: a path probability never exceeds its parent's, so these form a subtree. Drafting
stops once E(T_i) - E(T_{i-1}) <= `threshold`, or after `max_depth` layers; T_i is
verified. The release's defaults: 60 nodes, threshold 0.5, max depth 10.

Children are the draft's deterministic top-k, so the verifier treats them as point
masses: lossless at any temperature.
"""

from __future__ import annotations

import math

from specbench.engine.parts import TreePolicy
from specbench.engine.tree import DraftTree, top_tokens
from specbench.engine.values import integer, number
from specbench.trees.eagle import add_top_children, best_first


class OptTree(TreePolicy):
    # shapes `auto` chooses from (specbench.costs.autotune), small to large
    AUTO_CANDIDATES = [{"nodes": n} for n in (1, 2, 3, 4, 6, 8, 12, 16, 24, 32, 60)]
    SIZE_KEYS = ("nodes", "max_depth")

    def __init__(self, nodes: int = 60, threshold: float = 0.5, max_depth: int = 10):
        self.nodes = integer("method.tree.nodes", nodes, at_least=1)
        self.threshold = number(
            "method.tree.threshold", threshold, at_least=0, meaning="expected accepted tokens a layer must add"
        )
        self.max_depth = integer("method.tree.max_depth", max_depth, at_least=1)

    def widest(self) -> int:
        return self.nodes + 1

    def grow(self, drafter, contexts, roots, sampling, generators) -> list[DraftTree]:
        trees = [DraftTree.root(root) for root in roots]
        frontiers = [[0] for _ in trees]
        kept = [[] for _ in trees]  # every layer's nodes: what T_i is chosen from
        value = [0.0 for _ in trees]  # E(T_i)
        for _ in range(self.max_depth):
            if not any(frontiers):
                break
            rows = top_tokens(drafter.logits(contexts, trees, frontiers), self.nodes)
            for b, (tree, frontier, top) in enumerate(zip(trees, frontiers, rows)):
                if not frontier or top is None:
                    frontiers[b] = []
                    continue
                layer = best_first(tree, add_top_children(tree, frontier, top, self.nodes))[: self.nodes]
                kept[b] += layer
                gain = self.expected_accepted(tree, kept[b]) - value[b]
                value[b] += gain
                frontiers[b] = sorted(layer) if gain > self.threshold else []
        return [tree.subtree(best_first(tree, nodes)[: self.nodes]) for tree, nodes in zip(trees, kept)]

    def expected_accepted(self, tree: DraftTree, nodes: list[int]) -> float:
        """E(T) of the best `self.nodes`-node tree among `nodes`."""
        return sum(math.exp(tree.logps[n]) for n in best_first(tree, nodes)[: self.nodes])
