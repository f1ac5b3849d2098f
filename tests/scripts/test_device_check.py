"""scripts/device_check.py --tiny: the GPU check's every section on tiny shapes on a CPU, as
the lent machine would run it: no hydra, omegaconf or any package beyond torch,
transformers, safetensors, numpy and tqdm (with what they require), specbench not installed
and no PYTHONPATH to it, results in $OUT. A section forced to fail, cut short by the clock,
unrenderable or losing the CUDA context leaves its record and the others there."""

import copy
import importlib.util
import json
import os
import subprocess
import sys
import time
from types import SimpleNamespace

import pytest
import torch
from conftest import ROOT
from transformers import AutoModelForCausalLM

SECTIONS = ("build", "identity", "bf16 agreement", "f(n)", "step split", "host syncs", "attention")
MODELS = ("llama3.1-8b", "qwen3-8b")


def load_device_check():
    """The script as a module, without the TQDM_DISABLE it sets for its own process."""
    saved = os.environ.get("TQDM_DISABLE")
    spec = importlib.util.spec_from_file_location("device_check", ROOT / "scripts" / "device_check.py")
    module = sys.modules["device_check"] = importlib.util.module_from_spec(spec)  # dataclasses look it up
    spec.loader.exec_module(module)
    if saved is None:
        os.environ.pop("TQDM_DISABLE", None)
    return module


dc = load_device_check()


def only(tmp_path, packages: str = "torch,transformers,safetensors,numpy,tqdm") -> dict:
    """The environment of a process that sees only `packages` (and what they require):
    tests/only_packages.py as its sitecustomize, the only thing on its PYTHONPATH."""
    guard = tmp_path / "guard"
    guard.mkdir(exist_ok=True)
    (guard / "sitecustomize.py").write_text(f"exec(open({str(ROOT / 'tests' / 'only_packages.py')!r}).read())\n")
    return {
        "PATH": os.environ["PATH"],
        "HOME": os.environ.get("HOME", str(tmp_path)),
        "PYTHONPATH": str(guard),
        "ONLY_PACKAGES": packages,
        "ONLY_PACKAGES_REPOSITORY": str(ROOT),
        "SPECBENCH_CACHE": os.environ["SPECBENCH_CACHE"],
        "HF_HUB_OFFLINE": "1",
    }


def lent_machine_run(tmp_path, *args: str) -> tuple[subprocess.CompletedProcess, dict, str]:
    """The check run from outside the repository with only the lent machine's packages importable."""
    out = tmp_path / "out"
    env = only(tmp_path) | {"OUT": str(out)}
    result = subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "device_check.py"), "--tiny", *args],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=3600,
    )
    report = json.loads((out / "device-check.json").read_text()) if (out / "device-check.json").is_file() else None
    markdown = (out / "device-check.md").read_text() if (out / "device-check.md").is_file() else ""
    return result, report, markdown


def test_the_guard_hides_what_the_lent_machine_lacks(tmp_path):
    env = only(tmp_path)
    code = (
        "import importlib.util as u; print([u.find_spec(m) is None for m in ('hydra', 'omegaconf', 'scipy', "
        "'specbench', 'yaml', 'torch')])"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300
    )
    assert result.stdout.strip() == "[True, True, True, True, False, False]", result.stderr[-2000:]


@pytest.fixture(scope="module")
def full_run(tmp_path_factory):
    return lent_machine_run(tmp_path_factory.mktemp("device-check"))


def test_every_section_lands_in_out_with_identical_ids(full_run):
    result, report, markdown = full_run
    assert result.returncode == 0, (result.stdout[-2000:], result.stderr[-3000:])
    assert len(result.stdout) < 12_000  # what the lent machine sends back of the output
    sections = report["sections"]
    assert list(sections) == [f"{m}: {s}" for m in MODELS for s in SECTIONS]
    assert all(entry["status"] == "ok" for entry in sections.values()), {
        k: v.get("traceback") for k, v in sections.items()
    }
    assert all(f"## {label}" in markdown for label in sections)
    # the static forward's folded grouped-query attention, and which kernel each kind of call got
    kernels = report["attention_kernels"]
    assert kernels["order_on_gpu"][0] == "efficient_attention" and "cudnn_attention" not in kernels["order_on_gpu"]
    assert {"folded"} <= {r["layout"] for r in kernels["ran"]} and all(r["kernel"] for r in kernels["ran"])
    assert "Attention kernels the engine's calls got" in markdown
    for model in MODELS:
        identity = sections[f"{model}: identity"]["result"]["rows"]
        checks = {(row["check"], row["batch"]) for row in identity}
        assert ("our AR vs transformers generate", 1) in checks and (
            "oracle SpS vs our AR (staggered misses)",
            4,
        ) in checks
        assert all(row["identical"] and row["tokens"] > 0 for row in identity), identity
        oracle = [row for row in identity if row["check"].startswith("oracle") and "staggered" not in row["check"]]
        # τ = levels + 1 but for the last step
        assert len(oracle) == 4 and all(row["full_steps"] == 1.0 and row["tau"] > row["levels"] for row in oracle), (
            oracle
        )
        staggered = [row for row in identity if "staggered" in row["check"]]
        assert all(row["full_steps"] < 0.5 for row in staggered), staggered
        curves = sections[f"{model}: f(n)"]["result"]["curves"]
        assert {(c["batch"], c["context"]) for c in curves.values()} == {(b, c) for b in (1, 4, 16) for c in (64, 300)}
        assert all(len(c["ms"]) == 64 and min(c["ms"]) > 0 and c["f(60)/f(1)"] > 0 for c in curves.values())
        attention = sections[f"{model}: attention"]["result"]["rows"]
        assert all(o["ran"] is not None for row in attention for o in row["options"].values())
        split = sections[f"{model}: step split"]["result"]
        assert {(r["method"], r["batch"]) for r in split["split"]} == {
            (m, b) for m in ("ar", "eagle3", "oracle eagle3") for b in (1, 4)
        }
        assert all(r["wall_ms_per_step"] > 0 and r["parts_ms_per_step"]["target forward"] > 0 for r in split["split"])
        assert split["ar_vs_generate"]["ours_tok_s"] > 0 and len(split["ar_ms_per_step"]) == 3
        syncs = {
            (r["method"], r["batch"]): r["engine_count_per_step"]
            for r in sections[f"{model}: host syncs"]["result"]["rows"]
        }
        # reads and blocking copies alike
        assert syncs["ar", 1] == syncs["ar", 4] <= 3 and syncs["eagle3", 1] == syncs["eagle3", 4] <= 4, syncs
    # the GPU's static forward, run eagerly
    assert sections["llama3.1-8b: build"]["result"]["forward"] == "LeanTreeLM-static"
    assert set(report["memory_estimate_gib"]) == set(MODELS) and "render_failures" not in report


def test_the_step_split_times_the_tree_and_the_bookkeeping_apart_from_the_host(full_run):
    """The tree's own work (EAGLE's log-softmax, top-k and sort) and the loop's NLL and
    statistics are parts of their own: the host's share is what is left after them."""
    _, report, _ = full_run
    for model in MODELS:
        for row in report["sections"][f"{model}: step split"]["result"]["split"]:
            parts = row["parts_ms_per_step"]
            assert {"tree", "bookkeeping", "target forward", "verifier"} <= set(parts), row
            if row["method"] != "ar":
                assert parts["tree"] > 0 and parts["draft levels"] > 0, row
            left = max(row["wall_ms_per_step"] - sum(parts.values()), 0.0)
            assert abs(row["host_ms_per_step"] - left) < 0.01, row


def cut_results(result: dict):
    """`result` as a section leaves it when it stops after each of its keys, and with its
    last list or dict cut to its first item (a curve cut after its first block of n)."""
    keys = list(result)
    for k in range(len(keys) + 1):
        yield {key: result[key] for key in keys[:k]}
    cut = copy.deepcopy(result)
    for value in cut.values():
        if isinstance(value, list):
            del value[1:]
        if isinstance(value, dict):
            for key in list(value)[1:]:
                del value[key]
            for inner in value.values():
                if isinstance(inner, dict) and "ms" in inner:
                    del inner["ms"][dc.N_BLOCK :], inner["spread"][dc.N_BLOCK :], inner[f"f({dc.TREE_NODES})/f(1)"]
    yield cut


def test_every_section_renders_from_a_partial_result(full_run):
    _, report, _ = full_run
    for label, entry in report["sections"].items():
        for status in ("stopped: out of budget", "failed"):
            for result in cut_results(entry["result"]):
                partial = copy.deepcopy(report) | {
                    "sections": {label: {"status": status, "traceback": "Traceback: ...", "result": result}}
                }
                text = dc.markdown(partial)
                assert "render failed" not in text and f"| {label} | {status} |" in text, (label, result, text)


def test_a_section_that_raises_midway_lands_with_what_it_measured(tmp_path):
    def stops_after_one_row(state, clock, result):
        result |= {"dtype": "bfloat16", "split": [{"method": "ar", "batch": 1, "steps": 3, "wall_ms_per_step": 9.0}]}
        result["split"][0] |= {"parts_ms_per_step": {"target forward": 8.0}, "host_ms_per_step": 1.0}
        raise ValueError("a fault inside the step split")

    report = dc.Report(tmp_path, True, dc.TINY, 100.0)
    report.run("m: step split", stops_after_one_row, {}, 50.0, False, print)
    saved = json.loads((tmp_path / "device-check.json").read_text())["sections"]["m: step split"]
    assert saved["status"] == "failed" and "a fault inside" in saved["traceback"]
    assert saved["result"]["split"][0]["host_ms_per_step"] == 1.0
    markdown = (tmp_path / "device-check.md").read_text()
    assert "## m: step split: failed" in markdown and "| ar | 1 | 3 | 9.0 | 1.0 | target forward 8.0 |" in markdown


def test_a_result_that_cannot_render_is_recorded_not_raised(tmp_path):
    def odd_rows(state, clock, result):
        result |= {"dtype": "float32", "rows": ["not a row"]}

    report = dc.Report(tmp_path, True, dc.TINY, 100.0)
    report.run("m: identity", odd_rows, {}, 50.0, False, print)
    saved = json.loads((tmp_path / "device-check.json").read_text())
    assert saved["sections"]["m: identity"]["result"]["rows"] == ["not a row"]
    assert "TypeError" in saved["render_failures"]["m: identity"]
    assert "render failed: TypeError" in (tmp_path / "device-check.md").read_text()


def test_a_lost_cuda_context_is_recorded_and_ends_the_check(tmp_path, monkeypatch):
    """After an illegal address every CUDA call fails, synchronize too: the failing section
    and what it measured land, the sections after it are skipped, and the exit status says so.
    Only the calls the report makes are faked: nothing else here touches CUDA."""

    ran, faulted = [], []

    def lost(*_):
        faulted.append(True)
        raise RuntimeError("CUDA error: an illegal memory access was encountered")

    def synchronize():
        if faulted:  # sticky: every call after the fault fails
            lost()

    def section(name: str):
        def fn(state, clock, result):
            ran.append(name)
            state["model"] = "built"
            if name == "f(n)":
                result |= {"dtype": "bfloat16", "forward": "LeanTreeLM", "n": [1], "curves": {}}
                lost()

        return fn

    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "synchronize", synchronize)
    monkeypatch.setattr(torch.cuda, "empty_cache", lambda: pytest.fail("empty_cache on a lost context"))
    monkeypatch.setattr(torch.cuda, "reset_peak_memory_stats", lambda: None)
    monkeypatch.setattr(torch.cuda, "max_memory_allocated", lambda: 0)
    monkeypatch.setattr(torch.cuda, "memory_reserved", lambda: 0)
    monkeypatch.setattr(dc, "SECTIONS", {s: section(s) for s in SECTIONS})
    monkeypatch.setenv("OUT", str(tmp_path))
    assert dc.main(["--tiny", "--budget", "1e9"]) == 3
    assert ran == ["build", "identity", "bf16 agreement", "f(n)"]
    sections = json.loads((tmp_path / "device-check.json").read_text())["sections"]
    failed = sections["llama3.1-8b: f(n)"]
    assert failed["status"] == "failed" and "illegal memory access" in failed["cuda_context"]
    assert failed["result"]["n"] == [1]
    after = [label for label in sections if label not in {f"llama3.1-8b: {s}" for s in SECTIONS[:4]}]
    assert len(after) == 2 * len(SECTIONS) - 4
    assert all(
        sections[label]["status"] == "skipped: the CUDA context was lost in an earlier section" for label in after
    )
    assert "## llama3.1-8b: f(n): CUDA context lost" in (tmp_path / "device-check.md").read_text()


class Countdown(dc.Deadline):
    """A clock that runs out at its `checks`-th reading."""

    def __init__(self, checks: int):
        super().__init__(float("inf"))
        self.checks = checks

    def check(self) -> None:
        self.checks -= 1
        if self.checks <= 0:
            raise dc.OutOfTime


@pytest.fixture
def tiny_state(tmp_path):
    torch.manual_seed(0)
    config = dc.target_configs(True)["llama3.1-8b"]
    state = {"name": "llama3.1-8b", "config": config, "scale": dc.TINY, "workdir": tmp_path}
    dc.build(state, dc.Deadline(float("inf")), {})
    yield state
    state["engine"].lm.release()


def test_an_f_n_curve_stops_at_the_first_block_past_the_clock(tiny_state):
    result = {}
    with pytest.raises(dc.OutOfTime):
        dc.forward_costs(tiny_state, Countdown(1), result)
    (curve,) = result["curves"].values()
    assert len(curve["ms"]) == 16 and "f(60)/f(1)" not in curve  # the first block of n
    assert "| 16 | " in "\n".join(dc.render_costs(result))


def test_a_decode_stops_at_the_first_step_past_the_clock(tiny_state):
    lm, forwards = tiny_state["engine"].lm, []
    forward = lm.forward
    lm.forward = lambda *args, **kwargs: forwards.append(1) or forward(*args, **kwargs)
    with pytest.raises(dc.OutOfTime):
        dc.identity(tiny_state, Countdown(1), {})
    del lm.forward
    assert len(forwards) == 2  # the prefill and one step


def test_a_part_inside_another_is_taken_off_it():
    """The draft levels the tree's grow calls count as draft levels, not as the tree's."""

    class Parts:
        def level(self):
            time.sleep(0.2)

        def grow(self):
            time.sleep(0.02)
            self.level()

    parts, owner = Parts(), SimpleNamespace(bookkeeping=lambda: time.sleep(0.01))
    original = owner.bookkeeping
    timer = dc.PhaseTimer(cuda=False)
    timer.wrap(parts, "level", "draft levels")
    timer.wrap(parts, "grow", "tree")
    timer.wrap(owner, "bookkeeping", "bookkeeping")
    parts.grow()
    owner.bookkeeping()
    ms = timer.ms()
    timer.close()
    assert 20 <= ms["tree"] < 150 and ms["draft levels"] >= 200 and ms["bookkeeping"] >= 10, ms
    assert "grow" not in vars(parts) and owner.bookkeeping is original  # each part as it was


def test_the_memory_estimate_at_the_8b_shapes():
    configs = dc.target_configs(False)
    llama = dc.memory_estimate(configs["llama3.1-8b"], dc.GPU)
    qwen = dc.memory_estimate(configs["qwen3-8b"], dc.GPU)
    # 8.03B and 8.19B parameters: ~32 GB in fp32
    assert 29 < llama["weights_fp32"] < 31 and 30 < qwen["weights_fp32"] < 32, (llama, qwen)
    assert llama["weights_bf16"] == pytest.approx(llama["weights_fp32"] / 2, abs=0.01)
    assert 1 < llama["eagle3_head_fp32"] < 2.5
    # B=16 x 4160 rows x 32 layers x 8 KV heads x 128 x K and V x bf16
    assert llama["largest_kv_cache"] == pytest.approx(16 * 4160 * 32 * 8 * 128 * 2 * 2 / 2**30, abs=0.01)
    for estimate in (llama, qwen):
        sections = estimate["sections"]
        assert list(sections) == list(SECTIONS)
        assert sections["identity"] > estimate["weights_fp32"] + estimate["eagle3_head_fp32"]
        assert all(estimate["weights_bf16"] < gib < 78 for gib in sections.values()), sections  # an H100's 80 GB


def test_bf16_weights_keep_the_rotary_buffers_in_fp32_as_transformers_loads_them(tmp_path):
    config = dc.target_configs(True)["llama3.1-8b"]
    model = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    model.save_pretrained(tmp_path)
    loaded = AutoModelForCausalLM.from_pretrained(tmp_path, dtype=torch.bfloat16)
    dc.cast(model, torch.bfloat16)
    assert {p.dtype for p in model.parameters()} == {torch.bfloat16}
    buffers = dict(loaded.named_buffers())
    assert buffers and all(
        b.dtype == buffers[name].dtype == torch.float32 and torch.equal(b, buffers[name])
        for name, b in model.named_buffers()
    )


def test_a_small_budget_lands_every_section_stopped_skipped_or_finished(tmp_path):
    """--budget counts from the process's start and each section reads the clock inside its
    units: with 5 s, what runs stops within a unit of its share, and both files land."""
    result, report, markdown = lent_machine_run(tmp_path, "--budget", "5")
    assert result.returncode == 1, result.stderr[-3000:]
    sections = report["sections"]
    assert list(sections) == [f"{m}: {s}" for m in MODELS for s in SECTIONS]
    assert all(entry["status"].startswith(("ok", "stopped", "skipped")) for entry in sections.values()), sections
    assert all(f"| {label} | {entry['status']} |" in markdown for label, entry in sections.items())
    ran = {label: entry for label, entry in sections.items() if "seconds" in entry}
    assert all(entry["seconds"] <= entry["budget_s"] + 3 for entry in ran.values()), ran


def test_a_failing_section_leaves_the_others_in_out(tmp_path):
    result, report, markdown = lent_machine_run(tmp_path, "--models", "llama3.1-8b", "--fail", "f(n)")
    assert result.returncode == 1  # not every section ok
    sections = report["sections"]
    assert (
        sections["llama3.1-8b: f(n)"]["status"] == "failed"
        and "forced by --fail" in sections["llama3.1-8b: f(n)"]["traceback"]
    )
    assert all(entry["status"] == "ok" for label, entry in sections.items() if label != "llama3.1-8b: f(n)")
    assert len(sections) == len(SECTIONS) and "## llama3.1-8b: f(n): failed" in markdown


def test_a_missing_package_is_one_line(tmp_path):
    env = only(tmp_path, "torch,numpy") | {"OUT": str(tmp_path)}
    result = subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "device_check.py"), "--tiny"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 1 and result.stderr.strip().count("\n") == 0, result.stderr
    assert "missing Python package(s) transformers, safetensors, tqdm" in result.stderr
