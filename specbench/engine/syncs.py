"""Counting host synchronisations: every read of a tensor's values into Python.

On a GPU each such read waits for the device to finish all queued work, so a decode step
should make a small, fixed number of them whatever the batch size or tree size. The
tests count them on CPU (where every tensor is "on the device"); the GPU check counts
them on CUDA, where only reads of device tensors are syncs.
"""

from __future__ import annotations

from collections import Counter
from contextlib import contextmanager

import torch

# Tensor methods that copy values to the host (nonzero and unique size their output from
# the values, so on a GPU they wait for them too)
READS = ("item", "tolist", "__bool__", "__int__", "__float__", "__index__", "cpu", "numpy", "nonzero", "unique")


@contextmanager
def counting_syncs(device: str | torch.device | None = None):
    """Within the block, count calls of READS on tensors (only those on `device`'s type,
    e.g. "cuda", when given). Yields a Counter by method name, filled as calls happen."""
    counts: Counter = Counter()
    kind = torch.device(device).type if device is not None else None
    originals = {name: getattr(torch.Tensor, name) for name in READS}

    def counted(name, original):
        def read(self, *args, **kwargs):
            if kind is None or self.device.type == kind:
                counts[name] += 1
            return original(self, *args, **kwargs)

        return read

    for name, original in originals.items():
        setattr(torch.Tensor, name, counted(name, original))
    try:
        yield counts
    finally:
        for name, original in originals.items():
            setattr(torch.Tensor, name, original)
