"""Hydra heads (Ankner et al., "Hydra: Sequentially-Dependent Draft Heads for Medusa
Decoding"), loading the published prefix-MLP checkpoints (`hydra_lm_head.pt`) strictly.

Architecture of the released prefix-MLP variant (facts read from its public code and
files): a one-layer decoder of the target's own family (`prefix_embeding_layer`, the
release's spelling; a LlamaModel for the released Vicuna heads, a Qwen3Model with its q/k
norms for a Qwen3 target, and so on) runs over the target's hidden states of the
committed tokens, with its own KV cache; head h reads the prefix output at the last
committed token concatenated with the input embeddings (`input_embed_fn`) of the root
and the h tokens drafted before it, so a draft at depth h+1 depends on the path above
it ("grounded" heads). Head h is residual blocks (the first maps (h+2)*H inputs to H,
with a linear residual `res_connection`; later ones are x + SiLU(linear(x))) and a
projection with bias to the vocabulary.

Key names match the release by construction: `hydra_mlp.{h}` and `hydra_lm_head.{h}`
are Sequentials whose even slots are the release's dropout layers (identity here), so
block l sits at index 2l+1 and the projection at index 1. The release builds its later
blocks as one repeated module; the file then holds the same tensors under each index,
and loading them into separate blocks computes the same function. The prefix layer's
own embedding table is in the file but never used (it reads hidden states), so it is
checked for shape and dropped instead of held in memory.

Heads trained by specbench for small targets (`shared_lm_head: true` in config.json)
leave out the per-head projections and the input embedding: every head projects with
the target's lm_head (only its `draft_vocab` rows, when the file holds them, as Medusa's
trained heads do; other tokens get -inf) and embeds path tokens with the target's input
embedding, which keeps a 49k-vocabulary head file small.
"""

from __future__ import annotations

import copy
import re
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import nn
from transformers import AutoModel, PretrainedConfig

from specbench.errors import ConfigError
from specbench.models.checkpoint import load_strictly, read, read_config, shown
from specbench.models.medusa import check_draft_vocab, full_vocabulary

WEIGHT_FILES = ("hydra_lm_head.safetensors", "hydra_lm_head.pt")
UNUSED_PREFIX_EMBEDDING = "prefix_embeding_layer.embed_tokens.weight"
# the release's own Llama copy keeps RoPE's inverse frequencies as a saved buffer; the prefix
# layer here computes them from the target's config, so the file's copy is checked for shape and dropped
RELEASE_ROPE_FREQUENCIES = "prefix_embeding_layer.layers.0.self_attn.rotary_emb.inv_freq"


class ResBlock(nn.Module):
    """res_connection(x) + SiLU(linear(x)); the residual is linear when the width changes."""

    def __init__(self, hidden: int, inputs: int):
        super().__init__()
        self.linear = nn.Linear(inputs, hidden)
        self.res_connection = nn.Linear(inputs, hidden) if inputs != hidden else nn.Identity()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.res_connection(x) + F.silu(self.linear(x))


class HydraHeads(nn.Module):
    """`heads` grounded heads of `layers` blocks each on a target with `config`; with
    `shared` = (the target's lm_head weight, its input embedding weight) the heads own no
    projection or embedding (and score only `draft_vocab`'s rows, when given). The prefix
    decoder is the base model of the target's own architecture (AutoModel picks it from
    the config's model_type), cut to one layer: its attention has the target's biases,
    norms and rotary scaling, and its keys are the release's for a Llama target."""

    def __init__(
        self,
        config: PretrainedConfig,
        heads: int,
        layers: int,
        shared: tuple[torch.Tensor, torch.Tensor] | None = None,
        draft_vocab: torch.Tensor | None = None,
    ):
        super().__init__()
        hidden, vocab = config.hidden_size, config.vocab_size
        prefix_config = copy.deepcopy(config)
        prefix_config.num_hidden_layers = 1
        # its embedding is never read (see the module docstring)
        prefix_config.vocab_size, prefix_config.pad_token_id = (1, None)
        # in the default dtype, as every other module here (from_config would take a bf16 target's)
        self.prefix_embeding_layer = AutoModel.from_config(prefix_config, dtype=torch.get_default_dtype())
        self.prefix_embeding_layer.embed_tokens = None
        self.hydra_mlp = nn.ModuleList(
            nn.Sequential(
                *[
                    m
                    for layer in range(layers)
                    for m in (nn.Identity(), ResBlock(hidden, hidden * (h + 2) if layer == 0 else hidden))
                ]
            )
            for h in range(heads)
        )
        self.vocab = vocab
        if shared is None:
            self.hydra_lm_head = nn.ModuleList(
                nn.Sequential(nn.Identity(), nn.Linear(hidden, vocab)) for _ in range(heads)
            )
            self.input_embed_fn = nn.Embedding(vocab, hidden)
            self.projection = None
        else:
            projection, self.embedding = shared
            self.projection = projection if draft_vocab is None else projection[draft_vocab].contiguous()
            if draft_vocab is not None:
                self.register_buffer("draft_vocab", draft_vocab)

    def __len__(self) -> int:
        return len(self.hydra_mlp)

    def prefix(self, hidden: torch.Tensor, cache) -> torch.Tensor:
        """Prefix outputs [n, H] for one sequence's next `n` committed hidden states [n, H]
        (positions continue from what `cache`, a transformers Cache, already holds)."""
        return self.prefix_embeding_layer(
            inputs_embeds=hidden[None], past_key_values=cache, use_cache=True
        ).last_hidden_state[0]

    def draft_logits(self, h: int, prefix: torch.Tensor, path_tokens: torch.Tensor) -> torch.Tensor:
        """Logits [..., V'] of head h: prefix [..., H] and the path's tokens [..., h+1] (the
        root first); V' is the draft vocabulary when there is one."""
        if self.projection is None:
            embedded = self.input_embed_fn(path_tokens)
        else:
            embedded = F.embedding(path_tokens, self.embedding)
        x = self.hydra_mlp[h](torch.cat([prefix, embedded.flatten(-2)], dim=-1))
        return self.hydra_lm_head[h](x) if self.projection is None else F.linear(x, self.projection)

    def head(self, h: int, prefix: torch.Tensor, path_tokens: torch.Tensor) -> torch.Tensor:
        """Logits [..., V] over the target vocabulary (-inf outside a draft vocabulary)."""
        return full_vocabulary(self, self.draft_logits(h, prefix, path_tokens))


def load_heads(directory: str, target: nn.Module, dtype: torch.dtype, key: str) -> tuple[HydraHeads, dict]:
    """(heads, facts about the checkpoint). Strict: a missing or unexpected key, an
    architecture other than grounded prefix-MLP, or a shape that does not fit the target
    fails with one line."""
    path = Path(directory)
    config = read_config(path, key)
    arch, grounded = config.get("hydra_head_arch", "mlp"), config.get("grounded_heads", False)
    if arch != "prefix-mlp" or not grounded:
        raise ConfigError(
            f"{key}: {path} is a Hydra {arch!r} checkpoint with grounded_heads={grounded}; specbench runs the "
            "released prefix-mlp variant with grounded heads"
        )
    file, state = read(path, WEIGHT_FILES, key)
    target_config = target.config
    hidden, vocab = target_config.hidden_size, target_config.vocab_size
    shared = bool(config.get("shared_lm_head", False))
    draft_vocab = state.pop("draft_vocab", None) if shared else None
    check_draft_vocab(draft_vocab, vocab, file, key)
    unused = state.pop(UNUSED_PREFIX_EMBEDDING, None)
    if unused is not None and unused.shape[-1] != hidden:
        raise ConfigError(
            f"{key}: {file}: {UNUSED_PREFIX_EMBEDDING} is {list(unused.shape)}, expected [vocab, {hidden}] for "
            "this target"
        )
    head_dim = getattr(target_config, "head_dim", None) or hidden // target_config.num_attention_heads
    frequencies = state.pop(RELEASE_ROPE_FREQUENCIES, None)
    if frequencies is not None and frequencies.shape != (head_dim // 2,):
        raise ConfigError(
            f"{key}: {file}: {RELEASE_ROPE_FREQUENCIES} is {list(frequencies.shape)}, expected [{head_dim // 2}] "
            "for this target"
        )
    blocks = re.compile(r"^hydra_mlp\.(\d+)\.(\d+)\.")
    found = [blocks.match(k) for k in state]
    if not any(found):
        raise ConfigError(f"{key}: {file} is not a Hydra checkpoint: no hydra_mlp.* keys (keys {shown(sorted(state))})")
    heads = 1 + max(int(m.group(1)) for m in found if m)
    layers = (1 + max(int(m.group(2)) for m in found if m)) // 2
    output = target.get_output_embeddings().weight
    weights = (output.detach(), target.get_input_embeddings().weight.detach()) if shared else None
    model = HydraHeads(target_config, heads, layers, shared=weights, draft_vocab=draft_vocab)
    if draft_vocab is not None:
        state["draft_vocab"] = draft_vocab
    load_strictly(
        model,
        state,
        file,
        key,
        f"Hydra heads ({heads} heads x {layers} blocks) that fit this target (hidden {hidden}, vocab {vocab})",
    )
    facts = {
        "heads_in_file": heads,
        "heads_in_config": config.get("hydra_num_heads"),
        "blocks": layers,
        "hidden_state_offset": int(config.get("hidden_state_offset", 0)),
        "shared_lm_head": shared,
        "draft_vocab": None if draft_vocab is None else int(draft_vocab.numel()),
    }
    model = model.to(device=output.device, dtype=dtype).eval()
    if shared:  # the target's tensors in the run's dtype (module.to does not move plain attributes)
        model.embedding = model.embedding.to(dtype)
        model.projection = model.projection.to(dtype)
    return model, facts
