"""Checks the hand transcription of the CAST and EntMTP papers' tables
(results/reference/cast.csv, results/reference/entmtp.csv; see the .notes.md files next to them)."""

from collections import Counter

from reference_csv import HEADER, KEY, load
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
# EntMTP (vicuna-7b, T=0.7, 3 benchmarks: humaneval, gsm8k, sharegpt):
#   table1: 5 methods (ar, medusa, hydra, entmtp static, entmtp tau) x 3 benchmarks
#           x 3 metrics (tok_per_s, speedup, tau) = 45
#   table2: 5 frontier trees x 3 benchmarks x 3 numbers (biased, unbiased, relative bias %) = 45
#           (the node count n and depth d of each tree are encoded in `setting`)
ENTMTP_EXPECTED = {"table1": 5 * 3 * 3, "table2": 5 * 3 * 3}


def check_common(name):
    header, rows = load(name)
    assert header == HEADER
    keys = Counter(tuple(r[k] for k in KEY) for r in rows)
    dupes = [k for k, n in keys.items() if n > 1]
    assert not dupes, dupes
    for r in rows:
        assert len(r) == len(HEADER), r
        assert r["paper"] == name
        float(r["value"])
    return rows


def index(rows):
    return {tuple(r[k] for k in KEY): r["value"] for r in rows}


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
    assert t1 == {("0", "vicuna-13b"): 48, ("0", "llama3.3-70b"): 12, ("0", "llama3.1-8b"): 12,
                  ("0", "dsl-8b"): 12, ("1", "vicuna-13b"): 30, ("1", "llama3.3-70b"): 12,
                  ("1", "llama3.1-8b"): 12, ("1", "dsl-8b"): 12}
    t2 = Counter(r["model"] for r in rows if r["table"] == "table2")
    assert t2 == {"qwen2-7b": 36, "llama3.1-8b": 48, "vicuna-13b": 48, "vicuna-33b": 36}
    t3 = Counter(r["setting"].split(";", 1)[-1] if ";" in r["setting"] else "" for r in rows
                 if r["table"] == "table3")
    assert t3 == {"": 5, "ablation=DR": 5, "ablation=DR+DP": 5, "ablation=DR+BP": 5,
                  "ablation=DR+DP+BP": 5}


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


def test_entmtp_common_and_counts():
    rows = check_common("entmtp")
    assert Counter(r["table"] for r in rows) == ENTMTP_EXPECTED
    assert {r["model"] for r in rows} == {"vicuna-7b"}
    assert {r["temperature"] for r in rows} == {"0.7"}
    assert {r["dataset"] for r in rows} == {"humaneval", "gsm8k", "sharegpt"}
    t1 = Counter((r["method"], r["setting"]) for r in rows if r["table"] == "table1")
    assert t1 == {("ar", ""): 9, ("medusa", "tree=default"): 9, ("hydra", "tree=default"): 9,
                  ("entmtp", "policy=static"): 9, ("entmtp", "policy=tau"): 9}
    t2 = Counter(r["metric"] for r in rows if r["table"] == "table2")
    assert t2 == {"accept_length_biased": 15, "accept_length_unbiased": 15,
                  "accept_length_bias_pct": 15}


def test_entmtp_table2_delta_consistent():
    # the printed relative bias is (biased - self) / self in %, to 0.1; tolerance 0.1 because the
    # paper's rounding is not exact (gsm8k n=23: (2.888 - 2.841) / 2.841 = 1.65%, printed +1.6%)
    _, rows = load("entmtp")
    cells = {}
    for r in rows:
        if r["table"] == "table2":
            cells.setdefault((r["dataset"], r["setting"]), {})[r["metric"]] = float(r["value"])
    assert len(cells) == 15
    for key, c in cells.items():
        rel = 100 * (c["accept_length_biased"] - c["accept_length_unbiased"]) / c["accept_length_unbiased"]
        assert abs(rel - c["accept_length_bias_pct"]) <= 0.1, key


def test_entmtp_spot_checks():
    _, rows = load("entmtp")
    idx = index(rows)
    base = ("entmtp",)
    expected = {
        base + ("table1", "vicuna-7b", "entmtp", "gsm8k", "0.7", "policy=tau", "tok_per_s"): "112.0",
        base + ("table1", "vicuna-7b", "hydra", "humaneval", "0.7", "tree=default", "tau"): "3.06",
        base + ("table1", "vicuna-7b", "entmtp", "sharegpt", "0.7", "policy=tau", "speedup"): "3.47",
        base + ("table1", "vicuna-7b", "ar", "gsm8k", "0.7", "", "tok_per_s"): "33.7",
        base + ("table2", "vicuna-7b", "hydra", "gsm8k", "0.7", "tree=greedy_frontier;nodes=11;depth=4",
                "accept_length_biased"): "2.593",
        base + ("table2", "vicuna-7b", "hydra", "humaneval", "0.7", "tree=greedy_frontier;nodes=14;depth=4",
                "accept_length_bias_pct"): "-1.2",
    }
    for key, value in expected.items():
        assert idx[key] == value, key
