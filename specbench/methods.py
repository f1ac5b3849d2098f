"""Turn a method config (drafter, tree, verifier: each a `_target_` and its
parameters) into a Method. New parts plug in as a file plus a YAML, no registry."""

from __future__ import annotations

from hydra.errors import InstantiationException
from hydra.utils import instantiate

from specbench.engine.loop import Method
from specbench.errors import ConfigError


def build(method_cfg: dict, target, hardware: dict) -> Method:
    policy = _instantiate(method_cfg["tree"], "method.tree")
    verifier = _instantiate(method_cfg["verifier"], "method.verifier")
    drafter = None
    if method_cfg.get("drafter"):
        make = _instantiate(method_cfg["drafter"], "method.drafter", partial=True)
        drafter = make(target=target, hardware=hardware)
    return Method(policy=policy, verifier=verifier, drafter=drafter)


def _instantiate(cfg: dict, key: str, partial: bool = False):
    try:
        return instantiate(cfg, _partial_=partial, _convert_="all")
    except InstantiationException as error:
        cause = error.__cause__
        if isinstance(cause, ConfigError):
            raise cause from None
        raise ConfigError(f"{key}: {str(error).splitlines()[0]}") from None
