"""Checks the hand transcription of the TALON paper's result tables (results/reference/talon.csv)."""

from collections import Counter

from reference_csv import HEADER, KEY
from reference_csv import load as load_paper

# Only Tables 1 and 3 hold numeric results (Table 2 lists draft checkpoints; the ablations on
# N, mu and robust init are figures only). Both have the same layout:
#   vicuna-13b: 6 methods (eagle3, sps, medusa, hydra, opt_tree, talon)
#   dsl-8b, llama3.1-8b, qwen3-8b, qwen3-32b: 2 methods each (eagle3, talon) -> 4 x 2 = 8
#   (6 + 8) = 14 method rows x 6 datasets (no mean column) x 2 metrics (tau, speedup) = 168
EXPECTED_PER_TABLE = {"table1": 14 * 6 * 2, "table3": 14 * 6 * 2}


def load():
    return load_paper("talon")


def test_header():
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


def test_counts_per_table():
    _, rows = load()
    assert Counter(r["table"] for r in rows) == EXPECTED_PER_TABLE
    temps = {(r["table"], r["temperature"]) for r in rows}
    assert temps == {("table1", "0"), ("table3", "1")}
    # per-model method counts within each table (x 6 datasets x 2 metrics)
    for table in EXPECTED_PER_TABLE:
        per_model = Counter(r["model"] for r in rows if r["table"] == table)
        assert per_model == {"vicuna-13b": 6 * 12, "dsl-8b": 2 * 12, "llama3.1-8b": 2 * 12,
                             "qwen3-8b": 2 * 12, "qwen3-32b": 2 * 12}


def test_spot_checks():
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
