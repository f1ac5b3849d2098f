"""Prompt lookup: the token after the latest earlier match of the longest trailing n-gram."""

from specbench.drafters.prompt_lookup import PromptLookupDrafter
from specbench.engine.tree import DraftTree

import pytest

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
    logits = pld.logits([1, 2, 3, 4, 5, 6, 2], tree, [0, node])
    assert logits.argmax(-1).tolist() == [4, 5]
    assert (logits == 0).sum().item() == 2
    assert pld.logits([1, 2], DraftTree.root(3), [0]) is None


@pytest.mark.parametrize("kwargs", [{"min_ngram": 0}, {"max_ngram": 1, "min_ngram": 2}])
def test_bad_ngram_sizes(kwargs):
    with pytest.raises(ConfigError, match="method.drafter"):
        PromptLookupDrafter(10, **kwargs)
