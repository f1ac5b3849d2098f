"""Host values onto the device without waiting for it.

A copy from pageable host memory to a GPU is a stream synchronisation: the host waits until
the device has finished everything queued before it. The engine's per-step inputs (token
ids, positions, masks, path indices) go through `to_device` instead: staged in pinned memory
(torch's caching host allocator keeps each block until its copy has run) and copied with
non_blocking=True, so the host queues the next kernels at once. Off a GPU the host tensor is
the device tensor.
"""

from __future__ import annotations

import torch


def to_device(host: torch.Tensor, device: torch.device | str) -> torch.Tensor:
    """`host` (a CPU tensor) on `device`, copied without blocking the host; a tensor on
    `device` already is returned as it is."""
    device = torch.device(device)
    if host.device == device or device.type == "cpu":
        return host
    # pin_memory() keeps a view's strides, and copying a strided source goes through a pageable
    # temporary that the host waits on
    return host.contiguous().pin_memory().to(device, non_blocking=True)


def device_tensor(data, device: torch.device | str, dtype: torch.dtype | None = None) -> torch.Tensor:
    """torch.tensor(data, dtype) on `device`, copied without blocking the host."""
    return to_device(torch.tensor(data, dtype=dtype), device)


def on_device(tensor: torch.Tensor, device: torch.device | str) -> torch.Tensor:
    """`tensor` on `device`: itself where it is there already (a layer spread over GPUs
    leaves a hidden state on its own GPU: that copy is device to device)."""
    return tensor if tensor.device == torch.device(device) else tensor.to(device)
