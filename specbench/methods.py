"""Turn a method config (drafter, tree, verifier: each a `_target_` and its
parameters) into a Method. New parts plug in as a file plus a YAML, no registry."""

from __future__ import annotations

import sys

from hydra.errors import InstantiationException
from hydra.utils import instantiate

from specbench.costs.autotune import DRAFTING_OFF, auto_keys, candidates
from specbench.engine.loop import Method
from specbench.errors import ConfigError


def assemble(method_cfg: dict, target, hardware: dict, tune_tree=None, drafter=None) -> Method:
    """`tune_tree(tree_cfg, drafter, verifier) -> tree_cfg` fills tree parameters set to
    `auto` (specbench.costs.autotune), or turns drafting off when no shape pays; without
    it an auto parameter is an error. `drafter`: this config's drafter, already loaded
    for `target` (a method rebuilt with another tree keeps it instead of loading it again)."""
    verifier = instantiate_part(method_cfg["verifier"], "method.verifier")
    if drafter is None:
        drafter = load_drafter(method_cfg, target, hardware)
    tree_cfg = method_cfg["tree"]
    if auto_keys(tree_cfg):
        if tune_tree is None:
            raise ConfigError(f"method.tree: {', '.join(auto_keys(tree_cfg))} = auto is chosen by a run from measured costs; set a value here")
        tree_cfg = tune_tree(tree_cfg, drafter, verifier)
        if tree_cfg == DRAFTING_OFF:  # no shape pays on this machine: the drafter is not run at all
            drafter = None
    tree = instantiate_part(tree_cfg, "method.tree")
    return Method(tree=tree, verifier=verifier, drafter=drafter)


def check(method_cfg: dict) -> None:
    """Raise the ConfigError a bad verifier, tree or drafter value raises, before any
    model is loaded: bad input then costs a second, not a model load and a cost profile.
    An auto tree is built at its first candidate shape (the keys set by hand are as
    given); a drafter module's `check` takes its load() arguments but the target's."""
    instantiate_part(method_cfg["verifier"], "method.verifier")
    if method_cfg.get("drafter"):
        make = instantiate_part(method_cfg["drafter"], "method.drafter", partial=True)
        drafter_check = getattr(sys.modules[make.func.__module__], "check", None)
        if drafter_check is not None:
            drafter_check(**make.keywords)
    tree_cfg = method_cfg["tree"]
    instantiate_part(candidates(tree_cfg)[0] if auto_keys(tree_cfg) else tree_cfg, "method.tree")


def load_drafter(method_cfg: dict, target, hardware: dict):
    """The method's drafter, or None for a method without one (AR)."""
    if not method_cfg.get("drafter"):
        return None
    make = instantiate_part(method_cfg["drafter"], "method.drafter", partial=True)
    return make(target=target, hardware=hardware)


def instantiate_part(cfg: dict, key: str, partial: bool = False):
    try:
        return instantiate(cfg, _partial_=partial, _convert_="all")
    except InstantiationException as error:
        cause = error.__cause__
        if isinstance(cause, ConfigError):
            raise cause from None
        raise ConfigError(f"{key}: {str(error).splitlines()[0]}") from None
