"""One draft-tree layer's expansion, timed on synthetic distributions (TALON Appendix E.6,
Figure 15): EAGLE's dual top-K (each parent's top-K children, then the K best of those K x K
by path probability) against TALON's confidence gate (every child with p(u) >= mu * max p(u),
by an element-wise mask and its non-zero indices, cut to the budget left by path
probability). The parents' next-token distributions follow a Zipf law P(r) ~ 1/r^alpha over a
shuffled vocabulary: alpha 0.7 (high entropy), 1.35 (natural language), 5.0 (deterministic).
Each case: `warmup` untimed calls, then `repeats` timed ones; the figure shows their mean.

These are the two operations as the appendix describes them, on tensors alone: specbench's
tree policies add per-node bookkeeping (trees/eagle.py, trees/talon.py) that this leaves out.

    python -m specbench.trees.talon_expansion --out results/talon/cpu/figure15.csv
"""

from __future__ import annotations

import argparse
import math
import sys
import time
from pathlib import Path

import pandas as pd
import torch

VOCABS = [32000, 128256, 151936]  # Llama-2/Vicuna, Llama-3, Qwen3 vocabularies (the paper's 32K, 128K, 152K)
ALPHAS = [0.7, 1.35, 5.0]
PARENTS = 10  # EAGLE's K parents at every depth past the first (K = 10, TALON E.1)
TOP_K = 10
MU = 0.03
ROOM = 50  # budget left for the layer: N = 60 less the root and the first layer's 10


def zipf_logprobs(parents: int, vocab: int, alpha: float, generator: torch.Generator) -> torch.Tensor:
    """[parents, vocab] log-probabilities: a Zipf law over ranks, each row over its own shuffle of the vocabulary."""
    by_rank = -alpha * torch.log(torch.arange(1, vocab + 1, dtype=torch.float32))
    by_rank -= torch.logsumexp(by_rank, 0)
    order = torch.rand(parents, vocab, generator=generator).argsort(dim=1)
    return by_rank[order]


def eagle_layer(
    parent_logps: torch.Tensor, logps: torch.Tensor, top_k: int = TOP_K
) -> tuple[torch.Tensor, torch.Tensor]:
    """EAGLE's dual top-K: (parent, token) of the top_k best of each parent's top_k children by path log-prob."""
    children = logps.topk(top_k, dim=-1)
    best = (parent_logps[:, None] + children.values).flatten().topk(top_k).indices
    return best // top_k, children.indices.flatten()[best]


def talon_layer(
    parent_logps: torch.Tensor, logps: torch.Tensor, mu: float = MU, room: int = ROOM
) -> tuple[torch.Tensor, torch.Tensor]:
    """TALON's gate (Algorithm 2, lines 18-23): (parent, token) of every child with p(u) >= mu * max p(u),
    the `room` most probable when more pass."""
    paths = parent_logps[:, None] + logps
    parent, token = (paths >= paths.max() + math.log(mu)).nonzero(as_tuple=True)
    if len(parent) > room:
        kept = paths[parent, token].topk(room).indices
        parent, token = parent[kept], token[kept]
    return parent, token


LAYERS = {"eagle": eagle_layer, "talon": talon_layer}


def measure(
    vocabs: list[int], alphas: list[float], repeats: int, warmup: int, device: str, seed: int = 0
) -> pd.DataFrame:
    """One row per timed call: vocab, alpha, method, repeat, seconds, and the device that ran it."""
    generator = torch.Generator().manual_seed(seed)
    rows = []
    for vocab in vocabs:
        for alpha in alphas:
            logps = zipf_logprobs(PARENTS, vocab, alpha, generator).to(device)
            parent_logps = zipf_logprobs(1, PARENTS, alpha, generator)[0].to(device)  # the parents' own path log-probs
            for method, layer in LAYERS.items():
                for repeat in range(-warmup, repeats):
                    _sync(device)
                    start = time.perf_counter()
                    layer(parent_logps, logps)
                    _sync(device)
                    if repeat >= 0:
                        rows.append(
                            {
                                "vocab": vocab,
                                "alpha": alpha,
                                "method": method,
                                "repeat": repeat,
                                "seconds": time.perf_counter() - start,
                                "device": device,
                            }
                        )
    return pd.DataFrame(rows)


def _sync(device: str) -> None:
    if device.startswith("cuda"):
        torch.cuda.synchronize()


def speedups(timings: pd.DataFrame) -> pd.DataFrame:
    """Per vocab and alpha: mean seconds of each method and EAGLE's over TALON's."""
    means = timings.pivot_table(
        index=["vocab", "alpha"], columns="method", values="seconds", aggfunc="mean"
    ).reset_index()
    return means.assign(speedup=means["eagle"] / means["talon"])


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        prog="python -m specbench.trees.talon_expansion",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--out", type=Path, required=True, help="CSV of every timed call")
    parser.add_argument("--vocabs", type=int, nargs="+", default=VOCABS)
    parser.add_argument("--alphas", type=float, nargs="+", default=ALPHAS)
    parser.add_argument("--repeats", type=int, default=100)
    parser.add_argument("--warmup", type=int, default=20)
    parser.add_argument("--device", default="cpu")
    parser.error = lambda message: sys.exit(print(f"error: {message}", file=sys.stderr) or 2)  # one line, no usage dump
    args = parser.parse_args(argv)
    if min(args.vocabs) <= max(PARENTS, TOP_K) or min(args.alphas) <= 0 or args.repeats < 1 or args.warmup < 0:
        parser.error(f"--vocabs must exceed {max(PARENTS, TOP_K)}, --alphas be > 0, --repeats >= 1 and --warmup >= 0")
    if args.device.startswith("cuda") and not torch.cuda.is_available():
        parser.error(f"--device {args.device}: no CUDA device here")
    timings = measure(args.vocabs, args.alphas, args.repeats, args.warmup, args.device)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    timings.to_csv(args.out, index=False)
    print(speedups(timings).to_string(index=False))


if __name__ == "__main__":
    main()
