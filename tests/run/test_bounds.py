"""Every size a run config sets is bounded before anything loads or is timed: one line
naming the key and its bound (a tree of 100,001 tokens once took the machine's memory)."""

import re

import pytest

from specbench.engine import methods
from specbench.engine.parts import TreePolicy
from specbench.errors import ConfigError
from specbench.run import bounds
from specbench.run.config import compose_config
from specbench.run.runner import Runner
from specbench.trees.lookahead import LookaheadTree

LIMIT = bounds.MAX_FORWARD_ROWS


def refused(overrides: list[str], key: str, context_length: int | None = None) -> str:
    with pytest.raises(ConfigError, match=f"^{re.escape(key)}: ") as error:
        bounds.check_run(compose_config(overrides), context_length)
    return str(error.value)


@pytest.mark.parametrize(
    "method, key",
    [
        ("sps", "gamma"),
        ("eagle3", "top_k"),
        ("eagle3", "depth"),
        ("eagle3", "total_tokens"),
        ("cast", "total_tokens"),
        ("cast", "buffer"),
        ("talon", "budget"),
        ("talon", "top_k"),
        ("opt_tree", "nodes"),
        ("opt_tree", "max_depth"),
        ("lookahead", "window"),
        ("lookahead", "ngram"),
        ("lookahead", "candidates"),
        ("medusa", "size"),
    ],
)
def test_every_size_key_has_an_upper_bound(method, key):
    message = refused([f"method={method}", f"method.tree.{key}={LIMIT + 1}"], f"method.tree.{key}")
    assert f"must be at most {LIMIT}" in message and f"got {LIMIT + 1}" in message
    try:  # at the bound the key passes; the tree it builds may still be too wide
        bounds.check_run(compose_config([f"method={method}", f"method.tree.{key}={LIMIT}"]), None)
    except ConfigError as error:
        assert not str(error).startswith(f"method.tree.{key}:")


def test_size_keys_are_the_policies_counts():
    """What each policy declares bounded is a setting its constructor takes."""
    import inspect

    for policy in TreePolicy.__subclasses__():
        params = inspect.signature(policy.__init__).parameters
        assert set(policy.SIZE_KEYS) <= set(params), policy


def test_the_model_context_bounds_a_tree():
    message = refused(
        ["method=sps", "method.tree.gamma=2000", "gen.max_new_tokens=128"], "method.tree.gamma", context_length=2048
    )
    assert "at most 1919 (the model's context of 2048 tokens less gen.max_new_tokens=128" in message


def test_a_tree_wider_than_its_keys_says_which_settings():
    """Lookahead's width is a product of its keys: each within the bound, the tree not."""
    overrides = ["method=lookahead", "method.tree.window=2000", "method.tree.ngram=5", "method.tree.candidates=1"]
    message = refused(overrides, "method.tree")
    width = LookaheadTree(window=2000, ngram=5, candidates=1).widest()
    assert f"window=2000, ngram=5, candidates=1 verify {width} tokens a row; at most {LIMIT}" in message


def test_batch_times_tree_width_is_bounded():
    message = refused(["method=sps", "method.tree.gamma=500", "gen.batch_size=16"], "gen.batch_size")
    assert "16 rows x 501-token trees" in message and "lower gen.batch_size to 8" in message
    bounds.check_run(compose_config(["method=sps", "method.tree.gamma=500", "gen.batch_size=8"]), None)


def test_auto_trees_are_bounded_by_their_widest_candidate():
    assert methods.reach(compose_config(["method=eagle3"])["method"]) == 60
    refused(["method=eagle3", "gen.batch_size=32", "method.tree.total_tokens=200"], "gen.batch_size")


def test_the_paired_baseline_is_bounded_too():
    refused(["method@baseline.method=sps", "baseline.method.tree.gamma=5000"], "baseline.method.tree.gamma")


def test_profile_range_and_answer_length_are_bounded():
    assert "from 1 to 4096" in refused(["costs.max_n=100000"], "costs.max_n")
    assert "below the model's context of 2048" in refused(["gen.max_new_tokens=4096"], "gen.max_new_tokens", 2048)


def test_the_run_refuses_before_any_model_loads(tmp_path):
    with pytest.raises(ConfigError, match=r"^method.tree.gamma: must be at most 4096 .*got 100000$"):
        Runner(compose_config(["method=sps", "method.tree.gamma=100000", "dataset.limit=1"]), tmp_path)
