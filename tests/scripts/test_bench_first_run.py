"""scripts/bench_first_run.py reads a run's three times from what the run writes."""

import importlib.util
import sys

from conftest import ROOT

spec = importlib.util.spec_from_file_location("bench_first_run", ROOT / "scripts" / "bench_first_run.py")
bench_first_run = sys.modules["bench_first_run"] = importlib.util.module_from_spec(spec)  # dataclasses look it up
spec.loader.exec_module(bench_first_run)

# a stand-in for `python -m specbench`: decides, writes a first sample, then runs on
FAKE_RUN = """
import pathlib, sys, time
out = pathlib.Path(sys.argv[1]) / "ar" / "run"
out.mkdir(parents=True)
time.sleep(0.5)
(out / "decisions.json").write_text("{}")
time.sleep(0.5)
(out / "samples.jsonl").write_text("{}\\n")
time.sleep(0.5)
sys.exit(3)
"""


def test_decided_first_sample_and_done_are_read_in_order(tmp_path):
    runs = tmp_path / "runs"
    with open(tmp_path / "log", "w") as log:
        timing = bench_first_run.timed_run(
            [sys.executable, "-c", FAKE_RUN, str(runs)], tmp_path / "cache", runs, log, "fake", "empty"
        )
    assert timing.returncode == 3
    assert 0.4 < timing.decided_s < timing.first_sample_s < timing.done_s
    assert timing.first_sample_s - timing.decided_s > 0.3 and timing.done_s - timing.first_sample_s > 0.3


def test_a_run_that_writes_nothing_has_no_decision_or_sample(tmp_path):
    with open(tmp_path / "log", "w") as log:
        timing = bench_first_run.timed_run(
            [sys.executable, "-c", "pass"], tmp_path / "cache", tmp_path / "runs", log, "nothing", "empty"
        )
    assert timing.returncode == 0 and timing.decided_s is None and timing.first_sample_s is None
    report = bench_first_run.report(
        [timing], {"cpu_model": "x", "cpu_family_model": "1/2", "isa": ["avx2"], "torch": "t", "threads": 2}
    )
    assert "| `nothing` | empty | - | - |" in report
