"""Drafters: where draft tokens come from."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import torch

from specbench.engine.kernels import Compiled
from specbench.engine.parts import Drafter


def nothing_to_check(**params) -> None:
    """For a drafter whose parameters nothing can refuse before its load."""


@dataclass(frozen=True)
class DrafterLoader:
    """What a drafter config's `_target_` names (each drafter module's `load`), so a
    drafter declares both halves of its interface where it is defined.
    build(target, hardware, compiled, **params): the drafter for `target`, its layers run as
    `compiled` says the target's forward runs;
    check(**params): the ConfigError build would raise for these parameters, raised before
    any model loads (methods.check);
    layers: whether the drafter runs linear layers (engine.int8_drafts can put them on int8
    weights, so the compile probe times that only for a drafter that has them)."""

    build: Callable[..., Drafter]
    check: Callable[..., None] = nothing_to_check
    layers: bool = True

    def __call__(self, target: torch.nn.Module, hardware: dict, compiled: Compiled, **params) -> Drafter:
        return self.build(target, hardware, compiled, **params)
