"""Published head layouts load strictly (issue 54, part 2).

Each checkpoint here is written from the facts docs/published-heads.md records about a
release (its file name, config.json fields, key names, the shapes those keys take from
the config, its dtypes), never from specbench's own modules, at tiny sizes, next to a tiny
random target of the family the release was made for. It must load through the method's
drafter with every tensor in place, and then decode as AR does; the same checkpoint with one
key renamed or one shape changed must fail with one ConfigError line naming the file, the
key and what was expected.
"""

import json

import pytest
import torch
from safetensors.torch import save_file
from transformers import LlamaConfig, LlamaForCausalLM, Qwen3Config, Qwen3ForCausalLM

from specbench.drafters import eagle as eagle_drafter
from specbench.drafters import eagle3 as eagle3_drafter
from specbench.drafters import hydra as hydra_drafter
from specbench.drafters import medusa as medusa_drafter
from specbench.engine.kernels import Compiled
from specbench.engine.lm import TreeLM
from specbench.engine.loop import Limits, Method, generate
from specbench.engine.sampling import Sampling
from specbench.errors import ConfigError
from specbench.trees.autoregressive import Autoregressive
from specbench.trees.eagle import EagleDynamicTree
from specbench.trees.static import StaticTree
from specbench.verify.standard import StandardVerifier

VOCAB, DRAFT_VOCAB = 256, 64
FP32 = {"dtype": "float32"}


def llama31_target() -> LlamaForCausalLM:
    """Llama-3.1-8B-Instruct's shape, tiny: GQA 4:1, llama3 RoPE scaling, theta 500000."""
    torch.manual_seed(0)
    rope = {
        "rope_type": "llama3",
        "factor": 8.0,
        "low_freq_factor": 1.0,
        "high_freq_factor": 4.0,
        "original_max_position_embeddings": 8192,
    }
    config = LlamaConfig(
        vocab_size=VOCAB,
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=4,
        num_attention_heads=4,
        num_key_value_heads=1,
        rope_theta=500000.0,
        rope_scaling=rope,
        max_position_embeddings=131072,
        rms_norm_eps=1e-5,
        tie_word_embeddings=False,
    )
    return LlamaForCausalLM(config).eval()


def qwen3_target() -> Qwen3ForCausalLM:
    """Qwen3-8B's shape, tiny: q/k norm, GQA 2:1, head_dim given, theta 1e6."""
    torch.manual_seed(0)
    config = Qwen3Config(
        vocab_size=VOCAB,
        hidden_size=64,
        intermediate_size=96,
        num_hidden_layers=4,
        num_attention_heads=4,
        num_key_value_heads=2,
        head_dim=16,
        rope_theta=1e6,
        rms_norm_eps=1e-6,
        tie_word_embeddings=False,
    )
    return Qwen3ForCausalLM(config).eval()


def vicuna_target(hidden: int = 64, heads: int = 4) -> LlamaForCausalLM:
    """Vicuna-v1.3's shape (Llama-1), tiny: full multi-head attention, theta 10000, 2048 positions."""
    torch.manual_seed(0)
    config = LlamaConfig(
        vocab_size=VOCAB,
        hidden_size=hidden,
        intermediate_size=2 * hidden,
        num_hidden_layers=2,
        num_attention_heads=heads,
        num_key_value_heads=heads,
        max_position_embeddings=2048,
        rms_norm_eps=1e-6,
        tie_word_embeddings=False,
    )
    return LlamaForCausalLM(config).eval()


# config.json as released, with tiny sizes in place of the real ones (the real ones in the comments)
EAGLE3_LLAMA31_CONFIG = {  # yuhuili/EAGLE3-LLaMA3.1-Instruct-8B: no rope_theta, no rope_scaling, no target_hidden_size
    "architectures": ["LlamaForCausalLM"],
    "bos_token_id": 128000,
    "eos_token_id": 128001,
    "hidden_act": "silu",
    "hidden_size": 64,  # 4096
    "initializer_range": 0.02,
    "intermediate_size": 128,  # 14336
    "max_position_embeddings": 2048,
    "model_type": "llama",
    "num_attention_heads": 4,
    "num_key_value_heads": 1,  # 32, 8
    "num_hidden_layers": 1,
    "pad_token_id": 0,
    "rms_norm_eps": 1e-05,
    "tie_word_embeddings": False,
    "torch_dtype": "float16",
    "transformers_version": "4.28.1",
    "use_cache": True,
    "vocab_size": VOCAB,
    "draft_vocab_size": DRAFT_VOCAB,  # 128256, 32000
}
EAGLE3_QWEN3_CONFIG = {  # AngelSlim/Qwen3-8B_eagle3 (AngelSlim's qwen3-8b-eagle3.json)
    "architectures": ["Eagle3LlamaForCausalLM"],
    "model_type": "llama",
    "torch_dtype": "bfloat16",
    "attention_bias": False,
    "attention_dropout": 0.0,
    "bos_token_id": 151643,
    "eos_token_id": 151645,
    "head_dim": 16,  # 128
    "hidden_act": "silu",
    "hidden_size": 64,  # 4096
    "initializer_range": 0.02,
    "intermediate_size": 96,  # 12288
    "max_position_embeddings": 40960,
    "max_window_layers": 36,
    "num_attention_heads": 4,
    "num_hidden_layers": 1,
    "num_key_value_heads": 2,  # 32, 1, 8
    "rms_norm_eps": 1e-06,
    "rope_scaling": None,
    "rope_theta": 1000000,
    "sliding_window": None,
    "tie_word_embeddings": False,
    "transformers_version": "4.51.0",
    "use_cache": True,
    "use_sliding_window": False,
    "vocab_size": VOCAB,
    "draft_vocab_size": DRAFT_VOCAB,  # 151936, 32000
}
EAGLE1_VICUNA_CONFIG = {  # yuhuili/EAGLE-Vicuna-7B-v1.3 and -13B-v1.3: no num_key_value_heads, no rope_theta, no "bias"
    "architectures": ["LlamaForCausalLM"],
    "bos_token_id": 1,
    "eos_token_id": 2,
    "hidden_act": "silu",
    "hidden_size": 64,  # 4096 (13B: 5120)
    "initializer_range": 0.02,
    "intermediate_size": 128,  # 11008 (13B: 13824)
    "max_position_embeddings": 2048,
    "model_type": "llama",
    "num_attention_heads": 4,  # 32 (13B: 40)
    "num_hidden_layers": 1,
    "pad_token_id": 0,
    "rms_norm_eps": 1e-06,
    "tie_word_embeddings": False,
    "torch_dtype": "float16",
    "transformers_version": "4.28.1",
    "use_cache": True,
    "vocab_size": VOCAB,  # 32000
}
MEDUSA_VICUNA_CONFIG = {
    "base_model_name_or_path": "lmsys/vicuna-7b-v1.3",
    "medusa_num_heads": 2,
    "medusa_num_layers": 1,
    "transformers_version": "4.31.0",
}
HYDRA_VICUNA_CONFIG = {
    "base_model_name_or_path": "lmsys/vicuna-7b-v1.3",
    "grounded_heads": True,
    "hidden_state_offset": 0,
    "hydra_head_arch": "prefix-mlp",
    "hydra_num_heads": 4,
    "hydra_num_layers": 4,
    "transformers_version": "4.33.2",
}
MEDUSA_HEADS = 5  # the 7B file holds 5 heads although its config says 2


def attention(prefix: str, width: int, config: dict) -> dict:
    """Llama attention projections over inputs `width` wide (no biases)."""
    heads, kv = config["num_attention_heads"], config.get("num_key_value_heads", config["num_attention_heads"])
    head_dim = config.get("head_dim") or config["hidden_size"] // heads
    return {
        f"{prefix}.q_proj.weight": (heads * head_dim, width),
        f"{prefix}.k_proj.weight": (kv * head_dim, width),
        f"{prefix}.v_proj.weight": (kv * head_dim, width),
        f"{prefix}.o_proj.weight": (config["hidden_size"], heads * head_dim),
    }


def mlp(prefix: str, hidden: int, inner: int) -> dict:
    return {
        f"{prefix}.gate_proj.weight": (inner, hidden),
        f"{prefix}.up_proj.weight": (inner, hidden),
        f"{prefix}.down_proj.weight": (hidden, inner),
    }


def eagle3_layout(config: dict, target_hidden: int) -> dict:
    """SafeAILab/EAGLE eagle/model/cnets.py `Model` (and AngelSlim's drafter, same names):
    fc over 3 target hidden states, midlayer over [embedding, feature] (2H), norm, lm_head to
    the draft vocabulary, d2t (int64) and t2d (bool); the embedding is not in the file."""
    h, inner = config["hidden_size"], config["intermediate_size"]
    return {
        "fc.weight": (h, 3 * target_hidden),
        **{f"midlayer.{n}.weight": (h,) for n in ("hidden_norm", "input_layernorm", "post_attention_layernorm")},
        **attention("midlayer.self_attn", 2 * h, config),
        **mlp("midlayer.mlp", h, inner),
        "norm.weight": (h,),
        "lm_head.weight": (config["draft_vocab_size"], h),
        "d2t": ((config["draft_vocab_size"],), torch.int64),
        "t2d": ((config["vocab_size"],), torch.bool),
    }


def eagle1_layout(config: dict) -> dict:
    """SafeAILab/EAGLE eagle/model/cnets1.py `Model`: fc (2H -> H, with bias), layers.0 with no
    input norm, no final norm, no lm_head; the saved state includes the frozen embed_tokens."""
    h, inner = config["hidden_size"], config["intermediate_size"]
    return {
        "embed_tokens.weight": (config["vocab_size"], h),
        "fc.weight": (h, 2 * h),
        "fc.bias": (h,),
        **attention("layers.0.self_attn", h, config),
        **mlp("layers.0.mlp", h, inner),
        "layers.0.post_attention_layernorm.weight": (h,),
    }


def medusa_layout(hidden: int, vocab: int, heads: int) -> dict:
    """FasterDecoding/Medusa `medusa_head.state_dict()` (medusa_lm_head.pt), one block a head."""
    layout = {}
    for i in range(heads):
        layout |= {
            f"{i}.0.linear.weight": (hidden, hidden),
            f"{i}.0.linear.bias": (hidden,),
            f"{i}.1.weight": (vocab, hidden),
        }
    return layout


def hydra_layout(target_config, heads: int, blocks: int) -> dict:
    """zankner/Hydra `HydraPrefixMLP.state_dict()` (hydra_lm_head.pt): a one-layer Llama
    (`prefix_embeding_layer`, its embedding and its saved RoPE inv_freq included), per head a
    first block over (h+2)*H inputs with a linear residual at Sequential index 1 (index 0 is
    dropout), later blocks at 3, 5, 7 (one module repeated), a projection with bias at index 1
    of hydra_lm_head.{h}, and input_embed_fn (the target's embedding)."""
    h, v = target_config.hidden_size, target_config.vocab_size
    config = {"hidden_size": h, "num_attention_heads": target_config.num_attention_heads}
    layout = {
        "prefix_embeding_layer.embed_tokens.weight": (v, h),
        **attention("prefix_embeding_layer.layers.0.self_attn", h, config),
        "prefix_embeding_layer.layers.0.self_attn.rotary_emb.inv_freq": (h // target_config.num_attention_heads // 2,),
        **mlp("prefix_embeding_layer.layers.0.mlp", h, target_config.intermediate_size),
        "prefix_embeding_layer.layers.0.input_layernorm.weight": (h,),
        "prefix_embeding_layer.layers.0.post_attention_layernorm.weight": (h,),
        "prefix_embeding_layer.norm.weight": (h,),
        "input_embed_fn.weight": (v, h),
    }
    for head in range(heads):
        inputs = (head + 2) * h
        layout |= {f"hydra_mlp.{head}.1.{n}.weight": (h, inputs) for n in ("linear", "res_connection")}
        layout |= {f"hydra_mlp.{head}.1.{n}.bias": (h,) for n in ("linear", "res_connection")}
        for block in range(1, blocks):
            layout |= {
                f"hydra_mlp.{head}.{2 * block + 1}.linear.weight": (h, h),
                f"hydra_mlp.{head}.{2 * block + 1}.linear.bias": (h,),
            }
        layout |= {f"hydra_lm_head.{head}.1.weight": (v, h), f"hydra_lm_head.{head}.1.bias": (v,)}
    return layout


def tensors(layout: dict, dtype: torch.dtype, seed: int = 0) -> dict[str, torch.Tensor]:
    """Random tensors of the layout's shapes in the release's float dtype; d2t / t2d a
    sorted draft vocabulary as the EAGLE-3 trainer writes them."""
    generator = torch.Generator().manual_seed(seed)
    state = {}
    for name, spec in layout.items():
        shape, kind = spec if isinstance(spec[0], tuple) else (spec, dtype)
        state[name] = (0.1 * torch.randn(shape, generator=generator)).to(kind) if kind.is_floating_point else None
    if "d2t" in state:
        kept = torch.randperm(VOCAB, generator=generator)[:DRAFT_VOCAB].sort().values
        state["d2t"] = kept - torch.arange(DRAFT_VOCAB)
        state["t2d"] = torch.zeros(VOCAB, dtype=torch.bool).index_fill(0, kept, True)
    return state


def shared_blocks(state: dict) -> dict:
    """The Hydra release repeats one block module, so its later-block keys hold one tensor."""
    for name in [k for k in state if k.startswith("hydra_mlp.") and k.split(".")[2] in ("5", "7")]:
        parts = name.split(".")
        state[name] = state[".".join(parts[:2] + ["3"] + parts[3:])]
    return state


def write(directory, config: dict, state: dict, file: str) -> str:
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "config.json").write_text(json.dumps(config, indent=2))
    if file.endswith(".safetensors"):
        save_file({k: v.contiguous() for k, v in state.items()}, str(directory / file))
    else:
        torch.save(state, directory / file)
    return str(directory)


def entry(path: str) -> dict:
    return {"name": "published", "path": path}


# name -> (target builder, config.json, layout for that target, file name, dtype, build(target, path) -> drafter, tree)
def eagle3_case(config: dict, file: str, dtype: torch.dtype, target_builder):
    return (
        target_builder,
        config,
        lambda t: eagle3_layout(config, t.config.hidden_size),
        file,
        dtype,
        lambda t, path: eagle3_drafter.load(t, FP32, Compiled(), head=entry(path)),
        lambda: EagleDynamicTree(top_k=4, depth=3, total_tokens=10),
    )


def eagle1_case(hidden: int, heads: int):
    config = {
        **EAGLE1_VICUNA_CONFIG,
        "hidden_size": hidden,
        "intermediate_size": 2 * hidden,
        "num_attention_heads": heads,
    }
    return (
        lambda: vicuna_target(hidden, heads),
        config,
        lambda t: eagle1_layout(config),
        "pytorch_model.bin",
        torch.float32,
        lambda t, path: eagle_drafter.load(t, FP32, Compiled(), head=entry(path)),
        lambda: EagleDynamicTree(top_k=4, depth=3, total_tokens=10),
    )


CASES = {
    "eagle3-llama3.1-8b": eagle3_case(EAGLE3_LLAMA31_CONFIG, "pytorch_model.bin", torch.float16, llama31_target),
    "eagle3-qwen3-8b-bin": eagle3_case(EAGLE3_QWEN3_CONFIG, "pytorch_model.bin", torch.bfloat16, qwen3_target),
    "eagle3-qwen3-8b-safetensors": eagle3_case(EAGLE3_QWEN3_CONFIG, "model.safetensors", torch.bfloat16, qwen3_target),
    "eagle1-vicuna-7b": eagle1_case(64, 4),
    "eagle1-vicuna-13b": eagle1_case(80, 5),
    "medusa-vicuna-7b": (
        vicuna_target,
        MEDUSA_VICUNA_CONFIG,
        lambda t: medusa_layout(t.config.hidden_size, VOCAB, MEDUSA_HEADS),
        "medusa_lm_head.pt",
        torch.bfloat16,
        lambda t, path: medusa_drafter.load(t, FP32, Compiled(), heads=entry(path)),
        lambda: StaticTree(choices=[[0], [1], [0, 0], [0, 0, 0]]),
    ),
    "hydra-vicuna-7b": (
        vicuna_target,
        HYDRA_VICUNA_CONFIG,
        lambda t: hydra_layout(t.config, 4, 4),
        "hydra_lm_head.pt",
        torch.float16,
        lambda t, path: hydra_drafter.load(t, FP32, Compiled(), heads=entry(path)),
        lambda: StaticTree(choices=[[0], [1], [0, 0], [0, 0, 0]]),
    ),
}
# one key renamed and one shape changed per release: (old, new) and (key, wrong shape for that target)
RENAMED = {
    "eagle3": ("midlayer.hidden_norm.weight", "midlayer.feature_norm.weight"),
    "eagle1": ("layers.0.post_attention_layernorm.weight", "layers.0.post_layernorm.weight"),
    "medusa": ("3.0.linear.bias", "3.0.linear.b"),
    "hydra": ("hydra_mlp.2.1.res_connection.weight", "hydra_mlp.2.1.residual.weight"),
}
RESHAPED = {
    "eagle3": "fc.weight",
    "eagle1": "fc.weight",
    "medusa": "2.1.weight",
    "hydra": "hydra_mlp.1.1.linear.weight",
}


@pytest.fixture(scope="module")
def targets():
    """One target per builder for the module (building them is most of a test's time)."""
    built = {}

    def target(builder):
        if builder not in built:
            built[builder] = builder()
        return built[builder]

    return target


def checkpoint(name: str, tmp_path, targets, edit=None):
    """(target, the drafter's build, the written file's path, the tensors written)."""
    builder, config, layout, file, dtype, build, _ = CASES[name]
    target = targets(builder)
    state = tensors(layout(target), dtype)
    if name.startswith("hydra"):
        state = shared_blocks(state)
    if edit:
        edit(state)
    path = write(tmp_path / name, config, state, file)
    return target, build, path, tmp_path / name / file, state


def loaded_state(name: str, drafter) -> dict[str, torch.Tensor]:
    """What the drafter holds, under the release's key names."""
    if name.startswith(("eagle3", "eagle1")):
        state = dict(drafter.head.state_dict())
        if drafter.head.embed_tokens is not None:
            state["embed_tokens.weight"] = drafter.head.embed_tokens.weight
        return state
    return dict(drafter.heads.state_dict())


@pytest.mark.parametrize("name", list(CASES))
def test_a_published_layout_loads_every_tensor_and_decodes_as_ar(name, tmp_path, targets):
    target, build, path, file, written = checkpoint(name, tmp_path, targets)
    drafter = build(target, path)
    held = loaded_state(name, drafter)
    # Hydra: never read
    dropped = {
        "prefix_embeding_layer.embed_tokens.weight",
        "prefix_embeding_layer.layers.0.self_attn.rotary_emb.inv_freq",
    }
    assert set(held) == set(written) - dropped  # nothing left out, nothing freshly initialised
    for key, tensor in held.items():
        assert torch.equal(tensor.to(written[key].dtype), written[key]), key  # the release's values
    if name.startswith("eagle3"):
        assert drafter.target_ids.tolist() == torch.nonzero(written["t2d"]).flatten().tolist()
    lm, limits, prompt = TreeLM(target), Limits(max_new_tokens=12), [5, 17, 33, 8, 91, 17, 33]
    ar = generate(lm, Method(Autoregressive(), StandardVerifier()), prompt, Sampling(), limits)
    out = generate(lm, Method(CASES[name][6](), StandardVerifier(), drafter), prompt, Sampling(), limits)
    assert out.ids == ar.ids and out.draft_forwards > 0


def family(name: str) -> str:
    return name.split("-")[0]


def assert_one_line(error: pytest.ExceptionInfo, *fragments: str) -> None:
    message = str(error.value)
    assert "\n" not in message and message.startswith("method.drafter.head"), message
    for fragment in fragments:
        assert fragment in message, (fragment, message)


@pytest.mark.parametrize("name", list(CASES))
def test_one_renamed_key_is_one_line_naming_the_file_and_both_keys(name, tmp_path, targets):
    old, new = RENAMED[family(name)]
    target, build, path, file, _ = checkpoint(name, tmp_path, targets, edit=lambda s: s.__setitem__(new, s.pop(old)))
    with pytest.raises(ConfigError) as error:
        build(target, path)
    assert_one_line(error, str(file), f"missing keys ['{old}']", f"unexpected keys ['{new}']")


@pytest.mark.parametrize("name", list(CASES))
def test_one_changed_shape_is_one_line_naming_the_file_the_key_and_the_shape_expected(name, tmp_path, targets):
    key = RESHAPED[family(name)]
    right = {}

    def narrower(state):
        right["shape"] = list(state[key].shape)
        state[key] = state[key][..., :-1].clone()

    target, build, path, file, _ = checkpoint(name, tmp_path, targets, edit=narrower)
    with pytest.raises(ConfigError) as error:
        build(target, path)
    assert_one_line(
        error, str(file), f"{key} is {right['shape'][:-1] + [right['shape'][-1] - 1]}, expected {right['shape']}"
    )


def test_an_eagle3_head_for_another_target_is_refused_before_it_drafts(tmp_path, targets):
    """The Llama-3.1 head on a target of another hidden size: one line, not a matmul error mid-decode."""
    _, build, path, _, _ = checkpoint("eagle3-llama3.1-8b", tmp_path, targets)
    other = vicuna_target(80, 5)
    with pytest.raises(ConfigError) as error:
        build(other, path)
    assert_one_line(
        error,
        "EAGLE-3 head for a target with vocabulary 256 and hidden size 64",
        "this target has vocabulary 256 and hidden size 80",
    )


def test_a_d2t_outside_the_vocabulary_is_refused(tmp_path, targets):
    _, build, path, file, _ = checkpoint(
        "eagle3-qwen3-8b-safetensors", tmp_path, targets, edit=lambda s: s["d2t"].__setitem__(-1, VOCAB)
    )
    with pytest.raises(ConfigError) as error:
        build(targets(qwen3_target), path)
    assert_one_line(error, str(file), "d2t maps draft ids to target ids outside 0..255")


def test_an_integer_map_stored_as_floats_is_refused(tmp_path, targets):
    _, build, path, file, _ = checkpoint(
        "eagle3-llama3.1-8b", tmp_path, targets, edit=lambda s: s.__setitem__("d2t", s["d2t"].float())
    )
    with pytest.raises(ConfigError) as error:
        build(targets(llama31_target), path)
    assert_one_line(error, str(file), "d2t is torch.float32, expected integer (torch.int64)")


@pytest.mark.parametrize("name", ["eagle1-vicuna-7b", "medusa-vicuna-7b"])
def test_a_truncated_pickle_is_one_line(name, tmp_path, targets):
    """A .bin / .pt whose copy stopped midway (the safetensors case is refused from its header by the registry)."""
    target, build, path, file, _ = checkpoint(name, tmp_path, targets)
    file.write_bytes(file.read_bytes()[: file.stat().st_size // 2])
    with pytest.raises(ConfigError) as error:
        build(target, path)
    assert_one_line(error, str(file), "could not be read", "copy it again")
