"""A chain of up to gamma draft tokens (SpS, PLD)."""

from __future__ import annotations

from specbench.engine.sampling import sample
from specbench.engine.tree import DraftTree
from specbench.errors import require


class Chain:
    # shapes `gamma: auto` chooses from (specbench.costs.autotune), small to large
    AUTO_CANDIDATES = [{"gamma": g} for g in range(1, 11)]

    def __init__(self, gamma: int = 5):
        require(isinstance(gamma, int) and gamma >= 1, "method.tree.gamma", f"must be an integer >= 1, got {gamma!r}")
        self.gamma = gamma

    def build(self, drafter, context, root, sampling, generator) -> DraftTree:
        tree = DraftTree.root(root)
        node = 0
        for _ in range(self.gamma):
            logits = drafter.logits(context, tree, [node])
            if logits is None:
                break
            logits = logits[0]
            if sampling.greedy:
                node = tree.add(node, int(logits.argmax()))
                continue
            q = sampling.probs(logits)
            token = sample(q, generator)
            tree.child_dists[node] = q
            node = tree.add(node, token, float(q[token].log()))
        return tree
