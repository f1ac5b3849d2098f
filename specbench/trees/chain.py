"""A chain of up to gamma draft tokens (SpS, PLD)."""

from __future__ import annotations

from specbench.engine.parts import TreePolicy
from specbench.engine.sampling import sample
from specbench.engine.tree import DraftTree
from specbench.engine.values import integer


class Chain(TreePolicy):
    # shapes `gamma: auto` chooses from (specbench.costs.autotune), small to large
    AUTO_CANDIDATES = [{"gamma": g} for g in range(1, 11)]

    def __init__(self, gamma: int = 5):
        self.gamma = integer("method.tree.gamma", gamma, at_least=1)

    def grow(self, drafter, contexts, roots, sampling, generators) -> list[DraftTree]:
        """Each row's chain grows by one token per draft forward until gamma tokens or
        until the drafter has nothing to propose for it."""
        trees = [DraftTree.root(root) for root in roots]
        tips = [0] * len(trees)  # a row's last node, None once its chain has ended
        for _ in range(self.gamma):
            if all(tip is None for tip in tips):
                break
            rows = drafter.logits(contexts, trees, [[tip] if tip is not None else [] for tip in tips])
            for b, (tree, logits) in enumerate(zip(trees, rows)):
                if tips[b] is None:
                    continue
                if logits is None:
                    tips[b] = None
                elif sampling.greedy:
                    tips[b] = tree.add(tips[b], int(logits[0].argmax()))
                else:
                    q = sampling.probs(logits[0])
                    token = sample(q, generators[b])
                    tree.child_dists[tips[b]] = q
                    tips[b] = tree.add(tips[b], token, float(q[token].log()))
        return trees
