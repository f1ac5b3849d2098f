"""The lossless verifier: greedy exact match at T=0, recursive rejection sampling at T>0.

At T>0 each node's children are tried in order (SpecInfer / EAGLE style): child x is
accepted with probability min(1, p(x)/q(x)); after a rejection the target
distribution becomes the residual norm(max(p - q, 0)) and x is removed from q, which
is exact when the children were drawn from q in that order without replacement.
Children chosen deterministically are treated as drawn from a point mass, so any
drafter is verified losslessly.

Both run for every node of every row at once on the device and are read back in one
transfer; the path is walked on the host. At T>0 the sibling tests of deterministic children
loop over sibling rank on [nodes] columns (only the children's own probabilities change), so
the vocabulary is crossed a fixed number of times whatever the tree's width.
"""

from __future__ import annotations

import torch

from specbench.engine.parts import Acceptance, Verifier, read_back
from specbench.engine.sampling import draw_rows
from specbench.engine.transfer import device_tensor, on_device
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


def rejection_sample(
    trees: list[DraftTree], probs: torch.Tensor, generators: list
) -> tuple[torch.Tensor, torch.Tensor]:
    """Recursive rejection sampling at every node of every row at once, `probs` the target's
    distributions at all nodes (rows' trees concatenated). Per node: the rank among its
    children of the one accepted (-1: none), and a token drawn from what remains after all
    its children were rejected (the correction where the path ends there; at a leaf, p)."""
    children = [[tree.tokens[c] for c in row] for tree in trees for row in tree.child_lists()]  # tokens, per node
    width = max(map(len, children), default=0)
    if not width:
        return torch.full((len(probs),), -1, dtype=torch.long, device=probs.device), sample_rows(
            trees, probs, generators
        )
    tokens, valid = sibling_tokens(children, width, probs.device)
    uniforms = sibling_uniforms(trees, generators, width, probs.device)
    # deterministic children are point masses (q(x) = 1): a rejected child's p(x) drops to 0
    point = torch.ones(len(probs), width, dtype=torch.float64, device=probs.device)
    accepted, p = sibling_tests(probs, tokens, valid, uniforms, point, inclusive=False)
    drawn = [start + node for tree, start in zip(trees, row_starts(trees)) for node in tree.child_dists]
    if drawn:  # children drawn from a draft distribution q: the residual max(p - q, 0) spans the vocabulary
        index = device_tensor(drawn, probs.device)
        ranks, residual = drawn_tests(
            probs[index], draft_dists(trees, probs), tokens[index], valid[index], uniforms[index]
        )
        accepted, p = accepted.index_copy(0, index, ranks), p.index_copy(0, index, residual)
    return accepted, sample_rows(trees, p, generators)


def sibling_tokens(children: list[list[int]], width: int, device) -> tuple[torch.Tensor, torch.Tensor]:
    """[nodes, width] child tokens in rank order and which are real. Padding repeats the
    node's first child (0 for a leaf), so a scatter of per-child values writes no token twice
    with different values."""
    tokens = device_tensor([row + [row[0] if row else 0] * (width - len(row)) for row in children], device)
    valid = device_tensor([[True] * len(row) + [False] * (width - len(row)) for row in children], device)
    return tokens, valid


def sibling_tests(
    p: torch.Tensor, tokens: torch.Tensor, valid: torch.Tensor, uniforms: torch.Tensor, q: torch.Tensor, inclusive: bool
) -> tuple[torch.Tensor, torch.Tensor]:
    """Each node's children tested in rank order, child x accepted when its uniform is below
    (`inclusive`: at most) p(x) / q(x), p as the earlier tests left it; after each test p(x)
    drops to max(p(x) - q(x), 0), renormalised. `q` [nodes, width] is each child's own draft
    probability (1: a point mass). Only the children's probabilities change, so the loop runs
    on [nodes] columns and p is rebuilt once: two passes over the vocabulary, whatever the
    tree's width. Per node: the accepted child's rank (-1: none) and p as the tests left it."""
    mass = p.gather(1, tokens).double()  # the children's unnormalised probabilities (p's rows sum to 1)
    total = torch.ones(len(p), dtype=torch.float64, device=p.device)
    accepted = torch.full((len(p),), -1, dtype=torch.long, device=p.device)
    left = mass.clone()
    for rank in range(tokens.shape[1]):
        ok = valid[:, rank]
        p_x = mass[:, rank] / total
        ratio = p_x / q[:, rank]
        hit = uniforms[:, rank].double() <= ratio if inclusive else uniforms[:, rank].double() < ratio
        accepted = torch.where(ok & (accepted < 0) & hit, rank, accepted)
        lowered = (p_x - q[:, rank]).clamp_min(0.0) * total
        left[:, rank] = torch.where(ok, lowered, mass[:, rank])
        total = torch.where(ok, total - mass[:, rank] + lowered, total)
    left = torch.where(valid, left, left[:, :1])  # padding repeats the first child: the same value
    rebuilt = p.scatter(1, tokens, left.to(p.dtype)) / total.clamp_min(1e-30).to(p.dtype)[:, None]
    return accepted, torch.where((total > 0)[:, None], rebuilt, p)


def drawn_tests(
    p: torch.Tensor, q: torch.Tensor, tokens: torch.Tensor, valid: torch.Tensor, uniforms: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    """Recursive rejection sampling at nodes whose children were drawn from q in rank order
    without replacement: child x accepted with probability min(1, p(x)/q(x)); after a
    rejection p becomes norm(max(p - q, 0)) and x leaves q. Per node: the accepted rank (-1:
    none) and the residual."""
    accepted = torch.full((len(p),), -1, dtype=torch.long, device=p.device)
    for rank in range(tokens.shape[1]):
        token, ok = tokens[:, rank : rank + 1], valid[:, rank]
        point = torch.zeros_like(p).scatter_(1, token, 1.0)  # a child q never proposed: a point mass
        q_child = torch.where(q.gather(1, token) > 0, q / q.sum(-1, keepdim=True).clamp_min(1e-30), point)
        ratio = p.gather(1, token) / q_child.gather(1, token)
        accepted = torch.where(ok & (accepted < 0) & (uniforms[:, rank] < ratio[:, 0]), rank, accepted)
        residual = (p - q_child).clamp_min(0)
        total = residual.sum(-1, keepdim=True)
        p = torch.where(ok[:, None] & (total > 0), residual / total.clamp_min(1e-30), p)
        q = q.scatter(1, token, 0.0)
    return accepted, p


def sample_rows(trees: list[DraftTree], probs: torch.Tensor, generators: list) -> torch.Tensor:
    """One token per node from `probs` (rows' trees concatenated), each row with its own generator."""
    starts = row_starts(trees)
    return torch.cat(
        [draw_rows(probs[start : start + len(tree)], g) for tree, start, g in zip(trees, starts, generators)]
    )


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


def draft_dists(trees: list[DraftTree], probs: torch.Tensor) -> torch.Tensor:
    """[drawn nodes, V]: the draft distribution each node in a tree's child_dists drew its
    children from, in the order rejection_sample lists those nodes."""
    return torch.stack(
        [on_device(dist, probs.device).to(probs.dtype) for tree in trees for dist in tree.child_dists.values()]
    )
