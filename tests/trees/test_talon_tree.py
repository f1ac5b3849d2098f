"""TALON tree shapes on hand-made draft distributions (TALON paper, Algorithm 2)."""

import math

import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from specbench.engine.parts import Drafter
from specbench.engine.sampling import Sampling
from specbench.trees.talon import TalonTree

V = 96


class FixedDrafter(Drafter):
    """Batched drafter: next-token log-probs from a function of the node's depth and
    index (one function for every row, or one per row); counts forwards (one per call,
    however many rows it serves)."""

    def __init__(self, *logp_at_depth):
        self.logp_at_depth, self.forwards = logp_at_depth, 0

    def logits(self, contexts, trees, nodes):
        self.forwards += 1
        return [
            torch.stack([self.function(b)(tree.depths[n], n) for n in row]) if row else None
            for b, (tree, row) in enumerate(zip(trees, nodes))
        ]

    def function(self, row):
        return self.logp_at_depth[row if len(self.logp_at_depth) > 1 else 0]


def peaked(confidence: float, token: int = 7) -> torch.Tensor:
    p = torch.full((V,), (1 - confidence) / (V - 1))
    p[token] = confidence
    return p.log()


def build(tree_policy, drafter):
    [tree] = tree_policy.grow(drafter, [[1, 2, 3]], [5], Sampling(), [None])
    return tree


def build_rows(tree_policy, drafter, rows):
    return tree_policy.grow(
        drafter, [[1, 2, 3][: r + 1] for r in range(rows)], [5 + r for r in range(rows)], Sampling(), [None] * rows
    )


def same_tree(a, b) -> bool:
    return (a.tokens[1:], a.parents, a.depths, a.logps) == (b.tokens[1:], b.parents, b.depths, b.logps)


def widths(tree):
    return [tree.depths.count(d) for d in range(1, max(tree.depths) + 1)]


def test_confident_drafter_gives_a_deep_narrow_tree_using_the_whole_budget():
    drafter = FixedDrafter(lambda depth, node: peaked(0.99))
    tree = build(TalonTree(budget=60, mu=0.03, top_k=10), drafter)
    assert len(tree) == 60
    assert widths(tree) == [10] + [1] * 49  # robust top-10 first, then one confident child per depth
    assert drafter.forwards == 50


def test_flat_drafter_gives_a_shallow_wide_tree():
    drafter = FixedDrafter(lambda depth, node: torch.full((V,), -math.log(V)))
    tree = build(TalonTree(budget=60, mu=0.03, top_k=10), drafter)
    assert len(tree) == 60 and widths(tree) == [10, 49] and drafter.forwards == 2


def test_gating_keeps_children_within_mu_of_the_best():
    # depth 1: one sure token; depth 2: p = 0.5, 0.3, 0.02, ... -> with mu = 0.1 keep 0.5 and 0.3 only
    second = torch.full((V,), 0.18 / (V - 2))
    second[10], second[11] = 0.5, 0.32
    drafter = FixedDrafter(lambda depth, node: peaked(0.999) if depth == 0 else second.log())
    [tree] = TalonTree(budget=6, mu=0.1, top_k=1).grow(drafter, [[1]], [5], Sampling(), [None])
    assert widths(tree)[:2] == [1, 2]
    assert sorted(tree.tokens[n] for n in range(len(tree)) if tree.depths[n] == 2) == [10, 11]


def test_more_robust_layers_keep_top_k_deeper():
    drafter = FixedDrafter(lambda depth, node: peaked(0.99))
    tree = build(TalonTree(budget=40, mu=0.03, top_k=4, robust_layers=2), drafter)
    assert widths(tree)[:3] == [4, 4, 1]


def test_each_row_gets_its_own_shape_from_shared_forwards():
    """A confident, a flat and a gated row built together: each tree is the one that row
    gets alone, and the batch takes as many draft forwards as its deepest row."""
    second = torch.full((V,), 0.18 / (V - 2))
    second[10], second[11] = 0.5, 0.32
    functions = [
        lambda depth, node: peaked(0.99),
        lambda depth, node: torch.full((V,), -math.log(V)),
        lambda depth, node: peaked(0.999) if depth == 0 else second.log(),
    ]
    policy = TalonTree(budget=60, mu=0.1, top_k=10)
    drafter = FixedDrafter(*functions)
    trees = build_rows(policy, drafter, 3)
    assert [len(t) for t in trees] == [60, 60, 60]
    assert widths(trees[0]) == [10] + [1] * 49 and widths(trees[1]) == [10, 49]
    assert drafter.forwards == 50
    for function, tree in zip(functions, trees):
        alone = FixedDrafter(function)
        assert same_tree(tree, build(policy, alone))
        assert alone.forwards == max(tree.depths)


@settings(max_examples=60, deadline=None)
@given(
    budget=st.integers(2, 80),
    mu=st.floats(0.001, 1.0),
    top_k=st.integers(1, 12),
    robust=st.integers(0, 3),
    seed=st.integers(0, 10_000),
    sharpness=st.floats(0.1, 8.0),
    rows=st.integers(1, 3),
)
def test_budget_and_gating_hold_for_any_distribution(budget, mu, top_k, robust, seed, sharpness, rows):
    generator = torch.Generator().manual_seed(seed)
    table = torch.log_softmax(sharpness * torch.randn(200, V, generator=generator), -1)
    # each row reads its own part of the table
    functions = [lambda depth, node, r=r: table[(node + 67 * r) % 200] for r in range(rows)]
    policy = TalonTree(budget=budget, mu=mu, top_k=top_k, robust_layers=robust)
    drafter = FixedDrafter(*functions)
    trees = build_rows(policy, drafter, rows)
    assert drafter.forwards == max(max(tree.depths) for tree in trees)  # one draft forward per depth
    for function, tree in zip(functions, trees):
        assert len(tree) == budget  # never more, and a full vocabulary always fills it
        assert all(tree.parents[n] < n for n in range(1, len(tree)))
        for depth in range(1, max(tree.depths) + 1):
            logps = [tree.logps[n] for n in range(len(tree)) if tree.depths[n] == depth]
            if depth <= robust:
                assert len(logps) <= top_k
            else:
                assert min(logps) >= max(logps) + math.log(mu) - 1e-5
        alone = FixedDrafter(function)
        assert same_tree(tree, build(policy, alone))  # the batch does not change a row's tree
        assert alone.forwards == max(tree.depths)
