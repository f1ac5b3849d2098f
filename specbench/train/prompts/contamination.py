"""Which texts count as evaluation prompts, so no drafter ever trains on one.

A training text overlaps when it equals an evaluation prompt after normalisation or
shares a 13-word span with one (GPT-3's contamination rule). The instructions this tool itself
puts before a benchmark's question (GSM8K's "Solve the following math problem step by
step...") are left out of both sides: that text is ours, and training prompts asked the same
way share it. The evaluation prompts are
every turn of MT-Bench, HumanEval and GSM8K test, plus the question files in
../shared/data when they are beside the checkout.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable
from functools import cache

from specbench import ROOT
from specbench.data import questions
from specbench.data.benchmarks import GSM8K_INSTRUCTION, HUMANEVAL_INSTRUCTION, WMT19_INSTRUCTION

SPAN = 13  # words: a shared span this long counts as overlap
EVAL_DATASETS = ("mt_bench", "humaneval", "gsm8k")
INSTRUCTIONS = (GSM8K_INSTRUCTION, HUMANEVAL_INSTRUCTION, WMT19_INSTRUCTION)
SHARED_DATA = ROOT.parent / "shared" / "data"


def normalize(text: str) -> list[str]:
    return re.findall(r"[a-z0-9]+", text.lower())


def without_instructions(text: str) -> str:
    for instruction in INSTRUCTIONS:
        text = text.replace(instruction, " ")
    return text


def spans(words: list[str]) -> set[tuple[str, ...]]:
    return {tuple(words[i : i + SPAN]) for i in range(len(words) - SPAN + 1)}


class EvalIndex:
    """The prompts of every evaluation set, for overlap checks."""

    def __init__(self, texts: Iterable[str]):
        self.exact: set[tuple[str, ...]] = set()
        self.spans: set[tuple[str, ...]] = set()
        for text in texts:
            words = normalize(without_instructions(text))
            self.exact.add(tuple(words))
            self.spans |= spans(words)

    def overlaps(self, text: str) -> bool:
        words = normalize(without_instructions(text))
        return tuple(words) in self.exact or not spans(words).isdisjoint(self.spans)


def evaluation_prompts() -> list[str]:
    """Every turn of the evaluation sets this tool benchmarks on, from their packages
    and from the shared offline question files when they are beside the checkout."""
    from omegaconf import OmegaConf

    conf = ROOT / "conf" / "dataset"
    texts = []
    for name in EVAL_DATASETS:
        cfg = OmegaConf.to_container(OmegaConf.load(conf / f"{name}.yaml"), resolve=True)
        texts += [t for s in questions.load(cfg) for t in s.turns]
    for path in sorted(SHARED_DATA.glob("*/*.jsonl")):
        for row in map(json.loads, path.open()):
            texts += row.get("turns", [])
    return texts


@cache
def evaluation_index() -> EvalIndex:
    """The index over evaluation_prompts(), built once per process."""
    return EvalIndex(evaluation_prompts())
