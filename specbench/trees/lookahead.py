"""Lookahead decoding (Fu et al., "Break the Sequential Dependency of LLM Inference Using
Lookahead Decoding", 2024): the target drafts for itself by Jacobi iteration, and the
n-grams its iterations produce are verified as drafts. No draft model.

Each row keeps a 2D window of N-1 levels x W guesses and an n-gram pool. Every step one
target forward runs, over one tree rooted at the pending token:
- the lookahead branch: level 0 is a chain of W guesses for the next W positions; the
  guess at level l, column k continues the guess at level l-1, column k (one position
  further). So every guess sees the committed text, level 0 up to its column and its
  own column's earlier levels: the paper's lookahead attention mask, as a tree;
- the verification branch: up to G pooled n-grams that start with the pending token,
  newest first, each as a chain below the root.
Branches share nodes where they carry the same tokens (a trie), which changes no
prediction: a node's output depends only on its path.

After verification (`observe`), the target's argmax at each top-level guess closes an
n-gram (the guesses of one column plus that prediction) for the pool; the window moves
up one level and the top level becomes those predictions: one Jacobi step, the window
sliding one position, as the paper does whatever number of tokens was accepted.

Every node is a deterministic candidate, so the standard verifier treats them as point
masses: identical ids to AR at T=0, the target's distribution at T>0. Window guesses
that happen to be right are accepted too (a superset of the paper's verification branch,
which adds acceptances and changes nothing else).
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field

import torch

from specbench.engine.parts import TreePolicy
from specbench.engine.transfer import device_tensor
from specbench.engine.tree import DraftTree
from specbench.engine.values import integer


@dataclass
class _RowState:
    levels: list[list[int]]  # N-1 levels of W guesses
    # first token -> its newest continuations (N-1 tokens), oldest first; dicts as ordered sets
    pool: dict[int, dict[tuple[int, ...], None]] = field(default_factory=dict)
    window_nodes: list[list[int]] = field(default_factory=list)  # node of each guess in the last tree


class LookaheadTree(TreePolicy):
    # shapes `auto` chooses from (specbench.costs.autotune), small to large; the paper's GPU
    # settings are of the largest kind (W=15, N=5, G=15 is the constructor's default)
    AUTO_CANDIDATES = [
        {"window": w, "ngram": n, "candidates": g}
        for w, n, g in ((2, 2, 1), (3, 3, 2), (4, 3, 3), (5, 4, 3), (7, 4, 5), (10, 5, 7), (15, 5, 15))
    ]
    SIZE_KEYS = ("window", "ngram", "candidates")

    def __init__(self, window: int = 15, ngram: int = 5, candidates: int = 15, seed: int = 0):
        self.window = integer("method.tree.window", window, at_least=1)
        self.ngram = integer("method.tree.ngram", ngram, at_least=2)
        self.candidates = integer("method.tree.candidates", candidates, at_least=0)
        self.seed = integer("method.tree.seed", seed, at_least=0)
        self.rows: list[_RowState] | None = None

    def widest(self) -> int:
        """The root, N-1 levels of W window guesses and up to G pooled n-grams of N-1 tokens."""
        return 1 + (self.ngram - 1) * (self.window + self.candidates)

    def begin(self, batch_size: int, costs) -> None:
        """New sequences: windows are filled from each prompt at the first grow."""
        self.rows = None

    def keep(self, rows: list[int]) -> None:
        self.rows = [self.rows[i] for i in rows]

    def grow(self, drafter, contexts, roots, sampling, generators) -> list[DraftTree]:
        if self.rows is None:
            self.rows = [self._start(context) for context in contexts]
        return [self._tree(state, root) for state, root in zip(self.rows, roots)]

    def observe(self, trees, paths, logits) -> None:
        # the target's next token after every row's top window level, read once for the batch
        flat = (
            torch.cat([z[device_tensor(state.window_nodes[-1], z.device)] for state, z in zip(self.rows, logits)])
            .argmax(-1)
            .tolist()
        )
        start = 0
        for state in self.rows:
            predicted = flat[start : start + len(state.window_nodes[-1])]
            start += len(predicted)
            for k, token in enumerate(predicted):
                gram = [level[k] for level in state.levels] + [token]
                continuations = state.pool.setdefault(gram[0], {})
                continuations.pop(tuple(gram[1:]), None)  # re-inserted as the newest
                continuations[tuple(gram[1:])] = None
                if len(continuations) > max(self.candidates, 1):  # only the newest G are ever verified
                    del continuations[next(iter(continuations))]
            state.levels = state.levels[1:] + [predicted]

    def _start(self, context: list[int]) -> _RowState:
        """Initial guesses: tokens drawn from the prompt (seeded, so a run repeats)."""
        rng = random.Random(self.seed)
        source = context or [0]
        return _RowState(levels=[[rng.choice(source) for _ in range(self.window)] for _ in range(self.ngram - 1)])

    def _tree(self, state: _RowState, root: int) -> DraftTree:
        tree = DraftTree.root(root)
        below = [0]  # level 0, column k hangs below column k - 1 (the root for k = 0)
        for token in state.levels[0]:
            below.append(_child(tree, below[-1], token))
        nodes = [below[1:]]
        for level in state.levels[1:]:
            nodes.append([_child(tree, parent, token) for parent, token in zip(nodes[-1], level)])
        state.window_nodes = nodes
        for gram in list(state.pool.get(root, {}))[::-1][: self.candidates]:
            node = 0
            for token in gram:
                node = _child(tree, node, token)
        return tree


def _child(tree: DraftTree, parent: int, token: int) -> int:
    """`parent`'s child carrying `token`, added if it has none (siblings stay distinct)."""
    for child in tree.children(parent):
        if tree.tokens[child] == token:
            return child
    return tree.add(parent, token)
