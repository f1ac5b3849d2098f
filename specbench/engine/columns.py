"""Which KV-cache column holds what, for a batch of sequences that advance unevenly.

Every forward appends the same number of columns to every row (the widest row's
tokens; shorter rows pad). A row's committed context is the set of columns flagged in
`valid`: after a commit, row b's accepted path is moved to the columns right after the
committed region and rows that accepted fewer tokens than the longest leave masked
holes. Draft-tree nodes live in columns after the committed region until the next
commit. Positions are per row (its committed length + tree depth), so holes and
padding never shift a row's RoPE positions. Attention masks are built from this
bookkeeping alone; target LM and draft heads share it and keep their own tensors.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from specbench.engine.transfer import device_tensor, to_device
from specbench.engine.tree import DraftTree


@dataclass
class Feed:
    """One forward: tokens per row (context first, then tree nodes), right-padded."""

    start: int  # first new column
    width: int  # new columns (the widest row)
    contexts: list[int]  # new context tokens per row
    nodes: list[list[int]]  # tree nodes fed per row, after its context
    positions: torch.Tensor  # long [B, width]
    mask: torch.Tensor | None  # bool [B, width, start + width] (True = attend); None = plain causal
    position_bound: (
        int  # 1 + the largest position, known on the host: RoPE tables grow without reading `positions` back
    )

    def causal_mask(self) -> torch.Tensor:
        """Bool [width, start + width]: the plain causal mask `mask` None stands for."""
        return torch.ones(self.width, self.start + self.width, dtype=torch.bool, device=self.positions.device).tril(
            self.start
        )


class ColumnCache:
    def __init__(self, batch_size: int, device="cpu"):
        self.device = device
        self.batch_size = batch_size
        self.columns = 0  # columns in use, the same for every row
        self.context_end = 0  # no committed context at or after this column
        self.valid = torch.zeros(batch_size, 64, dtype=torch.bool)
        self.lengths = [0] * batch_size  # committed tokens per row
        self.node_columns: list[dict[int, int]] = [{} for _ in range(batch_size)]

    def feed(
        self, contexts: list[int], trees: list[DraftTree | None], nodes: list[list[int]], node_offset: int = 0
    ) -> Feed:
        """Lay out a forward of `contexts[b]` new context tokens then tree `nodes[b]` of
        `trees[b]` per row. A node's position is the row's committed length (after the new
        context) + its depth + `node_offset` (-1 where the root is committed context)."""
        for b, n_context in enumerate(contexts):
            if n_context and self.node_columns[b]:
                raise RuntimeError("context can only be added to a row before any of its tree nodes is cached")
        start = self.columns
        counts = [c + len(n) for c, n in zip(contexts, nodes)]
        width = max(counts)
        positions = torch.zeros(self.batch_size, width, dtype=torch.long)
        bound = 1
        for b, (n_context, row_nodes) in enumerate(zip(contexts, nodes)):
            base = self.lengths[b]
            positions[b, :n_context] = torch.arange(base, base + n_context)
            bound = max(bound, base + n_context)
            if row_nodes:
                depths = [trees[b].depths[n] for n in row_nodes]
                positions[b, n_context : n_context + len(row_nodes)] = (
                    base + n_context + node_offset + torch.tensor(depths)
                )
                bound = max(bound, base + n_context + node_offset + max(depths) + 1)
        mask = (
            None if self._causal_suffices(contexts, trees, nodes) else self._mask(start, width, contexts, trees, nodes)
        )
        return Feed(
            start, width, list(contexts), [list(n) for n in nodes], to_device(positions, self.device), mask, bound
        )

    def level_feed(
        self, attended: torch.Tensor, parents: torch.Tensor, depth: int, node_offset: int = 0
    ) -> tuple[Feed, torch.Tensor]:
        """A forward of one level of a tree grown on the device, laid out without reading it:
        node j of row b is a child of the node in slot `parents[b, j]` of the level fed
        before, whose tree columns (its ancestors' and its own) `attended[b]` [w_before,
        columns] marks. It attends to the committed context, those columns and its own, at
        position length + `depth` + `node_offset`, and is cached as node k + j, k the nodes
        the row has cached (the order fed). Returns the feed and the new level's `attended`."""
        batch, width = parents.shape
        start, device = self.columns, parents.device
        in_tree = torch.zeros(batch, width, start, dtype=torch.bool, device=device)
        in_tree[:, :, : attended.shape[2]] = attended.gather(1, parents[:, :, None].expand(-1, -1, attended.shape[2]))
        own = torch.eye(width, dtype=torch.bool, device=device).expand(batch, -1, -1)
        context = to_device(self.valid[:, None, :start], device)
        positions = device_tensor([[length + depth + node_offset] * width for length in self.lengths], device)
        first = [len(cached) for cached in self.node_columns]
        feed = Feed(
            start,
            width,
            [0] * batch,
            [list(range(k, k + width)) for k in first],
            positions,
            torch.cat([in_tree | context, own], dim=2),
            max(self.lengths) + depth + node_offset + 1,
        )
        return feed, torch.cat([in_tree, own], dim=2)

    def _causal_suffices(self, contexts, trees, nodes) -> bool:
        """One row, no holes, no cached tree nodes, and the fed nodes form the chain 0, 1, ..."""
        if self.batch_size != 1 or self.node_columns[0] or self.lengths[0] != self.context_end:
            return False
        row_nodes = nodes[0]
        return row_nodes == list(range(len(row_nodes))) and all(trees[0].parents[n] == n - 1 for n in row_nodes)

    def _mask(self, start: int, width: int, contexts, trees, nodes) -> torch.Tensor:
        mask = torch.zeros(self.batch_size, width, start + width, dtype=torch.bool)
        mask[:, :, :start] = self.valid[:, None, :start]
        for b, (n_context, row_nodes) in enumerate(zip(contexts, nodes)):
            new = start + n_context
            mask[b, :n_context, start:new] = torch.ones(n_context, n_context, dtype=torch.bool).tril()
            if row_nodes:
                rows = slice(n_context, n_context + len(row_nodes))
                ancestors = trees[b].ancestor_mask()[torch.tensor(row_nodes)]
                mask[b, rows, start:new] = True
                if self.node_columns[b]:
                    cached, columns = zip(*self.node_columns[b].items())
                    mask[b, rows, torch.tensor(columns)] = ancestors[:, torch.tensor(cached)]
                mask[b, rows, new : new + len(row_nodes)] = ancestors[:, torch.tensor(row_nodes)]
            for i in range(n_context + len(row_nodes), width):  # padding attends to itself only
                mask[b, i, start + i] = True
        return to_device(mask, self.device)

    def advance(self, feed: Feed) -> None:
        """Record what a forward of `feed` wrote: new context is committed, nodes cached."""
        end = feed.start + feed.width
        self._reserve(end)
        for b, (n_context, row_nodes) in enumerate(zip(feed.contexts, feed.nodes)):
            self.valid[b, feed.start : feed.start + n_context] = True
            self.lengths[b] += n_context
            for i, node in enumerate(row_nodes):
                self.node_columns[b][node] = feed.start + n_context + i
        if any(feed.contexts):
            self.context_end = feed.start + max(feed.contexts)
        self.columns = end

    def commit(self, paths: list[list[int]]) -> tuple[list[list[int]], int]:
        """Keep each row's cached prefix of its accepted path (root first) as context.
        Returns (source columns per row, destination start): the caller moves row b's
        columns sources[b] to dest .. dest + len(sources[b]) before anything else."""
        sources = []
        for b, path in enumerate(paths):
            columns = []
            for node in path:
                if node not in self.node_columns[b]:
                    break
                columns.append(self.node_columns[b][node])
            sources.append(columns)
        dest = self.context_end
        longest = max(map(len, sources), default=0)
        self._reserve(dest + longest)
        for b, columns in enumerate(sources):
            self.valid[b, dest : dest + longest] = False
            self.valid[b, dest : dest + len(columns)] = True
            self.lengths[b] += len(columns)
            self.node_columns[b] = {}
        self.context_end = self.columns = dest + longest
        return sources, dest

    def drop_tree(self) -> None:
        """Forget every cached tree node (nothing of the tree becomes context)."""
        self.node_columns = [{} for _ in range(self.batch_size)]
        self.columns = self.context_end

    def keep(self, rows: list[int]) -> None:
        self.valid = self.valid[torch.tensor(rows)]
        self.lengths = [self.lengths[r] for r in rows]
        self.node_columns = [self.node_columns[r] for r in rows]
        self.batch_size = len(rows)

    def _reserve(self, columns: int) -> None:
        if columns > self.valid.shape[1]:
            grown = torch.zeros(self.batch_size, max(columns, 2 * self.valid.shape[1]), dtype=torch.bool)
            grown[:, : self.valid.shape[1]] = self.valid
            self.valid = grown


def moves(sources: list[list[int]], dest: int) -> list[tuple[int, list[int], int]]:
    """(row, source columns, dest) for the rows whose path is not already in place."""
    return [(b, cols, dest) for b, cols in enumerate(sources) if cols and cols != list(range(dest, dest + len(cols)))]
