"""Scaled dot-product attention as the engine and the draft heads call it: grouped-query heads
laid out for a fused kernel, the kernel chosen in a fixed order on a GPU, and a record of
which kernel each kind of call got.

On a GPU PyTorch picks among its SDPA kernels by a priority of its own, and on sm90 with CUDA
13 and a recent cuDNN it prefers cuDNN's, which takes a 4-D mask and has open mask bugs
(pytorch#122695, #134001). So the engine's forwards run under `kernels`: the
memory-efficient kernel first (a mask of any shape), then flash (no mask: a one-token
decode), then math; cuDNN is never chosen. SDPA's `enable_gqa` with a mask has only the math
kernel on a GPU (fp32 scores, K and V copied per group), so there each KV head's group of
query heads is folded into query rows, the mask repeated per group (`fold_mask`); a forward
wider than FOLD_WIDTH (a prefill) copies K and V per group instead, which costs the size of
its queries where a folded mask would cost groups x its rows x every column. On a CPU
`enable_gqa` keeps its fused kernel, measured faster than either layout, and the default
kernel order holds no cuDNN.

`KERNELS_RAN` maps each kind of call (device, dtype, layout, batch, query rows) to the
kernel SDPA chose for it, read with torch's own chooser under the same settings: what a
run's device check reports.
"""

from __future__ import annotations

import contextlib

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

KERNELS = (SDPBackend.EFFICIENT_ATTENTION, SDPBackend.FLASH_ATTENTION, SDPBackend.MATH)  # in this order, on a GPU
FOLD_WIDTH = 64  # the widest forward whose grouped queries are folded on a GPU: the widest width bucket
KERNELS_RAN: dict[tuple, str] = {}


def kernels(device: torch.device):
    """The SDPA kernel order for calls on `device` (enter once per forward: the context
    costs about as much as one attention call)."""
    if device.type != "cuda":
        return contextlib.nullcontext()
    return sdpa_kernel(list(KERNELS), set_priority=True)


def fold_mask(mask: torch.Tensor, groups: int) -> torch.Tensor:
    """A mask [..., n, columns] as folded queries read it: each group's n rows in turn."""
    return mask.repeat(*[1] * (mask.dim() - 2), groups, 1) if groups > 1 else mask


def attend(
    q: torch.Tensor,
    keys: torch.Tensor,
    values: torch.Tensor,
    mask: torch.Tensor | None,
    kv_heads: int,
    float_decode: bool = False,
    gpu: bool | None = None,
) -> torch.Tensor:
    """Attention of q [B, h, n, d] over keys and values [B, kv, columns, d] under `mask`
    (True: attend): None (every column), [B or 1, 1, n, span] or already folded
    [B or 1, 1, h/kv * n, span], where span <= columns are the columns attended (the
    rest are not read). `float_decode`: a one-token forward in a reduced dtype attends in
    fp32 (a CPU without native half-precision attention). `gpu`: lay the call out as on a GPU
    (None: where q is; the tests run a GPU's layouts on a CPU)."""
    gpu = q.is_cuda if gpu is None else gpu
    batch, heads, n, d = q.shape
    groups = heads // kv_heads
    if mask is not None:
        keys, values = keys[:, :, : mask.shape[-1]], values[:, :, : mask.shape[-1]]
    folded = groups > 1 and mask is not None and mask.shape[-2] == groups * n
    if groups > 1 and gpu and not folded and n <= FOLD_WIDTH:
        mask, folded = (None if mask is None else fold_mask(mask, groups)), True
    if folded:
        rows = q.reshape(batch, kv_heads, groups * n, d)
        return _sdpa("folded", rows, keys, values, mask).reshape(batch, heads, n, d)
    if groups > 1 and gpu:
        keys, values = keys.repeat_interleave(groups, 1), values.repeat_interleave(groups, 1)
        return _sdpa("K/V per group", q, keys, values, mask)
    if float_decode and n == 1 and q.dtype != torch.float32:
        return _sdpa("fp32 decode", q.float(), keys.float(), values.float(), mask, groups > 1).to(q.dtype)
    return _sdpa("grouped in SDPA" if groups > 1 else "plain", q, keys, values, mask, groups > 1)


def _sdpa(layout: str, q, keys, values, mask, gqa: bool = False) -> torch.Tensor:
    if not torch.compiler.is_compiling():
        key = (q.device.type, str(q.dtype).removeprefix("torch."), layout, q.shape[0], q.shape[2])
        if key not in KERNELS_RAN:
            KERNELS_RAN[key] = chosen_kernel(q, keys, values, mask, gqa)
    return F.scaled_dot_product_attention(q, keys, values, attn_mask=mask, enable_gqa=gqa)


def chosen_kernel(q, keys, values, mask, gqa: bool = False) -> str:
    """The kernel SDPA runs for this call under the current settings, by torch's own chooser
    (a private function: 'unknown' where this torch lacks it)."""
    choose = getattr(torch, "_fused_sdp_choice", None)
    if choose is None:
        return "unknown"
    return SDPBackend(choose(q, keys, values, mask, enable_gqa=gqa)).name.lower()
