"""The benchmark scripts are sweeps of the runner: its summaries, resumable by config hash."""

import json
import sys
from pathlib import Path

import pytest
from conftest import run_in_process

ROOT = Path(__file__).resolve().parents[2]
SMALL = [
    "hardware=cpu-fp32",
    "costs.max_n=8",
    "costs.repeats=1",
    "costs.calibration_prompts=1",
    "costs.calibration_tokens=12",
]


@pytest.mark.slow
def test_bench_methods_sweeps_the_runner_and_resumes(tmp_path):
    out, runs = tmp_path / "methods.json", tmp_path / "runs"
    args = [
        sys.executable,
        "scripts/bench_methods.py",
        "--methods",
        "pld",
        "pld4=pld",
        "--set",
        "pld4:method.tree.gamma=4",
        "--datasets",
        "mt_bench",
        "--prompts",
        "2",
        "--max-new-tokens",
        "8",
        "--temperatures",
        "0",
        "--out",
        str(out),
        "--runs",
        str(runs),
        *SMALL,
    ]
    first = run_in_process(args)
    assert first.returncode == 0, first.stderr[-2000:]
    [result] = json.loads(out.read_text())["results"]
    rows = result["methods"]
    assert set(rows) == {"ar", "pld", "pld4"}
    assert rows["pld"]["identical_to_ar"] == 1.0 and rows["pld4"]["identical_to_ar"] == 1.0  # lossless, fp32
    assert rows["pld"]["predicted_speedup"] > 0 and rows["ar"]["speedup"] == 1.0
    [pld4_run] = (runs / "pld4").glob("*/summary.json")
    assert json.loads(pld4_run.read_text())["config"]["method"]["tree"]["gamma"] == 4  # the label's --set
    points = [json.loads(line) for line in out.with_suffix(".samples.jsonl").read_text().splitlines()]
    assert sorted(p["method"] for p in points) == ["pld", "pld", "pld4", "pld4"] and all(
        p["target_forwards"] > 0 for p in points
    )
    # a second sweep finds every sample done: nothing is decoded again
    before = {p: p.read_text() for p in runs.glob("*/*/samples.jsonl")}
    again = run_in_process(args)
    assert again.returncode == 0, again.stderr[-2000:]
    assert {p: p.read_text() for p in runs.glob("*/*/samples.jsonl")} == before


def test_bench_speed_refuses_an_empty_comparison_in_one_line(tmp_path):
    result = run_in_process(
        [sys.executable, "scripts/bench_speed.py", "--hf-prompts", "0", "--runs", str(tmp_path), "--out", str(tmp_path)]
    )
    assert result.returncode == 2 and "Traceback" not in result.stderr
    assert result.stderr.strip().splitlines()[-1] == "error: --hf-prompts/--prompts: must be at least 1 (got 0 and 10)"


def test_bench_methods_refuses_a_bad_override_in_one_line(tmp_path):
    """The runner's one-line errors reach a benchmark script's user as they reach the CLI's."""
    result = run_in_process(
        [
            sys.executable,
            "scripts/bench_methods.py",
            "--methods",
            "pld",
            "--datasets",
            "mt_bench",
            "--prompts",
            "1",
            "--temperatures",
            "0",
            "--out",
            str(tmp_path / "m.json"),
            "--runs",
            str(tmp_path / "runs"),
            "hardware.threads=0",
        ]
    )
    assert result.returncode == 2 and "Traceback" not in result.stderr
    assert result.stderr.strip().splitlines()[-1].startswith("error: hardware.threads: must be an integer >= 1")


def test_transformers_gets_an_own_vocabulary_draft_over_the_full_vocabulary(target, draft):
    """transformers' assistant must score the target's vocabulary: a draft with its own gets
    the same layers under a full output layer, equal on its rows and -inf elsewhere."""
    import torch

    from specbench.drafters.small_lm import SmallLMDrafter

    sys.path.insert(0, str(ROOT / "scripts"))
    from bench_vs_transformers import transformers_assistant
    from conftest import VOCAB, own_vocabulary_copy

    own, vocab = own_vocabulary_copy(draft, list(range(16, 94)) + [1, 2])
    assert transformers_assistant(SmallLMDrafter(draft, VOCAB)) is draft
    expanded = transformers_assistant(SmallLMDrafter(own, VOCAB, vocab=vocab))
    ids = torch.randint(0, VOCAB, (2, 7), generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        assert torch.allclose(expanded(input_ids=ids).logits, vocab.to_target(own(input_ids=ids).logits), atol=1e-5)


def test_bench_families_compares_our_ar_with_transformers_per_family(tmp_path):
    """At its smallest setting (tiny shapes, one prompt, 8 tokens): a row per family with a
    ratio and identical ids (fp32), the dense families on the lean forward, Qwen3-MoE on its own."""
    from specbench.models.families import FAMILIES

    out = tmp_path / "families.json"
    result = run_in_process(
        [
            sys.executable,
            "scripts/bench_families.py",
            "--shapes",
            "tiny",
            "--prompts",
            "1",
            "--prompt-tokens",
            "12",
            "--max-new-tokens",
            "8",
            "--threads",
            "1",
            "--out",
            str(out),
        ]
    )
    assert result.returncode == 0, result.stderr[-2000:]
    rows = {r["family"]: r for r in json.loads(out.read_text())["rows"]}
    assert set(rows) == set(FAMILIES) and all(r["identical"] == 1 and r["median_ratio"] > 0 for r in rows.values())
    assert {f for f, r in rows.items() if r["forward"] == "lean"} == set(FAMILIES) - {"qwen3-moe"}
    assert rows["qwen3-moe"]["forward"].startswith("hf (Qwen3MoeForCausalLM: mixture-of-experts")
    assert "| qwen3-moe | tiny | Qwen3MoeForCausalLM |" in result.stdout


def test_the_drafting_off_rows_are_reported_as_the_protocols_null(monkeypatch):
    """make bench's rows that chose drafting off decode as AR: their spread is the protocol's
    own reading of no speedup, said beside the table; without such rows nothing is said."""
    monkeypatch.syspath_prepend(str(ROOT / "scripts"))
    from bench_speed import null_line

    rows = [
        {"speedup": 1.14, "drafting_off": True},
        {"speedup": 0.99, "drafting_off": True},
        {"speedup": 1.30, "drafting_off": False},
        {"speedup": 1.25},
    ]
    line = null_line(rows)
    assert line.startswith("2 rows chose drafting off") and "0.99-1.14x (mean 1.06x)" in line
    assert null_line(rows[2:]) is None
