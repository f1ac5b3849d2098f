"""Runs that differ only in their method share one AR decode per prompt (specbench.run.group):
each run still gets its own directory, records, resume and summary, the one a Hydra
multirun of it would have found; a replication's sweeps become such groups."""

import json
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest
from conftest import run_in_process

from specbench.metrics.records import MethodRun, read_records
from specbench.metrics.speed import speedup
from specbench.replicate.sweep import Sweep, grouped, jobs
from specbench.run import runner as runner_module
from specbench.run.config import compose_config
from specbench.run.group import forward_of, groups, null_config, out_dir
from specbench.run.plan import Decision
from specbench.run.runner import block_order, decode_in_blocks

SETTINGS = [
    "dataset=gsm8k",
    "dataset.limit=2",
    "dataset.max_turns=1",
    "gen.max_new_tokens=8",
    "gen.temperature=0",
    "hardware=cpu-fp32",
    "costs.profile=false",
    "costs.calibrate_tree=false",
    "engine.compile=off",
]


def group_command(tmp_path: Path, runs: list[list[str]]):
    path = tmp_path / "jobs.json"
    path.write_text(json.dumps([[f"output_root={tmp_path / 'out'}", *SETTINGS, *run] for run in runs]))
    return run_in_process([sys.executable, "-m", "specbench.run.group", str(path)])


def records_of(tmp_path: Path, run: list[str]) -> tuple[Path, list[dict]]:
    directory = out_dir(compose_config([f"output_root={tmp_path / 'out'}", *SETTINGS, *run]))
    return directory, read_records(directory / "samples.jsonl")


def test_a_group_decodes_ar_once_per_prompt_and_each_run_keeps_its_own_results(tmp_path):
    runs = [["method=pld", "method.tree.gamma=2"], ["method=pld", "method.tree.gamma=4"]]
    result = group_command(tmp_path, runs)
    assert result.returncode == 0, result.stderr[-2000:]
    (dir_a, a), (dir_b, b) = (records_of(tmp_path, run) for run in runs)
    assert dir_a != dir_b and len(a) == len(b) == 2
    for ra, rb in zip(a, b):
        assert ra["id"] == rb["id"] and ra["block_methods"] == rb["block_methods"] == 3  # with the null
        assert ra["baseline"] == rb["baseline"]  # one AR decode, its timings included, shared by both
        assert ra["method"]["turn_ids"] == ra["baseline"]["turn_ids"] == rb["method"]["turn_ids"]  # lossless at T=0
        assert ra["method"]["seconds"] != rb["method"]["seconds"]
    # the block's order rotates: each run has AR before and after it
    assert {r["baseline_first"] for r in a} == {r["baseline_first"] for r in b} == {True, False}
    for directory in (dir_a, dir_b):
        summary = json.loads((directory / "summary.json").read_text())
        assert (
            summary["results"]["samples"] == 2
            and "one AR decode in one block with up to 3 runs" in summary["baseline_source"]
        )
        assert "speedup" in summary
        # its share of the AR time: a third of each shared decode, so time summed over the runs counts it once
        assert abs(summary["baseline"]["own_seconds"] - summary["baseline"]["seconds"] / 3) < 1e-3
    # the protocol's null: AR decoded once more in each block, timed against the shared AR
    null_dir = out_dir(null_config(compose_config([f"output_root={tmp_path / 'out'}", *SETTINGS, *runs[0]])))
    null = read_records(null_dir / "samples.jsonl")
    assert [r["id"] for r in null] == [r["id"] for r in a]
    assert all(r["method"]["turn_ids"] == r["baseline"]["turn_ids"] and r["block_methods"] == 3 for r in null)
    assert [r["baseline"] for r in null] == [r["baseline"] for r in a]  # timed against the one shared AR decode
    assert json.loads((null_dir / "summary.json").read_text())["method"] == "null"
    assert "protocol null (AR timed as a member against the shared AR)" in result.stdout

    # an interrupted group resumes: only the run that lacks a sample decodes it (with AR again)
    lines = (dir_b / "samples.jsonl").read_text().splitlines(keepends=True)
    (dir_b / "samples.jsonl").write_text("".join(lines[:-1]))
    before_a = (dir_a / "samples.jsonl").read_text()
    assert group_command(tmp_path, runs).returncode == 0
    assert (dir_a / "samples.jsonl").read_text() == before_a
    resumed = read_records(dir_b / "samples.jsonl")
    assert [r["id"] for r in resumed] == [r["id"] for r in b] and "block_methods" not in resumed[-1]

    # the directory is the one a Hydra multirun of the same run uses: it finds the run finished
    multirun = run_in_process(
        [sys.executable, "-m", "specbench", "-m", f"output_root={tmp_path / 'out'}", *SETTINGS, *runs[0]]
    )
    assert multirun.returncode == 0, multirun.stderr[-2000:]
    assert (dir_a / "samples.jsonl").read_text() == before_a


def test_runs_group_only_when_nothing_but_the_method_differs(tmp_path):
    root = [f"output_root={tmp_path}", *SETTINGS]
    cfgs = [
        compose_config([*root, *run])
        for run in (
            ["method=pld"],
            ["method=pld", "method.tree.gamma=3", "costs.profile=true"],  # the method and costs may differ
            ["method=pld", "gen.max_new_tokens=9"],  # another length: another AR decode
            ["method=ar"],  # AR pairs no baseline
            ["method=pld", "baseline.mode=none"],
            ["method=lookahead"],
            ["method=pld", "logger=wandb"],  # one W&B run per process at a time
        )
    ]
    assert groups(cfgs) == [[0, 1, 5], [2], [3], [4], [6]]


def test_a_replication_runs_its_sweeps_as_groups_and_each_run_once(tmp_path):
    sweeps = [
        Sweep("figure", ["method=pld", "method.tree.gamma=2,4", *SETTINGS]),
        Sweep("table", ["method=pld", "method.tree.gamma=4", *SETTINGS]),  # a run the figure has too
        Sweep("longer", ["method=pld", *SETTINGS, "gen.max_new_tokens=20"]),
    ]
    assert [len(j) for j in (jobs(s, tmp_path) for s in sweeps)] == [2, 1, 1]
    planned = grouped(sweeps, tmp_path, ())
    assert [names for names, _ in planned] == [["figure", "table"], ["longer"]]
    assert [len(runs) for _, runs in planned] == [2, 1]
    assert any("method.tree.gamma=2" in run for run in planned[0][1]) and any(
        "method.tree.gamma=4" in run for run in planned[0][1]
    )


def test_runs_share_ar_when_their_target_forward_is_the_same_whatever_else_the_probe_recorded():
    def runner(kind: str, probed: list[str], dtype: str = "float32"):
        forward = Decision(kind, "lean", {"parts": probed, "contended_cores": 0.01})
        return SimpleNamespace(decided=SimpleNamespace(dtype=Decision(dtype), precision=dtype, forward=forward))

    plain = forward_of(runner("LeanTreeLM-fp16-weights", ["n=1", "n=2"]))
    assert forward_of(runner("LeanTreeLM-fp16-weights", ["n=1", "n=2", "n=11", "n=60"])) == plain
    assert forward_of(runner("LeanTreeLM-packed>=4+fp16-weights", ["n=1", "n=2"])) != plain
    assert forward_of(runner("LeanTreeLM-fp16-weights", ["n=1", "n=2"], dtype="bfloat16")) != plain


@pytest.mark.parametrize("methods", [1, 2, 3, 5])
def test_every_method_of_a_block_has_ar_before_it_in_half_the_blocks(methods):
    """runner.block_order: over whole cycles, AR precedes each method in exactly half the
    blocks, wherever the method sits in the group, and each method takes every place."""
    blocks = [block_order(i, methods, baseline=object()) for i in range(4 * methods)]
    assert all(sorted(b, key=str) == sorted([None, *range(methods)], key=str) for b in blocks)
    for method in range(methods):
        before = sum(b.index(None) < b.index(method) for b in blocks)
        assert before * 2 == len(blocks)
        assert {[i for i in b if i is not None].index(method) for b in blocks} == set(range(methods))
    assert block_order(3, methods, baseline=None) == [*range(1 % methods, methods), *range(1 % methods)]


class DriftingBlock:
    """Stand-ins for a group's runners whose every decode in a block takes 10% less time than
    the one before it (caches warming, a clock ramping up: the drift a block order must
    spread over AR and the methods alike); every decode gives the same 10 tokens."""

    def __init__(self, members: int, samples: int):
        self.calls, self.per_block = 0, members + 1
        self.samples = [SimpleNamespace(id=f"s{i:02d}", category="c", turns=["q"]) for i in range(samples)]
        self.runners = [self.runner(f"m{i}") for i in range(members)]

    def runner(self, name: str):
        records: list[dict] = []
        return SimpleNamespace(
            cfg={"method": {"name": name}},
            samples=self.samples,
            batch_size=1,
            done=set(),
            records=records,
            parts=SimpleNamespace(method=name, baseline="ar"),
            decode_turns=self.decode,
            write=lambda batch, others: records.extend(batch),
        )

    def decode(self, batch, method, bar) -> list[MethodRun]:
        seconds = 0.9 ** (self.calls % self.per_block)
        self.calls += 1
        return [
            MethodRun(
                10,
                seconds,
                0.0,
                10,
                0,
                [1] * 10,
                [[1] * 10],
                [""],
                ["length"],
                [5],
                0.0,
                [],
                [],
                [],
                {},
                batch_seconds=seconds,
                batch_id=sample.id,
            )
            for sample in batch
        ]


def null_speedup(block: DriftingBlock) -> dict:
    decode_in_blocks(block.runners, [block.samples] * len(block.runners))
    null = block.runners[-1].records
    return speedup([r["method"] for r in null], [r["baseline"] for r in null])


def test_the_null_covers_one_under_a_drift_within_blocks_and_a_fixed_order_would_not(monkeypatch):
    """The null (AR as the group's last member, as run.group adds it) against the shared AR,
    over 12 blocks of a drift that favours whatever decodes later: the rotation puts AR before
    and after it equally often, so its interval covers 1.00; with AR always first the same
    drift reads as a speedup whose interval excludes 1.00."""
    rotated = null_speedup(DriftingBlock(members=3, samples=12))
    low, high = rotated["speedup_ci95"]
    assert low <= 1.0 <= high and abs(rotated["speedup"] - 1.0) < 0.05

    monkeypatch.setattr(runner_module, "block_order", lambda index, methods, baseline: [None, *range(methods)])
    fixed = null_speedup(DriftingBlock(members=3, samples=12))
    assert fixed["speedup_ci95"][0] > 1.0
