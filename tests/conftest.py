"""Tiny random-weight models: fast, fp32, so identity with AR is exact."""

import contextlib
import copy
import io
import json
import os
import runpy
import signal
import subprocess
import sys
import tempfile
import traceback
import warnings
from pathlib import Path

import pytest
import torch
from omegaconf import OmegaConf
from transformers import LlamaConfig, LlamaForCausalLM

VOCAB = 96
ROOT = Path(__file__).resolve().parents[1]
# defaults a run takes from conf/ (the only place defaults live)
COSTS = OmegaConf.load(ROOT / "conf" / "config.yaml").costs
MIN_GAIN, CALIBRATION_TOKENS = COSTS.min_gain, COSTS.calibration_tokens


def _isolate_cache() -> None:
    """Tests measure small cost profiles and shape choices of their own: keep them out of
    the user's cache (SPECBENCH_CACHE is inherited by the commands tests run), sharing
    only the converted model weights."""
    real = Path(os.environ.get("SPECBENCH_CACHE", Path.home() / ".cache" / "specbench"))
    (real / "models").mkdir(parents=True, exist_ok=True)
    isolated = Path(tempfile.mkdtemp(prefix="specbench-test-cache-"))
    (isolated / "models").symlink_to(real / "models")
    os.environ["SPECBENCH_CACHE"] = str(isolated)
    # tests check what is cached, not how fast: a busy machine must not change what they see
    os.environ["SPECBENCH_CONTENDED_CORES"] = "inf"


_isolate_cache()


def _keep_absl_off_pytests_stderr() -> None:
    """rouge-score imports absl, whose logging handler joins the root logger writing to the
    stream sys.stderr is at that moment (pytest's capture). A Hydra app run in this process
    (run_in_process) reconfigures logging, which closes that stream unless it is sys.stderr
    at the time, and there it is the run's own buffer: pytest lost its stderr and the suite
    died. The process's own stderr (fd 2, still captured) is never closed."""
    import absl.logging

    absl.logging.get_absl_handler().python_handler.stream = sys.__stderr__


_keep_absl_off_pytests_stderr()


def run_in_process(args: list[str], env: dict | None = None) -> subprocess.CompletedProcess:
    """`args` (`[sys.executable, "-m", module, ...]` or `[sys.executable, "script.py", ...]`)
    run as `python` would run it (as `__main__`, from the repository root, with `env` as the
    whole environment), but in this process: a fresh interpreter costs about 7 s of imports on
    a 2-core CPU, and the suite runs some 70 commands. The exit code, stdout and stderr come
    back as from subprocess.run; an uncaught exception is exit code 1 with its traceback on
    stderr, as python prints it. Not for what must be a process of its own: signals,
    variables libraries read at import (HF_HUB_OFFLINE), Hydra's multirun launchers and
    W&B (a full suite that ran them here ended with pytest's own stderr closed)."""
    assert args[0] == sys.executable, args
    module = args[2] if args[1] == "-m" else None
    argv = args[2:] if module else args[1:]
    out, err = io.StringIO(), io.StringIO()
    saved_env, saved_argv, saved_path, saved_cwd, threads = (
        dict(os.environ),
        sys.argv,
        list(sys.path),
        os.getcwd(),
        torch.get_num_threads(),
    )
    code = 0
    try:
        os.chdir(ROOT)
        if env is not None:
            os.environ.clear()
            os.environ.update(env)
        sys.argv = list(argv)  # run_module puts the module's file in argv[0], as python -m does
        if not module:
            sys.path.insert(0, str((ROOT / argv[0]).parent))
        with (
            torch.random.fork_rng(),
            warnings.catch_warnings(),
            contextlib.redirect_stdout(out),
            contextlib.redirect_stderr(err),
        ):
            warnings.filterwarnings(
                "ignore", message=".*found in sys.modules after import of package", category=RuntimeWarning
            )
            try:
                if module:
                    runpy.run_module(module, run_name="__main__", alter_sys=True)
                else:
                    runpy.run_path(argv[0], run_name="__main__")
            except SystemExit as exit:
                if isinstance(exit.code, str):
                    print(exit.code, file=sys.stderr)
                code = exit.code if isinstance(exit.code, int) else (0 if exit.code is None else 1)
            except Exception:
                traceback.print_exc()
                code = 1
    finally:
        os.environ.clear()
        os.environ.update(saved_env)
        sys.argv, sys.path[:] = saved_argv, saved_path
        os.chdir(saved_cwd)
        torch.set_num_threads(threads)
        _forget_hydra()
    return subprocess.CompletedProcess(args, code, out.getvalue(), err.getvalue())


def run_launcher(args: list[str], timeout: float, **kwargs) -> subprocess.CompletedProcess:
    """subprocess.run for a command whose launcher starts job processes: in a session of its
    own, and on timeout the whole group is killed (submitit's jobs ignore SIGTERM, and orphans
    left at 25% CPU each slowed every later test)."""
    with subprocess.Popen(
        args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True, **kwargs
    ) as process:
        try:
            out, err = process.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            process.communicate()
            raise
    return subprocess.CompletedProcess(args, process.returncode, out, err)


def _forget_hydra() -> None:
    """A Hydra app leaves its global state set; the next app in this process starts afresh."""
    from hydra.core.global_hydra import GlobalHydra

    GlobalHydra.instance().clear()


def own_cache(path: Path) -> Path:
    """A cache of a test's own at `path` (its profiles and probes apart from the other
    tests'), sharing the session's converted model weights; pass it as SPECBENCH_CACHE."""
    (path / "costs").mkdir(parents=True)
    (path / "models").symlink_to(Path(os.environ["SPECBENCH_CACHE"]) / "models")
    return path


def tiny_llama(seed: int, vocab: int = VOCAB, layers: int = 2) -> LlamaForCausalLM:
    torch.manual_seed(seed)
    config = LlamaConfig(
        vocab_size=vocab,
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=layers,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=1024,
        tie_word_embeddings=False,
    )
    model = LlamaForCausalLM(config).eval()
    # sharpen the output layer so greedy continuations are not all near-ties
    with torch.no_grad():
        model.lm_head.weight.mul_(8)
    return model


def noisy_copy(model: LlamaForCausalLM, noise: float, seed: int) -> LlamaForCausalLM:
    """A draft that agrees with `model` often but not always."""
    torch.manual_seed(seed)
    draft = copy.deepcopy(model)
    with torch.no_grad():
        for p in draft.parameters():
            p.add_(noise * p.std() * torch.randn_like(p))
    return draft


def own_vocabulary_copy(model: LlamaForCausalLM, ids: list[int]):
    """(`model` as a draft with its own output vocabulary `ids`: the same layers, only those
    output rows, and its input embedding, the DraftVocab) as the SpS trainer makes one."""
    from specbench.drafters.small_lm import DraftVocab

    vocab = DraftVocab(torch.tensor(sorted(ids)), model.config.vocab_size)
    own = LlamaForCausalLM(LlamaConfig.from_dict({**model.config.to_dict(), "vocab_size": len(ids)})).eval()
    state = model.state_dict()
    own.load_state_dict(
        {
            **state,
            "lm_head.weight": state["lm_head.weight"][vocab.ids],
            "model.embed_tokens.weight": own.model.embed_tokens.weight,
        }
    )
    own.model.embed_tokens = model.get_input_embeddings()
    return own, vocab


@pytest.fixture(scope="session")
def target():
    return tiny_llama(0)


@pytest.fixture(scope="session")
def draft(target):
    return noisy_copy(target, 0.3, seed=1)


@pytest.fixture(scope="session")
def prompts():
    g = torch.Generator().manual_seed(123)
    prompts = []
    for i in range(24):
        n = int(torch.randint(3, 40, (1,), generator=g))
        body = torch.randint(3, VOCAB, (n,), generator=g).tolist()
        prompts.append(body + body[: n // 2])  # repeats give prompt lookup something to find
    return prompts


def synthetic_answers(tmp_path: Path) -> Path:
    """A JSONL file of 6 greedy 'target answers' of 70 random tokens (keys k0..k5)."""
    rng = torch.Generator().manual_seed(0)
    rows = [
        {
            "key": f"k{i}",
            "temperature": 0.0,
            "prompt": [1, 520, 9531, 198],
            "answer": torch.randint(100, 5000, (70,), generator=rng).tolist(),
        }
        for i in range(6)
    ]
    data = tmp_path / "answers.jsonl"
    data.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return data


def train_heads_twice(module: str, tmp_path: Path, heads: int) -> Path:
    """Run a heads trainer (`python -m module`) on the real target with 6 synthetic answers
    for 2 steps, then resumed to 3, checkpointing every step; the export directory."""
    data = synthetic_answers(tmp_path)
    out = tmp_path / "heads"
    args = [
        sys.executable,
        "-m",
        module,
        "--data",
        str(data),
        "--out",
        str(out),
        "--sharegpt-answers",
        "4",
        "--heads",
        str(heads),
        "--batch",
        "2",
        "--length",
        "48",
        "--draft-vocab",
        "512",
        "--validation-rows",
        "2",
        "--checkpoint-every",
        "1",
        "--threads",
        "1",
    ]
    for steps in (2, 3):
        result = run_in_process([*args, "--steps", str(steps)])
        assert result.returncode == 0, result.stderr[-2000:]
    return out
