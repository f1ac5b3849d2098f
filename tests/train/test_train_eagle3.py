"""EAGLE-3 training-time test: the unrolled rows see exactly what tree nodes see."""

import json
import shutil
import sys
from pathlib import Path

import pytest
import torch
from conftest import run_in_process, synthetic_answers

from specbench.errors import ConfigError
from specbench.train.data import collate
from specbench.train.eagle3 import chain_acceptance, draft_vocabulary, ttt_mask


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


def _hits(rows_hit, rows_scored):
    return [(torch.tensor([h]) & torch.tensor([s]), torch.tensor([s])) for h, s in zip(rows_hit, rows_scored)]


def test_chain_acceptance_counts_leading_hits_from_each_anchor():
    hit = [[1, 1, 0, 1, 1, 1], [0, 1, 1, 0, 0, 1]]
    scored = [[1, 1, 1, 1, 1, 1], [0, 1, 1, 1, 1, 1]]  # step 1 has no anchor at row 0
    hits = _hits([[bool(x) for x in r] for r in hit], [[bool(x) for x in r] for r in scored])
    # anchors 0..4: step 0 at row a, step 1 at row a+1 -> 2, 2, 0, 1, 2 accepted
    assert chain_acceptance(hits) == (7, 5)


def test_chain_acceptance_skips_anchors_whose_chain_is_unlabelled():
    hit = [[1, 1, 0, 1, 1, 1], [0, 1, 1, 0, 1, 1]]
    scored = [[1, 1, 1, 1, 0, 1], [0, 1, 1, 1, 0, 1]]  # row 4 is padding or prompt
    hits = _hits([[bool(x) for x in r] for r in hit], [[bool(x) for x in r] for r in scored])
    assert chain_acceptance(hits) == (4, 3)  # anchors 3 and 4 need row 4; 0, 1, 2 give 2, 2, 0


def test_collate_masks_prompt_and_padding():
    ids, labels = collate([{"prompt": [1, 2, 3], "answer": [4, 5]}, {"prompt": [1, 2, 3, 4, 5, 6], "answer": [7]}], 5)
    assert ids.tolist() == [[1, 2, 3, 4, 5], [3, 4, 5, 6, 7]]  # long rows keep their last tokens
    assert labels.tolist() == [[-100, -100, -100, 4, 5], [-100, -100, -100, -100, 7]]
    ids, labels = collate([{"prompt": [1], "answer": [2]}], 4)
    assert ids.tolist() == [[1, 2, 0, 0]] and labels.tolist() == [[-100, 2, -100, -100]]


def test_an_export_carries_its_warm_starts_record(tmp_path):
    """A head trained on from another keeps how every earlier version was made: the warm
    start's training.json, with whatever it carried, nests under init_record."""
    from specbench.train.validation import export

    warm, out = tmp_path / "warm", tmp_path / "out"
    warm.mkdir(), out.mkdir()
    (warm / "training.json").write_text(json.dumps({"steps": 5, "init_record": {"steps": 2}}))
    export(out, tmp_path / "no-curve.jsonl", {"steps": 3, "init": str(warm)}, "TTT step")
    assert json.loads((out / "training.json").read_text()) == {
        "steps": 3,
        "init": str(warm),
        "validation": None,
        "init_record": {"steps": 5, "init_record": {"steps": 2}},
    }
    for init in (None, str(tmp_path / "no-record")):  # a fresh head, or a start without a record
        export(out, tmp_path / "no-curve.jsonl", {"steps": 3, "init": init}, "TTT step")
        assert "init_record" not in json.loads((out / "training.json").read_text())


@pytest.mark.slow
def test_training_resumes_and_writes_a_learning_curve(tmp_path):
    """Two steps, then a re-run to three: the second run continues the first (same
    validation rows, curve extended) and the export loads strictly."""

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
    out = tmp_path / "head"
    args = [
        sys.executable,
        "-m",
        "specbench.train.eagle3",
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
        "--draft-vocab",
        "512",
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
    assert json.loads((tmp_path / "head.validation.json").read_text()) == ["k0", "k1"]
    curve = [json.loads(line) for line in (out / "curve.jsonl").read_text().splitlines()]
    assert [p["step"] for p in curve] == [0, 1, 2, 3]
    assert all(len(p["top1"]) == 3 and 1.0 <= p["chain_tau"] <= 4.0 for p in curve)
    assert curve[-1]["tokens"] > curve[0]["tokens"]
    training = json.loads((out / "training.json").read_text())
    assert training["steps"] == 3 and training["target_answers"] == 4 and training["validation_answers"] == 2
    assert (out / "curve.png").exists() and (out / "model.safetensors").exists()
    # --init warm-starts another run from the export: its vocabulary and weights, no optimiser state
    warm = tmp_path / "warm"
    result = run_in_process([*args[:6], str(warm), *args[7:], "--init", str(out), "--steps", "0"])
    assert result.returncode == 0, result.stderr[-2000:]
    from safetensors.torch import load_file

    exported, started = load_file(out / "model.safetensors"), load_file(warm / "model.safetensors")
    assert exported.keys() == started.keys() and all(torch.equal(exported[k], started[k]) for k in exported)
    warm_training = json.loads((warm / "training.json").read_text())
    assert warm_training["init"] == str(out) and warm_training["init_record"] == training
    warm_curve = [json.loads(line) for line in (warm / "curve.jsonl").read_text().splitlines()]
    assert [(p["step"], p["tokens"]) for p in warm_curve] == [(0, 0)]  # the warm start's own point
    # --layers 2 deepens the warm start; a resumed run keeps the layers its checkpoint holds
    deep_args = [*args[:6], str(tmp_path / "deep"), *args[7:], "--init", str(out)]
    result = run_in_process([*deep_args, "--layers", "2", "--steps", "1"])
    assert result.returncode == 0, result.stderr[-2000:]
    assert json.loads((tmp_path / "deep" / "config.json").read_text())["num_hidden_layers"] == 2
    deep = load_file(tmp_path / "deep" / "model.safetensors")
    assert deep.keys() - exported.keys() and all(k.startswith("layers.0.") for k in deep.keys() - exported.keys())
    result = run_in_process([*deep_args, "--layers", "3", "--steps", "2"])
    assert result.returncode == 2 and result.stderr.strip().splitlines()[-1].startswith(
        "error: --layers: the run's checkpoint holds a head of 2 layers"
    ), result.stderr[-2000:]


def test_eagle1_loss_is_feature_regression_plus_a_tenth_of_soft_cross_entropy():
    """EAGLE's objective on the scored rows only: SmoothL1(predicted, next feature) averaged
    over the hidden size + 0.1 x cross-entropy against the target's distribution."""
    from transformers import LlamaConfig

    from specbench.models.eagle import Eagle1Head
    from specbench.models.eagle3 import head_config
    from specbench.train.eagle import eagle_loss, head_config_for

    torch.manual_seed(0)
    target_config = LlamaConfig(
        hidden_size=16,
        intermediate_size=32,
        num_attention_heads=2,
        num_key_value_heads=1,
        vocab_size=24,
        rope_parameters={"rope_type": "default", "rope_theta": 10000.0},
        max_position_embeddings=64,
    )
    raw = head_config_for(target_config)
    assert raw["bias"] is True and "draft_vocab_size" not in raw and raw["num_hidden_layers"] == 1
    head = Eagle1Head(head_config(raw), torch.randn(24, 16))
    embeds, features, next_features = torch.randn(1, 5, 16), torch.randn(1, 5, 16), torch.randn(1, 5, 16)
    probs = torch.randn(1, 5, 24).softmax(-1)
    mask = torch.tensor([[True, True, False, True, False]])
    loss, (top1,) = eagle_loss(head, embeds, features, next_features, probs, mask, noise=0.0, w_cls=0.1)
    predicted, logits, _ = head(embeds, features, torch.arange(5)[None], None, torch.ones(5, 5).tril().bool())
    regression = torch.nn.functional.smooth_l1_loss(predicted, next_features, reduction="none").mean(-1)
    cross_entropy = -(probs * logits.log_softmax(-1)).sum(-1)
    expected = (regression + 0.1 * cross_entropy)[mask].mean()
    torch.testing.assert_close(loss, expected)
    assert top1 == float((logits.argmax(-1) == probs.argmax(-1))[mask].float().mean())
    noisy, _ = eagle_loss(head, embeds, features, next_features, probs, mask, noise=0.1, w_cls=0.1)
    assert not torch.equal(noisy, loss)  # the input features were perturbed


def test_ttt_loss_scores_answer_rows_as_the_full_unroll_does():
    """The loss and hits computed from the answer rows' logits only equal those of every
    row's logits masked afterwards: each unrolled step's soft cross-entropy over its scored
    rows (an anchor at t >= step), weighted 0.8 ** step."""
    from transformers import LlamaConfig

    from specbench.models.eagle3 import Eagle3Head, head_config
    from specbench.train.eagle3 import head_config_for, ttt_loss, ttt_unroll

    torch.manual_seed(0)
    target_config = LlamaConfig(
        hidden_size=16,
        intermediate_size=32,
        num_attention_heads=2,
        num_key_value_heads=1,
        vocab_size=40,
        rope_parameters={"rope_type": "default", "rope_theta": 10000.0},
        max_position_embeddings=64,
    )
    head = Eagle3Head(head_config(head_config_for(target_config, 12)))
    embeds, features = torch.randn(2, 7, 16), torch.randn(2, 7, 48)
    probs = torch.randn(2, 7, 12).softmax(-1)
    mask = torch.tensor([[False, True, True, True, False, True, True], [False, False, True, True, True, True, False]])
    loss, top1 = ttt_loss(head, embeds, features, probs, probs.argmax(-1), mask, steps=3)
    expected, expected_top1 = 0.0, []
    for step, logits in enumerate(ttt_unroll(head, embeds, features, 3)):
        scored = mask.clone()
        scored[:, :step] = False
        expected = expected + 0.8**step * (-(probs * logits.log_softmax(-1)).sum(-1))[scored].mean()
        expected_top1.append(float((logits.argmax(-1) == probs.argmax(-1))[scored].float().mean()))
    torch.testing.assert_close(loss, expected)
    assert top1 == pytest.approx(expected_top1)


def test_held_out_hits_count_a_target_token_outside_the_draft_vocabulary_as_a_miss():
    """The engine's verifier rejects every draft where the target's greedy token is outside
    the draft vocabulary, so validation counts a miss there even when the head picks the
    best token it has (what the soft labels, restricted to the draft vocabulary, teach)."""
    from specbench.train.eagle3 import draft_top1, step_hits

    vocab_ids = torch.tensor([1, 3, 4])  # draft index 0, 1, 2
    # top-1 is id 0: not draftable
    target_logits = torch.tensor(
        [
            [
                [0.0, 1.0, 0.0, 5.0, 2.0, 0.0],  # top-1 is id 3: draft index 1
                [9.0, 1.0, 0.0, 2.0, 3.0, 0.0],
            ]
        ]
    )
    top1 = draft_top1(target_logits, vocab_ids)
    assert top1.tolist() == [[1, -1]]
    in_vocabulary_best = target_logits[..., vocab_ids].argmax(-1)
    assert in_vocabulary_best.tolist() == [[1, 2]]
    # the head agrees with the in-vocabulary best
    head_logits = torch.nn.functional.one_hot(in_vocabulary_best[0], 3).float()
    mask = torch.ones(1, 2, dtype=torch.bool)
    ((hits, scored),) = step_hits([head_logits], top1, mask)
    assert hits.tolist() == [[True, False]] and scored.tolist() == [[True, True]]


def test_eagle1_warm_start_keeps_a_head_without_fc_bias(tmp_path):
    """The LLaMA3 EAGLE-1 heads ship `"bias": false`: a warm start from such a head
    trains and exports that layout with its weights, instead of refusing the checkpoint."""
    from safetensors.torch import load_file, save_file

    shipped = Path(__file__).resolve().parents[2] / "specbench" / "weights" / "smollm2-135m-eagle"
    published = tmp_path / "no-bias"
    published.mkdir()
    shutil.copy(shipped / "config.json", published / "config.json")
    config = json.loads((published / "config.json").read_text())
    (published / "config.json").write_text(json.dumps({**config, "bias": False}))
    weights = {k: v for k, v in load_file(shipped / "model.safetensors").items() if k != "fc.bias"}
    save_file(weights, published / "model.safetensors")
    rng = torch.Generator().manual_seed(0)
    rows = [
        {
            "key": f"k{i}",
            "temperature": 0.0,
            "prompt": [1, 520, 9531, 198],
            "answer": torch.randint(100, 5000, (40,), generator=rng).tolist(),
        }
        for i in range(4)
    ]
    data = tmp_path / "answers.jsonl"
    data.write_text("".join(json.dumps(r) + "\n" for r in rows))
    out = tmp_path / "warm"
    result = run_in_process(
        [
            sys.executable,
            "-m",
            "specbench.train.eagle",
            "--data",
            str(data),
            "--out",
            str(out),
            "--sharegpt-answers",
            "2",
            "--batch",
            "2",
            "--length",
            "32",
            "--validation-rows",
            "2",
            "--threads",
            "1",
            "--init",
            str(published),
            "--steps",
            "0",
        ]
    )
    assert result.returncode == 0, result.stderr[-2000:]
    assert json.loads((out / "config.json").read_text())["bias"] is False
    started = load_file(out / "model.safetensors")
    assert "fc.bias" not in started and torch.equal(started["fc.weight"], weights["fc.weight"])


def test_validation_answers_come_after_the_rows_a_warm_start_saw(tmp_path):
    """--validation-after N holds out only greedy answers after the first N (sampled rows
    do not count), and the choice is kept for later runs."""
    from specbench.train.validation import validation_set

    rows = [
        {"key": f"k{i:02d}", "temperature": 0.0 if i % 2 == 0 else 0.8, "answer": [1] * (64 if i != 8 else 10)}
        for i in range(20)
    ]
    path = tmp_path / "validation.json"
    # greedy rows are k00, k02, ...; after the first three (k00-k04) come k06, k08 (too short), k10, ...
    assert validation_set(path, rows, 3, after=3) == ["k06", "k10", "k12"]
    assert validation_set(path, rows, 3) == ["k06", "k10", "k12"]


def test_a_corpus_directory_commits_the_validation_set_every_run_uses(tmp_path):
    """A validation.json beside the packs is the held-out set of any run that reads that
    directory (whole, whatever --validation-rows says); a run keeps its first set; a
    committed key that is no greedy answer read is refused in one line."""
    from specbench.train.validation import committed_set, validation_set

    rows = [{"key": f"k{i:02d}", "temperature": 0.0 if i % 2 == 0 else 0.8, "answer": [1] * 64} for i in range(20)]
    corpus, elsewhere = tmp_path / "corpus", tmp_path / "runs"
    corpus.mkdir(), elsewhere.mkdir()
    (corpus / "validation.json").write_text(json.dumps(["k14", "k02"]))
    committed = committed_set([str(elsewhere), str(corpus)])
    assert committed == (corpus / "validation.json", ["k14", "k02"]) and committed_set([str(elsewhere)]) is None
    assert validation_set(tmp_path / "run.json", rows, 3, committed=committed) == ["k14", "k02"]
    assert validation_set(tmp_path / "run.json", rows, 3) == ["k14", "k02"]
    with pytest.raises(
        ConfigError,
        match=r"--data: 1 of the 2 held-out keys in .*validation.json are in no greedy answer read \(first: k03\)",
    ):
        validation_set(tmp_path / "other.json", rows, 3, committed=(corpus / "validation.json", ["k02", "k03"]))


def test_a_committed_domain_set_is_held_out_and_scored_apart_on_the_curve(tmp_path):
    """A validation-code.json beside the packs: its answers are not trained on, each curve
    point scores them under sets.code, and the main set's point is as without it."""
    rng = torch.Generator().manual_seed(0)
    rows = [
        {
            "key": f"k{i}",
            "temperature": 0.0,
            "prompt": [1, 520, 9531, 198],
            "answer": torch.randint(100, 5000, (70,), generator=rng).tolist(),
        }
        for i in range(8)
    ]
    curves = {}
    for name, domain in (("plain", None), ("code", ["k5", "k2"])):
        corpus = tmp_path / name / "corpus"
        corpus.mkdir(parents=True)
        (corpus / "answers-t0-0of1.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
        (corpus / "validation.json").write_text(json.dumps(["k0", "k1"]))
        if domain:
            (corpus / "validation-code.json").write_text(json.dumps(domain))
        out = tmp_path / name / "head"
        result = run_in_process(
            [
                sys.executable,
                "-m",
                "specbench.train.eagle3",
                "--data",
                str(corpus),
                "--out",
                str(out),
                "--sharegpt-answers",
                "0",
                "--batch",
                "2",
                "--length",
                "48",
                "--draft-vocab",
                "512",
                "--checkpoint-every",
                "1",
                "--threads",
                "1",
                "--steps",
                "1",
            ]
        )
        assert result.returncode == 0, result.stderr[-2000:]
        curves[name] = [json.loads(line) for line in (out / "curve.jsonl").read_text().splitlines()]
        training = json.loads((out / "training.json").read_text())
        assert training["target_answers"] == (6 if domain is None else 4)
    assert [p["step"] for p in curves["code"]] == [0, 1]
    assert all(
        p["sets"].keys() == {"code"}
        and len(p["sets"]["code"]["top1"]) == 3
        and 1.0 <= p["sets"]["code"]["chain_tau"] <= 4.0
        for p in curves["code"]
    )
    assert "sets" not in curves["plain"][0] and training["domain_validation_answers"] == {"code": 2}
    assert {k: v for k, v in curves["code"][0].items() if k != "sets"} == curves["plain"][0]
    assert json.loads((tmp_path / "code" / "head.validation-sets.json").read_text()) == {"code": ["k5", "k2"]}


def test_a_run_keeps_the_domain_sets_it_started_with(tmp_path):
    """Fixed at the first step: later runs read the saved sets; a run resumed from before
    domain sets existed keeps none (its training rows stay the same); an unknown key is
    refused in one line."""
    from specbench.train.validation import domain_sets, run_domain_sets

    rows = [{"key": f"k{i}", "temperature": 0.0 if i % 2 == 0 else 0.8} for i in range(6)]
    corpus = tmp_path / "corpus"
    corpus.mkdir()
    (corpus / "validation-code.json").write_text(json.dumps(["k2"]))
    (corpus / "validation-math.json").write_text(json.dumps(["k4", "k0"]))
    committed = domain_sets([str(tmp_path / "elsewhere"), str(corpus)])
    assert committed == {"code": ["k2"], "math": ["k4", "k0"]}
    assert run_domain_sets(tmp_path / "run.json", False, committed, rows) == committed
    assert run_domain_sets(tmp_path / "run.json", True, {}, rows) == committed  # saved at the first step
    assert run_domain_sets(tmp_path / "old.json", True, committed, rows) == {}
    with pytest.raises(
        ConfigError,
        match=r"--data: 1 of the 1 keys of validation set 'code' are in no greedy answer read \(first: k3\)",
    ):
        run_domain_sets(tmp_path / "new.json", False, {"code": ["k3"]}, rows)


def test_a_trainer_refuses_a_committed_set_it_cannot_find_in_one_line(tmp_path):

    corpus = tmp_path / "corpus"
    corpus.mkdir()
    synthetic_answers(tmp_path).rename(corpus / "answers-0.jsonl")
    (corpus / "validation.json").write_text(json.dumps(["k1", "k9"]))
    result = run_in_process(
        [
            sys.executable,
            "-m",
            "specbench.train.medusa",
            "--data",
            str(corpus),
            "--out",
            str(tmp_path / "heads"),
            "--threads",
            "1",
        ]
    )
    assert result.returncode == 2 and result.stderr.strip().splitlines()[-1].startswith(
        "error: --data: 1 of the 2 held-out keys"
    ), result.stderr[-2000:]
    assert "Traceback" not in result.stderr
    assert "Loading weights" not in result.stderr  # refused before the target's weights load


def test_a_deepened_head_starts_as_its_warm_start_and_then_trains_its_new_layer():
    """A second layer added to a trained one-layer head starts as the identity: every
    unrolled step's logits and hidden states are exactly the warm head's. Its output
    projections are zero but get gradients, so training moves the new layer."""
    from transformers import LlamaConfig

    from specbench.models.eagle3 import Eagle3Head, head_config, trained_state
    from specbench.train.eagle3 import deepen, head_config_for, ttt_unroll

    torch.manual_seed(0)
    target_config = LlamaConfig(
        hidden_size=16,
        intermediate_size=32,
        num_attention_heads=2,
        num_key_value_heads=1,
        vocab_size=40,
        rope_parameters={"rope_type": "default", "rope_theta": 10000.0},
        max_position_embeddings=64,
    )
    warm = Eagle3Head(head_config(head_config_for(target_config, 12)))
    deep = Eagle3Head(head_config(head_config_for(target_config, 12, layers=2)))
    deepen(deep, trained_state(warm))
    embeds, features = torch.randn(2, 7, 16), torch.randn(2, 7, 48)
    for expected, got in zip(ttt_unroll(warm, embeds, features, 3), ttt_unroll(deep, embeds, features, 3), strict=True):
        assert torch.equal(expected, got)
    ttt_unroll(deep, embeds, features, 3)[-1].square().sum().backward()
    layer = deep.layers[0]
    assert layer.self_attn.o_proj.weight.grad.abs().sum() > 0 and layer.mlp.down_proj.weight.grad.abs().sum() > 0
    assert torch.equal(deep.midlayer.self_attn.q_proj.weight, warm.midlayer.self_attn.q_proj.weight)


def test_a_shrunk_draft_vocabulary_keeps_eos_and_the_most_frequent_tokens_scored_as_before():
    """Shrinking keeps EOS and the most used tokens (ties: smaller id); the kept tokens'
    logits are exactly the full head's, mapped to the same target ids."""
    from collections import Counter

    from transformers import LlamaConfig

    from specbench.models.eagle3 import Eagle3Head, head_config
    from specbench.train.eagle3 import head_config_for
    from specbench.train.resize_vocab import kept_tokens, shrink

    torch.manual_seed(0)
    target_config = LlamaConfig(
        hidden_size=16,
        intermediate_size=32,
        num_attention_heads=2,
        num_key_value_heads=1,
        vocab_size=40,
        rope_parameters={"rope_type": "default", "rope_theta": 10000.0},
        max_position_embeddings=64,
    )
    raw = head_config_for(target_config, 8, layers=2)
    head = Eagle3Head(head_config(raw))
    ids = torch.tensor([2, 5, 7, 11, 19, 23, 31, 37])
    head.d2t.copy_(ids - torch.arange(8))
    head.t2d.zero_()
    head.t2d[ids] = True
    counts = Counter({5: 9, 7: 1, 11: 9, 19: 4, 23: 9, 31: 0, 37: 30})
    keep = kept_tokens(ids.tolist(), counts, 4, always={31})
    assert keep == [5, 11, 31, 37]  # EOS (31) always; 37, then 5 and 11 before 23 on the tie
    small, config = shrink(head, raw, keep)
    assert (
        config["draft_vocab_size"] == 4
        and small.target_ids().tolist() == keep
        and small.t2d.nonzero().flatten().tolist() == keep
    )
    embeds, features = torch.randn(1, 5, 16), torch.randn(1, 5, 16)
    mask = torch.ones(5, 5, dtype=torch.bool).tril()
    with torch.no_grad():
        _, full, _ = head(embeds, features, torch.arange(5)[None], None, mask)
        _, kept, _ = small(embeds, features, torch.arange(5)[None], None, mask)
    assert torch.equal(kept, full[..., [1, 3, 6, 7]])


def test_a_grown_draft_vocabulary_adds_the_most_used_missing_tokens_mapped_from_the_target():
    """Growing keeps every old row (old tokens score exactly as before) and adds the most
    used tokens the head lacks (ties: smaller id; unseen ones never), each row its target
    embedding row through the least-squares map of the old tokens' rows: exact when the
    head's rows are a linear image of the target's."""
    from collections import Counter

    from transformers import LlamaConfig

    from specbench.models.eagle3 import Eagle3Head, head_config
    from specbench.train.eagle3 import head_config_for
    from specbench.train.resize_vocab import added_tokens, grow, held_out_r2

    torch.manual_seed(0)
    target_config = LlamaConfig(
        hidden_size=16,
        intermediate_size=32,
        num_attention_heads=2,
        num_key_value_heads=1,
        vocab_size=40,
        rope_parameters={"rope_type": "default", "rope_theta": 10000.0},
        max_position_embeddings=64,
    )
    old = list(range(0, 40, 2))  # 20 even ids: more tokens than the map has unknowns per column
    raw = head_config_for(target_config, len(old))
    head = Eagle3Head(head_config(raw))
    head.d2t.copy_(torch.tensor(old) - torch.arange(len(old)))
    head.t2d.zero_()
    head.t2d[old] = True
    target_rows, true_map = torch.randn(40, 16), torch.randn(16, 16)
    with torch.no_grad():
        head.lm_head.weight.copy_(target_rows[old] @ true_map)
    counts = Counter({3: 5, 7: 9, 9: 5, 11: 1, 4: 50, 13: 0})
    added = added_tokens(old, counts, 3)
    assert added == [3, 7, 9]  # 7, then 3 before 9 on the tie; 4 is already drafted
    assert added_tokens(old, counts, 10) == [3, 7, 9, 11]  # 13 never occurs
    big, config = grow(head, raw, added, target_rows)
    ids = sorted(old + added)
    assert (
        config["draft_vocab_size"] == 23
        and big.target_ids().tolist() == ids
        and big.t2d.nonzero().flatten().tolist() == ids
    )
    assert torch.allclose(big.lm_head.weight[[ids.index(t) for t in added]], target_rows[added] @ true_map, atol=1e-4)
    assert held_out_r2(target_rows[old], head.lm_head.weight.detach(), every=5) > 0.999
    embeds, features = torch.randn(1, 5, 16), torch.randn(1, 5, 16)
    mask = torch.ones(5, 5, dtype=torch.bool).tril()
    with torch.no_grad():
        _, before, _ = head(embeds, features, torch.arange(5)[None], None, mask)
        _, after, _ = big(embeds, features, torch.arange(5)[None], None, mask)
    # the same rows; a wider matmul may round differently
    assert torch.allclose(after[..., [ids.index(t) for t in old]], before, rtol=0, atol=1e-5)


def test_a_swapped_draft_vocabulary_trades_its_least_used_tokens_for_more_used_missing_ones():
    """--swap keeps the size: the least used tokens (never EOS; ties: larger id first) go,
    the most used missing ones come, and only while a newcomer is used more than the token
    it replaces."""
    from collections import Counter

    from specbench.train.resize_vocab import swapped_tokens

    old = [2, 5, 7, 11, 19]
    counts = Counter({2: 9, 5: 1, 7: 0, 11: 3, 19: 1, 3: 5, 4: 2, 8: 1, 13: 0})
    assert swapped_tokens(old, counts, 1, always={7}) == ([2, 5, 7, 11], [3])  # 19 before 5 on the tie
    # 8 (used once) would not beat 11 (three times)
    assert swapped_tokens(old, counts, 3, always={7}) == ([2, 7, 11], [3, 4])
    assert swapped_tokens(old, Counter({2: 9, 5: 4, 11: 3, 19: 2, 3: 2}), 2, always={7}) == (old, [])  # 3 only ties 19


def _resize(head: Path, size: int, data: str = "x"):
    return run_in_process(
        [
            sys.executable,
            "-m",
            "specbench.train.resize_vocab",
            "--head",
            str(head),
            "--data",
            data,
            "--size",
            str(size),
            "--out",
            "y",
        ]
    )


def test_resizing_to_a_size_the_head_cannot_give_is_one_line(tmp_path):
    head = Path(__file__).resolve().parents[2] / "specbench" / "weights" / "smollm2-135m-eagle3"
    size = json.loads((head / "config.json").read_text())["draft_vocab_size"]  # as many as it has: nothing to resize
    result = _resize(head, size)
    assert (
        result.returncode == 2
        and result.stderr.strip() == f"error: --size: {size}: must be at least 1 and not the head's {size} draft tokens"
    ), result.stderr[-2000:]
    result = _resize(head, 50000)
    assert (
        result.returncode == 2 and result.stderr.strip() == "error: --size: 50000: more than the target's 49152 tokens"
    ), result.stderr[-2000:]
    result = _resize(head, 49152, data=str(synthetic_answers(tmp_path)))  # 6 answers do not use every token
    assert (
        result.returncode == 2
        and result.stderr.startswith("error: --size: 49152: only ")
        and len(result.stderr.strip().splitlines()) == 1
    ), result.stderr[-2000:]
    assert "Loading weights" not in result.stderr  # refused before loading the target
    swap = run_in_process(
        [
            sys.executable,
            "-m",
            "specbench.train.resize_vocab",
            "--head",
            str(head),
            "--data",
            "x",
            "--swap",
            str(size),
            "--out",
            "y",
        ]
    )
    assert (
        swap.returncode == 2
        and swap.stderr.strip()
        == f"error: --swap: {size}: must be at least 1 and fewer than the head's {size} draft tokens"
    ), swap.stderr[-2000:]


def test_head_agreement_tells_draftable_and_confident_rows_apart():
    """scripts/head_agreement.py's step-0 breakdown over the rows scored at step 0 only: the
    share whose target token the head could draft, the share where the target was sure, and
    the head's top-1 on those."""
    sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "scripts"))
    from head_agreement import step0_breakdown

    def row(*values):  # a batch of one row
        return torch.tensor([values])

    scored = [
        # the third row is not scored
        ([(row(True, False, False), row(True, True, False))], row(True, False, True), row(True, True, True)),
        ([(row(False), row(True))], row(True), row(False)),
    ]
    assert step0_breakdown(scored) == pytest.approx((2 / 3, 2 / 3, 1 / 2))


def test_trainee_scores_the_targets_whole_vocabulary_top1(tmp_path):
    """The EAGLE-3 trainee's held-out rows carry the target's greedy token over its whole
    vocabulary (-1 where the draft vocabulary lacks it), not its best draftable token."""
    from argparse import Namespace
    from types import SimpleNamespace

    from conftest import VOCAB, tiny_llama

    from specbench.train.eagle3 import trainee
    from specbench.train.shared_pass import read_target

    target = tiny_llama(0, layers=4)
    args = Namespace(init=None, draft_vocab=3, ttt_steps=1, layers=None)
    head = trainee(
        args, target, SimpleNamespace(eos_token_id=0), [{"answer": [5, 6, 7, 5, 6]}], tmp_path / "head", None
    )
    ids = torch.randint(1, VOCAB, (2, 12), generator=torch.Generator().manual_seed(0))
    batch = read_target(target, ids, ids.clone())
    top1 = head.keep(batch)[2]
    whole = batch.logits[:, 1 : top1.shape[1] + 1].argmax(-1)
    vocab_ids = [0, 5, 6]  # the 3 most used answer tokens with EOS first, as draft_vocabulary picks them
    expected = torch.tensor([[vocab_ids.index(t) if t in vocab_ids else -1 for t in row] for row in whole.tolist()])
    assert torch.equal(top1, expected) and (expected == -1).any()
