"""EntMTP's offline stage: the greedy acceptance frontier (Algorithm 1), its self-rollout
recalibration (Appendix B), the throughput re-ranking, and the bank the runtime loads.

Node counts are the paper's: draft nodes, the root excluded (a tree's `size` in the bank
is the engine's, root included). Algorithm 1: start from T = {(0)}, the first head's top-1
alone; while |T| < B, the candidates are the next child of the root and of every node
shallower than the max depth (the child ranked right after its existing
children, so siblings stay contiguous ranks as static-tree buffers assume). One rollout
over the prompts decodes with the joint tree T ∪ F, but its trajectory follows T (the
verifier decides on T's nodes only); at every step the accept length T ∪ {ν} would have
had is read off the same target logits for each candidate ν. The candidate with the
highest mean accept length is added, ties by smaller rank sum, then shallower depth.
Accept lengths here count accepted draft tokens (the paper's τ), one less than
specbench's τ per step. Every estimate keeps its per-prompt sums (accepted tokens and
steps), so the runner can put intervals on the bias and the throughput ranking.

The one-step scores are optimistic (a candidate is scored on proposals the joint tree
made); `self_rollout` re-measures a tree decoding with its own proposals only.
"""

from __future__ import annotations

import torch
from tqdm import tqdm

from specbench.engine.loop import Limits, Method, generate
from specbench.engine.parts import Acceptance, Verifier
from specbench.engine.sampling import Sampling, seeded
from specbench.engine.tree import DraftTree
from specbench.errors import ConfigError
from specbench.trees.static import StaticTree, Topology
from specbench.verify.typical import TypicalVerifier

Choice = tuple[int, ...]


def next_children(choices: list[Choice], max_depth: int) -> list[Choice]:
    """The next-ranked child of the root and of every node shallower than max_depth."""
    present = set(choices)
    out = []
    for node in [(), *sorted(choices, key=lambda c: (len(c), c))]:
        if len(node) < max_depth:
            rank = sum(1 for c in present if len(c) == len(node) + 1 and c[:-1] == node)
            out.append(node + (rank,))
    return out


def node_passes(verifier, tree: DraftTree, logits: torch.Tensor, sampling: Sampling) -> list[bool]:
    """Per node, whether the verifier would accept its token given its parent's target
    logits (greedy match at T=0; the typical test at T>0). The root: True."""
    if sampling.greedy:
        best = logits.argmax(-1).tolist()
        return [True] + [tree.tokens[n] == best[tree.parents[n]] for n in range(1, len(tree))]
    if not isinstance(verifier, TypicalVerifier):
        raise ConfigError(
            "method.verifier: the frontier search scores per-node acceptance, which needs typical acceptance at "
            "T>0 (or T=0)"
        )
    p = sampling.probs(logits)
    return [True] + verifier.passes(tree, p, verifier.thresholds(p))[0][1:]


class WhatIf(Verifier):
    """A verifier for the scoring rollout: accepts on the base tree's nodes only and
    records, per step, the accept length of the base tree and of the base tree plus
    each candidate node."""

    def __init__(self, verifier, base: list[int], candidates: list[int]):
        self.verifier, self.base, self.candidates = verifier, base, candidates
        self.base_total, self.totals, self.steps = 0, [0] * len(candidates), 0
        self.prompt_totals: list[list[int]] = []  # per prompt, per candidate
        self.prompt_steps: list[int] = []

    def start_prompt(self) -> None:
        self.prompt_totals.append([0] * len(self.candidates))
        self.prompt_steps.append(0)

    def accept_rows(self, trees, logits, sampling, generators) -> list[Acceptance]:
        if not self.prompt_steps:
            self.start_prompt()
        for tree, row_logits in zip(trees, logits):
            self._score(tree, row_logits, sampling)
        subs = [tree.subtree(self.base) for tree in trees]
        inner = self.verifier.accept_rows(subs, [z[sub.origin] for z, sub in zip(logits, subs)], sampling, generators)
        return [Acceptance([sub.origin[n] for n in a.path], a.next_token, a.notes) for sub, a in zip(subs, inner)]

    def _score(self, tree: DraftTree, logits: torch.Tensor, sampling: Sampling) -> None:
        passes = node_passes(self.verifier, tree, logits, sampling)
        reached = [True] * len(tree)
        for n in range(1, len(tree)):
            reached[n] = passes[n] and reached[tree.parents[n]]
        base = max((tree.depths[n] for n in self.base if reached[n]), default=0)
        self.base_total += base
        for j, node in enumerate(self.candidates):
            accepted = max(base, tree.depths[node] if reached[node] else 0)
            self.totals[j] += accepted
            self.prompt_totals[-1][j] += accepted
        self.steps += 1
        self.prompt_steps[-1] += 1


def rollout(target, drafter, tree, verifier, prompts, sampling: Sampling, limits: Limits, seed: int) -> None:
    method = Method(tree=tree, verifier=verifier, drafter=drafter)
    for index, prompt in enumerate(prompts):
        verifier.start_prompt()
        generate(target, method, prompt, sampling, limits, seeded(seed + index, target.device))


def acceptance_frontier(
    target,
    drafter,
    verifier,
    prompts,
    sampling: Sampling,
    limits: Limits,
    max_depth: int,
    budget: int,
    seed: int = 123,
    log=None,
) -> list[dict]:
    """Algorithm 1: the trees T_2 ⊂ T_3 ⊂ ... up to `budget` draft nodes (root excluded),
    each with its one-step mean accept length and that estimate's per-prompt sums."""
    choices: list[Choice] = [(0,)]
    history = []
    bar = tqdm(total=budget - 1, desc="acceptance frontier", unit="node")
    while len(choices) < budget:
        candidates = next_children(choices, max_depth)
        joint = Topology.from_choices(choices + candidates)
        index = {c: i + 1 for i, c in enumerate(joint.choices)}
        scorer = WhatIf(verifier, [index[c] for c in choices], [index[c] for c in candidates])
        tree = StaticTree(choices=[list(c) for c in joint.choices])
        rollout(target, drafter, tree, scorer, prompts, sampling, limits, seed)
        means = [t / max(scorer.steps, 1) for t in scorer.totals]
        best = max(range(len(candidates)), key=lambda j: (means[j], -sum(candidates[j]), -len(candidates[j])))
        choices.append(candidates[best])
        history.append(
            {
                "nodes": len(choices),
                "size": len(choices) + 1,
                "depth": max(map(len, choices)),
                "accept_biased": means[best],
                "biased_accepted": [totals[best] for totals in scorer.prompt_totals],
                "biased_steps": scorer.prompt_steps,
                "choices": [list(c) for c in choices],
            }
        )
        bar.update(1)
        bar.set_postfix(nodes=len(choices), accept=f"{means[best]:.2f}")
    bar.close()
    return history


def self_rollout(
    target, drafter, verifier, choices, prompts, sampling: Sampling, limits: Limits, seed: int = 123
) -> dict:
    """Decoding with the tree's own proposals: mean accepted draft tokens per step
    (`accept_unbiased`) and, per prompt, the accepted tokens and the steps."""
    counted = CountingVerifier(verifier)
    rollout(target, drafter, StaticTree(choices=choices), counted, prompts, sampling, limits, seed)
    return {
        "accept_unbiased": sum(counted.accepted) / max(sum(counted.steps), 1),
        "unbiased_accepted": counted.accepted,
        "unbiased_steps": counted.steps,
    }


class CountingVerifier(Verifier):
    """`verifier`, counting per prompt the draft tokens it accepts and its steps."""

    def __init__(self, verifier):
        self.verifier, self.accepted, self.steps = verifier, [], []

    def start_prompt(self) -> None:
        self.accepted.append(0)
        self.steps.append(0)

    def accept_rows(self, trees, logits, sampling, generators) -> list[Acceptance]:
        out = self.verifier.accept_rows(trees, logits, sampling, generators)
        self.accepted[-1] += sum(len(a.path) - 1 for a in out)
        self.steps[-1] += len(out)
        return out
