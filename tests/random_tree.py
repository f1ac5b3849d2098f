"""A test-only tree policy: random shapes, tokens from the drafter (plus noise).

Batched: every draft call expands one or two random parents in each row that still has
room, so rows ask the drafter for different numbers of nodes (none once they are full).
"""

import random

import torch

from specbench.engine.parts import TreePolicy
from specbench.engine.tree import DraftTree


class RandomTree(TreePolicy):
    def __init__(self, size: int = 12, max_depth: int = 5, seed: int = 0):
        self.size, self.max_depth = size, max_depth
        self.rng = random.Random(seed)

    def grow(self, drafter, contexts, roots, sampling, generators) -> list[DraftTree]:
        trees = [DraftTree.root(root) for root in roots]
        expandable = [[0] for _ in trees]
        while True:
            asked = [self._pick(tree, row_expandable) for tree, row_expandable in zip(trees, expandable)]
            if not any(asked):
                break
            rows = drafter.logits(contexts, trees, asked)
            for b, (tree, parents, logits) in enumerate(zip(trees, asked, rows)):
                if logits is None:  # the drafter has nothing for this row
                    continue
                generator = generators[b] if generators else None
                for parent, parent_logits in zip(parents, logits):
                    for child in self._children(tree, parent, parent_logits, sampling, generator):
                        if tree.depths[child] < self.max_depth:
                            expandable[b].append(child)
        return trees

    def _pick(self, tree: DraftTree, expandable: list[int]) -> list[int]:
        """One or two random parents to expand (removed from `expandable`)."""
        if len(tree) >= self.size or not expandable:
            return []
        count = min(self.rng.randint(1, 2), len(expandable))
        return sorted(expandable.pop(self.rng.randrange(len(expandable))) for _ in range(count))

    def _children(self, tree: DraftTree, parent: int, logits: torch.Tensor, sampling, generator) -> list[int]:
        n_children = self.rng.randint(1, 3)
        if sampling.greedy:
            # the draft's favourites, with a random token mixed in now and then
            tokens = logits.topk(n_children).indices.tolist()
            if self.rng.random() < 0.3:
                tokens[-1] = self.rng.randrange(logits.shape[-1])
            tokens = list(dict.fromkeys(tokens))
        else:
            q = sampling.probs(logits)
            tree.child_dists[parent] = q
            remaining, tokens = q.clone(), []
            for _ in range(min(n_children, int((q > 0).sum()))):
                token = int(torch.multinomial(remaining / remaining.sum(), 1, generator=generator))
                tokens.append(token)
                remaining[token] = 0
        logp = torch.log_softmax(logits.float(), -1)
        return [tree.add(parent, token, float(logp[token])) for token in tokens]
