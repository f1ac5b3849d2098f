"""Where the corpus's prompts come from: the sources a drafter's training text (and a
code or math calibration) draws its prompts from, each prompt named by a key that packs,
held-out sets and the corpus's shards share."""

from __future__ import annotations

import hashlib
import random
from collections.abc import Callable, Iterable, Iterator
from functools import cache

from specbench import ROOT
from specbench.data import sharegpt
from specbench.train.prompts.chat import chat_requests
from specbench.train.prompts.code import stdlib_prompts
from specbench.train.prompts.contamination import EvalIndex, normalize
from specbench.train.prompts.functions import function_problems
from specbench.train.prompts.math import word_problems


def sharegpt_turns() -> Iterator[str]:
    """Every human turn of the ShareGPT package's conversations, in file order."""
    for conversation in sharegpt.conversations():
        for turn in conversation.get("conversations", []):
            if turn.get("from") == "human":
                yield (turn.get("value") or "").strip()


SOURCES: dict[str, Callable[[], Iterable[str]]] = {
    "sharegpt": sharegpt_turns,
    "python-stdlib": stdlib_prompts,
    "math-word-problems": word_problems,
    "function-problems": function_problems,
    "chat-requests": chat_requests,
}
# the committed packs of a checkout: a fresh machine resuming a pass skips what they hold
COMMITTED_PACKS = ROOT / "corpus" / "smollm2-135m"


@cache
def source_texts(source: str) -> tuple[str, ...]:
    """A source's prompts in its own order, each normalized text once (its first). Built
    once per process: calibration, the corpus, the trainers and the contamination checks
    each read a source, and the standard library's takes ~9 s to parse (AMD EPYC Zen 3)."""
    seen, texts = set(), []
    for text in SOURCES[source]():
        key = " ".join(normalize(text))
        if len(key) >= 8 and key not in seen:
            seen.add(key)
            texts.append(text)
    return tuple(texts)


@cache
def prompt_table(source: str) -> dict[str, str]:
    """Key -> prompt of a whole source, built once per process: every pack a trainer reads
    looks its prompts up here instead of hashing the source again."""
    return {prompt_key(text): text for text in source_texts(source)}


def training_prompts(eval_index: EvalIndex, seed: int, source: str = "sharegpt") -> list[str]:
    """A source's deduplicated prompts with no evaluation overlap, shuffled by `seed`."""
    prompts = list(clean_texts(eval_index, source))
    random.Random(seed).shuffle(prompts)
    return prompts


@cache
def clean_texts(eval_index: EvalIndex, source: str) -> tuple[str, ...]:
    """source_texts minus those overlapping `eval_index`, built once per process and index:
    ShareGPT's take ~5 s to check, and a trainer that answers prompts first asks again."""
    return tuple(text for text in source_texts(source) if not eval_index.overlaps(text))


def prompt_key(text: str) -> str:
    return hashlib.sha256(" ".join(normalize(text)).encode()).hexdigest()[:16]
