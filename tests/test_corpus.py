"""Drafter training prompts never include an evaluation prompt."""

from specbench.train.contamination import SHARED_DATA, EvalIndex, evaluation_prompts, normalize
from specbench.train.corpus import training_prompts
from specbench.train.data import exchanges


def test_overlap_rule():
    index = EvalIndex(["Write a Python function that returns the sum of the squares of the first n odd natural numbers, please.", "Hi there"])
    assert index.overlaps("hi, THERE")  # same words: exact match after normalisation
    assert index.overlaps("Could you write a python function that returns the sum of the squares of the first n odd natural numbers?")
    assert not index.overlaps("Write a Python function that returns the product of two numbers.")


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


def test_sharegpt_training_answers_overlap_no_evaluation_prompt():
    index = EvalIndex(evaluation_prompts())
    pairs = exchanges(seed=0)
    assert len(pairs) > 40000
    assert not any(index.overlaps(question) for question, _ in pairs[:2000] + pairs[-2000:])
