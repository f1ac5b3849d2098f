"""The EAGLE-3 draft head, loading the published checkpoints unchanged.

Architecture (EAGLE-3 paper and its checkpoints): target hidden states from a low, a
middle and a high layer are concatenated and projected (`fc`, 3*Ht -> H); one decoder
layer (`midlayer`) attends over [input_layernorm(token embedding), hidden_norm(feature)]
(2H wide) with the un-normed feature as residual; `norm`, then `lm_head` over a reduced
draft vocabulary, mapped to target ids by `d2t` (target id = draft id + d2t[draft id]).
Token embeddings come from the target, unless the checkpoint ships its own
`embed_tokens.weight`: then, as in the EAGLE release, the shipped embedding is used
(`head.embed_tokens`). Later draft steps feed the layer's own output (before `norm`) as
the feature, skipping `fc`.

A head with `num_hidden_layers` > 1 (trained here; the published heads have one) stacks
plain Llama decoder layers (`layers.i`, H wide) after `midlayer`. Its cache keeps every
layer's keys side by side on the kv-head dimension, so the drafter slices rows and
columns of a deeper head's cache as it does a one-layer head's.
"""

from __future__ import annotations

from pathlib import Path

import torch
from torch import nn
from transformers import LlamaConfig
from transformers.models.llama.modeling_llama import LlamaMLP, LlamaRMSNorm, LlamaRotaryEmbedding, apply_rotary_pos_emb

from specbench.engine import attention
from specbench.engine.lean import RopeTable
from specbench.errors import ConfigError
from specbench.models.checkpoint import load_strictly, read, read_config

WEIGHT_FILES = ("model.safetensors", "pytorch_model.bin")
# present in some checkpoints; when it is, it replaces the target's embedding for the head
EMBEDDING_KEY = "embed_tokens.weight"


def feature_layers(num_layers: int) -> tuple[int, int, int]:
    """hidden_states indices of the inputs of layers 2, L//2 and L-3 (index 0 is the
    embedding output), in the order the checkpoints' `fc` expects: low, mid, high."""
    return (2, num_layers // 2, num_layers - 3)


def head_config(raw: dict) -> LlamaConfig:
    config = LlamaConfig(**{k: v for k, v in raw.items() if k not in ("architectures", "model_type")})
    config.draft_vocab_size = raw.get("draft_vocab_size") or config.vocab_size
    config.target_hidden_size = raw.get("target_hidden_size") or config.hidden_size
    return config


class HeadAttention(nn.Module):
    """Llama attention over inputs `width` wide (EAGLE-3: 2H, EAGLE-1: H), with a tree mask."""

    def __init__(self, config: LlamaConfig, width: int):
        super().__init__()
        self.heads, self.kv_heads = config.num_attention_heads, config.num_key_value_heads
        self.head_dim = getattr(config, "head_dim", None) or config.hidden_size // self.heads
        self.q_proj = nn.Linear(width, self.heads * self.head_dim, bias=False)
        self.k_proj = nn.Linear(width, self.kv_heads * self.head_dim, bias=False)
        self.v_proj = nn.Linear(width, self.kv_heads * self.head_dim, bias=False)
        self.o_proj = nn.Linear(self.heads * self.head_dim, config.hidden_size, bias=False)

    def forward(self, x, cos, sin, past: tuple | None, mask):
        """x [B, n, width]; past (keys, values) or None; mask bool [n, past + n] or, per row,
        [B, n, past + n] (True = attend)."""
        b, n = x.shape[:2]
        q = self.q_proj(x).view(b, n, self.heads, self.head_dim).transpose(1, 2)
        k = self.k_proj(x).view(b, n, self.kv_heads, self.head_dim).transpose(1, 2)
        v = self.v_proj(x).view(b, n, self.kv_heads, self.head_dim).transpose(1, 2)
        q, k = apply_rotary_pos_emb(q, k, cos, sin)
        if past is not None:
            k, v = torch.cat([past[0], k], dim=2), torch.cat([past[1], v], dim=2)
        mask = mask[:, None] if mask.dim() == 3 else mask[None, None]
        with attention.kernels(q.device):
            out = attention.attend(q, k, v, mask, self.kv_heads)
        return self.o_proj(out.transpose(1, 2).reshape(b, n, -1)), (k, v)


class Eagle3Layer(nn.Module):
    def __init__(self, config: LlamaConfig):
        super().__init__()
        self.hidden_norm = LlamaRMSNorm(config.hidden_size, eps=config.rms_norm_eps)
        self.input_layernorm = LlamaRMSNorm(config.hidden_size, eps=config.rms_norm_eps)
        self.post_attention_layernorm = LlamaRMSNorm(config.hidden_size, eps=config.rms_norm_eps)
        self.self_attn = HeadAttention(config, 2 * config.hidden_size)
        self.mlp = LlamaMLP(config)

    def forward(self, embeds, features, cos, sin, past, mask):
        x = torch.cat([self.input_layernorm(embeds), self.hidden_norm(features)], dim=-1)
        attended, present = self.self_attn(x, cos, sin, past, mask)
        hidden = features + attended
        hidden = hidden + self.mlp(self.post_attention_layernorm(hidden))
        return hidden, present


class Eagle3DecoderLayer(nn.Module):
    """A layer after `midlayer`: the Llama decoder layer (pre-norm attention and MLP over H)."""

    def __init__(self, config: LlamaConfig):
        super().__init__()
        self.input_layernorm = LlamaRMSNorm(config.hidden_size, eps=config.rms_norm_eps)
        self.post_attention_layernorm = LlamaRMSNorm(config.hidden_size, eps=config.rms_norm_eps)
        self.self_attn = HeadAttention(config, config.hidden_size)
        self.mlp = LlamaMLP(config)

    def forward(self, hidden, cos, sin, past, mask):
        attended, present = self.self_attn(self.input_layernorm(hidden), cos, sin, past, mask)
        hidden = hidden + attended
        return hidden + self.mlp(self.post_attention_layernorm(hidden)), present


class Eagle3Head(nn.Module):
    def __init__(self, config: LlamaConfig):
        super().__init__()
        self.config = config
        self.fc = nn.Linear(3 * config.target_hidden_size, config.hidden_size, bias=False)
        self.midlayer = Eagle3Layer(config)
        self.layers = nn.ModuleList([Eagle3DecoderLayer(config) for _ in range(config.num_hidden_layers - 1)])
        self.norm = LlamaRMSNorm(config.hidden_size, eps=config.rms_norm_eps)
        self.lm_head = nn.Linear(config.hidden_size, config.draft_vocab_size, bias=False)
        self.register_buffer("d2t", torch.zeros(config.draft_vocab_size, dtype=torch.long))
        self.register_buffer("t2d", torch.ones(config.vocab_size, dtype=torch.bool))
        self.rotary = RopeTable(LlamaRotaryEmbedding(config))
        self.embed_tokens: nn.Embedding | None = None  # set by load_head when the checkpoint ships one

    @property
    def uses_reduced_vocab(self) -> bool:
        return self.config.draft_vocab_size != self.config.vocab_size

    def forward(self, embeds, features, positions, past, mask, logits_at=None, position_bound=None):
        """embeds, features [B, n, H] (features already projected); positions [B, n].
        Returns (pre-norm hidden [B, n, H], draft-vocab logits [B, n, Vd], new past);
        with `logits_at` (bool [B, n]) the logits of those rows only, [N, Vd]: training
        scores answer rows only, and the vocabulary projection is most of a step."""
        cos, sin = self.rotary(embeds, positions, position_bound)  # bound: see RopeTable.forward
        depth = 1 + len(self.layers)
        pasts = [None] * depth if past is None else list(zip(past[0].chunk(depth, dim=1), past[1].chunk(depth, dim=1)))
        hidden, present = self.midlayer(embeds, features, cos, sin, pasts[0], mask)
        presents = [present]
        for layer, layer_past in zip(self.layers, pasts[1:]):
            hidden, present = layer(hidden, cos, sin, layer_past, mask)
            presents.append(present)
        if self.layers:
            present = (torch.cat([k for k, _ in presents], dim=1), torch.cat([v for _, v in presents], dim=1))
        return hidden, self.lm_head(self.norm(hidden if logits_at is None else hidden[logits_at])), present

    def project(self, target_features: torch.Tensor) -> torch.Tensor:
        """The feature a committed row feeds the layer: the fused low/mid/high states."""
        return self.fc(target_features)

    def target_ids(self) -> torch.Tensor:
        """Target-vocabulary id of every draft-vocabulary id."""
        return torch.arange(self.config.draft_vocab_size, device=self.d2t.device) + self.d2t


def load_head(directory: str, dtype: torch.dtype, device: str, key: str) -> Eagle3Head:
    """Strict: a missing or unexpected key, or a shape config.json does not give, fails
    with one line naming the file and the keys."""
    path = Path(directory)
    head = Eagle3Head(head_config(read_config(path, key)))
    optional = frozenset() if head.uses_reduced_vocab else frozenset({"d2t", "t2d"})  # the release drops both then
    file, state = read_weights(path, key)
    load_checked(head, state, file, key, "an EAGLE-3 head as its config.json describes it", optional)
    ids = head.target_ids()
    if head.uses_reduced_vocab and (int(ids.min()) < 0 or int(ids.max()) >= head.config.vocab_size):
        raise ConfigError(
            f"{key}: {file}: d2t maps draft ids to target ids outside 0..{head.config.vocab_size - 1} "
            "(vocab_size in config.json)"
        )
    return placed(head, device, dtype)


def check_fits(head: Eagle3Head, target_config, directory: str, key: str) -> None:
    """One line when the head was made for another target: its fc reads 3 target hidden
    states and d2t/t2d index the target's vocabulary, so both must be this target's."""
    config = head.config
    if config.vocab_size != target_config.vocab_size or config.target_hidden_size != target_config.hidden_size:
        raise ConfigError(
            f"{key}: {directory} is an EAGLE-3 head for a target with vocabulary {config.vocab_size} and hidden size "
            f"{config.target_hidden_size}; this target has vocabulary {target_config.vocab_size} and hidden size "
            f"{target_config.hidden_size}"
        )


def placed(head: nn.Module, device: str, dtype: torch.dtype) -> nn.Module:
    """The head on `device` in `dtype` for inference, its RoPE frequencies kept in fp32 as
    the target's are (`.to(bf16)` would round them, shifting every position's phase)."""
    head = head.to(device=device, dtype=dtype).eval()
    head.rotary = RopeTable(LlamaRotaryEmbedding(head.config)).to(device)
    return head


def trained_state(head: nn.Module) -> dict[str, torch.Tensor]:
    """The head's own weights, for a warm start: without an embedding it was shipped with
    (that is the target's, and a head trained here reads the target's)."""
    return {k: v for k, v in head.state_dict().items() if k != EMBEDDING_KEY}


def read_weights(path: Path, key: str) -> tuple[Path, dict[str, torch.Tensor]]:
    """(file, tensors) from model.safetensors or, as the EAGLE releases ship, pytorch_model.bin."""
    return read(path, WEIGHT_FILES, key)


def load_checked(
    head: nn.Module, state: dict, file: Path, key: str, kind: str, optional: frozenset[str] = frozenset()
) -> nn.Module:
    """Load `state` into `head` strictly (checkpoint.load_strictly), and set
    `head.embed_tokens` from an embedding the checkpoint ships."""
    shipped = state.pop(EMBEDDING_KEY, None)
    hidden = head.config.hidden_size
    if shipped is not None and (shipped.dim() != 2 or shipped.shape[1] != hidden):
        raise ConfigError(f"{key}: {file}: {EMBEDDING_KEY} is {tuple(shipped.shape)}, not [vocab, {hidden}]")
    load_strictly(head, state, file, key, kind, optional)
    head.embed_tokens = None if shipped is None else nn.Embedding.from_pretrained(shipped.float(), freeze=True)
    return head
