"""CUDA graphs of a forward with static shapes: the width buckets a forward is padded to,
and `Replay`, which captures a function over static input buffers once and replays it.

A CUDA graph replays fixed kernels on fixed addresses: every call it replays has the same
shapes and reads its inputs from the same buffers, and nothing in it may wait for the host.
The forward it captures is LeanTreeLM's static-shape mode (StaticTreeLM in
specbench/engine/lean.py). Only `capture` is CUDA-specific; off a GPU a Replay calls its
function on the same static buffers, which is what the tests check on a CPU.

Captures are one-off work, not decoding: `CAPTURES` counts them and their seconds, and the
decoding loop takes that time off its clock. Each capture starts with cuBLAS's cached
workspaces cleared (as torch's own CUDA graph trees do), so a graph never shares a
workspace kept from eager work or from a graph captured into another memory pool; the
owner of a set of graphs gives them a pool of their own and drops the set as a whole
(StaticTreeLM: one pool per cache, every graph of the old cache released before the next
is captured), the recapture pattern that hit `use_count > 0` asserts in torch 2.9.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import torch

BUCKETS = (1, 2, 4, 8, 16, 32, 64)
WARMUP_CALLS = 3  # eager calls on a side stream before a capture, as torch's CUDA-graph notes ask


@dataclass
class Captures:
    """Graph captures in this process: how many, and the wall seconds they took."""

    count: int = 0
    seconds: float = 0.0


CAPTURES = Captures()


def bucket(width: int) -> int | None:
    """The smallest bucket that holds `width` new tokens per row (None: wider than all)."""
    return next((b for b in BUCKETS if b >= width), None)


def capture(fn, inputs: tuple[torch.Tensor, ...], pool) -> tuple[torch.cuda.CUDAGraph, object]:
    """(the CUDA graph of fn(*inputs), its outputs, rewritten in place by each replay).
    Warm-up runs on a side stream first; capture records without running."""
    started = time.perf_counter()
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(WARMUP_CALLS):
            fn(*inputs)
    torch.cuda.current_stream().wait_stream(side)
    clear_cublas_workspaces()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph, pool=pool):
        outputs = fn(*inputs)
    torch.cuda.synchronize()
    CAPTURES.count += 1
    CAPTURES.seconds += time.perf_counter() - started
    return graph, outputs


def clear_cublas_workspaces() -> None:
    """Drop cuBLAS's cached workspaces so the next capture allocates its own in its pool."""
    clear = getattr(torch._C, "_cuda_clearCublasWorkspaces", None)
    if clear is not None:
        clear()


def new_pool():
    """A private memory pool for one set of graphs (None off a GPU)."""
    return torch.cuda.graph_pool_handle() if torch.cuda.is_available() else None


class Replay:
    """`fn` over static input buffers: each call copies its inputs into them, then replays
    fn's CUDA graph (captured at construction) on a GPU, or calls fn on them elsewhere.
    Outputs of a replay are the graph's own tensors: read them before the next call."""

    def __init__(self, fn, inputs: tuple[torch.Tensor, ...], pool=None):
        self.fn = fn
        self.inputs = tuple(x.clone() for x in inputs)
        self.graph, self.outputs = capture(fn, self.inputs, pool) if self.inputs[0].is_cuda else (None, None)

    def __call__(self, *inputs: torch.Tensor):
        for buffer, x in zip(self.inputs, inputs):
            buffer.copy_(x)
        if self.graph is None:
            return self.fn(*self.inputs)
        self.graph.replay()
        return self.outputs

    def release(self) -> None:
        """Free the graph's memory now (its pool's blocks go back once every graph in it is released)."""
        if self.graph is not None:
            self.graph.reset()
            self.graph = self.outputs = None
