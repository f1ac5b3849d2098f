"""A separate small LM that shares the target's tokenizer (SpS).

It keeps its own KV cache of committed context plus the draft nodes it has read, so
each expansion costs one draft forward over only the new nodes.
"""

from __future__ import annotations

import torch

from specbench.engine.lean import make_lm
from specbench.engine.tree import DraftTree
from specbench.errors import ConfigError
from specbench.models import registry


def build(target: torch.nn.Module, hardware: dict, model: dict | None) -> "SmallLMDrafter":
    """The drafter named by a method config: `model` is a model entry (see registry)."""
    if not model:
        raise ConfigError(
            "method.drafter.model: this target has no default SpS draft; "
            "set method.drafter.model={name:my-draft,path:/dir/of/a/draft/LM} (it must share the target's tokenizer)"
        )
    draft = registry.load_model(model, hardware["dtype"], hardware["device"], key="method.drafter.model")
    return SmallLMDrafter(draft, target.config.vocab_size, hardware.get("forward", "auto"))


class SmallLMDrafter:
    feature_layers = ()

    def __init__(self, model: torch.nn.Module, target_vocab_size: int, forward: str = "hf"):
        self.lm = make_lm(model, forward)
        self.target_vocab_size = target_vocab_size
        self._node_logits: dict[int, torch.Tensor] = {}

    @property
    def forwards(self) -> int:
        return self.lm.forwards

    def begin(self, prompt: list[int], features=None) -> None:
        self.lm.reset()
        self._node_logits = {}

    def logits(self, context: list[int], tree: DraftTree, nodes: list[int]) -> torch.Tensor:
        needed = sorted({a for n in nodes for a in tree.path_to(n)} - self._node_logits.keys())
        if needed:
            tail = [] if self.lm.cached_nodes else context[self.lm.committed :]
            rows = self._in_target_vocab(self.lm.forward(tail, tree, needed))
            self._node_logits.update(zip(needed, rows))
        return torch.stack([self._node_logits[n] for n in nodes])

    def commit(self, tree: DraftTree, path: list[int], features=None) -> None:
        self.lm.commit(tree.drafted_ids(path))
        self._node_logits = {}

    def _in_target_vocab(self, logits: torch.Tensor) -> torch.Tensor:
        """Drafts may pad their vocabulary differently from the target: align the ids."""
        extra = self.target_vocab_size - logits.shape[-1]
        if extra <= 0:
            return logits[:, : self.target_vocab_size]
        return torch.nn.functional.pad(logits, (0, extra), value=float("-inf"))
