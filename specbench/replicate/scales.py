"""What each scale runs, shared by every paper's runner: at paper scale the datasets'
prompt counts and repeats, the answer length and the GPUs per model; at cpu scale the
reduced sweeps and the offline dataset copies; and the sweeps of a dataset list at either."""

from __future__ import annotations

import os
from pathlib import Path

import yaml

from specbench import ROOT
from specbench.metrics.intervals import MIN_GROUPS
from specbench.replicate.sweep import Sweep

# Spec-Bench's convention (80 prompts) for the speed-only datasets at paper scale; the
# accuracy datasets run in full, as their published accuracies need
PAPER_LIMITS = {"mt_bench": None, "humaneval": None, "gsm8k": None, "alpaca": 80, "cnn_dm": 80, "nq": 80, "wmt19": None}
PAPER_REPEATS = {"humaneval": 4}  # MARS reports HumanEval accuracy as avg@4
PAPER_MAX_NEW_TOKENS = 1024  # TALON E.1; MARS states none and builds on the same EAGLE-3 code
BIG_MODEL_B = 32  # above this a model gets 8 GPUs (both papers' setups)


# offline copies of the datasets no pip package ships, read at cpu scale: SPECBENCH_DATA names a
# directory of <dataset>.jsonl files (docs/datasets.md); without it, the team's copies beside the
# checkout when they are there (the paths unchanged, so their runs keep their identity)
DATA_DIR_VARIABLE = "SPECBENCH_DATA"
OFFLINE_COPIES = {
    "alpaca": "../shared/data/eagle/alpaca.jsonl",
    "cnn_dm": "../shared/data/eagle/sum.jsonl",
    "nq": "../shared/data/eagle/qa.jsonl",
    "wmt19": "../shared/data/mars/wmt19.jsonl",
}


def offline_copy(dataset: str) -> str | None:
    """The local copy a cpu-scale sweep reads for `dataset`, or None when there is none."""
    if dataset not in OFFLINE_COPIES:
        return None
    directory = os.environ.get(DATA_DIR_VARIABLE)
    path = str(Path(directory).expanduser().resolve() / f"{dataset}.jsonl") if directory else OFFLINE_COPIES[dataset]
    return path if (ROOT / path).is_file() else None


# Lookahead's window as the MARS and CAST baselines run it: neither paper gives theirs, so the
# Lookahead paper's largest (7B) setting, W=15, N=5, G=15
LOOKAHEAD = {"config.method.tree.window": 15, "config.method.tree.ngram": 5, "config.method.tree.candidates": 15}

# cpu scale: a paper's headline sweeps run --prompts x --max-new-tokens (each runner's default:
# enough prompts for an interval to decide); every other sweep at most these, which each
# table cell's note (n=...) and the report's setup line show
REDUCED_PROMPTS, REDUCED_TOKENS = MIN_GROUPS, 64  # the fewest prompts an interval is drawn from


# cpu scale: the runners whose tables, figures and claims read only measured speed, tau and
# quality (TALON, MARS) skip the cost profile and the calibration decode behind the predicted
# speedup (24-29 s a configuration on an AMX Xeon); a run with an `auto` tree would need it, so
# they pin every tree shape (sweep.pin)
UNPRICED = {"cpu": ["costs.profile=false"], "paper": []}


def sweep_size(
    scale: str,
    name: str,
    headline: set[str],
    prompts: int,
    max_new_tokens: int,
    reduced_prompts: int = REDUCED_PROMPTS,
    reduced_tokens: int = REDUCED_TOKENS,
) -> tuple[int, int]:
    """(prompts, new tokens) for sweep `name`: at cpu scale, unless it is a headline one, at
    most `reduced_prompts` x `reduced_tokens` (a runner lowers them for sweeps its claims read
    less of)."""
    if scale != "cpu" or name in headline:
        return prompts, max_new_tokens
    return min(prompts, reduced_prompts), min(max_new_tokens, reduced_tokens)


def dataset_conf(name: str) -> dict:
    return yaml.safe_load((ROOT / "conf" / "dataset" / f"{name}.yaml").read_text())


def cpu_common(prompts: int, max_new_tokens: int) -> list[str]:
    return [f"dataset.limit={prompts}", "dataset.seed=0", "dataset.max_turns=1", f"gen.max_new_tokens={max_new_tokens}"]


def by_source(
    name: str,
    datasets: list[str],
    overrides: list[str],
    scale: str,
    models: list[str],
    prompts: int,
    max_new_tokens: int,
) -> list[Sweep]:
    """The sweeps for `datasets` x `models` at a scale.

    cpu: the embedded model; a dataset no pip package ships reads its offline copy
    (offline_copy) in a sweep of its own, and is left out when that copy is absent (its
    cells then say it was not run). paper: the hub, the paper's
    limits and models, 1 GPU per model up to 32B and 8 above."""
    if scale == "cpu":
        common = cpu_common(prompts, max_new_tokens)
        packaged = [d for d in datasets if dataset_conf(d).get("package")]
        sweeps = [Sweep(name, [f"dataset={','.join(packaged)}", *overrides, *common])] if packaged else []
        for dataset in datasets:
            copy = offline_copy(dataset)
            if dataset not in packaged and copy:
                sweeps.append(Sweep(name, [f"dataset={dataset}", f"dataset.path={copy}", *overrides, *common]))
        return sweeps
    sweeps = []
    for big in (False, True):
        group = [m for m in models if (model_params(m) > BIG_MODEL_B) == big]
        if not group:
            continue
        for limit, repeats in sorted({(PAPER_LIMITS.get(d), PAPER_REPEATS.get(d, 1)) for d in datasets}, key=str):
            chosen = [d for d in datasets if (PAPER_LIMITS.get(d), PAPER_REPEATS.get(d, 1)) == (limit, repeats)]
            sweeps.append(
                Sweep(
                    name,
                    [
                        f"model={','.join(group)}",
                        f"dataset={','.join(chosen)}",
                        f"dataset.limit={'null' if limit is None else limit}",
                        *([f"dataset.repeats={repeats}"] if repeats > 1 else []),
                        f"gen.max_new_tokens={PAPER_MAX_NEW_TOKENS}",
                        f"hardware={'multi-gpu' if big else 'gpu'}",
                        *overrides,
                    ],
                )
            )
    return sweeps


def model_params(name: str) -> float:
    return float(yaml.safe_load((ROOT / "conf" / "model" / f"{name}.yaml").read_text())["params_b"])
