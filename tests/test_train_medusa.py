"""Medusa head training: the validation rules and a resumable run that exports heads
the loader takes strictly."""

import json

import torch

from conftest import train_heads_twice
from specbench.train.medusa import chain_tau, head_hits


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


def test_training_resumes_and_exports_loadable_heads(tmp_path):
    out = train_heads_twice("specbench.train.medusa", tmp_path, heads=3)
    curve = [json.loads(line) for line in (out / "curve.jsonl").read_text().splitlines()]
    assert [p["step"] for p in curve] == [0, 1, 2, 3] and all(len(p["top1"]) == 3 and 1.0 <= p["chain_tau"] <= 4.0 for p in curve)
    config = json.loads((out / "config.json").read_text())
    assert config["shared_lm_head"] and config["medusa_num_heads"] == 3 and config["draft_vocab_size"] == 512
    training = json.loads((out / "training.json").read_text())
    assert training["steps"] == 3 and training["validation_answers"] == 2 and (out / "curve.png").exists()
