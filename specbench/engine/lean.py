"""A lean forward for the dense model families (Llama, Vicuna, DeepSeek-R1-Distill-Llama,
Qwen2, Qwen3): the same weights, a preallocated KV cache, and none of the per-call
machinery of a general model class.

On a CPU about half of a 135M model's decoding step is per-op dispatch and Python over
30 layers, not arithmetic. This forward runs each layer as: RMSNorm, the Q, K and V
projections (with their biases where the model has them: Qwen2), RMSNorm over each query
and key head where the model has it (Qwen3), RoPE from a precomputed table, an in-place
cache write, SDPA over the cache (KV heads expanded to the query heads), the output
projection, RMSNorm, gate and up projections, SiLU, the down projection. Fused QKV /
gate-up weights and GQA inside SDPA were measured slower on an AVX2 CPU (bigger GEMMs ran
slower per FLOP; SDPA fell back to its math kernel), so they are not used. Committing a
path moves rows inside the cache. It computes what the Hugging Face forward computes
(logits equal in fp32 for every dense family; tested), and `TreeLM` runs the model's own
forward for anything else (`unsupported`: mixture-of-experts, sliding-window attention,
other families), which the run's summary reports with the reason.

`engine.compile` (see specbench/costs/compile.py) can run the projections and the output
layer on weights prepacked once in oneDNN's layout (on an AMX CPU in bf16: 1.2x faster per
decoding step), on fp16 or int8 weights (specbench/engine/kernels.py has the kernels; each
adds a projection's bias as F.linear does), and/or the decoder layer through torch.compile.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from specbench.engine import attention
from specbench.engine.graphs import Replay, bucket, new_pool
from specbench.engine.kernels import (
    Compiled,
    PackedLinear,
    fp16_linear,
    pack,
    pack_fp16,
    packed_linear,
    paired_int8_linear,
    quantize_int8,
)
from specbench.engine.lm import TreeLM
from specbench.engine.transfer import device_tensor
from specbench.errors import require

ROPE_TYPES = ("default", "llama3", "linear")  # inv_freq fixed at load time
INITIAL_ROWS = 1024


LEAN_FAMILIES = ("llama", "qwen2", "qwen3")  # config model_type


def unsupported(model: torch.nn.Module) -> str | None:
    """Why the lean forward would not compute exactly what this model's own forward does
    (None: it does)."""
    config = model.config
    model_type = getattr(config, "model_type", None)
    rope = (getattr(config, "rope_parameters", None) or {}).get("rope_type", "default")
    if getattr(config, "num_experts", None) or getattr(config, "num_local_experts", None):
        return "mixture-of-experts runs on the model's own forward"
    if model_type not in LEAN_FAMILIES:
        return f"model_type {model_type!r} is not one the lean forward computes ({', '.join(LEAN_FAMILIES)})"
    if any(kind != "full_attention" for kind in getattr(config, "layer_types", None) or ()):
        return "sliding-window attention layers run on the model's own forward"
    if getattr(config, "hidden_act", "silu") != "silu":
        return f"hidden_act {config.hidden_act!r} (the lean forward computes silu)"
    if getattr(config, "pretraining_tp", 1) != 1:
        return f"pretraining_tp {config.pretraining_tp} (the lean forward computes 1)"
    if rope not in ROPE_TYPES:
        return f"rope_type {rope!r} (the lean forward computes {', '.join(ROPE_TYPES)})"
    if not (hasattr(model, "model") and hasattr(model.model, "rotary_emb")):
        return f"{type(model).__name__} has no model.rotary_emb"
    if spread(model):
        return "weights spread over several devices (hardware=multi-gpu) run on the model's own forward"
    return None


def supports(model: torch.nn.Module) -> bool:
    """Whether the lean forward computes exactly what this model's own forward does."""
    return unsupported(model) is None


def forward_note(model: torch.nn.Module, forward: str = "auto") -> str:
    """Which forward runs `model` under hardware.forward=`forward`, and why not the lean one
    where it does not: what a run's summary and console say."""
    if forward == "hf":
        return "hf (hardware.forward=hf)"
    reason = unsupported(model)
    return "lean" if reason is None else f"hf ({type(model).__name__}: {reason})"


PROJECTIONS = (1, 2, 3, 4, 6, 7, 8)  # the linear weights in a layer's tuple (q, k, v, o, gate, up, down)


class RopeTable(torch.nn.Module):
    """A rotary embedding's cos and sin per position, computed once into a table and indexed
    per forward: the values `rotary` (a transformers rotary embedding with fixed inv_freq)
    computes, an fp32 product of position and inverse frequency, then cos and sin, scaled and
    cast, without its per-call work (AMD EPYC Zen 5, bf16: 77 vs 5 us a call, timed while a
    training job shared the CPU; the head forward's gain from it was inside the noise). Called as the embedding is: (x,
    positions) -> (cos, sin) in
    x's dtype on x's device."""

    def __init__(self, rotary: torch.nn.Module):
        super().__init__()
        self.register_buffer("inv_freq", rotary.inv_freq.detach().float().clone(), persistent=False)
        self.scale = rotary.attention_scaling
        self.rows = 0
        self.tables: dict = {}  # (dtype, device) -> (cos, sin) [rows, head_dim]

    def forward(
        self, x: torch.Tensor, positions: torch.Tensor, bound: int | None = None
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """`bound`: 1 + the largest of `positions` where the caller knows it on the host (the
        engine's Feed does); None reads it from `positions`, a host synchronisation."""
        cos, sin = self.table(int(positions.max()) + 1 if bound is None else bound, x)
        return cos[positions], sin[positions]

    def table(self, rows: int, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """(cos, sin) [at least `rows`, head_dim] in x's dtype on x's device, grown as needed."""
        if rows > self.rows:
            self.rows, self.tables = max(rows, 2 * self.rows, INITIAL_ROWS), {}
        key = (x.dtype, x.device)
        if key not in self.tables:
            freqs = (
                torch.arange(self.rows, dtype=torch.float, device=self.inv_freq.device)[:, None]
                * self.inv_freq.float()[None]
            )
            emb = torch.cat((freqs, freqs), dim=-1)
            self.tables[key] = tuple(
                (f(emb) * self.scale).to(device=x.device, dtype=x.dtype) for f in (torch.cos, torch.sin)
            )
        return self.tables[key]


def cast(model: torch.nn.Module, dtype: torch.dtype, device: torch.device | str | None = None) -> torch.nn.Module:
    """`model.to(dtype, device)` with its RoPE frequencies (every `inv_freq` buffer) kept in
    fp32, as from_pretrained loads them: a bf16 inv_freq shifts every position's phase, by
    about a radian a thousand positions in for the lower frequencies."""
    frequencies = {
        (module, name): buffer.float()
        for module in model.modules()
        for name, buffer in module.named_buffers(recurse=False)
        if name.endswith("inv_freq")
    }
    model.to(dtype=dtype, device=device)
    for (module, name), buffer in frequencies.items():
        setattr(module, name, buffer.to(getattr(module, name).device))
    return model


class LeanTreeLM(TreeLM):
    """TreeLM with the lean forward and a preallocated cache (see module docstring)."""

    def __init__(self, model: torch.nn.Module, compiled: Compiled = Compiled(), draft: bool = False):
        """`draft`: a drafter's forward, on int8 weights below compiled.int8_drafts_below rows."""
        config = model.config
        self.heads, self.kv_heads = config.num_attention_heads, config.num_key_value_heads
        self.head_dim = getattr(config, "head_dim", None) or config.hidden_size // self.heads
        inner = model.model
        self.embed = inner.embed_tokens.weight
        self.layers = []
        with torch.no_grad():
            for layer in inner.layers:
                attn, mlp = layer.self_attn, layer.mlp
                linears = (
                    attn.q_proj,
                    attn.k_proj,
                    attn.v_proj,
                    attn.o_proj,
                    mlp.gate_proj,
                    mlp.up_proj,
                    mlp.down_proj,
                )
                head_norms = (attn.q_norm.weight, attn.k_norm.weight) if hasattr(attn, "q_norm") else None  # Qwen3
                self.layers.append(
                    (  # the weights in _layer's argument order, then the biases, head norms and eps
                        layer.input_layernorm.weight,
                        attn.q_proj.weight,
                        attn.k_proj.weight,
                        attn.v_proj.weight,
                        attn.o_proj.weight,
                        layer.post_attention_layernorm.weight,
                        mlp.gate_proj.weight,
                        mlp.up_proj.weight,
                        mlp.down_proj.weight,
                        tuple(linear.bias for linear in linears),
                        head_norms,
                        layer.input_layernorm.variance_epsilon,
                    )
                )
            self.final_norm = (inner.norm.weight, inner.norm.variance_epsilon)
            self.compiled = compiled
            self.int8_below = compiled.int8_drafts_below if draft and not compiled.fp16_weights else 0
            self.int8_layers = None
            if self.int8_below:
                self.int8_layers = [
                    tuple(quantize_int8(w) if i in PROJECTIONS else w for i, w in enumerate(layer))
                    for layer in self.layers
                ]
            self.packed_layers = None
            if compiled.fp16_weights:  # every forward on fp16 weights: the plain ones are not read
                self.layers = [
                    tuple(pack_fp16(w) if i in PROJECTIONS else w for i, w in enumerate(layer)) for layer in self.layers
                ]
            elif compiled.packed_from is not None:
                self.packed_layers = [
                    tuple(pack(w) if i in PROJECTIONS else w for i, w in enumerate(layer)) for layer in self.layers
                ]
                if compiled.packed_from <= 1:  # every forward packed: the plain weights are not read
                    self.layers = self.packed_layers
        if compiled.torch:
            self._layer = torch.compile(self._layer, dynamic=True)
        self._rope = RopeTable(inner.rotary_emb)
        self._rows = 0
        self._k = self._v = None
        self._batch = 1
        super().__init__(model)
        # the output layer: a fifth of a 135M model's weights
        if compiled.packed_from is not None or self.int8_below or compiled.fp16_weights:
            self.lm_head = PackedLinear(self.lm_head, compiled.packed_from, self.int8_below, compiled.fp16_weights)

    @property
    def kind(self) -> str:
        return "LeanTreeLM" if self.compiled == Compiled() else f"LeanTreeLM-{self.compiled}"

    def _new_cache(self, batch_size: int):
        if self._k is not None and self._k.shape[1] != batch_size:
            self._k = self._v = None  # the preallocated buffers are kept while B stays
        self._batch = batch_size
        self._rows = 0
        return None

    def reserve(self, rows: int) -> None:
        self._reserve(rows)

    def release(self) -> None:
        self._k = self._v = None
        super().release()

    def _reserve(self, rows: int) -> None:
        if self._k is not None and rows <= self._k.shape[3]:
            return
        capacity = max(rows, 2 * (self._k.shape[3] if self._k is not None else 0), INITIAL_ROWS)
        shape = (len(self.layers), self._batch, self.kv_heads, capacity, self.head_dim)
        # zeros, not garbage: StaticTreeLM attends over every column, the unused ones masked,
        # and a masked NaN would still reach the output (0 * NaN)
        k = torch.zeros(shape, dtype=self.embed.dtype, device=self.embed.device)
        v = torch.zeros_like(k)
        if self._k is not None:
            k[..., : self._rows, :] = self._k[..., : self._rows, :]
            v[..., : self._rows, :] = self._v[..., : self._rows, :]
        self._k, self._v = k, v

    @staticmethod
    def _norm(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
        dtype = x.dtype
        x = x.to(torch.float32)
        x = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps)
        return weight * x.to(dtype)

    @staticmethod
    def _rotate(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
        half = x.shape[-1] // 2
        rotated = torch.cat((-x[..., half:], x[..., :half]), dim=-1)
        return x * cos + rotated * sin

    def _run(self, tokens: torch.Tensor, feed):
        batch, n = tokens.shape
        start = self._rows
        self._reserve(start + n)
        cos, sin = self._rope(self.embed, feed.positions, feed.position_bound)
        cos, sin = cos[:, None], sin[:, None]  # [B, 1, n, d]: broadcast over heads
        if feed.mask is not None:
            attn_mask = feed.mask[:, None]  # [B, 1, n, kv]
        elif n > 1:  # causal over the new rows, everything cached before them
            attn_mask = feed.causal_mask()
        else:
            attn_mask = None
        normed, hidden = self._layers(F.embedding(tokens, self.embed), cos, sin, attn_mask, start)
        self._rows = start + n
        return normed, hidden

    def _layers(
        self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, attn_mask: torch.Tensor | None, start: int
    ):
        """The decoder layers and the final norm over embedded `x` [B, n, H] whose KV rows
        go to cache columns start..start+n."""
        hidden = [] if self.feature_layers else None
        rows = x.shape[0] * x.shape[1]
        packed = self.packed_layers is not None and rows >= self.compiled.packed_from
        layers, linear = (self.packed_layers, packed_linear) if packed else (self.layers, F.linear)
        if self.compiled.fp16_weights:
            linear = fp16_linear
        elif rows < self.int8_below:
            layers, linear = self.int8_layers, paired_int8_linear
        with attention.kernels(x.device):
            for index, layer in enumerate(layers):
                if hidden is not None:
                    hidden.append(x)
                x = self._layer(x, cos, sin, attn_mask, self._k[index], self._v[index], start, linear, *layer)
        normed = self._norm(x, *self.final_norm)
        if hidden is not None:  # as the model's own hidden_states: the last entry is normed
            hidden.append(normed)
        return normed, hidden

    def _layer(
        self,
        x,
        cos,
        sin,
        attn_mask,
        k_cache,
        v_cache,
        start: int,
        linear,
        norm1,
        q_proj,
        k_proj,
        v_proj,
        o_proj,
        norm2,
        gate,
        up,
        down,
        biases,
        head_norms,
        eps: float,
    ):
        """One decoder layer (tensors, ints and the linear kernel: the unit torch.compile
        compiles, once for all layers). `biases`: the q, k, v, o, gate, up and down
        projections' (None where a projection has none); `head_norms`: the query and key
        heads' RMSNorm weights, or None. Writes this forward's K and V into the layer's
        cache [B, kv, rows, d]."""
        batch, n = x.shape[:2]
        h, d, kv = self.heads, self.head_dim, self.kv_heads
        q_bias, k_bias, v_bias, o_bias, gate_bias, up_bias, down_bias = biases
        normed = self._norm(x, norm1, eps)
        q = linear(normed, q_proj, q_bias).view(batch, n, h, d).transpose(1, 2)
        k = linear(normed, k_proj, k_bias).view(batch, n, kv, d).transpose(1, 2)
        v = linear(normed, v_proj, v_bias).view(batch, n, kv, d).transpose(1, 2)
        if head_norms is not None:
            q, k = self._norm(q, head_norms[0], eps), self._norm(k, head_norms[1], eps)
        q, k = self._rotate(q, cos, sin), self._rotate(k, cos, sin)
        # grouped-query attention on the cache as it is: copying each KV head h // kv times
        # per layer (repeat_interleave) cost more than the attention itself on CPU
        keys, values = self._cached_kv(k_cache, v_cache, k, v, start)
        attended = self._attend(q, keys, values, attn_mask)
        x = x + linear(attended.transpose(1, 2).reshape(batch, n, h * d), o_proj, o_bias)
        normed = self._norm(x, norm2, eps)
        return x + linear(F.silu(linear(normed, gate, gate_bias)) * linear(normed, up, up_bias), down, down_bias)

    def _attend(
        self, q: torch.Tensor, keys: torch.Tensor, values: torch.Tensor, attn_mask: torch.Tensor | None
    ) -> torch.Tensor:
        """Attention of q [B, h, n, d] over keys and values [B, kv, columns, d]: engine/attention.py."""
        return attention.attend(q, keys, values, attn_mask, self.kv_heads, self.compiled.float_attention)

    @staticmethod
    def _cached_kv(k_cache, v_cache, k, v, start: int):
        """Write this forward's K and V [B, kv, n, d] at cache columns start..start+n; the
        keys and values its attention reads: every column up to them."""
        n = k.shape[2]
        k_cache[:, :, start : start + n] = k
        v_cache[:, :, start : start + n] = v
        return k_cache[:, :, : start + n], v_cache[:, :, : start + n]

    def _move(self, row_moves, columns: int) -> None:
        for b, cols, dest in row_moves:
            index = device_tensor(cols, self.device)
            self._k[:, b, :, dest : dest + len(cols)] = self._k[:, b, :, index]
            self._v[:, b, :, dest : dest + len(cols)] = self._v[:, b, :, index]
        self._rows = columns

    def _keep_batch(self, rows: list[int]) -> None:
        if self._k is not None:  # None: rows left before the first forward
            index = device_tensor(rows, self.device)
            self._k, self._v = self._k[:, index].contiguous(), self._v[:, index].contiguous()
        self._batch = len(rows)


class StaticTreeLM(LeanTreeLM):
    """LeanTreeLM with static shapes for CUDA graphs (`engine.compile=static`; what `auto`
    picks on a GPU). Each forward of up to 64 tokens per row is padded to a width bucket
    (graphs.BUCKETS), writes K and V at cache columns given as a tensor, attends over the
    cache's first `key_span` columns (the live context rounded up to SPAN_STEP) under a mask
    that hides the columns not in use, and reads RoPE from a table covering every cache
    column. A padding row attends to itself alone and no real row attends to it, so real rows
    get the logits of the unpadded forward. Wider forwards (prefill) run LeanTreeLM's own path
    on the same cache.

    The mask is folded once per forward for grouped-query heads (attention.fold_mask: each
    KV head's group of query heads read as query rows), on a CPU too, so the tests run the
    layout a GPU runs.

    On a GPU each (batch size, bucket, key span) is captured once as a CUDA graph
    (graphs.Replay) into a memory pool of the cache's own; a new cache (it grew, or the batch
    changed) releases every graph of the old one and captures into a fresh pool. Elsewhere the
    same static forward runs eagerly."""

    def __init__(self, *args, **kwargs):
        self._replays: dict = {}
        self._replays_for: tuple = ()  # the cache and RoPE table the replays were built on
        self._pool = None
        super().__init__(*args, **kwargs)

    def _reserve(self, rows: int) -> None:
        """The cache for `rows` columns, and RoPE rows for all of its columns."""
        super()._reserve(rows)
        self._rope.table(self._k.shape[3], self.embed)

    @staticmethod
    def _cached_kv(k_cache, v_cache, k, v, start: int | torch.Tensor):
        """Write K and V at the cache columns `start` holds; attention reads the whole cache.
        An int `start`: a forward wider than every bucket, on LeanTreeLM's own path."""
        if isinstance(start, int):
            return LeanTreeLM._cached_kv(k_cache, v_cache, k, v, start)
        k_cache.index_copy_(2, start, k)
        v_cache.index_copy_(2, start, v)
        return k_cache, v_cache

    def _run(self, tokens: torch.Tensor, feed):
        batch, n = tokens.shape
        width = bucket(n)
        if width is None:
            return super()._run(tokens, feed)
        start = self._rows
        self._reserve(start + width)
        mask = torch.zeros(
            batch, 1, width, key_span(start + width, self._k.shape[3]), dtype=torch.bool, device=self.device
        )
        mask[:, 0, :n, : start + n] = feed.mask if feed.mask is not None else feed.causal_mask()
        padding = torch.arange(n, width, device=self.device)
        mask[:, 0, padding, start + padding] = True
        inputs = (
            F.pad(tokens, (0, width - n)),
            F.pad(feed.positions, (0, width - n)),
            mask,
            torch.arange(start, start + width, device=self.device),
        )
        normed, hidden = self._replay(inputs)
        self._rows = start + n
        return normed[:, :n], None if hidden is None else [h[:, :n] for h in hidden]

    def _replay(self, inputs: tuple[torch.Tensor, ...]):
        """The static forward over `inputs`, through the Replay of its shapes."""
        table = self._rope.table(self._k.shape[3], self.embed)
        if len(self._replays_for) != 2 or self._replays_for[0] is not self._k or self._replays_for[1] is not table:
            self._release_graphs()  # graphs hold addresses: a new cache needs new ones, in a pool of their own
            self._replays_for, self._pool = (self._k, table), new_pool() if self.embed.is_cuda else None
        key = (inputs[2].shape, bool(self.feature_layers))
        if key not in self._replays:
            self._replays[key] = Replay(self._static_forward, inputs, self._pool)
        return self._replays[key](*inputs)

    def _static_forward(self, tokens: torch.Tensor, positions: torch.Tensor, mask: torch.Tensor, columns: torch.Tensor):
        """The lean layers over padded `tokens` [B, W] at `positions`, attending as `mask`
        [B, 1, W, cache columns] says, their K and V written at `columns` [W]."""
        cos, sin = self._rope.table(self._k.shape[3], self.embed)
        return self._layers(
            F.embedding(tokens, self.embed),
            cos[positions][:, None],
            sin[positions][:, None],
            attention.fold_mask(mask, self.heads // self.kv_heads),
            columns,
        )

    def _release_graphs(self) -> None:
        for replay in self._replays.values():
            replay.release()
        self._replays, self._replays_for, self._pool = {}, (), None

    def release(self) -> None:
        self._release_graphs()
        super().release()


SPAN_STEP = 256  # a static forward's key span grows in steps of this many columns


def key_span(columns: int, capacity: int) -> int:
    """The cache columns a static forward over the first `columns` attends to: `columns`
    rounded up to SPAN_STEP, at most the cache's capacity (each span is a graph of its own)."""
    return min(capacity, -(-columns // SPAN_STEP) * SPAN_STEP)


FORWARDS = ("auto", "lean", "hf")


def make_lm(
    model: torch.nn.Module, forward: str = "auto", compiled: Compiled = Compiled(), draft: bool = False
) -> TreeLM:
    """The KV-cached LM over `model`: the lean forward where it supports the architecture
    (`auto` or `lean`), run as `compiled` says (a `draft` model with int8 weights where it
    says drafters run so); the model's own forward otherwise or when asked (`hf`)."""
    require(forward in FORWARDS, "hardware.forward", f"unknown {forward!r}; choose one of {', '.join(FORWARDS)}")
    if forward == "lean":
        reason = unsupported(model)
        require(
            reason is None,
            "hardware.forward",
            f"lean: {type(model).__name__}: {reason}; use hardware.forward=auto or hf",
        )
    if forward == "hf" or not supports(model):
        return TreeLM(model)
    return (StaticTreeLM if compiled.static else LeanTreeLM)(model, compiled, draft)


def spread(model: torch.nn.Module) -> bool:
    """Whether the model's weights lie on several devices (a device map across GPUs): its
    own forward then runs, moving activations between them."""
    return len({p.device for p in model.parameters()}) > 1
