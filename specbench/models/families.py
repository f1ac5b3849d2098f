"""The model families the model configs (conf/model) name, as transformers configs of any
size: what the tool runs (`MODEL_TYPES`), and random-weight models of each exact
architecture, which tests and benchmarks build instead of downloading (a forward's cost
does not depend on the weights' values).

Each family keeps what makes its architecture differ from the others, as its published
config.json has it: Llama-3.1 (and DeepSeek-R1-Distill-Llama, the same architecture) its
llama3 rope scaling, Vicuna (Llama-2) no grouped-query attention, Qwen2 biases on the
q/k/v projections, Qwen3 RMSNorm over each query and key head (Qwen3-0.6B: tied
embeddings and a head_dim other than hidden / heads), Qwen3-MoE its experts.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from transformers import AutoModelForCausalLM, LlamaConfig, PretrainedConfig, Qwen2Config, Qwen3Config, Qwen3MoeConfig

LLAMA3_ROPE = {
    "rope_type": "llama3",
    "rope_theta": 500000.0,
    "factor": 8.0,
    "low_freq_factor": 1.0,
    "high_freq_factor": 4.0,
    "original_max_position_embeddings": 8192,
}

# family -> (config class, what its published config sets that the class's defaults do not)
FAMILIES: dict[str, tuple[type[PretrainedConfig], dict]] = {
    "llama3.1": (
        LlamaConfig,
        {"rope_parameters": LLAMA3_ROPE, "tie_word_embeddings": False, "max_position_embeddings": 131072},
    ),
    "vicuna": (LlamaConfig, {"grouped_query": False, "tie_word_embeddings": False}),
    "qwen2": (
        Qwen2Config,
        {"rope_parameters": {"rope_type": "default", "rope_theta": 1000000.0}, "tie_word_embeddings": False},
    ),
    "qwen3": (
        Qwen3Config,
        {"rope_parameters": {"rope_type": "default", "rope_theta": 1000000.0}, "tie_word_embeddings": False},
    ),
    "qwen3-0.6b": (
        Qwen3Config,
        {
            "rope_parameters": {"rope_type": "default", "rope_theta": 1000000.0},
            "tie_word_embeddings": True,
            "head_dim_scale": 2,
        },
    ),
    "qwen3-moe": (
        Qwen3MoeConfig,
        {
            "rope_parameters": {"rope_type": "default", "rope_theta": 1000000.0},
            "tie_word_embeddings": False,
            "num_experts": 4,
            "num_experts_per_tok": 2,
        },
    ),
}
MODEL_TYPES = tuple(dict.fromkeys(cls.model_type for cls, _ in FAMILIES.values()))  # llama, qwen2, qwen3, qwen3_moe


@dataclass(frozen=True)
class Shape:
    """A model's size. `heads` query heads over `kv_heads` key/value heads (a family
    without grouped-query attention uses `heads` for both)."""

    hidden: int = 32
    layers: int = 2
    heads: int = 4
    kv_heads: int = 2
    intermediate: int = 64
    vocab: int = 96


TINY = Shape()
SMOLLM2_135M = Shape(hidden=576, layers=30, heads=9, kv_heads=3, intermediate=1536, vocab=49152)


def config(family: str, shape: Shape = TINY) -> PretrainedConfig:
    """The transformers config of `family` at `shape` (fp32, SDPA attention)."""
    cls, settings = FAMILIES[family]
    settings = dict(settings)
    grouped = settings.pop("grouped_query", True)
    head_dim = shape.hidden // shape.heads * settings.pop("head_dim_scale", 1)
    sizes = {
        "hidden_size": shape.hidden,
        "num_hidden_layers": shape.layers,
        "num_attention_heads": shape.heads,
        "num_key_value_heads": shape.kv_heads if grouped else shape.heads,
        "intermediate_size": shape.intermediate,
        "vocab_size": shape.vocab,
        "head_dim": head_dim,
        "max_position_embeddings": 4096,
    }
    if cls is Qwen3MoeConfig:
        sizes["moe_intermediate_size"] = shape.intermediate // 2
    made = cls(**(sizes | settings))
    made._attn_implementation = "sdpa"
    return made


def random_model(
    family: str, shape: Shape = TINY, seed: int = 0, dtype: torch.dtype = torch.float32
) -> torch.nn.Module:
    """A random-weight model of `family` at `shape`, in eval mode. Biases and norm weights
    are random too (transformers starts them at zeros and ones, which would hide one not
    applied), and the output layer is sharpened so greedy continuations are not near-ties
    (random weights give almost flat logits; a tied output layer is the embedding)."""
    torch.manual_seed(seed)
    model = AutoModelForCausalLM.from_config(config(family, shape), dtype=dtype).eval()
    with torch.no_grad():
        for name, parameter in model.named_parameters():
            if name.endswith("bias"):
                parameter.normal_(0.0, 0.1)
            elif "norm" in name:
                parameter.normal_(1.0, 0.1)
        model.get_output_embeddings().weight.mul_(8)
    return model
