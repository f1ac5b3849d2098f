"""Sampling settings, applied identically to target and draft logits."""

from __future__ import annotations

from dataclasses import dataclass

import torch

from specbench.engine.values import integer, number


@dataclass(frozen=True)
class Sampling:
    temperature: float = 0.0
    top_p: float = 1.0
    top_k: int = 0

    def __post_init__(self):
        number("gen.temperature", self.temperature, at_least=0, meaning="0 = greedy")
        number("gen.top_p", self.top_p, above=0, at_most=1)
        integer("gen.top_k", self.top_k, 0, "0 = off")

    @property
    def greedy(self) -> bool:
        return self.temperature == 0

    def probs(self, logits: torch.Tensor) -> torch.Tensor:
        """Float32 probabilities after temperature, top-k and top-p (last dim = vocab)."""
        if self.greedy:
            return torch.nn.functional.one_hot(logits.argmax(-1), logits.shape[-1]).float()
        scores = logits.float() / self.temperature
        if self.top_k and self.top_k < scores.shape[-1]:
            kth = scores.topk(self.top_k, dim=-1).values[..., -1:]
            scores = scores.masked_fill(scores < kth, float("-inf"))
        if self.top_p < 1:
            sorted_scores, order = scores.sort(dim=-1, descending=True)
            cumulative = sorted_scores.softmax(-1).cumsum(-1)
            # drop a token once the tokens before it already cover top_p
            drop_sorted = (cumulative - sorted_scores.softmax(-1)) >= self.top_p
            drop = drop_sorted.scatter(-1, order, drop_sorted)
            scores = scores.masked_fill(drop, float("-inf"))
        return scores.softmax(-1)

    def pick(self, logits: torch.Tensor, generator: torch.Generator | None) -> int:
        """One token from a single row of logits: argmax at T=0, else a sample."""
        if self.greedy:
            return int(logits.argmax())
        return sample(self.probs(logits), generator)


def sample(probs: torch.Tensor, generator: torch.Generator | None) -> int:
    return int(torch.multinomial(probs, 1, generator=generator))
