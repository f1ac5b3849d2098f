"""EAGLE drafters (EAGLE-1/2 and EAGLE-3 heads): the head reads target features of
committed tokens and its own hidden states inside the draft tree.

Draft row t pairs the target feature at position t with the token at t+1 and predicts
the token at t+2. After each verification the head gets the target features of the
accepted path (from the same target forward that verified it: no extra target pass);
its tree rows are dropped and the accepted tokens are re-read with those features.
"""

from __future__ import annotations

import torch

from specbench.engine.columns import ColumnCache
from specbench.engine.kernels import Compiled, pack_linears
from specbench.engine.parts import Drafter, DrafterLoader
from specbench.engine.transfer import device_tensor, on_device, to_device
from specbench.engine.tree import DraftTree
from specbench.errors import ConfigError
from specbench.models import eagle, registry
from specbench.models.medusa import scattered

WEIGHTS = ("method.drafter.head", "EAGLE-1 head")  # the key naming its weights, and what they are


def check(head: dict | None) -> None:
    """What build() refuses before any model loads (methods.check)."""
    registry.check_part(head, *WEIGHTS)


def build(target: torch.nn.Module, hardware: dict, compiled: Compiled, head: dict | None) -> "EagleDrafter":
    """The EAGLE-1 drafter named by a method config: `head` is a model entry (see registry)."""
    directory = registry.resolve_part(head, *WEIGHTS)
    weight = target.get_output_embeddings().weight
    loaded = eagle.load_head(
        directory, weight, registry.DTYPES[hardware["dtype"]], target.device, key="method.drafter.head"
    )
    return EagleDrafter(pack_linears(loaded, compiled), target, eagle.feature_layers(target.config.num_hidden_layers))


load = DrafterLoader(build, check)


class EagleDrafter(Drafter):
    always_proposes = True

    def __init__(self, head: torch.nn.Module, target: torch.nn.Module, feature_layers: tuple[int, ...]):
        """`head`: an EAGLE-1 or EAGLE-3 head (project / forward / target_ids / embed_tokens);
        `feature_layers`: the target hidden_states it reads."""
        self.head = head
        self.vocab_size = target.config.vocab_size
        self.embed = target.get_input_embeddings() if head.embed_tokens is None else head.embed_tokens
        if self.embed.weight.shape[0] != self.vocab_size:
            raise ConfigError(
                f"method.drafter.head: its embed_tokens has {self.embed.weight.shape[0]} rows; the target's "
                f"vocabulary has {self.vocab_size}"
            )
        self.feature_layers = feature_layers
        self.target_ids = head.target_ids()  # None: the head scores the target's vocabulary
        self.forwards = 0

    def begin(self, prompts: list[list[int]], features: list[torch.Tensor]) -> None:
        self.layout = ColumnCache(len(prompts), self.head.fc.weight.device)
        self.past = None  # (keys, values) [B, kv, columns, d]
        # per row: features of t and tokens of t+1, waiting to be read (the root completes
        # them); None once read
        self._pending = [(f, p[1:]) for f, p in zip(features, prompts)]
        # node -> (hidden, logits)
        self._rows: list[dict[int, tuple[torch.Tensor, torch.Tensor]]] = [{} for _ in prompts]

    def logits(
        self, contexts: list[list[int]], trees: list[DraftTree], nodes: list[list[int]]
    ) -> list[torch.Tensor | None]:
        missing = [
            sorted({a for n in row_nodes for a in tree.path_to(n)} - known.keys())
            for tree, row_nodes, known in zip(trees, nodes, self._rows)
        ]
        if any(0 in m for m in missing):
            self._read_pending([t.tokens[0] if 0 in m else None for t, m in zip(trees, missing)])
        tree_nodes = [[n for n in m if n != 0] for m in missing]
        if any(tree_nodes):
            self._read_nodes(trees, tree_nodes)
        return [
            self._to_target_vocab(torch.stack([known[n][1] for n in row_nodes])) if row_nodes else None
            for known, row_nodes in zip(self._rows, nodes)
        ]

    grows_on_device = True

    def root_logits(self, contexts: list[list[int]], roots: list[int]) -> torch.Tensor:
        self._read_pending(roots)
        hidden, logits = (torch.stack(part) for part in zip(*(known[0] for known in self._rows)))
        # the level just fed: its hidden states, and per node the tree columns it attends to
        # (the root's row is committed context: none)
        self._level = (hidden[:, None], torch.zeros(len(roots), 1, 0, dtype=torch.bool, device=hidden.device))
        self._depth = 0
        return self._to_target_vocab(logits)

    def level_logits(self, tokens: torch.Tensor, parents: torch.Tensor) -> torch.Tensor:
        """Each new node's feature is its parent's hidden state; it attends to the committed
        context, its parent's tree columns and its own column: all gathered on the device."""
        hidden, attended = self._level
        batch, width = tokens.shape
        self._depth += 1
        feed, attended = self.layout.level_feed(attended, parents, self._depth, node_offset=-1)
        features = hidden.gather(1, parents[:, :, None].expand(-1, -1, hidden.shape[-1]))
        new_hidden, logits = self._forward(tokens, features, feed)
        self._level = (new_hidden, attended)
        return self._to_target_vocab(logits.reshape(batch * width, -1)).reshape(batch, width, -1)

    def commit(self, trees: list[DraftTree], paths: list[list[int]], features: list[torch.Tensor]) -> None:
        """Forget the trees; queue each row's accepted tokens with their target features. A
        row whose root was never read (the policy drafted nothing this step) keeps its queue
        and adds the root to it: the next read catches up in one forward."""
        self._pending = [
            (f, [t.tokens[n] for n in p[1:]])
            if unread is None
            else (torch.cat([unread[0], f]), unread[1] + [t.tokens[n] for n in p])
            for t, p, f, unread in zip(trees, paths, features, self._pending)
        ]
        self._rows = [{} for _ in trees]
        self.layout.drop_tree()
        self._truncate()

    def keep(self, rows: list[int]) -> None:
        self.layout.keep(rows)
        if self.past is not None:  # None: a row stopped before the head's first forward
            index = device_tensor(rows, self.past[0].device)
            self.past = (self.past[0][index], self.past[1][index])
        self._pending = [self._pending[r] for r in rows]
        self._rows = [self._rows[r] for r in rows]

    def _read_pending(self, roots: list[int | None]) -> None:
        """Committed tokens with target features, ending with the root (one forward over
        the rows whose root is asked for)."""
        rows = [self._pending[b] if root is not None else None for b, root in enumerate(roots)]
        counts = [len(r[1]) + 1 if r else 0 for r in rows]
        feed = self.layout.feed(counts, [None] * len(rows), [[] for _ in rows])
        # features may come from another GPU (multi-GPU targets end on the last)
        dtype, device = (self.head.fc.weight.dtype, self.head.fc.weight.device)
        tokens = torch.zeros(len(rows), feed.width, dtype=torch.long)
        features = None
        for b, row in enumerate(rows):
            if row is None:
                continue
            row_features, row_tokens = row
            tokens[b, : counts[b]] = torch.tensor(row_tokens + [roots[b]])
            if features is None:
                features = torch.zeros(len(rows), feed.width, row_features.shape[-1], dtype=dtype, device=device)
            features[b, : counts[b]] = on_device(row_features, device).to(dtype)
        hidden, logits = self._forward(tokens, self.head.project(features), feed)
        for b, count in enumerate(counts):
            if count:
                self._rows[b][0] = (hidden[b, count - 1], logits[b, count - 1])
                self._pending[b] = None

    def _read_nodes(self, trees: list[DraftTree], nodes: list[list[int]]) -> None:
        """Tree nodes: feature = the parent row's own hidden state, tree attention mask;
        the root's row is the last committed row, not a tree column."""
        feed = self.layout.feed([0] * len(trees), trees, nodes, node_offset=-1)
        tokens = torch.zeros(len(trees), feed.width, dtype=torch.long)
        features = torch.zeros(
            len(trees),
            feed.width,
            self.head.config.hidden_size,
            dtype=self.head.fc.weight.dtype,
            device=self.head.fc.weight.device,
        )
        for b, (tree, row_nodes) in enumerate(zip(trees, nodes)):
            if row_nodes:
                tokens[b, : len(row_nodes)] = torch.tensor([tree.tokens[n] for n in row_nodes])
                features[b, : len(row_nodes)] = torch.stack([self._rows[b][tree.parents[n]][0] for n in row_nodes])
        hidden, logits = self._forward(tokens, features, feed)
        for b, row_nodes in enumerate(nodes):
            for i, n in enumerate(row_nodes):
                self._rows[b][n] = (hidden[b, i], logits[b, i])

    def _forward(self, tokens: torch.Tensor, features: torch.Tensor, feed):
        embeds = on_device(self.embed(to_device(tokens, self.embed.weight.device)), self.head.fc.weight.device).to(
            self.head.fc.weight.dtype
        )
        mask = feed.mask if feed.mask is not None else feed.causal_mask()
        hidden, logits, self.past = self.head(
            embeds, features, feed.positions, self.past, mask, position_bound=feed.position_bound
        )
        self.layout.advance(feed)
        self.forwards += 1
        return hidden, logits

    def _truncate(self) -> None:
        columns = self.layout.columns
        if self.past is not None and self.past[0].shape[2] > columns:
            self.past = (self.past[0][:, :, :columns], self.past[1][:, :, :columns])

    def _to_target_vocab(self, draft_logits: torch.Tensor) -> torch.Tensor:
        """[nodes, draft vocab] -> [nodes, target vocab], -inf outside the draft vocabulary."""
        if self.target_ids is None:
            return draft_logits
        return scattered(draft_logits, self.target_ids, self.vocab_size)
