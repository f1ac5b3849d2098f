"""A causal LM over a batch whose KV cache holds each row's committed context followed
by its draft-tree nodes.

Target and draft models both use it: a forward feeds new context tokens and/or tree
nodes per row (tree attention mask, position = root position + depth), and `commit`
keeps only each row's accepted path, moved in place (see engine/columns.py).
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from transformers import DynamicCache

from specbench.engine.columns import ColumnCache, Feed, moves
from specbench.engine.kernels import Compiled
from specbench.engine.transfer import device_tensor, on_device, to_device
from specbench.engine.tree import DraftTree


class TreeLM:
    # the kernels its layers run on (LeanTreeLM's choice); drafters run theirs alike. The
    # model's own forward runs on the model's weights as they are
    compiled: Compiled = Compiled()

    def __init__(self, model: torch.nn.Module):
        self.model = model
        self.device = model.device
        self.lm_head = model.get_output_embeddings()
        # hidden_states indices a drafter reads (EAGLE-3); per row, their concatenation
        # for every token that row fed in the last forward is left in `features`
        self.feature_layers: tuple[int, ...] = ()
        self.reset()

    @property
    def kind(self) -> str:
        """Which forward implementation this is (costs differ between them: profiles are keyed by it)."""
        return type(self).__name__

    @property
    def vocab_size(self) -> int:
        return self.model.config.vocab_size

    @property
    def batch_size(self) -> int:
        return self.layout.batch_size

    def reset(self, batch_size: int = 1) -> None:
        """A fresh cache for `batch_size` rows; nothing of an earlier decode is left to read."""
        self.features: list[torch.Tensor] | None = None
        self.layout = ColumnCache(batch_size, self.device)
        self.cache = self._new_cache(batch_size)
        self.forwards = 0

    def _new_cache(self, batch_size: int):
        return DynamicCache(config=self.model.config)

    def release(self) -> None:
        """Free what this LM holds on the device (its cache, graphs made over it) now, before
        its model changes dtype or device: nothing built for the old model is used again."""
        self.reset()

    def reserve(self, rows: int) -> None:
        """Room for `rows` cache columns per row, where the cache is preallocated: a decode
        that fits never reallocates it (nor recaptures graphs made over it)."""

    def forward(
        self,
        contexts: Sequence[Sequence[int]] | None = None,
        trees: Sequence[DraftTree | None] | None = None,
        nodes: Sequence[Sequence[int]] | None = None,
    ) -> list[torch.Tensor | None]:
        """Feed, per row, new context tokens then tree `nodes` (ascending; each node's
        ancestors cached already or fed in this call). Returns per row the logits
        [len(nodes[b]), V], or [1, V] at the last context token when it fed no nodes,
        or None when it fed nothing."""
        rows = self.batch_size
        contexts = [list(c) for c in contexts] if contexts is not None else [[] for _ in range(rows)]
        nodes = [list(n) for n in nodes] if nodes is not None else [[] for _ in range(rows)]
        trees = list(trees) if trees is not None else [None] * rows
        feed = self.layout.feed([len(c) for c in contexts], trees, nodes)
        tokens = torch.zeros(rows, feed.width, dtype=torch.long)
        for b, (context, row_nodes) in enumerate(zip(contexts, nodes)):
            fed = context + [trees[b].tokens[n] for n in row_nodes]
            tokens[b, : len(fed)] = torch.tensor(fed, dtype=torch.long)
        normed, hidden = self._step(to_device(tokens, self.device), feed)
        counts = [len(c) + len(n) for c, n in zip(contexts, nodes)]
        if self.feature_layers:
            # on the model's first device: layers spread over GPUs leave each state on its own
            features = torch.cat([on_device(hidden[i], self.device) for i in self.feature_layers], dim=-1)
            self.features = [features[b, :count] for b, count in enumerate(counts)]
        wanted = [
            (b, range(len(c), len(c) + len(n)) if n else range(len(c) - 1, len(c)))
            for b, (c, n) in enumerate(zip(contexts, nodes))
            if c or n
        ]
        picked = torch.cat([normed[b, r.start : r.stop] for b, r in wanted]) if wanted else None
        logits = self.lm_head(picked).split([len(r) for _, r in wanted]) if wanted else ()
        out: list[torch.Tensor | None] = [None] * rows
        for (b, _), row_logits in zip(wanted, logits):
            out[b] = row_logits
        return out

    def forward_level(self, tokens: torch.Tensor, feed: Feed) -> torch.Tensor:
        """Logits [B, width, V] after each of `tokens` [B, width] (on the device), laid out by
        `feed` (ColumnCache.level_feed): a level of a tree grown on the device, whose tokens
        the host has not read. A drafter's forward: no features are kept."""
        normed, _ = self._step(tokens, feed)
        return self.lm_head(normed)

    def _step(self, tokens: torch.Tensor, feed: Feed):
        """_run, then the cache layout and the forward count follow what was fed."""
        out = self._run(tokens, feed)
        self.layout.advance(feed)
        self.forwards += 1
        return out

    def _run(self, tokens: torch.Tensor, feed: Feed):
        """(final-normed hidden [B, width, H], hidden_states per layer [B, width, H] when
        features are read, else None) for `tokens` [B, width] appended to the cache."""
        out = self.model.base_model(
            input_ids=tokens,
            position_ids=feed.positions,
            attention_mask=feed.mask[:, None] if feed.mask is not None else None,
            past_key_values=self.cache,
            use_cache=True,
            output_hidden_states=bool(self.feature_layers),
        )
        return out.last_hidden_state, out.hidden_states if self.feature_layers else None

    def commit(self, paths: Sequence[Sequence[int]]) -> None:
        """Keep each row's cached rows of its accepted path (root first) as context, drop
        the other tree rows. Only the cached prefix of a path is kept (a drafter may not
        have read the accepted leaf); `layout.lengths` counts what each row holds."""
        sources, dest = self.layout.commit([list(p) for p in paths])
        self._move(moves(sources, dest), self.layout.columns)

    def _move(self, row_moves: list[tuple[int, list[int], int]], columns: int) -> None:
        """Copy each (row, source columns, dest) block into place, then keep `columns` columns."""
        for layer in self.cache.layers:
            if not getattr(layer, "is_initialized", False):
                continue
            for b, cols, dest in row_moves:
                index = device_tensor(cols, self.device)
                layer.keys[b, :, dest : dest + len(cols)] = layer.keys[b, :, index]
                layer.values[b, :, dest : dest + len(cols)] = layer.values[b, :, index]
            layer.keys = layer.keys[:, :, :columns]
            layer.values = layer.values[:, :, :columns]

    def keep(self, rows: list[int]) -> None:
        """Only these rows (ascending indices into the current batch) go on decoding."""
        if rows == list(range(self.batch_size)):
            return
        self.layout.keep(rows)
        self._keep_batch(rows)

    def _keep_batch(self, rows: list[int]) -> None:
        index = device_tensor(rows, self.device)
        for layer in self.cache.layers:
            if getattr(layer, "is_initialized", False):
                layer.keys, layer.values = layer.keys[index], layer.values[index]
