"""Hydra head training: teacher-forced path tokens, and a resumable run that exports
small heads (shared projection and embedding) the loader takes strictly."""

import json

import torch
from conftest import train_heads_twice

from specbench.train.hydra import path_tokens


def test_each_head_reads_the_text_tokens_after_its_anchor():
    ids = torch.tensor([[10, 11, 12, 13, 14, 15]])
    # anchors t = 0, 1: head 0 reads token t+1 (the root), head 2 reads t+1..t+3
    assert path_tokens(ids, 2, 0).tolist() == [[[11], [12]]]
    assert path_tokens(ids, 2, 2).tolist() == [[[11, 12, 13], [12, 13, 14]]]


def test_training_resumes_and_exports_small_loadable_heads(tmp_path):
    out = train_heads_twice("specbench.train.hydra", tmp_path, heads=2)
    curve = [json.loads(line) for line in (out / "curve.jsonl").read_text().splitlines()]
    assert [p["step"] for p in curve] == [0, 1, 2, 3] and all(
        len(p["top1"]) == 2 and 1.0 <= p["chain_tau"] <= 3.0 for p in curve
    )
    config = json.loads((out / "config.json").read_text())
    assert config["shared_lm_head"] and config["hydra_num_heads"] == 2 and config["hydra_head_arch"] == "prefix-mlp"
    from safetensors.torch import load_file

    keys = set(load_file(out / "hydra_lm_head.safetensors"))
    assert "draft_vocab" in keys and not any(k.startswith(("hydra_lm_head.", "input_embed_fn.")) for k in keys)
    training = json.loads((out / "training.json").read_text())
    assert training["steps"] == 3 and training["validation_answers"] == 2 and (out / "curve.png").exists()
