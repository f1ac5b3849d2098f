"""EAGLE-2/3 dynamic tree: expansion and reranking rules on hand-made draft distributions."""

import math

import pytest
import torch

from specbench.engine.sampling import Sampling
from specbench.engine.tree import DraftTree
from specbench.errors import ConfigError
from specbench.trees.eagle import EagleDynamicTree


class TableDrafter:
    """Next-token log-probs from a fixed table keyed by the path's last token."""

    forwards = 0

    def __init__(self, table, vocab):
        self.table, self.vocab = table, vocab
        self.calls = []

    def logits(self, context, tree, nodes):
        self.calls.append(list(nodes))
        out = torch.full((len(nodes), self.vocab), -30.0)
        for row, node in enumerate(nodes):
            for token, p in self.table.get(tree.tokens[node], {}).items():
                out[row, token] = math.log(p)
        return out


def test_expands_top_k_by_cumulative_probability_and_reranks():
    # after 0: 1 (0.6), 2 (0.4); after 1: 3 (0.9), 4 (0.1); after 2: 5 (0.5), 6 (0.5)
    table = {0: {1: 0.6, 2: 0.4}, 1: {3: 0.9, 4: 0.1}, 2: {5: 0.5, 6: 0.5}, 3: {7: 1.0}, 5: {8: 1.0}, 6: {9: 1.0}}
    drafter = TableDrafter(table, 10)
    tree = EagleDynamicTree(top_k=2, depth=3, total_tokens=6).build(drafter, [], 0, Sampling(), None)
    # depth 2 expands both depth-1 nodes; the best two grandchildren (3: .54, 5: .2 tied with 6) go on
    assert len(drafter.calls) == 3 and drafter.calls[0] == [0]
    kept = {tuple(tree.tokens[n] for n in tree.path_to(i)[1:]) for i in range(1, len(tree))}
    # ranks: (1) .6, (1,3) .54, (1,3,7) .54, (2) .4, (2,5)/(2,6) .2: the five best with the root
    assert len(tree) == 6
    assert {(1,), (1, 3), (1, 3, 7), (2,)} <= kept
    assert all(tree.parents[i] < i for i in range(1, len(tree)))
    for i in range(1, len(tree)):
        assert tree.logps[i] <= tree.logps[tree.parents[i]] + 1e-9


@pytest.mark.parametrize("total", [2, 5, 17, 60])
def test_budget_is_never_exceeded(total):
    g = torch.Generator().manual_seed(total)

    class RandomDrafter:
        forwards = 0

        def logits(self, context, tree, nodes):
            return torch.randn(len(nodes), 50, generator=g) * 3

    tree = EagleDynamicTree(top_k=4, depth=5, total_tokens=total).build(RandomDrafter(), [], 1, Sampling(), None)
    assert len(tree) == total
    assert tree.origin is not None and tree.origin[0] == 0


def test_subtree_keeps_ancestors_and_maps_back():
    tree = DraftTree.root(9)
    a = tree.add(0, 1)
    b = tree.add(0, 2)
    c = tree.add(b, 3)
    sub = tree.subtree([c])
    assert sub.tokens == [9, 2, 3] and sub.parents == [-1, 0, 1]
    assert sub.drafted_ids([0, 1, 2]) == [0, b, c]
    assert a not in sub.origin


@pytest.mark.parametrize("kwargs", [{"top_k": 0}, {"depth": 0}, {"total_tokens": 1}])
def test_bad_parameters(kwargs):
    with pytest.raises(ConfigError, match="method.tree"):
        EagleDynamicTree(**kwargs)


def test_accepted_nodes_are_ranked_within_their_depth_by_cumulative_draft_probability():
    from specbench.engine.loop import _depth_ranks

    tree = DraftTree.root(0)
    a = tree.add(0, 1, -0.1)   # depth 1, rank 0
    b = tree.add(0, 2, -2.0)   # depth 1, rank 1
    c = tree.add(b, 3, -0.1)   # depth 2: -2.1 -> rank 1
    d = tree.add(a, 4, -1.0)   # depth 2: -1.1 -> rank 0
    e = tree.add(a, 5, -3.0)   # depth 2: -3.1 -> rank 2
    assert _depth_ranks(tree, [b, c]) == [1, 1]
    assert _depth_ranks(tree, [a, d]) == [0, 0]
    assert _depth_ranks(tree, [a, e]) == [0, 2]
