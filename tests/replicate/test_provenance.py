"""Provenance: a replication commits the runs its tables are computed from
(results/<paper>/<scale>/runs), and its tables, figures and report regenerate from those
files alone, byte for byte, with no outputs/ and no dataset copy."""

import filecmp
import json
import shutil
import subprocess
import sys
from pathlib import Path

import nbformat
import pandas as pd
import pytest
from conftest import run_in_process

from runners import cast, entmtp, mars, talon
from specbench.costs.fingerprint import fingerprint_id
from specbench.metrics.speed import bootstrap_ci, cycle_tokens, ratio_ci, tau
from specbench.replicate import machine_lines, regenerate, report, results, runsets, tables, verdicts

ROOT = Path(__file__).resolve().parents[2]
RUNNERS = {"mars": mars, "talon": talon, "cast": cast, "entmtp": entmtp}
SMALL_COSTS = [
    "hardware.dtype=float32",
    "costs.max_n=8",
    "costs.repeats=1",
    "costs.calibration_prompts=1",
    "costs.calibration_tokens=12",
]
MACHINE = {"cpu_model": "Test CPU 9000", "isa": ["avx2", "fma"], "threads": 2, "torch": "2.13.0+cpu"}
ARTICLES = [f"Article {i}: the council met on day {i} and voted to repair bridge {i}." for i in range(8)]


def written_files(directory: Path) -> dict[str, bytes]:
    """Every file a report wrote under `directory` (the committed runs left out), by relative path."""
    return {
        str(p.relative_to(directory)): p.read_bytes()
        for p in sorted(directory.rglob("*"))
        if p.is_file() and "runs" not in p.relative_to(directory).parts
    }


def hand_made_outputs(tmp_path: Path, machine: dict = MACHINE, name: str = "outputs") -> tuple[Path, Path]:
    """A sweep's outputs as the runner leaves them on `machine`: MARS and EAGLE-3 at T=1 on
    eight CNN/DM prompts read from a local copy (the paper's Table 1 and Table 3 claims), AR
    beside each, MARS's decision points (Figures 1 and 4) and a session log. (outputs, the
    dataset copy)"""
    copy = tmp_path / "data" / "cnn_dm.jsonl"
    copy.parent.mkdir(parents=True, exist_ok=True)
    copy.write_text(
        "".join(
            json.dumps({"id": f"a{i}", "article": text, "highlights": f"council votes to repair bridge {i}"}) + "\n"
            for i, text in enumerate(ARTICLES)
        )
    )
    dataset = {
        "name": "cnn_dm",
        "loader": "specbench.data.benchmarks.cnn_dm",
        "package": None,
        "file": None,
        "hub": None,
        "path": str(copy),
        "limit": len(ARTICLES),
        "seed": 0,
        "categories": None,
        "repeats": 1,
        "max_turns": 1,
    }
    outputs = tmp_path / name
    for method, method_tau, speed in (("mars", 3.0, 0.5), ("eagle3", 2.0, 0.7)):
        tree = {
            "depth": 6,
            "top_k": 10,
            "total_tokens": 50,
            **({"verifier": {"theta": 0.9, "rule": "release"}} if method == "mars" else {}),
        }
        run_dir = outputs / "multirun" / method / f"smollm2-135m-cnn_dm-{method}"
        run_dir.mkdir(parents=True)
        records = []
        for i in range(len(ARTICLES)):
            steps = 60 / (method_tau + 0.1 * (i % 3))
            decisions = [[2.0 + i, 1.0, 2.5 + i, "exact"], [1.5, 1.4, 2.0, "relaxed"]] if method == "mars" else []
            records.append(
                {
                    "id": f"a{i}",
                    "method": {
                        "new_tokens": 61,
                        "turn_ids": [[0]],
                        "target_forwards": steps,
                        "draft_forwards": steps * 6,
                        "seconds": speed + 0.01 * i,
                        "turn_texts": [f"the council votes to repair bridge {i}" if i % 2 else "a bridge"],
                        "verifier_notes": {"decisions": decisions},
                    },
                    "baseline": {
                        "new_tokens": 61,
                        "turn_ids": [[0]],
                        "target_forwards": 60,
                        "seconds": 1.0,
                        "turn_texts": [f"council votes to repair bridge {i}"],
                    },
                }
            )
        (run_dir / "samples.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
        config = {
            "model": {"name": "smollm2-135m"},
            "method": {
                "name": method,
                "tree": {k: v for k, v in tree.items() if k != "verifier"},
                "verifier": tree.get("verifier", {}),
            },
            "dataset": dataset,
            "gen": {"temperature": 1, "max_new_tokens": 64, "batch_size": 1},
            "output_root": str(outputs),
        }
        summary = {
            "config": config,
            "out_dir": str(run_dir),
            "speedup": 1.0 / speed,
            "speedup_mean_per_sample": 1.0 / speed,
            "results": {
                "samples": len(records),
                "tau": method_tau,
                "delta": 6.0,
                "tok_per_s": 60 / speed,
                "seconds": speed * len(records),
            },
            "baseline": {"tau": 60 / 59, "tok_per_s": 60.0, "seconds": float(len(records))},
            "quality": {"rouge_l": 0.3},
            "baseline_quality": {"rouge_l": 0.31},
            "environment": {
                "precision": "float32",
                "dtype": "float32",
                "torch": machine["torch"],
                "torch_threads": 2,
                "fingerprint": machine,
            },
        }
        (run_dir / "summary.json").write_text(json.dumps(summary))
        (run_dir / "decisions.json").write_text(json.dumps({"dtype": "float32"}))
    (outputs / results.SESSIONS).write_text(json.dumps({"wall_seconds": 4000, "finished_runs": 2}) + "\n")
    return outputs, copy


def test_committed_runs_regenerate_the_report_byte_for_byte_without_outputs_or_the_dataset(tmp_path):
    outputs, copy = hand_made_outputs(tmp_path)
    committed = tmp_path / "results"
    stored = runsets.store(outputs, committed / "runs")
    assert sorted(stored["run"]) == ["eagle3/smollm2-135m-cnn_dm-eagle3", "mars/smollm2-135m-cnn_dm-mars"]
    run_set = committed / "runs" / f"{fingerprint_id(MACHINE)}-float32"
    run = run_set / "mars" / "smollm2-135m-cnn_dm-mars"
    assert (run_set / results.SESSIONS).is_file()
    assert sorted(p.name for p in run.iterdir()) == [
        "dataset.jsonl.gz",
        "decisions.json",
        "samples.jsonl.gz",
        "summary.json",
    ]
    regenerate(mars.PAPER, "cpu", committed / "runs", committed)
    first = written_files(committed)
    # a clone: no outputs, no local dataset copy, the committed runs copied elsewhere
    shutil.rmtree(outputs)
    copy.unlink()
    clone = tmp_path / "clone"
    shutil.copytree(committed / "runs", clone / "runs")
    regenerate(mars.PAPER, "cpu", clone / "runs", clone)
    assert written_files(clone) == first  # figures (PNG and PDF) included
    text = (clone / "report.md").read_text()
    assert (
        str(tmp_path) not in text
        and "Test CPU 9000, ISA avx2 fma, 2 threads, torch 2.13.0+cpu; float32 (2 runs)" in text
    )
    assert "Wall time: 1 h 07 min over 1 session(s) of the runner, which finished 2 of the runs" in text
    assert verdicts.INTERVALS in text
    # the per-case evidence, not the summary
    rouge = next(line for line in text[text.index("## Claims") :].splitlines() if line.startswith("| Table 3 "))
    assert "ROUGE-L" in rouge and "n=8" in rouge  # re-scored from the committed dataset samples, not "cannot read"
    table1 = pd.read_csv(clone / "tables" / "table1.csv", keep_default_na=False)
    assert set(table1.loc[table1["run"] != "", "run"]) <= {
        "mars/smollm2-135m-cnn_dm-mars",
        "eagle3/smollm2-135m-cnn_dm-eagle3",
    }
    # committing the same outputs again changes no byte
    before = {p: p.read_bytes() for p in (committed / "runs").rglob("*") if p.is_file()}
    outputs, copy = hand_made_outputs(tmp_path)
    runsets.store(outputs, committed / "runs")
    assert {p: p.read_bytes() for p in (committed / "runs").rglob("*") if p.is_file()} == before


def test_runs_of_another_machine_start_a_run_set_of_their_own(tmp_path):
    """A sweep resumed on another machine adds a set beside the first, never runs to it; each
    set keeps its session log; the report names both, reads each claim from the set nearest
    the papers' regime and writes the other set's tables apart."""
    committed = tmp_path / "results" / "runs"
    first, _ = hand_made_outputs(tmp_path)
    runsets.store(first, committed)
    other = {**MACHINE, "cpu_model": "Test CPU 9900", "isa": ["avx2", "fma", "amx_bf16"]}
    second, _ = hand_made_outputs(tmp_path, other, "outputs-other")
    runsets.store(second, committed)
    names = sorted(p.name for p in committed.iterdir())
    assert names == sorted([f"{fingerprint_id(MACHINE)}-float32", f"{fingerprint_id(other)}-float32"])
    assert all(len(list((committed / n).rglob(results.SUMMARY))) == 2 for n in names)
    assert all((committed / n / results.SESSIONS).is_file() for n in names)
    found = runsets.read(committed)
    assert {s.label for s in found} == {"Test CPU 9000 (avx2), float32", "Test CPU 9900 (amx_bf16), float32"}
    assert all(
        sorted(s.runs["run"]) == ["eagle3/smollm2-135m-cnn_dm-eagle3", "mars/smollm2-135m-cnn_dm-mars"] for s in found
    )
    regenerate(mars.PAPER, "cpu", committed, tmp_path / "results")
    text = (tmp_path / "results" / "report.md").read_text()
    assert "**Run set 1 of 2: " in text and "**Run set 2 of 2: " in text
    second_set = [s.name for s in runsets.order(found)][1]
    assert (tmp_path / "results" / "sets" / second_set / "tables" / "table1.md").is_file()
    assert f"](sets/{second_set}/tables/table1.md)" in text


def test_committed_runs_from_before_run_sets_move_into_their_set(tmp_path):
    """results/<paper>/<scale>/runs/<method>/<run> (one machine's runs, one session log) is
    refiled as that machine's set by the next store, even one that brings no runs."""
    outputs, _ = hand_made_outputs(tmp_path)
    committed = tmp_path / "runs"
    runs = results.collect(outputs)
    results.store_runs(runs, committed)
    shutil.copyfile(outputs / results.SESSIONS, committed / results.SESSIONS)
    runsets.store(tmp_path / "no-outputs", committed)
    run_set = committed / f"{fingerprint_id(MACHINE)}-float32"
    assert sorted(p.name for p in committed.iterdir()) == [run_set.name]
    assert (run_set / results.SESSIONS).is_file() and (run_set / "mars" / "smollm2-135m-cnn_dm-mars").is_dir()


@pytest.mark.parametrize("paper", sorted(RUNNERS))
def test_each_committed_report_regenerates_from_its_committed_runs(paper, tmp_path):
    """Text outputs (report, tables) byte for byte; figures by name (their pixels depend on the
    matplotlib and FreeType build drawing them; the test above compares them on one build)."""
    committed = ROOT / "results" / paper / "cpu"
    if not list((committed / "runs").rglob(results.SUMMARY)):
        pytest.skip(f"results/{paper}/cpu/runs holds no committed runs yet (the cpu-scale re-run commits them)")
    # what a runner's offline stage committed beside the runs, read by the report: EntMTP's tree
    # bank, TALON's expansion timings (Figure 15)
    inputs = {
        name: data for name, data in written_files(committed).items() if name.startswith(("bank-", "figure15.csv"))
    }
    for name, data in inputs.items():
        (tmp_path / name).write_bytes(data)
    regenerate(RUNNERS[paper].PAPER, "cpu", committed / "runs", tmp_path)
    ours, theirs = written_files(tmp_path), written_files(committed)
    assert sorted(ours) == sorted(theirs)
    for name, data in ours.items():
        if "figures" not in Path(name).parts:
            assert data == theirs[name], f"results/{paper}/cpu/{name} does not regenerate from the committed runs"


def test_report_only_without_runs_leaves_a_report_alone_and_otherwise_says_nothing_ran(tmp_path):
    kept = tmp_path / "kept"
    kept.mkdir()
    (kept / "report.md").write_text("the committed report")
    refused = run_in_process([sys.executable, "runners/mars.py", "--report-only", "--results", str(kept)])
    assert refused.returncode == 2 and refused.stderr.strip().splitlines() == [refused.stderr.strip()]
    assert "no finished runs" in refused.stderr and (kept / "report.md").read_text() == "the committed report"
    (tmp_path / "empty").mkdir()
    for runner in RUNNERS:  # MARS's Figure 3 once raised KeyError 'config.dataset.name' here
        fresh = tmp_path / runner
        written = run_in_process(
            [
                sys.executable,
                f"runners/{runner}.py",
                "--report-only",
                "--outputs",
                str(tmp_path / "empty"),
                "--results",
                str(fresh),
            ]
        )
        assert written.returncode == 0, written.stderr[-2000:]
        assert (
            "No finished runs" in (fresh / "report.md").read_text()
            and "Figures: none" in (fresh / "report.md").read_text()
        )
        assert tables.NOT_RUN in (fresh / "tables" / "table1.md").read_text()


def test_a_claim_whose_dataset_copy_is_missing_cannot_tell_in_one_line(tmp_path):
    outputs, copy = hand_made_outputs(tmp_path)
    copy.unlink()  # the outputs as they are, before they were committed: nothing to re-score against
    runs = results.collect(outputs)
    rouge = next(v for v in report.verdicts(mars.CLAIMS, runs) if v["source"] == "Table 3")
    assert rouge["verdict"] == "cannot tell" and "dataset.path" in rouge["ours"] and "\n" not in rouge["ours"]


def test_ar_rows_show_what_ar_measured_and_no_speedup_of_its_own():
    run = {
        "config.model.name": "smollm2-135m",
        "config.method.name": "hydra",
        "config.method.tree.size": 8,
        "config.dataset.name": "gsm8k",
        "temperature": 0.7,
        "results.samples": 20,
        "run_dir": "/x",
        "run": "hydra/x",
        "speedup": 1.3,
        "baseline.tau": 1.02,
        "baseline.tok_per_s": 31.5,
    }
    reference = pd.DataFrame(
        [
            {
                "table": "table1",
                "model": "vicuna-7b",
                "method": "ar",
                "dataset": "gsm8k",
                "temperature": 0.7,
                "setting": "",
                "metric": m,
                "published": p,
            }
            for m, p in (("tau", 1.0), ("speedup", 1.0), ("tok_per_s", 38.0))
        ]
    )
    ours = (
        tables.compare(reference, pd.DataFrame([run]), entmtp.locate("cpu"), "smollm2-135m")
        .query("model == 'smollm2-135m'")
        .set_index("metric")
    )
    # measured, not a constant
    assert ours.loc["tok_per_s", "ours"] == 31.5 and ours.loc["tok_per_s", "run"] == "hydra/x"
    assert (
        pd.isna(ours.loc["speedup", "ours"])
        and ours.loc["speedup", "note"] == "AR itself: 1 by definition; AR measured 31.5 tok/s"
    )
    # EntMTP's Table 1 counts accepted draft tokens per step (the paper's convention): AR's is 0 by definition, said so
    assert pd.isna(ours.loc["tau", "ours"]) and "0 per step by definition" in ours.loc["tau", "note"]


def test_published_only_tables_say_why_and_hold_no_column_of_ours(tmp_path):
    assert set(mars.PAPER.published_only["cpu"]) == {"table7"} and set(cast.PAPER.published_only["cpu"]) == {
        "table4",
        "table5",
    }
    assert set(entmtp.PAPER.published_only["cpu"]) == {"table2"}
    reference = tables.read_reference(ROOT / "results" / "reference" / "cast.csv")
    compared = tables.compare(
        reference, pd.DataFrame(columns=["run_dir", "results.samples"]), cast.locate("cpu"), "smollm2-135m"
    )
    tables.write(compared, tmp_path, "CAST", cast.PAPER.published_only["cpu"])
    table4 = (tmp_path / "table4.md").read_text()
    assert (
        table4.startswith("table4: CAST. Published only: measured on the paper's H20 GPU")
        and " / " not in table4.split("\n", 1)[1]
    )
    assert "smollm2-135m" not in table4 and "ours" not in pd.read_csv(tmp_path / "table4.csv").columns
    assert " / " in (tmp_path / "table1.md").read_text()
    report.write(tmp_path / "report.md", "t", [], [], ["table1", "table4"], [], cast.PAPER.published_only["cpu"])
    written = (tmp_path / "report.md").read_text()
    assert "Tables (published / ours / delta): [table1](tables/table1.md)\n" in written
    assert "Tables (published only): [table4](tables/table4.md): measured on the paper's H20 GPU" in written


def test_the_header_names_each_machine_and_the_sessions_time():
    def run(cpu, precision):
        return {
            "environment.fingerprint.cpu_model": cpu,
            "environment.fingerprint.isa": ["avx2"],
            "environment.fingerprint.threads": 2,
            "environment.torch": "2.13.0+cpu",
            "environment.precision": precision,
            "results.seconds": 30.0,
            "baseline.seconds": 30.0,
        }

    runs = pd.DataFrame([run("A", "float32"), run("A", "float32"), run("B", "bfloat16")])
    lines = machine_lines(runs, [{"wall_seconds": 600, "finished_runs": 2}, {"wall_seconds": 300, "finished_runs": 1}])
    assert (
        lines[0]
        == "Machine: A, ISA avx2, 2 threads, torch 2.13.0+cpu; float32 (2 runs); B, ISA avx2, 2 threads, torch "
        "2.13.0+cpu; bfloat16 (1 runs)."
    )
    # what else the machine ran while the runs were timed, and the runs it was enough to contend
    busy = runs.assign(**{"environment.others_cores": [0.02, 0.6, None], "run": ["a", "b", "c"]})
    assert machine_lines(busy, [])[0].endswith(
        "Other processes beside the runs: 0.31 cores (median over 2 runs that recorded it), at most 0.60; "
        "contended (timings not this machine's alone): b (0.60)."
    )
    assert (
        lines[1].startswith("Wall time: 15 min over 2 session(s) of the runner, which finished 3 of the runs; decoding")
        and "3 min" in lines[1]
    )
    assert "not recorded" in machine_lines(runs, [])[1]
    shared = runs.assign(**{"baseline.own_seconds": 10.0})  # runs of a group that shared their AR decodes
    assert (
        "decoding (the method and AR beside it) 2 min summed over the runs (an AR decode that runs of a group "
        "shared counted once)" in machine_lines(shared, [])[1]
    )
    assert "by sweep" not in lines[1]  # sessions logged before sweeps were timed
    timed = [
        {"wall_seconds": 600, "finished_runs": 2, "sweep_seconds": {"table1": 400, "figure3": 200}},
        {"wall_seconds": 700, "finished_runs": 1, "sweep_seconds": {"figure3": 500, "table2": 30}},
    ]
    assert machine_lines(runs, timed)[1].endswith("; by sweep: figure3 12 min, table1 7 min, table2 30 s.")
    assert (
        "; by sweep (the 1 of 2 sessions that timed them): table1 7 min"
        in machine_lines(runs, timed[:1] + [{"wall_seconds": 1, "finished_runs": 1}])[1]
    )


def test_a_session_logs_each_sweeps_wall_time_even_when_one_fails(tmp_path, monkeypatch):
    """The runner's session line says where the time went, per sweep name, a failed sweep
    included (its runs resume next session)."""
    from specbench import replicate
    from specbench.replicate import sweep

    calls = []

    def fake_run(cmd, cwd):  # each sweep "finishes" one run, the third fails after it
        calls.append(cmd)
        (tmp_path / "out").mkdir(exist_ok=True)
        return subprocess.CompletedProcess(cmd, 1 if len(calls) == 3 else 0)

    monkeypatch.setattr(sweep.subprocess, "run", fake_run)
    monkeypatch.setattr(
        replicate.results, "collect", lambda outputs: pd.DataFrame({"run": [f"ar/{i}" for i in range(len(calls))]})
    )
    sweeps = [
        sweep.Sweep("table1", ["dataset=gsm8k"]),
        sweep.Sweep("table1", ["dataset=mt_bench"]),
        sweep.Sweep("figure3", ["dataset=humaneval"]),
    ]
    with pytest.raises(SystemExit, match="sweep figure3 failed"):
        replicate.timed_launch(sweeps, tmp_path / "out", "basic", ())
    session = json.loads((tmp_path / "out" / results.SESSIONS).read_text())
    assert session["finished_runs"] == 3 and sorted(session["sweep_seconds"]) == ["figure3", "table1"]
    # on one machine, runs go in groups (tests/test_group.py)
    assert [cmd[1:3] for cmd in calls] == [["-m", "specbench.run.group"]] * 3


@pytest.mark.parametrize("paper", sorted(RUNNERS))
def test_notebooks_read_the_committed_runs_and_write_elsewhere_for_other_runs(paper, monkeypatch):
    """The notebook's settings cell: the committed runs by default, regenerating their own
    results; another sweep's runs write into outputs/notebooks, never over the committed results."""
    cell = next(
        c for c in nbformat.read(ROOT / "notebooks" / f"{paper}.ipynb", as_version=4).cells if c.cell_type == "code"
    )
    monkeypatch.chdir(ROOT / "notebooks")
    for variable in ("SPECBENCH_RUNS", "SPECBENCH_RESULTS", "SPECBENCH_SCALE"):
        monkeypatch.delenv(variable, raising=False)
    settings: dict = {}
    exec(cell.source, settings)
    assert (
        settings["RUNS"] == ROOT / "results" / paper / "cpu" / "runs"
        and settings["RESULTS"] == ROOT / "results" / paper / "cpu"
    )
    monkeypatch.setenv("SPECBENCH_RUNS", "/elsewhere/runs")
    exec(cell.source, settings)
    assert settings["RESULTS"] == ROOT / "outputs" / "notebooks" / paper / "cpu"


def test_a_notebook_without_runs_leaves_the_results_it_shows_as_they_are(tmp_path, monkeypatch):
    from replicate_fixtures import execute_notebook

    shown = tmp_path / "results"
    shutil.copytree(ROOT / "results" / "mars" / "cpu", shown, ignore=shutil.ignore_patterns("runs"))
    before = written_files(shown)
    (tmp_path / "empty").mkdir()
    printed = execute_notebook("mars", tmp_path / "empty", shown, monkeypatch)
    assert "0 finished runs" in printed and "no finished runs" in printed and "claims agree in direction" in printed
    assert written_files(shown) == before


@pytest.mark.slow
def test_a_tiny_replication_commits_its_runs_and_regenerates_identically(tmp_path):
    """The runner's own path: sweeps -> outputs -> committed runs -> report; then, with the
    outputs gone, --report-only on a copy of the committed runs writes the same bytes."""
    committed = tmp_path / "results"
    args = [
        sys.executable,
        "runners/mars.py",
        "--prompts",
        "1",
        "--max-new-tokens",
        "6",
        "--only",
        "table6",
        "--datasets",
        "gsm8k",
        "--outputs",
        str(tmp_path / "outputs"),
        "--results",
        str(committed),
        *SMALL_COSTS,
    ]
    first = run_in_process(args)
    assert first.returncode == 0, first.stderr[-3000:]
    assert "committed 2 runs" in first.stdout and (committed / "runs" / results.SESSIONS).is_file()
    assert len(list((committed / "runs").rglob("samples.jsonl.gz"))) == 2
    shutil.rmtree(tmp_path / "outputs")
    clone = tmp_path / "clone"
    shutil.copytree(committed / "runs", clone / "runs")
    again = run_in_process([sys.executable, "runners/mars.py", "--report-only", "--results", str(clone)])
    assert again.returncode == 0, again.stderr[-3000:]
    assert written_files(clone) == written_files(committed)
    assert not filecmp.dircmp(committed / "runs", clone / "runs").diff_files
    assert (
        "Wall time: " in (clone / "report.md").read_text() and "not recorded" not in (clone / "report.md").read_text()
    )


def test_a_table_cells_interval_is_redrawn_from_the_runs_records_by_the_current_rule(tmp_path):
    """A summary written under an older interval rule (here: intervals from 6 prompts) and
    an older tau convention (the prefill's token counted) shows in the tables with what its
    committed records give by the rules the report's header states: scipy's BCa from 10
    groups up, none below, and AR's tau 1.00; a run without records keeps its own."""

    def write_run(name, prompts, records=True):
        run_dir = tmp_path / "runs" / name
        run_dir.mkdir(parents=True)
        old = [0.1, 9.9]
        summary = {
            "config": {"gen": {"temperature": 0.0}},
            "speedup": 1.5,
            "speedup_ci95": old,
            "results": {"tau": 2.0, "tau_ci95": old, "delta_ci95": old, "samples": prompts},
            "baseline": {"tau": 1.02},
        }
        (run_dir / "summary.json").write_text(json.dumps(summary))
        lines = []
        for i in range(prompts):
            turn = [[7] * (40 + i)]
            method = {
                "new_tokens": 40 + i,
                "seconds": 1.0 + 0.1 * i,
                "target_forwards": 15 + i % 4,
                "draft_forwards": 30 + i,
                "batch_id": f"p{i:02d}",
                "turn_ids": turn,
            }
            baseline = {
                "new_tokens": 40 + i,
                "seconds": 1.6 + 0.05 * i,
                "target_forwards": 39 + i,
                "draft_forwards": 0,
                "batch_id": f"p{i:02d}",
                "turn_ids": turn,
            }
            lines.append(json.dumps({"id": f"p{i:02d}", "method": method, "baseline": baseline}))
        if records:
            (run_dir / "samples.jsonl").write_text("\n".join(lines) + "\n")
        return [json.loads(line) for line in lines]

    enough = write_run("enough", 12)
    write_run("few", 6)
    write_run("unrecorded", 12, records=False)
    runs = results.collect(tmp_path / "runs").set_index("run")
    methods, baselines = [r["method"] for r in enough], [r["baseline"] for r in enough]
    assert runs.loc["enough", "speedup_ci95"] == bootstrap_ci(methods, baselines) != [0.1, 9.9]
    assert runs.loc["enough", "results.tau_ci95"] == ratio_ci(methods, cycle_tokens, "target_forwards")
    assert runs.loc["enough", "results.tau"] == tau(methods) != 2.0 and runs.loc["enough", "baseline.tau"] == 1.0
    assert runs.loc["few", "speedup_ci95"] is None and runs.loc["few", "results.delta_ci95"] is None
    assert runs.loc["unrecorded", "speedup_ci95"] == [0.1, 9.9]
    assert "a table cell's interval is drawn by the same rule from its run's records" in verdicts.INTERVALS
