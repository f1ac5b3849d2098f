"""A cost lookup with forward times as functions of n, recording each lookup, and a drafter of
hand-made logits (CAST's tests, the pilot's and the sync tests)."""

import math

import torch

from specbench.engine.parts import Drafter


class FakeCosts:
    """Forward ms as functions of n alone; records (model, batch, context, n) of each lookup."""

    def __init__(self, target=lambda n: 10.0, draft=lambda n: 1.0):
        self.target, self.draft, self.calls = target, draft, []

    def target_ms(self, batch, context, n):
        self.calls.append(("target", batch, context, n))
        return self.target(n)

    def draft_ms(self, batch, context, n):
        self.calls.append(("draft", batch, context, n))
        return self.draft(n)


class FakeDrafter(Drafter):
    """Batched drafter: `logits_for(row, tree, node)` gives one row of logits; records
    every call's node lists and counts forwards (one per call)."""

    def __init__(self, logits_for):
        self.logits_for, self.forwards, self.calls = logits_for, 0, []

    def logits(self, contexts, trees, nodes):
        self.forwards += 1
        self.calls.append([list(n) for n in nodes])
        return [
            torch.stack([self.logits_for(b, tree, n) for n in row]) if row else None
            for b, (tree, row) in enumerate(zip(trees, nodes))
        ]


def table_logits(table: dict, vocab: int):
    """Logits from a table keyed by the node's own token; unlisted tokens impossible."""

    def logits_for(row, tree, node):
        out = torch.full((vocab,), float("-inf"))
        for token, p in table[tree.tokens[node]].items():
            out[token] = math.log(p)
        return out

    return logits_for


TABLE = {
    0: {1: 0.6, 2: 0.4},
    1: {3: 0.7, 4: 0.3},
    2: {5: 0.9, 6: 0.1},
    3: {7: 0.8, 8: 0.2},
    4: {7: 0.6, 9: 0.4},
    5: {8: 0.55, 9: 0.45},
    6: {3: 0.6, 4: 0.4},
    7: {1: 0.7, 2: 0.3},
    8: {1: 0.9, 2: 0.1},
    9: {1: 0.8, 2: 0.2},
}
