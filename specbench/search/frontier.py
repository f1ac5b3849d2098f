"""EntMTP's offline stage: the greedy acceptance frontier (Algorithm 1), its self-rollout
recalibration (Appendix B), the throughput re-ranking, and the bank the runtime loads.

Algorithm 1: start from the root alone; each round, the candidates are the next child
of every node shallower than the max depth (the child ranked right after its existing
children, so siblings stay contiguous ranks as static-tree buffers assume). One rollout
over the prompts decodes with the joint tree T ∪ F, but its trajectory follows T (the
verifier decides on T's nodes only); at every step the accept length T ∪ {ν} would have
had is read off the same target logits for each candidate ν. The candidate with the
highest mean accept length is added, ties by smaller rank sum, then shallower depth.
Accept lengths here count accepted draft tokens (the paper's τ), one less than
specbench's τ per step.

The one-step scores are optimistic (a candidate is scored on proposals the joint tree
made); `self_rollout` re-measures a tree decoding with its own proposals only.
"""

from __future__ import annotations

import torch
from tqdm import tqdm

from specbench.engine.loop import Limits, Method, generate
from specbench.engine.parts import Acceptance, Verifier
from specbench.engine.sampling import Sampling
from specbench.engine.tree import DraftTree
from specbench.errors import ConfigError
from specbench.trees.entmtp import TaskTrees
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
        raise ConfigError("method.verifier: the frontier search scores per-node acceptance, which needs typical acceptance at T>0 (or T=0)")
    p = sampling.probs(logits)
    return [True] + verifier.passes(tree, p, verifier.thresholds(p))[0][1:]


class WhatIf(Verifier):
    """A verifier for the scoring rollout: accepts on the base tree's nodes only and
    records, per step, the accept length of the base tree and of the base tree plus
    each candidate node."""

    def __init__(self, verifier, base: list[int], candidates: list[int]):
        self.verifier, self.base, self.candidates = verifier, base, candidates
        self.base_total, self.totals, self.steps = 0, [0] * len(candidates), 0

    def accept(self, tree, logits, sampling, generator) -> Acceptance:
        passes = node_passes(self.verifier, tree, logits, sampling)
        reached = [True] * len(tree)
        for n in range(1, len(tree)):
            reached[n] = passes[n] and reached[tree.parents[n]]
        base = max((tree.depths[n] for n in self.base if reached[n]), default=0)
        self.base_total += base
        for j, node in enumerate(self.candidates):
            self.totals[j] += max(base, tree.depths[node] if reached[node] else 0)
        self.steps += 1
        sub = tree.subtree(self.base)
        inner = self.verifier.accept(sub, logits[sub.origin], sampling, generator)
        return Acceptance([sub.origin[n] for n in inner.path], inner.next_token, inner.notes)


def rollout(target, drafter, tree, verifier, prompts, sampling: Sampling, limits: Limits, seed: int) -> None:
    method = Method(tree=tree, verifier=verifier, drafter=drafter)
    for index, prompt in enumerate(prompts):
        generate(target, method, prompt, sampling, limits, torch.Generator().manual_seed(seed + index))


def acceptance_frontier(target, drafter, verifier, prompts, sampling: Sampling, limits: Limits, max_depth: int, budget: int,
                        seed: int = 123, log=None) -> list[dict]:
    """Algorithm 1: the trees T_1 ⊂ T_2 ⊂ ... up to `budget` nodes (root included), each
    with its one-step mean accept length."""
    choices: list[Choice] = []
    history = []
    bar = tqdm(total=budget - 1, desc="acceptance frontier", unit="node")
    while len(choices) + 1 < budget:
        candidates = next_children(choices, max_depth)
        joint = Topology.from_choices(choices + candidates)
        index = {c: i + 1 for i, c in enumerate(joint.choices)}
        scorer = WhatIf(verifier, [index[c] for c in choices], [index[c] for c in candidates])
        tree = StaticTree(choices=[list(c) for c in joint.choices])
        rollout(target, drafter, tree, scorer, prompts, sampling, limits, seed)
        means = [t / max(scorer.steps, 1) for t in scorer.totals]
        best = max(range(len(candidates)), key=lambda j: (means[j], -sum(candidates[j]), -len(candidates[j])))
        choices.append(candidates[best])
        history.append({"size": len(choices) + 1, "depth": max(map(len, choices)), "accept_biased": means[best], "choices": [list(c) for c in choices]})
        bar.update(1)
        bar.set_postfix(size=len(choices) + 1, accept=f"{means[best]:.2f}")
    bar.close()
    return history


def self_rollout(target, drafter, verifier, choices, prompts, sampling: Sampling, limits: Limits, seed: int = 123) -> float:
    """Mean accepted draft tokens per step of decoding with the tree's own proposals."""
    counted = CountingVerifier(verifier)
    rollout(target, drafter, StaticTree(choices=choices), counted, prompts, sampling, limits, seed)
    return counted.accepted / max(counted.steps, 1)


class CountingVerifier(Verifier):
    """`verifier`, counting the draft tokens it accepts and its steps."""

    def __init__(self, verifier):
        self.verifier, self.accepted, self.steps = verifier, 0, 0

    def accept(self, tree, logits, sampling, generator) -> Acceptance:
        out = self.verifier.accept(tree, logits, sampling, generator)
        self.accepted += len(out.path) - 1
        self.steps += 1
        return out


def predicted_speedup(accept: float, size: int, costs, context: float) -> float:
    """(accepted draft tokens + 1) per step, over the step's cost in AR forwards: a target
    forward over `size` tree tokens plus one draft forward."""
    ar = costs.target_ms(1, context, 1)
    return (accept + 1) * ar / (costs.target_ms(1, context, size) + costs.draft_ms(1, context, 1))


def task_trees(history: list[dict], costs, context: float, shallow: int = 2) -> TaskTrees:
    """The throughput-Pareto trees of a frontier (each faster than every smaller one, by
    predicted speedup on the unbiased accept length when measured, else the biased one),
    the best (`static`), the best at the frontier's full depth (`aggressive`) and the best
    at most `shallow` deep (`conservative`)."""
    scored = []
    for entry in history:
        accept = entry.get("accept_unbiased", entry["accept_biased"])
        scored.append({**entry, "predicted_speedup": round(predicted_speedup(accept, entry["size"], costs, context), 4)})
    pareto, best = [], 0.0
    for entry in sorted(scored, key=lambda e: e["size"]):
        if entry["predicted_speedup"] > best:
            pareto.append(entry)
            best = entry["predicted_speedup"]
    speed = [e["predicted_speedup"] for e in pareto]
    deepest = max(e["depth"] for e in pareto)

    def best_of(indices):
        return max(indices, key=lambda i: speed[i]) if indices else max(range(len(pareto)), key=lambda i: speed[i])

    return TaskTrees(
        trees=pareto, static=best_of(range(len(pareto))),
        conservative=best_of([i for i, e in enumerate(pareto) if e["depth"] <= shallow]),
        aggressive=best_of([i for i, e in enumerate(pareto) if e["depth"] == deepest]),
    )
