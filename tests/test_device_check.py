"""scripts/device_check.py --tiny: the GPU check's every section, run on tiny shapes on a CPU."""

import json
import sys

from conftest import run_in_process

SECTIONS = ("## T=0 identity (fp32)", "## Target forward cost f(n), ms", "## Our AR against transformers generate (B=1)",
            "## Engine overhead per step", "## Host syncs per step")


def test_tiny_device_check_writes_every_section_with_identical_ids(tmp_path):
    result = run_in_process([sys.executable, "scripts/device_check.py", "--tiny", "--out", str(tmp_path)])
    assert result.returncode == 0, result.stderr[-2000:]
    report = json.loads((tmp_path / "device-check.json").read_text())
    markdown = (tmp_path / "device-check.md").read_text()
    assert all(section in markdown for section in SECTIONS)
    assert set(report["models"]) == {"llama3.1-8b", "qwen3-8b"}
    for name, model in report["models"].items():
        checks = {(row["check"], row["batch"]) for row in model["identity"]}
        assert checks == {("our AR vs transformers generate", 1), ("EAGLE-3 vs our AR", 1), ("EAGLE-3 vs our AR", 4)}
        assert all(row["identical"] and row["tokens"] > 0 for row in model["identity"]), model["identity"]
        assert set(model["forward_ms"]) == {"1", "4", "16"}
        assert all(curve["n"] == list(range(1, 65)) and len(curve["ms"]) == 64 and min(curve["ms"]) > 0 for curve in model["forward_ms"].values())
        speed = model["ar_vs_generate"]
        assert speed["ours_tok_s"] > 0 and speed["generate_tok_s"] > 0
        assert {(row["method"], row["batch"]) for row in model["engine_overhead"]} == {("ar", 1), ("ar", 4), ("eagle3", 1), ("eagle3", 4)}
        assert all(0 <= row["engine_overhead_share"] <= 1 and row["steps"] > 0 for row in model["engine_overhead"])
        syncs = {(row["method"], row["batch"]): row["host_syncs_per_step"] for row in model["engine_overhead"]}
        assert syncs["ar", 1] <= 3 and syncs["ar", 4] <= 3, syncs  # the verification and the NLL, whatever the batch
        assert syncs["eagle3", 4] <= syncs["eagle3", 1] + 1, syncs  # four rows read back no more than one
    assert report["models"]["llama3.1-8b"]["forward"] == "LeanTreeLM-static"  # the GPU's static forward, run eagerly
    assert markdown.count("| llama3.1-8b | EAGLE-3 vs our AR |") == 2
