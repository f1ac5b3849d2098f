"""A run's summary, its printed table and the bench tables say exactly what ran: the
precision the weights were read in, the checkout's state, and each skipped metric once."""

import json
import subprocess
from dataclasses import asdict

from conftest import ROOT

from specbench.data.questions import Sample
from specbench.engine.kernels import Compiled
from specbench.metrics.records import MethodRun
from specbench.run import summary as summary_mod
from specbench.run.config import compose_config
from specbench.run.plan import Decision, RunPlan
from specbench.run.table import print_summary

FP16_PRECISION = "fp32 activations on fp16 weights"


def sample_run(text: str) -> dict:
    return asdict(
        MethodRun(
            new_tokens=4,
            seconds=0.5,
            prefill_seconds=0.1,
            target_forwards=2,
            draft_forwards=2,
            accept_lengths=[2, 2],
            turn_ids=[[5, 6, 7, 8]],
            turn_texts=[text],
            stop_reasons=["length"],
            prompt_tokens=[9],
            nll=1.0,
            step_draft_forwards=[1, 1],
            tree_widths=[[1], [1]],
            accepted_sibling_ranks=[[0], [0]],
            verifier_notes={},
        )
    )


def finished_run(tmp_path, decisions: dict, dataset: str = "mt_bench") -> dict:
    """The summary of a paired two-sample run whose plan decided `decisions`."""
    cfg = compose_config(["method=pld", f"dataset={dataset}", "hardware=cpu"])
    (tmp_path / "decisions.json").write_text(json.dumps(decisions))
    samples = [Sample(str(81 + i), "writing", [f"question {i}"]) for i in range(2)]
    records = [{"id": s.id, "method": sample_run("answer"), "baseline": sample_run("answer")} for s in samples]
    return summary_mod.summarize(cfg, samples, records, tmp_path, paired=True, cached_baseline=None)


def test_compiled_says_what_precision_the_forward_computes_in():
    assert Compiled(fp16_weights=True).precision("float32") == FP16_PRECISION
    assert Compiled(packed_from=4, int8_drafts_below=8).precision("float32") == "float32"
    assert Compiled(float_attention=True).precision("bfloat16") == "bfloat16, one-token attention in fp32"
    assert Compiled(float_attention=True).precision("float32") == "float32"
    plan = RunPlan(
        dtype=Decision("float32"),
        precision=FP16_PRECISION,
        forward=Decision("LeanTreeLM-fp16-weights", "lean"),
        tree=Decision({}),
        profile=None,
        drafter=None,
        tree_overhead=None,
    )
    decisions = plan.to_json("cpu")
    assert decisions["dtype"] == "float32" and decisions["precision"] == FP16_PRECISION
    assert RunPlan.from_json(json.loads(json.dumps(decisions))) == plan  # decisions.json holds the whole plan


def test_fp16_weights_are_reported_beside_the_raw_dtype(tmp_path, capsys, monkeypatch):
    """hardware=cpu on an AVX2 CPU: dtype float32 stays for the programs that read it, and
    the summary and the printed table say the weights were fp16."""
    monkeypatch.delenv("SPECBENCH_JUDGE_URL", raising=False)
    monkeypatch.setenv("COLUMNS", "400")  # the environment line unwrapped
    summary = finished_run(
        tmp_path, {"dtype": "float32", "precision": FP16_PRECISION, "forward": "LeanTreeLM-fp16-weights"}
    )
    environment = summary["environment"]
    assert environment["dtype"] == "float32" and environment["precision"] == FP16_PRECISION
    print_summary(summary)
    [line] = [line for line in capsys.readouterr().out.splitlines() if "threads=" in line]
    assert FP16_PRECISION in line and " float32 " not in line


def test_the_commit_says_whether_the_checkout_had_uncommitted_changes(tmp_path):
    """Modified or new files make it dirty; results the tool writes (results/) do not."""

    def git(*args):
        subprocess.run(["git", *args], cwd=tmp_path, check=True, capture_output=True)

    git("init", "-q")
    (tmp_path / "code.py").write_text("x = 1\n")
    (tmp_path / "results").mkdir()
    (tmp_path / "results" / "table.md").write_text("| a |\n")
    git("add", "-A")
    git("-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "first")
    commit, dirty = summary_mod.git_state(tmp_path)
    assert len(commit) == 40 and dirty is False
    (tmp_path / "results" / "table.md").write_text("| b |\n")
    (tmp_path / "results" / "new.md").write_text("new\n")
    assert summary_mod.git_state(tmp_path) == (commit, False)
    (tmp_path / "code.py").write_text("x = 2\n")
    assert summary_mod.git_state(tmp_path) == (commit, True)
    git("checkout", "code.py")
    (tmp_path / "new_module.py").write_text("y = 1\n")
    assert summary_mod.git_state(tmp_path) == (commit, True)
    assert summary_mod.git_state(tmp_path.parent / "not-a-checkout") == (None, None)


def test_every_summary_carries_the_dirty_flag_beside_its_commit(tmp_path, monkeypatch):
    monkeypatch.delenv("SPECBENCH_JUDGE_URL", raising=False)
    environment = finished_run(tmp_path, {"dtype": "float32"})["environment"]
    assert (environment["git_commit"], environment["git_dirty"]) == summary_mod.git_state(ROOT)
    assert environment["precision"] == "float32"  # a plan that named no precision ran in its dtype


def test_an_unconfigured_judge_is_reported_once(tmp_path, capsys, monkeypatch):
    """MT-Bench scores the method and the paired baseline: the skip is one line, not one per side."""
    monkeypatch.delenv("SPECBENCH_JUDGE_URL", raising=False)
    summary = finished_run(tmp_path, {"dtype": "float32"})
    assert summary["quality"]["mt_bench_judge"].startswith("skipped: set SPECBENCH_JUDGE_URL")
    assert summary["baseline_quality"] == summary["quality"]
    print_summary(summary)
    captured = capsys.readouterr()
    assert (captured.out + captured.err).count("mt_bench_judge skipped") == 1


def bench_summary(precision: str) -> dict:
    """A summary as bench scripts read it (the fields their rows take)."""
    results = {
        "samples": 10,
        "tau": 2.0,
        "delta": 1.0,
        "tok_per_s": 30.0,
        "mean_latency_s": 4.0,
        "target_nll_per_token": 1.0,
        "verifier": {},
    }
    return {
        "results": results,
        "baseline": {"tok_per_s": 20.0, "tau": 1.0, "delta": 0.0, "target_nll_per_token": 1.0, "verifier": {}},
        "speedup": 1.5,
        "speedup_ci95": [1.4, 1.6],
        "speedup_median_per_sample": 1.5,
        "cost_model": {"predicted_speedup": 1.4, "engine_overhead_share": 0.1},
        "agreement_with_baseline": {"exact_match_rate": 1.0},
        "environment": {"dtype": "float32", "precision": precision, "forward": "LeanTreeLM-fp16-weights"},
    }


def test_bench_tables_name_the_precision_a_row_ran_in(tmp_path, monkeypatch, capsys):
    monkeypatch.syspath_prepend(str(ROOT / "scripts"))
    import bench_batch
    import bench_methods
    import bench_speed

    row = bench_speed.method_row("eagle3", "mt_bench", bench_summary(FP16_PRECISION))
    assert row["dtype"] == "float32" and row["precision"] == FP16_PRECISION
    assert f"| {FP16_PRECISION} (LeanTreeLM-fp16-weights) |" in bench_speed.method_line(
        row, {"float32": 20.0}, "float32"
    )

    point = bench_batch.point("eagle3", "mt_bench", 1, bench_summary(FP16_PRECISION))
    assert point["dtype"] == "float32" and point["precision"] == FP16_PRECISION
    args = type("Args", (), {"out": tmp_path, "max_new_tokens": 16})()
    lines = bench_batch.write([point], args, {"hardware": {"dtype": "auto"}}, {"cpu_model": "test"})
    assert f"ran in {FP16_PRECISION} (hardware.dtype=auto)" in "\n".join(lines)

    summary = bench_summary(FP16_PRECISION)
    rows = {"ar": bench_methods.ar_row(summary), "eagle3": bench_methods.method_row(summary, tmp_path)}
    bench_methods.print_table([{"dataset": "mt_bench", "temperature": 0.0, "methods": rows}], "settings")
    assert capsys.readouterr().out.count(f"| {FP16_PRECISION} |") == 2
