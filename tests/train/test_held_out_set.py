"""scripts/held_out_set.py picks held-out answers by how new their text is to the training
answers: a span shared with a training answer counts, one shared with an answer already held
out does not; an existing set is kept unless --replace, and a request it cannot meet is refused
in one line."""

import json
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import run_in_process


def write_rows(path: Path, rows: list[tuple[str, list[int]]]) -> None:
    path.write_text(
        "".join(json.dumps({"key": k, "temperature": 0.0, "prompt": [1, 2], "answer": a}) + "\n" for k, a in rows)
    )


def pick(tmp_path: Path, count: int, *extra: str) -> subprocess.CompletedProcess:
    return run_in_process(
        [
            sys.executable,
            "scripts/held_out_set.py",
            "--candidates",
            str(tmp_path / "new.jsonl"),
            "--data",
            str(tmp_path / "corpus"),
            "--count",
            str(count),
            "--min-tokens",
            "20",
            "--max-overlap",
            "0.5",
            "--out",
            str(tmp_path / "validation-chat.json"),
            *extra,
        ]
    )


def test_picks_answers_new_to_training_text_and_refuses_what_it_cannot_meet(tmp_path):
    corpus = tmp_path / "corpus"
    corpus.mkdir()
    trained, held = list(range(100, 140)), list(range(200, 240))
    write_rows(corpus / "answers-t0-0of1.jsonl", [("t1", trained), ("h1", held)])
    (corpus / "validation-code.json").write_text(json.dumps(["h1"]))
    write_rows(
        tmp_path / "new.jsonl",
        [
            ("a-copied", trained[:30]),  # all spans in a training answer
            ("b-short", list(range(300, 310))),  # under --min-tokens
            ("c-new", list(range(400, 430))),
            ("d-like-held-out", held[:30]),  # shares spans only with a held-out answer
        ],
    )
    done = pick(tmp_path, 2)
    assert done.returncode == 0, done.stderr
    assert json.loads((tmp_path / "validation-chat.json").read_text()) == ["c-new", "d-like-held-out"]
    kept = pick(tmp_path, 1)  # an existing set is never overwritten unasked
    assert kept.returncode != 0 and kept.stderr.strip().count("\n") == 0 and "--replace" in kept.stderr
    refused = pick(tmp_path, 3, "--replace")
    assert refused.returncode != 0
    assert refused.stderr.strip().count("\n") == 0 and "--max-overlap" in refused.stderr and "only 2" in refused.stderr
    assert json.loads((tmp_path / "validation-chat.json").read_text()) == ["c-new", "d-like-held-out"]


def test_every_committed_set_is_held_out(tmp_path):
    """What trainers and the vocabulary resize keep out of training: the main set and every
    domain set of each corpus directory read, nothing from a directory not read."""
    from specbench.train.validation import held_out_keys

    corpus, other = tmp_path / "corpus", tmp_path / "other"
    for directory, sets in (
        (corpus, {"validation.json": ["a", "b"], "validation-code.json": ["c"], "validation-chat.json": ["d"]}),
        (other, {"validation-math.json": ["e"]}),
    ):
        directory.mkdir()
        for name, keys in sets.items():
            (directory / name).write_text(json.dumps(keys))
    assert held_out_keys([str(corpus)]) == {"a", "b", "c", "d"}
    assert held_out_keys([str(corpus), str(other)]) == {"a", "b", "c", "d", "e"}
    assert held_out_keys([str(tmp_path / "answers.jsonl")]) == set()


def test_benchmark_outputs_are_read_from_a_run_without_hydra_files(tmp_path):
    """Run directories of scripts that call the Runner (bench_speed) have no .hydra/: their
    config comes from summary.json, so head_agreement and held_out_set read their outputs as
    they read a `python -m specbench` run's; a directory with neither is one clear error."""
    from specbench.data import questions
    from specbench.data.chat import chat_prompt
    from specbench.errors import ConfigError
    from specbench.models import registry
    from specbench.run.config import compose_config
    from specbench.train.data import TARGET
    from specbench.train.validation import run_rows

    cfg = compose_config(["dataset=gsm8k", "dataset.limit=2", "dataset.seed=0", "gen.temperature=0.0"])
    tokenizer = registry.load_tokenizer(TARGET)
    samples = questions.load(cfg["dataset"])
    run = tmp_path / "run"
    run.mkdir()
    (run / "summary.json").write_text(json.dumps({"config": cfg}))
    answers = [[11, 12, 13], [21, 22]]
    prompts = [chat_prompt(tokenizer, [{"role": "user", "content": s.turns[0]}]) for s in samples]
    (run / "samples.jsonl").write_text(
        "".join(
            json.dumps({"id": s.id, "method": {"prompt_tokens": [len(p)], "turn_ids": [a]}}) + "\n"
            for s, p, a in zip(samples, prompts, answers)
        )
    )
    assert run_rows(run, tokenizer) == ("gsm8k", [{"prompt": p, "answer": a} for p, a in zip(prompts, answers)])
    (tmp_path / "empty").mkdir()
    with pytest.raises(ConfigError, match="neither .hydra/config.yaml nor summary.json"):
        run_rows(tmp_path / "empty", tokenizer)
