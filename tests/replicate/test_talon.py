"""TALON's replication: the transcription of its tables (results/reference/talon.csv), the Figure 3 funnel, the pairing
of the baseline claims, the Medusa/Hydra rows, the cpu-scale sizes and the Figure 15 micro-benchmark."""

import json
import math
from collections import Counter

import numpy as np
import pandas as pd
import pytest
import torch
from reference_csv import HEADER, KEY
from reference_csv import load as load_paper

from runners import talon
from specbench.engine.parts import Drafter
from specbench.engine.sampling import Sampling
from specbench.replicate import tables
from specbench.replicate.verdicts import BEYOND_MODEL
from specbench.trees import talon_expansion

MODEL = "smollm2-135m"


STATIC_WIDTHS = [10, 100, 100]  # EAGLE's K=10 tree, three depths: 10 children of the root, then 10 x 10


def write_run(tmp_path, name, records, **columns):
    run_dir = tmp_path / name
    run_dir.mkdir()
    (run_dir / "samples.jsonl").write_text("\n".join(json.dumps(r) for r in records))
    return {"config.model.name": MODEL, "results.samples": len(records), "run_dir": str(run_dir), **columns}


def static_run(tmp_path, prompts):
    """A static-tree run whose prompt i accepts, at each step, the sibling ranks prompts[i] gives."""
    records = [
        {
            "id": str(i),
            "category": "writing",
            "method": {
                "new_tokens": len(steps) * 3 + 1,
                "turn_ids": [[0]],
                "target_forwards": len(steps),
                "accepted_sibling_ranks": steps,
                "tree_widths": [STATIC_WIDTHS] * len(steps),
            },
        }
        for i, steps in enumerate(prompts)
    ]
    return write_run(
        tmp_path,
        "static",
        records,
        **{
            "config.method.name": "eagle3",
            "config.method.tree.total_tokens": talon.STATIC_TREE,
            "config.dataset.name": "mt_bench",
            "temperature": 0.0,
        },
    )


def speed_run(tmp_path, name, method, dataset, limit, tokens, speedups, temperature=0.0, **shape):
    """A run whose prompt i decodes at speedups[i] over its AR."""
    records = [
        {
            "id": str(i),
            "method": {"new_tokens": tokens, "seconds": 1.0 / s, "target_forwards": 10},
            "baseline": {"new_tokens": tokens, "seconds": 1.0},
        }
        for i, s in enumerate(speedups)
    ]
    return write_run(
        tmp_path,
        name,
        records,
        **{
            "config.method.name": method,
            "config.dataset.name": dataset,
            "temperature": temperature,
            "config.dataset.limit": limit,
            "config.dataset.seed": 0,
            "config.gen.max_new_tokens": tokens,
            **talon.DEFAULTS.get(method, {}),
            **shape,
        },
    )


# Only Tables 1 and 3 hold numeric results (Table 2 lists draft checkpoints; the ablations on
# N, mu and robust init are figures only). Both have the same layout:
#   vicuna-13b: 6 methods (eagle3, sps, medusa, hydra, opt_tree, talon)
#   dsl-8b, llama3.1-8b, qwen3-8b, qwen3-32b: 2 methods each (eagle3, talon) -> 4 x 2 = 8
#   (6 + 8) = 14 method rows x 6 datasets (no mean column) x 2 metrics (tau, speedup) = 168
EXPECTED_PER_TABLE = {"table1": 14 * 6 * 2, "table3": 14 * 6 * 2}


def load():
    return load_paper("talon")


def test_a_tree_that_accepts_every_node_alike_gives_a_flat_funnel(tmp_path):
    """Every rank accepted equally often at every depth (each rank is held by one node at
    depth 1 and by ten below): per-node acceptance is flat in each row, and the funnel
    statistic is exactly 0, not below it (ranks 1-2 are 2 of 10 first-layer nodes but 20 of
    100 deeper ones)."""
    uniform = [[[r, r, r] for r in range(10)] for _ in range(12)]
    runs = pd.DataFrame([static_run(tmp_path, uniform)])
    counts, nodes = (sum(parts) for parts in zip(*talon.prompt_acceptances(runs.iloc[0])))
    rates = talon.acceptance_per_node(counts, nodes)
    # each rank 12 times in 120 steps, over 1 node or 10
    assert np.allclose(rates[0], 0.1) and np.allclose(rates[1:3], 0.01)
    assert np.isnan(rates[3:]).all()  # depths the tree never had
    verdict, text = talon._funnel(runs)
    assert verdict == BEYOND_MODEL and "1: 0.20 of 120" in text  # no funnel, and no spread for an interval to decide on


def test_acceptance_is_divided_by_the_nodes_holding_each_rank():
    counts = np.array([[6.0, 4.0, 2.0]])
    nodes = np.array([[3.0, 2.0, 1.0]])  # three parents: 3 top-1 children, 2 top-2, 1 top-3
    assert np.allclose(talon.acceptance_per_node(counts, nodes), [[2.0, 2.0, 2.0]])
    assert talon.top_share(np.array([[2.0, 2.0, 2.0, 2.0]]))[0] == pytest.approx(0.5)


def test_deep_acceptances_on_top_ranked_children_make_the_funnel(tmp_path):
    """First layer spread over ranks 0-9, deeper layers on each parent's top-1 or top-2."""
    funnel = [[[r, (r + p) % 2, 0] for r in range(10)] for p in range(12)]
    verdict, text = talon._funnel(pd.DataFrame([static_run(tmp_path, funnel)]))
    assert verdict is True and "2: 1.00" in text and "1: 0.20" in text


def test_the_static_census_needs_k_children_per_parent():
    assert talon.rank_census([10, 100])[1].tolist() == [10] * 10
    with pytest.raises(ValueError, match="not 10 children per parent"):
        talon.rank_census([10, 95])


def test_baseline_claims_pair_runs_of_the_same_prompts_and_lengths(tmp_path):
    """TALON's 20-prompt headline run and a 64-token OPT-Tree run at 128 tokens are not
    paired with OPT-Tree's 10-prompt, 64-token run: TALON's run of those prompts and lengths is."""
    noise = [0.02 * ((i * 7) % 5 - 2) for i in range(20)]
    rows = []
    for dataset in talon.DATASETS:
        # slower: would lose
        rows.append(speed_run(tmp_path, f"talon20-{dataset}", "talon", dataset, 20, 64, [0.5 + n for n in noise]))
        rows.append(speed_run(tmp_path, f"talon10-{dataset}", "talon", dataset, 10, 64, [1.2 + n for n in noise[:10]]))
        rows.append(speed_run(tmp_path, f"opt10-{dataset}", "opt_tree", dataset, 10, 64, [1.0 + n for n in noise[:10]]))
        rows.append(speed_run(tmp_path, f"opt10long-{dataset}", "opt_tree", dataset, 10, 128, [3.0] * 10))
    runs = pd.DataFrame(rows)
    mine, theirs = talon.paired_runs(runs, "gsm8k", 0.0, "opt_tree")
    assert mine["run_dir"].endswith("talon10-gsm8k") and theirs["run_dir"].endswith("opt10-gsm8k")
    verdict, text = talon._faster(0.0, "opt_tree")(runs)
    assert verdict is True and "gsm8k +0.2 [" in text
    with pytest.raises(KeyError, match="same prompts and lengths"):
        talon.paired_runs(
            runs[runs["config.gen.max_new_tokens"] == 128].assign(**{"config.method.name": "opt_tree"}),
            "gsm8k",
            0.0,
            "opt_tree",
        )


def test_a_dataset_without_paired_runs_leaves_the_every_dataset_claim_undecided(tmp_path):
    rows = []
    for dataset in talon.DATASETS[:-1]:
        rows.append(
            speed_run(tmp_path, f"talon-{dataset}", "talon", dataset, 10, 64, [1.2 + 0.01 * i for i in range(10)])
        )
        rows.append(
            speed_run(
                tmp_path,
                f"hydra-{dataset}",
                "hydra",
                dataset,
                10,
                64,
                [0.9 + 0.01 * i for i in range(10)],
                **{"config.method.tree.size": 8},
            )
        )
    verdict, text = talon._faster(0.0, "hydra")(pd.DataFrame(rows))
    assert verdict is None and text.endswith(f"{talon.DATASETS[-1]}: cannot tell: no talon and hydra run")


def test_medusa_and_hydra_rows_find_their_default_trees():
    row = pd.Series(
        {"table": "table1", "model": MODEL, "method": "medusa", "dataset": "gsm8k", "temperature": 0.0, "setting": ""}
    )
    filters, baseline = talon.locate("cpu")(row)
    assert filters["config.method.name"] == "medusa" and filters["config.method.tree.size"] == 9 and not baseline
    filters, _ = talon.locate("paper")(row.replace("medusa", "hydra"))
    assert filters["config.method.tree.choices_name"] == "mc_sim_7b_63"


def test_cpu_scale_sizes_keep_the_headline_at_20_prompts_and_every_claim_at_10_of_40_tokens(tmp_path):
    sizes = {}
    for sweep in talon.sweeps("cpu", talon.CPU_PROMPTS, talon.CPU_MAX_NEW_TOKENS, tmp_path):
        if sweep.program:
            assert sweep.name == "figure15" and str(tmp_path / "figure15.csv") in sweep.program
            continue
        limit = next(o for o in sweep.overrides if o.startswith("dataset.limit="))
        length = next(o for o in sweep.overrides if o.startswith("gen.max_new_tokens="))
        sizes.setdefault(sweep.name, set()).add((limit, length))
    assert all(sizes[name] == {("dataset.limit=20", "gen.max_new_tokens=64")} for name in talon.HEADLINE)
    assert all(
        v == {("dataset.limit=10", "gen.max_new_tokens=40")} for name, v in sizes.items() if name not in talon.HEADLINE
    )
    quick = {
        o
        for s in talon.sweeps("cpu", 2, 6, tmp_path)
        for o in s.overrides
        if o.startswith(("dataset.limit=", "gen.max_new_tokens="))
    }
    assert quick == {"dataset.limit=2", "gen.max_new_tokens=6"}  # a quick look stays quick
    assert {"table1-talon-paired", "table1-medusa", "table1-hydra", "table3-medusa", "table3-hydra", "figure7"} <= set(
        sizes
    )
    # no cost profile or calibration decode: nothing the report reads comes from the cost model
    assert all("costs.profile=false" in s.overrides for s in talon.sweeps("cpu", 20, 64, tmp_path) if not s.program)
    assert not any("costs.profile=false" in s.overrides for s in talon.sweeps("paper", 20, 64, tmp_path))


def test_talon_gate_keeps_children_within_mu_of_the_best_path_then_the_budget():
    parent_logps = torch.tensor([0.0, math.log(0.5)])
    logps = torch.tensor([[0.6, 0.3, 0.1, 0.0], [0.9, 0.05, 0.05, 0.0]]).log()
    # paths: 0.6, 0.3, 0.1, 0 | 0.45, 0.025, 0.025, 0; mu = 0.1 keeps >= 0.06
    parent, token = talon_expansion.talon_layer(parent_logps, logps, mu=0.1, room=10)
    assert sorted(zip(parent.tolist(), token.tolist())) == [(0, 0), (0, 1), (0, 2), (1, 0)]
    parent, token = talon_expansion.talon_layer(parent_logps, logps, mu=0.1, room=2)
    assert sorted(zip(parent.tolist(), token.tolist())) == [(0, 0), (1, 0)]


def test_eagle_dual_top_k_keeps_the_k_best_of_k_by_k():
    parent_logps = torch.tensor([0.0, math.log(0.5)])
    logps = torch.tensor([[0.6, 0.3, 0.1, 0.0], [0.9, 0.05, 0.05, 0.0]]).log()
    parent, token = talon_expansion.eagle_layer(parent_logps, logps, top_k=2)
    assert list(zip(parent.tolist(), token.tolist())) == [(0, 0), (1, 0)]  # 0.6 and 0.45 beat 0.3 and 0.025


def test_zipf_rows_are_distributions_with_the_given_exponent():
    logps = talon_expansion.zipf_logprobs(3, 1000, 1.35, torch.Generator().manual_seed(0))
    assert torch.allclose(logps.exp().sum(-1), torch.ones(3))
    top = logps[0].sort(descending=True).values
    assert float(top[0] - top[1]) == pytest.approx(1.35 * math.log(2), abs=1e-4)
    assert not torch.equal(logps[0], logps[1])  # each row shuffles the vocabulary its own way


def test_expansion_benchmark_writes_every_timed_call_and_refuses_bad_input(tmp_path, capsys):
    out = tmp_path / "f15.csv"
    talon_expansion.main(
        ["--out", str(out), "--vocabs", "64", "--alphas", "1.0", "5.0", "--repeats", "3", "--warmup", "1"]
    )
    timings = pd.read_csv(out)
    assert len(timings) == 2 * 2 * 3 and set(timings["method"]) == {"eagle", "talon"} and (timings["seconds"] > 0).all()
    assert list(talon_expansion.speedups(timings).columns) == ["vocab", "alpha", "eagle", "talon", "speedup"]
    with pytest.raises(SystemExit) as exit:
        talon_expansion.main(["--out", str(out), "--vocabs", "5"])
    assert exit.value.code == 2 and capsys.readouterr().err.count("\n") == 1


def test_figures_draw_the_funnel_and_per_query_tau_from_a_static_tree_run(tmp_path):
    uniform = [[[r, r, r] for r in range(10)] for _ in range(3)]
    runs = pd.DataFrame([static_run(tmp_path, uniform)])
    written = {p.name for p in talon.figures(runs, tmp_path / "figures")}
    assert {"figure3.png", "figure4.png"} <= written and "figure10.png" not in written


@pytest.mark.parametrize("table", ["table1", "table3"])
@pytest.mark.parametrize("baseline", talon.BASELINES)
def test_the_published_vicuna_rows_bear_out_each_baseline_claim(table, baseline):
    """TALON's published speedup beats OPT-Tree's, Medusa's and Hydra's on every dataset of
    Tables 1 and 3 (Vicuna-13B), as the claims say."""

    published = tables.read_reference(talon.ROOT / "results" / "reference" / "talon.csv")
    speedups = published.query("table == @table and metric == 'speedup' and model == 'vicuna-13b'")
    by_method = speedups.pivot(index="dataset", columns="method", values="published").astype(float)
    assert sorted(by_method.index) == sorted(talon.DATASETS)
    assert (by_method["talon"] > by_method[baseline]).all()
    assert any(
        c.source == ("Table 1" if table == "table1" else "Table 3") and baseline.replace("_", "-") in c.text.lower()
        for c in talon.CLAIMS
    )


def test_the_census_matches_the_static_tree_the_eagle_policy_grows():
    """EAGLE-3's K=10, D=8 tree kept whole (Figure 3's run) on random draft distributions: the
    nodes holding each sibling rank at each depth are what rank_census derives from the widths."""
    from specbench.engine.loop import _sibling_ranks, _widths
    from specbench.trees.eagle import EagleDynamicTree

    table = torch.log_softmax(3 * torch.randn(500, 96, generator=torch.Generator().manual_seed(0)), -1)

    class RandomDrafter(Drafter):
        def logits(self, contexts, trees, nodes):
            return [
                torch.stack([table[(7 * n + tree.depths[n]) % 500] for n in row]) if row else None
                for tree, row in zip(trees, nodes)
            ]

    [tree] = EagleDynamicTree(top_k=10, depth=8, total_tokens=talon.STATIC_TREE).grow(
        RandomDrafter(), [[1]], [5], Sampling(), [None]
    )
    assert len(tree) == talon.STATIC_TREE
    held = np.zeros((talon.LEVELS, talon.STATIC_K))
    for node, rank in zip(range(1, len(tree)), _sibling_ranks(tree, list(range(1, len(tree))))):
        held[tree.depths[node] - 1, rank] += 1
    assert np.array_equal(held, talon.rank_census(_widths(tree.depths)))


def test_each_target_the_baseline_ran_is_a_case_of_its_own(tmp_path):
    """Two targets ran TALON, only one ran Hydra (Vicuna-13B's baseline): the claim's cases
    are that target's datasets; EAGLE-3, run on both, is compared on both."""
    rows = []
    for model in ("vicuna-13b", "qwen3-8b"):
        for dataset in talon.DATASETS:
            for method, base in (("talon", 1.2), ("eagle3", 0.9)) + (
                (("hydra", 1.0),) if model == "vicuna-13b" else ()
            ):
                shape = {"config.method.tree.size": 8} if method == "hydra" else {}
                rows.append(
                    {
                        **speed_run(
                            tmp_path,
                            f"{method}-{model}-{dataset}",
                            method,
                            dataset,
                            10,
                            64,
                            [base + 0.01 * i for i in range(10)],
                            **shape,
                        ),
                        "config.model.name": model,
                    }
                )
    runs = pd.DataFrame(rows)
    verdict, text = talon._faster(0.0, "hydra")(runs)
    assert verdict is True and "; gsm8k +0.2 [" in text and "qwen3-8b" not in text
    verdict, text = talon._faster(0.0)(runs)
    assert verdict is True and "qwen3-8b gsm8k +0.3 [" in text and "vicuna-13b gsm8k +0.3 [" in text


def test_the_talon_reference_header():
    header, _ = load()
    assert header == HEADER


def test_values_and_keys():
    _, rows = load()
    keys = Counter(tuple(r[k] for k in KEY) for r in rows)
    dupes = [k for k, n in keys.items() if n > 1]
    assert not dupes, dupes
    for r in rows:
        float(r["value"])
        assert r["paper"] == "talon"
        assert r["metric"] in {"tau", "speedup"}
        assert r["temperature"] in {"0", "1"}


def test_the_talon_reference_counts_per_table():
    _, rows = load()
    assert Counter(r["table"] for r in rows) == EXPECTED_PER_TABLE
    temps = {(r["table"], r["temperature"]) for r in rows}
    assert temps == {("table1", "0"), ("table3", "1")}
    # per-model method counts within each table (x 6 datasets x 2 metrics)
    for table in EXPECTED_PER_TABLE:
        per_model = Counter(r["model"] for r in rows if r["table"] == table)
        assert per_model == {
            "vicuna-13b": 6 * 12,
            "dsl-8b": 2 * 12,
            "llama3.1-8b": 2 * 12,
            "qwen3-8b": 2 * 12,
            "qwen3-32b": 2 * 12,
        }


def test_the_talon_reference_spot_checks():
    _, rows = load()
    index = {(r["table"], r["model"], r["method"], r["dataset"], r["metric"]): r["value"] for r in rows}
    expected = {
        ("table1", "vicuna-13b", "talon", "humaneval", "speedup"): "5.16",
        ("table1", "vicuna-13b", "talon", "humaneval", "tau"): "9.48",
        ("table1", "qwen3-8b", "eagle3", "cnn_dm", "speedup"): "1.95",
        ("table1", "dsl-8b", "talon", "gsm8k", "tau"): "7.46",
        ("table1", "vicuna-13b", "sps", "nq", "tau"): "1.97",
        ("table3", "qwen3-8b", "talon", "humaneval", "speedup"): "2.51",
        ("table3", "llama3.1-8b", "eagle3", "mt_bench", "tau"): "3.96",
        ("table3", "qwen3-32b", "talon", "alpaca", "speedup"): "1.84",
    }
    for key, value in expected.items():
        assert index[key] == value, key


def test_talon_figure6_claims_pair_prompts_of_one_run_per_cell(tmp_path):
    """TALON's delta follows tau (oracle-like, slope > 0), EAGLE-3's is fixed by its tree:
    both claims agree on per-prompt points, and Figure 12's shorter N=60 run of the same
    MT-Bench cell does not join the pairs."""

    def run(name, method, dataset, points):
        run_dir = tmp_path / name
        run_dir.mkdir()
        records = [
            {
                "id": str(i),
                "method": {
                    "new_tokens": 61,
                    "turn_ids": [[0]],
                    "target_forwards": 60 / tau,
                    "draft_forwards": 60 / tau * delta,
                },
            }
            for i, (tau, delta) in enumerate(points)
        ]
        (run_dir / "samples.jsonl").write_text("\n".join(json.dumps(r) for r in records))
        return {
            "config.method.name": method,
            **talon.DEFAULTS[method],
            "config.model.name": "smollm2-135m",
            "config.dataset.name": dataset,
            "temperature": 0.0,
            "results.samples": len(points),
            "run_dir": str(run_dir),
        }

    taus = [1.5, 2.0, 2.5, 3.0, 1.8, 2.2, 2.7, 1.6]
    rows = []
    for dataset in ("mt_bench", "gsm8k"):
        rows.append(run(f"talon-{dataset}", "talon", dataset, [(t, t + 0.1) for t in taus]))
        rows.append(run(f"eagle3-{dataset}", "eagle3", dataset, [(t, 9.0) for t in taus]))
    rows.append(run("talon-figure12", "talon", "mt_bench", [(1.0, 40.0)] * 3))  # would wreck both claims if paired
    runs = pd.DataFrame(rows)
    assert len(talon.paired_points(runs)) == 2 * len(taus)
    assert talon._oracle(runs)[0] is True
    verdict, text = talon._adaptive_cost(runs)
    assert verdict is True and "TALON +1.00" in text
    with pytest.raises(KeyError):
        talon.paired_points(runs[runs["config.method.name"] == "talon"])
