"""Hydra drafter: Medusa-style heads whose draft at depth d+1 also reads the tokens of
the path above it (specbench/models/hydra.py has the architecture).

Per row the drafter keeps the prefix layer's KV cache over the committed tokens' target
hidden states and the prefix output at the last committed token. A `logits` call runs,
for every asked node at depth d, head d on [prefix, embeddings of the root..node path];
nodes of one depth across all rows go through the head together, and the call counts
as one draft forward. The prefix layer runs when tokens are committed (inside the clock,
as every drafter's commit), one row at a time, since rows commit different numbers of
tokens.
"""

from __future__ import annotations

import torch
from transformers import DynamicCache

from specbench.engine.kernels import Compiled, pack_linears
from specbench.engine.parts import Drafter, DrafterLoader
from specbench.engine.transfer import device_tensor
from specbench.engine.tree import DraftTree
from specbench.errors import ConfigError
from specbench.models import registry
from specbench.models.hydra import HydraHeads, load_heads

WEIGHTS = ("method.drafter.heads", "Hydra heads")  # the key naming its weights, and what they are


def check(heads: dict | None) -> None:
    """What build() refuses before any model loads (methods.check)."""
    registry.check_part(heads, *WEIGHTS)


def build(target: torch.nn.Module, hardware: dict, compiled: Compiled, heads: dict | None) -> "HydraDrafter":
    """The drafter named by a method config: `heads` is a model entry (see registry)."""
    directory = registry.resolve_part(heads, *WEIGHTS)
    model, facts = load_heads(directory, target, registry.DTYPES[hardware["dtype"]], key="method.drafter.heads")
    return HydraDrafter(pack_linears(model, compiled), target, facts)


load = DrafterLoader(build, check)


class HydraDrafter(Drafter):
    always_proposes = True

    def __init__(self, heads: HydraHeads, target: torch.nn.Module, facts: dict | None = None):
        self.heads = heads
        self.facts = facts or {}
        # hidden_state_offset 0: the final normed hidden state, as the release reads it
        self.feature_layers = (target.config.num_hidden_layers - self.facts.get("hidden_state_offset", 0),)
        self.forwards = 0

    @torch.no_grad()
    def begin(self, prompts: list[list[int]], features: list[torch.Tensor]) -> None:
        self._caches = [DynamicCache() for _ in prompts]
        self._prefix = [self.heads.prefix(f, cache)[-1] for f, cache in zip(features, self._caches)]

    @torch.no_grad()
    def logits(
        self, contexts: list[list[int]], trees: list[DraftTree], nodes: list[list[int]]
    ) -> list[torch.Tensor | None]:
        """Rows asking for a node deeper than the last head get None."""
        usable = [bool(row) and max(tree.depths[n] for n in row) < len(self.heads) for tree, row in zip(trees, nodes)]
        # depth -> (row, position in its request, path tokens)
        by_depth: dict[int, list[tuple[int, int, list[int]]]] = {}
        for b, (tree, row) in enumerate(zip(trees, nodes)):
            for i, n in enumerate(row if usable[b] else ()):
                by_depth.setdefault(tree.depths[n], []).append((b, i, [tree.tokens[m] for m in tree.path_to(n)]))
        out: list[list[torch.Tensor | None]] = [[None] * len(row) for row in nodes]
        for depth, group in by_depth.items():
            prefix = torch.stack([self._prefix[b] for b, _, _ in group])
            tokens = device_tensor([t for _, _, t in group], prefix.device)
            for (b, i, _), logits in zip(group, self.heads.head(depth, prefix, tokens)):
                out[b][i] = logits
        if by_depth:
            self.forwards += 1
        return [torch.stack(row) if ok else None for ok, row in zip(usable, out)]

    grows_on_device = True

    @torch.no_grad()
    def root_logits(self, contexts: list[list[int]], roots: list[int]) -> torch.Tensor:
        self._stacked_prefix = torch.stack(self._prefix)  # [B, H], for every level of this step
        # [B, nodes of the level, path tokens]
        self._paths = device_tensor(roots, self._stacked_prefix.device)[:, None, None]
        return self._head(self._paths)[:, 0]

    @torch.no_grad()
    def level_logits(self, tokens: torch.Tensor, parents: torch.Tensor) -> torch.Tensor:
        """Head d reads each node's path: its parent's path (gathered on the device) and its token."""
        above = self._paths.gather(1, parents[:, :, None].expand(-1, -1, self._paths.shape[2]))
        self._paths = torch.cat([above, tokens[:, :, None]], dim=2)
        return self._head(self._paths)

    def _head(self, paths: torch.Tensor) -> torch.Tensor:
        """[B, w, V]: the head of the paths' depth over [prefix, path tokens], one draft forward."""
        depth = paths.shape[2] - 1
        if depth >= len(self.heads):
            raise ConfigError(f"method.tree: the tree is deeper than the {len(self.heads)} Hydra heads draft")
        batch, width = paths.shape[:2]
        prefix = self._stacked_prefix[:, None].expand(-1, width, -1)
        self.forwards += 1
        return self.heads.head(depth, prefix.reshape(batch * width, -1), paths.reshape(batch * width, -1)).reshape(
            batch, width, -1
        )

    @torch.no_grad()
    def commit(self, trees: list[DraftTree], paths: list[list[int]], features: list[torch.Tensor]) -> None:
        self._prefix = [self.heads.prefix(f, cache)[-1] for f, cache in zip(features, self._caches)]

    def keep(self, rows: list[int]) -> None:
        self._caches = [self._caches[r] for r in rows]
        self._prefix = [self._prefix[r] for r in rows]
