"""MARS verification rules on hand-made logits (MARS paper, Algorithm 1 and Figure 2; the release's rule beside it)."""

import math

import torch
import yaml

from specbench import ROOT
from specbench.engine.sampling import Sampling
from specbench.engine.tree import DraftTree
from specbench.verify.mars import MarsVerifier

V = 8


NICE, LOVELY, WALK, WORK = 1, 2, 3, 4


def logits_row(values: dict[int, float], rest: float = 0.5) -> torch.Tensor:
    row = torch.full((V,), rest)
    for token, value in values.items():
        row[token] = value
    return row


def chain(*tokens) -> DraftTree:
    tree = DraftTree.root(0)
    node = 0
    for token in tokens:
        node = tree.add(node, token)
    return tree


def verify(tree, rows, sampling=Sampling(), theta=0.9, seed=0):
    logits = torch.stack(rows + [logits_row({5: 3.0})] * (len(tree) - len(rows)))
    return MarsVerifier(theta, rule="paper").accept(tree, logits, sampling, torch.Generator().manual_seed(seed))


def runner_up_before_top():
    """A node whose first child (the draft's favourite) is the target's top-2, its second the top-1."""
    tree = DraftTree.root(0)
    runner_up = tree.add(0, LOVELY, math.log(0.6))
    top = tree.add(0, NICE, math.log(0.3))
    return tree, runner_up, top


def released(tree, rows, sampling, theta=0.9, seed=0):
    logits = torch.stack(rows + [logits_row({5: 3.0})] * (len(tree) - len(rows)))
    return MarsVerifier(theta, rule="release").accept(tree, logits, sampling, torch.Generator().manual_seed(seed))


def test_the_release_rule_is_the_default():
    # the rule behind the published T=1 tables (results/reference/mars.notes.md)
    assert MarsVerifier().rule == "release"
    for method in ("mars", "sps_mars"):
        assert (
            yaml.safe_load((ROOT / "conf" / "method" / f"{method}.yaml").read_text())["verifier"]["rule"] == "release"
        )


def test_low_margin_runner_up_is_accepted():
    # Figure 2 (left): target prefers "nice" over "lovely" by r = 0.911 > 0.9; the draft "lovely" stays
    result = verify(chain(LOVELY), [logits_row({NICE: 10.0, LOVELY: 9.11})])
    assert result.path == [0, 1] and result.next_token == 5
    assert result.notes["relaxed"] == 1 and result.notes["rejected"] == 0
    z1, z2, lse, outcome = result.notes["decisions"][0]
    assert (z1, z2, outcome) == (10.0, 9.11, "relaxed")
    assert lse == round(float(logits_row({NICE: 10.0, LOVELY: 9.11}).logsumexp(0)), 4)


def test_high_margin_runner_up_is_rejected():
    # Figure 2 (right): "walk" over "work" with r = 0.728 < 0.9; the draft "work" is replaced by "walk"
    result = verify(chain(WORK, 6), [logits_row({WALK: 10.0, WORK: 7.28})])
    assert result.path == [0] and result.next_token == WALK
    assert result.notes["rejected"] == 1 and result.notes["relaxed"] == 0


def test_only_the_runner_up_is_relaxed():
    third = logits_row({NICE: 10.0, LOVELY: 9.5, WALK: 9.4})
    result = verify(chain(WALK), [third])
    assert result.path == [0] and result.next_token == NICE


def test_exact_match_continues_down_the_chain():
    rows = [logits_row({NICE: 5.0}), logits_row({LOVELY: 4.0, WALK: 3.9}), logits_row({WORK: 4.0})]
    result = verify(chain(NICE, WALK, LOVELY), rows)
    assert result.path == [0, 1, 2] and result.next_token == WORK  # 3.9/4 = 0.975 relaxes WALK; LOVELY is not top-2
    assert (result.notes["exact"], result.notes["relaxed"], result.notes["rejected"]) == (1, 1, 1)


def test_non_positive_top_logit_never_relaxes():
    # r = (-1.05)/(-1.0) = 1.05 would pass any theta < 1: undefined, so strict
    result = verify(chain(LOVELY), [logits_row({NICE: -1.0, LOVELY: -1.05}, rest=-9.0)])
    assert result.path == [0] and result.next_token == NICE
    assert result.notes["ratio_undefined"] == 1


def test_theta_at_least_one_is_strict_greedy():
    result = verify(chain(LOVELY), [logits_row({NICE: 10.0, LOVELY: 9.99})], theta=1.0)
    assert result.path == [0] and result.next_token == NICE


def test_tree_prefers_the_exact_child_then_the_relaxed_one():
    tree = DraftTree.root(0)
    tree.add(0, WALK)
    runner_up = tree.add(0, LOVELY)
    top = tree.add(0, NICE)
    row = logits_row({NICE: 10.0, LOVELY: 9.5})
    assert verify(tree, [row]).path == [0, top]
    tree_without_top = tree.subtree([1, 2])
    assert verify(tree_without_top, [row]).path == [0, 2] and tree_without_top.tokens[2] == LOVELY
    assert runner_up == 2


def test_sampling_accepts_the_top_one_child_before_a_relaxed_top_two_child():
    # Algorithm 1 lines 6-9: the exact match is checked first, whatever the tree's order
    tree, _, top = runner_up_before_top()
    row = logits_row({NICE: 10.0, LOVELY: 9.5})
    for seed in range(20):
        result = verify(tree, [row], Sampling(temperature=1.0), seed=seed)
        assert result.path == [0, top] and (result.notes["exact"], result.notes["relaxed"]) == (1, 0)


def test_the_release_takes_the_first_top_two_child_in_tree_order():
    tree, runner_up, _ = runner_up_before_top()
    row = logits_row({NICE: 10.0, LOVELY: 9.5})
    result = released(tree, [row], Sampling(temperature=1.0))
    assert result.path == [0, runner_up] and result.notes["relaxed"] == 1


def test_sampling_accepts_a_top_two_draft_outright_when_the_margin_is_low():
    # at T=1 the lossless rule would accept the point-mass draft LOVELY with p(LOVELY) ~ 0.3
    row = logits_row({NICE: 10.0, LOVELY: 9.2})
    hits = sum(verify(chain(LOVELY), [row], Sampling(temperature=1.0), seed=s).path == [0, 1] for s in range(200))
    assert hits == 200


def test_sampling_falls_back_to_the_lossless_rule():
    row = logits_row({NICE: 10.0, LOVELY: 8.0})  # r = 0.8: lossless, accept with p(LOVELY)
    p_lovely = float(torch.softmax(row, -1)[LOVELY])
    draws = 4000
    hits = sum(verify(chain(LOVELY), [row], Sampling(temperature=1.0), seed=s).path == [0, 1] for s in range(draws))
    assert abs(hits / draws - p_lovely) < 4 * (p_lovely * (1 - p_lovely) / draws) ** 0.5
    result = verify(chain(LOVELY), [row], Sampling(temperature=1.0), seed=1)
    assert result.notes["relaxed"] == 0 and result.notes["sampled"] + result.notes["rejected"] == 1


def test_ratio_uses_raw_logits_not_temperature():
    # r = 0.95 on raw logits relaxes even at a low temperature that makes p(LOVELY) tiny
    row = logits_row({NICE: 10.0, LOVELY: 9.5})
    result = verify(chain(LOVELY), [row], Sampling(temperature=0.1), seed=3)
    assert result.path == [0, 1] and result.notes["relaxed"] == 1


def test_sampling_never_relaxes_to_a_token_top_p_removed():
    # p(LOVELY)/p(NICE) = e^-2: top_p = 0.8 keeps only NICE, so LOVELY cannot be accepted by the margin rule
    row = logits_row({NICE: 30.0, LOVELY: 28.0}, rest=0.0)
    outcomes = {
        verify(chain(LOVELY), [row], Sampling(temperature=1.0, top_p=0.8), seed=s).path == [0, 1] for s in range(50)
    }
    assert outcomes == {False}


def test_sampling_counts_a_top_one_draft_as_exact():
    row = logits_row({NICE: 10.0, LOVELY: 9.5})
    result = verify(chain(NICE), [row], Sampling(temperature=1.0))
    assert result.notes["exact"] == 1 and result.notes["relaxed"] == 0


def test_the_release_does_not_relax_at_t0():
    # the release's greedy branch is plain matching: the runner-up at r = 0.911 is rejected
    result = released(chain(LOVELY), [logits_row({NICE: 10.0, LOVELY: 9.11})], Sampling())
    assert result.path == [0] and result.next_token == NICE and result.notes["exact"] == 0


def test_the_release_relaxes_on_negative_logits():
    # z1 = -1, z2 = -1.05: the paper's ratio is undefined (strict rule); the release's is 1.05 > theta
    rows = [logits_row({NICE: -1.0, LOVELY: -1.05}, rest=-9.0)]
    t1 = Sampling(temperature=1.0)
    result = released(chain(LOVELY), rows, t1)
    assert result.path == [0, 1] and result.notes["relaxed"] == 1 and result.notes["ratio_undefined"] == 1
    assert verify(chain(LOVELY), rows, t1).notes["relaxed"] == 0


def test_the_release_accepts_with_the_drafts_probability_and_adjusts_one_token():
    # p(WALK) = 0.3 under the target; the draft gave WALK q = 0.6: accepted with min(1, 0.3 / 0.6)
    p = torch.full((V,), 0.5 / 6)
    p[WALK], p[NICE] = 0.3, 0.2  # logits log(p) + 10: positive, and r = 8.39 / 8.80 < theta = 0.99
    tree = DraftTree.root(0)
    tree.add(0, WALK, math.log(0.6))
    accepted, corrections = 0, set()
    for seed in range(400):
        result = released(tree, [p.log() + 10], Sampling(temperature=1.0), theta=0.99, seed=seed)
        accepted += result.path == [0, 1]
        if result.path == [0]:
            corrections.add(result.next_token)
    assert 0.42 < accepted / 400 < 0.58
    assert WALK not in corrections  # max(0, 0.3 - 0.6) = 0 after the rejection
