"""The lossless verifier: greedy exact match at T=0, recursive rejection sampling at T>0.

At T>0 each node's children are tried in order (SpecInfer / EAGLE style): child x is
accepted with probability min(1, p(x)/q(x)); after a rejection the target
distribution becomes the residual norm(max(p - q, 0)) and x is removed from q, which
is exact when the children were drawn from q in that order without replacement.
Children chosen deterministically are treated as drawn from a point mass, so any
drafter is verified losslessly.
"""

from __future__ import annotations

import torch

from specbench.engine.parts import Acceptance, Verifier
from specbench.engine.sampling import Sampling, sample
from specbench.engine.tree import DraftTree


class StandardVerifier(Verifier):
    def accept(
        self,
        tree: DraftTree,
        logits: torch.Tensor,
        sampling: Sampling,
        generator: torch.Generator | None,
    ) -> Acceptance:
        if sampling.greedy:
            return greedy_accept(tree, logits)
        return self.sample_accept(tree, logits, sampling, generator)

    def sample_accept(self, tree, logits, sampling, generator) -> Acceptance:
        path = [0]
        while True:
            node = path[-1]
            p = sampling.probs(logits[node])
            child = try_children(tree, node, p, generator)
            if child is None:
                return Acceptance(path, sample(p, generator))
            path.append(child)


def greedy_accept(tree: DraftTree, logits: torch.Tensor) -> Acceptance:
    """Follow the target's argmax down the tree as long as a child carries it."""
    path = [0]
    while True:
        best = int(logits[path[-1]].argmax())
        match = [c for c in tree.children(path[-1]) if tree.tokens[c] == best]
        if not match:
            return Acceptance(path, best)
        path.append(match[0])


def try_children(tree: DraftTree, node: int, p: torch.Tensor, generator) -> int | None:
    """Recursive rejection sampling over `node`'s children. Returns the accepted child,
    or None after updating `p` in place to the residual to sample the correction from."""
    children = tree.children(node)
    if not children:
        return None
    q = tree.child_dists.get(node)
    q = q.clone() if q is not None else None
    for child in children:
        token = tree.tokens[child]
        if q is None or q[token] <= 0:
            q_child = torch.zeros_like(p)
            q_child[token] = 1.0
        else:
            q_child = q / q.sum()
        ratio = p[token] / q_child[token]
        if torch.rand((), generator=generator, device=p.device) < ratio:
            return child
        residual = (p - q_child).clamp_min(0)
        if residual.sum() > 0:
            p.copy_(residual / residual.sum())
        if q is not None:
            q[token] = 0
    return None
