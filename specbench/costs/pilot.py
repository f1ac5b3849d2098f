"""Tree shapes predicted from one pilot decode instead of decoding every candidate.

Where a policy's candidate shapes are nested (a shorter chain is a longer one's first
tokens; a static tree's `size` keeps its first nodes; an EAGLE, CAST or TALON tree is grown
again from the wider tree's draft scores: TreePolicy.nested_step), the widest candidate's
calibration decode shows, step by step, what every smaller one would have verified and
accepted: its path cut to the smaller tree. Each smaller candidate's steps are
rebuilt from the pilot's: the first takes the cut path, and the rest of the tokens the pilot
accepted in that step are covered by further steps of at most `reach` drafts each, as a
chain re-drafted from inside an accepted run accepts the same continuation (exact for a
greedy chain drafter, an estimate otherwise). The cost profile prices the rebuilt steps
like decoded ones; the best predicted shapes are then decoded to confirm them
(costs/autotune.py)."""

from __future__ import annotations

import copy

from specbench.engine.parts import NestedStep, TreePolicy
from specbench.engine.tree import DraftTree


class Recorder(TreePolicy):
    """Wraps the pilot's policy and keeps each decode's trees, accepted paths and committed
    context lengths (batch size 1: one list of (tree, path, context) per generate call, in
    step order)."""

    def __init__(self, policy: TreePolicy):
        self.policy = policy
        self.decodes: list[list[tuple[DraftTree, list[int], int]]] = []
        self.context = 0

    def begin(self, batch_size: int, costs) -> None:
        self.decodes.append([])
        self.policy.begin(batch_size, costs)

    def grow(self, drafter, contexts, roots, sampling, generators):
        self.context = len(contexts[0])
        return self.policy.grow(drafter, contexts, roots, sampling, generators)

    def observe(self, trees, paths, logits) -> None:
        self.decodes[-1].append((trees[0], list(paths[0]), self.context))
        self.policy.observe(trees, paths, logits)

    def keep(self, rows: list[int]) -> None:
        self.policy.keep(rows)


def nested(policies: list[TreePolicy]) -> bool:
    """Whether the candidates' policy reads smaller shapes off a wider one's steps."""
    return len(policies) > 2 and all(type(p).nested_step is not TreePolicy.nested_step for p in policies)


def pilot_index(policies: list[TreePolicy]) -> int:
    """The widest candidate: the pilot whose trees hold every other's (of shapes equally wide,
    the last: AUTO_CANDIDATES lists the loosest last)."""
    return max(range(len(policies)), key=lambda i: (policies[i].widest() or 0, i))


def rebuilt_steps(view: NestedStep, pilot_accepted: int) -> list[tuple[int, int, int]]:
    """(tokens produced, tree nodes, draft forwards) of the smaller shape's steps over the
    tokens one pilot step produced (its accepted drafts and the target's next token)."""
    steps = [(view.accepted + 1, view.nodes, view.draft_forwards)]
    left = pilot_accepted - view.accepted  # the pilot step's tokens the first step left
    while left > 0:
        take = min(left - 1, view.reach)
        steps.append((take + 1, view.nodes, view.draft_forwards))
        left -= take + 1
    return steps


def rebuilt_run(run: dict, steps: list[tuple[DraftTree, list[int], int]], policy: TreePolicy, costs) -> dict | None:
    """The pilot's calibration record `run` as `policy` would have decoded it, pricing with
    `costs` as the decode did, or None where the recorded steps do not match the record
    (then the candidate is decoded)."""
    if len(steps) != len(run["accept_lengths"]):
        return None
    policy.begin(1, costs)
    out = copy.deepcopy(run)
    out["accept_lengths"], out["tree_widths"], out["step_draft_forwards"] = [], [], []
    step = 0
    for ids in run["turn_ids"]:
        produced, goal = 1, len(ids)  # the prefill gives each turn's first token
        while produced < goal and step < len(steps):
            tree, path, context = steps[step]
            view = policy.nested_step(tree, path, run["step_draft_forwards"][step], context)
            if view is None:
                return None
            for tokens, nodes, forwards in rebuilt_steps(view, len(path) - 1):
                if produced >= goal:
                    break
                out["accept_lengths"].append(tokens)
                out["tree_widths"].append([nodes - 1])
                out["step_draft_forwards"].append(forwards)
                produced += tokens
            step += 1
    out["target_forwards"] = len(out["accept_lengths"])
    out["draft_forwards"] = sum(out["step_draft_forwards"])
    return out
