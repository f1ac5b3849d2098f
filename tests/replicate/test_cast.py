"""CAST's replication: the transcription of its tables (results/reference/cast.csv), the runs runners/cast.py reads at
each batch size, ablation and threshold, and a tiny replication."""

import json
import sys
from collections import Counter

import pandas as pd
import pytest
from conftest import run_in_process
from reference_csv import load
from replicate_fixtures import (
    SMALL_COSTS,
    batched_run_on_disk,
    check_common,
    execute_notebook,
    index,
    reference,
    run_row,
)

from runners import cast
from runners.cast import cast_filters, eagle3_filters
from specbench.replicate import report, tables

DATASETS6 = 6  # mt_bench, humaneval, gsm8k, alpaca, cnn_dm, nq (no mean column in CAST)


# CAST: every cell is a speedup.
#   table1 (batch 1): T=0: vicuna-13b 8 methods (sps, pld, medusa, lookahead, eagle, eagle2, eagle3,
#          cast) + llama3.3-70b, llama3.1-8b, dsl-8b 2 each (eagle3, cast) = 14 rows;
#          T=1: vicuna-13b 5 methods (sps, eagle, eagle2, eagle3, cast) + 3 x 2 = 11 rows;
#          (14 + 11) x 6 datasets = 150
#   table2 (batch 8): per temperature qwen2-7b 3 (eagle, eagle2, cast) + llama3.1-8b 4 (+eagle3)
#          + vicuna-13b 4 + vicuna-33b 3 = 14 rows; 14 x 6 x 2 temperatures = 168
#   table3 (ablation): 5 variants x 5 batch sizes (1, 2, 4, 8, 16) = 25
#   table4 (H20): 4 models x 2 methods x 6 x 2 temperatures = 96
#   table5 (2x RTX 4090): 3 models x 2 methods x 6 x 2 temperatures = 72
CAST_EXPECTED = {
    "table1": (14 + 11) * DATASETS6,
    "table2": 14 * DATASETS6 * 2,
    "table3": 5 * 5,
    "table4": 4 * 2 * DATASETS6 * 2,
    "table5": 3 * 2 * DATASETS6 * 2,
}


PAPER_TREE = {"config.method.tree.top_k": 10, "config.method.tree.total_tokens": 60}


@pytest.mark.parametrize(
    "model, batch, depth, c",
    [
        ("llama3.1-8b", 1, 13, 3.0),
        ("vicuna-13b", 1, 13, 4.0),
        ("llama3.3-70b", 4, 13, 4.0),
        ("dsl-8b", 8, 9, 2.5),
        ("vicuna-13b", 16, 9, 2.5),
        ("smollm2-135m", 1, 13, 3.0),
    ],
)
def test_appendix_e_shape_and_threshold_follow_the_model_and_batch_size(model, batch, depth, c):
    """Appendix E: depth 13 and the model's threshold (4 for Llama-3.3-70B and Vicuna-13B, 3 for
    the 8B models) at batch size 1; depth 9 and 2.5 at batch size 8; top_k 12 and 72 tokens."""
    tree = {
        k.removeprefix("config.method.tree."): v
        for k, v in cast_filters(model, batch).items()
        if k.startswith("config.method.tree.")
    }
    assert tree == {
        "depth": depth,
        "top_k": 12,
        "total_tokens": 72,
        "c1": c,
        "c2": c,
        "c3": c,
        "dynamic_rerank": True,
        "depth_pruning": True,
        "breadth_pruning": True,
    }


@pytest.mark.parametrize(
    "ablation, switches", [("DR", (True, False, False)), ("DR+DP", (True, True, False)), ("DR+BP", (True, False, True))]
)
def test_table3_ablation_rows_are_eagle3s_tree_with_the_named_components(ablation, switches):
    """Table 3 reads "EAGLE3+DR", "EAGLE3+DR+DP", "EAGLE3+DR+BP": EAGLE-3's shape (depth 7,
    top_k 10, its total_tokens for the model) with those components switched on."""
    filters = cast_filters("vicuna-13b", 2, ablation)
    assert {k: filters[k] for k in eagle3_filters("vicuna-13b")} == eagle3_filters("vicuna-13b")
    assert eagle3_filters("vicuna-13b") == {
        "config.method.tree.depth": 7,
        "config.method.tree.top_k": 10,
        "config.method.tree.total_tokens": 60,
    }
    assert (
        tuple(filters[f"config.method.tree.{k}"] for k in ("dynamic_rerank", "depth_pruning", "breadth_pruning"))
        == switches
    )
    assert filters["config.method.tree.c1"] == 4.0 and filters["config.gen.batch_size"] == 2


def test_cast_common_and_counts():
    rows = check_common("cast")
    assert Counter(r["table"] for r in rows) == CAST_EXPECTED
    assert {r["metric"] for r in rows} == {"speedup"}
    for r in rows:
        if r["table"] == "table3":
            # model, dataset and temperature of the ablation are not stated in the paper
            assert r["model"] == r["dataset"] == r["temperature"] == ""
        else:
            assert r["temperature"] in {"0", "1"}
    t1 = Counter((r["temperature"], r["model"]) for r in rows if r["table"] == "table1")
    assert t1 == {
        ("0", "vicuna-13b"): 48,
        ("0", "llama3.3-70b"): 12,
        ("0", "llama3.1-8b"): 12,
        ("0", "dsl-8b"): 12,
        ("1", "vicuna-13b"): 30,
        ("1", "llama3.3-70b"): 12,
        ("1", "llama3.1-8b"): 12,
        ("1", "dsl-8b"): 12,
    }
    t2 = Counter(r["model"] for r in rows if r["table"] == "table2")
    assert t2 == {"qwen2-7b": 36, "llama3.1-8b": 48, "vicuna-13b": 48, "vicuna-33b": 36}
    t3 = Counter(r["setting"].split(";", 1)[-1] if ";" in r["setting"] else "" for r in rows if r["table"] == "table3")
    assert t3 == {"": 5, "ablation=DR": 5, "ablation=DR+DP": 5, "ablation=DR+BP": 5, "ablation=DR+DP+BP": 5}


def test_cast_spot_checks():
    _, rows = load("cast")
    idx = index(rows)
    expected = {
        ("cast", "table1", "llama3.3-70b", "cast", "humaneval", "0", "batch=1", "speedup"): "5.23",
        ("cast", "table1", "vicuna-13b", "pld", "cnn_dm", "0", "batch=1", "speedup"): "2.42",
        ("cast", "table2", "vicuna-13b", "cast", "humaneval", "0", "batch=8", "speedup"): "3.12",
        ("cast", "table2", "qwen2-7b", "eagle", "cnn_dm", "1", "batch=8", "speedup"): "0.62",
        ("cast", "table3", "", "cast", "", "", "batch=16;ablation=DR+DP+BP", "speedup"): "2.35",
        ("cast", "table4", "dsl-8b", "cast", "gsm8k", "0", "batch=1;gpu=h20", "speedup"): "4.13",
        ("cast", "table5", "vicuna-13b", "eagle3", "nq", "1", "batch=1;gpu=2x4090", "speedup"): "3.12",
    }
    for key, value in expected.items():
        assert idx[key] == value, key


def test_cast_rows_find_the_run_at_their_batch_size_ablation_and_threshold(tmp_path):
    full = {
        "config.method.tree.dynamic_rerank": True,
        "config.method.tree.depth_pruning": True,
        "config.method.tree.breadth_pruning": True,
    }

    def cast_row(batch, c, speedup, **extra):
        shape = {
            "config.method.tree.depth": 9 if batch >= 8 else 13,
            "config.method.tree.top_k": 12,
            "config.method.tree.total_tokens": 72,
        }
        return run_row(
            "cast",
            "humaneval",
            0.0,
            **{
                "config.gen.batch_size": batch,
                **shape,
                **full,
                **{f"config.method.tree.c{i}": c for i in (1, 2, 3)},
                "speedup": speedup,
                **extra,
            },
        )

    eagle3_shape = {"config.method.tree.depth": 7, **PAPER_TREE}
    runs = pd.DataFrame(
        [
            cast_row(1, 3.0, 1.1),
            # another threshold: never Table 1's cell for our model
            cast_row(1, 4.0, 1.9, samples=20, run_dir="/runs/cast-threshold-4"),
            cast_row(
                8,
                2.5,
                1.5,
                run_dir=batched_run_on_disk(
                    tmp_path, "cast8", [1.5, 1.52, 1.48, 1.51, 1.49, 1.5, 1.5, 1.51, 1.49, 1.5]
                ),
            ),
            # CAST's shape without BP: no Table 3 row
            cast_row(8, 2.5, 1.7, **{"config.method.tree.breadth_pruning": False}),
            run_row(
                "cast",
                "humaneval",
                0.0,
                **{
                    "config.gen.batch_size": 8,
                    **eagle3_shape,
                    **full,
                    "config.method.tree.breadth_pruning": False,
                    **{f"config.method.tree.c{i}": 2.5 for i in (1, 2, 3)},
                    "speedup": 1.3,
                },
            ),
            run_row(
                "eagle3",
                "humaneval",
                0.0,
                **{
                    "config.gen.batch_size": 8,
                    **eagle3_shape,
                    "speedup": 1.2,
                    "run_dir": batched_run_on_disk(
                        tmp_path, "eagle8", [1.2, 1.22, 1.18, 1.21, 1.19, 1.2, 1.2, 1.21, 1.19, 1.2]
                    ),
                },
            ),
            run_row(
                "eagle2",
                "humaneval",
                0.0,
                **{
                    "config.gen.batch_size": 8,
                    "config.method.tree.depth": 5,
                    "config.method.tree.top_k": 10,
                    "config.method.tree.total_tokens": 59,
                    "speedup": 0.9,
                },
            ),
            run_row(
                "eagle2",
                "humaneval",
                0.0,
                **{
                    "config.gen.batch_size": 8,
                    "config.method.tree.depth": 2,
                    "config.method.tree.top_k": 2,
                    "config.method.tree.total_tokens": 4,
                    "speedup": 9.0,
                },
            ),
            run_row("eagle", "humaneval", 0.0, **{"config.gen.batch_size": 8, "speedup": 0.8}),
        ]
    )
    ref = reference(
        ("table1", "llama3.1-8b", "cast", "humaneval", 0, "batch=1", "speedup", 5.0),
        ("table2", "llama3.1-8b", "cast", "humaneval", 0, "batch=8", "speedup", 2.6),
        ("table2", "llama3.1-8b", "eagle2", "humaneval", 0, "batch=8", "speedup", 2.0),
        ("table2", "llama3.1-8b", "eagle", "humaneval", 0, "batch=8", "speedup", 1.8),
        ("table3", "", "cast", "", 0, "batch=8;ablation=DR+DP", "speedup", 2.84),
        ("table3", "", "eagle3", "", 0, "batch=8", "speedup", 1.91),
        ("table4", "llama3.1-8b", "cast", "humaneval", 0, "batch=1;gpu=h20", "speedup", 6.0),
    )
    ours = (
        tables.compare(ref, runs, cast.locate("cpu"), "smollm2-135m")
        .query("model == 'smollm2-135m'")
        .set_index("table")
    )
    table2 = ours.loc["table2"].set_index("method")["ours"]
    assert ours.loc["table1", "ours"] == 1.1 and table2["cast"] == 1.5
    assert table2["eagle2"] == 0.9 and table2["eagle"] == 0.8  # EAGLE-2 at its release's shape, not an auto one
    assert ours.loc["table3"].set_index("method").loc["cast", "ours"] == 1.3  # EAGLE-3's tree + DR + DP
    assert ours.loc["table3"].set_index("method").loc["eagle3", "ours"] == 1.2
    assert "h20" in ours.loc["table4", "note"] and pd.isna(ours.loc["table4", "ours"])
    verdict = {v["claim"]: v for v in report.verdicts(cast.CLAIMS, runs)}[
        cast.CLAIMS[[c.source for c in cast.CLAIMS].index("Table 2")].text
    ]
    # the batch-8 pair, clearly faster
    assert "humaneval +0.3 [95% " in verdict["ours"] and "n=10 batches" in verdict["ours"]
    assert verdict["verdict"] == "agrees"  # cpu scale runs batch size 8 on HumanEval alone, and the claim's row says so


def test_cast_paper_scale_cells_take_the_models_threshold():
    """Vicuna-13B's Table 1 cell is its threshold-4 run, never a threshold-3 run of the same
    model, dataset and shape (Table 3's runs once were)."""
    base = {
        "config.model.name": "vicuna-13b",
        "config.hardware.name": "gpu",
        "config.gen.batch_size": 1,
        "config.method.tree.depth": 13,
        "config.method.tree.top_k": 12,
        "config.method.tree.total_tokens": 72,
        "config.method.tree.dynamic_rerank": True,
        "config.method.tree.depth_pruning": True,
        "config.method.tree.breadth_pruning": True,
    }
    runs = pd.DataFrame(
        [
            run_row(
                "cast",
                "humaneval",
                0.0,
                samples=164,
                **{**base, **{f"config.method.tree.c{i}": 3.0 for i in (1, 2, 3)}, "speedup": 9.9},
            ),
            run_row(
                "cast",
                "humaneval",
                0.0,
                samples=80,
                **{**base, **{f"config.method.tree.c{i}": 4.0 for i in (1, 2, 3)}, "speedup": 5.1},
            ),
        ]
    )
    ref = reference(("table1", "vicuna-13b", "cast", "humaneval", 0, "batch=1", "speedup", 5.18))
    assert tables.compare(ref, runs, cast.locate("paper")).loc[0, "ours"] == 5.1


def test_cast_paper_scale_sweeps_cover_the_batch_sizes_gpus_and_thresholds():
    result = run_in_process([sys.executable, "runners/cast.py", "--scale", "paper"])
    assert result.returncode == 0, result.stderr
    lines = [l for l in result.stdout.splitlines() if " -m specbench -m " in l]
    assert {f"gen.batch_size={b}" for b in (1, 2, 4, 8, 16, 32)} <= {w for l in lines for w in l.split()}
    assert any("hardware.name=h20" in l for l in lines) and any("hardware.name=2x4090" in l for l in lines)
    table1 = [l for l in lines if l.split(":")[0].endswith("table1") and "method=cast" in l]
    assert any("vicuna-13b" in l and "method.tree.c1=4.0" in l for l in table1)
    assert any("llama3.1-8b" in l and "method.tree.c1=3.0" in l for l in table1)
    batch8 = [l for l in lines if "method=cast" in l and "gen.batch_size=8" in l]
    assert batch8 and all("method.tree.c1=2.5" in l for l in batch8)
    full = [l for l in batch8 if "depth_pruning=True" in l and "breadth_pruning=True" in l]
    assert full and all("method.tree.depth=9" in l and "method.tree.top_k=12" in l for l in full)
    # Table 3's ablation rows: EAGLE-3's tree (depth 7, top_k 10, its total_tokens) with the components
    ablations = [
        l
        for l in lines
        if l.split(":")[0].endswith("table3")
        and "method=cast" in l
        and not ("depth_pruning=True" in l and "breadth_pruning=True" in l)
    ]
    assert len(ablations) == 3 * 5 and all(
        "method.tree.depth=7 " in l and "method.tree.top_k=10 " in l and "method.tree.total_tokens=60 " in l
        for l in ablations
    )


@pytest.mark.slow
def test_tiny_cast_replication_at_batch_size_8_and_its_notebook(tmp_path, monkeypatch):
    args = [
        sys.executable,
        "runners/cast.py",
        "--prompts",
        "1",
        "--max-new-tokens",
        "4",
        "--only",
        "table2",
        "--datasets",
        "humaneval",
        "--outputs",
        str(tmp_path / "runs"),
        "--results",
        str(tmp_path / "results"),
        *SMALL_COSTS,
    ]
    result = run_in_process(args)
    assert result.returncode == 0, result.stderr[-3000:]
    table = (tmp_path / "results" / "tables" / "table2.md").read_text()
    assert "| smollm2-135m | cast" in table
    assert {"figure5.png", "costs.png"} <= {p.name for p in (tmp_path / "results" / "figures").iterdir()}
    printed = execute_notebook("cast", tmp_path / "runs", tmp_path / "notebook", monkeypatch)
    assert "finished runs" in printed and "Table 2" in printed and "CAST" in printed


def test_cast_cpu_scale_gives_every_point_enough_groups_for_an_interval(tmp_path):
    """Table 1 at T=0 (the headline) runs 20 prompts, every other batch-size-1 point a claim
    reads 10, a batched point a claim reads ten batches (a batch's rows share one wall time, so
    batches are what its interval resamples); the rows no claim reads (Lookahead and EAGLE-1/2)
    five prompts or batches. Table 1 at T=1 and Figure 4 compare runs of their own sweep and
    answer 40 tokens; every other point the headline's 64 (the SpS/PLD rows pair with its
    prompts, Table 3's batch size 1 is its runs). A quick look stays one prompt or one batch."""

    def points(prompts):
        found = set()
        for s in cast.sweeps("cpu", prompts, cast.CPU_MAX_NEW_TOKENS, tmp_path):
            setting = dict(o.split("=", 1) for o in s.overrides if "=" in o)
            found.add(
                (
                    s.name,
                    setting.get("method"),
                    setting.get("gen.temperature"),
                    int(setting["gen.batch_size"]),
                    int(setting["dataset.limit"]),
                    int(setting["gen.max_new_tokens"]),
                )
            )
        return found

    found = points(cast.CPU_PROMPTS)
    headline = {p for p in found if p[0] in ("table1", "table1-eagle3") and p[2] == "0"}
    table_only = {p for p in found if p[1] in ("lookahead,eagle2", "eagle", "eagle2")}
    assert headline and {(limit, tokens) for *_, limit, tokens in headline} == {(20, 64)}
    assert {p[1] for p in table_only} == {"lookahead,eagle2", "eagle", "eagle2"} and {p[0] for p in table_only} == {
        "table1-baselines",
        "table2-eagle",
    }
    assert {limit // batch for _, _, _, batch, limit, _ in table_only} == {5}
    assert all(limit >= 10 for _, _, _, batch, limit, _ in found - table_only if batch == 1)
    assert {limit // batch for _, _, _, batch, limit, _ in found - table_only if batch > 1} == {10}
    short = {p for p in found if p[0] == "figure4" or (p[0] in ("table1", "table1-eagle3") and p[2] == "1")}
    assert short and {tokens for *_, tokens in short} == {40} and {tokens for *_, tokens in found - short} == {64}
    assert {limit // batch for _, _, _, batch, limit, _ in points(1)} == {1}


def test_cast_figure3_plots_accepted_tokens_against_tree_confidence(tmp_path):
    """Figure 3's points are the verifications of Table 1's batch-size-1 T=0 runs: the verified
    tree's summed confidence and the draft tokens it accepted (accept length - 1)."""

    def run_dir(name, scores, lengths):
        path = tmp_path / name
        path.mkdir()
        record = {"id": "0", "method": {"tree_scores": scores, "accept_lengths": lengths}}
        (path / "samples.jsonl").write_text(
            json.dumps(record) + "\n" + json.dumps({**record, "id": "1", "method": {"accept_lengths": [2]}})
        )
        return str(path)

    cast_shape = cast.cast_filters("smollm2-135m", 1)
    runs = pd.DataFrame(
        [
            run_row("cast", "humaneval", 0.0, **cast_shape, run_dir=run_dir("cast", [0.5, 1.5, 3.0], [1, 3, 4])),
            # T=1: not Figure 3's
            run_row("cast", "humaneval", 1.0, **cast_shape, run_dir=run_dir("cast-t1", [9.0], [9])),
            run_row(
                "eagle3",
                "gsm8k",
                0.0,
                **{"config.gen.batch_size": 1, **cast.eagle3_filters("smollm2-135m")},
                run_dir=run_dir("eagle3", [1.0, 2.0], [2, 2]),
            ),
        ]
    )
    steps = cast.confidence_steps(runs, "cast")
    # the record without scores adds nothing
    assert steps[["score", "accepted"]].values.tolist() == [[0.5, 0], [1.5, 2], [3.0, 3]]
    assert cast.confidence_steps(runs, "eagle3")["accepted"].tolist() == [1, 1]
    written = cast.confidence_figure(runs, tmp_path / "figures")
    assert {p.name for p in written} >= {"figure3.png"}
