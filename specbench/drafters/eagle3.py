"""The EAGLE-3 drafter: an EAGLE-3 head (fused low/mid/high target features, reduced
draft vocabulary) in the shared EAGLE drafter."""

from __future__ import annotations

import torch

from specbench.drafters.eagle import EagleDrafter
from specbench.engine.kernels import Compiled, pack_linears
from specbench.engine.parts import DrafterLoader
from specbench.models import registry
from specbench.models.eagle3 import check_fits, feature_layers, load_head

WEIGHTS = ("method.drafter.head", "EAGLE-3 head")  # the key naming its weights, and what they are


def check(head: dict | None) -> None:
    """What build() refuses before any model loads (methods.check)."""
    registry.check_part(head, *WEIGHTS)


def build(target: torch.nn.Module, hardware: dict, compiled: Compiled, head: dict | None) -> EagleDrafter:
    """The drafter named by a method config: `head` is a model entry (see registry)."""
    directory = registry.resolve_part(head, *WEIGHTS)
    loaded = load_head(directory, registry.DTYPES[hardware["dtype"]], target.device, key="method.drafter.head")
    check_fits(loaded, target.config, directory, key="method.drafter.head")
    return EagleDrafter(pack_linears(loaded, compiled), target, feature_layers(target.config.num_hidden_layers))


load = DrafterLoader(build, check)
