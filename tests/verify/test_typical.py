"""Typical acceptance (Medusa's verifier) on hand-made distributions."""

import math

import pytest
import torch

from specbench.engine.sampling import Sampling
from specbench.engine.tree import DraftTree
from specbench.errors import ConfigError
from specbench.verify.typical import TypicalVerifier


def test_typical_acceptance_rule_on_hand_made_distributions():
    verifier = TypicalVerifier(posterior_threshold=0.09, posterior_alpha=0.3)
    # root: a confident target (H small, threshold = min(0.09, 0.3 e^-H) = 0.09); node 1 under it
    confident = torch.tensor([0.91, 0.05, 0.04, 0.0])
    # node 1: a flat target over 4 tokens (H = ln 4, 0.3/4 = 0.075 < 0.09 sets the threshold)
    flat = torch.full((4,), 0.25)
    tree = DraftTree.root(3)
    tree.add(0, 0)  # p = 0.91 > 0.09: passes
    tree.add(0, 1)  # p = 0.05: fails
    tree.add(1, 2)  # p = 0.25 > 0.075: passes
    p = torch.stack([confident, flat, flat, flat])
    thresholds = verifier.thresholds(p)
    flat_entropy = -(flat * (flat + 1e-5).log()).sum()
    assert thresholds[0] == pytest.approx(0.09) and thresholds[1] == pytest.approx(0.3 * math.exp(-float(flat_entropy)))
    passes, logp = verifier.passes(tree, p, thresholds)
    assert passes == [False, True, False, True] and logp[1] == pytest.approx(math.log(0.91))
    # the test is strict: a token exactly at the threshold fails
    at = DraftTree.root(0)
    at.add(0, 1)
    exact = torch.tensor([0.91, 0.09, 0.0, 0.0])
    assert verifier.passes(at, torch.stack([exact, flat]), torch.tensor([0.09, 0.09]))[0] == [False, False]


def test_typical_acceptance_takes_the_longest_path_then_the_likeliest():
    verifier = TypicalVerifier()
    tree = DraftTree.root(0)
    a = tree.add(0, 1)
    b = tree.add(0, 2)
    tree.add(a, 3)  # fails under a
    b2 = tree.add(b, 3)
    p = torch.tensor(
        [[0.0, 0.6, 0.4, 0.0], [0.0, 0.0, 0.99, 0.01], [0.0, 0.0, 0.0, 1.0], [1.0, 0, 0, 0], [1.0, 0, 0, 0]]
    )
    sampling = Sampling(temperature=1.0)
    out = verifier.accept(tree, p.log(), sampling, torch.Generator().manual_seed(0))
    assert out.path == [0, b, b2] and out.next_token == 0 and out.notes == {"typical_accepted": 2}
    # the next token: the target's argmax (the releases' default), or a sample of the typical set
    spread = p.clone()
    spread[b2] = torch.tensor([0.5, 0.45, 0.05, 0.0])  # threshold 0.09: token 2 is not typical
    assert verifier.accept(tree, spread.log(), sampling, None).next_token == 0
    typical = TypicalVerifier(next_token="typical")
    drawn = {
        typical.accept(tree, spread.log(), sampling, torch.Generator().manual_seed(s)).next_token for s in range(40)
    }
    assert drawn == {0, 1}
    # equal lengths: the likelier token wins
    tie = DraftTree.root(0)
    tie.add(0, 2)
    likelier = tie.add(0, 1)
    out = verifier.accept(tie, torch.tensor([[0.0, 0.6, 0.4, 0.0], [1, 0, 0, 0], [1, 0, 0, 0]]).log(), sampling, None)
    assert out.path == [0, likelier]


@pytest.mark.parametrize("bad", [{"posterior_threshold": 0}, {"posterior_alpha": 1.5}, {"next_token": "nucleus"}])
def test_typical_parameters_are_checked(bad):
    with pytest.raises(ConfigError, match=f"method.verifier.{next(iter(bad))}: "):
        TypicalVerifier(**bad)
