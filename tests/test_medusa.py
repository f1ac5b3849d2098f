"""Medusa heads, static trees and typical acceptance (issue 15, part 1-2)."""

import json
import math

import pytest
import torch
from safetensors.torch import save_file

from specbench.drafters.medusa import MedusaDrafter
from specbench.engine.lm import TreeLM
from specbench.engine.loop import Limits, Method, generate, generate_batch
from specbench.engine.sampling import Sampling
from specbench.engine.tree import DraftTree
from specbench.errors import ConfigError
from specbench.models.medusa import load_heads
from specbench.trees.autoregressive import Autoregressive
from specbench.trees.static import StaticTree, Topology, read_choices
from specbench.verify.standard import StandardVerifier
from specbench.verify.typical import TypicalVerifier

from conftest import VOCAB

# wide at depth 1: the hand-made heads below rank the right token high, not first
WIDE = [[r] for r in range(10)] + [[0, r] for r in range(4)] + [[1, 0], [0, 0, 0]]


def test_topology_from_choices():
    topology = Topology.from_choices([[1, 0], [0], [1], [0, 0], [0, 0, 2], [0, 0, 0], [0, 0, 1]])
    assert topology.choices == ((0,), (1,), (0, 0), (1, 0), (0, 0, 0), (0, 0, 1), (0, 0, 2))
    assert topology.parents == (-1, 0, 0, 1, 2, 3, 3, 3)
    assert topology.depths == (0, 1, 1, 2, 2, 3, 3, 3)
    assert topology.ranks == (-1, 0, 1, 0, 0, 0, 1, 2)
    assert topology.top_k == (2, 1, 1, 3, 0, 0, 0, 0)
    assert topology.expanded == ((0,), (1, 2), (3,))
    tree = DraftTree(tokens=[0] * 8, parents=list(topology.parents), depths=list(topology.depths), logps=[0.0] * 8)
    assert torch.equal(topology.ancestors, tree.ancestor_mask())


@pytest.mark.parametrize("choices,message", [
    ([[0], [0, 1, 0]], "has no parent (0, 1)"),
    ([[0], [0]], "duplicate"),
    ([[0], [-1]], "ranks >= 0"),
    ([], "non-empty"),
])
def test_bad_choice_lists_are_one_clear_error(choices, message):
    with pytest.raises(ConfigError, match=r"method\.tree\.choices: .*" + message.replace("(", r"\(").replace(")", r"\)")):
        Topology.from_choices(choices)


def test_choices_are_read_from_a_release_file_without_running_it(tmp_path):
    source = tmp_path / "choices.py"
    source.write_text("import os\nos.remove('nothing')\nsmall_tree = [[0], [1], [0, 0]]\nother = [[0]]\n")
    assert read_choices(str(source), "small_tree") == [[0], [1], [0, 0]]
    assert StaticTree(choices_file=str(source), choices_name="other").topology.choices == ((0,),)
    with pytest.raises(ConfigError, match="assigns no missing"):
        read_choices(str(source), "missing")


def medusa_state(heads: int, blocks: int, hidden: int = 32, vocab: int = VOCAB, shared: bool = False, seed: int = 0):
    """A checkpoint with the released key names: {i}.{l}.linear.weight/bias, {i}.{blocks}.weight."""
    torch.manual_seed(seed)
    state = {}
    for i in range(heads):
        for block in range(blocks):
            state[f"{i}.{block}.linear.weight"] = 0.1 * torch.randn(hidden, hidden)
            state[f"{i}.{block}.linear.bias"] = torch.zeros(hidden)
        if not shared:
            state[f"{i}.{blocks}.weight"] = torch.randn(vocab, hidden)
    return state


def write_heads(directory, state, config, as_pt=True):
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "config.json").write_text(json.dumps(config))
    if as_pt:
        torch.save(state, directory / "medusa_lm_head.pt")
    else:
        save_file(state, str(directory / "medusa_lm_head.safetensors"))
    return str(directory)


def test_released_checkpoint_layout_loads_strictly(target, tmp_path):
    # like the 7B release: the file holds 5 heads while config.json says 2
    path = write_heads(tmp_path / "a", medusa_state(5, 1), {"medusa_num_heads": 2, "medusa_num_layers": 1})
    heads, facts = load_heads(path, target, torch.float32, "method.drafter.heads")
    assert len(heads) == 5 and facts == {"heads_in_file": 5, "heads_in_config": 2, "blocks": 1, "shared_lm_head": False, "draft_vocab": None}
    hidden = torch.randn(3, 32)
    state = medusa_state(5, 1)
    block = state["4.0.linear.weight"], state["4.0.linear.bias"]
    x = hidden + torch.nn.functional.silu(hidden @ block[0].T + block[1])
    assert torch.allclose(heads(hidden)[:, 4], x @ state["4.1.weight"].T, atol=1e-5)


def test_shared_lm_head_heads_use_the_targets_projection(target, tmp_path):
    path = write_heads(tmp_path / "s", medusa_state(3, 2, shared=True), {"medusa_num_heads": 3, "shared_lm_head": True}, as_pt=False)
    heads, facts = load_heads(path, target, torch.float32, "k")
    assert facts["blocks"] == 2 and facts["shared_lm_head"]
    assert heads(torch.zeros(1, 32)).shape == (1, 3, VOCAB)
    assert torch.allclose(heads(torch.zeros(32))[0], torch.zeros(VOCAB))  # zero blocks + zero input: the projection of 0


def test_a_draft_vocabulary_scores_only_its_rows_of_the_shared_projection(target, tmp_path):
    state = medusa_state(2, 1, shared=True)
    rows = torch.tensor([3, 10, 50, 95])
    path = write_heads(tmp_path / "v", {**state, "draft_vocab": rows}, {"shared_lm_head": True}, as_pt=False)
    heads, facts = load_heads(path, target, torch.float32, "k")
    assert facts["draft_vocab"] == 4
    hidden = torch.randn(2, 32)
    full = load_heads(write_heads(tmp_path / "f", state, {"shared_lm_head": True}, as_pt=False), target, torch.float32, "k")[0](hidden)
    reduced = heads(hidden)
    assert torch.allclose(reduced[..., rows], full[..., rows], atol=1e-5)
    assert torch.isinf(reduced[..., [0, 1, 2, 4]]).all()
    with pytest.raises(ConfigError, match="draft_vocab must hold int64 target ids below 96"):
        load_heads(write_heads(tmp_path / "bad", {**state, "draft_vocab": torch.tensor([3, 96])}, {"shared_lm_head": True}, as_pt=False), target, torch.float32, "k")


@pytest.mark.parametrize("edit,message", [
    (lambda s: s.update({"medusa_head.0.weight": torch.zeros(1)}), "unexpected keys"),
    (lambda s: s.pop("1.0.linear.bias"), "missing keys"),
    (lambda s: s.update({"1.1.weight": torch.zeros(VOCAB + 1, 32)}), r"medusa_lm_head.pt: 1\.1\.weight is \[97, 32\], expected \[96, 32\]"),
])
def test_a_wrong_checkpoint_is_one_clear_error(edit, message, target, tmp_path):
    state = medusa_state(2, 1)
    edit(state)
    path = write_heads(tmp_path / "w", state, {"medusa_num_heads": 2})
    with pytest.raises(ConfigError, match=f"^key: .*{message}"):
        load_heads(path, target, torch.float32, "key")


class FixedDrafter(MedusaDrafter):
    """Heads whose outputs are given per step (to build trees by hand)."""

    def __init__(self, logits, on_device=True):
        self.feature_layers, self.forwards, self.grows_on_device = (), 0, on_device
        self.heads = [None] * logits.shape[1]
        self._logits = dict(enumerate(logits.unbind(1)))


def test_a_static_tree_can_keep_the_first_nodes_of_its_list():
    full = [[0], [1], [2], [0, 0], [0, 1], [1, 0], [0, 0, 0]]
    assert StaticTree(full, size=4).topology.choices == ((0,), (1,), (2,), (0, 0))
    assert StaticTree(list(reversed(full)), size=2).topology.choices == ((0,), (1,))  # list order does not matter
    assert StaticTree(full, size=99).topology.choices == StaticTree(full).topology.choices
    with pytest.raises(ConfigError, match=r"^method\.tree\.size: must be an integer >= 1"):
        StaticTree(full, size=0)
    from specbench.auto import candidates

    options = candidates({"_target_": "specbench.trees.static.StaticTree", "choices": full, "size": "auto"})
    assert [o["size"] for o in options][:4] == [1, 2, 3, 4] and all(o["choices"] == full for o in options)


@pytest.mark.parametrize("on_device", [True, False])
def test_static_tree_takes_each_depths_ranked_candidates(on_device):
    """The same tree whether it is filled on the device (one read) or depth by depth on the host."""
    # head 0 ranks tokens 5 > 7 > 9, head 1 ranks 11 > 3, head 2 ranks 4
    logits = torch.full((1, 3, 16), -10.0)
    logits[0, 0, [5, 7, 9]] = torch.tensor([3.0, 2.0, 1.0])
    logits[0, 1, [11, 3]] = torch.tensor([2.0, 1.0])
    logits[0, 2, 4] = 5.0
    tree = StaticTree([[0], [1], [2], [0, 0], [0, 1], [1, 0], [0, 0, 0]]).grow(FixedDrafter(logits, on_device), [[1]], [8], Sampling(), [None])[0]
    assert tree.tokens == [8, 5, 7, 9, 11, 3, 11, 4]
    assert tree.parents == [-1, 0, 0, 0, 1, 1, 2, 4]
    logp = torch.log_softmax(logits[0], -1)
    assert tree.logps[7] == pytest.approx(float(logp[0, 5] + logp[1, 11] + logp[2, 4]))
    with pytest.raises(ConfigError, match="deeper than the 3 Medusa heads" if on_device else "nothing at depth 4"):
        StaticTree([[0], [0, 0], [0, 0, 0], [0, 0, 0, 0]]).grow(FixedDrafter(logits, on_device), [[1]], [8], Sampling(), [None])


def test_typical_acceptance_rule_on_hand_made_distributions():
    verifier = TypicalVerifier(posterior_threshold=0.09, posterior_alpha=0.3)
    # root: a confident target (H small, threshold = min(0.09, 0.3 e^-H) = 0.09); node 1 under it
    confident = torch.tensor([0.91, 0.05, 0.04, 0.0])
    # node 1: a flat target over 4 tokens (H = ln 4, 0.3/4 = 0.075 < 0.09 sets the threshold)
    flat = torch.full((4,), 0.25)
    tree = DraftTree.root(3)
    tree.add(0, 0)  # p = 0.91 > 0.09: passes
    tree.add(0, 1)  # p = 0.05: fails
    tree.add(1, 2)  # p = 0.25 > 0.075: passes
    p = torch.stack([confident, flat, flat, flat])
    thresholds = verifier.thresholds(p)
    flat_entropy = -(flat * (flat + 1e-5).log()).sum()
    assert thresholds[0] == pytest.approx(0.09) and thresholds[1] == pytest.approx(0.3 * math.exp(-float(flat_entropy)))
    passes, logp = verifier.passes(tree, p, thresholds)
    assert passes == [False, True, False, True] and logp[1] == pytest.approx(math.log(0.91))
    # the test is strict: a token exactly at the threshold fails
    at = DraftTree.root(0)
    at.add(0, 1)
    exact = torch.tensor([0.91, 0.09, 0.0, 0.0])
    assert verifier.passes(at, torch.stack([exact, flat]), torch.tensor([0.09, 0.09]))[0] == [False, False]


def test_typical_acceptance_takes_the_longest_path_then_the_likeliest():
    verifier = TypicalVerifier()
    tree = DraftTree.root(0)
    a = tree.add(0, 1)
    b = tree.add(0, 2)
    tree.add(a, 3)  # fails under a
    b2 = tree.add(b, 3)
    p = torch.tensor([[0.0, 0.6, 0.4, 0.0], [0.0, 0.0, 0.99, 0.01], [0.0, 0.0, 0.0, 1.0], [1.0, 0, 0, 0], [1.0, 0, 0, 0]])
    sampling = Sampling(temperature=1.0)
    out = verifier.accept(tree, p.log(), sampling, torch.Generator().manual_seed(0))
    assert out.path == [0, b, b2] and out.next_token == 0 and out.notes == {"typical_accepted": 2}
    # the next token: the target's argmax (the releases' default), or a sample of the typical set
    spread = p.clone()
    spread[b2] = torch.tensor([0.5, 0.45, 0.05, 0.0])  # threshold 0.09: token 2 is not typical
    assert verifier.accept(tree, spread.log(), sampling, None).next_token == 0
    typical = TypicalVerifier(next_token="typical")
    drawn = {typical.accept(tree, spread.log(), sampling, torch.Generator().manual_seed(s)).next_token for s in range(40)}
    assert drawn == {0, 1}
    # equal lengths: the likelier token wins
    tie = DraftTree.root(0)
    tie.add(0, 2)
    likelier = tie.add(0, 1)
    out = verifier.accept(tie, torch.tensor([[0.0, 0.6, 0.4, 0.0], [1, 0, 0, 0], [1, 0, 0, 0]]).log(), sampling, None)
    assert out.path == [0, likelier]


@pytest.mark.parametrize("bad", [{"posterior_threshold": 0}, {"posterior_alpha": 1.5}, {"next_token": "nucleus"}])
def test_typical_parameters_are_checked(bad):
    with pytest.raises(ConfigError, match=f"method.verifier.{next(iter(bad))}: "):
        TypicalVerifier(**bad)


@pytest.mark.parametrize("batch", [1, 3])
def test_medusa_is_lossless_at_t0(batch, target, prompts, tmp_path):
    """Heads that copy the target's own next-token guess (zero blocks, shared projection)
    accept often on these repetitive prompts; greedy verification keeps AR's ids."""
    path = write_heads(tmp_path / "h", {k: v * 0 for k, v in medusa_state(3, 1, shared=True).items()}, {"shared_lm_head": True}, as_pt=False)
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
    path = write_heads(tmp_path / "h", {k: v * 0 for k, v in medusa_state(3, 1, shared=True).items()}, {"shared_lm_head": True}, as_pt=False)
    heads, _ = load_heads(path, target, torch.float32, "k")
    method = Method(StaticTree(WIDE), TypicalVerifier(), MedusaDrafter(heads, target))
    out = generate(TreeLM(target), method, prompts[0], Sampling(temperature=1.0), Limits(max_new_tokens=30), torch.Generator().manual_seed(0))
    assert len(out.ids) == 30 and out.verifier_notes["typical_accepted"] == sum(out.accept_lengths) - len(out.accept_lengths)


def test_the_cost_profile_times_a_head_forward(target, tmp_path):
    """The profiler reads the root untimed, then times the depth-1 nodes: one head run."""
    from specbench.costs.profile import measure_drafter

    path = write_heads(tmp_path / "p", medusa_state(3, 1), {"medusa_num_heads": 3})
    drafter = MedusaDrafter(load_heads(path, target, torch.float32, "k")[0], target)
    curve = measure_drafter(drafter, TreeLM(target), [16], max_n=3, repeats=2)
    assert len(curve.ms[0]) == 3 and all(ms > 0 for ms in curve.ms[0])
    assert drafter.forwards >= 2 * 3 * 2  # root head and depth-1 head, every repeat of every n
