"""Medusa head training: the validation rules and a resumable run that exports heads
the loader takes strictly."""

import json
import subprocess
import sys
from pathlib import Path

import torch

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
    rng = torch.Generator().manual_seed(0)
    rows = [{"key": f"k{i}", "temperature": 0.0, "prompt": [1, 520, 9531, 198], "answer": torch.randint(100, 5000, (70,), generator=rng).tolist()} for i in range(6)]
    data = tmp_path / "answers.jsonl"
    data.write_text("".join(json.dumps(r) + "\n" for r in rows))
    out = tmp_path / "heads"
    args = [sys.executable, "-m", "specbench.train.medusa", "--data", str(data), "--out", str(out), "--sharegpt-answers", "4", "--heads", "3",
            "--batch", "2", "--length", "48", "--draft-vocab", "512", "--validation-rows", "2", "--checkpoint-every", "1", "--threads", "1"]
    root = Path(__file__).resolve().parents[1]
    for steps in (2, 3):
        result = subprocess.run([*args, "--steps", str(steps)], cwd=root, capture_output=True, text=True, timeout=600)
        assert result.returncode == 0, result.stderr[-2000:]
    curve = [json.loads(line) for line in (out / "curve.jsonl").read_text().splitlines()]
    assert [p["step"] for p in curve] == [1, 2, 3] and all(len(p["top1"]) == 3 and 1.0 <= p["chain_tau"] <= 4.0 for p in curve)
    config = json.loads((out / "config.json").read_text())
    assert config["shared_lm_head"] and config["medusa_num_heads"] == 3 and config["draft_vocab_size"] == 512
    training = json.loads((out / "training.json").read_text())
    assert training["steps"] == 3 and training["validation_answers"] == 2 and (out / "curve.png").exists()
