"""Hand-made Medusa checkpoints in the released layout, for the head, tree and sync tests."""

import json

import torch
from conftest import VOCAB
from safetensors.torch import save_file


def medusa_state(heads: int, blocks: int, hidden: int = 32, vocab: int = VOCAB, shared: bool = False, seed: int = 0):
    """A checkpoint with the released key names: {i}.{l}.linear.weight/bias, {i}.{blocks}.weight."""
    torch.manual_seed(seed)
    state = {}
    for i in range(heads):
        for block in range(blocks):
            state[f"{i}.{block}.linear.weight"] = 0.1 * torch.randn(hidden, hidden)
            state[f"{i}.{block}.linear.bias"] = torch.zeros(hidden)
        if not shared:
            state[f"{i}.{blocks}.weight"] = torch.randn(vocab, hidden)
    return state


def write_heads(directory, state, config, as_pt=True):
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "config.json").write_text(json.dumps(config))
    if as_pt:
        torch.save(state, directory / "medusa_lm_head.pt")
    else:
        save_file(state, str(directory / "medusa_lm_head.safetensors"))
    return str(directory)
