"""Prompt lookup decoding (PLD): copy what followed the latest earlier occurrence of
the current n-gram. No model, so no draft forwards; proposals are point masses."""

from __future__ import annotations

import numpy as np
import torch

from specbench.engine.kernels import Compiled
from specbench.engine.parts import Drafter, DrafterLoader
from specbench.engine.tree import DraftTree
from specbench.errors import require


def build(
    target: torch.nn.Module, hardware: dict, compiled: Compiled, max_ngram: int = 3, min_ngram: int = 1
) -> "PromptLookupDrafter":
    """No model to load or run: `hardware` and `compiled` do not apply."""
    return PromptLookupDrafter(target.config.vocab_size, max_ngram, min_ngram)


load = DrafterLoader(build, layers=False)


class PromptLookupDrafter(Drafter):
    def __init__(self, target_vocab_size: int, max_ngram: int = 3, min_ngram: int = 1):
        require(
            isinstance(min_ngram, int) and min_ngram >= 1,
            "method.drafter.min_ngram",
            f"must be an integer >= 1, got {min_ngram!r}",
        )
        require(
            isinstance(max_ngram, int) and max_ngram >= min_ngram,
            "method.drafter.max_ngram",
            f"must be an integer >= min_ngram ({min_ngram}), got {max_ngram!r}",
        )
        self.vocab_size = target_vocab_size
        self.max_ngram = max_ngram
        self.min_ngram = min_ngram

    def logits(
        self, contexts: list[list[int]], trees: list[DraftTree], nodes: list[list[int]]
    ) -> list[torch.Tensor | None]:
        return [self._row_logits(c, t, n) if n else None for c, t, n in zip(contexts, trees, nodes)]

    def _row_logits(self, context: list[int], tree: DraftTree, nodes: list[int]) -> torch.Tensor | None:
        proposals = [self.lookup(context + [tree.tokens[a] for a in tree.path_to(n)]) for n in nodes]
        if all(p is None for p in proposals):
            return None
        out = torch.full((len(nodes), self.vocab_size), float("-inf"))
        for row, token in enumerate(proposals):
            if token is not None:
                out[row, token] = 0.0
        return out

    def lookup(self, sequence: list[int]) -> int | None:
        """The token after the latest earlier match of the longest trailing n-gram."""
        seq = np.asarray(sequence)
        for n in range(min(self.max_ngram, len(seq) - 1), self.min_ngram - 1, -1):
            windows = np.lib.stride_tricks.sliding_window_view(seq[:-1], n)
            hits = np.flatnonzero((windows == seq[-n:]).all(axis=1))
            if hits.size:
                return int(seq[hits[-1] + n])
        return None
