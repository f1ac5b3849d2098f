"""The three parts of a method and what the loop asks of each.

Everything is defined over a batch: row b of every list belongs to the b-th sequence
still decoding (rows that finish leave the batch; `keep` tells the parts which stay).
Batch size 1 is the same path with one row.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Protocol

import torch

from specbench.engine.sampling import Sampling
from specbench.engine.tree import DraftTree


class Drafter(Protocol):
    """Given each row's committed context and draft tree, next-token logits for some nodes."""

    forwards: int  # draft forward passes so far (N_q); one batched forward counts once
    feature_layers: tuple[int, ...]  # target hidden_states it reads (empty: none)

    def begin(self, prompts: list[list[int]], features: list[torch.Tensor] | None) -> None:
        """Start new sequences; `features[b]` [len(prompts[b]), .] are the target's hidden
        states at `feature_layers` for row b's prompt, None when it reads none."""

    def logits(self, contexts: list[list[int]], trees: list[DraftTree], nodes: list[list[int]]) -> list[torch.Tensor | None]:
        """Per row, logits [len(nodes[b]), V] over the target vocabulary for the token after
        each node, or None when the row asks for no nodes or the drafter has nothing to
        propose for it. One call is (at most) one draft forward over all rows."""

    def commit(self, trees: list[DraftTree], paths: list[list[int]], features: list[torch.Tensor] | None) -> None:
        """The target accepted `paths[b]` (root first) of `trees[b]`; `features[b]` are the
        target's hidden states at that path's nodes, from the forward that verified them."""

    def keep(self, rows: list[int]) -> None:
        """Only these rows (ascending indices into the current batch) go on decoding."""


class StepCosts(Protocol):
    """Measured forward times (ms) at batch size `batch`, `context` cached rows and `n` new
    rows per sequence (specbench.costs)."""

    def target_ms(self, batch: int, context: float, n: int) -> float: ...

    def draft_ms(self, batch: int, context: float, n: int) -> float: ...


class TreePolicy(Protocol):
    """Builds each row's draft tree. Policies that keep state across steps (CAST's
    acceptance buffers, EntMTP's scheduler) also define `begin(batch_size, costs)`, called
    once per batch before the first step, and/or `observe(trees, paths, logits)`, called
    after every verification with each row's tree, accepted path and the target logits
    the verifier saw, and `keep(rows)` when rows leave the batch; the loop calls them when
    present, and a policy never touches the engine or the model."""

    def grow(
        self, drafter: Drafter | None, contexts: list[list[int]], roots: list[int], sampling: Sampling,
        generator: torch.Generator | None,
    ) -> list[DraftTree]:
        """One draft tree per row, rooted at that row's pending token `roots[b]`."""


@dataclass
class Acceptance:
    path: list[int]  # accepted nodes, root first
    next_token: int  # the bonus or correction token appended after the path
    # what a verifier wants recorded about its decisions: counts (int, summed per run)
    # and observations (lists, concatenated), e.g. MARS's relaxed acceptances and logits
    notes: dict = field(default_factory=dict)


class Verifier(Protocol):
    """Verification is per sequence (each row's tree and logits are its own); the loop
    calls it for every row of the batch."""

    def accept(
        self, tree: DraftTree, logits: torch.Tensor, sampling: Sampling, generator: torch.Generator | None
    ) -> Acceptance:
        """Given target logits at every tree node, the accepted path and the next token."""
