"""MARS: margin-aware verification (lossy), two rules: the public release's (the default,
which produced the paper's T=1 tables) and the paper's Algorithm 1 (`rule: paper`).
results/reference/mars.notes.md gives the evidence for which rule is behind which table.

With z(1) >= z(2) the target's two largest logits and r = z(2) / z(1), a node relaxes when
r > theta: a child equal to the target's top-2 is then accepted as if it were the top-1.

`rule: release` follows the release's evaluate_posterior (facts read from its code):
- T = 0: plain greedy matching, no relaxation at all (the release relaxes only when
  sampling).
- T > 0: r = z(2) / (z(1) + 1e-10) on the processed logits, so a node whose top logits
  are negative relaxes too (r > 1). When r > theta, the first child in the tree's order
  (the draft's most probable first) whose token is in the top-2 is accepted, and when none
  is, the correction is drawn from the unmodified p. Otherwise each child is accepted with
  probability min(1, p(x) / q(x)), q(x) the draft's own probability of that child (here
  exp of the tree's log-prob step; the paper's Eq. 1), and on rejection only p(x) becomes
  max(0, p(x) - q(x)), renormalised; the correction is drawn from what remains. This is
  not distribution-preserving (q is the draft's probability of a deterministic top-k
  pick, and the residual is adjusted at one token only), and accepts more than EAGLE's
  lossless test, which takes q = 1 for such picks.

`rule: paper` is Algorithm 1 on raw logits (before temperature): a child equal to the
top-1 is accepted first (lines 6-7); only when no child is, one equal to the top-2 is
accepted when r > theta (lines 8-9); otherwise the draft is rejected and the top-1
appended. r is only meaningful when z(1) > 0 (§3.3); otherwise the strict rule applies and
the case is counted (`ratio_undefined`). At T > 0, when r > theta, the child carrying the
top-1, else the one carrying the top-2, is accepted outright if it can be sampled at all
(nonzero probability after top-k / top-p); otherwise the node's children go through the
engine's lossless recursive rejection sampling.

Notes per run: acceptances `exact` (the target's top-1), `relaxed` (the runner-up by the
margin rule), `sampled` (by rejection sampling), `rejected` steps, `ratio_undefined`, and
`decisions`: [z(1), z(2), logsumexp(z), outcome] at every decision point (a node with
children), from which the paper's logit-ratio and probability-ratio plots are drawn.
"""

from __future__ import annotations

import math

import torch

from specbench.engine.parts import Acceptance, Verifier, read_back
from specbench.engine.transfer import device_tensor
from specbench.engine.tree import DraftTree
from specbench.engine.values import choice, number
from specbench.verify.standard import (
    greedy_accept,
    rejection_sample,
    sample_rows,
    sibling_tests,
    sibling_tokens,
    sibling_uniforms,
)

RULES = ("paper", "release")


class MarsVerifier(Verifier):
    def __init__(self, theta: float = 0.9, rule: str = "release"):
        # z2 / z1 <= 1 whenever z1 > 0, so theta >= 1 never relaxes: 1 is exact matching, above it meaningless
        self.theta = number("method.verifier.theta", theta, above=0, at_most=1)
        self.rule = choice("method.verifier.rule", rule, RULES)

    def accept_rows(self, trees, logits, sampling, generators) -> list[Acceptance]:
        if self.rule == "release":
            return self.accept_as_released(trees, logits, sampling, generators)
        z = torch.cat(logits).float()
        v1, v2 = top_two(z)
        columns = [v1, v2, z.gather(1, v1[:, None])[:, 0], z.gather(1, v2[:, None])[:, 0], z.logsumexp(-1)]
        if not sampling.greedy:
            p = sampling.probs(z)
            columns += [
                p.gather(1, v1[:, None])[:, 0] > 0,
                p.gather(1, v2[:, None])[:, 0] > 0,
                *rejection_sample(trees, p, generators),
            ]
        return [
            self._walk_paper(tree, values, sampling.greedy) for tree, values in zip(trees, read_back(trees, *columns))
        ]

    def _walk_paper(self, tree: DraftTree, values: list[list[float]], greedy: bool) -> Acceptance:
        """Algorithm 1 down one row's tree, from every node's top two (and, at T>0, whether
        they can be sampled and the rejection-sampling outcome there)."""
        top1, top2, logit1, logit2, lse = values[:5]
        notes = {"exact": 0, "relaxed": 0, "sampled": 0, "rejected": 0, "ratio_undefined": 0, "decisions": []}
        children = tree.child_lists()
        path = [0]
        while True:
            node = path[-1]
            v1, v2, z1, z2 = int(top1[node]), int(top2[node]), logit1[node], logit2[node]

            def decided(outcome: str) -> None:
                notes[outcome] += 1
                notes["decisions"].append([round(z1, 4), round(z2, 4), round(lse[node], 4), outcome])

            if not children[node]:
                return Acceptance(path, v1 if greedy else int(values[8][node]), notes)
            margin_ok = z1 > 0 and z2 / z1 > self.theta
            if z1 <= 0:
                notes["ratio_undefined"] += 1
            by_token = {}
            for child in children[node]:
                by_token.setdefault(tree.tokens[child], child)
            if greedy:
                if v1 in by_token:
                    decided("exact")
                    path.append(by_token[v1])
                elif margin_ok and v2 in by_token:
                    decided("relaxed")
                    path.append(by_token[v2])
                else:
                    decided("rejected")
                    return Acceptance(path, v1, notes)
                continue
            samplable1, samplable2, rank, correction = (values[i][node] for i in range(5, 9))
            # Algorithm 1 lines 6-9: the top-1 child before the top-2 one, whatever the tree's order
            token = (
                next((v for v, ok in ((v1, samplable1), (v2, samplable2)) if v in by_token and ok), None)
                if margin_ok
                else None
            )
            if token is not None:
                decided("exact" if token == v1 else "relaxed")
                path.append(by_token[token])
            elif rank < 0:
                decided("rejected")
                return Acceptance(path, int(correction), notes)
            else:
                decided("sampled")
                path.append(children[node][int(rank)])

    def accept_as_released(self, trees, logits, sampling, generators) -> list[Acceptance]:
        """The release's rule (see the module docstring), with the same notes."""
        if sampling.greedy:
            out = greedy_accept(trees, logits)
            for a in out:
                a.notes = {
                    "exact": len(a.path) - 1,
                    "relaxed": 0,
                    "sampled": 0,
                    "rejected": 0,
                    "ratio_undefined": 0,
                    "decisions": [],
                }
            return out
        z = torch.cat(logits).float()
        p = sampling.probs(z)
        processed = torch.where(p > 0, z / sampling.temperature, torch.full_like(z, float("-inf")))
        v1, v2 = top_two(processed)
        z1, z2 = processed.gather(1, v1[:, None])[:, 0], processed.gather(1, v2[:, None])[:, 0]
        relaxes = z2.double() / (z1.double() + 1e-10) > self.theta
        accepted, residual = self._draft_weighted(trees, p, generators)
        # the correction: from p untouched where the margin rule ran, else from what the q-weighted tests left
        correction = sample_rows(trees, torch.where(relaxes[:, None], p, residual), generators)
        columns = read_back(trees, v1, v2, z1, z2, z.logsumexp(-1), relaxes, accepted, correction)
        return [self._walk_released(tree, values, sampling.temperature) for tree, values in zip(trees, columns)]

    def _draft_weighted(self, trees, p: torch.Tensor, generators) -> tuple[torch.Tensor, torch.Tensor]:
        """The release's test at every node at once: child x is accepted with probability
        min(1, p(x) / q(x)), q(x) the draft's own probability of it; on rejection only p(x)
        becomes max(0, p(x) - q(x)), renormalised (standard.sibling_tests). Per node: the
        accepted child's rank (-1: none) and p as the tests left it."""
        rows = [(tree, node, row) for tree in trees for node, row in enumerate(tree.child_lists())]
        width = max((len(row) for _, _, row in rows), default=0)
        if not width:
            return torch.full((len(p),), -1, dtype=torch.long, device=p.device), p
        steps = [
            [max(math.exp(tree.logps[c] - tree.logps[node]), 1e-10) for c in row] + [1.0] * (width - len(row))
            for tree, node, row in rows
        ]
        tokens, valid = sibling_tokens([[tree.tokens[c] for c in row] for tree, _, row in rows], width, p.device)
        q = device_tensor(steps, p.device, torch.float64)
        return sibling_tests(p, tokens, valid, sibling_uniforms(trees, generators, width, p.device), q, inclusive=True)

    def _walk_released(self, tree: DraftTree, values: list[list[float]], temperature: float) -> Acceptance:
        top1, top2, logit1, logit2, lse, relaxes, ranks, corrections = values
        notes = {"exact": 0, "relaxed": 0, "sampled": 0, "rejected": 0, "ratio_undefined": 0, "decisions": []}
        children = tree.child_lists()
        path = [0]
        while True:
            node = path[-1]
            if not children[node]:
                return Acceptance(path, int(corrections[node]), notes)
            z1, z2 = logit1[node], logit2[node]
            notes["ratio_undefined"] += z1 <= 0
            outcome, child = None, None
            if relaxes[node]:
                child = next((c for c in children[node] if tree.tokens[c] in (top1[node], top2[node])), None)
                if child is not None:
                    outcome = "exact" if tree.tokens[child] == top1[node] else "relaxed"
            elif ranks[node] >= 0:
                outcome, child = "sampled", children[node][int(ranks[node])]
            notes[outcome or "rejected"] += 1
            notes["decisions"].append(
                [round(z1 * temperature, 4), round(z2 * temperature, 4), round(lse[node], 4), outcome or "rejected"]
            )
            if outcome is None:
                return Acceptance(path, int(corrections[node]), notes)
            path.append(child)


def top_two(z: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Per row, the top-1 (argmax, with the same tie-breaking as greedy decoding) and the top-2."""
    first = z.argmax(-1)
    return first, z.scatter(-1, first[:, None], float("-inf")).argmax(-1)
