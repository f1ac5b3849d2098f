"""A test-only tree policy: random shapes, tokens from the drafter (plus noise)."""

import random

import torch

from specbench.engine.tree import DraftTree


class RandomTree:
    def __init__(self, size: int = 12, max_depth: int = 5, seed: int = 0):
        self.size, self.max_depth = size, max_depth
        self.rng = random.Random(seed)

    def build(self, drafter, context, root, sampling, generator) -> DraftTree:
        tree = DraftTree.root(root)
        expandable = [0]
        while len(tree) < self.size and expandable:
            parent = expandable.pop(self.rng.randrange(len(expandable)))
            logits = drafter.logits(context, tree, [parent])[0]
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
            for token in tokens:
                child = tree.add(parent, token, float(torch.log_softmax(logits.float(), -1)[token]))
                if tree.depths[child] < self.max_depth:
                    expandable.append(child)
        return tree
