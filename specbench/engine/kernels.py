"""CPU matmul kernels the lean forward and drafters run their linear layers on, and
`Compiled`, the record of which of them a target's forward uses: weights prepacked once
in oneDNN's layout, fp32 weights rounded to fp16 for FBGEMM, and weight-only int8.

`engine.compile` (see specbench/costs/compile.py) chooses among them per machine by timing
them; a drafter runs its weights as the target does (`pack_linears`)."""

from __future__ import annotations

import functools
import warnings
from dataclasses import dataclass

import torch
import torch.nn.functional as F


def pack(weight: torch.Tensor) -> torch.Tensor:
    """The weight in oneDNN's blocked layout, reordered once, for `packed_linear`: a plain
    F.linear reorders it on every call, which dominates small-batch CPU matmuls."""
    return torch.ops.mkldnn._reorder_linear_weight(weight.detach(), 1)


# torch deprecates FBGEMM's fp16-weight ops and warns once per process on each op's first
# call; they are still the fastest fp32 forward on an AVX2 CPU, so that warning (only it)
# is silenced where they are first tried, in has_fp16_weights. What replaces them when
# they go: docs/fp16-weights.md
FP16_OPS_DEPRECATED = r"fbgemm_(pack_gemm_matrix_fp16|linear_fp16_weight_fp32_activation) is deprecated"


@functools.cache
def has_fp16_weights() -> bool:
    """Whether this torch still has FBGEMM's fp16-weight ops and they run here (x86 CPUs):
    the fp16-weights choice is offered only then. Tried once on a tiny matrix, which also
    spends their once-per-process deprecation warning with it ignored."""
    try:
        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", message=FP16_OPS_DEPRECATED, category=UserWarning)
            packed = torch.fbgemm_pack_gemm_matrix_fp16(torch.ones(1, 1))
            torch.fbgemm_linear_fp16_weight_fp32_activation(torch.ones(1, 1), packed, None)
    except (AttributeError, RuntimeError):
        return False
    return True


def pack_fp16(weight: torch.Tensor) -> torch.Tensor:
    """An fp32 weight rounded to fp16 and packed for FBGEMM's fp16-weight matmul
    (`fp16_linear`): half the bytes to read, fp32 activations and accumulation."""
    if not has_fp16_weights():
        raise RuntimeError(
            "this torch has no FBGEMM fp16-weight ops (see docs/fp16-weights.md); run with engine.fp16_weights=off"
        )
    return torch.fbgemm_pack_gemm_matrix_fp16(weight.detach().float().contiguous())


def fp16_linear(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None = None) -> torch.Tensor:
    """x @ W.T on a `pack_fp16` weight. FBGEMM streams the fp16 weight once for all rows
    (AMD EPYC Zen 3, AVX2, 2 threads, SmolLM2-135M forward: 38 ms at one token and 47 ms at
    four, against fp32's 60 and 93 ms and bf16's 38 and 88 ms)."""
    out = torch.fbgemm_linear_fp16_weight_fp32_activation(x.reshape(-1, x.shape[-1]), weight, bias)
    return out.view(*x.shape[:-1], out.shape[-1])


def packs(dtype: torch.dtype) -> bool:
    """Whether oneDNN packs weights of this dtype on this CPU: bf16 needs avx512bw/vl/dq
    or avx_ne_convert, so an AVX2-only CPU (AMD EPYC Zen 3) refuses it."""
    try:
        pack(torch.zeros(16, 16, dtype=dtype))
    except RuntimeError:
        return False
    return True


def packed_linear(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None = None) -> torch.Tensor:
    return torch.ops.mkldnn._linear_pointwise(x, weight, bias, "none", [], "")


def quantize_int8(weight: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(int8 weight, one scale per output row in the weight's dtype): symmetric, each row's
    largest magnitude at 127, for torch's weight-only int8 matmul."""
    w = weight.detach().float()
    scales = w.abs().amax(dim=1).clamp_min(torch.finfo(torch.float32).tiny) / 127
    return (w / scales[:, None]).round().clamp(-127, 127).to(torch.int8).contiguous(), scales.to(weight.dtype)


def int8_linear(
    x: torch.Tensor, weight: torch.Tensor, scales: torch.Tensor, bias: torch.Tensor | None = None
) -> torch.Tensor:
    out = torch.ops.aten._weight_int8pack_mm(x.reshape(-1, x.shape[-1]), weight, scales).reshape(
        *x.shape[:-1], weight.shape[0]
    )
    return out if bias is None else out + bias


def paired_int8_linear(
    x: torch.Tensor, weight: tuple[torch.Tensor, torch.Tensor], bias: torch.Tensor | None = None
) -> torch.Tensor:
    """int8_linear with the (int8 weight, scales) pair quantize_int8 gives, as the lean layer calls its kernel."""
    return int8_linear(x, *weight, bias)


class PackedLinear(torch.nn.Module):
    """An nn.Linear whose weight is also kept packed (`pack`), used for inputs of at least
    `packed_from` rows: a drafter's projections then skip the per-call reorder as the
    target's do (AMD EPYC Zen 5, bf16, 2 threads: an EAGLE-3 head forward 1.8 -> 1.45 ms).
    A drafter's copy may also keep int8 weights (quantize_int8) for inputs of fewer than
    `int8_below` rows (see Compiled.int8_drafts_below). With `fp16` every input runs on
    fp16 weights (Compiled.fp16_weights) instead. `weight` and `bias` stay the plain
    tensors, for other inputs and for readers."""

    def __init__(self, linear: torch.nn.Linear, packed_from: int | None, int8_below: int = 0, fp16: bool = False):
        super().__init__()
        self.weight, self.bias, self.packed_from, self.int8_below = linear.weight, linear.bias, packed_from, int8_below
        self.fp16 = pack_fp16(linear.weight) if fp16 else None
        self.packed = pack(linear.weight) if packed_from is not None and not fp16 else None
        self.int8 = quantize_int8(linear.weight) if int8_below > 0 and not fp16 else None

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.fp16 is not None:
            return fp16_linear(x, self.fp16, self.bias)
        rows = x.numel() // x.shape[-1]
        if rows < self.int8_below:
            return int8_linear(x, *self.int8, self.bias)
        if self.packed is not None and rows >= self.packed_from:
            return packed_linear(x, self.packed, self.bias)
        return F.linear(x, self.weight, self.bias)


def pack_linears(module: torch.nn.Module, compiled: Compiled) -> torch.nn.Module:
    """A drafter `module` (an inference copy: packed weights take no gradient) with every
    nn.Linear a PackedLinear, packed and/or int8 as `compiled` says for drafters; unchanged
    when it says neither (packing does not pay on this machine, or this dtype cannot be
    packed, and int8 weights are not faster)."""
    if compiled.packed_from is None and not compiled.int8_drafts_below and not compiled.fp16_weights:
        return module
    for parent in list(module.modules()):
        for name, child in list(parent.named_children()):
            if type(child) is torch.nn.Linear:
                setattr(
                    parent,
                    name,
                    PackedLinear(child, compiled.packed_from, compiled.int8_drafts_below, compiled.fp16_weights),
                )
    return module


@dataclass(frozen=True)
class Compiled:
    """How the lean forward runs its decoder layers (`engine.compile`).
    packed_from: forwards over at least this many tokens (rows x new tokens) use
    oneDNN-packed weights, smaller ones the plain weights (None: never packed).
    torch: the decoder layer goes through torch.compile (one graph for all layers,
    dynamic shapes, so tree sizes do not recompile).
    float_attention: forwards of one token per row (AR steps, batched or not) attend in
    fp32 over a cast of the cache: torch's bf16 SDPA kernel for a single query ran 3-5x
    slower than the cast plus fp32 SDPA (AMD EPYC Zen 4, 2 threads: 0.19 vs 0.06 ms a layer
    at B=1, 2.7 vs 0.5 ms at B=16), while from 4 queries on bf16 wins; no-op in fp32.
    int8_drafts_below: drafters' linear layers (EAGLE, EAGLE-3, Medusa and Hydra heads, and
    draft models' projections and output layer) run on int8 weights for inputs of fewer
    than this many rows (0: never); the target's never do. A draft forward
    follows a target forward that has evicted the drafter's weights from cache, so at few
    rows reading half the bytes wins (AMD EPYC Zen 5, bf16, 2 threads: the EAGLE-3 head's
    6,144-row output layer 243 -> 140 us at one row), while torch's int8 kernel is slower
    than packed bf16 from ~16 rows, and in fp32 always. Drafts stay lossless: the target
    verifies every token.
    fp16_weights: an fp32 model's projections and output layer (target's and drafters', at
    every forward size, so AR and verification compute alike) run on its weights rounded
    to fp16 (`fp16_linear`), with fp32 activations: on an AVX2 CPU without native bf16 this
    reads bf16's bytes per token while multi-token forwards stay cheap. It changes the
    target's numbers (fp16 keeps 10 mantissa bits, bf16 7), so only hardware.dtype=auto or
    engine.fp16_weights=on chooses it.
    static: every forward of at most 64 tokens per row runs with static shapes (its width
    padded to a bucket, the whole preallocated cache attended under a mask;
    StaticTreeLM in engine/lean.py), captured as a CUDA graph per batch size and bucket on a GPU."""

    packed_from: int | None = None
    torch: bool = False
    float_attention: bool = False
    int8_drafts_below: int = 0
    fp16_weights: bool = False
    static: bool = False

    def __str__(self) -> str:
        parts = ([f"packed>={self.packed_from}"] if self.packed_from else []) + (["torch"] if self.torch else [])
        parts += (["fp32-attention"] if self.float_attention else []) + (
            [f"int8-drafts<{self.int8_drafts_below}"] if self.int8_drafts_below else []
        )
        parts += ["fp16-weights"] if self.fp16_weights else []
        parts += ["static"] if self.static else []
        return "+".join(parts) or "eager"

    def precision(self, dtype: str) -> str:
        """What a forward in `dtype` computes in, as a run reports it beside the raw dtype:
        fp16 weights and fp32 attention change the numbers, packing and int8 drafts do not
        (the target verifies every drafted token)."""
        if self.fp16_weights:
            return "fp32 activations on fp16 weights"
        if self.float_attention and dtype != "float32":
            return f"{dtype}, one-token attention in fp32"
        return dtype
