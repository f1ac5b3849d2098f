"""The three parts of a method and what the loop asks of each."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Protocol

import torch

from specbench.engine.sampling import Sampling
from specbench.engine.tree import DraftTree


class Drafter(Protocol):
    """Given the committed context and a draft tree, next-token logits for some nodes."""

    forwards: int  # draft forward passes so far (N_q)
    feature_layers: tuple[int, ...]  # target hidden_states it reads (empty: none)

    def begin(self, prompt: list[int], features: torch.Tensor | None) -> None:
        """Start a new sequence; `features` [len(prompt), .] are the target's hidden
        states at `feature_layers` for the prompt, None when it reads none."""

    def logits(self, context: list[int], tree: DraftTree, nodes: list[int]) -> torch.Tensor | None:
        """Logits [len(nodes), V] over the target vocabulary for the token after each
        node, or None when the drafter has nothing to propose."""

    def commit(self, tree: DraftTree, path: list[int], features: torch.Tensor | None) -> None:
        """The target accepted `path` (root first) of `tree`; `features` are the target's
        hidden states at the path's nodes, from the forward that verified them."""


class TreePolicy(Protocol):
    def build(
        self, drafter: Drafter | None, context: list[int], root: int, sampling: Sampling,
        generator: torch.Generator | None,
    ) -> DraftTree:
        """A draft tree rooted at the pending token `root`."""


@dataclass
class Acceptance:
    path: list[int]  # accepted nodes, root first
    next_token: int  # the bonus or correction token appended after the path
    # what a verifier wants recorded about its decisions: counts (int, summed per run)
    # and observations (lists, concatenated), e.g. MARS's relaxed acceptances and logits
    notes: dict = field(default_factory=dict)


class Verifier(Protocol):
    def accept(
        self, tree: DraftTree, logits: torch.Tensor, sampling: Sampling, generator: torch.Generator | None
    ) -> Acceptance:
        """Given target logits at every tree node, the accepted path and the next token."""
