"""OPT-Tree: layer selection, the expected-acceptance stopping rule and the final tree, on
hand-made draft distributions."""

import math

import pytest
import torch

from specbench.engine.parts import Drafter
from specbench.engine.sampling import Sampling
from specbench.errors import ConfigError
from specbench.trees.opt import OptTree


class TableDrafter(Drafter):
    """Next-token probabilities from a table keyed by the node's token; counts forwards."""

    def __init__(self, table, vocab=40):
        self.table, self.vocab, self.calls = table, vocab, []

    def logits(self, contexts, trees, nodes):
        self.calls.append([list(n) for n in nodes])
        out = []
        for tree, row in zip(trees, nodes):
            z = torch.full((len(row), self.vocab), -30.0)
            for i, node in enumerate(row):
                for token, p in self.table.get(tree.tokens[node], {}).items():
                    z[i, token] = math.log(p)
            out.append(z if row else None)
        return out


def paths(tree):
    return sorted(tuple(tree.tokens[n] for n in tree.path_to(i)[1:]) for i in range(1, len(tree)))


# after 0: 1 (.6), 2 (.4); after 1: 3 (.9), 4 (.1); after 2: 5 (.5), 6 (.5); then chains
TABLE = {
    0: {1: 0.6, 2: 0.4},
    1: {3: 0.9, 4: 0.1},
    2: {5: 0.5, 6: 0.5},
    3: {7: 1.0},
    5: {8: 1.0},
    6: {9: 1.0},
    7: {10: 1.0},
}


def test_layers_keep_the_most_probable_paths_and_the_tree_is_the_best_n():
    drafter = TableDrafter(TABLE)
    [tree] = OptTree(nodes=3, threshold=0.0, max_depth=3).grow(drafter, [[]], [0], Sampling(), [None])
    # layer 1: 1 (.6), 2 (.4), then a -30 logit; layer 2 from those three: (1,3) .54, (2,5) .2, (2,6) .2;
    # layer 3: (1,3,7) .54, ... The best 3 of all kept nodes: 1 .6, (1,3) .54, (1,3,7) .54
    assert paths(tree) == [(1,), (1, 3), (1, 3, 7)]
    assert len(drafter.calls) == 3 and drafter.calls[1] == [[1, 2, 3]]


def test_drafting_stops_when_a_layer_adds_too_little_expected_acceptance():
    drafter = TableDrafter(TABLE)
    # E(T1) = .6 + .4 + 0 = 1.0; E(T2) = .6 + .54 + .4 = 1.54: gain .54 > .5 goes on;
    # E(T3) = .6 + .54 + .54 = 1.68: gain .14 <= .5 stops before a fourth forward
    OptTree(nodes=3, threshold=0.5, max_depth=10).grow(drafter, [[]], [0], Sampling(), [None])
    assert len(drafter.calls) == 3
    shy = TableDrafter(TABLE)
    OptTree(nodes=3, threshold=1.05, max_depth=10).grow(shy, [[]], [0], Sampling(), [None])
    assert len(shy.calls) == 1  # the first layer's E = 1.0 is not above 1.05


def test_max_depth_caps_the_layers_and_rows_stop_on_their_own():
    chain = {t: {t + 1: 1.0} for t in range(30)}
    drafter = TableDrafter(chain)
    trees = OptTree(nodes=4, threshold=0.5, max_depth=5).grow(drafter, [[], []], [0, 20], Sampling(), [None, None])
    assert len(drafter.calls) == 5
    assert paths(trees[0]) == [(1,), (1, 2), (1, 2, 3), (1, 2, 3, 4)]  # the best 4 of 5 sure tokens
    spread = {1: 0.2, 2: 0.2, **{t: 0.6 / 10 for t in range(30, 40)}}  # the best 2 carry .4
    stops = TableDrafter({0: spread, 20: {21: 1.0}, 21: {22: 1.0}, 22: {23: 1.0}})
    trees = OptTree(nodes=2, threshold=0.5, max_depth=5).grow(stops, [[], []], [0, 20], Sampling(), [None, None])
    assert stops.calls[1][0] == [] and stops.calls[1][1]  # row 0 (E = .4 after one layer) stopped


@pytest.mark.parametrize(
    "key,value", [("nodes", 0), ("max_depth", 0), ("threshold", -0.1), ("nodes", 2.5), ("threshold", True)]
)
def test_bad_parameters(key, value):
    with pytest.raises(ConfigError, match=f"method.tree.{key}"):
        OptTree(**{key: value})
