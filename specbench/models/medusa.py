"""Medusa heads, loading the published checkpoints unchanged.

Architecture (Medusa paper and its released `medusa_lm_head.pt`): head i is a stack of
residual blocks x + SiLU(linear(x)) followed by a bias-free projection to the
vocabulary, applied to the target's final (normed) hidden state at position t; the
target's own lm_head predicts t+1 and head i predicts t+2+i. Keys: `{i}.{l}.linear.weight`
/ `.bias` for block l and `{i}.{L}.weight` for the projection. Checkpoints may hold
more heads than their config.json says (the 7B release ships 5 with
`medusa_num_heads: 2`); the file is what runs, and the loader reports both counts.

Heads trained by specbench for small targets leave the projection out (`shared_lm_head:
true` in config.json): every head reuses the target's lm_head, which keeps a 49k-vocab
head file small; the target's weight is then used as is.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import torch
import torch.nn.functional as F
from safetensors.torch import load_file
from torch import nn

from specbench.errors import ConfigError

WEIGHT_FILES = ("medusa_lm_head.safetensors", "medusa_lm_head.pt")


class ResBlock(nn.Module):
    def __init__(self, hidden: int):
        super().__init__()
        self.linear = nn.Linear(hidden, hidden)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + F.silu(self.linear(x))


class MedusaHeads(nn.ModuleList):
    """`heads` heads of `layers` residual blocks (a ModuleList, so its state dict has the
    released key names); the projection is the target's lm_head weight when `shared` is
    given, else a parameter of each head."""

    def __init__(self, hidden: int, vocab: int, heads: int, layers: int, shared: torch.Tensor | None = None):
        super().__init__(
            nn.Sequential(*[ResBlock(hidden) for _ in range(layers)], *([] if shared is not None else [nn.Linear(hidden, vocab, bias=False)]))
            for _ in range(heads)
        )
        self.shared = shared

    def forward(self, hidden: torch.Tensor) -> torch.Tensor:
        """hidden [..., H] -> logits [..., heads, V]."""
        outputs = [head(hidden) for head in self]
        if self.shared is not None:
            outputs = [F.linear(o, self.shared) for o in outputs]
        return torch.stack(outputs, dim=-2)


def read_state(path: Path, key: str) -> dict[str, torch.Tensor]:
    for name in WEIGHT_FILES:
        file = path / name
        if file.is_file():
            if file.suffix == ".safetensors":
                return load_file(file)
            return torch.load(file, map_location="cpu", weights_only=True)
    raise ConfigError(f"{key}: {path} has none of {', '.join(WEIGHT_FILES)}")


def load_heads(directory: str, target: nn.Module, dtype: torch.dtype, key: str) -> tuple[MedusaHeads, dict]:
    """(heads, facts about the checkpoint). Strict: any missing or unexpected key, or a
    shape that does not fit the target, fails with one line listing them."""
    path = Path(directory)
    config_file = path / "config.json"
    if not config_file.is_file():
        raise ConfigError(f"{key}: {path} has no config.json")
    config = json.loads(config_file.read_text())
    state = read_state(path, key)
    pattern = re.compile(r"^(\d+)\.(\d+)\.")
    unexpected = sorted(k for k in state if not pattern.match(k))
    if unexpected:
        raise ConfigError(f"{key}: {path} is not a Medusa checkpoint: unexpected keys {unexpected[:8]}")
    heads = 1 + max(int(pattern.match(k).group(1)) for k in state)
    shared = bool(config.get("shared_lm_head", False))
    blocks = 1 + max(int(pattern.match(k).group(2)) for k in state) - (0 if shared else 1)
    hidden, vocab = target.config.hidden_size, target.config.vocab_size
    output = target.get_output_embeddings().weight
    model = MedusaHeads(hidden, vocab, heads, blocks, shared=output.detach() if shared else None)
    expected = set(model.state_dict())
    missing, unexpected = sorted(expected - set(state)), sorted(set(state) - expected)
    if missing or unexpected:
        raise ConfigError(f"{key}: {path} is not a Medusa checkpoint of {heads} heads x {blocks} blocks: missing keys {missing[:8]}, unexpected keys {unexpected[:8]}")
    wrong = [k for k, v in model.state_dict().items() if state[k].shape != v.shape]
    if wrong:
        raise ConfigError(f"{key}: {path} does not fit this target (hidden {hidden}, vocab {vocab}): shapes differ for {wrong[:4]}")
    model.load_state_dict(state)
    facts = {"heads_in_file": heads, "heads_in_config": config.get("medusa_num_heads"), "blocks": blocks, "shared_lm_head": shared}
    return model.to(device=output.device, dtype=dtype).eval(), facts
