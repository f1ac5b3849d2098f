"""The command line on the embedded model: runs, bad inputs, interrupt and resume."""

import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
from conftest import MIN_GAIN, run_in_process
from omegaconf import OmegaConf

from specbench.engine.candidates import DRAFTING_OFF
from specbench.models import registry

ROOT = Path(__file__).resolve().parents[2]
# small cost profile and calibration: the first run on a machine measures them (cached after)
# a fixed small EAGLE tree: the draft runs whatever the auto shape would pick on this machine
SMALL_EAGLE_TREE = ["method.tree.top_k=4", "method.tree.depth=3", "method.tree.total_tokens=12"]
QUICK = [
    "dataset.limit=2",
    "dataset.max_turns=1",
    "gen.max_new_tokens=12",
    "costs.max_n=8",
    "costs.repeats=1",
    "costs.calibration_prompts=1",
    "costs.calibration_tokens=12",
]


def run(*args, tmp_path, env=None):
    """`python -m specbench output_root=tmp_path *args`, in this process (conftest.run_in_process)."""
    return run_in_process(
        [sys.executable, "-m", "specbench", f"output_root={tmp_path}", *args], env={**os.environ, **(env or {})}
    )


def run_process(*args, tmp_path, env=None):
    """The same command in a process of its own."""
    return subprocess.run(
        [sys.executable, "-m", "specbench", f"output_root={tmp_path}", *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=600,
        env={**os.environ, **(env or {})},
    )


def one_error_line(result, *fragments):
    assert result.returncode == 2, result.stderr[-2000:]
    lines = [l for l in result.stderr.splitlines() if l.startswith("error:")]
    assert len(lines) == 1 and "Traceback" not in result.stderr, result.stderr[-2000:]
    for fragment in fragments:
        assert fragment in lines[0], lines[0]


def summary_of(tmp_path, method):
    [path] = (tmp_path / method).glob("*/summary.json")
    return json.loads(path.read_text())


def test_cfg_job_shows_the_composed_config(tmp_path):
    result = run("method=pld", "--cfg", "job", tmp_path=tmp_path)
    assert result.returncode == 0
    assert "name: pld" in result.stdout and "max_ngram: 3" in result.stdout


def test_bad_input_is_one_line_and_exit_2(tmp_path):
    """Through the command itself: an unknown group choice and a bad value, each one line."""
    one_error_line(run_process("method=nope", tmp_path=tmp_path), "method:", "nope", "choose one of")
    one_error_line(run_process(*QUICK, "gen.max_new_tokens=0", tmp_path=tmp_path), "gen.max_new_tokens")


@pytest.mark.parametrize(
    "group,choice", [("method", "nope"), ("model", "gpt-9"), ("dataset", "nope"), ("hardware", "tpu")]
)
def test_unknown_choice(group, choice):
    """The other commands compose configs too (specbench.run.costs, entmtp_search): the same one line."""
    from specbench.errors import ConfigError
    from specbench.run.config import compose_config

    with pytest.raises(ConfigError, match=f"^{group}: unknown {group} '{choice}'"):
        compose_config([f"{group}={choice}"])


@pytest.mark.parametrize(
    "override,key",
    [
        ("gen.max_new_tokens=0", "gen.max_new_tokens"),
        ("gen.temperature=-0.5", "gen.temperature"),
        ("gen.top_p=0", "gen.top_p"),
        ("gen.top_p=1.5", "gen.top_p"),
        ("method.tree.gamma=0", "method.tree.gamma"),
        ("costs.min_gain=-0.1", "costs.min_gain"),
        ("baseline.mode=sometimes", "baseline.mode"),
        ("dataset.metrics=[bleu_chrf,nope]", "dataset.metrics"),
        ("method.verifier.theta=0", "method.verifier.theta"),
        ("method.verifier.theta=1.5", "method.verifier.theta"),
        ("seed=xyz", "seed"),
        ("method.tree.mu=1.5", "method.tree.mu"),
        ("method.tree.budget=1", "method.tree.budget"),
        ("dataset.calibration=prose", "dataset.calibration"),
        ("engine.compile=fast", "engine.compile"),
        ("engine.int8_drafts=always", "engine.int8_drafts"),
        ("engine.fp16_weights=yes", "engine.fp16_weights"),
        ("gen.batch_size=33", "gen.batch_size"),
        ("gen.stop_strings=abc", "gen.stop_strings"),  # not the stop strings a, b and c
        ("gen.stop_strings=[abc,'']", "gen.stop_strings"),
        ("gen.temperature=abc", "gen.temperature"),
        ("gen.top_k=1.5", "gen.top_k"),
        ("gen.truncate_prompt=maybe", "gen.truncate_prompt"),
        ("dataset.seed=abc", "dataset.seed"),
        ("hardware.forward=bogus", "hardware.forward"),
        ("hardware.dtype=fp64", "hardware.dtype"),
    ],
)
def test_bad_values_fail_before_any_model_loads(override, key, tmp_path):
    """The run's constructor refuses them (the command prints its ConfigError as one line, as
    above): bad input costs a second, not a model load and the dtype and compile probes."""
    from specbench.errors import ConfigError
    from specbench.run.config import compose_config
    from specbench.run.runner import Runner

    extra = {"gamma": ["method=pld"], "theta": ["method=mars"], "mu": ["method=talon"], "budget": ["method=talon"]}
    extra = next((v for k, v in extra.items() if k in override), [])
    with pytest.raises(ConfigError, match=f"^{re.escape(key)}: "):
        Runner(compose_config([*extra, *QUICK, override]), tmp_path)


def test_dtype_choices_include_auto(tmp_path):
    from specbench.errors import ConfigError
    from specbench.run.config import compose_config
    from specbench.run.runner import Runner

    with pytest.raises(ConfigError, match=r"^hardware.dtype: unknown 'fp64'; choose one of auto, "):
        Runner(compose_config([*QUICK, "hardware.dtype=fp64"]), tmp_path)


@pytest.mark.skipif(torch.cuda.is_available(), reason="refused only where torch has no CUDA")
def test_gpu_hardware_without_cuda(tmp_path):
    one_error_line(run("hardware=gpu", *QUICK, tmp_path=tmp_path), "hardware.device", "cuda", "hardware=cpu")


def test_output_root_under_a_file(tmp_path):
    (tmp_path / "file").write_text("")
    result = run_in_process([sys.executable, "-m", "specbench", f"output_root={tmp_path / 'file' / 'out'}", *QUICK])
    one_error_line(result, "output_root", str(tmp_path / "file"), "not a directory")


@pytest.mark.skipif(not Path("/sys").is_dir(), reason="needs a directory nobody may create entries in (sysfs)")
def test_output_root_in_a_read_only_directory():
    result = run_in_process([sys.executable, "-m", "specbench", "output_root=/sys/specbench-outputs", *QUICK])
    one_error_line(result, "output_root", "/sys/specbench-outputs", "writable")


def test_slurm_launcher_without_slurm(tmp_path):
    """(A process of its own: before this was refused, the launcher ran.)"""
    no_slurm = {**os.environ, "PATH": str(Path(sys.executable).parent)}
    args = [sys.executable, "-m", "specbench", "-m", "hydra/launcher=slurm", f"output_root={tmp_path}", *QUICK]
    result = subprocess.run(args, cwd=ROOT, capture_output=True, text=True, timeout=600, env=no_slurm)
    one_error_line(result, "hydra/launcher", "srun")


def test_truncated_head_weights(tmp_path):
    """A head whose download or copy stopped midway: refused from its header, before any model loads."""
    from safetensors.torch import save_file

    head = tmp_path / "head"
    head.mkdir()
    (head / "config.json").write_text(
        (ROOT / "specbench" / "weights" / "smollm2-135m-eagle3" / "config.json").read_text()
    )
    save_file({"fc.weight": torch.zeros(64, 64)}, head / "model.safetensors")
    whole = (head / "model.safetensors").read_bytes()
    (head / "model.safetensors").write_bytes(whole[: len(whole) // 2])
    result = run("method=eagle3", f"model.eagle3.path={head}", *SMALL_EAGLE_TREE, *QUICK, tmp_path=tmp_path)
    one_error_line(result, "method.drafter.head", str(head / "model.safetensors"), "truncated")


def test_model_not_available_offline(tmp_path):
    """Refused before the dtype probe says it times the model."""
    result = run_process("model=qwen3-8b", *QUICK, tmp_path=tmp_path, env={"HF_HUB_OFFLINE": "1"})
    one_error_line(result, "model.id", "Qwen/Qwen3-8B", "model.path=")
    assert "hardware.dtype=auto" not in result.stdout, result.stdout


def test_hub_dataset_not_available_offline(tmp_path):
    result = run_process("dataset=wmt19", *QUICK, tmp_path=tmp_path, env={"HF_HUB_OFFLINE": "1"})
    one_error_line(result, "dataset.path", "wmt/wmt19", "dataset.path=/your/wmt19.jsonl", "docs/datasets.md")


def test_eagle3_without_a_head_for_the_target(tmp_path):
    result = run("method=eagle3", "method.drafter.head=null", *QUICK, tmp_path=tmp_path)
    one_error_line(result, "method.drafter.head", "method.drafter.head={name:")


def test_prompt_longer_than_the_context(tmp_path):
    questions = tmp_path / "long.jsonl"
    questions.write_text(json.dumps({"question_id": 1, "category": "x", "turns": ["word " * 400]}) + "\n")
    args = [
        "dataset=jsonl",
        f"dataset.path={questions}",
        "model.context_length=300",
        "gen.max_new_tokens=8",
        "baseline.mode=none",
        "hardware=cpu-fp32",
        "costs.max_n=8",
        "costs.repeats=1",
    ]
    from conftest import own_cache

    cache = own_cache(tmp_path / "cache")
    one_error_line(run(*args, tmp_path=tmp_path, env={"SPECBENCH_CACHE": str(cache)}), "gen.truncate_prompt", "300")
    assert not any((cache / "costs").iterdir())  # it failed before timing anything on this machine
    assert run(*args, "gen.truncate_prompt=true", tmp_path=tmp_path).returncode == 0


def test_cast_batched_run_is_identical_to_ar_at_the_same_batch_size(tmp_path):
    args = [
        "dataset.limit=4",
        "dataset.max_turns=1",
        "gen.max_new_tokens=12",
        "costs.max_n=8",
        "costs.repeats=1",
        "costs.calibration_prompts=2",
        "costs.calibration_tokens=12",
    ]
    thresholds = ["method.tree.c1=3", "method.tree.c2=3", "method.tree.c3=3"]  # the paper's, so CAST drafts
    result = run("method=cast", "hardware=cpu-fp32", "gen.batch_size=2", *thresholds, *args, tmp_path=tmp_path)
    assert result.returncode == 0, result.stderr[-2000:]
    summary = summary_of(tmp_path, "cast")
    assert summary["results"]["samples"] == 4 and summary["results"]["batch_size"] == 2
    assert summary["baseline"]["batch_size"] == 2  # AR at the same batch size, same prompts
    assert summary["agreement_with_baseline"]["exact_match_rate"] == 1.0
    assert summary["speedup_ci95"] is None  # two batches are too few to resample
    # CAST's shape is fixed here: its tree work was timed on calibration prompts and priced in
    assert summary["cost_model"]["tree_overhead_ms_per_step"] is not None
    line = json.loads((Path(summary["out_dir"]) / "decisions.json").read_text())["tree_overhead"]
    assert line["ms"] >= 0 and line["ms_per_node"] == 0.0  # one shape timed: a constant a step


def test_pld_run_side_by_side_in_fp32_is_identical_to_ar(tmp_path):
    result = run("method=pld", "hardware=cpu-fp32", *QUICK, tmp_path=tmp_path)
    assert result.returncode == 0, result.stderr[-2000:]
    summary = summary_of(tmp_path, "pld")
    assert summary["results"]["samples"] == 2 and summary["baseline"]["samples"] == 2
    assert summary["agreement_with_baseline"]["exact_match_rate"] == 1.0
    assert summary["speedup"] > 0 and summary["baseline_source"].startswith("paired")
    assert summary["environment"]["dtype"] == "float32" and summary["environment"]["torch_threads"] == 2
    assert summary["environment"]["precision"] == "float32"  # a hand-set dtype never rounds the weights to fp16
    assert summary["environment"]["git_dirty"] in (True, False)
    # gamma: auto was chosen from measured costs (a gamma, or no drafting when none is predicted to
    # beat AR on this machine); the summary names the CPU and predicts the speedup
    choice = summary["tree_choice"]
    assert summary["config"]["method"]["tree"]["gamma"] == "auto"
    assert {c["tree"]["gamma"] for c in choice["candidates"]} <= set(range(1, 11)) and len(choice["candidates"]) > 1
    best = max(c["predicted_speedup"] for c in choice["candidates"])
    if best > 1.0 + MIN_GAIN:
        assert choice["chosen"]["gamma"] in range(1, 11) and choice["predicted_speedup"] == best
    else:
        assert choice["chosen"] == DRAFTING_OFF and summary["results"]["draft_forwards"] == 0
    assert (
        summary["cost_model"]["predicted_speedup"] > 0
        and summary["environment"]["fingerprint"]["cpu_model"] != "x86_64"
    )
    assert "predicted" in result.stdout and "tree shape chosen from measured costs" in result.stdout


def test_interrupt_keeps_finished_samples_and_resumes(tmp_path):
    costs = [a for a in QUICK if a.startswith("costs.")]
    args = [
        sys.executable,
        "-m",
        "specbench",
        f"output_root={tmp_path}",
        "method=pld",
        "hardware=cpu-fp32",
        "dataset.limit=4",
        "dataset.max_turns=1",
        "gen.max_new_tokens=24",
        *costs,
    ]
    # output to a file, not a pipe: progress bars would fill an unread pipe and block the run
    log = tmp_path / "stderr.txt"
    with open(log, "w") as err:
        process = subprocess.Popen(args, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=err, text=True)
    try:
        deadline = time.time() + 300
        samples = None
        while time.time() < deadline:
            found = list((tmp_path / "pld").glob("*/samples.jsonl"))
            if found and found[0].read_text().count("\n") >= 1:
                samples = found[0]
                break
            time.sleep(0.2)
        assert samples is not None, "no sample finished"
        process.send_signal(signal.SIGINT)
        process.wait(timeout=120)
    finally:
        if process.poll() is None:
            process.kill()
    stderr = log.read_text()
    kept = [json.loads(l) for l in samples.read_text().splitlines()]
    if process.returncode != 0:  # it may have finished before the signal landed
        assert process.returncode == 130 and "run the same command to resume" in stderr
        assert 1 <= len(kept) < 4
    result = subprocess.run(args, cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stderr[-2000:]
    ids = [json.loads(l)["id"] for l in samples.read_text().splitlines()]
    assert sorted(ids) == sorted(set(ids)) and len(ids) == 4
    assert [r["id"] for r in kept] == ids[: len(kept)]
    # run again when finished: nothing decodes, and the summary stays the one the decoding session wrote
    summary_file = samples.parent / "summary.json"
    summary = json.loads(summary_file.read_text())
    summary["environment"]["git_commit"] = "the-session-that-decoded"
    summary_file.write_text(json.dumps(summary, indent=2))
    before = samples.read_text()
    again = subprocess.run(args, cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert again.returncode == 0, again.stderr[-2000:]
    assert samples.read_text() == before and json.loads(summary_file.read_text()) == summary


def test_sps_with_the_shipped_draft_is_identical_to_ar_in_fp32(tmp_path):
    result = run("method=sps", "hardware=cpu-fp32", "dataset=gsm8k", "method.tree.gamma=3", *QUICK, tmp_path=tmp_path)
    assert result.returncode == 0, result.stderr[-2000:]
    summary = summary_of(tmp_path, "sps")
    assert summary["agreement_with_baseline"]["exact_match_rate"] == 1.0
    assert summary["quality"]["gsm8k_scored"] == 2 and summary["quality"] == summary["baseline_quality"]
    assert summary["results"]["draft_forwards"] > 0 and summary["results"]["delta"] > 0


def test_eagle3_with_the_shipped_head_is_identical_to_ar_in_fp32(tmp_path):
    tree = ["method.tree.top_k=10", "method.tree.depth=6", "method.tree.total_tokens=12"]
    result = run("method=eagle3", "hardware=cpu-fp32", *tree, "dataset=humaneval", *QUICK, tmp_path=tmp_path)
    assert result.returncode == 0, result.stderr[-2000:]
    summary = summary_of(tmp_path, "eagle3")
    assert summary["agreement_with_baseline"]["exact_match_rate"] == 1.0
    assert summary["quality"]["humaneval_scored"] == 2 and summary["quality"] == summary["baseline_quality"]
    assert summary["results"]["delta"] == 7.0  # EAGLE's depth: the first draft forward, then 6 more


@pytest.mark.parametrize(
    "method, shape, delta",
    [
        ("eagle", ["method.tree.size=null"], 5.0),  # the default static tree: one head forward per depth
        ("eagle2", ["method.tree.top_k=4", "method.tree.depth=3", "method.tree.total_tokens=10"], 4.0),
    ],
)
def test_eagle1_head_shipped_for_the_embedded_model_is_identical_to_ar_in_fp32(method, shape, delta, tmp_path):
    result = run(f"method={method}", "hardware=cpu-fp32", *shape, "dataset=humaneval", *QUICK, tmp_path=tmp_path)
    assert result.returncode == 0, result.stderr[-2000:]
    summary = summary_of(tmp_path, method)
    assert summary["agreement_with_baseline"]["exact_match_rate"] == 1.0
    assert summary["results"]["delta"] == delta


def test_lookahead_on_the_embedded_model_is_identical_to_ar_in_fp32(tmp_path):
    shape = ["method.tree.window=5", "method.tree.ngram=3", "method.tree.candidates=4"]
    result = run("method=lookahead", "hardware=cpu-fp32", *shape, "dataset=humaneval", *QUICK, tmp_path=tmp_path)
    assert result.returncode == 0, result.stderr[-2000:]
    summary = summary_of(tmp_path, "lookahead")
    assert summary["agreement_with_baseline"]["exact_match_rate"] == 1.0
    assert summary["results"]["draft_forwards"] == 0  # the target drafts for itself


@pytest.mark.parametrize("method, depth", [("hydra", 3), ("medusa", 4)])
def test_heads_shipped_for_the_embedded_model_are_identical_to_ar_in_fp32(method, depth, tmp_path):
    result = run(
        f"method={method}", "hardware=cpu-fp32", "dataset=humaneval", "method.tree.size=null", *QUICK, tmp_path=tmp_path
    )
    assert result.returncode == 0, result.stderr[-2000:]
    summary = summary_of(tmp_path, method)
    assert summary["agreement_with_baseline"]["exact_match_rate"] == 1.0
    assert summary["results"]["delta"] == depth  # one head forward per depth of the default tree


def test_cached_baseline_needs_an_ar_run_first_in_the_same_dtype(tmp_path):
    """(fp32 pinned: with dtype auto, AR and a drafting method may decode in different
    dtypes on this CPU, which the last step checks is refused.)"""
    args = ["method=pld", "baseline.mode=cached", "hardware=cpu-fp32", *QUICK]
    one_error_line(run(*args, tmp_path=tmp_path), "baseline.mode", "method=ar")
    assert run("method=ar", "hardware=cpu-fp32", *QUICK, tmp_path=tmp_path).returncode == 0
    assert run(*args, tmp_path=tmp_path).returncode == 0
    summary = summary_of(tmp_path, "pld")
    assert summary["baseline_source"] == "cached run, outputs only" and "speedup" not in summary
    [decisions] = (tmp_path / "ar").glob("*/decisions.json")
    assert json.loads(decisions.read_text())["profile"] is None  # AR has no speedup to predict: no profile measured
    decisions.write_text(json.dumps({**json.loads(decisions.read_text()), "dtype": "bfloat16"}))
    for done in (tmp_path / "pld").glob("*/samples.jsonl"):
        done.unlink()  # samples left to decode: the run loads and checks the cached AR run
    one_error_line(
        run(*args, tmp_path=tmp_path), "baseline.mode", "decoded in bfloat16 and this one decodes in float32"
    )


def test_talon_with_the_shipped_head_is_identical_to_ar_in_fp32(tmp_path):
    result = run(
        "method=talon", "hardware=cpu-fp32", "method.tree.budget=16", "method.tree.top_k=4", *QUICK, tmp_path=tmp_path
    )
    assert result.returncode == 0, result.stderr[-2000:]
    summary = summary_of(tmp_path, "talon")
    assert summary["agreement_with_baseline"]["exact_match_rate"] == 1.0
    [line] = [json.loads(l) for l in open(next((tmp_path / "talon").glob("*/samples.jsonl")))][:1]
    assert all(sum(w) <= 15 for w in line["method"]["tree_widths"])
    assert sum(line["method"]["step_draft_forwards"]) == line["method"]["draft_forwards"]
    assert [len(r) for r in line["method"]["accepted_sibling_ranks"]] == [
        n - 1 for n in line["method"]["accept_lengths"]
    ]


def test_mars_records_its_decisions_and_the_target_nll(tmp_path):
    result = run(
        "method=mars",
        "hardware=cpu-fp32",
        "method.verifier.theta=0.5",
        "gen.temperature=1.0",
        *SMALL_EAGLE_TREE,
        *QUICK,
        tmp_path=tmp_path,
    )
    assert result.returncode == 0, result.stderr[-2000:]
    summary = summary_of(tmp_path, "mars")
    counts = summary["results"]["verifier"]
    assert counts["relaxed"] + counts["sampled"] + counts["exact"] > 0 and counts["rejected"] > 0
    assert summary["results"]["target_nll_per_token"] > 0 and summary["baseline"]["target_nll_per_token"] > 0
    assert "mean_common_prefix_tokens" in summary["agreement_with_baseline"]


@pytest.mark.parametrize(
    "probe",
    [
        # AMD EPYC Zen 3, AVX2 only: bf16 wins one-token forwards, fp32 wide ones (AR is faster in the other dtype)
        {
            "bfloat16": {"1": 37.0, "4": 90.0, "11": 230.0, "16": 317.0, "64": 1180.0},
            "float32": {"1": 67.0, "4": 129.0, "11": 142.0, "16": 151.0, "64": 315.0},
        },
        # Intel Xeon Emerald Rapids, AMX: fp32 wins one-token forwards, bf16 wide ones (the tree sizes decide);
        # the same path with the dtypes' roles swapped, a minute on a 2-core CPU: make test-slow runs it
        pytest.param(
            {
                "bfloat16": {"1": 37.0, "4": 37.0, "11": 36.0, "16": 35.0, "64": 56.0},
                "float32": {"1": 32.0, "4": 50.0, "11": 60.0, "16": 65.0, "64": 129.0},
            },
            marks=pytest.mark.slow,
        ),
    ],
    ids=["avx2", "amx"],
)
def test_where_the_dtypes_split_a_drafting_run_weighs_both(tmp_path, probe):
    """Where neither dtype wins every probed size, a drafting method whose shape is `auto`
    is calibrated in the rule's dtype, priced in the other too, and decodes in the dtype and
    shape predicted fastest, its AR baseline paired in that same dtype; both dtypes' profiles
    are cached and the summary says what was weighed."""
    from conftest import own_cache

    from specbench.costs import dtype as dtype_rule
    from specbench.costs.fingerprint import device_fingerprint

    cache = own_cache(tmp_path / "cache")  # the other tests keep this machine's real probe
    here = device_fingerprint("cpu", 2)
    # caches name the weights
    target = registry.cache_name(OmegaConf.to_container(OmegaConf.load(ROOT / "conf" / "model" / "smollm2-135m.yaml")))
    dtype_rule.probe_path(cache / "costs", f"{target}-auto-compile-off", here).write_text(
        json.dumps(
            {
                "fingerprint": here,
                "version": dtype_rule.PROBE_VERSION,
                "context": 256,
                "probe": probe,
                "parts": [f"n={n}" for n in probe["float32"]],  # PLD's chains verify at most 11
            }
        )
    )
    # fp16 weights and packing off: the probe above is of plain bf16 and fp32 forwards (its cache
    # name says so), and no compile probe of either dtype runs
    result = run(
        "method=pld",
        "hardware=cpu",
        "engine.fp16_weights=off",
        "engine.compile=off",
        *QUICK,
        tmp_path=tmp_path,
        env={"SPECBENCH_CACHE": str(cache)},
    )
    assert result.returncode == 0, result.stderr[-2000:]
    [decisions] = (tmp_path / "pld").glob("*/decisions.json")
    decisions = json.loads(decisions.read_text())
    joint = decisions["dtype_choice"]["joint"]
    assert set(joint["best_gain"]) == {"float32", "bfloat16"} and decisions["dtype"] == joint["dtype"]
    assert json.loads(decisions["profile"])["key"]["dtype"] == joint["dtype"]
    assert {
        p.name.removeprefix(f"{target}-").split("-")[0] for p in (cache / "costs").glob(f"{target}-*-LeanTreeLM*.json")
    } == {"float32", "bfloat16"}
    summary = summary_of(tmp_path, "pld")
    assert summary["environment"]["dtype"] == joint["dtype"] and summary["baseline_source"].startswith("paired")
    assert joint["dtype"] in summary["environment"]["dtype_note"] and "dtype:" in result.stdout
    if joint["chosen"] == DRAFTING_OFF:
        # AR's faster dtype by the two cost profiles this run measured (not by the probe above:
        # where the two are close for AR, as on an AMX Xeon, either can win)
        assert summary["results"]["draft_forwards"] == 0 and joint["dtype"] == min(
            joint["ar_ms"], key=joint["ar_ms"].get
        )
    else:
        assert summary["tree_choice"]["chosen"] == joint["chosen"] and joint["predicted_gain"] > 1.0 + MIN_GAIN
