"""Training text for drafters: the target's own answers and ShareGPT answers."""

from __future__ import annotations

import random

import torch
from omegaconf import OmegaConf

from specbench.config import CONF_DIR
from specbench.data import sharegpt
from specbench.data.chat import chat_prompt
from specbench.data.contamination import evaluation_index

# the embedded target, as its model config names it (drafters are trained for it)
TARGET = OmegaConf.to_container(OmegaConf.load(CONF_DIR / "model" / "smollm2-135m.yaml"))


def exchanges(seed: int) -> list[tuple[str, str]]:
    """Every (human turn, gpt answer) pair of ShareGPT whose question overlaps no
    evaluation prompt, shuffled with `seed` (each pair stands alone as one chat turn)."""
    index = evaluation_index()
    pairs = []
    for conversation in sharegpt.conversations():
        turns = conversation.get("conversations") or []
        for question, answer in zip(turns, turns[1:]):
            if question.get("from") == "human" and answer.get("from") == "gpt" and question.get("value") and answer.get("value"):
                if not index.overlaps(question["value"]):
                    pairs.append((question["value"], answer["value"]))
    random.Random(seed).shuffle(pairs)
    return pairs


def first_turns(tokenizer, count: int, seed: int, max_prompt_tokens: int) -> list[list[int]]:
    """Chat-formatted ids of the first `count` fitting prompts of exchanges(seed)."""
    prompts = []
    for text, _ in exchanges(seed):
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
    if count <= 0:  # none asked: not the whole list
        return rows
    for question, answer in reversed(exchanges(seed)):
        prompt = chat_prompt(tokenizer, [{"role": "user", "content": question}])[-max_tokens:]
        rows.append({"prompt": prompt, "answer": tokenizer(answer + tokenizer.eos_token).input_ids[:max_tokens]})
        if len(rows) == count:
            break
    return rows


def collate(rows: list[dict], length: int) -> tuple[torch.Tensor, torch.Tensor]:
    """(ids, labels) of prompt + answer cut to the last `length` tokens, right-padded;
    labels mask the prompt and the padding with -100."""
    ids, labels = [], []
    for row in rows:
        seq = (row["prompt"] + row["answer"])[-length:]
        n_prompt = max(0, len(seq) - len(row["answer"]))
        pad = length - len(seq)
        ids.append(seq + [0] * pad)
        labels.append([-100] * n_prompt + seq[n_prompt:] + [-100] * pad)
    return torch.tensor(ids), torch.tensor(labels)


def batches(rows: list[dict], batch: int, length: int, seed: int):
    """Endless shuffled batches of collate(...)."""
    rng = random.Random(seed)
    while True:
        rng.shuffle(rows)
        for start in range(0, len(rows) - batch + 1, batch):
            yield collate(rows[start : start + batch], length)


def load_rows(answers: list[dict], tokenizer, sharegpt_count: int, seed: int, max_tokens: int) -> tuple[list[dict], int]:
    """The target's answers, then ShareGPT's own answers; returns the rows and how many
    came from the target."""
    return answers + sharegpt_answers(tokenizer, sharegpt_count, seed, max_tokens), len(answers)
