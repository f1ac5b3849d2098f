"""Typical acceptance (Medusa §2.3.1), the verifier of Medusa, Hydra and EntMTP at T>0.

A draft token x under a node whose target distribution is p (after temperature) is
accepted when p(x) > min(ε, α·exp(−H(p))), H = −Σ p·log(p + 1e-5) as in the release: a
fixed floor ε, relaxed where the target is uncertain. Every root-to-node path is scored
by how many of its tokens pass in a row; the longest wins, ties by the summed target
log-probability of the accepted tokens (then the first in node order). The token after
the accepted path is, by default, the target's argmax at its last node: what the Medusa
(fast=True, its default) and Hydra releases do at any temperature; `next_token: typical`
samples it from p with tokens below the same threshold removed (Medusa's
get_typical_one_token). It is lossy; agreement with AR and the NLL are measured like
MARS. At T=0 it is greedy verification, lossless.

The released generate passes ε = 0.09 and α = 0.3 explicitly (the function's own
defaults are the two numbers swapped); these are the defaults here.
"""

from __future__ import annotations

import torch

from specbench.engine.parts import Acceptance, Verifier, read_back
from specbench.engine.transfer import device_tensor
from specbench.engine.tree import DraftTree
from specbench.engine.values import choice, number
from specbench.verify.standard import greedy_accept, row_starts, sample_rows

NEXT_TOKEN = ("argmax", "typical")


class TypicalVerifier(Verifier):
    def __init__(self, posterior_threshold: float = 0.09, posterior_alpha: float = 0.3, next_token: str = "argmax"):
        self.epsilon = number("method.verifier.posterior_threshold", posterior_threshold, above=0, at_most=1)
        self.alpha = number("method.verifier.posterior_alpha", posterior_alpha, above=0, at_most=1)
        self.next_token = choice("method.verifier.next_token", next_token, NEXT_TOKEN)

    def accept_rows(self, trees, logits, sampling, generators) -> list[Acceptance]:
        if sampling.greedy:
            return greedy_accept(trees, logits)
        p = sampling.probs(torch.cat(logits))  # [nodes of all rows, V]
        thresholds = self.thresholds(p)
        parents = device_tensor(
            [max(parent, 0) + start for tree, start in zip(trees, row_starts(trees)) for parent in tree.parents],
            p.device,
        )
        tokens = device_tensor([token for tree in trees for token in tree.tokens], p.device)
        ok, logp = passing(p, thresholds, parents, tokens)
        if self.next_token == "argmax":
            after = p.argmax(-1)
        else:
            typical = p.masked_fill(p < thresholds[:, None], 0.0)
            after = sample_rows(trees, typical / typical.sum(-1, keepdim=True), generators)
        out = []
        for tree, (passes, logps, tokens_after) in zip(trees, read_back(trees, ok, logp, after)):
            best, best_key = 0, (0, 0.0)
            length, total = [0] * len(tree), [0.0] * len(tree)
            for node in range(1, len(tree)):  # parents precede children
                parent = tree.parents[node]
                if passes[node] and length[parent] == tree.depths[parent]:
                    length[node], total[node] = length[parent] + 1, total[parent] + logps[node]
                    if (length[node], total[node]) > best_key:
                        best, best_key = node, (length[node], total[node])
            path = tree.path_to(best)
            out.append(Acceptance(path, int(tokens_after[best]), {"typical_accepted": len(path) - 1}))
        return out

    def thresholds(self, p: torch.Tensor) -> torch.Tensor:
        """Per row of p: min(ε, α·exp(−H))."""
        entropy = -(p * (p + 1e-5).log()).sum(-1)
        return torch.minimum(torch.full_like(entropy, self.epsilon), self.alpha * torch.exp(-entropy))

    def passes(self, tree: DraftTree, p: torch.Tensor, threshold: torch.Tensor) -> tuple[list[bool], list[float]]:
        """Per node: whether its token passes the typical test under its parent's target
        distribution, and that token's target log-probability (root: False, 0)."""
        parents = torch.tensor(tree.parents[1:], dtype=torch.long)
        tokens = torch.tensor(tree.tokens[1:], dtype=torch.long)
        ok, logp = passing(p, threshold, parents, tokens)
        return [False] + ok.tolist(), [0.0] + logp.tolist()


def passing(
    p: torch.Tensor, threshold: torch.Tensor, parents: torch.Tensor, tokens: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    """Whether each token passes the typical test under the row `parents` of p, and its
    target log-probability there."""
    prob = p[parents, tokens]
    return prob > threshold[parents], prob.clamp_min(1e-30).log()
