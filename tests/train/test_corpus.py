"""Drafter training prompts never include an evaluation prompt; packed answers come back whole."""

import pytest

from specbench.train.data import exchanges
from specbench.train.prompts.contamination import SHARED_DATA, EvalIndex, evaluation_prompts, normalize
from specbench.train.prompts.sources import training_prompts


def test_overlap_rule():
    index = EvalIndex(
        [
            "Write a Python function that returns the sum of the squares of the first n odd natural numbers, please.",
            "Hi there",
        ]
    )
    assert index.overlaps("hi, THERE")  # same words: exact match after normalisation
    assert index.overlaps(
        "Could you write a python function that returns the sum of the squares of the first n odd natural numbers?"
    )
    assert not index.overlaps("Write a Python function that returns the product of two numbers.")


def test_overlap_rule_leaves_out_the_instructions_this_tool_asks_with():
    """A made problem asked as GSM8K asks shares GSM8K's instruction, not its question."""
    from specbench.data.benchmarks import GSM8K_INSTRUCTION

    question = (
        "Darrell and Allen have seven apples and eleven pears and they want to share them fairly among four friends."
    )
    index = EvalIndex([f"{GSM8K_INSTRUCTION}\n\n{question}"])
    assert not index.overlaps(f"{GSM8K_INSTRUCTION}\n\nWendy has $90 saved and adds $9 every week.")
    assert index.overlaps(f"{GSM8K_INSTRUCTION}\n\n{question}")
    assert index.overlaps(question)


def test_no_evaluation_prompt_is_in_the_training_prompts():
    evaluation = evaluation_prompts()
    assert len(evaluation) > 1500  # MT-Bench turns, HumanEval, GSM8K test (+ the shared question files)
    if SHARED_DATA.is_dir():
        assert len(evaluation) > 4000
    index = EvalIndex(evaluation)
    prompts = training_prompts(index, seed=0)
    assert len(prompts) > 40000
    train = {tuple(normalize(p)) for p in prompts}
    assert not any(tuple(normalize(e)) in train for e in evaluation)
    assert not any(index.overlaps(p) for p in prompts[:2000])
    # the committed packs answer training prompts only
    from pathlib import Path

    from specbench.train.packed import keys_of
    from specbench.train.prompts.sources import prompt_key

    packs = sorted((Path(__file__).resolve().parents[2] / "corpus").glob("*/*.safetensors"))
    code = training_prompts(index, seed=0, source="python-stdlib")
    assert len(code) > 3000 and not any(index.overlaps(p) for p in code)
    math = training_prompts(index, seed=0, source="math-word-problems")
    assert len(math) > 19000 and not any(index.overlaps(p) for p in math)
    functions = training_prompts(index, seed=0, source="function-problems")
    assert len(functions) > 11000 and not any(index.overlaps(p) for p in functions)
    requests = training_prompts(index, seed=0, source="chat-requests")
    assert len(requests) > 9000 and not any(index.overlaps(p) for p in requests)
    allowed = {prompt_key(p) for p in prompts + code + math + functions + requests}
    assert all(set(keys_of(pack)) <= allowed for pack in packs)


def test_math_prompts_are_seeded_word_problems_asked_as_gsm8k_asks():
    """Every machine makes the same problems (a pack finds its prompts by key), every template
    is used, and each problem names whole numbers only."""
    import re

    from specbench.data.benchmarks import GSM8K_INSTRUCTION
    from specbench.train.prompts.math import TEMPLATES, word_problems

    problems = list(word_problems(count=3 * len(TEMPLATES)))
    assert problems == list(word_problems(count=3 * len(TEMPLATES)))
    assert problems != list(word_problems(count=3 * len(TEMPLATES), seed=1))
    assert all(p.startswith(GSM8K_INSTRUCTION + "\n\n") for p in problems)
    bodies = [p.removeprefix(GSM8K_INSTRUCTION) for p in problems]
    assert len({b.split("?")[0][-12:] for b in bodies[: len(TEMPLATES)]}) == len(TEMPLATES)
    assert all(not re.search(r"\d\.\d", b.replace("1.5 times", "")) for b in bodies)


def test_function_problems_are_seeded_stubs_whose_examples_their_reference_solutions_pass():
    """Every machine makes the same stubs, every task is used, each asks as HumanEval does, is
    valid Python, and its docstring examples are what the reference solution returns."""
    import ast
    import doctest
    import random

    from specbench.data.benchmarks import HUMANEVAL_INSTRUCTION
    from specbench.train.prompts.functions import TASKS, function_problems, problem

    stubs = list(function_problems(count=2 * len(TASKS)))
    assert stubs == list(function_problems(count=2 * len(TASKS)))
    assert stubs != list(function_problems(count=2 * len(TASKS), seed=1))
    assert all(s.startswith(HUMANEVAL_INSTRUCTION + "\n\n") for s in stubs)
    r = random.Random(3)
    for task in TASKS:
        stub = problem(task, r)
        function = ast.parse(stub).body[-1]
        assert isinstance(function, ast.FunctionDef) and function.name in task.names
        runner = doctest.DocTestRunner(optionflags=doctest.NORMALIZE_WHITESPACE)
        test = doctest.DocTestParser().get_doctest(
            ast.get_docstring(function), {function.name: task.solve}, function.name, None, 0
        )
        assert test.examples and runner.run(test).failed == 0, stub


def test_chat_requests_are_seeded_and_use_every_template():
    """Every machine makes the same requests (a pack finds its prompts by key); each template
    gives a filled-in request of its own."""
    from specbench.train.prompts.chat import TEMPLATES, chat_requests

    requests = list(chat_requests(count=2 * len(TEMPLATES)))
    assert requests == list(chat_requests(count=2 * len(TEMPLATES)))
    assert requests != list(chat_requests(count=2 * len(TEMPLATES), seed=1))
    assert len(set(requests[: len(TEMPLATES)])) == len(TEMPLATES)
    assert all(len(q.split()) >= 8 and "{" not in q for q in requests)


def test_code_prompts_are_documented_public_functions_cut_after_their_docstring(tmp_path):
    """A method comes dedented; private, undocumented, body-less or barely documented
    functions and test folders give no prompt; each prompt asks as HumanEval does."""
    from specbench.data.benchmarks import HUMANEVAL_INSTRUCTION
    from specbench.train.prompts.code import stdlib_prompts

    doc = "Return the running total of the items, starting from the given value."
    (tmp_path / "tests").mkdir()
    (tmp_path / "tests" / "test_x.py").write_text(f'def checked(a):\n    """{doc}"""\n    return a\n')
    (tmp_path / "broken.py").write_text("def (:\n")
    (tmp_path / "mod.py").write_text(
        "import itertools\n\n"
        f'def total(items, start=0):\n    """{doc}\n\n    Second paragraph.\n    """\n    out = start\n    '
        "return out\n\n"
        f'def _private(items):\n    """{doc}"""\n    return 1\n\n'
        'def terse(items):\n    """Sum."""\n    return 1\n\n'
        f'def only_doc(items):\n    """{doc}"""\n\n'
        "def undocumented(items):\n    x = 1\n    return x\n\n"
        f'class Box:\n    @property\n    def size(self):\n        """{doc}"""\n        value = 1\n        return '
        "value\n"
    )
    prompts = list(stdlib_prompts(tmp_path))
    assert prompts == [
        f'{HUMANEVAL_INSTRUCTION}\n\ndef total(items, start=0):\n    """{doc}\n\n    Second paragraph.\n    """\n',
        f'{HUMANEVAL_INSTRUCTION}\n\ndef size(self):\n    """{doc}"""\n',
    ]


def test_sharegpt_training_answers_overlap_no_evaluation_prompt():
    index = EvalIndex(evaluation_prompts())
    pairs = exchanges(seed=0)
    assert len(pairs) > 40000
    assert not any(index.overlaps(question) for question, _ in pairs[:2000] + pairs[-2000:])


def test_no_sharegpt_answers_asked_gives_none():
    """--sharegpt-answers 0 means none (it used to mean all of them)."""
    from specbench.train.data import sharegpt_answers

    assert sharegpt_answers(None, 0, seed=0, max_tokens=64) == []


def test_a_pack_gives_back_the_corpus_rows_and_read_answers_keeps_each_once(tmp_path):
    """Packed answers come back with the prompt ids the corpus generated them from
    (rebuilt by key from the ShareGPT package and the standard library), in order, with
    their temperatures."""
    import json

    from specbench.data import sharegpt
    from specbench.data.chat import chat_prompt
    from specbench.models import registry
    from specbench.train.data import TARGET
    from specbench.train.packed import pack, read_answers, unpack
    from specbench.train.prompts.code import stdlib_prompts
    from specbench.train.prompts.sources import prompt_key

    tokenizer = registry.load(TARGET, "float32", "cpu")[1]
    texts = []
    for conversation in sharegpt.conversations():
        texts += [
            t["value"].strip()
            for t in conversation["conversations"]
            if t.get("from") == "human" and len(t.get("value") or "") > 20
        ]
        if len(texts) >= 3:
            break
    texts = texts[:3] + [next(iter(stdlib_prompts()))]
    rows = [
        {
            "key": prompt_key(text),
            "temperature": temperature,
            "prompt": chat_prompt(tokenizer, [{"role": "user", "content": text}]),
            "answer": [7, 49151, i, 2],
        }
        for i, text in enumerate(texts)
        for temperature in (0.0, 0.8)
    ]
    path = tmp_path / "corpus" / "answers.safetensors"
    pack(rows, path)
    assert unpack(path, tokenizer) == rows
    (tmp_path / "corpus" / "answers-t0-0of1.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows[:2]))
    assert read_answers([str(tmp_path / "corpus")], tokenizer) == rows  # the shard's rows are in the pack already
    with pytest.raises(ValueError, match="uint16"):
        pack([{**rows[0], "answer": [70000]}], tmp_path / "big.safetensors")


def test_a_pack_is_never_rewritten(tmp_path):
    """A pack may hold answers this machine no longer has: packing to its name again is one line, and it is
    untouched."""
    import sys

    from conftest import run_in_process

    existing = tmp_path / "answers-old.safetensors"
    existing.write_bytes(b"the old pack")
    (tmp_path / "shard").mkdir()
    result = run_in_process(
        [sys.executable, "-m", "specbench.train.packed", "--data", str(tmp_path / "shard"), "--out", str(existing)]
    )
    assert result.returncode == 2 and result.stderr.strip().splitlines() == [result.stderr.strip()]
    assert result.stderr.startswith("error: --out:") and "never rewritten" in result.stderr
    assert existing.read_bytes() == b"the old pack"


def test_committed_held_out_sets_are_greedy_answers_of_their_folders_packs():
    """Every trainer reading a corpus folder holds out its validation*.json sets and refuses
    a key no greedy answer holds: each set must be found in the folder's own packs."""
    import json
    from pathlib import Path

    from specbench.train.packed import keys_of, temperatures_of

    folders = sorted(p for p in (Path(__file__).resolve().parents[2] / "corpus").iterdir() if p.is_dir())
    assert folders
    for folder in folders:
        greedy = {
            k for pack in folder.glob("*.safetensors") for k, t in zip(keys_of(pack), temperatures_of(pack)) if t == 0.0
        }
        sets = [json.loads(path.read_text()) for path in sorted(folder.glob("validation*.json"))]
        assert all(len(keys) == len(set(keys)) and set(keys) <= greedy for keys in sets)
        assert len(set().union(*map(set, sets))) == sum(map(len, sets))  # no answer is in two sets


@pytest.mark.slow
def test_a_pass_skips_prompts_a_pack_holds(tmp_path):
    """A fresh machine resuming a pass answers only what no pack holds at that temperature:
    with the first 3 prompts packed at T=0 it answers none (and loads no model); with 2 of
    them packed, it answers the third."""
    import json
    import sys
    from subprocess import CompletedProcess

    from conftest import run_in_process

    from specbench.train.packed import pack
    from specbench.train.prompts.contamination import evaluation_index
    from specbench.train.prompts.sources import prompt_key

    keys = [prompt_key(t) for t in training_prompts(evaluation_index(), 0)[:3]]

    def run(packed_keys: list[str], name: str) -> tuple[CompletedProcess, list[str]]:
        packs, out = tmp_path / f"packs-{name}", tmp_path / f"out-{name}"
        pack(
            [{"key": k, "temperature": t, "answer": [5, 2]} for k in packed_keys for t in (0.0, 0.8)],
            packs / "answers.safetensors",
        )
        # another temperature counts for nothing
        pack([{"key": keys[2], "temperature": 0.8, "answer": [5, 2]}], packs / "answers-sampled.safetensors")
        result = run_in_process(
            [
                sys.executable,
                "-m",
                "specbench.train.corpus",
                "--out",
                str(out),
                "--prompts",
                "3",
                "--temperatures",
                "0.0",
                "--max-new-tokens",
                "2",
                "--packs",
                str(packs),
            ]
        )
        shard = out / "answers-t0-0of1.jsonl"
        return result, [json.loads(line)["key"] for line in shard.read_text().splitlines()] if shard.exists() else []

    result, answered = run(keys, "all")
    assert result.returncode == 0 and answered == [] and "Loading weights" not in result.stderr, result.stderr[-2000:]
    result, answered = run(keys[:2], "two")
    assert result.returncode == 0 and answered == [keys[2]], result.stderr[-2000:]
