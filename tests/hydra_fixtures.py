"""Hand-made Hydra checkpoints in the released layout, for the head and sync tests."""

import copy
import json

import torch
from conftest import VOCAB
from transformers import LlamaModel

HIDDEN = 32


CONFIG = {"hydra_head_arch": "prefix-mlp", "grounded_heads": True, "hidden_state_offset": 0}


def hydra_state(target, heads: int, layers: int, seed: int = 0) -> dict:
    """A checkpoint with the released key names: prefix_embeding_layer.* (a one-layer
    Llama, its unused embedding included), hydra_mlp.{h}.{2l+1}.linear / res_connection,
    hydra_lm_head.{h}.1.weight / bias, input_embed_fn.weight."""
    torch.manual_seed(seed)
    prefix_config = copy.deepcopy(target.config)
    prefix_config.num_hidden_layers = 1
    state = {f"prefix_embeding_layer.{k}": v for k, v in LlamaModel(prefix_config).state_dict().items()}
    for h in range(heads):
        inputs = HIDDEN * (h + 2)
        state[f"hydra_mlp.{h}.1.linear.weight"] = 0.1 * torch.randn(HIDDEN, inputs)
        state[f"hydra_mlp.{h}.1.linear.bias"] = 0.1 * torch.randn(HIDDEN)
        state[f"hydra_mlp.{h}.1.res_connection.weight"] = 0.1 * torch.randn(HIDDEN, inputs)
        state[f"hydra_mlp.{h}.1.res_connection.bias"] = 0.1 * torch.randn(HIDDEN)
        for layer in range(1, layers):
            state[f"hydra_mlp.{h}.{2 * layer + 1}.linear.weight"] = 0.1 * torch.randn(HIDDEN, HIDDEN)
            state[f"hydra_mlp.{h}.{2 * layer + 1}.linear.bias"] = 0.1 * torch.randn(HIDDEN)
        state[f"hydra_lm_head.{h}.1.weight"] = torch.randn(VOCAB, HIDDEN)
        state[f"hydra_lm_head.{h}.1.bias"] = torch.randn(VOCAB)
    state["input_embed_fn.weight"] = torch.randn(VOCAB, HIDDEN)
    return state


def write_heads(directory, state, config=CONFIG):
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "config.json").write_text(json.dumps({"hydra_num_heads": 4, "hydra_num_layers": 4, **config}))
    torch.save(state, directory / "hydra_lm_head.pt")
    return str(directory)
