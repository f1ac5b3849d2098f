"""The SpS draft trainer: held-out chain tau per gamma, sizing by predicted speedup."""

import argparse
import json
import sys
from pathlib import Path

import pytest
import torch
from conftest import run_in_process

from specbench.drafters.small_lm import DraftVocab
from specbench.train.sps_draft import chain_taus, draft_labels
from specbench.train.sps_sizing import fits, parse_shape, predicted_speedups

ROOT = Path(__file__).resolve().parents[2]


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


def test_shapes_are_fresh_drafts_or_cuts_of_the_target():
    assert parse_shape("4x192") == {"layers": 4, "hidden": 192, "from_target": None, "draft_vocab": 0}
    assert parse_shape("cut0,1v6144") == {"from_target": [0, 1], "draft_vocab": 6144}
    assert parse_shape("cut29") == {"from_target": [29], "draft_vocab": 0}  # the target's vocabulary
    for bad in ("4x190", "0x192", "cut", "cut0,1v0", "cut0,,1", "cut0,1v", "cutv6144"):
        with pytest.raises(argparse.ArgumentTypeError, match="cutL1,L2"):
            parse_shape(bad)


def test_sizing_chooses_only_files_that_fit():
    ranked = [{"file_mb": 70.9}, {"file_mb": 21.3}]
    assert [fits(r, 25) for r in ranked] == [False, True] and all(fits(r, 0) for r in ranked)  # 0: no limit


def test_a_bad_shape_is_one_line_naming_the_option():
    result = run_in_process(
        [sys.executable, "-m", "specbench.train.sps_draft", "size", "--data", "x", "--out", "y", "--shapes", "4by192"]
    )
    assert result.returncode == 2 and "--shapes" in result.stderr and "LAYERSxHIDDEN" in result.stderr
    assert "Traceback" not in result.stderr


def test_training_resumes_and_records_tau_per_gamma(tmp_path):
    """Two steps, then a re-run to three: the curve continues on the same held-out answers,
    and the export (tied embedding, no lm_head key) loads as a Llama."""
    rng = torch.Generator().manual_seed(0)
    rows = [
        {
            "key": f"k{i}",
            "temperature": 0.0,
            "prompt": [1, 520, 9531, 198],
            "answer": torch.randint(100, 5000, (70,), generator=rng).tolist(),
        }
        for i in range(6)
    ]
    rows.append({**rows[0], "temperature": 0.8})  # a held-out prompt's sampled answer: neither scored nor trained on
    data = tmp_path / "answers.jsonl"
    data.write_text("".join(json.dumps(r) + "\n" for r in rows))
    out = tmp_path / "draft"
    args = [
        sys.executable,
        "-m",
        "specbench.train.sps_draft",
        "train",
        "--data",
        str(data),
        "--out",
        str(out),
        "--sharegpt-answers",
        "4",
        "--batch",
        "2",
        "--length",
        "48",
        "--hidden",
        "64",
        "--layers",
        "1",
        "--validation-rows",
        "2",
        "--checkpoint-every",
        "1",
        "--threads",
        "1",
    ]
    for steps in (2, 3):
        result = run_in_process([*args, "--steps", str(steps)])
        assert result.returncode == 0, result.stderr[-2000:]
    curve = [json.loads(line) for line in (out / "curve.jsonl").read_text().splitlines()]
    assert [p["step"] for p in curve] == [0, 1, 2, 3] and all(
        len(p["top1"]) == 1 and 1.0 <= p["chain_tau"] <= 5.0 for p in curve
    )
    training = json.loads((out / "training.json").read_text())
    taus = training["validation_chain_tau_by_gamma"]
    assert training["steps"] == 3 and training["validation_answers"] == 2 and training["target_answers"] == 4
    assert len(taus) == 8 and all(1.0 <= t <= 1 + g for g, t in enumerate(taus, start=1))
    assert training["validation"]["step"] == 3 and 0.0 <= training["validation"]["top1"][0] <= 1.0
    from transformers import LlamaForCausalLM

    model = LlamaForCausalLM.from_pretrained(out)
    assert model.config.hidden_size == 64 and model.config.num_hidden_layers == 1


def test_a_draft_vocabulary_maps_labels_to_rows_and_logits_back():
    """Rows 0..2 are target ids 3, 7, 9 of 12: labels outside them are ignored (-100) in
    training, and in decoding the other ids get -inf."""
    vocab = DraftVocab(torch.tensor([3, 7, 9]), 12)
    assert draft_labels(vocab, torch.tensor([7, 3, 5, -100, 9])).tolist() == [1, 0, -100, -100, 2]
    full = vocab.to_target(torch.tensor([[0.5, -1.0, 2.0]]))
    assert full.shape == (1, 12) and full[0, [3, 7, 9]].tolist() == [0.5, -1.0, 2.0]
    assert bool(torch.isinf(full[0, [0, 1, 2, 4, 5, 6, 8, 10, 11]]).all())


@pytest.mark.parametrize(
    "flags,key",
    [
        (["--draft-vocab", "500"], "--draft-vocab"),
        (["--init", "x", "--from-target", "0"], "--init"),
        (["--from-target", "0,x"], "--from-target"),
    ],
)
def test_bad_draft_options_are_one_line(flags, key):
    result = run_in_process(
        [sys.executable, "-m", "specbench.train.sps_draft", "train", "--data", "x", "--out", "y", *flags]
    )
    assert result.returncode != 0 and "Traceback" not in result.stderr
    assert key in result.stderr.strip().splitlines()[-1]  # the error line (argparse prints its usage above it)


def test_a_draft_cut_from_the_target_ships_its_own_vocabulary(tmp_path):
    """--from-target 0,29 --draft-vocab 300, distilled (the teacher renormalised over those
    rows): the target's layers 0 and 29 and norm, 300 output rows (the target's own rows of
    those ids at step 0), no input embedding in the file; decoding loads it onto the
    target's embedding."""
    from safetensors.torch import load_file

    from specbench.drafters.small_lm import own_vocab_draft
    from specbench.models import registry
    from specbench.train.data import TARGET

    rng = torch.Generator().manual_seed(0)
    rows = [
        {
            "key": f"k{i}",
            "temperature": 0.0,
            "prompt": [1, 520, 9531, 198],
            "answer": torch.randint(100, 5000, (70,), generator=rng).tolist(),
        }
        for i in range(6)
    ]
    data = tmp_path / "answers.jsonl"
    data.write_text("".join(json.dumps(r) + "\n" for r in rows))
    out = tmp_path / "draft"
    result = run_in_process(
        [
            sys.executable,
            "-m",
            "specbench.train.sps_draft",
            "train",
            "--data",
            str(data),
            "--out",
            str(out),
            "--sharegpt-answers",
            "0",
            "--batch",
            "2",
            "--length",
            "48",
            "--from-target",
            "0,29",
            "--draft-vocab",
            "300",
            "--validation-rows",
            "2",
            "--steps",
            "1",
            "--lr",
            "0",
            "--distill",
            "--threads",
            "1",
        ]
    )
    assert result.returncode == 0, result.stderr[-2000:]
    weights = load_file(out / "model.safetensors")
    assert "model.embed_tokens.weight" not in weights and weights["lm_head.weight"].shape == (300, 576)
    training = json.loads((out / "training.json").read_text())
    assert training["draft_vocab"] == 300 and training["from_target"] == [0, 29] and training["distill"] is True
    # not the target's embedding
    assert training["parameters"] == sum(v.numel() for k, v in weights.items() if k != "draft_vocab")
    target = registry.load_model(TARGET, "float32", "cpu")
    draft, vocab = own_vocab_draft(out, target, "test")
    assert draft.get_input_embeddings() is target.get_input_embeddings() and draft.config.num_hidden_layers == 2
    assert len(vocab.ids) == 300 and set(vocab.ids.tolist()) >= {target.config.eos_token_id}
    expected = target.get_output_embeddings().weight[vocab.ids].to(torch.bfloat16).float()
    assert torch.equal(draft.get_output_embeddings().weight, expected)  # lr 0: the rows it started from
    assert torch.equal(
        draft.model.layers[1].mlp.down_proj.weight,
        target.model.layers[29].mlp.down_proj.weight.to(torch.bfloat16).float(),
    )


@pytest.mark.parametrize(
    "spoil,message",
    [
        (lambda w: {**w, "draft_vocab": w["draft_vocab"].flip(0)}, "sorted, distinct target ids below 96"),
        (lambda w: {**w, "draft_vocab": w["draft_vocab"][:-1]}, "one per output row (80)"),
        (lambda w: {**w, "draft_vocab": w["draft_vocab"].int()}, "int64 target ids"),
        # still sorted, but the first id is -1
        (lambda w: {**w, "draft_vocab": w["draft_vocab"] - 2}, "int64 target ids below 96"),
        (lambda w: {k: v for k, v in w.items() if k != "model.norm.weight"}, "weights do not fit its config.json"),
    ],
)
def test_a_bad_own_vocabulary_draft_is_one_line(spoil, message, target, draft, tmp_path):
    """A shipped draft whose draft_vocab or weights do not fit is refused with the file and what is wrong."""
    from conftest import own_vocabulary_copy
    from safetensors.torch import save_file

    from specbench.drafters.small_lm import own_vocab_draft
    from specbench.errors import ConfigError
    from specbench.train.sps_draft import shipped_weights

    own, vocab = own_vocabulary_copy(draft, list(range(16, 94)) + [1, 2])
    own.config.save_pretrained(tmp_path)
    save_file(spoil(shipped_weights(own, vocab)), tmp_path / "model.safetensors")
    with pytest.raises(ConfigError, match="model.safetensors") as error:
        own_vocab_draft(tmp_path, target, "method.drafter.model")
    assert message in str(error.value) and "\n" not in str(error.value)
