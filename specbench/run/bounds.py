"""Upper bounds on every size a run config sets, checked before anything loads or is timed.

A size too large for the machine does not fail by itself: `method.tree.gamma=100000` once
had the dtype probe build one forward over 100,001 tokens, whose logits alone (100,001 x
49,152 floats, 20 GB) took the machine's memory until the kernel killed the run. So each
size key a tree policy declares (TreePolicy.SIZE_KEYS) and the widest forward its settings
verify are bounded by the room the model's context leaves beside the answer, and the rows
of one forward (batch size x tree width) by MAX_FORWARD_ROWS."""

from __future__ import annotations

from specbench.engine import methods
from specbench.engine.values import is_integer
from specbench.errors import require

# the most rows one target forward holds over a whole batch: TALON Figure 3's static tree (811
# nodes) at batch size 1 and EAGLE-3's 96-token tree at batch size 32 (CAST Figure 4) fit below it;
# its logits are 4096 x vocabulary floats (0.8 GB for SmolLM2's 49,152, 2.1 GB for Llama-3's 128,256)
MAX_FORWARD_ROWS = 4096


def row_limit(context_length: int | None, max_new_tokens: int) -> int:
    """The widest tree one row may verify: the context left after the answer and at least
    one prompt token, and never past MAX_FORWARD_ROWS."""
    if context_length is None:
        return MAX_FORWARD_ROWS
    return max(1, min(MAX_FORWARD_ROWS, context_length - max_new_tokens - 1))


def check_sizes(
    method_cfg: dict, batch_size: int, max_new_tokens: int, context_length: int | None, key: str = "method"
) -> None:
    """Refuse, in one line naming the key and its bound, a size key above the row limit, a
    tree wider than it, or a batch whose forwards would hold more than MAX_FORWARD_ROWS rows.
    `context_length` None: the model's is not known yet (checked again once it is)."""
    from hydra.utils import get_class  # here, not at import: the engine path runs without hydra

    tree_cfg = method_cfg["tree"]
    limit = row_limit(context_length, max_new_tokens)
    room = (
        f"the model's context of {context_length} tokens less gen.max_new_tokens={max_new_tokens} and one prompt token"
        if context_length is not None and limit < MAX_FORWARD_ROWS
        else f"the {MAX_FORWARD_ROWS} rows one forward may hold"
    )
    for name in get_class(tree_cfg["_target_"]).SIZE_KEYS:
        value = tree_cfg.get(name)
        require(
            not is_integer(value) or value <= limit,
            f"{key}.tree.{name}",
            f"must be at most {limit} ({room}), got {value}",
        )
    widest = methods.reach(method_cfg, f"{key}.tree")
    if widest is None:
        return
    set_here = ", ".join(f"{k}={v}" for k, v in tree_cfg.items() if k != "_target_" and is_integer(v))
    require(
        widest <= limit,
        f"{key}.tree",
        f"{set_here or 'these settings'} verify {widest} tokens a row; at most {limit} ({room})",
    )
    require(
        batch_size * widest <= MAX_FORWARD_ROWS,
        "gen.batch_size",
        f"{batch_size} rows x {widest}-token trees ({key}.tree) is {batch_size * widest} rows a forward; at most "
        f"{MAX_FORWARD_ROWS}: lower gen.batch_size to {max(1, MAX_FORWARD_ROWS // widest)} or the tree's size",
    )


def check_run(cfg: dict, context_length: int | None) -> None:
    """Every size bound of a run config: its method's, its paired baseline's, the answer
    length against the context and the cost profile's range."""
    gen = cfg["gen"]
    if context_length is not None:
        require(
            gen["max_new_tokens"] < context_length,
            "gen.max_new_tokens",
            f"must be below the model's context of {context_length} tokens, got {gen['max_new_tokens']}",
        )
    limit = row_limit(context_length, gen["max_new_tokens"])
    max_n = cfg["costs"]["max_n"]
    require(
        is_integer(max_n) and 1 <= max_n <= limit,
        "costs.max_n",
        f"must be an integer from 1 to {limit} (tree rows a cost profile times), got {max_n!r}",
    )
    check_sizes(cfg["method"], gen["batch_size"], gen["max_new_tokens"], context_length)
    if cfg["baseline"]["mode"] == "paired" and cfg["baseline"]["method"] != cfg["method"]:
        check_sizes(
            cfg["baseline"]["method"], gen["batch_size"], gen["max_new_tokens"], context_length, "baseline.method"
        )
