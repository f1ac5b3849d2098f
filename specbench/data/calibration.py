"""The prompts `auto` tree shapes are calibrated on: English chat turns from ShareGPT, or a
corpus source's held-out prompts for code and math datasets (dataset.calibration). None is
in an evaluation set, and none of the held-out ones is in the drafters' training text."""

from __future__ import annotations

import json
import random
import re

from specbench.data import sharegpt
from specbench.data.chat import chat_prompt
from specbench.errors import require
from specbench.train.prompts.contamination import evaluation_index
from specbench.train.prompts.sources import COMMITTED_PACKS, prompt_table

CALIBRATION_SEED = 7
# words of which an English prompt has at least one in ten (function words, not topics)
ENGLISH_WORDS = frozenset(
    "the a an to of and in is are was be do does i you your my me we it this that what how why can for with on".split()
)
# which prompts calibrate a dataset's shapes (dataset.calibration): chat turns, or the held-out
# prompts of a corpus source (HELD_OUT_SOURCES): code completions, math word problems
CALIBRATION_KINDS = ("chat", "code", "math")
# kind -> (corpus source, the committed held-out set of its greedy answers)
HELD_OUT_SOURCES = {
    "code": ("python-stdlib", "validation-code.json"),
    "math": ("math-word-problems", "validation-math.json"),
}


def calibration_id(count: int, seed: int = CALIBRATION_SEED, kind: str = "chat") -> str:
    """Names the prompts calibration_prompts(count, seed, kind) picks (cache key without reading them)."""
    if kind in HELD_OUT_SOURCES:
        return f"{HELD_OUT_SOURCES[kind][0]}-held-out:{count}:{seed}"
    return f"sharegpt-english-first-turns-no-eval-overlap:{count}:{seed}"


def is_english(text: str) -> bool:
    """Mostly ASCII, and one word in ten or more a common English one. The evaluation sets
    and the drafters' training text are English; a prompt in another language gives every
    shape τ near 1 (AMD EPYC Zen 5, EAGLE-3 head: a Chinese and a Spanish prompt 1.05-1.39 for
    trees of 2-60 tokens, the four English ones 1.45-4.57), so two such prompts of six
    flattened the ranking of shapes."""
    words = re.findall(r"[a-z']+", text.lower())
    return (
        sum(c.isascii() for c in text) >= 0.95 * len(text)
        and len(words) >= 5
        and sum(w in ENGLISH_WORDS for w in words) >= 0.1 * len(words)
    )


def calibration_prompts(tokenizer, count: int, seed: int = CALIBRATION_SEED, kind: str = "chat") -> list[list[int]]:
    """English chat prompts from ShareGPT first turns that overlap no evaluation set, or for
    `kind` "code" / "math" a corpus source's held-out prompts (held_out_calibration_texts)."""
    if kind in HELD_OUT_SOURCES:
        texts = held_out_calibration_texts(kind)
        random.Random(seed).shuffle(texts)
        chosen = (texts * -(-count // len(texts)))[:count]  # a batch bigger than the set repeats prompts
        return [chat_prompt(tokenizer, [{"role": "user", "content": t}]) for t in chosen]
    index = evaluation_index()
    texts = []
    for conversation in sharegpt.conversations():
        turns = conversation.get("conversations") or []
        if turns and turns[0].get("from") == "human" and 40 <= len(turns[0].get("value", "")) <= 800:
            if is_english(turns[0]["value"]) and not index.overlaps(turns[0]["value"]):
                texts.append(turns[0]["value"])
        if len(texts) >= 200:
            break
    chosen = random.Random(seed).sample(texts, count)
    return [chat_prompt(tokenizer, [{"role": "user", "content": t}]) for t in chosen]


def held_out_calibration_texts(kind: str) -> list[str]:
    """The prompts of a corpus source (HELD_OUT_SOURCES: HumanEval-style completions of
    standard-library functions, GSM8K-style word problems) whose greedy answers the committed
    corpus holds out (its validation-<kind>.json): every other such prompt is in the embedded
    drafters' training text, and would flatter their calibrated τ. Code's and math's τ differ
    from chat's, so such datasets calibrate on their own kind."""
    source, name = HELD_OUT_SOURCES[kind]
    held_out = COMMITTED_PACKS / name
    require(
        held_out.is_file(),
        "dataset.calibration",
        f"{kind} needs the checkout's {held_out}; set dataset.calibration=chat",
    )
    keys = set(json.loads(held_out.read_text()))
    texts = [text for key, text in prompt_table(source).items() if key in keys]
    require(
        bool(texts),
        "dataset.calibration",
        f"{kind}: none of {held_out}'s prompts is among this machine's {source} prompts; set dataset.calibration=chat",
    )
    return texts
