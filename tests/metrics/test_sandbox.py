"""The HumanEval executor is a boundary: a hostile completion neither passes nor reaches
outside its temporary directory, under the strongest boundary this machine offers and under
the fallback without bubblewrap (as root or not); the score says which layers were active."""

import os

import pytest

from specbench.data.questions import Sample
from specbench.metrics import humaneval, sandbox_child

TASK = humaneval.problems()["HumanEval/53"]  # add(x, y)
MKFIFO = "import os; os.mkfifo(MADE)"  # no audit event: only bwrap's mount namespace or seccomp stop it
FORK_EXEC = (
    "import _posixsubprocess, os; pid = _posixsubprocess.fork_exec([b'/bin/sh', b'-c', b'echo escaped > ' + "
    "MADE.encode()], "
    "[b'/bin/sh'], True, (), None, None, -1, -1, -1, -1, -1, -1, *os.pipe(), False, False, -1, None, None, None, "
    "-1, None, False); "
    "os.waitpid(pid, 0)"
)


@pytest.fixture(scope="module", params=["strongest", "without bwrap"])
def boundary(request):
    return humaneval.boundary() if request.param == "strongest" else humaneval.boundary(bwrap=None)


def graded(body: str, boundary, timeout: float = 3, **names) -> humaneval.Execution:
    """Run `body` at the top of a correct add(x, y): it passes only if `body` completes."""
    header = "".join(f"    {name} = {value!r}\n" for name, value in names.items())
    completion = header + "    " + body.replace("; ", "\n    ") + "\n    return x + y\n"
    return humaneval.execute(humaneval.program(TASK, completion), timeout=timeout, within=boundary)


def test_honest_completions_pass_and_wrong_ones_fail(boundary):
    assert graded("pass", boundary).passed
    assert graded(
        "import collections, heapq, math, re, itertools, functools, hashlib, json, string, fractions", boundary
    ).passed
    assert graded("print('debug output does not spoil a pass')", boundary).passed
    assert not graded("assert False", boundary).passed


@pytest.mark.parametrize(
    "body",
    [
        "import os; os._exit(0)",
        "import sys; sys.exit(0)",
        "raise SystemExit(0)",
        "import os; os.write(1, b'ok\\n'); os._exit(0)",
        "import os, sys; sys.audit('specbench.checked'); os._exit(0)",  # the child's own event, from the program
        "import __main__, os; __main__.main(); os._exit(0)",  # the child's main again, one frame up
        # the child's exit after a failure, disarmed
        "import os, sys; os._exit = sys.exit = lambda code=0: None; raise SystemExit(1)",
        "import builtins; builtins.BaseException = KeyError; raise SystemExit(0)",
    ],
)
def test_only_checks_that_ran_to_the_end_pass(body, boundary):
    assert not graded(body, boundary).passed


def test_an_exit_at_module_level_is_not_a_pass(boundary):
    fenced = (
        "```python\nimport os\n\ndef add(x, y):\n    return x - y\n\nos._exit(0)\n```"  # wrong, and leaves before check
    )
    assert not humaneval.execute(humaneval.program(TASK, fenced), timeout=3, within=boundary).passed


@pytest.mark.parametrize(
    "body",
    [
        FORK_EXEC,
        "import os; fd = os.open(OUTSIDE, os.O_RDONLY); os.unlink('keep.txt', dir_fd=fd)",
        "import os; fd = os.open(OUTSIDE, os.O_RDONLY); os.close(os.open('made.txt', os.O_CREAT | os.O_WRONLY, "
        "0o644, dir_fd=fd))",
        MKFIFO,
        "import sqlite3; sqlite3.connect(MADE).execute('create table t (x)')",
        "import os; os.remove(VICTIM)",
        "import shutil; shutil.rmtree(OUTSIDE)",
        "open(VICTIM, 'w').write('overwritten')",
        "import builtins, os; builtins.any = builtins.isinstance = lambda *a: True; os.path.realpath = lambda p: "
        "p; open(VICTIM, 'w').write('x')",
        "import os; os.rename(VICTIM, MADE)",
        "import os; os.symlink(VICTIM, MADE)",
        "import subprocess; subprocess.run(['/bin/sh', '-c', 'echo escaped > ' + MADE])",
        "import os; os.system('echo escaped > ' + MADE)",
        "import os; pid = os.fork(); os._exit(0) if pid == 0 else os.waitpid(pid, 0)",
        "import ctypes; ctypes.CDLL(None).system(('echo escaped > ' + MADE).encode())",
    ],
)
def test_nothing_outside_the_directory_changes(body, boundary, tmp_path):
    victim = tmp_path / "keep.txt"
    victim.write_text("precious")
    made = tmp_path / "made.txt"
    outcome = graded(body, boundary, VICTIM=str(victim), OUTSIDE=str(tmp_path), MADE=str(made))
    assert not outcome.passed
    unprotected = body == MKFIFO and "failed: seccomp" in outcome.layers and "bwrap+" not in outcome.layers
    assert victim.read_text() == "precious" and (not made.exists() or unprotected)


def test_the_parents_environment_does_not_leak(boundary, monkeypatch):
    monkeypatch.setenv("SPECBENCH_TEST_SECRET", "hunter2")
    assert not graded("import os; assert 'SPECBENCH_TEST_SECRET' in os.environ", boundary).passed
    leak = "assert b'PATH=' in open('/proc/%d/environ' % PARENT, 'rb').read()"  # exported before pytest started
    assert not graded(leak, boundary, PARENT=os.getpid()).passed


def test_files_outside_cannot_be_read(boundary, tmp_path):
    secret = tmp_path / "secret.txt"
    secret.write_text("hunter2")
    assert not graded("assert open(SECRET).read() == 'hunter2'", boundary, SECRET=str(secret)).passed
    assert not graded("assert b'root' in open('/etc/passwd', 'rb').read()", boundary).passed


@pytest.mark.parametrize(
    "body",
    [
        "import socket; socket.create_connection(('127.0.0.1', 9), timeout=1)",
        "import _socket; _socket.socket()",
        "x = bytearray(8 << 30)",
        "x = [0] * (1 << 31)",
        "while True: pass",
        "import time; time.sleep(100)",
        "while True: print('x' * 10000)",
    ],
)
def test_sockets_and_bombs_fail(body, boundary):
    assert not graded(body, boundary, timeout=2).passed


def test_the_score_names_the_active_layers():
    sample = Sample("53", "code", [TASK["prompt"]], meta={"task_id": "HumanEval/53"})
    result = humaneval.score([sample], [["    return x + y\n"]])
    assert result["humaneval_pass@1"] == 1.0
    layers = result["humaneval_sandbox"]
    assert "audit" in layers and "rlimits" in layers and "seccomp" in layers  # on, or "failed: seccomp (why)"
    assert layers.startswith("bwrap") == (humaneval.boundary().bwrap is not None)


def test_a_completion_that_does_not_parse_fails_behind_the_same_layers():
    """A truncated answer (the usual one at 64 new tokens) is a failed program, not a child
    that stopped before its layers: the score's layers stay the ones that ran."""
    sample = Sample("53", "code", [TASK["prompt"]], meta={"task_id": "HumanEval/53"})
    honest = humaneval.score([sample], [["    return x + y\n"]])["humaneval_sandbox"]
    outcome = humaneval.execute(humaneval.program(TASK, "    return (x +\n"), timeout=3)
    assert not outcome.passed and outcome.error.startswith("SyntaxError") and outcome.layers == honest
    assert humaneval.score([sample], [["    return (x +\n"]])["humaneval_sandbox"] == honest


def test_a_layer_that_fails_is_reported_and_the_rest_hold(tmp_path):
    broken = humaneval.boundary(bwrap="/bin/false")
    assert broken.bwrap is None and broken.failed[0].startswith("failed: bwrap")
    made = tmp_path / "made.txt"
    assert graded("pass", broken).passed
    outcome = graded(MKFIFO, broken, MADE=str(made))
    assert not outcome.passed and (not made.exists() or "failed: seccomp" in outcome.layers)
    assert "failed: bwrap" in outcome.layers and "bwrap+" not in outcome.layers


def test_a_network_namespace_refused_is_reported():
    class Refusing:
        def unshare(self, flags):
            return -1

    note = sandbox_child.isolate_network(Refusing(), error_number=lambda: 1)
    assert note == "failed: netns (Operation not permitted)"


@pytest.mark.skipif(os.geteuid() != 0, reason="the drop to an unprivileged uid is root's layer")
def test_root_without_bwrap_drops_to_the_unprivileged_uid_even_where_python_lives_under_roots_home():
    """Without bubblewrap, root's child runs the probe as SANDBOX_UID: Python's files are
    imported through directories kept open before the drop, so a Python under a directory only
    root may search (pyenv in /root, mode 700) still imports its standard library there."""
    chosen = humaneval.boundary(bwrap=None)
    assert chosen.uid == humaneval.SANDBOX_UID and not chosen.failed
    outcome = graded(f"import os, fractions, statistics; assert os.getuid() == {humaneval.SANDBOX_UID}", chosen)
    assert outcome.passed and f"uid {humaneval.SANDBOX_UID}" in outcome.layers and "failed" not in outcome.layers, (
        outcome
    )
