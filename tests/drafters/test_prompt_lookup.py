"""Prompt lookup: the token after the latest earlier match of the longest trailing n-gram."""

import pytest
import torch

from specbench.drafters.prompt_lookup import PromptLookupDrafter
from specbench.engine.tree import DraftTree
from specbench.errors import ConfigError


def test_longest_ngram_wins_then_latest_match():
    pld = PromptLookupDrafter(100, max_ngram=3, min_ngram=1)
    # trailing 3-gram (1 2 3) occurred once, followed by 9; the 1-gram (3) later, followed by 7
    assert pld.lookup([1, 2, 3, 9, 3, 7, 1, 2, 3]) == 9
    # only the 1-gram matches: the latest occurrence of 5 is followed by 8
    assert pld.lookup([5, 6, 5, 8, 4, 5]) == 8
    assert pld.lookup([1, 2, 3, 4]) is None
    assert PromptLookupDrafter(100, max_ngram=2, min_ngram=2).lookup([5, 6, 5, 8, 4, 5]) is None


def test_logits_are_point_masses_along_the_path():
    pld = PromptLookupDrafter(50)
    tree = DraftTree.root(3)
    node = tree.add(0, 4)
    [logits] = pld.logits([[1, 2, 3, 4, 5, 6, 2]], [tree], [[0, node]])
    assert logits.argmax(-1).tolist() == [4, 5]
    assert (logits == 0).sum().item() == 2
    assert pld.logits([[1, 2]], [DraftTree.root(3)], [[0]]) == [None]


def test_each_row_looks_up_its_own_context():
    """Rows of a batch: a hit, a miss (None), a row asking for nothing (None), and a row
    where only one of its two nodes has a proposal (-inf row for the other)."""
    pld = PromptLookupDrafter(50)
    hit = DraftTree.root(3)
    hit_node = hit.add(0, 4)
    partial = DraftTree.root(8)
    partial_node = partial.add(0, 30)
    contexts = [[1, 2, 3, 4, 5, 6, 2], [1, 2], [9, 9, 9], [7, 8, 11]]
    trees = [hit, DraftTree.root(3), DraftTree.root(9), partial]
    rows = pld.logits(contexts, trees, [[0, hit_node], [0], [], [0, partial_node]])
    assert rows[1] is None and rows[2] is None
    assert rows[0].argmax(-1).tolist() == [4, 5] and (rows[0] == 0).sum().item() == 2
    # [7, 8, 11, 8] -> 11 follows the earlier 8; [7, 8, 11, 8, 30] has no earlier 30
    assert rows[3][0].argmax().item() == 11 and (rows[3][0] == 0).sum().item() == 1
    assert torch.isneginf(rows[3][1]).all()
    assert pld.logits(contexts, trees, [[] for _ in trees]) == [None] * 4


@pytest.mark.parametrize("kwargs", [{"min_ngram": 0}, {"max_ngram": 1, "min_ngram": 2}])
def test_bad_ngram_sizes(kwargs):
    with pytest.raises(ConfigError, match="method.drafter"):
        PromptLookupDrafter(10, **kwargs)
