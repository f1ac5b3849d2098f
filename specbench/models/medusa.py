"""Medusa heads, loading the published checkpoints unchanged.

Architecture (Medusa paper and its released `medusa_lm_head.pt`): head i is a stack of
residual blocks x + SiLU(linear(x)) followed by a bias-free projection to the
vocabulary, applied to the target's final (normed) hidden state at position t; the
target's own lm_head predicts t+1 and head i predicts t+2+i. Keys: `{i}.{l}.linear.weight`
/ `.bias` for block l and `{i}.{L}.weight` for the projection. Checkpoints may hold
more heads than their config.json says (the 7B release ships 5 with
`medusa_num_heads: 2`); the file is what runs, and the loader reports both counts.

Heads trained by specbench for small targets leave the projection out (`shared_lm_head:
true` in config.json): every head reuses the target's lm_head, which keeps a 49k-vocab
head file small. Such a file may also hold `draft_vocab` (target ids, sorted): the heads
then score only those rows of the lm_head (as EAGLE-3's reduced vocabulary does), since
on a CPU a full 49k-row projection per head costs a sizeable part of a target forward;
other tokens get -inf.
"""

from __future__ import annotations

import re
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import nn

from specbench.errors import ConfigError
from specbench.models.checkpoint import load_strictly, read, read_config, shown

WEIGHT_FILES = ("medusa_lm_head.safetensors", "medusa_lm_head.pt")


class ResBlock(nn.Module):
    def __init__(self, hidden: int):
        super().__init__()
        self.linear = nn.Linear(hidden, hidden)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + F.silu(self.linear(x))


class MedusaHeads(nn.ModuleList):
    """`heads` heads of `layers` residual blocks (a ModuleList, so its state dict has the
    released key names); the projection is the target's lm_head weight when `shared` is
    given (its `draft_vocab` rows only, when given), else a parameter of each head."""

    def __init__(
        self,
        hidden: int,
        vocab: int,
        heads: int,
        layers: int,
        shared: torch.Tensor | None = None,
        draft_vocab: torch.Tensor | None = None,
    ):
        super().__init__(
            nn.Sequential(
                *[ResBlock(hidden) for _ in range(layers)],
                *([] if shared is not None else [nn.Linear(hidden, vocab, bias=False)]),
            )
            for _ in range(heads)
        )
        self.vocab = vocab
        if draft_vocab is not None:
            self.register_buffer("draft_vocab", draft_vocab)
        self.projection = (
            None if shared is None else shared if draft_vocab is None else shared[draft_vocab].contiguous()
        )

    def draft_logits(self, hidden: torch.Tensor, heads: list[int] | None = None) -> torch.Tensor:
        """hidden [..., H] -> logits [..., len(heads), V'] of the given heads (all by
        default) over the projection's rows (V' = V unless a draft vocabulary is set)."""
        outputs = [self[i](hidden) for i in (heads if heads is not None else range(len(self)))]
        if self.projection is not None:
            outputs = [F.linear(o, self.projection) for o in outputs]
        return torch.stack(outputs, dim=-2)

    def forward(self, hidden: torch.Tensor, heads: list[int] | None = None) -> torch.Tensor:
        """hidden [..., H] -> logits [..., len(heads), V] over the target vocabulary."""
        return full_vocabulary(self, self.draft_logits(hidden, heads))


def full_vocabulary(heads: nn.Module, logits: torch.Tensor) -> torch.Tensor:
    """Draft-vocabulary logits [..., V'] of `heads` as [..., V] over the target
    vocabulary, -inf outside it (unchanged when the heads have no draft vocabulary)."""
    if not hasattr(heads, "draft_vocab"):
        return logits
    return scattered(logits, heads.draft_vocab, heads.vocab)


def scattered(logits: torch.Tensor, ids: torch.Tensor, vocab: int) -> torch.Tensor:
    """Logits [..., len(ids)] over the target ids `ids` as [..., vocab], -inf elsewhere
    (one scatter for all rows: per node it cost 4x as much, AMD EPYC, 12 nodes)."""
    full = logits.new_full((*logits.shape[:-1], vocab), float("-inf"))
    full[..., ids] = logits
    return full


def check_draft_vocab(draft_vocab: torch.Tensor | None, vocab: int, path: Path, key: str) -> None:
    if draft_vocab is not None and (
        draft_vocab.dtype != torch.int64
        or draft_vocab.numel() == 0
        or int(draft_vocab.min()) < 0
        or int(draft_vocab.max()) >= vocab
    ):
        raise ConfigError(f"{key}: {path}: draft_vocab must hold int64 target ids below {vocab}")


def load_heads(directory: str, target: nn.Module, dtype: torch.dtype, key: str) -> tuple[MedusaHeads, dict]:
    """(heads, facts about the checkpoint). Strict: any missing or unexpected key, or a
    shape that does not fit the target, fails with one line naming the file and the key."""
    path = Path(directory)
    config = read_config(path, key)
    file, state = read(path, WEIGHT_FILES, key)
    pattern = re.compile(r"^(\d+)\.(\d+)\.")
    shared = bool(config.get("shared_lm_head", False))
    draft_vocab = state.pop("draft_vocab", None) if shared else None
    unexpected = sorted(k for k in state if not pattern.match(k))
    if unexpected or not state:
        raise ConfigError(
            f"{key}: {file} is not a Medusa checkpoint (keys {{head}}.{{block}}.linear.weight/bias, "
            f"{{head}}.{{blocks}}.weight): "
            f"unexpected keys {shown(unexpected)}"
        )
    heads = 1 + max(int(pattern.match(k).group(1)) for k in state)
    blocks = 1 + max(int(pattern.match(k).group(2)) for k in state) - (0 if shared else 1)
    hidden, vocab = target.config.hidden_size, target.config.vocab_size
    output = target.get_output_embeddings().weight
    check_draft_vocab(draft_vocab, vocab, file, key)
    model = MedusaHeads(
        hidden, vocab, heads, blocks, shared=output.detach() if shared else None, draft_vocab=draft_vocab
    )
    if draft_vocab is not None:
        state["draft_vocab"] = draft_vocab
    load_strictly(
        model,
        state,
        file,
        key,
        f"Medusa heads ({heads} heads x {blocks} blocks) that fit this target (hidden {hidden}, vocab {vocab})",
    )
    facts = {
        "heads_in_file": heads,
        "heads_in_config": config.get("medusa_num_heads"),
        "blocks": blocks,
        "shared_lm_head": shared,
        "draft_vocab": None if draft_vocab is None else int(draft_vocab.numel()),
    }
    return model.to(device=output.device, dtype=dtype).eval(), facts
