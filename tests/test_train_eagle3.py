"""EAGLE-3 training-time test: the unrolled rows see exactly what tree nodes see."""

import torch

from specbench.train.eagle3 import draft_vocabulary, ttt_mask


def test_step_zero_is_causal():
    assert torch.equal(ttt_mask(4, 0), torch.ones(4, 4).tril().bool())


def test_step_two_sees_its_anchor_context_and_its_own_chain():
    n = 6
    mask = ttt_mask(n, 2)
    assert mask.shape == (n, 3 * n)
    t = 5  # anchor a = 3: committed rows 0..3, then its step-1 row at 4 and itself (step 2) at 5
    assert mask[t, :n].nonzero().flatten().tolist() == [0, 1, 2, 3]
    assert mask[t, n : 2 * n].nonzero().flatten().tolist() == [4]
    assert mask[t, 2 * n :].nonzero().flatten().tolist() == [5]
    assert not mask[1, :n].any() and mask[1, 2 * n + 1]  # no anchor (unscored): no committed rows


def test_draft_vocabulary_keeps_frequent_tokens_and_eos():
    rows = [{"answer": [5, 5, 5, 7, 7, 9]}, {"answer": [5, 7, 11]}]
    assert draft_vocabulary(rows, 3, 20, {2}).tolist() == [2, 5, 7]
    assert draft_vocabulary(rows, 6, 20, {2}).tolist() == [0, 2, 5, 7, 9, 11]
