"""A lean forward for Llama-architecture models: the same weights, a preallocated KV
cache, and none of the per-call machinery of a general model class.

On a CPU about half of a 135M model's decoding step is per-op dispatch and Python over
30 layers, not arithmetic. This forward runs each layer as: RMSNorm, the Q, K and V
projections, RoPE from a precomputed table, an in-place cache write, SDPA over the cache
(KV heads expanded to the query heads), the output projection, RMSNorm, gate and up
projections, SiLU, the down projection. Fused QKV / gate-up weights and GQA inside SDPA
were measured slower on an AVX2 CPU (bigger GEMMs ran slower per FLOP; SDPA fell back to
its math kernel), so they are not used. Committing a path moves rows inside the cache.
It computes what the Hugging Face forward computes (ids equal in fp32; tested), and
`TreeLM` falls back to that forward for any architecture not listed here.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from specbench.engine.lm import TreeLM
from specbench.errors import require

ROPE_TYPES = ("default", "llama3", "linear")  # inv_freq fixed at load time
INITIAL_ROWS = 1024


def supports(model: torch.nn.Module) -> bool:
    """Whether the lean forward computes exactly what this model's own forward does."""
    config = model.config
    rope = (getattr(config, "rope_parameters", None) or {}).get("rope_type", "default")
    return (
        getattr(config, "model_type", None) == "llama"
        and not getattr(config, "attention_bias", False)
        and not getattr(config, "mlp_bias", False)
        and getattr(config, "hidden_act", "silu") == "silu"
        and getattr(config, "pretraining_tp", 1) == 1
        and rope in ROPE_TYPES
        and hasattr(model, "model") and hasattr(model.model, "rotary_emb")
    )


class LeanTreeLM(TreeLM):
    """TreeLM with the lean forward and a preallocated cache (see module docstring)."""

    def __init__(self, model: torch.nn.Module):
        config = model.config
        self.heads, self.kv_heads = config.num_attention_heads, config.num_key_value_heads
        self.head_dim = getattr(config, "head_dim", None) or config.hidden_size // self.heads
        inner = model.model
        self.embed = inner.embed_tokens.weight
        self.layers = []
        with torch.no_grad():
            for layer in inner.layers:
                attn, mlp = layer.self_attn, layer.mlp
                self.layers.append({
                    "norm1": (layer.input_layernorm.weight, layer.input_layernorm.variance_epsilon),
                    "q": attn.q_proj.weight, "k": attn.k_proj.weight, "v": attn.v_proj.weight,
                    "o": attn.o_proj.weight,
                    "norm2": (layer.post_attention_layernorm.weight, layer.post_attention_layernorm.variance_epsilon),
                    "gate": mlp.gate_proj.weight, "up": mlp.up_proj.weight,
                    "down": mlp.down_proj.weight,
                })
        self.final_norm = (inner.norm.weight, inner.norm.variance_epsilon)
        rotary = inner.rotary_emb
        self._inv_freq = rotary.inv_freq.float()
        self._rope_scale = rotary.attention_scaling
        self._rope_rows = 0
        self._rows = 0
        self._k = self._v = None
        self._batch = 1
        super().__init__(model)

    def _new_cache(self, batch_size: int):
        if self._k is not None and self._k.shape[1] != batch_size:
            self._k = self._v = None  # the preallocated buffers are kept while B stays
        self._batch = batch_size
        self._rows = 0
        return None

    def _rope(self, positions: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        needed = int(positions.max()) + 1
        if needed > self._rope_rows:
            self._rope_rows = max(needed, 2 * self._rope_rows, INITIAL_ROWS)
            freqs = torch.arange(self._rope_rows, dtype=torch.float)[:, None] * self._inv_freq[None]
            emb = torch.cat((freqs, freqs), dim=-1)
            dtype = self.embed.dtype
            self._cos = (emb.cos() * self._rope_scale).to(dtype)
            self._sin = (emb.sin() * self._rope_scale).to(dtype)
        return self._cos[positions], self._sin[positions]

    def _reserve(self, rows: int) -> None:
        if self._k is not None and rows <= self._k.shape[3]:
            return
        capacity = max(rows, 2 * (self._k.shape[3] if self._k is not None else 0), INITIAL_ROWS)
        shape = (len(self.layers), self._batch, self.kv_heads, capacity, self.head_dim)
        k = torch.empty(shape, dtype=self.embed.dtype, device=self.embed.device)
        v = torch.empty_like(k)
        if self._k is not None:
            k[..., : self._rows, :] = self._k[..., : self._rows, :]
            v[..., : self._rows, :] = self._v[..., : self._rows, :]
        self._k, self._v = k, v

    @staticmethod
    def _norm(x: torch.Tensor, weight_eps) -> torch.Tensor:
        weight, eps = weight_eps
        dtype = x.dtype
        x = x.to(torch.float32)
        x = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps)
        return weight * x.to(dtype)

    @staticmethod
    def _rotate(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
        half = x.shape[-1] // 2
        rotated = torch.cat((-x[..., half:], x[..., :half]), dim=-1)
        return x * cos + rotated * sin

    def _run(self, tokens: torch.Tensor, plan):
        batch, n = tokens.shape
        start = self._rows
        self._reserve(start + n)
        cos, sin = self._rope(plan.positions)
        cos, sin = cos[:, None], sin[:, None]  # [B, 1, n, d]: broadcast over heads
        if plan.mask is not None:
            attn_mask = plan.mask[:, None]  # [B, 1, n, kv]
        elif n > 1:  # causal over the new rows, everything cached before them
            attn_mask = plan.causal_mask()
        else:
            attn_mask = None
        h, d, kv = self.heads, self.head_dim, self.kv_heads
        groups = h // kv
        x = F.embedding(tokens, self.embed)
        hidden = [] if self.feature_layers else None
        for index, layer in enumerate(self.layers):
            if hidden is not None:
                hidden.append(x)
            normed = self._norm(x, layer["norm1"])
            q = F.linear(normed, layer["q"]).view(batch, n, h, d).transpose(1, 2)
            k = F.linear(normed, layer["k"]).view(batch, n, kv, d).transpose(1, 2)
            v = F.linear(normed, layer["v"]).view(batch, n, kv, d).transpose(1, 2)
            q, k = self._rotate(q, cos, sin), self._rotate(k, cos, sin)
            self._k[index, :, :, start : start + n] = k
            self._v[index, :, :, start : start + n] = v
            keys = self._k[index, :, :, : start + n].repeat_interleave(groups, dim=1)
            values = self._v[index, :, :, : start + n].repeat_interleave(groups, dim=1)
            attended = F.scaled_dot_product_attention(q, keys, values, attn_mask=attn_mask)
            x = x + F.linear(attended.transpose(1, 2).reshape(batch, n, h * d), layer["o"])
            normed = self._norm(x, layer["norm2"])
            x = x + F.linear(F.silu(F.linear(normed, layer["gate"])) * F.linear(normed, layer["up"]), layer["down"])
        self._rows = start + n
        normed = self._norm(x, self.final_norm)
        if hidden is not None:  # as the model's own hidden_states: the last entry is normed
            hidden.append(normed)
        return normed, hidden

    def _move(self, row_moves, columns: int) -> None:
        for b, cols, dest in row_moves:
            index = torch.tensor(cols, dtype=torch.long, device=self.device)
            self._k[:, b, :, dest : dest + len(cols)] = self._k[:, b, :, index]
            self._v[:, b, :, dest : dest + len(cols)] = self._v[:, b, :, index]
        self._rows = columns

    def _keep_batch(self, rows: list[int]) -> None:
        if self._k is not None:  # None: rows left before the first forward
            index = torch.tensor(rows, dtype=torch.long, device=self.device)
            self._k, self._v = self._k[:, index].contiguous(), self._v[:, index].contiguous()
        self._batch = len(rows)


FORWARDS = ("auto", "lean", "hf")


def make_lm(model: torch.nn.Module, forward: str = "auto") -> TreeLM:
    """The KV-cached LM over `model`: the lean forward where it supports the architecture
    (`auto` or `lean`), the model's own forward otherwise or when asked (`hf`)."""
    require(forward in FORWARDS, "hardware.forward", f"unknown {forward!r}; choose one of {', '.join(FORWARDS)}")
    if forward == "lean":
        require(supports(model), "hardware.forward", f"lean supports Llama-architecture models; {type(model).__name__} needs hardware.forward=hf or auto")
    return LeanTreeLM(model) if forward != "hf" and supports(model) else TreeLM(model)
