"""Heads trained on one shared target pass: the same heads as each trainer makes alone,
resumable, and bad options refused in one line."""

import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from conftest import run_in_process, synthetic_answers
from safetensors.torch import load_file

from specbench.errors import ConfigError
from specbench.train.shared_pass import saved_states

ROOT = Path(__file__).resolve().parents[2]
COMMON = [
    "--sharegpt-answers",
    "4",
    "--batch",
    "2",
    "--length",
    "48",
    "--draft-vocab",
    "512",
    "--validation-rows",
    "2",
    "--checkpoint-every",
    "1",
    "--threads",
    "1",
]


def run(*args: str) -> subprocess.CompletedProcess:
    return run_in_process([sys.executable, "-m", *args])


@pytest.mark.slow
def test_heads_trained_together_equal_heads_trained_alone(tmp_path):
    """EAGLE-3 and Medusa heads, 2 steps each alone and together on one target pass a
    batch (Medusa at its own learning rate): the exports hold the same weights, with a
    curve and a loss record per head."""
    data = str(synthetic_answers(tmp_path))
    alone3, alone_m, joint = tmp_path / "eagle3", tmp_path / "medusa", tmp_path / "joint"
    for result in (
        run("specbench.train.eagle3", "--data", data, "--out", str(alone3), *COMMON, "--steps", "2"),
        run(
            "specbench.train.medusa",
            "--data",
            data,
            "--out",
            str(alone_m),
            *COMMON,
            "--heads",
            "2",
            "--steps",
            "2",
            "--lr",
            "4e-4",
        ),
        run(
            "specbench.train.joint",
            "--train",
            "eagle3",
            "medusa",
            "--data",
            data,
            "--out",
            str(joint),
            *COMMON,
            "--medusa-heads",
            "2",
            "--steps",
            "2",
            "--head-lr",
            "medusa=4e-4",
        ),
    ):
        assert result.returncode == 0, result.stderr[-2000:]
    for alone, together, weights in (
        (alone3, joint / "eagle3", "model.safetensors"),
        (alone_m, joint / "medusa", "medusa_lm_head.safetensors"),
    ):
        expected, got = load_file(alone / weights), load_file(together / weights)
        assert expected.keys() == got.keys()
        assert all(torch.equal(expected[k], got[k]) for k in expected), [
            k for k in expected if not torch.equal(expected[k], got[k])
        ]
        curve = [json.loads(line) for line in (together / "curve.jsonl").read_text().splitlines()]
        assert [p["step"] for p in curve] == [0, 1, 2] and len(curve[-1]["top1"]) in (2, 3)
        training = json.loads((together / "training.json").read_text())
        assert training["trained_together"] == ["eagle3", "medusa"] and training["steps"] == 2
        alone_training = json.loads((alone / "training.json").read_text())
        assert len(training["final_metrics_ema"]) == len(alone_training["final_metrics_ema"])
        # the head's own loss, not the joint total
        assert training["final_loss_ema"] == pytest.approx(alone_training["final_loss_ema"], rel=1e-6)
        assert training["lr"] == alone_training["lr"]


@pytest.mark.parametrize(
    "flag, value, message",
    [
        ("--init", "eagle3", "--init: 'eagle3' is not HEAD=DIR"),
        ("--init", "hydra=somewhere", "--init: 'hydra' is not a head this run trains"),
        ("--head-lr", "medusa=fast", "--head-lr: 'medusa=fast': the learning rate must be a positive number"),
        ("--head-lr", "eagle3=-1e-4", "--head-lr: 'eagle3=-1e-4': the learning rate must be a positive number"),
        ("--head-lr", "hydra=1e-4", "--head-lr: 'hydra' is not a head this run trains"),
    ],
)
def test_bad_per_head_options_are_one_line(tmp_path, flag, value, message):
    result = run(
        "specbench.train.joint", "--train", "eagle3", "medusa", "--data", "x", "--out", str(tmp_path / "j"), flag, value
    )
    assert result.returncode == 2 and message in result.stderr and len(result.stderr.strip().splitlines()) == 1


def test_a_checkpoint_resumes_only_the_heads_it_holds(tmp_path):
    checkpoint = tmp_path / "joint.ckpt.pt"
    torch.save(
        {"module": {"eagle3.d2t": torch.zeros(4, dtype=torch.long), "medusa.draft_vocab": torch.arange(4)}}, checkpoint
    )
    states = saved_states(checkpoint, ["medusa", "eagle3"])
    assert states["eagle3"].keys() == {"d2t"} and torch.equal(states["medusa"]["draft_vocab"], torch.arange(4))
    with pytest.raises(ConfigError, match="holds eagle3 medusa: train those"):
        saved_states(checkpoint, ["eagle3", "hydra"])


@pytest.mark.slow
def test_heads_can_train_under_bf16_autocast(tmp_path):
    """--head-autocast runs the heads' forward and backward in bf16 (fp32 weights): the
    first step's loss is the fp32 step's to bf16 rounding, the weights move differently,
    and the record says how the head was trained."""
    data = str(synthetic_answers(tmp_path))
    runs = {}
    for name, extra in (("fp32", []), ("bf16", ["--head-autocast"])):
        out = tmp_path / name
        result = run("specbench.train.eagle3", "--data", data, "--out", str(out), *COMMON, "--steps", "1", *extra)
        assert result.returncode == 0, result.stderr[-2000:]
        runs[name] = (json.loads((out / "training.json").read_text()), load_file(out / "model.safetensors"))
    (fp32, fp32_weights), (bf16, bf16_weights) = runs["fp32"], runs["bf16"]
    assert (fp32["head_autocast"], bf16["head_autocast"]) == (False, True)
    assert (
        bf16["final_loss_ema"] == pytest.approx(fp32["final_loss_ema"], rel=0.02)
        and bf16["final_loss_ema"] != fp32["final_loss_ema"]
    )
    assert not torch.equal(fp32_weights["fc.weight"], bf16_weights["fc.weight"])
