"""Draft trees as flat arrays.

Node 0 is the root: the last committed token, which the target has not seen yet.
Every other node is a draft token. Parents always precede their children, so masks,
positions and paths can be derived in one pass from `parents` alone.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch


@dataclass
class DraftTree:
    tokens: list[int]
    parents: list[int] = field(default_factory=lambda: [-1])
    depths: list[int] = field(default_factory=lambda: [0])
    logps: list[float] = field(default_factory=lambda: [0.0])
    # parent node -> draft distribution (over the target vocabulary, after temperature,
    # top-k and top-p) that its children were drawn from, in order and without
    # replacement. Absent: the children were chosen deterministically.
    child_dists: dict[int, torch.Tensor] = field(default_factory=dict)
    # for a pruned tree: each node's index in the tree the drafter expanded
    origin: list[int] | None = None
    # a static tree's ancestor mask, computed once for its shape (trees/static.py)
    ancestors: torch.Tensor | None = None

    @classmethod
    def root(cls, token: int) -> "DraftTree":
        return cls(tokens=[token])

    def __len__(self) -> int:
        return len(self.tokens)

    def add(self, parent: int, token: int, logp: float = 0.0) -> int:
        """Append a child of `parent`; logp is the draft log-prob of this token alone."""
        if not 0 <= parent < len(self.tokens):
            raise IndexError(f"parent {parent} is not a node of this tree")
        self.ancestors = None  # the shape changed
        self.tokens.append(token)
        self.parents.append(parent)
        self.depths.append(self.depths[parent] + 1)
        self.logps.append(self.logps[parent] + logp)
        return len(self.tokens) - 1

    def children(self, node: int) -> list[int]:
        return [i for i, p in enumerate(self.parents) if p == node]

    def child_lists(self) -> list[list[int]]:
        """Every node's children, in order (one pass, for walks that visit many nodes)."""
        out: list[list[int]] = [[] for _ in self.tokens]
        for node, parent in enumerate(self.parents[1:], start=1):
            out[parent].append(node)
        return out

    def path_to(self, node: int) -> list[int]:
        """Node indices from the root down to `node`, both included."""
        path = []
        while node != -1:
            path.append(node)
            node = self.parents[node]
        return path[::-1]

    def drafted_ids(self, nodes: list[int]) -> list[int]:
        """Node indices in the tree the drafter expanded (differs after pruning)."""
        return nodes if self.origin is None else [self.origin[n] for n in nodes]

    def subtree(self, keep: list[int]) -> "DraftTree":
        """The root, the `keep` nodes and their ancestors, re-indexed in the same order."""
        kept = {0}
        for node in keep:
            kept.update(self.path_to(node))
        order = sorted(kept)
        index = {old: new for new, old in enumerate(order)}
        tree = DraftTree(
            tokens=[self.tokens[n] for n in order],
            parents=[index.get(self.parents[n], -1) for n in order],
            depths=[self.depths[n] for n in order],
            logps=[self.logps[n] for n in order],
            child_dists={index[p]: q for p, q in self.child_dists.items() if p in index},
            origin=self.drafted_ids(order),
        )
        return tree

    def ancestor_mask(self) -> torch.Tensor:
        """Bool [n, n]: row i is True at i and at every ancestor of i."""
        if self.ancestors is not None:
            return self.ancestors
        n = len(self.tokens)
        mask = torch.zeros(n, n, dtype=torch.bool)
        for i, p in enumerate(self.parents):
            if p >= 0:
                mask[i] = mask[p]
            mask[i, i] = True
        return mask


TopTokens = tuple[list[list[float]], list[list[int]]]  # per node asked: top log-probs, best first, and their tokens


def top_tokens(rows: list[torch.Tensor | None], k: int) -> list[TopTokens | None]:
    """Per row of draft logits ([nodes, V], None: nothing proposed), each node's `k` most
    likely tokens and their log-probs, read back in one transfer for the whole batch (tree
    policies grow every row from these lists on the host)."""
    present = [z for z in rows if z is not None]
    if not present:
        return [None] * len(rows)
    logp = torch.log_softmax(torch.cat(present).float(), dim=-1)
    top = logp.topk(min(k, logp.shape[-1]), dim=-1)
    values, tokens = torch.stack([top.values.double(), top.indices.double()]).tolist()
    out, start = [], 0
    for z in rows:
        if z is None:
            out.append(None)
            continue
        end = start + z.shape[0]
        out.append((values[start:end], [[int(t) for t in row] for row in tokens[start:end]]))
        start = end
    return out
