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

from specbench.engine.parts import Acceptance, Verifier
from specbench.engine.sampling import Sampling, sample
from specbench.engine.tree import DraftTree
from specbench.engine.values import choice, number
from specbench.verify.standard import try_children


RULES = ("paper", "release")


class MarsVerifier(Verifier):
    def __init__(self, theta: float = 0.9, rule: str = "release"):
        # z2 / z1 <= 1 whenever z1 > 0, so theta >= 1 never relaxes: 1 is exact matching, above it meaningless
        self.theta = number("method.verifier.theta", theta, above=0, at_most=1)
        self.rule = choice("method.verifier.rule", rule, RULES)

    def accept(self, tree: DraftTree, logits: torch.Tensor, sampling: Sampling, generator: torch.Generator | None) -> Acceptance:
        if self.rule == "release":
            return self.accept_as_released(tree, logits, sampling, generator)
        notes = {"exact": 0, "relaxed": 0, "sampled": 0, "rejected": 0, "ratio_undefined": 0, "decisions": []}

        def decided(outcome: str) -> None:
            notes[outcome] += 1
            notes["decisions"].append([round(z1, 4), round(z2, 4), round(float(z.logsumexp(0)), 4), outcome])

        path = [0]
        while True:
            node = path[-1]
            children = tree.children(node)
            z = logits[node].float()
            if not children:
                return Acceptance(path, sampling.pick(z, generator), notes)
            v1, v2 = top_two(z)
            z1, z2 = float(z[v1]), float(z[v2])
            margin_ok = z1 > 0 and z2 / z1 > self.theta
            if z1 <= 0:
                notes["ratio_undefined"] += 1
            by_token = {}
            for child in children:
                by_token.setdefault(tree.tokens[child], child)
            if sampling.greedy:
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
            p = sampling.probs(z)
            # Algorithm 1 lines 6-9: the top-1 child before the top-2 one, whatever the tree's order
            token = next((v for v in (v1, v2) if v in by_token and p[v] > 0), None) if margin_ok else None
            if token is not None:
                decided("exact" if token == v1 else "relaxed")
                path.append(by_token[token])
                continue
            child = try_children(tree, node, p, generator)
            if child is None:
                decided("rejected")
                return Acceptance(path, sample(p, generator), notes)
            decided("sampled")
            path.append(child)

    def accept_as_released(self, tree: DraftTree, logits: torch.Tensor, sampling: Sampling, generator: torch.Generator | None) -> Acceptance:
        """The release's rule (see the module docstring), with the same notes."""
        notes = {"exact": 0, "relaxed": 0, "sampled": 0, "rejected": 0, "ratio_undefined": 0, "decisions": []}
        path = [0]
        while True:
            node = path[-1]
            children = tree.children(node)
            z = logits[node].float()
            if sampling.greedy:
                matched = next((c for c in children if tree.tokens[c] == int(z.argmax())), None)
                if matched is None:
                    return Acceptance(path, int(z.argmax()), notes)
                notes["exact"] += 1
                path.append(matched)
                continue
            p = sampling.probs(z)
            if not children:
                return Acceptance(path, sample(p, generator), notes)
            processed = torch.where(p > 0, z / sampling.temperature, torch.full_like(z, float("-inf")))
            v1, v2 = top_two(processed)
            z1, z2 = float(processed[v1]), float(processed[v2])
            notes["ratio_undefined"] += z1 <= 0
            outcome = None
            if z2 / (z1 + 1e-10) > self.theta:
                child = next((c for c in children if tree.tokens[c] in (v1, v2)), None)
                if child is not None:
                    outcome = "exact" if tree.tokens[child] == v1 else "relaxed"
            else:
                for child in children:
                    token = tree.tokens[child]
                    q = max(math.exp(tree.logps[child] - tree.logps[node]), 1e-10)
                    if float(torch.rand((), generator=generator)) <= min(1.0, float(p[token]) / q):
                        outcome = "sampled"
                        break
                    p[token] = max(0.0, float(p[token]) - q)
                    p = p / p.sum()
            notes[outcome or "rejected"] += 1
            notes["decisions"].append([round(z1 * sampling.temperature, 4), round(z2 * sampling.temperature, 4), round(float(z.logsumexp(0)), 4), outcome or "rejected"])
            if outcome is None:
                return Acceptance(path, sample(p, generator), notes)
            path.append(child)


def top_two(z: torch.Tensor) -> tuple[int, int]:
    """The target's top-1 (argmax, with the same tie-breaking as greedy decoding) and top-2."""
    first = int(z.argmax())
    rest = z.clone()
    rest[first] = float("-inf")
    return first, int(rest.argmax())
