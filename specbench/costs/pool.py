"""The one process-wide pool of target models and the KV-cached forwards built on them.

The jobs of a Hydra multirun (one process) and the runs of a group load a target once and
share its packed weights (about 0.4 GB a run for the 135M model on an AVX2 CPU) instead of
each building their own; the models the dtype probe times are the ones the run then decodes
with. While a run decides, both dtypes of its model may be held (the probe and
plan.weigh_dtype price them side by side); `keep` then lets go of the other. Every decode
resets its LM (engine.loop.generate_batch), so sharing changes no output."""

from __future__ import annotations

import json

import torch

from specbench.engine.lean import make_lm
from specbench.engine.lm import TreeLM
from specbench.models import registry

_models: dict[str, dict[str, tuple]] = {}  # json [entry, device] -> {dtype: (model, tokenizer)}
_lms: dict[tuple, TreeLM] = {}


def target(entry: dict, dtype: str, device: str) -> tuple:
    """(model, tokenizer) of `entry` in `dtype` on `device`, loaded on first use; asking for
    another model or device lets every held one go."""
    key = _key(entry, device)
    if key not in _models:
        release_all()
        _models[key] = {}
    held = _models[key]
    if dtype not in held:
        held[dtype] = registry.load(entry, dtype, device)
    return held[dtype]


def keep(entry: dict, dtype: str, device: str) -> None:
    """Hold only `entry`'s model in `dtype` (the one the run decodes with)."""
    held = _models.get(_key(entry, device), {})
    for other in [d for d in held if d != dtype]:
        model, _ = held.pop(other)
        _release_lms(lambda k, m=model: k[0] == id(m))


def lm(model: torch.nn.Module, forward: str, compiled) -> TreeLM:
    """make_lm, built once for the same model, forward and compile choice. Only LMs of the
    current model in its current dtype and device are kept: an LM built before
    `model.to(...)` (its cache, graphs and packed weights made for the old dtype) is
    released, never reused."""
    weights = next(model.parameters())
    key = (id(model), weights.dtype, weights.device, forward, compiled)
    if key not in _lms:
        _release_lms(lambda k: k[:3] != key[:3])
        _lms[key] = make_lm(model, forward, compiled)
    return _lms[key]


def release_all() -> None:
    """Let go of every held model and LM (their caches and graphs freed now), before a caller
    builds another model itself: otherwise they live on until the next LM is built."""
    _models.clear()
    _release_lms(lambda k: True)


def _key(entry: dict, device: str) -> str:
    return json.dumps([entry, device], sort_keys=True, default=str)


def _release_lms(which) -> None:
    for key in [k for k in _lms if which(k)]:
        _lms.pop(key).release()
