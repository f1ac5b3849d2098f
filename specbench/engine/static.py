"""The lean forward with static shapes, for CUDA graphs (`engine.compile=static`; what
`auto` picks on a GPU).

A CUDA graph replays fixed kernels on fixed addresses: every forward it replays has the
same shapes and reads its inputs from the same buffers, and nothing in it may wait for
the host. So this forward pads each forward's width (the widest row's new tokens) up to a
bucket of BUCKETS, writes K and V at cache columns given as a tensor, attends over the
whole preallocated cache (SDPA in the model's dtype, bf16 on a GPU) under a mask that
hides the columns not in use, and reads RoPE from a table covering every cache column.
A padding row attends to itself alone and no real row attends to it, so real rows get
the logits of the unpadded forward. Forwards wider than the largest bucket (prefill)
run LeanTreeLM's own path on the same cache.

On a GPU each (batch size, bucket) is captured once as a graph (`Replay`); a new cache
(it grew, or the batch changed) captures again. On other devices the same static
forward runs eagerly: that is what the tests check on a CPU.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from specbench.engine.lean import LeanTreeLM

BUCKETS = (1, 2, 4, 8, 16, 32, 64)
WARMUP_CALLS = 3  # eager calls on a side stream before a capture, as torch's CUDA-graph notes ask


def bucket(width: int) -> int | None:
    """The smallest bucket that holds `width` new tokens per row (None: wider than all)."""
    return next((b for b in BUCKETS if b >= width), None)


def capture(fn, inputs: tuple[torch.Tensor, ...], pool) -> tuple[torch.cuda.CUDAGraph, object]:
    """(the CUDA graph of fn(*inputs), its outputs, rewritten in place by each replay).
    Warm-up runs on a side stream first; capture records without running."""
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(WARMUP_CALLS):
            fn(*inputs)
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph, pool=pool):
        outputs = fn(*inputs)
    return graph, outputs


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


class StaticTreeLM(LeanTreeLM):
    """LeanTreeLM whose forwards of up to max(BUCKETS) tokens per row have static shapes
    (see module docstring)."""

    def __init__(self, *args, **kwargs):
        self._replays: dict = {}
        self._replays_for: tuple = ()  # the cache and RoPE table the replays were built on
        super().__init__(*args, **kwargs)
        self._pool = torch.cuda.graph_pool_handle() if self.embed.is_cuda else None  # one pool: replays never overlap

    def _reserve(self, rows: int) -> None:
        """The cache for `rows` columns, and RoPE rows for all of its columns."""
        super()._reserve(rows)
        columns = self._k.shape[3]
        if self._rope.rows < columns:
            self._rope(self.embed, torch.tensor([columns - 1], device=self.device))

    @staticmethod
    def _cached_kv(k_cache, v_cache, k, v, start: int | torch.Tensor):
        """Write K and V at the cache columns `start` holds; attention reads the whole cache.
        An int `start`: a forward wider than every bucket, on LeanTreeLM's own path."""
        if isinstance(start, int):
            return LeanTreeLM._cached_kv(k_cache, v_cache, k, v, start)
        k_cache.index_copy_(2, start, k)
        v_cache.index_copy_(2, start, v)
        return k_cache, v_cache

    def _run(self, tokens: torch.Tensor, plan):
        batch, n = tokens.shape
        width = bucket(n)
        if width is None:
            return super()._run(tokens, plan)
        start = self._rows
        self._reserve(start + width)
        mask = torch.zeros(batch, 1, width, self._k.shape[3], dtype=torch.bool, device=self.device)
        mask[:, 0, :n, : start + n] = plan.mask if plan.mask is not None else plan.causal_mask()
        padding = torch.arange(n, width, device=self.device)
        mask[:, 0, padding, start + padding] = True
        inputs = (F.pad(tokens, (0, width - n)), F.pad(plan.positions, (0, width - n)), mask, torch.arange(start, start + width, device=self.device))
        normed, hidden = self._replay(inputs)
        self._rows = start + n
        return normed[:, :n], None if hidden is None else [h[:, :n] for h in hidden]

    def _replay(self, inputs: tuple[torch.Tensor, ...]):
        """The static forward over `inputs`, through the Replay of its shapes."""
        table = self._rope.tables[(self.embed.dtype, self.embed.device)]
        if len(self._replays_for) != 2 or self._replays_for[0] is not self._k or self._replays_for[1] is not table:
            self._replays, self._replays_for = {}, (self._k, table)  # graphs hold addresses: a new cache needs new ones
        key = (inputs[2].shape, bool(self.feature_layers))
        if key not in self._replays:
            self._replays[key] = Replay(self._static_forward, inputs, self._pool)
        return self._replays[key](*inputs)

    def _static_forward(self, tokens: torch.Tensor, positions: torch.Tensor, mask: torch.Tensor, columns: torch.Tensor):
        """The lean layers over padded `tokens` [B, W] at `positions`, attending as `mask`
        [B, 1, W, cache columns] says, their K and V written at `columns` [W]."""
        cos, sin = self._rope.tables[(self.embed.dtype, self.embed.device)]
        return self._layers(F.embedding(tokens, self.embed), cos[positions][:, None], sin[positions][:, None], mask, columns)
