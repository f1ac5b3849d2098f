"""Medusa drafter: every head reads the target's final hidden state at the last
committed token.

The root of each step's tree is the token the target itself chose from that hidden
state; a node at depth d gets its candidates from head d (depth 0, the root, from head
0, which predicts the token after the root). Head outputs do not depend on the drafted
tokens, so every node at one depth shares them: a head runs once per step, when a depth
first needs it, and each head run counts as one draft forward (so δ is the number of
heads a step used, and the cost profile's f_D is one head's cost).
"""

from __future__ import annotations

import torch

from specbench.engine.kernels import Compiled, pack_linears
from specbench.engine.parts import Drafter, DrafterLoader
from specbench.engine.tree import DraftTree
from specbench.errors import ConfigError
from specbench.models import registry
from specbench.models.medusa import MedusaHeads, load_heads

WEIGHTS = ("method.drafter.heads", "Medusa heads")  # the key naming its weights, and what they are


def check(heads: dict | None) -> None:
    """What build() refuses before any model loads (methods.check)."""
    registry.check_part(heads, *WEIGHTS)


def build(target: torch.nn.Module, hardware: dict, compiled: Compiled, heads: dict | None) -> "MedusaDrafter":
    """The drafter named by a method config: `heads` is a model entry (see registry)."""
    directory = registry.resolve_part(heads, *WEIGHTS)
    model, facts = load_heads(directory, target, registry.DTYPES[hardware["dtype"]], key="method.drafter.heads")
    return MedusaDrafter(pack_linears(model, compiled), target, facts)


load = DrafterLoader(build, check)


class MedusaDrafter(Drafter):
    always_proposes = True

    def __init__(self, heads: MedusaHeads, target: torch.nn.Module, facts: dict | None = None):
        self.heads = heads
        self.facts = facts or {}
        self.feature_layers = (target.config.num_hidden_layers,)  # the final normed hidden state
        self.forwards = 0

    def begin(self, prompts: list[list[int]], features: list[torch.Tensor]) -> None:
        self._hidden = [f[-1] for f in features]
        self._logits: dict[int, torch.Tensor] = {}  # head -> [B, V] for this step

    def logits(
        self, contexts: list[list[int]], trees: list[DraftTree], nodes: list[list[int]]
    ) -> list[torch.Tensor | None]:
        count = len(self.heads)
        depths = [[tree.depths[n] for n in row_nodes] for tree, row_nodes in zip(trees, nodes)]
        missing = sorted({d for row in depths for d in row if d < count} - self._logits.keys())
        if missing:
            computed = self.heads(torch.stack(self._hidden), missing)  # [B, len(missing), V]
            self._logits.update({d: computed[:, i] for i, d in enumerate(missing)})
            self.forwards += len(missing)
        return [
            torch.stack([self._logits[d][b] for d in row]) if row and max(row) < count else None
            for b, row in enumerate(depths)
        ]

    grows_on_device = True

    def root_logits(self, contexts: list[list[int]], roots: list[int]) -> torch.Tensor:
        self._depth = 0
        return self._head(0)

    def level_logits(self, tokens: torch.Tensor, parents: torch.Tensor) -> torch.Tensor:
        """Head d's logits do not depend on the path: the same row for every node of a level."""
        self._depth += 1
        return self._head(self._depth)[:, None].expand(-1, tokens.shape[1], -1)

    def _head(self, depth: int) -> torch.Tensor:
        """[B, V] of head `depth`, computed once per step."""
        if depth >= len(self.heads):
            raise ConfigError(f"method.tree: the tree is deeper than the {len(self.heads)} Medusa heads draft")
        if depth not in self._logits:
            self._logits[depth] = self.heads(torch.stack(self._hidden), [depth])[:, 0]
            self.forwards += 1
        return self._logits[depth]

    def commit(self, trees: list[DraftTree], paths: list[list[int]], features: list[torch.Tensor]) -> None:
        self._hidden = [f[-1] for f in features]
        self._logits = {}

    def keep(self, rows: list[int]) -> None:
        self._hidden = [self._hidden[r] for r in rows]
        self._logits = {d: z[rows] for d, z in self._logits.items()}
