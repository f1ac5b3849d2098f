"""Medusa head training: the validation rules and a resumable run that exports heads
the loader takes strictly."""

import json

import torch
from conftest import train_heads_twice

from specbench.train.medusa import answer_rows, chain_tau, head_hits, heads_loss


def test_head_hits_align_each_head_with_its_offset():
    # anchors t = 0, 1; token j+2 of the answer is target_top1[j]
    target_top1 = torch.tensor([[10, 11, 12, 13]])
    mask = torch.tensor([[True, True, True, False]])
    top1 = torch.tensor([[[10, 11, 99], [11, 0, 13]]])  # anchor 0: heads 0,1 hit; anchor 1: head 0 hits
    hits = head_hits(top1, target_top1, mask)
    assert [h.tolist() for h, _ in hits] == [[[True, True]], [[True, False]], [[False, False]]]
    assert [s.tolist() for _, s in hits] == [[[True, True]], [[True, True]], [[True, False]]]
    # chains: anchor 0 accepts 2 (head 2 misses); anchor 1's head-2 token is unlabelled: not scored
    assert chain_tau(hits) == (2, 1)


def test_heads_loss_reads_only_the_anchors_some_head_is_scored_at():
    """Head i at anchor t is scored where token t+2+i is labelled; the loss from the
    scored anchors' logits alone is each head's soft cross-entropy there, weighted 0.8^i."""
    torch.manual_seed(0)
    mask = torch.tensor([[False, False, True, True, False], [False, True, True, False, False]])  # labels of tokens t+2
    n, heads, vocab = 3, 2, 6
    rows = answer_rows(mask, n, heads)
    # anchor 0 of row 0: neither head's token is labelled
    assert rows.tolist() == [[False, True, True], [True, True, True]]
    probs, logits = torch.randn(2, 5, vocab).softmax(-1), torch.randn(2, n, heads, vocab)
    top1 = probs.argmax(-1)
    loss, metrics = heads_loss(logits[rows], probs, top1, mask, torch.arange(vocab), rows)
    expected, expected_top1 = 0.0, []
    for i in range(heads):
        scored = mask[:, i : i + n]
        ce = -(probs[:, i : i + n] * logits[:, :, i].log_softmax(-1)).sum(-1)
        expected = expected + 0.8**i * ce[scored].mean()
        expected_top1.append(float((logits[:, :, i].argmax(-1) == top1[:, i : i + n])[scored].float().mean()))
    torch.testing.assert_close(loss, expected)
    assert metrics == expected_top1


def test_training_resumes_and_exports_loadable_heads(tmp_path):
    out = train_heads_twice("specbench.train.medusa", tmp_path, heads=3)
    curve = [json.loads(line) for line in (out / "curve.jsonl").read_text().splitlines()]
    assert [p["step"] for p in curve] == [0, 1, 2, 3] and all(
        len(p["top1"]) == 3 and 1.0 <= p["chain_tau"] <= 4.0 for p in curve
    )
    config = json.loads((out / "config.json").read_text())
    assert config["shared_lm_head"] and config["medusa_num_heads"] == 3 and config["draft_vocab_size"] == 512
    training = json.loads((out / "training.json").read_text())
    assert training["steps"] == 3 and training["validation_answers"] == 2 and (out / "curve.png").exists()
