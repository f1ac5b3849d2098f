"""A causal LM whose KV cache holds committed context followed by draft-tree nodes.

Target and draft models both use it: a forward feeds new context tokens and/or tree
nodes (tree attention mask, position = root position + depth), and `commit` keeps
only the accepted path's rows, gathered in place.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from transformers import DynamicCache

from specbench.engine.tree import DraftTree


class TreeLM:
    def __init__(self, model: torch.nn.Module):
        self.model = model
        self.device = model.device
        # hidden_states indices a drafter reads (EAGLE-3); their concatenation for every
        # row of the last forward is left in `features`
        self.feature_layers: tuple[int, ...] = ()
        self.features: torch.Tensor | None = None
        self.reset()

    @property
    def vocab_size(self) -> int:
        return self.model.config.vocab_size

    def reset(self) -> None:
        self.cache = self._new_cache()
        self.committed = 0  # cache rows that hold committed context
        self.cached_nodes: list[int] = []  # tree node of each cache row after those
        self.forwards = 0

    def _new_cache(self):
        return DynamicCache(config=self.model.config)

    def forward(
        self, context: Sequence[int] = (), tree: DraftTree | None = None, nodes: Sequence[int] = ()
    ) -> torch.Tensor:
        """Feed new context tokens, then tree `nodes` (ascending; each node's ancestors
        cached already or fed in this call). Returns logits [len(nodes), V], or [1, V]
        at the last context token when no nodes are fed."""
        nodes = list(nodes)
        if context and self.cached_nodes:
            raise RuntimeError("context can only be added before any tree node is cached")
        root_position = self.committed + len(context)
        tokens = list(context) + [tree.tokens[n] for n in nodes] if nodes else list(context)
        positions = list(range(self.committed, root_position))
        positions += [root_position + tree.depths[n] for n in nodes]
        mask = self._mask(len(context), tree, nodes)
        logits, hidden = self._run(tokens, positions, mask, len(nodes) or 1)
        if self.feature_layers:
            self.features = torch.cat([hidden[i] for i in self.feature_layers], dim=-1)
        self.forwards += 1
        self.committed += len(context)
        self.cached_nodes += nodes
        return logits

    def _run(self, tokens: list[int], positions: list[int], mask, n_logits: int):
        """(logits [n_logits, V] of the last rows, hidden_states per layer [n, H] when
        features are read) for `tokens` appended to the cache."""
        out = self.model(
            input_ids=torch.tensor([tokens], device=self.device),
            position_ids=torch.tensor([positions], device=self.device),
            attention_mask=mask,
            past_key_values=self.cache,
            use_cache=True,
            logits_to_keep=n_logits,
            output_hidden_states=bool(self.feature_layers),
        )
        hidden = [h[0] for h in out.hidden_states] if self.feature_layers else None
        return out.logits[0], hidden

    def _mask(self, n_context: int, tree: DraftTree | None, nodes: list[int]) -> torch.Tensor | None:
        """Bool [1, 1, q, kv] (True = attend), or None where plain causal is exact."""
        if not nodes:
            return None
        plain_chain = not self.cached_nodes and nodes == list(range(len(nodes)))
        if plain_chain and all(tree.parents[n] == n - 1 for n in nodes):
            return None
        n_past = self.committed + n_context
        q = n_context + len(nodes)
        kv = n_past + len(self.cached_nodes) + len(nodes)
        mask = torch.zeros(q, kv, dtype=torch.bool)
        mask[:n_context, : self.committed] = True
        mask[:n_context, self.committed : n_past] = torch.ones(n_context, n_context).tril().bool()
        mask[n_context:] = tree.node_rows_mask(nodes, self.cached_nodes, n_past)
        return mask[None, None].to(self.device)

    def commit(self, path: Sequence[int]) -> int:
        """Keep the cached rows of the accepted `path` (root first) as context, drop the
        other tree rows. Returns how many path nodes were cached (a prefix of the path)."""
        row_of = {node: self.committed + i for i, node in enumerate(self.cached_nodes)}
        rows = []
        for node in path:
            if node not in row_of:
                break
            rows.append(row_of[node])
        keep = self.committed + len(rows)
        self._keep_rows(rows, keep)
        self.committed = keep
        self.cached_nodes = []
        return len(rows)

    def _keep_rows(self, rows: list[int], keep: int) -> None:
        """Move cache rows `rows` to committed..keep and drop every row after keep."""
        index = torch.tensor(rows, dtype=torch.long, device=self.device)
        for layer in self.cache.layers:
            if not getattr(layer, "is_initialized", False):
                continue
            if rows and rows != list(range(self.committed, keep)):
                layer.keys[:, :, self.committed : keep] = layer.keys[:, :, index]
                layer.values[:, :, self.committed : keep] = layer.values[:, :, index]
            layer.keys = layer.keys[:, :, :keep]
            layer.values = layer.values[:, :, :keep]
