"""EAGLE-3 head: strict loading of checkpoints with the real key names (tiny shapes),
feature plumbing, and greedy identity with AR through the dynamic tree."""

import json

import pytest
import torch
from safetensors.torch import save_file

from specbench.drafters.eagle3 import Eagle3Drafter
from specbench.engine.lm import TreeLM
from specbench.engine.loop import Limits, Method, generate
from specbench.engine.sampling import Sampling
from specbench.errors import ConfigError
from specbench.models.eagle3 import Eagle3Head, head_config, load_head
from specbench.trees.autoregressive import Autoregressive
from specbench.trees.chain import Chain
from specbench.trees.eagle import EagleDynamicTree
from specbench.verify.standard import StandardVerifier

from conftest import VOCAB, tiny_llama

DRAFT_VOCAB = 64
CONFIG = {
    "architectures": ["LlamaForCausalLMEagle3"], "hidden_size": 32, "intermediate_size": 64,
    "num_attention_heads": 4, "num_key_value_heads": 2, "num_hidden_layers": 1, "rms_norm_eps": 1e-6,
    "max_position_embeddings": 1024, "rope_theta": 10000.0, "vocab_size": VOCAB, "draft_vocab_size": DRAFT_VOCAB,
    "hidden_act": "silu", "tie_word_embeddings": False,
}
KEYS = {
    "fc.weight", "midlayer.hidden_norm.weight", "midlayer.input_layernorm.weight", "midlayer.post_attention_layernorm.weight",
    "midlayer.self_attn.q_proj.weight", "midlayer.self_attn.k_proj.weight", "midlayer.self_attn.v_proj.weight",
    "midlayer.self_attn.o_proj.weight", "midlayer.mlp.gate_proj.weight", "midlayer.mlp.up_proj.weight",
    "midlayer.mlp.down_proj.weight", "norm.weight", "lm_head.weight", "d2t", "t2d",
}


@pytest.fixture(scope="module")
def target4():
    return tiny_llama(0, layers=4)


def synthetic_checkpoint(directory, seed=0, rename=None, drop=None, fmt="safetensors"):
    torch.manual_seed(seed)
    head = Eagle3Head(head_config(CONFIG))
    kept = torch.randperm(VOCAB)[:DRAFT_VOCAB].sort().values  # draft vocab = a subset of the target's
    state = {k: v.clone() for k, v in head.state_dict().items()}
    state["d2t"] = kept - torch.arange(DRAFT_VOCAB)
    state["t2d"] = torch.zeros(VOCAB, dtype=torch.bool).index_fill(0, kept, True)
    state["lm_head.weight"] *= 20
    if rename:
        state[rename[1]] = state.pop(rename[0])
    if drop:
        state.pop(drop)
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "config.json").write_text(json.dumps(CONFIG))
    if fmt == "safetensors":
        save_file(state, directory / "model.safetensors")
    else:
        torch.save(state, directory / "pytorch_model.bin")
    return kept


def test_checkpoint_keys_are_the_published_ones(tmp_path):
    synthetic_checkpoint(tmp_path)
    head = load_head(str(tmp_path), torch.float32, "cpu", "method.drafter.head")
    assert set(head.state_dict()) == KEYS
    assert head.midlayer.self_attn.q_proj.weight.shape == (32, 64)  # reads [embedding, feature], 2H
    assert head.fc.weight.shape == (32, 96)  # three target layers


@pytest.mark.parametrize("fmt", ["safetensors", "bin"])
def test_loads_both_formats_and_maps_draft_ids(tmp_path, fmt):
    kept = synthetic_checkpoint(tmp_path, fmt=fmt)
    head = load_head(str(tmp_path), torch.float32, "cpu", "k")
    assert head.target_ids().tolist() == kept.tolist()


def test_wrong_keys_are_listed(tmp_path):
    synthetic_checkpoint(tmp_path / "a", rename=("midlayer.hidden_norm.weight", "midlayer.feature_norm.weight"))
    with pytest.raises(ConfigError, match=r"missing keys \['midlayer.hidden_norm.weight'\], unexpected keys \['midlayer.feature_norm.weight'\]"):
        load_head(str(tmp_path / "a"), torch.float32, "cpu", "method.drafter.head")
    synthetic_checkpoint(tmp_path / "b", drop="d2t")
    with pytest.raises(ConfigError, match=r"missing keys \['d2t'\]"):
        load_head(str(tmp_path / "b"), torch.float32, "cpu", "method.drafter.head")


def test_embedding_in_the_checkpoint_is_ignored(tmp_path):
    synthetic_checkpoint(tmp_path)
    from safetensors.torch import load_file

    state = load_file(tmp_path / "model.safetensors")
    state["embed_tokens.weight"] = torch.zeros(VOCAB, 32)
    save_file(state, tmp_path / "model.safetensors")
    load_head(str(tmp_path), torch.float32, "cpu", "k")


def drafter_for(target, tmp_path, seed=0):
    synthetic_checkpoint(tmp_path, seed=seed)
    return Eagle3Drafter(load_head(str(tmp_path), torch.float32, "cpu", "k"), target)


def test_features_come_from_layers_2_mid_and_l_minus_3(target4, tmp_path):
    assert drafter_for(target4, tmp_path).feature_layers == (2, 2, 1)


def test_incremental_reading_equals_reading_from_scratch(target4, tmp_path, prompts):
    """After generating, the head's next-token logits equal those of a fresh head that
    reads the whole text at once: features and tokens are paired right at every step."""
    method = Method(EagleDynamicTree(top_k=3, depth=3, total_tokens=8), StandardVerifier(), drafter_for(target4, tmp_path / "a"))
    lm = TreeLM(target4)
    out = generate(lm, method, prompts[0], Sampling(), Limits(max_new_tokens=17))
    text = prompts[0] + out.ids[:-1]
    from specbench.engine.tree import DraftTree

    with torch.inference_mode():
        root = DraftTree.root(out.ids[-1])
        incremental = method.drafter.logits(text, root, [0])
        fresh_lm, fresh = TreeLM(target4), drafter_for(target4, tmp_path / "b")
        fresh_lm.feature_layers = fresh.feature_layers
        fresh_lm.forward(context=text)
        fresh.begin(text, fresh_lm.features)
        scratch = fresh.logits(text, root, [0])
    finite = torch.isfinite(scratch)
    assert torch.equal(finite, torch.isfinite(incremental))
    torch.testing.assert_close(incremental[finite], scratch[finite], rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("policy", ["dynamic_tree", "chain"])
def test_greedy_identical_to_ar(policy, target4, tmp_path, prompts):
    tree = EagleDynamicTree(top_k=6, depth=3, total_tokens=16) if policy == "dynamic_tree" else Chain(3)
    method = Method(tree, StandardVerifier(), drafter_for(target4, tmp_path))
    ar = Method(Autoregressive(), StandardVerifier())
    lm = TreeLM(target4)
    limits = Limits(max_new_tokens=30, stop_token_ids=frozenset({2}))
    accepted = 0
    for prompt in prompts[:20]:
        expected = generate(lm, ar, prompt, Sampling(), limits).ids
        out = generate(lm, method, prompt, Sampling(), limits)
        assert out.ids == expected
        accepted += sum(n - 1 for n in out.accept_lengths)
        assert out.draft_forwards > 0 or out.target_forwards == 0
    if policy == "dynamic_tree":
        assert accepted > 0


def test_training_rows_equal_inference_tree_nodes(target4, tmp_path):
    """What the trainer unrolls at step j for anchor a is what the drafter computes for
    the depth-j node of a chain after committing tokens up to a+1."""
    from specbench.engine.tree import DraftTree
    from specbench.models.eagle3 import feature_layers
    from specbench.train.eagle3 import ttt_unroll

    drafter = drafter_for(target4, tmp_path)
    ids = [5, 9, 14, 3, 22, 40, 41, 7, 18, 30]
    with torch.inference_mode():
        out = target4(input_ids=torch.tensor([ids]), output_hidden_states=True)
        features = torch.cat([out.hidden_states[i] for i in feature_layers(4)], dim=-1)
        embeds = target4.get_input_embeddings()(torch.tensor([ids]))
        n = len(ids) - 1
        unrolled = ttt_unroll(drafter.head, embeds[:, 1:], features[:, :n], steps=3)
        anchor = 4
        drafter.begin(ids[: anchor + 1], features[0, : anchor + 1])
        tree = DraftTree.root(ids[anchor + 1])
        node = 0
        for depth in range(3):
            logits = drafter.logits(ids[: anchor + 1], tree, [node])[0]
            expected = unrolled[depth][0, anchor + depth]
            torch.testing.assert_close(logits[drafter.target_ids], expected, rtol=1e-4, atol=1e-4)
            node = tree.add(node, ids[anchor + depth + 2])
