"""The lossless verifier: greedy exact match at T=0, recursive rejection sampling at T>0.

At T>0 each node's children are tried in order (SpecInfer / EAGLE style): child x is
accepted with probability min(1, p(x)/q(x)); after a rejection the target
distribution becomes the residual norm(max(p - q, 0)) and x is removed from q, which
is exact when the children were drawn from q in that order without replacement.
Children chosen deterministically are treated as drawn from a point mass, so any
drafter is verified losslessly.

Both run for every node of every row at once on the device (the test at T>0 loops over
sibling rank only) and are read back in one transfer; the path is walked on the host.
"""

from __future__ import annotations

import torch

from specbench.engine.parts import Acceptance, Verifier, read_back
from specbench.engine.tree import DraftTree


class StandardVerifier(Verifier):
    def accept_rows(self, trees, logits, sampling, generators) -> list[Acceptance]:
        if sampling.greedy:
            return greedy_accept(trees, logits)
        probs = sampling.probs(torch.cat(logits))
        accepted, correction = rejection_sample(trees, probs, generators)
        out = []
        for tree, (ranks, tokens) in zip(trees, read_back(trees, accepted, correction)):
            children = tree.child_lists()
            path = [0]
            while ranks[path[-1]] >= 0:
                path.append(children[path[-1]][int(ranks[path[-1]])])
            out.append(Acceptance(path, int(tokens[path[-1]])))
        return out


def greedy_accept(trees: list[DraftTree], logits: list[torch.Tensor]) -> list[Acceptance]:
    """Follow the target's argmax down each tree as long as a child carries it (the argmax
    at every node of every row read in one transfer)."""
    out = []
    for tree, (best,) in zip(trees, read_back(trees, torch.cat(logits).argmax(-1))):
        path = greedy_path(tree, best)
        out.append(Acceptance(path, int(best[path[-1]])))
    return out


def greedy_path(tree: DraftTree, best: list[float]) -> list[int]:
    """From the root, the first child carrying its parent's `best` token, as long as there is one."""
    children = tree.child_lists()
    path = [0]
    while True:
        match = next((c for c in children[path[-1]] if tree.tokens[c] == best[path[-1]]), None)
        if match is None:
            return path
        path.append(match)


def rejection_sample(trees: list[DraftTree], probs: torch.Tensor, generators: list) -> tuple[torch.Tensor, torch.Tensor]:
    """Recursive rejection sampling at every node of every row at once, `probs` the target's
    distributions at all nodes (rows' trees concatenated). Per node: the rank among its
    children of the one accepted (-1: none), and a token drawn from what remains after all
    its children were rejected (the correction where the path ends there; at a leaf, p)."""
    p = probs
    children = [[tree.tokens[c] for c in row] for tree in trees for row in tree.child_lists()]  # tokens, per node
    width = max(map(len, children), default=0)
    accepted = torch.full((len(p),), -1, dtype=torch.long, device=p.device)
    if width:
        tokens = torch.tensor([row + [0] * (width - len(row)) for row in children], device=p.device)
        valid = torch.tensor([[True] * len(row) + [False] * (width - len(row)) for row in children], device=p.device)
        q = _draft_dists(trees, probs)
        uniforms = sibling_uniforms(trees, generators, width, p.device)
        for rank in range(width):
            token, ok = tokens[:, rank : rank + 1], valid[:, rank]
            q_token = q.gather(1, token)
            point = torch.zeros_like(p).scatter_(1, token, 1.0)
            q_child = torch.where(q_token > 0, q / q.sum(-1, keepdim=True).clamp_min(1e-30), point)
            ratio = p.gather(1, token) / q_child.gather(1, token)
            accepted = torch.where(ok & (accepted < 0) & (uniforms[:, rank] < ratio[:, 0]), rank, accepted)
            residual = (p - q_child).clamp_min(0)
            total = residual.sum(-1, keepdim=True)
            p = torch.where(ok[:, None] & (total > 0), residual / total.clamp_min(1e-30), p)
            q = q.scatter(1, token, 0.0)
    return accepted, sample_rows(trees, p, generators)


def sample_rows(trees: list[DraftTree], probs: torch.Tensor, generators: list) -> torch.Tensor:
    """One token per node from `probs` (rows' trees concatenated), each row with its own generator."""
    starts = row_starts(trees)
    return torch.cat([
        torch.multinomial(probs[start : start + len(tree)], 1, generator=g)[:, 0] for tree, start, g in zip(trees, starts, generators)
    ])


def sibling_uniforms(trees: list[DraftTree], generators: list, width: int, device) -> torch.Tensor:
    """[nodes of all rows, width] uniforms for the sibling tests, each row's drawn from its own
    generator as [its nodes, its own widest sibling count] (so a row draws the same numbers
    alone as in any batch), padded to `width`."""
    blocks = []
    for tree, g in zip(trees, generators):
        own = max(map(len, tree.child_lists()))
        drawn = torch.rand(len(tree), own, generator=g, device=device)
        blocks.append(torch.nn.functional.pad(drawn, (0, width - own), value=1.0))
    return torch.cat(blocks)


def row_starts(trees: list[DraftTree]) -> list[int]:
    starts, total = [], 0
    for tree in trees:
        starts.append(total)
        total += len(tree)
    return starts


def _draft_dists(trees: list[DraftTree], probs: torch.Tensor) -> torch.Tensor:
    """Per node, the draft distribution its children were drawn from (zeros: chosen
    deterministically, verified as point masses)."""
    q = torch.zeros_like(probs)
    for tree, start in zip(trees, row_starts(trees)):
        for node, dist in tree.child_dists.items():
            q[start + node] = dist.to(q.dtype)
    return q
