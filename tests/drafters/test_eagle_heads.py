"""EAGLE-1 and EAGLE-3 heads: strict loading of checkpoints with the real key names (tiny
shapes), feature plumbing, and greedy identity with AR through static and dynamic trees."""

import json

import pytest
import torch
from conftest import VOCAB, tiny_llama
from eagle_fixtures import EAGLE1_CONFIG, drafter_for, eagle1_checkpoint, synthetic_checkpoint
from safetensors.torch import save_file

from specbench.drafters.eagle import EagleDrafter
from specbench.engine.lm import TreeLM
from specbench.engine.loop import Limits, Method, generate, generate_batch
from specbench.engine.sampling import Sampling
from specbench.engine.tree import DraftTree
from specbench.errors import ConfigError
from specbench.models import eagle
from specbench.models.eagle3 import feature_layers, head_config, load_head
from specbench.trees.autoregressive import Autoregressive
from specbench.trees.chain import Chain
from specbench.trees.eagle import EagleDynamicTree
from specbench.trees.static import StaticTree
from specbench.verify.standard import StandardVerifier

EAGLE1_KEYS = {
    "fc.weight",
    "fc.bias",
    "layers.0.self_attn.q_proj.weight",
    "layers.0.self_attn.k_proj.weight",
    "layers.0.self_attn.v_proj.weight",
    "layers.0.self_attn.o_proj.weight",
    "layers.0.mlp.gate_proj.weight",
    "layers.0.mlp.up_proj.weight",
    "layers.0.mlp.down_proj.weight",
    "layers.0.post_attention_layernorm.weight",
}
KEYS = {
    "fc.weight",
    "midlayer.hidden_norm.weight",
    "midlayer.input_layernorm.weight",
    "midlayer.post_attention_layernorm.weight",
    "midlayer.self_attn.q_proj.weight",
    "midlayer.self_attn.k_proj.weight",
    "midlayer.self_attn.v_proj.weight",
    "midlayer.self_attn.o_proj.weight",
    "midlayer.mlp.gate_proj.weight",
    "midlayer.mlp.up_proj.weight",
    "midlayer.mlp.down_proj.weight",
    "norm.weight",
    "lm_head.weight",
    "d2t",
    "t2d",
}


@pytest.fixture(scope="module")
def target4():
    return tiny_llama(0, layers=4)


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
    with pytest.raises(
        ConfigError,
        match=r"missing keys \['midlayer.hidden_norm.weight'\], unexpected keys \['midlayer.feature_norm.weight'\]",
    ):
        load_head(str(tmp_path / "a"), torch.float32, "cpu", "method.drafter.head")
    synthetic_checkpoint(tmp_path / "b", drop="d2t")
    with pytest.raises(ConfigError, match=r"missing keys \['d2t'\]"):
        load_head(str(tmp_path / "b"), torch.float32, "cpu", "method.drafter.head")


def test_an_embedding_in_the_checkpoint_replaces_the_targets(target4, tmp_path):
    """As in the EAGLE release: a head that ships embed_tokens drafts with it."""
    from safetensors.torch import load_file

    synthetic_checkpoint(tmp_path)
    assert (
        EagleDrafter(load_head(str(tmp_path), torch.float32, "cpu", "k"), target4, feature_layers(4)).embed
        is target4.get_input_embeddings()
    )
    state = load_file(tmp_path / "model.safetensors")
    shipped = torch.randn(VOCAB, 32)
    save_file({**state, "embed_tokens.weight": shipped}, tmp_path / "model.safetensors")
    drafter = EagleDrafter(load_head(str(tmp_path), torch.float32, "cpu", "k"), target4, feature_layers(4))
    assert torch.equal(drafter.embed.weight, shipped)
    save_file({**state, "embed_tokens.weight": torch.randn(VOCAB, 31)}, tmp_path / "model.safetensors")
    with pytest.raises(ConfigError, match=r"embed_tokens.weight is \(96, 31\), not \[vocab, 32\]"):
        load_head(str(tmp_path), torch.float32, "cpu", "k")
    save_file({**state, "embed_tokens.weight": torch.randn(VOCAB + 1, 32)}, tmp_path / "model.safetensors")
    with pytest.raises(ConfigError, match="target's vocabulary has 96"):
        EagleDrafter(load_head(str(tmp_path), torch.float32, "cpu", "k"), target4, feature_layers(4))


def test_features_come_from_layers_2_mid_and_l_minus_3(target4, tmp_path):
    assert drafter_for(target4, tmp_path).feature_layers == (2, 2, 1)


def test_eagle1_checkpoint_keys_are_the_published_ones(target4, tmp_path):
    """layers.0 has no input_layernorm, there is no final norm and no lm_head (the target's
    scores the head's output), fc has a bias unless the config says `bias: false`; the
    feature is the target's final-normed last hidden state."""
    embedding = target4.get_input_embeddings().weight.detach().clone()
    eagle1_checkpoint(tmp_path / "a", embedding=embedding)
    weight = target4.get_output_embeddings().weight
    head = eagle.load_head(str(tmp_path / "a"), weight, torch.float32, "cpu", "k")
    assert set(head.state_dict()) == EAGLE1_KEYS | {"embed_tokens.weight"}
    assert head.fc.weight.shape == (32, 64) and head.layers[0].self_attn.q_proj.weight.shape == (32, 32)
    assert head.target_ids() is None
    eagle1_checkpoint(tmp_path / "b", bias=False)
    assert "fc.bias" not in eagle.load_head(str(tmp_path / "b"), weight, torch.float32, "cpu", "k").state_dict()
    assert drafter_for(target4, tmp_path / "c", kind="eagle1").feature_layers == (4,)


def test_eagle1_wrong_checkpoints_are_refused(target4, tmp_path):
    weight = target4.get_output_embeddings().weight
    eagle1_checkpoint(tmp_path / "a", drop="fc.bias")
    with pytest.raises(
        ConfigError, match=r"not an EAGLE-1 checkpoint of this shape: missing keys \['fc.bias'\], unexpected keys \[\]"
    ):
        eagle.load_head(str(tmp_path / "a"), weight, torch.float32, "cpu", "method.drafter.head")
    synthetic_checkpoint(tmp_path / "b")  # an EAGLE-3 head is not an EAGLE-1 head
    (tmp_path / "b" / "config.json").write_text(json.dumps(EAGLE1_CONFIG))
    with pytest.raises(ConfigError, match=r"missing keys \['fc.bias', 'layers.0"):
        eagle.load_head(str(tmp_path / "b"), weight, torch.float32, "cpu", "method.drafter.head")
    eagle1_checkpoint(tmp_path / "c")
    with pytest.raises(ConfigError, match=r"vocabulary 96 x hidden 32; the target's lm_head is \(96, 16\)"):
        eagle.load_head(str(tmp_path / "c"), torch.zeros(VOCAB, 16), torch.float32, "cpu", "k")
    (tmp_path / "c" / "config.json").write_text(json.dumps({**EAGLE1_CONFIG, "num_hidden_layers": 2}))
    with pytest.raises(ConfigError, match="num_hidden_layers=2; EAGLE-1 heads have 1 decoder layer"):
        eagle.load_head(str(tmp_path / "c"), weight, torch.float32, "cpu", "k")


KINDS = ["eagle3", "eagle3-2layers", "eagle1"]  # eagle3-2layers: a head trained here with a second decoder layer


def read_from_scratch(target4, directory, text, root, kind):
    """Next-token logits of a fresh head that reads `text` (with target features) and `root`."""
    fresh_lm, fresh = TreeLM(target4), drafter_for(target4, directory, kind=kind)
    fresh_lm.feature_layers = fresh.feature_layers
    fresh_lm.forward(contexts=[text])
    fresh.begin([text], fresh_lm.features)
    return fresh.logits([text], [DraftTree.root(root)], [[0]])[0]


def assert_same_logits(incremental, scratch):
    finite = torch.isfinite(scratch)
    assert torch.equal(finite, torch.isfinite(incremental))
    torch.testing.assert_close(incremental[finite], scratch[finite], rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("kind", KINDS)
def test_incremental_reading_equals_reading_from_scratch(kind, target4, tmp_path, prompts):
    """After generating, the head's next-token logits equal those of a fresh head that
    reads the whole text at once: features and tokens are paired right at every step."""
    method = Method(
        EagleDynamicTree(top_k=3, depth=2, total_tokens=8),
        StandardVerifier(),
        drafter_for(target4, tmp_path / "a", kind=kind),
    )
    lm = TreeLM(target4)
    out = generate(lm, method, prompts[0], Sampling(), Limits(max_new_tokens=17))
    text = prompts[0] + out.ids[:-1]
    with torch.inference_mode():
        incremental = method.drafter.logits([text], [DraftTree.root(out.ids[-1])], [[0]])[0]
        scratch = read_from_scratch(target4, tmp_path / "b", text, out.ids[-1], kind)
    assert_same_logits(incremental, scratch)


@pytest.mark.parametrize("kind", KINDS)
def test_batched_incremental_reading_equals_reading_from_scratch(kind, target4, tmp_path, prompts):
    """Rows of different prompt lengths accept paths of different lengths (the target's
    and the head's caches keep masked holes) and one row leaves the batch; every row's
    next-token logits still equal a fresh single-row head reading its whole text."""
    policy = EagleDynamicTree(top_k=3, depth=2, total_tokens=8)
    drafter = drafter_for(target4, tmp_path / "a", kind=kind)
    lm = TreeLM(target4)
    lm.feature_layers = drafter.feature_layers
    texts = [list(p) for p in (prompts[0], prompts[3], prompts[5])]
    assert len({len(t) for t in texts}) == 3
    # accepted path length per step and row (capped by the tree's depth), and which rows go on
    accept = [[3, 1, 2], [1, 4, 2], [2, 2, 1], [4, 1]]
    keep_after = {2: [0, 2]}
    lm.reset(3)
    with torch.inference_mode():
        first = lm.forward(contexts=texts)
        roots = [int(z[-1].argmax()) for z in first]
        drafter.begin(texts, lm.features)
        for step, lengths in enumerate(accept):
            trees = policy.grow(drafter, texts, roots, Sampling(), [None] * len(texts))
            logits = lm.forward(trees=trees, nodes=[range(len(t)) for t in trees])
            paths = [longest_path(tree, n) for tree, n in zip(trees, lengths)]
            assert len({len(p) for p in paths}) > 1  # rows accept different lengths
            lm.commit(paths)
            drafter.commit(trees, paths, [f[p] for f, p in zip(lm.features, paths)])
            for b, (tree, path) in enumerate(zip(trees, paths)):
                texts[b] = texts[b] + [tree.tokens[n] for n in path]
                roots[b] = int(logits[b][path[-1]].argmax())
            if step in keep_after:
                rows = keep_after[step]
                lm.keep(rows)
                drafter.keep(rows)
                texts, roots = [texts[r] for r in rows], [roots[r] for r in rows]
        incremental = drafter.logits(texts, [DraftTree.root(r) for r in roots], [[0] for _ in roots])
        for b, (text, root) in enumerate(zip(texts, roots)):
            assert_same_logits(incremental[b], read_from_scratch(target4, tmp_path / f"fresh{b}", text, root, kind))


@pytest.mark.parametrize("kind", KINDS)
def test_steps_drafted_without_the_head_are_read_at_its_next_call(kind, target4, tmp_path, prompts):
    """A policy may leave the drafter out of a step (CAST where no draft node could pay): the
    root alone is verified and committed, and the head catches up at its next call. Steps are
    skipped alone and twice running; every row's next-token logits then equal a fresh head
    reading its whole text."""
    policy = EagleDynamicTree(top_k=3, depth=2, total_tokens=8)
    drafter = drafter_for(target4, tmp_path / "a", kind=kind)
    lm = TreeLM(target4)
    lm.feature_layers = drafter.feature_layers
    texts = [list(p) for p in (prompts[0], prompts[3])]
    skipped = {1: True, 2: True, 4: True}  # steps the policy drafts nothing for
    lm.reset(2)
    with torch.inference_mode():
        first = lm.forward(contexts=texts)
        roots = [int(z[-1].argmax()) for z in first]
        drafter.begin(texts, lm.features)
        for step in range(6):
            if skipped.get(step):
                trees = [DraftTree.root(r) for r in roots]
            else:
                trees = policy.grow(drafter, texts, roots, Sampling(), [None] * len(texts))
            logits = lm.forward(trees=trees, nodes=[range(len(t)) for t in trees])
            paths = [longest_path(tree, 2) for tree in trees]
            lm.commit(paths)
            drafter.commit(trees, paths, [f[p] for f, p in zip(lm.features, paths)])
            for b, (tree, path) in enumerate(zip(trees, paths)):
                texts[b] = texts[b] + [tree.tokens[n] for n in path]
                roots[b] = int(logits[b][path[-1]].argmax())
        incremental = drafter.logits(texts, [DraftTree.root(r) for r in roots], [[0] for _ in roots])
        for b, (text, root) in enumerate(zip(texts, roots)):
            assert_same_logits(incremental[b], read_from_scratch(target4, tmp_path / f"fresh{b}", text, root, kind))


@pytest.mark.parametrize(
    "kind,shape",
    [("eagle3", "dynamic"), ("eagle3-2layers-int8", "dynamic"), ("eagle1", "dynamic"), ("eagle1", "static")],
)
def test_trees_grown_on_the_device_equal_the_host_loops(kind, shape, target4, tmp_path, prompts):
    """EAGLE-2/3's dynamic tree and a static tree, kept on the device until complete (one
    read per step), are the host loop's trees node for node (tokens, parents, log-probs,
    drafted indices) at every step of a batched decode of prompts of different lengths."""
    if shape == "dynamic":
        policy = EagleDynamicTree(top_k=4, depth=3, total_tokens=12)
    else:
        policy = StaticTree(choices=[[0], [1], [2], [0, 0], [0, 1], [1, 0], [2, 0], [0, 0, 0], [1, 0, 0], [0, 0, 0, 0]])
    on_device, on_host = (drafter_for(target4, tmp_path / name, kind=kind) for name in ("device", "host"))
    on_host.grows_on_device = False
    lm = TreeLM(target4)
    lm.feature_layers = on_device.feature_layers
    texts = [list(prompts[b]) for b in (0, 3, 5)]
    lm.reset(len(texts))
    none = [None] * len(texts)
    with torch.inference_mode():
        roots = [int(z[-1].argmax()) for z in lm.forward(contexts=texts)]
        for drafter in (on_device, on_host):
            drafter.begin(texts, lm.features)
        for _ in range(6):
            trees = policy.grow(on_device, texts, roots, Sampling(), none)
            expected = policy.grow(on_host, texts, roots, Sampling(), none)
            for tree, want in zip(trees, expected, strict=True):
                assert (tree.tokens, tree.parents, tree.depths, tree.logps, tree.origin) == (
                    want.tokens,
                    want.parents,
                    want.depths,
                    want.logps,
                    want.origin,
                )
            logits = lm.forward(trees=trees, nodes=[range(len(t)) for t in trees])
            accepted = StandardVerifier().accept_rows(trees, logits, Sampling(), none)
            paths = [a.path for a in accepted]
            lm.commit(paths)
            for drafter in (on_device, on_host):
                drafter.commit(trees, paths, [f[p] for f, p in zip(lm.features, paths)])
            texts = [text + [tree.tokens[n] for n in path] for text, tree, path in zip(texts, trees, paths)]
            roots = [a.next_token for a in accepted]


def longest_path(tree: DraftTree, length: int) -> list[int]:
    """A root-first path of `length` nodes (or the deepest the tree has), first node wins."""
    deepest = max(range(len(tree)), key=lambda n: (min(tree.depths[n] + 1, length), -n))
    return tree.path_to(deepest)


LIMITS = Limits(max_new_tokens=30, stop_token_ids=frozenset({2}))


@pytest.fixture(scope="module")
def ar_ids(target4, prompts):
    ar = Method(Autoregressive(), StandardVerifier())
    return [generate(TreeLM(target4), ar, prompt, Sampling(), LIMITS).ids for prompt in prompts[:20]]


TREES = {
    "dynamic_tree": lambda: EagleDynamicTree(top_k=6, depth=2, total_tokens=16),
    "chain": lambda: Chain(3),
    "static_tree": lambda: StaticTree(choices=[[0], [1], [2], [0, 0], [0, 1], [1, 0], [0, 0, 0], [0, 0, 0, 0]]),
}


@pytest.mark.parametrize("batch", [1, 3])
@pytest.mark.parametrize(
    "kind,policy",
    [
        ("eagle3", "dynamic_tree"),
        ("eagle3", "chain"),
        ("eagle3-2layers", "dynamic_tree"),
        ("eagle3-2layers-packed", "dynamic_tree"),
        ("eagle3-2layers-int8", "dynamic_tree"),
        ("eagle3-int8", "chain"),
        ("eagle1", "static_tree"),
        ("eagle1", "dynamic_tree"),
    ],
)
def test_greedy_identical_to_ar(kind, policy, batch, target4, tmp_path, prompts, ar_ids):
    """Batches of 3 (the last of 2) hold prompts of different lengths; rows stop at
    different steps and leave the batch. eagle1 + static tree is method eagle, eagle1 +
    dynamic tree is eagle2."""
    method = Method(TREES[policy](), StandardVerifier(), drafter_for(target4, tmp_path, kind=kind))
    lm = TreeLM(target4)
    outputs = []
    for start in range(0, 20, batch):
        outputs += generate_batch(lm, method, prompts[start : min(start + batch, 20)], Sampling(), LIMITS)
    accepted = 0
    for out, ids in zip(outputs, ar_ids, strict=True):
        assert out.ids == ids
        accepted += sum(n - 1 for n in out.accept_lengths)
        assert out.draft_forwards > 0 or out.target_forwards == 0
    if policy != "chain":
        assert accepted > 0


@pytest.mark.parametrize("kind", KINDS)
def test_a_row_stopping_before_any_draft_leaves(kind, target4, tmp_path):
    """Row 0's first token is a stop token, row 1 goes on: row 0 leaves the batch before
    the head has drafted anything, and row 1 still decodes as it does alone."""
    prompts = [[5, 9, 14, 3, 22], [7, 8, 40, 41, 6, 12]]
    lm = TreeLM(target4)
    with torch.inference_mode():
        first = [int(TreeLM(target4).forward(contexts=[p])[0][-1].argmax()) for p in prompts]
    assert first[0] != first[1]
    limits = Limits(max_new_tokens=10, stop_token_ids=frozenset({first[0]}))
    method = Method(
        EagleDynamicTree(top_k=3, depth=2, total_tokens=8),
        StandardVerifier(),
        drafter_for(target4, tmp_path, kind=kind),
    )
    ar = Method(Autoregressive(), StandardVerifier())
    outputs = generate_batch(lm, method, prompts, Sampling(), limits)
    assert [o.ids for o in outputs] == [generate(lm, ar, p, Sampling(), limits).ids for p in prompts]
    assert outputs[0].ids == [first[0]] and outputs[0].target_forwards == 0


@pytest.mark.parametrize("kind", KINDS)
def test_training_rows_equal_inference_tree_nodes(kind, target4, tmp_path):
    """What the trainer unrolls at step j for anchor a is what the drafter computes for
    the depth-j node of a chain after committing tokens up to a+1."""
    from specbench.train.eagle3 import ttt_unroll

    drafter = drafter_for(target4, tmp_path, kind=kind)
    ids = [5, 9, 14, 3, 22, 40, 41, 7, 18, 30]
    with torch.inference_mode():
        out = target4(input_ids=torch.tensor([ids]), output_hidden_states=True)
        features = torch.cat([out.hidden_states[i] for i in drafter.feature_layers], dim=-1)
        embeds = target4.get_input_embeddings()(torch.tensor([ids]))
        n = len(ids) - 1
        unrolled = ttt_unroll(drafter.head, embeds[:, 1:], features[:, :n], steps=3)
        anchor = 4
        drafter.begin([ids[: anchor + 1]], [features[0, : anchor + 1]])
        tree = DraftTree.root(ids[anchor + 1])
        node = 0
        for depth in range(3):
            logits = drafter.logits([ids[: anchor + 1]], [tree], [[node]])[0][0]
            expected = unrolled[depth][0, anchor + depth]
            scored = logits if drafter.target_ids is None else logits[drafter.target_ids]
            torch.testing.assert_close(scored, expected, rtol=1e-4, atol=1e-4)
            node = tree.add(node, ids[anchor + depth + 2])


def test_a_bf16_head_keeps_fp32_rope_and_shares_the_targets_lm_head(tmp_path):
    """bf16 RoPE frequencies would shift every position's phase; the EAGLE-1 head scores
    with the target's own lm_head tensor, not a copy."""
    eagle1_checkpoint(tmp_path / "a")
    weight = torch.randn(VOCAB, 32, dtype=torch.bfloat16)
    head = eagle.load_head(str(tmp_path / "a"), weight, torch.bfloat16, "cpu", "k")
    assert head.fc.weight.dtype == torch.bfloat16 and head.rotary.inv_freq.dtype == torch.float32
    assert head.lm_head_weight.data_ptr() == weight.data_ptr()
    synthetic_checkpoint(tmp_path / "b")
    assert load_head(str(tmp_path / "b"), torch.bfloat16, "cpu", "k").rotary.inv_freq.dtype == torch.float32


def test_a_warm_start_takes_the_heads_weights_without_its_shipped_embedding(target4, tmp_path):
    """Published heads ship the target's embedding; a head trained from one reads the target's."""
    from specbench.models.eagle3 import trained_state

    eagle1_checkpoint(tmp_path, embedding=torch.randn(VOCAB, 32))
    weight = target4.get_output_embeddings().weight
    warm = eagle.load_head(str(tmp_path), weight, torch.float32, "cpu", "k")
    fresh = eagle.Eagle1Head(head_config({**EAGLE1_CONFIG, "bias": True}), weight)
    fresh.load_state_dict(trained_state(warm))  # strict: exactly the head's own keys
    assert torch.equal(fresh.fc.weight, warm.fc.weight) and fresh.embed_tokens is None
