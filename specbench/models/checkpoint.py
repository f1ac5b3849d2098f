"""Head checkpoints as their releases ship them, loaded strictly.

A head's weights load only when the file holds exactly the module's keys (less the ones
a release may leave out), each of the module's shape and kind (float, integer or bool);
otherwise one ConfigError names the file, the keys and what was expected, before any
tensor is copied. docs/published-heads.md lists the released layouts this is held to.
"""

from __future__ import annotations

import json
import pickle
from pathlib import Path

import torch
from safetensors import SafetensorError
from safetensors.torch import load_file
from torch import nn

from specbench.errors import ConfigError

SHOWN_KEYS = 8  # keys listed in one error line


def read_config(path: Path, key: str) -> dict:
    """`path`/config.json as a dict."""
    file = path / "config.json"
    if not file.is_file():
        raise ConfigError(f"{key}: {path} has no config.json")
    try:
        config = json.loads(file.read_text())
    except (json.JSONDecodeError, UnicodeDecodeError) as error:
        raise ConfigError(f"{key}: {file} is not valid JSON ({error})") from None
    if not isinstance(config, dict):
        raise ConfigError(f"{key}: {file} holds a {type(config).__name__}, not a JSON object")
    return config


def read(path: Path, names: tuple[str, ...], key: str) -> tuple[Path, dict[str, torch.Tensor]]:
    """(file, its tensors) for the first of `names` in `path`: safetensors, or a torch
    pickle of tensors only (`.bin` / `.pt`, as the older releases ship)."""
    for name in names:
        file = path / name
        if not file.is_file():
            continue
        try:
            state = (
                load_file(file)
                if file.suffix == ".safetensors"
                else torch.load(file, map_location="cpu", weights_only=True)
            )
        except (SafetensorError, OSError, RuntimeError, EOFError, pickle.UnpicklingError) as error:
            raise ConfigError(
                f"{key}: {file} could not be read ({str(error).splitlines()[0][:200]}); copy it again"
            ) from None
        if not isinstance(state, dict) or not all(
            isinstance(k, str) and isinstance(v, torch.Tensor) for k, v in state.items()
        ):
            raise ConfigError(f"{key}: {file} does not hold a flat mapping of tensor names to tensors")
        return file, dict(state)
    raise ConfigError(f"{key}: {path} has none of {', '.join(names)}")


def load_strictly(
    module: nn.Module,
    state: dict[str, torch.Tensor],
    file: Path,
    key: str,
    kind: str,
    optional: frozenset[str] = frozenset(),
) -> None:
    """module.load_state_dict(state) when `state` has every key of the module but
    `optional` and no other, each of the module's shape and kind; otherwise one
    ConfigError naming `file`, the keys and what `kind` (what the file should be) expects."""
    expected = module.state_dict()
    missing, unexpected = sorted(expected.keys() - state.keys() - optional), sorted(state.keys() - expected.keys())
    if missing or unexpected:
        raise ConfigError(
            f"{key}: {file} is not {kind}: missing keys {shown(missing)}, unexpected keys {shown(unexpected)}"
        )
    for name, tensor in sorted(state.items()):
        want = expected[name]
        if tensor.shape != want.shape:
            raise ConfigError(f"{key}: {file}: {name} is {list(tensor.shape)}, expected {list(want.shape)} for {kind}")
        if tensor_kind(tensor) != tensor_kind(want):
            raise ConfigError(
                f"{key}: {file}: {name} is {tensor.dtype}, expected {tensor_kind(want)} ({want.dtype}) for {kind}"
            )
    module.load_state_dict(state, strict=False)  # checked above; only `optional` keys may be absent


def shown(keys: list[str]) -> str:
    """The first SHOWN_KEYS keys, and how many more there are."""
    more = f" and {len(keys) - SHOWN_KEYS} more" if len(keys) > SHOWN_KEYS else ""
    return f"{keys[:SHOWN_KEYS]}{more}"


def tensor_kind(tensor: torch.Tensor) -> str:
    """float (any width: a release's fp16 loads into fp32), bool, or integer."""
    if tensor.is_floating_point():
        return "float"
    return "bool" if tensor.dtype == torch.bool else "integer"
