"""Hand-made runs, rows and reference tables the replication tests share."""

import json
from collections import Counter

import pandas as pd
from reference_csv import HEADER, KEY, load

from specbench import ROOT
from specbench.replicate import tables


def check_common(name):
    header, rows = load(name)
    assert header == HEADER
    keys = Counter(tuple(r[k] for k in KEY) for r in rows)
    dupes = [k for k, n in keys.items() if n > 1]
    assert not dupes, dupes
    for r in rows:
        assert len(r) == len(HEADER), r
        assert r["paper"] == name
        float(r["value"])
    return rows


def index(rows):
    return {tuple(r[k] for k in KEY): r["value"] for r in rows}


# a small cost profile and calibration (the first run on a machine measures them; cached after)
# fp32 pinned: dtype auto would probe both dtypes of the real model (minutes on an AVX2 CPU),
# which tests/test_cli.py and tests/test_costs.py cover
SMALL_COSTS = [
    "hardware.dtype=float32",
    "costs.max_n=8",
    "costs.repeats=1",
    "costs.calibration_prompts=1",
    "costs.calibration_tokens=12",
]


def run_row(method, dataset, temperature, samples=3, **extra):
    row = {
        "config.model.name": "smollm2-135m",
        "config.method.name": method,
        "config.dataset.name": dataset,
        "temperature": temperature,
        "config.gen.temperature": temperature,
        "results.samples": samples,
        "run_dir": f"/runs/{method}-{dataset}",
    }
    return {**row, **extra}


def reference(*rows):
    frame = pd.DataFrame([dict(zip(tables.KEYS + ["published"], r)) for r in rows])
    frame["temperature"] = frame["temperature"].astype(float)
    return frame


def execute_notebook(paper, runs, results_dir, monkeypatch):
    """Run notebooks/<paper>.ipynb on the given sweep; the text it printed."""
    import nbformat
    from nbclient import NotebookClient

    monkeypatch.setenv("SPECBENCH_RUNS", str(runs))
    monkeypatch.setenv("SPECBENCH_RESULTS", str(results_dir))
    notebook = nbformat.read(ROOT / "notebooks" / f"{paper}.ipynb", as_version=4)
    NotebookClient(
        notebook, timeout=600, kernel_name="python3", resources={"metadata": {"path": str(ROOT / "notebooks")}}
    ).execute()
    return "\n".join(
        o.get("text", "") + str(o.get("data", {}).get("text/markdown", ""))
        for c in notebook.cells
        if c.cell_type == "code"
        for o in c.outputs
    )


def batched_run_on_disk(tmp_path, name, speedups, batch=8) -> str:
    """A batched run (`batch` rows per batch) whose batch i runs speedups[i] times AR's throughput."""
    run_dir = tmp_path / name
    run_dir.mkdir()
    lines = []
    for i, speedup in enumerate(speedups):
        for row in range(batch):
            common = {
                "new_tokens": 61,
                "turn_ids": [[0]],
                "target_forwards": 30,
                "draft_forwards": 0,
                "accept_lengths": [],
                "batch_size": batch,
                "batch_id": f"b{i}",
            }
            lines.append(
                json.dumps(
                    {
                        "id": f"{i}-{row}",
                        "method": {**common, "seconds": 1.0, "batch_seconds": 1.0},
                        "baseline": {**common, "target_forwards": 60, "seconds": speedup, "batch_seconds": speedup},
                    }
                )
            )
    (run_dir / "samples.jsonl").write_text("\n".join(lines))
    return str(run_dir)
