"""`auto` values in a method config: which tree keys are left to measured costs, the
concrete configs a run chooses among, and the config it falls back to when no shape pays.
Config facts only: the choice itself (calibration decodes priced with a cost profile) is
specbench.costs.autotune's."""

from __future__ import annotations

import json

from specbench.engine.parts import TreePolicy
from specbench.errors import ConfigError, require

AUTO = "auto"
# the tree config chosen when no shape pays: AR through the same loop, the drafter unused
DRAFTING_OFF = {"_target_": "specbench.trees.autoregressive.Autoregressive"}


def auto_keys(tree_cfg: dict) -> list[str]:
    return [k for k, v in tree_cfg.items() if v == AUTO]


def drafts(tree_cfg: dict) -> bool:
    """Whether a tree config builds draft trees at all (DRAFTING_OFF's policy does not)."""
    return tree_cfg.get("_target_") != DRAFTING_OFF["_target_"]


def candidates(tree_cfg: dict) -> list[dict]:
    """Concrete tree configs for every candidate of the policy (TreePolicy.AUTO_CANDIDATES),
    auto keys filled in, keys the user set kept as set (duplicates dropped, order kept; the
    policy's distinct_candidate writes candidates that build the same tree alike)."""
    # here, not at import: the engine path (scripts/device_check.py) runs without hydra
    from hydra.utils import get_class

    keys = auto_keys(tree_cfg)
    tree_class = get_class(tree_cfg["_target_"])
    require(
        isinstance(tree_class, type) and issubclass(tree_class, TreePolicy),
        "method.tree._target_",
        f"{tree_cfg['_target_']} is not a TreePolicy (see specbench/engine/parts.py)",
    )
    grid = tree_class.AUTO_CANDIDATES
    if not grid or any(k not in grid[0] for k in keys):
        supported = sorted(grid[0]) if grid else []
        raise ConfigError(
            f"method.tree: {', '.join(keys)} cannot be auto for {tree_cfg['_target_']} (auto supported for: "
            f"{supported or 'none'})"
        )
    distinct = tree_class.distinct_candidate
    out, seen = [], set()
    for candidate in grid:
        cfg = distinct({**tree_cfg, **{k: candidate[k] for k in keys}})
        frozen = json.dumps(cfg, sort_keys=True)
        if frozen not in seen:
            seen.add(frozen)
            out.append(cfg)
    return out
