"""Medusa drafter: every head reads the target's final hidden state at the last
committed token, so all draft positions come from one small forward per step.

The root of each step's tree is the token the target itself chose from that hidden
state; a node at depth d gets its candidates from head d (depth 0, the root, from head
0, which predicts the token after the root). Head outputs do not depend on the drafted
tokens, so every node at one depth shares them.
"""

from __future__ import annotations

import torch

from specbench.engine.tree import DraftTree
from specbench.errors import ConfigError
from specbench.models import registry
from specbench.models.medusa import MedusaHeads, load_heads


def build(target: torch.nn.Module, hardware: dict, heads: dict | None) -> "MedusaDrafter":
    """The drafter named by a method config: `heads` is a model entry (see registry)."""
    if not heads:
        raise ConfigError(
            "method.drafter.heads: this target has no Medusa heads configured; "
            "set method.drafter.heads={name:my-heads,path:/dir/with/config.json} (or {name:my-heads,id:<hub id>})"
        )
    directory = registry.resolve(heads, key="method.drafter.heads")
    model, facts = load_heads(directory, target, registry.DTYPES[hardware["dtype"]], key="method.drafter.heads")
    return MedusaDrafter(model, target, facts)


class MedusaDrafter:
    def __init__(self, heads: MedusaHeads, target: torch.nn.Module, facts: dict | None = None):
        self.heads = heads
        self.facts = facts or {}
        self.feature_layers = (target.config.num_hidden_layers,)  # the final normed hidden state
        self.forwards = 0

    def begin(self, prompts: list[list[int]], features: list[torch.Tensor]) -> None:
        self._hidden = [f[-1] for f in features]
        self._logits = None  # [B, heads, V] for this step, computed on first use

    def logits(self, contexts: list[list[int]], trees: list[DraftTree], nodes: list[list[int]]) -> list[torch.Tensor | None]:
        if self._logits is None:
            self._logits = self.heads(torch.stack(self._hidden))
            self.forwards += 1
        heads = len(self.heads)
        out = []
        for b, (tree, row_nodes) in enumerate(zip(trees, nodes)):
            depths = [tree.depths[n] for n in row_nodes]
            out.append(self._logits[b, depths] if row_nodes and max(depths) < heads else None)
        return out

    def commit(self, trees: list[DraftTree], paths: list[list[int]], features: list[torch.Tensor]) -> None:
        self._hidden = [f[-1] for f in features]
        self._logits = None

    def keep(self, rows: list[int]) -> None:
        self._hidden = [self._hidden[r] for r in rows]
        if self._logits is not None:
            self._logits = self._logits[rows]
