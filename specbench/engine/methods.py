"""Turn a method config (drafter, tree, verifier: each a `_target_` and its
parameters) into a Method. New parts plug in as a file plus a YAML, no registry."""

from __future__ import annotations

import functools

from hydra.errors import InstantiationException
from hydra.utils import instantiate

from specbench.engine.candidates import DRAFTING_OFF, auto_keys, candidates
from specbench.engine.kernels import Compiled
from specbench.engine.loop import Method
from specbench.engine.parts import DrafterLoader
from specbench.errors import ConfigError


def assemble(
    method_cfg: dict, target, hardware: dict, compiled: Compiled = Compiled(), costs=None, drafter=None
) -> Method:
    """The method a config with a concrete tree names, complete: a tree key still `auto` is
    an error (a run chooses it first, specbench.costs.autotune), and a DRAFTING_OFF tree (no
    shape pays) gets no drafter. `compiled`: how the target's forward runs, for the drafter
    to run alike; `costs`: measured forward costs, for policies that price trees;
    `drafter`: this config's drafter, already loaded for `target` (a method rebuilt with
    another tree keeps it instead of loading it again)."""
    verifier = instantiate_part(method_cfg["verifier"], "method.verifier")
    tree_cfg = method_cfg["tree"]
    if tree_cfg == DRAFTING_OFF:  # the drafter is not run at all, so not loaded
        drafter = None
    elif drafter is None:
        drafter = load_drafter(method_cfg, target, hardware, compiled)
    if auto_keys(tree_cfg):
        raise ConfigError(
            f"method.tree: {', '.join(auto_keys(tree_cfg))} = auto is chosen by a run from measured costs; set a "
            "value here"
        )
    tree = instantiate_part(tree_cfg, "method.tree")
    return Method(tree=tree, verifier=verifier, drafter=drafter, costs=costs)


def check(method_cfg: dict) -> None:
    """Raise the ConfigError a bad verifier, tree or drafter value raises, before any
    model is loaded: bad input then costs a second, not a model load and a cost profile.
    An auto tree is built at its first candidate shape (the keys set by hand are as
    given); a drafter is checked by its loader's `check`, on its parameters."""
    instantiate_part(method_cfg["verifier"], "method.verifier")
    if method_cfg.get("drafter"):
        make = drafter_loader(method_cfg["drafter"])
        make.func.check(**make.keywords)
    tree_cfg = method_cfg["tree"]
    instantiate_part(candidates(tree_cfg)[0] if auto_keys(tree_cfg) else tree_cfg, "method.tree")


def load_drafter(method_cfg: dict, target, hardware: dict, compiled: Compiled = Compiled()):
    """The method's drafter, its layers run as `compiled` says the target's forward runs,
    or None for a method without one (AR)."""
    if not method_cfg.get("drafter"):
        return None
    return drafter_loader(method_cfg["drafter"])(target=target, hardware=hardware, compiled=compiled)


def widest(method_cfg: dict) -> int | None:
    """The widest forward a method's tree policy verifies where its settings fix it
    (TreePolicy.widest); None with `auto` tree keys, which calibration decides later."""
    tree = method_cfg["tree"]
    return None if auto_keys(tree) else instantiate_part(tree, "method.tree").widest()


def reach(method_cfg: dict, key: str = "method.tree") -> int | None:
    """The widest forward the method may verify per row: its fixed tree's width, or the widest
    of its `auto` candidates; None where the policy's width follows the draft. Probes and
    profiles time forwards up to this width and no wider."""
    tree = method_cfg["tree"]
    widths = [instantiate_part(cfg, key).widest() for cfg in (candidates(tree) if auto_keys(tree) else [tree])]
    return max(widths) if all(w is not None for w in widths) else None


def drafter_layers(method_cfg: dict) -> bool:
    """Whether the method's drafter runs linear layers (none: AR, Lookahead, PLD)."""
    return bool(method_cfg.get("drafter")) and drafter_loader(method_cfg["drafter"]).func.layers


def drafter_loader(drafter_cfg: dict) -> functools.partial:
    """The DrafterLoader a drafter config's `_target_` names, its parameters bound."""
    make = instantiate_part(drafter_cfg, "method.drafter", partial=True)
    if not isinstance(make.func, DrafterLoader):
        raise ConfigError(
            f"method.drafter._target_: {drafter_cfg['_target_']} is not a DrafterLoader (a drafter module's "
            "`load`; see specbench/engine/parts.py)"
        )
    return make


def instantiate_part(cfg: dict, key: str, partial: bool = False):
    try:
        return instantiate(cfg, _partial_=partial, _convert_="all")
    except InstantiationException as error:
        cause = error.__cause__
        if isinstance(cause, ConfigError):
            raise cause from None
        raise ConfigError(f"{key}: {str(error).splitlines()[0]}") from None
