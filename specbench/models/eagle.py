"""The EAGLE-1 draft head (used by EAGLE-1 and EAGLE-2), loading the published checkpoints
unchanged.

Architecture (EAGLE paper and its checkpoints, e.g. yuhuili/EAGLE-Vicuna-7B-v1.3): the
target's last hidden state (after its final norm: the input of its lm_head) is the
feature. `fc` (2H -> H, with a bias unless config.json says `"bias": false`) maps [token embedding, feature] to H; one
decoder layer
(`layers.0`) without an input norm, its input is the residual; no final norm: the layer's
output is the predicted next feature and the target's own lm_head turns it into logits.
Inside the tree a node's feature is its parent's predicted feature. Embeddings come from
the target unless the checkpoint ships `embed_tokens.weight` (as for EAGLE-3).
"""

from __future__ import annotations

from pathlib import Path

import torch
from torch import nn
from transformers import LlamaConfig
from transformers.models.llama.modeling_llama import LlamaMLP, LlamaRMSNorm, LlamaRotaryEmbedding

from specbench.engine.lean import RopeTable
from specbench.errors import ConfigError
from specbench.models.eagle3 import HeadAttention, head_config, load_checked, placed, read_config, read_weights


def feature_layers(num_layers: int) -> tuple[int]:
    """hidden_states index of the final-normed last hidden state."""
    return (num_layers,)


class Eagle1Layer(nn.Module):
    """Decoder layer 0 of the head: attention reads fc's output un-normed."""

    def __init__(self, config: LlamaConfig):
        super().__init__()
        self.self_attn = HeadAttention(config, config.hidden_size)
        self.mlp = LlamaMLP(config)
        self.post_attention_layernorm = LlamaRMSNorm(config.hidden_size, eps=config.rms_norm_eps)

    def forward(self, x, cos, sin, past, mask):
        attended, present = self.self_attn(x, cos, sin, past, mask)
        hidden = x + attended
        return hidden + self.mlp(self.post_attention_layernorm(hidden)), present


class Eagle1Head(nn.Module):
    def __init__(self, config: LlamaConfig, lm_head_weight: torch.Tensor):
        """`lm_head_weight` [V, H]: the target's, used as is (not part of the checkpoint)."""
        super().__init__()
        self.config = config
        self.fc = nn.Linear(2 * config.hidden_size, config.hidden_size, bias=bool(getattr(config, "bias", True)))
        self.layers = nn.ModuleList([Eagle1Layer(config)])
        self.rotary = RopeTable(LlamaRotaryEmbedding(config))
        self.register_buffer("lm_head_weight", lm_head_weight.detach(), persistent=False)
        self.embed_tokens: nn.Embedding | None = None  # set by load_head when the checkpoint ships one

    def project(self, target_features: torch.Tensor) -> torch.Tensor:
        """A committed row's feature is the target's last hidden state itself."""
        return target_features

    def forward(self, embeds, features, positions, past, mask, logits_at=None, position_bound=None):
        """embeds, features [B, n, H]; positions [B, n]. Returns (predicted next feature
        [B, n, H], target-vocabulary logits [B, n, V], new past); with `logits_at` (bool
        [B, n]) the logits of those rows only, [N, V] (as Eagle3Head.forward)."""
        cos, sin = self.rotary(embeds, positions, position_bound)  # bound: see RopeTable.forward
        hidden, present = self.layers[0](self.fc(torch.cat([embeds, features], dim=-1)), cos, sin, past, mask)
        return (
            hidden,
            nn.functional.linear(hidden if logits_at is None else hidden[logits_at], self.lm_head_weight),
            present,
        )

    def target_ids(self) -> None:
        """The head scores the target's whole vocabulary."""
        return None


def load_head(directory: str, lm_head_weight: torch.Tensor, dtype: torch.dtype, device: str, key: str) -> Eagle1Head:
    """Strict: any missing or unexpected key fails, listing them."""
    path = Path(directory)
    config = head_config(read_config(path, key))
    if config.num_hidden_layers != 1:
        raise ConfigError(
            f"{key}: {path} has num_hidden_layers={config.num_hidden_layers}; EAGLE-1 heads have 1 decoder layer"
        )
    if tuple(lm_head_weight.shape) != (config.vocab_size, config.hidden_size):
        raise ConfigError(
            f"{key}: {path} is for vocabulary {config.vocab_size} x hidden {config.hidden_size}; the target's "
            f"lm_head is {tuple(lm_head_weight.shape)}"
        )
    head = Eagle1Head(config, lm_head_weight)
    file, state = read_weights(path, key)
    return placed(load_checked(head, state, file, key, "an EAGLE-1 checkpoint of this shape"), device, dtype)
