"""Config choices as users type them: a model's hub id or its last part, any case, '-', '_'
and '.' ignored, resolve to the conf/ file's name; a name that matches none is one line."""

import os
import re
import sys
from pathlib import Path

import pytest
import yaml
from conftest import run_in_process

from specbench.errors import ConfigError
from specbench.run import names
from specbench.run.names import choice_names

ROOT = Path(__file__).resolve().parents[2]
MODELS = sorted((ROOT / "conf" / "model").glob("*.yaml"))


def run(*args, tmp_path, flags=()):
    """`python -m specbench *flags output_root=tmp_path *args`, in this process (conftest.run_in_process)."""
    command = [sys.executable, "-m", "specbench", *flags, f"output_root={tmp_path}", *args]
    return run_in_process(command, env=dict(os.environ))


def one_error_line(result, *fragments):
    assert result.returncode == 2, result.stderr[-2000:]
    lines = [l for l in result.stderr.splitlines() if l.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: ") and "Traceback" not in result.stderr, result.stderr
    for fragment in fragments:
        assert fragment in lines[0], lines[0]


@pytest.mark.parametrize(
    "typed,name",
    [
        ("llama3.1-8b", "llama3.1-8b"),
        ("llama-3.1-8b", "llama3.1-8b"),
        ("Llama-3.1-8B-Instruct", "llama3.1-8b"),
        ("meta-llama/Llama-3.1-8B-Instruct", "llama3.1-8b"),
        ("LLAMA3.1-8B", "llama3.1-8b"),
        ("Qwen3-8B", "qwen3-8b"),
        ("qwen3_0.6b", "qwen3-0.6b"),
        ("vicuna-7b-v1.3", "vicuna-7b"),
        ("DeepSeek-R1-Distill-Llama-8B", "dsl-8b"),
    ],
)
def test_model_aliases_resolve(typed, name):
    assert choice_names([f"model={typed}"]) == [f"model={name}"]


@pytest.mark.parametrize("path", MODELS, ids=lambda p: p.stem)
def test_every_model_answers_to_its_hub_id(path):
    """The aliases come from the files: each model's `id:` and the id's last part."""
    hub_id = yaml.safe_load(path.read_text())["id"]
    for typed in (hub_id, hub_id.split("/")[-1], hub_id.upper()):
        assert choice_names([f"model={typed}"]) == [f"model={path.stem}"]


def test_other_groups_and_flags():
    argv = ["--cfg", "job", "method=Eagle3", "dataset=MT-Bench", "hardware=GPU", "method@baseline.method=AR"]
    assert choice_names(argv) == [
        "--cfg",
        "job",
        "method=eagle3",
        "dataset=mt_bench",
        "hardware=gpu",
        "method@baseline.method=ar",
    ]
    untouched = ["model.path=/x", "model=choice(a,b)", "gen.top_k=3", "hydra/launcher=slurm"]
    assert choice_names(untouched) == untouched


def test_multirun_comma_list():
    assert choice_names(["-m", "model=Llama-3.1-8B,'Qwen3-8B', vicuna-7b"]) == [
        "-m",
        "model=llama3.1-8b,qwen3-8b,vicuna-7b",
    ]


def test_unknown_name_lists_close_matches():
    with pytest.raises(ConfigError, match=r"^model: unknown model 'lama3.1-8b' .*did you mean llama3\.1-8b"):
        choice_names(["model=lama3.1-8b"])
    with pytest.raises(ConfigError, match=r"^method: unknown method 'nope'; choose one of ar, cast, "):
        choice_names(["method=nope"])


def test_a_name_two_files_answer_to_is_refused(tmp_path, monkeypatch):
    (tmp_path / "model").mkdir()
    (tmp_path / "model" / "a.yaml").write_text("id: org-one/Same-7B\n")
    (tmp_path / "model" / "b.yaml").write_text("id: org-two/Same-7B\n")
    monkeypatch.setattr(names, "CONF_DIR", tmp_path)
    assert choice_names(["model=org-two/Same-7B"]) == ["model=b"]
    with pytest.raises(ConfigError, match="^model: 'same-7b' could be a or b; name one$"):
        choice_names(["model=same-7b"])


def test_the_command_takes_a_hub_id(tmp_path):
    result = run("model=meta-llama/Llama-3.1-8B-Instruct", "--cfg", "job", tmp_path=tmp_path)
    assert result.returncode == 0, result.stderr[-2000:]
    assert re.search(r"^model:\n  name: llama3\.1-8b$", result.stdout, re.M), result.stdout[:500]


def test_the_command_refuses_an_unknown_model_in_one_line(tmp_path):
    one_error_line(run("model=lama3.1-8b", tmp_path=tmp_path), "model:", "'lama3.1-8b'", "did you mean llama3.1-8b")
    # a sweep's bad value stops the sweep before its first job
    result = run("model=lama3.1-8b,Qwen3-8B", flags=["-m"], tmp_path=tmp_path)
    one_error_line(result, "model:", "did you mean llama3.1-8b")
    assert not list(tmp_path.iterdir())


@pytest.mark.parametrize("path", [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))], ids=lambda p: p.name)
def test_the_choices_docs_name_exist(path):
    """A command the docs show names choices the command line takes."""
    named = re.findall(r"(?<![\w.@/+~-])(model|dataset|method|hardware|logger)=([\w.\-/,]+)", path.read_text())
    for group, value in named:
        choice_names([f"{group}={value.rstrip('.,')}"])
