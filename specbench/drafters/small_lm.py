"""A separate small LM that shares the target's tokenizer (SpS).

It keeps its own KV cache of committed context plus the draft nodes it has read, so
each expansion costs one draft forward over only the new nodes.
"""

from __future__ import annotations

import torch

from specbench.engine.lean import Compiled, compiled_for, make_lm
from specbench.engine.tree import DraftTree
from specbench.errors import ConfigError
from specbench.models import registry


def check(model: dict | None) -> None:
    """What load() refuses before any model loads (methods.check)."""
    if not model:
        raise ConfigError(
            "method.drafter.model: this target has no default SpS draft; "
            "set method.drafter.model={name:my-draft,path:/dir/of/a/draft/LM} (it must share the target's tokenizer)"
        )
    if model.get("path"):
        registry.resolve(model, "method.drafter.model")


def load(target: torch.nn.Module, hardware: dict, model: dict | None) -> "SmallLMDrafter":
    """The drafter named by a method config: `model` is a model entry (see registry)."""
    check(model)
    draft = registry.load_model(model, hardware["dtype"], hardware["device"], key="method.drafter.model")
    return SmallLMDrafter(draft, target.config.vocab_size, hardware.get("forward", "auto"), compiled_for(hardware))


class SmallLMDrafter:
    feature_layers = ()

    def __init__(self, model: torch.nn.Module, target_vocab_size: int, forward: str = "hf", compiled: Compiled = Compiled()):
        """`compiled`: the target's choice (packed weights, fp32 attention), run the same way."""
        self.lm = make_lm(model, forward, compiled)
        self.target_vocab_size = target_vocab_size
        self._node_logits: dict[int, torch.Tensor] = {}

    @property
    def forwards(self) -> int:
        return self.lm.forwards

    def begin(self, prompts: list[list[int]], features=None) -> None:
        self.lm.reset(len(prompts))
        self._node_logits = [{} for _ in prompts]

    def logits(self, contexts: list[list[int]], trees: list[DraftTree], nodes: list[list[int]]) -> list[torch.Tensor | None]:
        """Rows read the context they have not seen (first step after a commit) and the
        asked nodes' uncached ancestors, all rows in one forward."""
        needed = [
            sorted({a for n in row_nodes for a in tree.path_to(n)} - known.keys())
            for tree, row_nodes, known in zip(trees, nodes, self._node_logits)
        ]
        if any(needed):
            tails = [
                context[self.lm.layout.lengths[b] :] if row_needed and not self.lm.layout.node_columns[b] else []
                for b, (context, row_needed) in enumerate(zip(contexts, needed))
            ]
            rows = self.lm.forward(tails, trees, needed)
            for known, row_needed, row_logits in zip(self._node_logits, needed, rows):
                if row_needed:
                    known.update(zip(row_needed, self._in_target_vocab(row_logits)))
        return [torch.stack([known[n] for n in row_nodes]) if row_nodes else None for known, row_nodes in zip(self._node_logits, nodes)]

    def commit(self, trees: list[DraftTree], paths: list[list[int]], features=None) -> None:
        self.lm.commit([tree.drafted_ids(path) for tree, path in zip(trees, paths)])
        self._node_logits = [{} for _ in trees]

    def keep(self, rows: list[int]) -> None:
        self.lm.keep(rows)

    def _in_target_vocab(self, logits: torch.Tensor) -> torch.Tensor:
        """Drafts may pad their vocabulary differently from the target: align the ids."""
        extra = self.target_vocab_size - logits.shape[-1]
        if extra <= 0:
            return logits[:, : self.target_vocab_size]
        return torch.nn.functional.pad(logits, (0, extra), value=float("-inf"))
