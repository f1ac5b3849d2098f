"""Smaller shapes read off a pilot decode of the widest one (costs/pilot.py): the rule on
hand-made steps, and, for a greedy chain drafter, exactly the steps a real decode takes."""

from dataclasses import asdict

import pytest
from cast_fixtures import TABLE, FakeCosts, FakeDrafter, table_logits
from conftest import VOCAB

from specbench.costs import pilot
from specbench.drafters.small_lm import SmallLMDrafter
from specbench.engine.candidates import DRAFTING_OFF
from specbench.engine.lm import TreeLM
from specbench.engine.loop import Limits, Method, generate_batch
from specbench.engine.parts import NestedStep
from specbench.engine.sampling import Sampling
from specbench.engine.tree import DraftTree
from specbench.metrics.records import method_run
from specbench.trees.cast import CastTree
from specbench.trees.chain import Chain
from specbench.trees.eagle import EagleDynamicTree
from specbench.trees.static import StaticTree
from specbench.trees.talon import TalonTree
from specbench.verify.standard import StandardVerifier

LIMITS = Limits(max_new_tokens=48, stop_token_ids=frozenset({2}))


def chain(tokens: int) -> DraftTree:
    tree = DraftTree.root(1)
    for i in range(tokens):
        tree.add(i, 5 + i)
    return tree


def test_a_pilot_step_is_covered_by_steps_of_the_smaller_shape():
    """A gamma = 5 pilot accepted 4 drafts (5 tokens with the target's next): gamma = 2
    accepts 2 (3 tokens), then re-drafts inside the accepted run: 1 more and the next token."""
    view = Chain(2).nested_step(chain(5), [0, 1, 2, 3, 4], draft_forwards=5, context=9)
    assert view == NestedStep(accepted=2, nodes=3, draft_forwards=2, reach=2)
    assert pilot.rebuilt_steps(view, pilot_accepted=4) == [(3, 3, 2), (2, 3, 2)]
    assert pilot.rebuilt_steps(view, pilot_accepted=5) == [(3, 3, 2), (3, 3, 2)]
    rejected = Chain(2).nested_step(chain(5), [0], draft_forwards=5, context=9)
    assert pilot.rebuilt_steps(rejected, pilot_accepted=0) == [(1, 3, 2)]


def test_a_static_tree_keeps_the_first_nodes_of_the_whole_one():
    """`size` cuts the sorted choice list, so the accepted path is cut at the first node past it."""
    choices = [[0], [1], [0, 0], [0, 1], [0, 0, 0]]
    whole = StaticTree(choices=choices)
    tree = whole.topology  # node i of every smaller tree is node i of this one
    drafted = DraftTree(tokens=[1] * len(tree), parents=list(tree.parents), depths=list(tree.depths))
    view = StaticTree(choices=choices, size=3).nested_step(drafted, [0, 1, 3, 5], draft_forwards=3, context=9)
    assert view == NestedStep(accepted=2, nodes=4, draft_forwards=2, reach=2)
    assert StaticTree(choices=choices, size=2).nested_step(drafted, [0, 1, 3, 5], 3, 9).accepted == 1


def test_an_eagle_tree_is_read_off_a_wider_one_as_grow_builds_it():
    """Level by level the k best of the last level keep their k best children; the
    total_tokens - 1 best of those are verified (scores: cumulative draft log-probs)."""
    wide = DraftTree.root(1)
    a, b, _ = wide.add(0, 5, -0.1), wide.add(0, 6, -0.5), wide.add(0, 7, -1.0)
    a1, a2, b1 = wide.add(a, 8, -0.1), wide.add(a, 9, -0.8), wide.add(b, 10, -0.2)  # -0.2, -0.9, -0.7
    small = EagleDynamicTree(top_k=2, depth=1, total_tokens=4)  # keeps a (-0.1), a1 (-0.2), b (-0.5)
    assert small.nested_step(wide, [0, a, a1], 7, 9) == NestedStep(2, 4, 2, 2)
    assert small.nested_step(wide, [0, b, b1], 7, 9).accepted == 1
    assert EagleDynamicTree(top_k=1, depth=0, total_tokens=2).nested_step(wide, [0, b], 7, 9) == NestedStep(0, 2, 1, 1)
    assert small.nested_step(wide, [0, a, a2], 7, 9).accepted == 1  # a2 (-0.9) is not among the best 3


def test_only_policies_with_nested_shapes_are_predicted():
    from specbench.trees.lookahead import LookaheadTree
    from specbench.trees.opt import OptTree
    from specbench.trees.talon import TalonTree

    assert pilot.nested([Chain(g) for g in (1, 2, 4)])
    assert pilot.nested([EagleDynamicTree(2, 1, 4), EagleDynamicTree(4, 3, 12), EagleDynamicTree(8, 5, 32)])
    assert not pilot.nested([Chain(1), Chain(2)])  # two shapes: both are decoded anyway
    assert pilot.nested([TalonTree(budget=n) for n in (4, 8, 16)])
    assert not pilot.nested([LookaheadTree(window=w) for w in (3, 5, 7)])  # its n-gram pool follows its window
    assert not pilot.nested([OptTree(nodes=n) for n in (2, 4, 8)])  # a smaller tree may draft deeper than a wider one
    assert pilot.pilot_index([Chain(3), Chain(9), Chain(1)]) == 1
    shapes = [CastTree(**c) for c in CastTree.AUTO_CANDIDATES]  # equally wide: the loosest thresholds, last
    assert pilot.nested(shapes)
    assert CastTree.AUTO_CANDIDATES[pilot.pilot_index(shapes)] == {"c1": 1.5, "c2": 1.5, "c3": 1.0}


def test_a_cast_tree_is_grown_again_from_a_looser_ones_draft_scores():
    """Stricter thresholds read off the loosest shape's verified tree give the tree `grow`
    builds with them, step after step with the confidence-gain buffers carried along
    (every node the stricter shape drafts here lies in the looser tree)."""
    costs = FakeCosts(draft=lambda n: float(n))  # a draft layer of k nodes 0.1k target forwards; verifying free
    loose = CastTree(top_k=2, depth=2, total_tokens=16, c1=1e-3, c2=1e-3, c3=1e-3)
    strict, replay = (CastTree(top_k=2, depth=2, total_tokens=16, c1=10.0, c2=4.0, c3=2.0) for _ in range(2))
    for policy in (loose, strict, replay):
        policy.begin(1, costs)
    for root, path, accepted in ((0, [0, 1, 3], 2), (6, [0, 2], 0)):
        (wide,) = loose.grow(FakeDrafter(table_logits(TABLE, 10)), [[1, 2, 3]], [root], Sampling(), None)
        drafter = FakeDrafter(table_logits(TABLE, 10))
        (grown,) = strict.grow(drafter, [[1, 2, 3]], [root], Sampling(), None)
        view = replay.nested_step(wide, path, draft_forwards=3, context=3)
        assert view.nodes == len(grown) == 4  # one node a layer: the breadth threshold keeps the best alone
        assert view.draft_forwards == drafter.forwards == 3
        assert [list(replay.buffers[i]) for i in (1, 2)] == [list(strict.buffers[i]) for i in (1, 2)]
        assert (view.accepted, view.reach) == (accepted, 3)  # the path cut at the first node the tree lacks


def node_at(tree: DraftTree, tokens: tuple[int, ...]) -> int:
    """The node reached from the root along draft `tokens`."""
    return next(i for i in range(len(tree)) if tuple(tree.tokens[n] for n in tree.path_to(i))[1:] == tokens)


@pytest.mark.parametrize(
    "wide, small, accepted",
    [
        (TalonTree(budget=16, top_k=2), TalonTree(budget=5, top_k=1), 3),  # a chain 0-1-3-7 and 1's second child
        (TalonTree(budget=16, top_k=2), TalonTree(budget=8, top_k=2), 3),
    ],
)
def test_talon_trees_are_grown_again_from_a_wider_ones_draft_scores(wide, small, accepted):
    """A smaller TALON budget read off the wider tree's draft scores gives the tree `grow`
    builds with it: as many nodes, as many drafter calls, and the wider tree's accepted path
    1-3-7-1 cut where the smaller tree ends (here every node the smaller one drafts lies in
    the wider tree)."""
    drafter = FakeDrafter(table_logits(TABLE, 10))
    (tree,) = wide.grow(drafter, [[1, 2, 3]], [0], Sampling(), None)
    wide_forwards, drafter = drafter.forwards, FakeDrafter(table_logits(TABLE, 10))
    (grown,) = small.grow(drafter, [[1, 2, 3]], [0], Sampling(), None)
    path = tree.path_to(node_at(tree, (1, 3, 7, 1)))
    view = small.nested_step(tree, path, wide_forwards, context=3)
    assert (view.nodes, view.draft_forwards, view.accepted) == (len(grown), drafter.forwards, accepted)
    assert view.reach == max(grown.depths)


@pytest.mark.parametrize("gamma", [1, 2, 3])
def test_rebuilt_chain_steps_are_a_real_decodes(gamma, target, draft, prompts):
    """Greedy, fp32: a chain re-drafted inside an accepted run proposes what the longer
    chain proposed there, so gamma's rebuilt steps are the ones decoding with gamma takes."""
    lm = TreeLM(target)
    recorder, accepted = pilot.Recorder(Chain(6)), 0
    for prompt in prompts[:4]:
        method = Method(recorder, StandardVerifier(), SmallLMDrafter(draft, VOCAB))
        (wide,) = generate_batch(lm, method, [prompt], Sampling(), LIMITS)
        run = asdict(method_run([(len(prompt), wide, "")], 1, wide.batch_seconds, "0", wide.verify_seconds))
        rebuilt = pilot.rebuilt_run(run, recorder.decodes[-1], Chain(gamma), costs=None)
        method = Method(Chain(gamma), StandardVerifier(), SmallLMDrafter(draft, VOCAB))
        (real,) = generate_batch(lm, method, [prompt], Sampling(), LIMITS)
        assert real.ids == wide.ids
        assert rebuilt["accept_lengths"] == real.accept_lengths
        assert rebuilt["step_draft_forwards"] == real.step_draft_forwards
        assert [1 + sum(w) for w in rebuilt["tree_widths"]] == [1 + sum(w) for w in real.tree_widths]
        accepted += sum(n - 1 for n in real.accept_lengths)
    assert accepted > 8  # acceptance was exercised


@pytest.mark.parametrize("margin", [None, -1.0, 10.0])
def test_calibration_predicts_from_the_pilot_and_confirms_the_best(
    margin, target, draft, prompts, tmp_path, monkeypatch
):
    """gamma: auto over ten chains decodes the widest and the best predicted; the runner-up
    too only where it is still predicted more than CONFIRM_MARGIN faster than every decoded
    shape (a margin of -100%: always; of 1000%: never). The others are rebuilt from the
    pilot with the taus decoding them gives, and only a decoded shape is chosen. The record
    keeps the tree-work line, through AR's step (0 ms at one token)."""
    from cost_fixtures import calibration, synthetic_profile

    from specbench.costs import autotune

    if margin is not None:
        monkeypatch.setattr(autotune, "CONFIRM_MARGIN", margin)

    def tune(cache):
        setup = calibration(prompts[:2], cache)
        cfg = {"_target_": "specbench.trees.chain.Chain", "gamma": "auto"}
        profile = synthetic_profile(per_token=0.0, drafter_ms=0.01, base=1000.0)
        return autotune.tune(cfg, SmallLMDrafter(draft, VOCAB), StandardVerifier(), TreeLM(target), profile, setup)

    chosen, record = tune(tmp_path / "pilot")
    assert not any(c.get("ceiling") for c in record["candidates"])  # a flat profile: every shape could pay
    decoded = [c for c in record["candidates"] if c.get("measured", True)]
    guessed = [c["predicted_speedup"] for c in record["candidates"] if not c.get("measured", True)]
    assert len(record["candidates"]) == 10 and len(decoded) in {None: (2, 3), -1.0: (3,), 10.0: (2,)}[margin]
    if len(decoded) == 2:  # the runner-up left undecoded was within the margin of a decoded shape
        best = max(c["predicted_speedup"] for c in decoded)
        assert max(guessed) <= best * (1 + autotune.CONFIRM_MARGIN)
    assert {"gamma": chosen["gamma"]} in [c["tree"] for c in decoded] and decoded[-1]["tree"] == {"gamma": 10}
    assert record["tree_work"] == autotune.overhead_line([autotune.AR_STEP, *decoded])
    if margin is None:  # the taus the pilot predicts are those of decoding every shape on every prompt
        monkeypatch.setattr(pilot, "nested", lambda trees: False)
        monkeypatch.setattr(autotune, "RACE_MARGIN", 1.0)
        _, every = tune(tmp_path / "every")
        assert all(c.get("measured", True) for c in every["candidates"])
        taus = [round(c["tau"], 6) for c in every["candidates"]]
        assert [round(c["tau"], 6) for c in record["candidates"]] == taus


def test_cast_thresholds_are_predicted_from_one_pilot_at_the_loosest(target, draft, prompts, tmp_path):
    """CAST's 21 threshold sets: the loosest decoded as the pilot, the best predicted (and
    perhaps the runner-up) decoded to confirm, the others predicted (rows not measured), the
    choice a decoded one."""
    from cost_fixtures import calibration, synthetic_profile

    from specbench.costs import autotune

    setup = calibration(prompts[:2], tmp_path)
    cfg = {"_target_": "specbench.trees.cast.CastTree", "top_k": 3, "depth": 3, "total_tokens": 12}
    cfg |= dict.fromkeys(("c1", "c2", "c3"), "auto")
    profile = synthetic_profile(per_token=20.0, drafter_ms=5.0, base=100.0)
    chosen, record = autotune.tune(
        cfg, SmallLMDrafter(draft, VOCAB), StandardVerifier(), TreeLM(target), profile, setup
    )
    decoded = [c["tree"] for c in record["candidates"] if c.get("measured", True)]
    assert len(record["candidates"]) == 21 and len(decoded) in (2, 3)
    assert {"c1": 1.5, "c2": 1.5, "c3": 1.0} in decoded
    if record["chosen"] != DRAFTING_OFF:
        assert {k: chosen[k] for k in ("c1", "c2", "c3")} in decoded


def test_talon_budgets_are_predicted_from_one_pilot_at_the_widest(target, draft, prompts, tmp_path):
    """TALON's 10 budgets: the widest decoded as the pilot, the best predicted (and perhaps
    the runner-up) decoded to confirm, the others predicted, the choice a decoded one."""
    from cost_fixtures import calibration, synthetic_profile

    from specbench.costs import autotune

    setup = calibration(prompts[:2], tmp_path)
    cfg = {"_target_": "specbench.trees.talon.TalonTree", "budget": "auto", "top_k": "auto"}
    profile = synthetic_profile(per_token=2.0, drafter_ms=0.5, base=100.0)
    chosen, record = autotune.tune(
        cfg, SmallLMDrafter(draft, VOCAB), StandardVerifier(), TreeLM(target), profile, setup
    )
    decoded = [c["tree"] for c in record["candidates"] if c.get("measured", True)]
    assert len(record["candidates"]) == 10 and len(decoded) in (2, 3)
    assert record["candidates"][-1].get("measured", True)  # the widest: the pilot
    if record["chosen"] != DRAFTING_OFF:
        assert {k: chosen[k] for k in ("budget", "top_k")} in decoded
