"""The SpS draft trainer: held-out chain tau per gamma, sizing by predicted speedup."""

import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from specbench.train.sps_draft import chain_taus
from specbench.train.sps_sizing import parse_shape, predicted_speedups

ROOT = Path(__file__).resolve().parents[1]


def test_chain_tau_per_gamma_counts_leading_hits_from_every_anchor():
    """Hits 1 1 0 1: gamma 1 accepts 3 of 4 anchors; gamma 2 from anchors 0-2 accepts
    2 + 1 + 0; gamma 3 from anchors 0-1 accepts 2 + 1; gamma 4 from anchor 0 accepts 2."""
    hit = torch.tensor([[True, True, False, True]])
    taus = chain_taus([(hit, torch.ones_like(hit))], 4)
    assert taus == pytest.approx([1 + 3 / 4, 1 + 3 / 3, 1 + 3 / 2, 1 + 2 / 1])


def test_sizing_prices_gamma_drafts_and_the_tail_read_against_ar():
    """Target 10 + n ms, draft n ms, no overhead. gamma 1: tau 1.5 over (12 + 1.5) ms against
    AR's 11 ms a token; gamma 2: tau 2 over (13 + 2 + 1) ms."""
    speedups = predicted_speedups([1.5, 2.0], lambda n: 10.0 + n, lambda n: float(n), 0.0, 0.0)
    assert speedups == pytest.approx([1.5 * 11 / 13.5, 2 * 11 / 16])
    dearer = predicted_speedups([1.5, 2.0], lambda n: 10.0 + n, lambda n: 4.0 * n, 0.0, 0.0)
    assert all(d < s for d, s in zip(dearer, speedups))  # the same tau from a dearer draft pays less


def test_a_bad_shape_is_one_line_naming_the_option():
    assert parse_shape("4x192") == (4, 192)
    result = subprocess.run([sys.executable, "-m", "specbench.train.sps_draft", "size", "--data", "x", "--out", "y", "--shapes", "4by192"],
                            cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert result.returncode == 2 and "--shapes" in result.stderr and "LAYERSxHIDDEN" in result.stderr
    assert "Traceback" not in result.stderr


def test_training_resumes_and_records_tau_per_gamma(tmp_path):
    """Two steps, then a re-run to three: the curve continues on the same held-out answers,
    and the export (tied embedding, no lm_head key) loads as a Llama."""
    rng = torch.Generator().manual_seed(0)
    rows = [{"key": f"k{i}", "temperature": 0.0, "prompt": [1, 520, 9531, 198], "answer": torch.randint(100, 5000, (70,), generator=rng).tolist()}
            for i in range(6)]
    rows.append({**rows[0], "temperature": 0.8})  # a held-out prompt's sampled answer: neither scored nor trained on
    data = tmp_path / "answers.jsonl"
    data.write_text("".join(json.dumps(r) + "\n" for r in rows))
    out = tmp_path / "draft"
    args = [sys.executable, "-m", "specbench.train.sps_draft", "train", "--data", str(data), "--out", str(out), "--sharegpt-answers", "4",
            "--batch", "2", "--length", "48", "--hidden", "64", "--layers", "1", "--validation-rows", "2", "--checkpoint-every", "1", "--threads", "1"]
    for steps in (2, 3):
        result = subprocess.run([*args, "--steps", str(steps)], cwd=ROOT, capture_output=True, text=True, timeout=600)
        assert result.returncode == 0, result.stderr[-2000:]
    curve = [json.loads(line) for line in (out / "curve.jsonl").read_text().splitlines()]
    assert [p["step"] for p in curve] == [0, 1, 2, 3] and all(len(p["top1"]) == 1 and 1.0 <= p["chain_tau"] <= 5.0 for p in curve)
    training = json.loads((out / "training.json").read_text())
    taus = training["validation_chain_tau_by_gamma"]
    assert training["steps"] == 3 and training["validation_answers"] == 2 and training["target_answers"] == 4
    assert len(taus) == 8 and all(1.0 <= t <= 1 + g for g, t in enumerate(taus, start=1))
    assert training["validation"]["step"] == 3 and 0.0 <= training["validation"]["top1"][0] <= 1.0
    from transformers import LlamaForCausalLM

    model = LlamaForCausalLM.from_pretrained(out)
    assert model.config.hidden_size == 64 and model.config.num_hidden_layers == 1
