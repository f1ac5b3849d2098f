"""EAGLE-3 drafter: the head reads target features of committed tokens and its own
hidden states inside the draft tree.

Draft row t pairs the target feature at position t with the token at t+1 and predicts
the token at t+2. After each verification the head gets the target features of the
accepted path (from the same target forward that verified it: no extra target pass);
its tree rows are dropped and the accepted tokens are re-read with those features.
"""

from __future__ import annotations

import torch

from specbench.engine.tree import DraftTree
from specbench.errors import ConfigError
from specbench.models import registry
from specbench.models.eagle3 import Eagle3Head, feature_layers, load_head


def build(target: torch.nn.Module, hardware: dict, head: dict | None) -> "Eagle3Drafter":
    """The drafter named by a method config: `head` is a model entry (see registry)."""
    if not head:
        raise ConfigError(
            "method.drafter.head: this target has no EAGLE-3 head configured; "
            "set method.drafter.head={name:my-head,path:/dir/with/config.json} (or {name:my-head,id:<hub id>})"
        )
    directory = registry.resolve(head, key="method.drafter.head")
    dtype = registry.DTYPES[hardware["dtype"]]
    return Eagle3Drafter(load_head(directory, dtype, target.device, key="method.drafter.head"), target)


class Eagle3Drafter:
    def __init__(self, head: Eagle3Head, target: torch.nn.Module):
        self.head = head
        self.embed = target.get_input_embeddings()
        self.vocab_size = target.config.vocab_size
        self.feature_layers = feature_layers(target.config.num_hidden_layers)
        self.target_ids = head.target_ids()
        self.forwards = 0

    def begin(self, prompt: list[int], features: torch.Tensor) -> None:
        self.past = None  # (keys, values) of committed rows
        self.committed_positions = 0
        self._pending = (features, prompt[1:])  # features of t, tokens of t+1 (the root completes them)
        self._rows: dict[int, tuple[torch.Tensor, torch.Tensor, int]] = {}  # node -> (hidden, logits, position)
        self._tree_past = None

    def logits(self, context: list[int], tree: DraftTree, nodes: list[int]) -> torch.Tensor:
        missing = sorted({a for n in nodes for a in tree.path_to(n)} - self._rows.keys())
        if 0 in missing:
            self._read_pending(tree.tokens[0])
            missing.remove(0)
        if missing:
            self._read_nodes(tree, missing)
        return torch.stack([self._to_target_vocab(self._rows[n][1]) for n in nodes])

    def commit(self, tree: DraftTree, path: list[int], features: torch.Tensor) -> None:
        """Forget the tree; queue the accepted tokens with their target features."""
        self._pending = (features, [tree.tokens[n] for n in path[1:]])
        self._rows = {}
        self._tree_past = None

    def _read_pending(self, root_token: int) -> None:
        """Committed tokens with target features, ending with the root (one forward)."""
        features, tokens = self._pending
        tokens = tokens + [root_token]
        n = len(tokens)
        positions = torch.arange(self.committed_positions, self.committed_positions + n, device=features.device)
        past_len = self.committed_positions
        mask = torch.ones(n, past_len + n, dtype=torch.bool, device=features.device)
        mask[:, past_len:] = torch.ones(n, n, dtype=torch.bool, device=features.device).tril()
        projected = self.head.fc(features.to(self.head.fc.weight.dtype))
        hidden, logits, self.past = self.head(self._embed(tokens), projected, positions, self.past, mask)
        self.forwards += 1
        self.committed_positions += n
        self._rows[0] = (hidden[-1], logits[-1], self.committed_positions - 1)
        self._tree_past, self._tree_nodes = self.past, []

    def _read_nodes(self, tree: DraftTree, nodes: list[int]) -> None:
        """Tree nodes: feature = the parent row's own hidden state, tree attention mask."""
        features = torch.stack([self._rows[tree.parents[n]][0] for n in nodes])
        positions = torch.tensor([self._rows[0][2] + tree.depths[n] for n in nodes], device=features.device)
        # the root's row is the last committed row, not a tree column
        mask = tree.node_rows_mask(nodes, self._tree_nodes, self.committed_positions)
        hidden, logits, self._tree_past = self.head(
            self._embed([tree.tokens[n] for n in nodes]), features, positions, self._tree_past, mask.to(features.device)
        )
        self.forwards += 1
        self._tree_nodes = self._tree_nodes + nodes
        for i, n in enumerate(nodes):
            self._rows[n] = (hidden[i], logits[i], int(positions[i]))

    def _embed(self, tokens: list[int]) -> torch.Tensor:
        weight = self.embed.weight
        return self.embed(torch.tensor(tokens, device=weight.device)).to(self.head.fc.weight.dtype)

    def _to_target_vocab(self, draft_logits: torch.Tensor) -> torch.Tensor:
        out = torch.full((self.vocab_size,), float("-inf"), dtype=draft_logits.dtype, device=draft_logits.device)
        out[self.target_ids] = draft_logits
        return out
