"""scripts/device_check.py --tiny: the GPU check's every section on tiny shapes on a CPU, as
the lent machine would run it: no hydra, omegaconf or any package beyond torch,
transformers, safetensors, numpy and tqdm (with what they require), specbench not installed
and no PYTHONPATH to it, results in $OUT. A section forced to fail leaves the others there."""

import json
import os
import subprocess
import sys

import pytest
from conftest import ROOT

SECTIONS = ("build", "identity", "bf16 agreement", "f(n)", "attention", "step split", "host syncs")
MODELS = ("llama3.1-8b", "qwen3-8b")


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
        timeout=900,
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
