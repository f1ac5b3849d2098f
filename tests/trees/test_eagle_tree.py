"""EAGLE-2/3 dynamic tree: expansion and reranking rules on hand-made draft distributions."""

import math

import pytest
import torch

from specbench.engine.parts import Drafter
from specbench.engine.sampling import Sampling
from specbench.engine.tree import DraftTree, top_tokens
from specbench.errors import ConfigError
from specbench.trees.eagle import EagleDynamicTree, expand_top_k, keep_best


class TableDrafter(Drafter):
    """Batched drafter: next-token log-probs from a fixed table keyed by the path's last
    token (one table per row, or one for all rows); records each call's node lists."""

    def __init__(self, tables, vocab):
        self.tables, self.vocab = tables, vocab
        self.calls = []

    def logits(self, contexts, trees, nodes):
        self.calls.append([list(n) for n in nodes])
        return [self._row(b, tree, row) if row else None for b, (tree, row) in enumerate(zip(trees, nodes))]

    def _row(self, b, tree, nodes):
        table = self.tables[b] if isinstance(self.tables, list) else self.tables
        out = torch.full((len(nodes), self.vocab), -30.0)
        for row, node in enumerate(nodes):
            for token, p in table.get(tree.tokens[node], {}).items():
                out[row, token] = math.log(p)
        return out


# after 0: 1 (0.6), 2 (0.4); after 1: 3 (0.9), 4 (0.1); after 2: 5 (0.5), 6 (0.5)
TABLE = {0: {1: 0.6, 2: 0.4}, 1: {3: 0.9, 4: 0.1}, 2: {5: 0.5, 6: 0.5}, 3: {7: 1.0}, 5: {8: 1.0}, 6: {9: 1.0}}


def paths(tree):
    return {tuple(tree.tokens[n] for n in tree.path_to(i)[1:]) for i in range(1, len(tree))}


def test_expands_top_k_by_cumulative_probability_and_reranks():
    drafter = TableDrafter(TABLE, 10)
    [tree] = EagleDynamicTree(top_k=2, depth=2, total_tokens=6).grow(drafter, [[]], [0], Sampling(), [None])
    # depth 2 expands both depth-1 nodes; the best two grandchildren (3: .54, 5: .2 tied with 6) go on
    assert len(drafter.calls) == 3 and drafter.calls[0] == [[0]]
    assert drafter.calls[1] == [[1, 2]] and len(drafter.calls[2][0]) == 2
    kept = paths(tree)
    # ranks: (1) .6, (1,3) .54, (1,3,7) .54, (2) .4, (2,5)/(2,6) .2: the five best with the root
    assert len(tree) == 6
    assert {(1,), (1, 3), (1, 3, 7), (2,)} <= kept
    assert all(tree.parents[i] < i for i in range(1, len(tree)))
    for i in range(1, len(tree)):
        assert tree.logps[i] <= tree.logps[tree.parents[i]] + 1e-9


def test_each_row_grows_its_own_tree_in_shared_draft_forwards():
    """Rows with different roots and draft distributions, one of which runs out of
    proposals after depth 1: each row's tree is what it would be alone, and each depth
    is one draft call for every row still growing."""
    other = {10: {11: 0.7, 12: 0.2, 13: 0.1}, 11: {14: 1.0}, 12: {15: 1.0}, 14: {16: 0.5, 17: 0.5}}
    tables = [TABLE, other, {20: {21: 1.0}}]
    roots = [0, 10, 20]
    policy = EagleDynamicTree(top_k=2, depth=2, total_tokens=6)

    class RunsOut(TableDrafter):
        def _row(self, b, tree, nodes):  # nothing to say below root 20's children
            return None if tree.tokens[0] == 20 and nodes != [0] else super()._row(b, tree, nodes)

    drafter = RunsOut(tables, 30)
    trees = policy.grow(drafter, [[1, 2], [3], [4, 5, 6]], roots, Sampling(), [None] * 3)
    assert len(drafter.calls) == 3 and drafter.calls[0] == [[0], [0], [0]]
    assert len(drafter.calls[1][2]) == 2 and drafter.calls[2][2] == []  # row 2 stopped growing
    for b, tree in enumerate(trees):
        alone = RunsOut([tables[b]], 30)
        [expected] = policy.grow(alone, [[]], [roots[b]], Sampling(), [None])
        assert (tree.tokens, tree.parents, tree.logps, tree.origin) == (
            expected.tokens,
            expected.parents,
            expected.logps,
            expected.origin,
        )
    assert len(trees[2]) == 3 and (21,) in paths(trees[2])
    assert {(11,), (11, 14), (12,)} <= paths(trees[1]) and len(trees[1]) == 6


@pytest.mark.parametrize("total", [2, 5, 17, 60])
def test_budget_is_never_exceeded(total):
    g = torch.Generator().manual_seed(total)

    class RandomDrafter(Drafter):
        def logits(self, contexts, trees, nodes):
            return [torch.randn(len(row), 50, generator=g) * 3 if row else None for row in nodes]

    trees = EagleDynamicTree(top_k=4, depth=4, total_tokens=total).grow(
        RandomDrafter(), [[], [7]], [1, 2], Sampling(), [None, None]
    )
    for tree, root in zip(trees, [1, 2]):
        assert len(tree) == total and tree.tokens[0] == root
        assert tree.origin is not None and tree.origin[0] == 0


def test_expand_top_k_and_keep_best():
    tree = DraftTree.root(0)
    first = expand_top_k(tree, [0], top_tokens([torch.tensor([[0.1, 0.6, 0.3, 0.0]]).log()], 2)[0], 2)
    assert first == [1, 2] and [tree.tokens[n] for n in first] == [1, 2]
    # each frontier node (logits row) gets its top-2 children; the 2 best of the 4 new
    # nodes (cumulative .3, .18, .12, .105) are the next frontier
    second = expand_top_k(
        tree, first, top_tokens([torch.tensor([[0.5, 0.0, 0.3, 0.2], [0.4, 0.0, 0.35, 0.25]]).log()], 2)[0], 2
    )
    assert [tree.parents[n] for n in range(3, 7)] == [1, 1, 2, 2]
    assert [tree.tokens[n] for n in range(3, 7)] == [0, 2, 0, 2]
    assert second == [3, 4]
    assert keep_best(tree, 5).origin == [0, 1, 2, 3, 4]  # .6, .3, .3, .18
    best = keep_best(tree, 2)
    assert best.origin == [0, 1] and best.tokens == [0, 1]


def test_subtree_keeps_ancestors_and_maps_back():
    tree = DraftTree.root(9)
    a = tree.add(0, 1)
    b = tree.add(0, 2)
    c = tree.add(b, 3)
    sub = tree.subtree([c])
    assert sub.tokens == [9, 2, 3] and sub.parents == [-1, 0, 1]
    assert sub.drafted_ids([0, 1, 2]) == [0, b, c]
    assert a not in sub.origin


@pytest.mark.parametrize("depth", [0, 1, 3])
def test_depth_counts_as_eagles_release_the_layers_after_the_first(depth):
    """EAGLE's depth=d: one first draft forward, then d more, so d + 1 levels (a paper's
    "depth 7" is 8 levels); a chain table makes every level exist."""
    chain = {t: {t + 1: 0.9, t + 20: 0.1} for t in range(10)}
    drafter = TableDrafter(chain, 40)
    [tree] = EagleDynamicTree(top_k=1, depth=depth, total_tokens=50).grow(drafter, [[]], [0], Sampling(), [None])
    assert len(drafter.calls) == depth + 1 and max(tree.depths) == depth + 1
    assert [tree.tokens[n] for n in tree.path_to(len(tree) - 1)] == list(range(depth + 2))


@pytest.mark.parametrize("kwargs", [{"top_k": 0}, {"depth": -1}, {"total_tokens": 1}])
def test_bad_parameters(kwargs):
    with pytest.raises(ConfigError, match="method.tree"):
        EagleDynamicTree(**kwargs)


def test_accepted_nodes_are_ranked_among_their_siblings_by_draft_probability():
    from specbench.engine.loop import _sibling_ranks

    tree = DraftTree.root(0)
    a = tree.add(0, 1, -0.1)  # root's top-1
    b = tree.add(0, 2, -2.0)  # root's top-2
    c = tree.add(b, 3, -0.1)  # b's only child: its top-1, though less probable than d by path
    d = tree.add(a, 4, -1.0)  # a's top-1
    e = tree.add(a, 5, -3.0)  # a's top-2 (third by path at depth 2)
    assert _sibling_ranks(tree, [b, c]) == [1, 0]
    assert _sibling_ranks(tree, [a, d]) == [0, 0]
    assert _sibling_ranks(tree, [a, e]) == [0, 1]


def test_each_verification_records_the_trees_summed_draft_confidence():
    """CAST Figure 3's x axis: the sum of v(u) = exp(cumulative log-prob) over the verified
    tree's draft nodes (the root, v = 1, left out), one value per verification."""
    from specbench.engine.loop import _record_step, _Row
    from specbench.engine.parts import Acceptance

    tree = DraftTree.root(0)
    a = tree.add(0, 1, math.log(0.5))
    tree.add(0, 2, math.log(0.25))
    tree.add(a, 3, math.log(0.5))  # 0.25
    row = _Row(prompt=[7], generator=None, new=[1, 3, 4])
    _record_step(row, tree, Acceptance(path=[0, a], next_token=4), [2.0, 2.0], drafted=2)
    _record_step(row, DraftTree.root(4), Acceptance(path=[0], next_token=5), [2.0], drafted=0)
    assert row.tree_scores == [1.0, 0.0]
    assert row.accept_lengths == [2, 1]
