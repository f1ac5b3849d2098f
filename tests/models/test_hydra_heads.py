"""Hydra heads (issue 15, part 1): the released prefix-MLP layout, strict loading, the
grounded head rule, the prefix cache, and losslessness through the engine."""

import pytest
import torch
from conftest import VOCAB
from hydra_fixtures import CONFIG, HIDDEN, hydra_state, write_heads

from specbench.drafters.hydra import HydraDrafter
from specbench.engine.lm import TreeLM
from specbench.engine.loop import Limits, Method, generate, generate_batch
from specbench.engine.sampling import Sampling
from specbench.engine.tree import DraftTree
from specbench.errors import ConfigError
from specbench.models.hydra import load_heads
from specbench.trees.autoregressive import Autoregressive
from specbench.trees.static import StaticTree
from specbench.verify.standard import StandardVerifier
from specbench.verify.typical import TypicalVerifier

WIDE = [[r] for r in range(8)] + [[0, r] for r in range(4)] + [[1, 0], [0, 0, 0]]


def copying_state(target, heads: int) -> dict:
    """Heads that guess the target's own next token again at every depth: the prefix layer
    adds nothing (zero output projections) and re-norms the target's already normed
    hidden state, each head's residual passes the prefix part through, and its projection
    is the target's lm_head."""
    state = {
        k: torch.zeros_like(v) if k.endswith(("o_proj.weight", "down_proj.weight")) else v
        for k, v in hydra_state(target, heads, 1).items()
    }
    for h in range(heads):
        state[f"hydra_mlp.{h}.1.linear.weight"].zero_()
        state[f"hydra_mlp.{h}.1.linear.bias"].zero_()
        state[f"hydra_mlp.{h}.1.res_connection.weight"] = torch.cat(
            [torch.eye(HIDDEN), torch.zeros(HIDDEN, HIDDEN * (h + 1))], dim=1
        )
        state[f"hydra_mlp.{h}.1.res_connection.bias"].zero_()
        state[f"hydra_lm_head.{h}.1.weight"] = target.lm_head.weight.detach().clone()
        state[f"hydra_lm_head.{h}.1.bias"].zero_()
    return state


def test_released_layout_loads_strictly_and_computes_the_grounded_heads(target, tmp_path):
    state = hydra_state(target, heads=3, layers=2)
    heads, facts = load_heads(write_heads(tmp_path / "h", state), target, torch.float32, "method.drafter.heads")
    assert facts == {
        "heads_in_file": 3,
        "heads_in_config": 4,
        "blocks": 2,
        "hidden_state_offset": 0,
        "shared_lm_head": False,
        "draft_vocab": None,
    }
    # head 2 on a prefix and the path root, d1, d2: by hand from the file's tensors
    prefix, path = torch.randn(1, HIDDEN), torch.tensor([[5, 17, 40]])
    x = torch.cat([prefix, state["input_embed_fn.weight"][path[0]].reshape(1, -1)], dim=-1)
    silu = torch.nn.functional.silu
    y = x @ state["hydra_mlp.2.1.res_connection.weight"].T + state["hydra_mlp.2.1.res_connection.bias"]
    y = y + silu(x @ state["hydra_mlp.2.1.linear.weight"].T + state["hydra_mlp.2.1.linear.bias"])
    y = y + silu(y @ state["hydra_mlp.2.3.linear.weight"].T + state["hydra_mlp.2.3.linear.bias"])
    expected = y @ state["hydra_lm_head.2.1.weight"].T + state["hydra_lm_head.2.1.bias"]
    assert torch.allclose(heads.head(2, prefix, path), expected, atol=1e-5)


@pytest.mark.parametrize(
    "edit,message",
    [
        (lambda s, c: s.update({"medusa_head.0.weight": torch.zeros(1)}), "unexpected keys"),
        (lambda s, c: s.pop("hydra_mlp.1.1.res_connection.bias"), "missing keys"),
        (lambda s, c: s.pop("input_embed_fn.weight"), "missing keys"),
        (
            lambda s, c: s.update({"hydra_lm_head.0.1.weight": torch.zeros(VOCAB + 1, HIDDEN)}),
            r"hydra_lm_head.pt: hydra_lm_head\.0\.1\.weight is \[97, 32\], expected \[96, 32\]",
        ),
        (
            lambda s, c: s.update({"prefix_embeding_layer.embed_tokens.weight": torch.zeros(VOCAB, HIDDEN + 1)}),
            r"embed_tokens\.weight is \[96, 33\], expected \[vocab, 32\]",
        ),
        (lambda s, c: c.update({"hydra_head_arch": "cross-attn"}), "specbench runs the released prefix-mlp"),
        (lambda s, c: c.update({"grounded_heads": False}), "grounded_heads=False"),
    ],
)
def test_a_wrong_checkpoint_is_one_clear_error(edit, message, target, tmp_path):
    state, config = hydra_state(target, 2, 1), dict(CONFIG)
    edit(state, config)
    with pytest.raises(ConfigError, match=f"^key: .*{message}"):
        load_heads(write_heads(tmp_path / "w", state, config), target, torch.float32, "key")


def test_the_prefix_cache_follows_the_committed_tokens(target, tmp_path):
    heads, _ = load_heads(write_heads(tmp_path / "h", hydra_state(target, 2, 1)), target, torch.float32, "k")
    drafter = HydraDrafter(heads, target)
    features = torch.randn(10, HIDDEN)
    drafter.begin([[1] * 6], [features[:6]])
    drafter.commit([DraftTree.root(3)], [[0]], [features[6:7]])
    drafter.commit([DraftTree.root(3)], [[0, 1, 2]], [features[7:]])
    from transformers import DynamicCache

    whole = heads.prefix(features, DynamicCache())
    assert torch.allclose(drafter._prefix[0], whole[-1], atol=1e-5)


def test_each_node_is_drafted_from_its_own_path(target, tmp_path):
    heads, _ = load_heads(write_heads(tmp_path / "h", hydra_state(target, 3, 1)), target, torch.float32, "k")
    drafter = HydraDrafter(heads, target)
    drafter.begin([[1, 2, 3], [4, 5]], [torch.randn(3, HIDDEN), torch.randn(2, HIDDEN)])
    trees = [DraftTree.root(7), DraftTree.root(8)]
    a, b = trees[0].add(0, 11), trees[0].add(0, 12)
    c = trees[1].add(0, 13)
    rows = drafter.logits([[1, 2, 3], [4, 5]], trees, [[a, b], [c]])
    assert drafter.forwards == 1 and rows[0].shape == (2, VOCAB) and rows[1].shape == (1, VOCAB)
    assert torch.allclose(rows[0][1], heads.head(1, drafter._prefix[0][None], torch.tensor([[7, 12]]))[0], atol=1e-5)
    assert torch.allclose(rows[1][0], heads.head(1, drafter._prefix[1][None], torch.tensor([[8, 13]]))[0], atol=1e-5)
    assert not torch.allclose(rows[0][0], rows[0][1])  # siblings differ: the path is an input
    deep = trees[0].add(trees[0].add(a, 20), 21)  # depth 3: beyond 3 heads (depths 0-2)
    assert drafter.logits([[1, 2, 3], [4, 5]], trees, [[deep], [0]])[0] is None


@pytest.mark.parametrize("batch", [1, 3])
def test_hydra_is_lossless_at_t0(batch, target, prompts, tmp_path):
    heads, _ = load_heads(write_heads(tmp_path / "h", copying_state(target, 3)), target, torch.float32, "k")
    method = Method(StaticTree(WIDE), TypicalVerifier(), HydraDrafter(heads, target))
    ar_method = Method(Autoregressive(), StandardVerifier())
    limits = Limits(max_new_tokens=30, stop_token_ids=frozenset({2}))
    lm = TreeLM(target)
    outputs = []
    for start in range(0, 12, batch):
        outputs += generate_batch(lm, method, prompts[start : start + batch], Sampling(), limits)
    for prompt, out in zip(prompts[:12], outputs):
        assert out.ids == generate(lm, ar_method, prompt, Sampling(), limits).ids
        assert out.draft_forwards == 3 * out.target_forwards  # one draft forward per depth of the 3-deep tree
    assert sum(n - 1 for out in outputs for n in out.accept_lengths) > 12


def test_hydra_samples_at_t1_with_typical_acceptance(target, prompts, tmp_path):
    heads, _ = load_heads(write_heads(tmp_path / "h", copying_state(target, 3)), target, torch.float32, "k")
    method = Method(StaticTree(WIDE), TypicalVerifier(), HydraDrafter(heads, target))
    out = generate(
        TreeLM(target),
        method,
        prompts[0],
        Sampling(temperature=1.0),
        Limits(max_new_tokens=30),
        torch.Generator().manual_seed(0),
    )
    assert len(out.ids) == 30 and out.verifier_notes["typical_accepted"] == sum(out.accept_lengths) - len(
        out.accept_lengths
    )


def test_trained_heads_share_the_targets_projection_and_embedding(target, tmp_path):
    """specbench's own heads (shared_lm_head) project with the target's lm_head rows of
    their draft vocabulary and embed with the target's embedding: the same numbers as a
    release-layout file holding those tensors."""
    state = hydra_state(target, 2, 1)
    released = {**state, "input_embed_fn.weight": target.get_input_embeddings().weight.detach().clone()}
    for h in range(2):
        released[f"hydra_lm_head.{h}.1.weight"] = target.lm_head.weight.detach().clone()
        released[f"hydra_lm_head.{h}.1.bias"] = torch.zeros(VOCAB)
    rows = torch.tensor([3, 10, 50, 95])
    small = {k: v for k, v in state.items() if not k.startswith(("hydra_lm_head.", "input_embed_fn."))} | {
        "draft_vocab": rows
    }
    shared, facts = load_heads(
        write_heads(tmp_path / "s", small, {**CONFIG, "shared_lm_head": True}), target, torch.float32, "k"
    )
    full, _ = load_heads(write_heads(tmp_path / "f", released), target, torch.float32, "k")
    assert facts["shared_lm_head"] and facts["draft_vocab"] == 4
    prefix, path = torch.randn(2, HIDDEN), torch.tensor([[5, 17], [6, 1]])
    got, want = shared.head(1, prefix, path), full.head(1, prefix, path)
    assert torch.allclose(got[:, rows], want[:, rows], atol=1e-5) and torch.isinf(got[:, [0, 1, 2, 4]]).all()
