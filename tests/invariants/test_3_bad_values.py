"""Every tree policy and verifier refuses the same bad values the same way: one
ConfigError line naming the key, what was given and what is allowed."""

import importlib
import math
import re
from pathlib import Path

import pytest

import specbench
from specbench.engine.parts import TreePolicy, Verifier
from specbench.errors import ConfigError
from specbench.trees.cast import CastTree
from specbench.trees.chain import Chain
from specbench.trees.eagle import EagleDynamicTree
from specbench.trees.entmtp import ScheduledTree
from specbench.trees.lookahead import LookaheadTree
from specbench.trees.opt import OptTree
from specbench.trees.static import StaticTree
from specbench.trees.talon import TalonTree
from specbench.verify.mars import MarsVerifier
from specbench.verify.typical import TypicalVerifier

# what a class needs besides the value under test (ScheduledTree checks its values before
# it reads the bank)
REQUIRED = {StaticTree: {"choices": [[0], [1]]}, ScheduledTree: {"bank": None, "task": "gsm8k"}}
INTEGERS = {  # key: the smallest allowed
    Chain: {"gamma": 1},
    EagleDynamicTree: {"top_k": 1, "depth": 0, "total_tokens": 2},
    CastTree: {"top_k": 1, "depth": 0, "total_tokens": 2, "buffer": 1},
    TalonTree: {"budget": 2, "top_k": 1, "robust_layers": 0},
    OptTree: {"nodes": 1, "max_depth": 1},
    LookaheadTree: {"window": 1, "ngram": 2, "candidates": 0, "seed": 0},
    StaticTree: {"size": 1},
}
NUMBERS = {  # key: a valid value
    CastTree: {"c1": 3.0, "c2": 3.0, "c3": 3.0},
    TalonTree: {"mu": 0.03},
    OptTree: {"threshold": 0.5},
    ScheduledTree: {"tau_on": 0.02, "tau_off": 0.01},
    MarsVerifier: {"theta": 0.9},
    TypicalVerifier: {"posterior_threshold": 0.09, "posterior_alpha": 0.3},
}
CHOICES = {ScheduledTree: ("policy", "path_value"), MarsVerifier: ("rule",), TypicalVerifier: ("next_token",)}
SWITCHES = {CastTree: ("breadth_pruning", "depth_pruning", "dynamic_rerank")}

BAD_INTEGERS = [True, "3", 2.5, [3]]  # None is valid where it means "all" (StaticTree.size)
BAD_NUMBERS = [True, "0.5", math.nan, math.inf, -1, [0.5]]
# EntMTP's offline frontier search and TALON's Figure 15 benchmark (trees/), not parts
EXPERIMENTS = {"entmtp_frontier", "talon_expansion"}
BAD_CHOICES = ["nonsense", None, 1]
BAD_SWITCHES = [1, "yes", None]


def part_classes() -> set[type]:
    """Every TreePolicy and Verifier defined in specbench/trees and specbench/verify, but for
    the papers' experiments beside their policies (EXPERIMENTS), whose verifiers wrap a
    configured one and no method config names."""
    found = set()
    root = Path(specbench.__file__).parent
    for package in ("trees", "verify"):
        for file in sorted((root / package).glob("*.py")):
            if file.stem in EXPERIMENTS:
                continue
            module = importlib.import_module(f"specbench.{package}.{file.stem}")
            found |= {
                c
                for c in vars(module).values()
                if isinstance(c, type) and issubclass(c, (TreePolicy, Verifier)) and c.__module__ == module.__name__
            }
    return found


def key_of(cls: type, name: str) -> str:
    return f"method.{'verifier' if issubclass(cls, Verifier) else 'tree'}.{name}"


def cases():
    for table, bad in ((INTEGERS, BAD_INTEGERS), (NUMBERS, BAD_NUMBERS)):
        for cls, keys in table.items():
            yield from ((cls, name, value) for name in keys for value in bad)
    for cls, keys in INTEGERS.items():
        yield from ((cls, name, low - 1) for name, low in keys.items())
    for table, bad in ((CHOICES, BAD_CHOICES), (SWITCHES, BAD_SWITCHES)):
        for cls, keys in table.items():
            yield from ((cls, name, value) for name in keys for value in bad)


def test_every_part_class_is_covered():
    """A new policy or verifier subclasses its base, and its values get a row here."""
    tables = (REQUIRED, INTEGERS, NUMBERS, CHOICES, SWITCHES)
    valueless = {c for c in part_classes() if not any(c in table for table in tables)}
    assert {c.__name__ for c in valueless} == {"Autoregressive", "StandardVerifier"}


@pytest.mark.parametrize("cls, name, value", list(cases()), ids=lambda v: getattr(v, "__name__", repr(v)))
def test_a_bad_value_is_refused_naming_its_key(cls, name, value):
    with pytest.raises(ConfigError, match=rf"^{re.escape(key_of(cls, name))}: ") as refused:
        cls(**{**REQUIRED.get(cls, {}), name: value})
    assert len(str(refused.value).splitlines()) == 1
    assert repr(value) in str(refused.value)


@pytest.mark.parametrize("cls", sorted((INTEGERS.keys() | NUMBERS.keys()) - {ScheduledTree}, key=lambda c: c.__name__))
def test_the_bounds_themselves_are_allowed(cls):
    valid = {**INTEGERS.get(cls, {}), **NUMBERS.get(cls, {})}
    part = cls(**REQUIRED.get(cls, {}), **valid)
    assert isinstance(part, (TreePolicy, Verifier))
