"""Counting host synchronisations: every read of a tensor's values into Python, and every
copy from the host to the device that blocks.

On a GPU each read waits for the device to finish all queued work, and so does a copy from
pageable host memory (`x.to("cuda")`, `torch.tensor(data, device="cuda")`, indexing a
device tensor with a Python list, which copies the list over first): a decode step should
make a small, fixed number of them whatever the batch size or tree size. Copies through
`engine.transfer.to_device` (pinned memory, non_blocking) do not wait and are not counted.

The tests count them on CPU, where every tensor is "on the device", so a copy counts when
it would block on CUDA: a `.to(device)` or `torch.tensor(..., device=...)` naming the
device without non_blocking, made outside LIBRARIES (a library moving a buffer it holds,
as transformers' rotary embedding does each call, is a no-op on CUDA that a CPU cannot tell
from a copy), and a list index into a tensor. The GPU check counts them on
CUDA, where only reads of device tensors and copies to the device count, beside torch's own
count (`torch.cuda.set_sync_debug_mode`).
"""

from __future__ import annotations

import sys
from collections import Counter
from contextlib import contextmanager

import torch

# Tensor methods that copy values to the host (nonzero and unique size their output from
# the values, so on a GPU they wait for them too)
READS = ("item", "tolist", "__bool__", "__int__", "__float__", "__index__", "cpu", "numpy", "nonzero", "unique")
# what the counter names the copies it counts
COPY = "copy to device"
LIBRARIES = ("torch", "transformers", "accelerate")  # on CPU, their `.to(device)` calls are taken as no-ops
LIST_INDEX = "list index"


def _device_of(args, kwargs) -> torch.device | None:
    """The device a `Tensor.to` / factory call names, if any."""
    for value in (kwargs.get("device"), *args):
        if isinstance(value, torch.device):
            return value
        if isinstance(value, str):
            try:
                return torch.device(value)
            except RuntimeError:
                continue
        if isinstance(value, torch.Tensor):  # .to(other): other's device
            return value.device
    return None


def _holds_list(index) -> bool:
    """Whether an index holds a Python list (copied to the indexed tensor's device first)."""
    if isinstance(index, list):
        return True
    return isinstance(index, tuple) and any(isinstance(part, list) for part in index)


def _holds_host_tensor(index) -> bool:
    parts = index if isinstance(index, tuple) else (index,)
    return any(isinstance(part, torch.Tensor) and part.device.type == "cpu" and part.dim() > 0 for part in parts)


@contextmanager
def counting_syncs(device: str | torch.device | None = None):
    """Within the block, count calls of READS on tensors and blocking copies to the device
    (only tensors on `device`'s type, e.g. "cuda", when given; "cpu" when not). Yields a
    Counter by method name (COPY and LIST_INDEX for copies), filled as calls happen."""
    counts: Counter = Counter()
    kind = torch.device(device).type if device is not None else None
    target = kind or "cpu"
    originals = {name: getattr(torch.Tensor, name) for name in READS}
    original_to, original_getitem, original_setitem = (
        torch.Tensor.to,
        torch.Tensor.__getitem__,
        torch.Tensor.__setitem__,
    )
    original_tensor = torch.tensor

    def ours() -> bool:  # not called from a library's code (two frames up: the patched method's caller)
        return target != "cpu" or sys._getframe(2).f_globals.get("__name__", "").split(".")[0] not in LIBRARIES

    def on_device(tensor: torch.Tensor) -> bool:
        return kind is None or tensor.device.type == kind

    def counted(name, original):
        def read(self, *args, **kwargs):
            if on_device(self):
                counts[name] += 1
            return original(self, *args, **kwargs)

        return read

    def to(self, *args, **kwargs):
        destination = _device_of(args, kwargs)
        blocking = not kwargs.get("non_blocking", False) and not any(a is True for a in args)
        if destination is not None and blocking and ours():
            # host to device (on CPU: a call that names the device)
            if destination.type == target and self.device.type == "cpu":
                counts[COPY] += 1
            elif destination.type == "cpu" and target != "cpu" and self.device.type == target:  # device to host: a read
                counts["cpu"] += 1
        return original_to(self, *args, **kwargs)

    def tensor(data, *args, **kwargs):
        destination = _device_of((), kwargs)
        if destination is not None and destination.type == target and ours():
            counts[COPY] += 1
        return original_tensor(data, *args, **kwargs)

    def indexed(index, self) -> bool:
        return on_device(self) and (_holds_list(index) or (target != "cpu" and _holds_host_tensor(index)))

    def getitem(self, index):
        if indexed(index, self):
            counts[LIST_INDEX] += 1
        return original_getitem(self, index)

    def setitem(self, index, value):
        if indexed(index, self):
            counts[LIST_INDEX] += 1
        if (
            isinstance(value, torch.Tensor)
            and target != "cpu"
            and self.device.type == target
            and value.device.type == "cpu"
            and value.dim() > 0
        ):
            counts[COPY] += 1
        return original_setitem(self, index, value)

    for name, original in originals.items():
        setattr(torch.Tensor, name, counted(name, original))
    torch.Tensor.to, torch.Tensor.__getitem__, torch.Tensor.__setitem__, torch.tensor = to, getitem, setitem, tensor
    try:
        yield counts
    finally:
        for name, original in originals.items():
            setattr(torch.Tensor, name, original)
        torch.Tensor.to, torch.Tensor.__getitem__, torch.Tensor.__setitem__, torch.tensor = (
            original_to,
            original_getitem,
            original_setitem,
            original_tensor,
        )
