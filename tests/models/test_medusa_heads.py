"""Medusa heads: the released checkpoint layout loads strictly, shared projections, lossless at T=0, sampling at T=1,
and their cost profile."""

import pytest
import torch
from conftest import VOCAB
from medusa_fixtures import medusa_state, write_heads

from specbench.drafters.medusa import MedusaDrafter
from specbench.engine.lm import TreeLM
from specbench.engine.loop import Limits, Method, generate, generate_batch
from specbench.engine.sampling import Sampling
from specbench.errors import ConfigError
from specbench.models.medusa import load_heads
from specbench.trees.autoregressive import Autoregressive
from specbench.trees.static import StaticTree
from specbench.verify.standard import StandardVerifier
from specbench.verify.typical import TypicalVerifier

# wide at depth 1: the hand-made heads below rank the right token high, not first
WIDE = [[r] for r in range(10)] + [[0, r] for r in range(4)] + [[1, 0], [0, 0, 0]]


def test_released_checkpoint_layout_loads_strictly(target, tmp_path):
    # like the 7B release: the file holds 5 heads while config.json says 2
    path = write_heads(tmp_path / "a", medusa_state(5, 1), {"medusa_num_heads": 2, "medusa_num_layers": 1})
    heads, facts = load_heads(path, target, torch.float32, "method.drafter.heads")
    assert len(heads) == 5 and facts == {
        "heads_in_file": 5,
        "heads_in_config": 2,
        "blocks": 1,
        "shared_lm_head": False,
        "draft_vocab": None,
    }
    hidden = torch.randn(3, 32)
    state = medusa_state(5, 1)
    block = state["4.0.linear.weight"], state["4.0.linear.bias"]
    x = hidden + torch.nn.functional.silu(hidden @ block[0].T + block[1])
    assert torch.allclose(heads(hidden)[:, 4], x @ state["4.1.weight"].T, atol=1e-5)


def test_shared_lm_head_heads_use_the_targets_projection(target, tmp_path):
    path = write_heads(
        tmp_path / "s", medusa_state(3, 2, shared=True), {"medusa_num_heads": 3, "shared_lm_head": True}, as_pt=False
    )
    heads, facts = load_heads(path, target, torch.float32, "k")
    assert facts["blocks"] == 2 and facts["shared_lm_head"]
    assert heads(torch.zeros(1, 32)).shape == (1, 3, VOCAB)
    # zero blocks + zero input: the projection of 0
    assert torch.allclose(heads(torch.zeros(32))[0], torch.zeros(VOCAB))


def test_a_draft_vocabulary_scores_only_its_rows_of_the_shared_projection(target, tmp_path):
    state = medusa_state(2, 1, shared=True)
    rows = torch.tensor([3, 10, 50, 95])
    path = write_heads(tmp_path / "v", {**state, "draft_vocab": rows}, {"shared_lm_head": True}, as_pt=False)
    heads, facts = load_heads(path, target, torch.float32, "k")
    assert facts["draft_vocab"] == 4
    hidden = torch.randn(2, 32)
    full = load_heads(
        write_heads(tmp_path / "f", state, {"shared_lm_head": True}, as_pt=False), target, torch.float32, "k"
    )[0](hidden)
    reduced = heads(hidden)
    assert torch.allclose(reduced[..., rows], full[..., rows], atol=1e-5)
    assert torch.isinf(reduced[..., [0, 1, 2, 4]]).all()
    with pytest.raises(ConfigError, match="draft_vocab must hold int64 target ids below 96"):
        load_heads(
            write_heads(
                tmp_path / "bad", {**state, "draft_vocab": torch.tensor([3, 96])}, {"shared_lm_head": True}, as_pt=False
            ),
            target,
            torch.float32,
            "k",
        )


@pytest.mark.parametrize(
    "edit,message",
    [
        (lambda s: s.update({"medusa_head.0.weight": torch.zeros(1)}), "unexpected keys"),
        (lambda s: s.pop("1.0.linear.bias"), "missing keys"),
        (
            lambda s: s.update({"1.1.weight": torch.zeros(VOCAB + 1, 32)}),
            r"medusa_lm_head.pt: 1\.1\.weight is \[97, 32\], expected \[96, 32\]",
        ),
    ],
)
def test_a_wrong_checkpoint_is_one_clear_error(edit, message, target, tmp_path):
    state = medusa_state(2, 1)
    edit(state)
    path = write_heads(tmp_path / "w", state, {"medusa_num_heads": 2})
    with pytest.raises(ConfigError, match=f"^key: .*{message}"):
        load_heads(path, target, torch.float32, "key")


@pytest.mark.parametrize("batch", [1, 3])
def test_medusa_is_lossless_at_t0(batch, target, prompts, tmp_path):
    """Heads that copy the target's own next-token guess (zero blocks, shared projection)
    accept often on these repetitive prompts; greedy verification keeps AR's ids."""
    path = write_heads(
        tmp_path / "h",
        {k: v * 0 for k, v in medusa_state(3, 1, shared=True).items()},
        {"shared_lm_head": True},
        as_pt=False,
    )
    heads, _ = load_heads(path, target, torch.float32, "k")
    method = Method(StaticTree(WIDE), TypicalVerifier(), MedusaDrafter(heads, target))
    ar_method = Method(Autoregressive(), StandardVerifier())
    limits = Limits(max_new_tokens=30, stop_token_ids=frozenset({2}))
    lm = TreeLM(target)
    outputs = []
    for start in range(0, 12, batch):
        outputs += generate_batch(lm, method, prompts[start : start + batch], Sampling(), limits)
    for prompt, out in zip(prompts[:12], outputs):
        assert out.ids == generate(lm, ar_method, prompt, Sampling(), limits).ids
        assert out.draft_forwards == 3 * out.target_forwards  # each head once per step (the tree is 3 deep)
    assert sum(n - 1 for out in outputs for n in out.accept_lengths) > 12


def test_medusa_samples_at_t1_and_reports_typical_acceptances(target, prompts, tmp_path):
    path = write_heads(
        tmp_path / "h",
        {k: v * 0 for k, v in medusa_state(3, 1, shared=True).items()},
        {"shared_lm_head": True},
        as_pt=False,
    )
    heads, _ = load_heads(path, target, torch.float32, "k")
    method = Method(StaticTree(WIDE), TypicalVerifier(), MedusaDrafter(heads, target))
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


def test_the_cost_profile_times_a_head_forward(target, tmp_path):
    """The profiler reads the root untimed, then times the depth-1 nodes: one head run."""
    from specbench.costs.profile import measure_drafter

    path = write_heads(tmp_path / "p", medusa_state(3, 1), {"medusa_num_heads": 3})
    drafter = MedusaDrafter(load_heads(path, target, torch.float32, "k")[0], target)
    curve = measure_drafter(drafter, TreeLM(target), [16], max_n=3, repeats=2)
    assert len(curve.ms[0]) == 3 and all(ms > 0 for ms in curve.ms[0])
    assert drafter.forwards >= 2 * 3 * 2  # root head and depth-1 head, every repeat of every n
