"""MARS's replication: the transcription of the paper's tables (results/reference/mars.csv; mars.notes.md), the runs
runners/mars.py reads for its cells and claims, and a tiny replication."""

import sys
from collections import Counter

import pandas as pd
import pytest
import yaml
from conftest import run_in_process
from reference_csv import HEADER, KEY, load
from replicate_fixtures import SMALL_COSTS, execute_notebook

from runners import mars as runner
from specbench import ROOT
from specbench.replicate import tables


def reference_rows(**filters):
    ref = tables.read_reference(ROOT / "results" / "reference" / "mars.csv")
    for key, value in filters.items():
        ref = ref[ref[key] == value]
    return ref


def located(table, method, temperature, setting="", scale="cpu", model="smollm2-135m"):
    row = pd.Series(
        {
            "table": table,
            "model": model,
            "method": method,
            "dataset": "gsm8k",
            "temperature": temperature,
            "setting": setting,
        }
    )
    return runner.locate(scale)(row)


# Expected number of published numbers per table. Placeholder cells ("–" / "\" for the
# tau of the autoregressive baseline) are not rows.
EXPECTED_COUNTS = {
    # Vicuna-13B: 8 methods (sps, lookahead, pld, medusa, eagle, eagle2, eagle3, mars) plus
    # 5 other models x 2 methods (eagle3, mars) = 18 method rows;
    # each row: 6 datasets (mt_bench, humaneval, gsm8k, alpaca, cnn_dm, mean) x 2 metrics
    # (speedup, tau) = 12 -> 18 * 12 = 216.
    "table1": 216,
    # Qwen3-32B, 2 datasets x 5 temperatures:
    # MARS rows K in {6, 9, 12, 15}: 4 x 3 metrics (speedup, tau, accuracy) = 12;
    # baseline (ar) row: speedup + accuracy = 2 (tau printed as "\")
    # -> 2 * 5 * (12 + 2) = 140.
    "table2": 140,
    # ROUGE-L on CNN/DM: 3 methods (ar, eagle3, mars) x 5 models = 15.
    "table3": 15,
    # WMT19: 10 rows (ar, eagle3, mars at 8 thetas) x 3 models x 2 metrics (bleu, chrf) = 60.
    "table4": 60,
    # 2 draft->target pairs x 3 datasets x (ar: speedup + quality = 2,
    # sps: 3, sps_mars: 3 = 8) = 48 (ar tau printed as "–").
    "table5": 48,
    # T=0: 3 models x 3 datasets (gsm8k, humaneval, mean) x
    # (ar: speedup + accuracy = 2, eagle3: 3, mars: 3 = 8) = 72.
    "table6": 72,
    # MT-Bench judge scores: 5 models x 3 methods x 9 columns (8 categories + avg) = 135.
    "table7": 135,
}


def load_rows():
    return load("mars")


def lookup(rows, **key):
    hits = [r for r in rows if all(r[k] == v for k, v in key.items())]
    assert len(hits) == 1, (key, hits)
    return hits[0]["value"]


def test_rouge_tolerance_is_the_papers_and_the_published_table_meets_it():
    # §4.4: "within 0.001-0.002 of the baseline across all five models"
    assert runner.ROUGE_TOLERANCE == 0.002
    table3 = reference_rows(table="table3").pivot(index="model", columns="method", values="published")
    gaps = (table3["mars"] - table3["ar"]).abs()
    assert len(gaps) == 5 and (gaps <= runner.ROUGE_TOLERANCE).all()
    assert round(gaps.mean(), 4) == 0.0008  # Table 3's caption


def test_t1_cells_read_the_release_rule_and_table6_reads_algorithm_1():
    assert located("table1", "mars", 1.0)[0]["config.method.verifier.rule"] == "release"
    assert located("table5", "sps_mars", 1.0, "draft=qwen3-0.6b;gamma=6")[0]["config.method.verifier.rule"] == "release"
    assert located("table6", "mars", 0.0)[0]["config.method.verifier.rule"] == "paper"


def test_each_table5_pair_has_its_own_run_or_says_why_not():
    at_paper = [
        located("table5", "sps", 1.0, f"draft={draft};gamma=6", "paper", model)[0]
        for model, draft in (("qwen3-32b", "qwen3-0.6b"), ("llama3.1-70b", "llama3.1-8b"))
    ]
    assert [f["config.method.drafter.model.name"] for f in at_paper] == ["qwen3-0.6b", "llama3.1-8b"]
    assert [f["config.model.name"] for f in at_paper] == ["qwen3-32b", "llama3.1-70b"]
    # cpu scale has one draft pair: it is shown once, the other pair says why it has none
    assert located("table5", "sps", 1.0, "draft=qwen3-0.6b;gamma=6")[0]["config.method.tree.gamma"] == 6
    assert located("table5", "sps", 1.0, "draft=llama3.1-8b;gamma=6") == runner.CPU_PAIR_ONLY
    # Table 1's SpS row is not a Table 5 pair
    assert isinstance(located("table1", "sps", 1.0, "draft=vicuna-68m"), tuple)


def test_table2_at_cpu_scale_reads_the_budget_where_k_adds_nodes():
    filters = located("table2", "mars", 1.0, "K=15")[0]
    assert filters["config.method.tree.depth"] == 14
    assert (filters["config.method.tree.top_k"], filters["config.method.tree.total_tokens"]) == (4, 200)
    paper = located("table2", "mars", 1.0, "K=15", "paper", "qwen3-32b")[0]
    # the release's, at every K
    assert (paper["config.method.tree.top_k"], paper["config.method.tree.total_tokens"]) == (10, 50)


def test_every_baseline_drafts_seven_tokens_where_its_method_allows():
    # §4.1: "we fix the draft length to 7 for all methods"
    assert (
        runner.DEFAULTS["mars"]["config.method.tree.depth"] + 1
        == 7
        == runner.DEFAULTS["eagle2"]["config.method.tree.depth"] + 1
    )
    assert runner.DEFAULTS["sps"]["config.method.tree.gamma"] == 7 == runner.DEFAULTS["pld"]["config.method.tree.gamma"]
    assert runner.DEFAULTS["lookahead"]["config.method.tree.ngram"] - 1 == 7
    assert max(len(choice) for choice in yaml.safe_load(runner.EAGLE_TREE)) == 7


def test_the_mars_reference_header():
    header, _ = load_rows()
    assert header == HEADER


def test_rows_are_well_formed():
    _, rows = load_rows()
    for r in rows:
        assert len(r) == len(HEADER), r
        assert r["paper"] == "mars"
        float(r["value"])
        float(r["temperature"])


def test_no_duplicate_keys():
    _, rows = load_rows()
    keys = Counter(tuple(r[k] for k in KEY) for r in rows)
    dups = [k for k, n in keys.items() if n > 1]
    assert not dups, dups


def test_the_mars_reference_counts_per_table():
    _, rows = load_rows()
    counts = Counter(r["table"] for r in rows)
    assert dict(counts) == EXPECTED_COUNTS
    assert sum(EXPECTED_COUNTS.values()) == 686


def test_the_mars_reference_spot_checks():
    _, rows = load_rows()
    t1 = dict(paper="mars", table="table1", temperature="1", setting="")
    assert lookup(rows, **t1, model="vicuna-13b", method="mars", dataset="mt_bench", metric="speedup") == "3.75"
    assert lookup(rows, **t1, model="vicuna-13b", method="mars", dataset="mt_bench", metric="tau") == "7.11"
    assert lookup(rows, **t1, model="llama3.1-70b", method="mars", dataset="mean", metric="speedup") == "4.76"
    assert (
        lookup(
            rows,
            table="table1",
            model="vicuna-13b",
            method="sps",
            dataset="cnn_dm",
            setting="draft=vicuna-68m",
            metric="tau",
        )
        == "1.89"
    )
    assert (
        lookup(
            rows,
            table="table2",
            model="qwen3-32b",
            method="mars",
            dataset="humaneval",
            temperature="0.4",
            setting="K=9",
            metric="tau",
        )
        == "5.94"
    )
    assert (
        lookup(
            rows,
            table="table2",
            model="qwen3-32b",
            method="ar",
            dataset="gsm8k",
            temperature="1",
            setting="",
            metric="accuracy",
        )
        == "0.857"
    )
    assert lookup(rows, table="table3", model="vicuna-13b", method="ar", metric="rouge_l") == "0.2272"
    assert lookup(rows, table="table4", model="qwen3-8b", method="mars", setting="theta=0.9", metric="chrf") == "59.81"
    assert (
        lookup(
            rows,
            table="table5",
            model="llama3.1-70b",
            method="sps_mars",
            dataset="humaneval",
            setting="draft=llama3.1-8b;gamma=6",
            metric="speedup",
        )
        == "4.36"
    )
    assert (
        lookup(
            rows,
            table="table6",
            model="llama3.1-8b",
            method="eagle3",
            dataset="mean",
            temperature="0",
            metric="speedup",
        )
        == "3.93"
    )
    assert (
        lookup(rows, table="table7", model="qwen3-32b", method="mars", setting="category=coding", metric="judge_score")
        == "9.29"
    )


def test_placeholder_cells_are_absent():
    # The autoregressive baseline has no tau in the paper ("–" or "\"), so no ar/tau rows.
    _, rows = load_rows()
    assert not [r for r in rows if r["method"] == "ar" and r["metric"] == "tau"]


@pytest.mark.slow
def test_tiny_mars_replication_and_its_notebook(tmp_path, monkeypatch):
    args = [
        sys.executable,
        "runners/mars.py",
        "--prompts",
        "1",
        "--max-new-tokens",
        "6",
        "--only",
        "table1",
        "table6",
        "--datasets",
        "gsm8k",
        "--outputs",
        str(tmp_path / "runs"),
        "--results",
        str(tmp_path / "results"),
        *SMALL_COSTS,
    ]
    result = run_in_process(args)
    assert result.returncode == 0, result.stderr[-3000:]
    assert {"figure1.png", "figure4.pdf"} <= {p.name for p in (tmp_path / "results" / "figures").iterdir()}
    printed = execute_notebook("mars", tmp_path / "runs", tmp_path / "notebook", monkeypatch)
    assert "finished runs" in printed and "claims agree in direction" in printed and "table6" in printed
    assert (tmp_path / "notebook" / "tables" / "table1.tex").exists()
