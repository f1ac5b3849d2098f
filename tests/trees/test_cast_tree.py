"""CAST tree policy on hand-made draft distributions and cost curves (CAST paper, section 4)."""

import math
from pathlib import Path

import pytest
import torch
from cast_fixtures import TABLE, FakeCosts, FakeDrafter, table_logits
from hydra.utils import instantiate
from omegaconf import OmegaConf

from specbench.engine.candidates import candidates
from specbench.engine.sampling import Sampling
from specbench.errors import ConfigError
from specbench.trees.cast import CastTree, batch_utility, select_count

CONF = Path(__file__).resolve().parents[2] / "conf"


EAGLE_ONLY = {"breadth_pruning": False, "depth_pruning": False, "dynamic_rerank": False}


def peaked(p: float, token: int, vocab: int) -> torch.Tensor:
    out = torch.full((vocab,), (1 - p) / (vocab - 1))
    out[token] = p
    return out.log()


def build(policy, drafter, roots, contexts=None):
    contexts = contexts or [[1, 2, 3]] * len(roots)
    return policy.grow(drafter, contexts, roots, Sampling(), None)


def started(costs=None, **kwargs):
    policy = CastTree(**kwargs)
    policy.begin(1, costs)
    return policy


# four rows of sorted confidences (dyadic, so every sum below is exact); batch sums per
# rank 1.875, .875, .5, .28125, .15625, .0625 fall strictly
CONFIDENCES = [
    [0.5, 0.25, 0.125, 0.0625, 0.03125, 0.015625],
    [0.375, 0.25, 0.1875, 0.0625, 0.046875, 0.0078125],
    [0.75, 0.125, 0.0625, 0.03125, 0.015625, 0.0078125],
    [0.25, 0.25, 0.125, 0.125, 0.0625, 0.03125],
]


V = 64


def chain_drafter(p_first: float, p_deeper: float) -> FakeDrafter:
    """Top-1 token 1 with probability p_first after the root, token 2 with p_deeper after that."""
    return FakeDrafter(lambda row, tree, node: peaked(p_first, 1, V) if node == 0 else peaked(p_deeper, 2, V))


def depth_policy(buffer):
    # c = draft / target = 0.1 per layer, C2 * c = 0.1: go on while alpha_i * u_i >= 0.1
    return started(FakeCosts(draft=lambda n: 1.0), top_k=1, depth=3, c2=1.0, buffer=buffer, dynamic_rerank=False)


@pytest.mark.parametrize("lam, delta", [(0.5, 0.0), (0.5, 0.25), (2.0, 1.0)])
@pytest.mark.parametrize("k", [1, 2, 3, 4, 5, 6])
def test_theorem_4_1_linear_costs_select_eagles_top_k(lam, delta, k):
    u = batch_utility(CONFIDENCES, 6)
    assert u[0] == 1.875 / 4 and u[-1] == 3.75 / 4
    c = [lam * j + delta for j in range(1, 7)]
    c1 = sum(row[k - 1] for row in CONFIDENCES) / (len(CONFIDENCES) * lam)  # the theorem's C1
    assert select_count(u, c, c1) == k


def test_a_cost_step_cuts_before_it_unless_the_utility_pays_for_it():
    u = batch_utility([[0.3, 0.2, 0.15, 0.1, 0.08, 0.06]], 6)
    smooth = [0.1 + 0.001 * k for k in range(1, 7)]
    step = [c + (0.5 if k >= 5 else 0.0) for k, c in zip(range(1, 7), smooth)]  # a kernel change at k = 5
    assert select_count(u, smooth, 3.0) == 6
    assert select_count(u, step, 3.0) == 4  # 0.08 more confidence for 0.501 more cost: < 3
    assert select_count(u, step, 0.1) == 6  # a cheap enough threshold pays for the step


def test_breadth_pruning_expands_fewer_nodes_before_a_draft_cost_step():
    probs = torch.tensor([0.3, 0.2, 0.15, 0.1, 0.08, 0.06] + [0.11 / 10] * 10)

    def expanded(draft):
        drafter = FakeDrafter(lambda row, tree, node: probs.log())
        policy = started(FakeCosts(draft=draft), top_k=6, depth=1, depth_pruning=False, dynamic_rerank=False)
        build(policy, drafter, [0])
        return [len(call[0]) for call in drafter.calls]

    assert expanded(lambda n: 1 + 0.01 * n) == [1, 6]  # c_k = 0.1 + 0.001 k: all top-6 pay
    assert expanded(lambda n: 1 + 0.01 * n + (5 if n >= 5 else 0)) == [1, 4]


def test_depth_pruning_follows_the_confidence_gain_buffer():
    policy = depth_policy(buffer=2)
    assert list(policy.ratios(1)) == [1.0] and policy.ratios(1).maxlen == 2
    drafter = chain_drafter(0.9, 0.05)  # u_1 = 0.9, u_2 = 0.045: phi_1 = 0.05
    depths = []
    for _ in range(3):
        before = drafter.forwards
        tree = build(policy, drafter, [0])[0]
        depths.append(drafter.forwards - before)
        assert max(tree.depths) == depths[-1]
    # 1: alpha_1 = 1 -> layer 2; alpha_2 = 1 but u_2 = 0.045 < 0.1: stop.   A_1 = {1, .05}
    # 2: alpha_1 = 0.525 -> layer 2 again, phi_1 pushed, 1 evicted.        A_1 = {.05, .05}
    # 3: alpha_1 = 0.05, 0.05 * 0.9 < 0.1: layer 1 only, nothing pushed.
    assert depths == [2, 2, 1]
    assert list(policy.ratios(1)) == pytest.approx([0.05, 0.05], rel=1e-5)
    assert list(policy.ratios(2)) == [1.0]  # layer 3 never drafted


def test_depth_pruning_goes_on_while_the_gain_stays_high():
    policy = depth_policy(buffer=3)
    drafter = chain_drafter(0.9, 0.9)
    for step in range(1, 4):
        tree = build(policy, drafter, [0])[0]
        assert drafter.forwards == 4 * step and max(tree.depths) == 4  # all four layers, every time
    assert list(policy.ratios(1)) == pytest.approx([0.9] * 3, rel=1e-5)  # FIFO of 3: the initial 1 is gone
    assert list(policy.ratios(3)) == pytest.approx([0.9] * 3, rel=1e-5)


def test_begin_resets_the_buffers():
    policy = depth_policy(buffer=2)
    build(policy, chain_drafter(0.9, 0.05), [0])
    policy.begin(1, FakeCosts())
    assert list(policy.ratios(1)) == [1.0]


def test_dynamic_rerank_verifies_fewer_tokens_as_target_cost_rises():
    g = torch.Generator().manual_seed(0)
    table = torch.randn(200, 20, generator=g) * 2

    def grown(slope):
        drafter = FakeDrafter(lambda row, tree, node: table[node])
        policy = started(
            FakeCosts(target=lambda n: 10 + slope * n),
            top_k=4,
            depth=2,
            total_tokens=40,
            c3=3.0,
            breadth_pruning=False,
            depth_pruning=False,
        )
        return build(policy, drafter, [0])[0]

    candidates = grown(0.0)  # a flat cost: every candidate is free, so all N = 1 + 3 layers x 4 are verified
    assert len(candidates) == 13
    kept = []
    for slope in (0.0, 0.01, 0.1, 1.0, 100.0):
        tree = grown(slope)
        # linear target cost: c_k = (10 + s k) / (10 + s), so Algorithm 1 keeps every candidate
        # with confidence >= C3 * s / (10 + s) (the root always)
        floor = 3.0 * slope / (10 + slope)
        assert len(tree) == 1 + sum(math.exp(v) >= floor for v in candidates.logps[1:])
        assert set(tree.origin or [0]) <= set(candidates.origin)  # a root-only tree was never drafted
        kept.append(len(tree))
    assert kept[-1] == 1 and kept == sorted(kept, reverse=True)


@pytest.mark.parametrize("slope, drafts", [(0.5, False), (0.3, True)])
def test_a_tree_no_count_could_verify_is_the_root_without_drafting(slope, drafts):
    """Confidences are at most 1, so count k beats count 1 only if k - 1 >= C3 (c_k - 1). With a
    target cost of 10 (1 + slope (n - 1)) ms, c_k - 1 = slope (k - 1): at C3 = 3 no count can pass
    from slope 1/3 up, and the drafter is not asked at all; below it the tree is drafted as ever."""
    drafter = chain_drafter(0.99, 0.99)
    policy = started(FakeCosts(target=lambda n: 10 * (1 + slope * (n - 1))), top_k=2, depth=2, c3=3.0)
    trees = build(policy, drafter, [0, 0], contexts=[[1] * 4, [1] * 6])
    assert bool(drafter.calls) is drafts
    if not drafts:
        assert [t.tokens for t in trees] == [[0], [0]]
        assert policy.buffers == {}  # no layer built, no phi recorded
    unranked = started(
        FakeCosts(target=lambda n: 10 * (1 + slope * (n - 1))), top_k=2, depth=2, c3=3.0, dynamic_rerank=False
    )
    assert all(len(t) > 1 for t in build(unranked, chain_drafter(0.99, 0.99), [0]))  # EAGLE's rerank: no skip


def test_dynamic_rerank_ranks_only_the_nodes_breadth_pruning_retained():
    """Section 4.2: the candidates are the sum of n_i retained nodes, at most m of them. The root's
    children (1) .6 and (2) .4; a draft-cost step at 2 nodes (c = 0.1, 0.6) keeps one per layer, so
    (2) is drafted but not retained and (1) alone is expanded: (1,3) .42, (1,4) .18, of which (1,3)
    is retained. A flat target cost verifies every candidate: the root, (1) and (1,3), never (2)."""
    costs = FakeCosts(draft=lambda n: 1.0 + (5.0 if n >= 2 else 0.0))

    def grown(total_tokens):
        drafter = FakeDrafter(table_logits(TABLE, 10))
        policy = started(costs, top_k=2, depth=1, total_tokens=total_tokens, depth_pruning=False)
        return build(policy, drafter, [0])[0], drafter

    tree, drafter = grown(40)
    assert drafter.calls == [[[0]], [[1]]]  # layer 1 retained one node: (1) alone expanded
    assert tree.tokens == [0, 1, 3] and tree.origin == [0, 1, 3]
    assert [math.exp(v) for v in tree.logps] == pytest.approx([1.0, 0.6, 0.42], rel=1e-6)
    tree, _ = grown(2)  # N = min(sum n_i, m) = 2: the root and (1)
    assert tree.tokens == [0, 1]


def test_dynamic_rerank_without_breadth_pruning_ranks_eagles_expanded_top_k():
    """n_i = K without breadth pruning: per layer the K best of the layer's drafted children (the
    TABLE tree of the next test: (1) (2); (1,3) (2,5); (1,3,7) (2,5,8)), not the K^2 drafted ones."""
    drafter = FakeDrafter(table_logits(TABLE, 10))
    policy = started(FakeCosts(), top_k=2, depth=2, total_tokens=40, breadth_pruning=False, depth_pruning=False)
    tree = build(policy, drafter, [0])[0]
    assert tree.tokens == [0, 1, 2, 3, 5, 7, 8]
    assert sorted(math.exp(v) for v in tree.logps) == pytest.approx([0.198, 0.336, 0.36, 0.4, 0.42, 0.6, 1.0], rel=1e-6)


def test_all_switches_off_is_eagles_dynamic_tree():
    drafter = FakeDrafter(table_logits(TABLE, 10))
    policy = CastTree(top_k=2, depth=2, total_tokens=6, **EAGLE_ONLY)
    policy.begin(2, None)  # nothing to price: no profile needed
    trees = build(policy, drafter, [0, 6])
    # row 0: depth 1 = (1) .6, (2) .4; depth 2 expands both: (1,3) .42, (1,4) .18, (2,5) .36,
    # (2,6) .04 -> the best two, (1,3) and (2,5), go on: (1,3,7) .336, (1,3,8) .084,
    # (2,5,8) .198, (2,5,9) .162. Rerank keeps the root and the five best: .6 .42 .4 .36 .336.
    # row 1: (3) .6, (4) .4; (3,7) .48, (3,8) .12, (4,7) .24, (4,9) .16 -> expand (3,7), (4,7):
    # (3,7,1) .336, (3,7,2) .144, (4,7,1) .168, (4,7,2) .072. Keep .6 .48 .4 .336 .24.
    assert drafter.calls == [[[0], [0]], [[1, 2], [1, 2]], [[3, 5], [3, 5]]]
    expected = [
        ([0, 1, 2, 3, 5, 7], [0.6, 0.4, 0.42, 0.36, 0.336]),
        ([6, 3, 4, 7, 7, 1], [0.6, 0.4, 0.48, 0.24, 0.336]),
    ]
    for tree, (tokens, probs) in zip(trees, expected):
        assert tree.tokens == tokens
        assert tree.parents == [-1, 0, 0, 1, 2, 3]
        assert tree.depths == [0, 1, 1, 2, 2, 3]
        assert tree.origin == [0, 1, 2, 3, 5, 7]
        assert [math.exp(v) for v in tree.logps] == pytest.approx([1.0] + probs, rel=1e-6)


def test_one_node_count_per_layer_for_the_whole_batch():
    g = torch.Generator().manual_seed(3)
    noise = torch.randn(3, 300, 32, generator=g)
    sharpness = [8.0, 0.2, 2.0]  # a confident, a flat and an in-between row

    def logits_for(row, tree, node):
        return sharpness[row] * noise[row, node]

    costs = FakeCosts(draft=lambda n: 1 + 0.05 * n, target=lambda n: 10 + 0.1 * n)
    policy = CastTree(top_k=8, depth=3, depth_pruning=False)
    policy.begin(3, costs)
    drafter = FakeDrafter(logits_for)
    trees = build(policy, drafter, [0, 0, 0], contexts=[[1] * 4, [1] * 6, [1] * 11])
    widths = [[len(nodes) for nodes in call] for call in drafter.calls]
    assert all(len(set(w)) == 1 for w in widths)  # every row expands the same count
    assert any(1 < w[0] < 8 for w in widths[1:])  # and breadth pruning did cut somewhere
    assert len({len(t) for t in trees}) == 1  # one verified size for the batch
    assert {(batch, context) for model, batch, context, n in costs.calls if model == "target"} == {(3, 7.0)}

    costs.calls.clear()
    build(policy, drafter, [0, 0], contexts=[[1] * 4, [1] * 6])  # a row has left
    assert {batch for _, batch, _, _ in costs.calls} == {2}


def test_needs_a_cost_profile():
    with pytest.raises(ConfigError, match=r"method\.tree: .*costs\.profile=true"):
        CastTree().begin(1, None)
    with pytest.raises(ConfigError, match=r"costs\.profile=true"):
        CastTree(depth_pruning=False).grow(FakeDrafter(None), [[1]], [0], Sampling(), None)


@pytest.mark.parametrize(
    "key, value",
    [
        ("top_k", 0),
        ("top_k", 2.5),
        ("top_k", True),
        ("depth", -1),
        ("depth", "auto"),
        ("total_tokens", 1),
        ("buffer", 0),
        ("c1", 0),
        ("c2", -1.0),
        ("c3", math.inf),
        ("c1", "3"),
        ("c2", math.nan),
        ("breadth_pruning", 1),
        ("depth_pruning", "yes"),
        ("dynamic_rerank", None),
    ],
)
def test_bad_settings_name_their_key(key, value):
    with pytest.raises(ConfigError, match=rf"^method\.tree\.{key}: "):
        CastTree(**{key: value})


def test_method_config_is_the_paper_setting():
    cfg = OmegaConf.to_container(OmegaConf.load(CONF / "method" / "cast.yaml"))
    assert cfg["name"] == "cast"
    assert cfg["drafter"]["_target_"] == "specbench.drafters.eagle3.load"
    assert cfg["verifier"]["_target_"] == "specbench.verify.standard.StandardVerifier"
    # thresholds are auto by default: a draft-side C1 = C2 and a verification C3 per candidate,
    # the paper's common values among them
    options = candidates(cfg["tree"])
    assert all(o["c1"] == o["c2"] for o in options)
    assert {2.5, 3.0, 4.0} <= {o["c1"] for o in options if o["c1"] == o["c3"]}
    assert any(o["c3"] < o["c1"] for o in options)
    policy = instantiate({**cfg["tree"], "c1": 3.0, "c2": 3.0, "c3": 3.0})
    assert isinstance(policy, CastTree)
    assert (policy.depth, policy.top_k, policy.total_tokens) == (13, 12, 72)
    assert policy.breadth_pruning and policy.depth_pruning and policy.dynamic_rerank
