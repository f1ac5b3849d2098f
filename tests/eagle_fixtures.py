"""Hand-made EAGLE-1 and EAGLE-3 heads and the drafters built on them, for the head and sync tests."""

import json

import torch
from conftest import VOCAB
from safetensors.torch import save_file

from specbench.drafters.eagle import EagleDrafter
from specbench.engine.kernels import Compiled, pack_linears
from specbench.models import eagle
from specbench.models.eagle3 import Eagle3Head, feature_layers, head_config, load_head

DRAFT_VOCAB = 64


CONFIG = {
    "architectures": ["LlamaForCausalLMEagle3"],
    "hidden_size": 32,
    "intermediate_size": 64,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "num_hidden_layers": 1,
    "rms_norm_eps": 1e-6,
    "max_position_embeddings": 1024,
    "rope_theta": 10000.0,
    "vocab_size": VOCAB,
    "draft_vocab_size": DRAFT_VOCAB,
    "hidden_act": "silu",
    "tie_word_embeddings": False,
}


EAGLE1_CONFIG = {**{k: v for k, v in CONFIG.items() if k != "draft_vocab_size"}, "architectures": ["LlamaForCausalLM"]}


def synthetic_checkpoint(directory, seed=0, rename=None, drop=None, fmt="safetensors", config=CONFIG):
    torch.manual_seed(seed)
    head = Eagle3Head(head_config(config))
    kept = torch.randperm(VOCAB)[:DRAFT_VOCAB].sort().values  # draft vocab = a subset of the target's
    state = {k: v.clone() for k, v in head.state_dict().items()}
    state["d2t"] = kept - torch.arange(DRAFT_VOCAB)
    state["t2d"] = torch.zeros(VOCAB, dtype=torch.bool).index_fill(0, kept, True)
    state["lm_head.weight"] *= 20
    if rename:
        state[rename[1]] = state.pop(rename[0])
    if drop:
        state.pop(drop)
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "config.json").write_text(json.dumps(config))
    if fmt == "safetensors":
        save_file(state, directory / "model.safetensors")
    else:
        torch.save(state, directory / "pytorch_model.bin")
    return kept


def eagle1_checkpoint(directory, seed=0, bias=True, drop=None, embedding=None):
    """An EAGLE-1 checkpoint as published: the head's keys (no input norm on layer 0, no
    final norm, no lm_head) plus the target's embedding; `bias` as the config says."""
    torch.manual_seed(seed)
    config = {**EAGLE1_CONFIG, "bias": bias}
    head = eagle.Eagle1Head(head_config(config), torch.zeros(VOCAB, 32))
    state = {k: v.clone() for k, v in head.state_dict().items()}
    state["fc.weight"] *= 4  # a head that commits to its guesses, so trees get accepted tokens
    if embedding is not None:
        state["embed_tokens.weight"] = embedding
    if drop:
        state.pop(drop)
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "config.json").write_text(json.dumps(config))
    save_file(state, directory / "model.safetensors")


def drafter_for(target, tmp_path, seed=0, kind="eagle3"):
    layers = target.config.num_hidden_layers
    if kind == "eagle1":
        eagle1_checkpoint(tmp_path, seed=seed)
        weight = target.get_output_embeddings().weight
        return EagleDrafter(
            eagle.load_head(str(tmp_path), weight, torch.float32, "cpu", "k"), target, eagle.feature_layers(layers)
        )
    synthetic_checkpoint(
        tmp_path, seed=seed, config={**CONFIG, "num_hidden_layers": 2} if kind.startswith("eagle3-2layers") else CONFIG
    )
    head = load_head(str(tmp_path), torch.float32, "cpu", "k")
    # projections over 2+ rows on oneDNN-packed weights, as a run packing its target's does
    if kind.endswith("-packed"):
        head = pack_linears(head, Compiled(packed_from=2))
    if kind.endswith("-int8"):  # projections over 1-2 rows on int8 weights, from 4 rows packed
        head = pack_linears(head, Compiled(packed_from=4, int8_drafts_below=3))
    return EagleDrafter(head, target, feature_layers(layers))
