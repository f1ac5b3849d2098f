"""A drafter that knows the answer: it drafts the target's own greedy continuation.

With random weights every learned drafter has τ ≈ 1, so a check on them never accepts a
drafted node, and the code that only runs on acceptance (commit moves in both caches, the
masks over cached nodes, the holes rows of a batch leave when they accept different
lengths) never runs. Given each prompt's reference continuation (our AR's greedy ids), this
drafter's top-1 after every node is the reference token at that node's position, so under
greedy verification a tree accepts its whole top-1 chain: τ = the tree's levels + 1. With
`stagger` > 0, row b drafts correctly for only (step + b) % (stagger + 1) levels of step
`step` and wrongly after, so the rows of a batch accept different lengths at every step.
Either way the output must be AR's ids: what the identity checks (device check, tests) hold
it to. Both growth paths are served: host levels (`logits`) and device levels.
"""

from __future__ import annotations

import torch

from specbench.engine.parts import Drafter
from specbench.engine.transfer import device_tensor
from specbench.engine.tree import DraftTree
from specbench.errors import ConfigError

TOP = 10.0  # the drafted token's logit; every other token's lies in (-1, 0]


class OracleDrafter(Drafter):
    grows_on_device = True

    def __init__(self, vocab_size: int, references: dict[tuple[int, ...], list[int]], device, stagger: int = 0):
        """`references`: per prompt (its ids), the ids that follow it (AR's continuation)."""
        self.vocab_size, self.references, self.device, self.stagger = (
            vocab_size,
            references,
            torch.device(device),
            stagger,
        )
        # every token's runner-up logit, distinct, so the top-k of a node is fixed
        self.base = -torch.arange(vocab_size, dtype=torch.float32, device=self.device) / vocab_size
        self.forwards = 0

    def begin(self, prompts: list[list[int]], features) -> None:
        missing = [i for i, p in enumerate(prompts) if tuple(p) not in self.references]
        if missing:
            raise ConfigError(f"OracleDrafter: prompt {missing[0]} has no reference continuation")
        self.sequences = [list(p) + list(self.references[tuple(p)]) for p in prompts]
        longest = max(map(len, self.sequences)) + 2
        self.table = device_tensor([s + [0] * (longest - len(s)) for s in self.sequences], self.device)
        self.steps = [0] * len(prompts)
        self.rows = list(range(len(prompts)))

    def correct_levels(self, row: int) -> int:
        """How many levels row `row` drafts correctly at its current step (unbounded without stagger)."""
        if not self.stagger:
            return 1 << 30
        return (self.steps[row] + self.rows[row]) % (self.stagger + 1)

    def _next_token(self, row: int, position: int, depth: int) -> int:
        """The token drafted after the node at `position` (depth `depth` below the root)."""
        sequence = self.sequences[row]
        token = sequence[position + 1] if position + 1 < len(sequence) else 0
        return token if depth < self.correct_levels(row) else (token + 1) % self.vocab_size

    def logits(
        self, contexts: list[list[int]], trees: list[DraftTree], nodes: list[list[int]]
    ) -> list[torch.Tensor | None]:
        self.forwards += 1
        out = []
        for b, (context, tree, row_nodes) in enumerate(zip(contexts, trees, nodes)):
            if not row_nodes:
                out.append(None)
                continue
            tokens = [self._next_token(b, len(context) + tree.depths[n], tree.depths[n]) for n in row_nodes]
            logits = self.base.expand(len(row_nodes), -1).clone()
            logits[torch.arange(len(row_nodes), device=self.device), device_tensor(tokens, self.device)] = TOP
            out.append(logits)
        return out

    def root_logits(self, contexts: list[list[int]], roots: list[int]) -> torch.Tensor:
        """Depth 0; the levels after it read the reference from the device table."""
        self.forwards += 1
        self._depth = 0
        self._positions = device_tensor([len(c) for c in contexts], self.device)
        self._correct = device_tensor([self.correct_levels(b) for b in range(len(roots))], self.device)
        return self._level(1)[:, 0]

    def level_logits(self, tokens: torch.Tensor, parents: torch.Tensor) -> torch.Tensor:
        self.forwards += 1
        self._depth += 1
        return self._level(tokens.shape[1])

    def _level(self, width: int) -> torch.Tensor:
        """[B, width, V]: every node of the current level drafts its row's reference token at
        that depth (only the top-1 chain's nodes sit where the reference does)."""
        index = (self._positions + self._depth + 1).clamp_max(self.table.shape[1] - 1)
        token = self.table.gather(1, index[:, None])[:, 0]
        token = torch.where(self._correct > self._depth, token, (token + 1) % self.vocab_size)
        logits = self.base.expand(len(token), width, -1).clone()
        logits.scatter_(2, token[:, None, None].expand(-1, width, 1), TOP)
        return logits

    def commit(self, trees, paths, features) -> None:
        self.steps = [s + 1 for s in self.steps]

    def keep(self, rows: list[int]) -> None:
        self.sequences = [self.sequences[r] for r in rows]
        self.table = self.table[device_tensor(rows, self.device)]
        self.steps = [self.steps[r] for r in rows]
        self.rows = [self.rows[r] for r in rows]
