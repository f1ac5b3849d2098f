"""Lookahead decoding: the window's attention pattern, the Jacobi step and n-gram pool,
and the verification branch, on hand-made states and logits."""

import pytest
import torch

from specbench.engine.sampling import Sampling
from specbench.errors import ConfigError
from specbench.trees.lookahead import LookaheadTree

V = 100


def started(prompt, **kwargs):
    policy = LookaheadTree(**kwargs)
    policy.begin(1, None)
    [tree] = policy.grow(None, [prompt], [7], Sampling(), [None])
    return policy, tree


def seen(tree, node):
    """Tokens a node attends to besides the committed text: its path from the root."""
    return [tree.tokens[n] for n in tree.path_to(node)]


def logits_with_argmax(tree, predictions: dict[int, int]):
    z = torch.zeros(len(tree), V)
    for node, token in predictions.items():
        z[node, token] = 5.0
    return z


def test_window_is_the_papers_lookahead_mask_as_a_tree():
    policy, tree = started([1, 2, 3], window=3, ngram=3, candidates=2)
    state = policy.rows[0]
    state.levels = [[10, 11, 12], [20, 21, 22]]
    [tree] = policy.grow(None, [[1, 2, 3]], [7], Sampling(), [None])
    level0, level1 = state.window_nodes
    # level 0: a chain after the pending token; level 1, column k: after level 0 up to column k
    assert [seen(tree, n) for n in level0] == [[7, 10], [7, 10, 11], [7, 10, 11, 12]]
    assert [seen(tree, n) for n in level1] == [[7, 10, 20], [7, 10, 11, 21], [7, 10, 11, 12, 22]]
    assert len(tree) == 1 + 6  # empty pool: no verification branch yet


def test_jacobi_step_pools_ngrams_and_moves_the_window_up():
    policy, tree = started([1, 2, 3], window=3, ngram=3, candidates=2)
    state = policy.rows[0]
    state.levels = [[10, 11, 12], [20, 21, 22]]
    [tree] = policy.grow(None, [[1, 2, 3]], [7], Sampling(), [None])
    top = state.window_nodes[-1]
    policy.observe([tree], [[0]], [logits_with_argmax(tree, dict(zip(top, [30, 31, 32])))])
    # column k's guesses and the target's prediction after the top one: an N-gram keyed by its first token
    assert state.pool == {10: {(20, 30): None}, 11: {(21, 31): None}, 12: {(22, 32): None}}
    assert state.levels == [[20, 21, 22], [30, 31, 32]]


def test_pooled_ngrams_of_the_pending_token_are_verified_newest_first_and_share_prefixes():
    policy, _ = started([1, 2, 3], window=1, ngram=3, candidates=2)
    state = policy.rows[0]
    state.levels = [[50], [51]]
    state.pool = {7: {(40, 41): None, (42, 43): None, (42, 44): None}, 9: {(60, 61): None}}
    [tree] = policy.grow(None, [[1, 2, 3]], [7], Sampling(), [None])
    drafted = {tuple(seen(tree, n)) for n in range(len(tree)) if not tree.children(n)}
    assert drafted == {(7, 50, 51), (7, 42, 44), (7, 42, 43)}  # G=2 newest; (40, 41) is older
    root_children = [tree.tokens[c] for c in tree.children(0)]
    assert sorted(root_children) == [42, 50] and len(tree) == 1 + 2 + 3


def test_a_candidate_equal_to_a_window_guess_shares_its_node():
    policy, _ = started([1], window=2, ngram=2, candidates=1)
    state = policy.rows[0]
    state.levels = [[40, 41]]
    state.pool = {7: {(40, 99): None}}
    [tree] = policy.grow(None, [[1]], [7], Sampling(), [None])
    assert [tree.tokens[c] for c in tree.children(0)] == [40]
    assert sorted(tree.tokens[c] for c in tree.children(tree.children(0)[0])) == [41, 99]


def test_pool_keeps_the_newest_g_continuations_per_token():
    policy, tree = started([1], window=1, ngram=2, candidates=2)
    state = policy.rows[0]
    for token in (30, 31, 30, 32):
        state.levels = [[10]]
        [tree] = policy.grow(None, [[1]], [7], Sampling(), [None])
        policy.observe([tree], [[0]], [logits_with_argmax(tree, {state.window_nodes[-1][0]: token})])
    assert list(state.pool[10]) == [(30,), (32,)]


def test_rows_keep_their_own_state_when_others_leave():
    policy = LookaheadTree(window=2, ngram=2, candidates=1)
    policy.begin(3, None)
    policy.grow(None, [[1], [2], [3]], [7, 8, 9], Sampling(), [None] * 3)
    third = policy.rows[2]
    policy.keep([2])
    assert policy.rows == [third]


def test_initial_guesses_come_from_the_prompt_and_repeat():
    a, _ = started([5, 6, 7, 8], window=4, ngram=3)
    b, _ = started([5, 6, 7, 8], window=4, ngram=3)
    assert a.rows[0].levels == b.rows[0].levels
    assert {t for level in a.rows[0].levels for t in level} <= {5, 6, 7, 8}


@pytest.mark.parametrize(
    "key,value", [("window", 0), ("ngram", 1), ("candidates", -1), ("window", 2.5), ("ngram", True)]
)
def test_bad_parameters(key, value):
    with pytest.raises(ConfigError, match=f"method.tree.{key}"):
        LookaheadTree(**{key: value})
