"""Training text for drafters: the target's own answers and ShareGPT answers."""

from __future__ import annotations

import argparse
import json
import random
from functools import lru_cache
from pathlib import Path

import torch
from hydra.errors import HydraException
from omegaconf import OmegaConf
from omegaconf.errors import OmegaConfBaseException

from specbench.data import sharegpt
from specbench.data.chat import chat_prompt
from specbench.errors import ConfigError, require
from specbench.run.config import CONF_DIR, compose_config
from specbench.train.prompts.contamination import evaluation_index

# the embedded target, as its model config names it (the default target of every trainer)
TARGET = OmegaConf.to_container(OmegaConf.load(CONF_DIR / "model" / "smollm2-135m.yaml"))
TARGET_FILE = "target.json"  # in a corpus directory: the target whose answers it holds (none: the embedded one)


def add_target_argument(parser: argparse.ArgumentParser) -> None:
    """--target, for every command that runs the target to make training data or heads."""
    parser.add_argument(
        "--target",
        nargs="+",
        default=[],
        metavar="model=NAME",
        help="the target, as `python -m specbench` composes it from conf/model: e.g. --target model=qwen3-8b "
        "model.path=/dir/with/config.json (default: the embedded model)",
    )


@lru_cache
def target_entry(overrides: tuple[str, ...]) -> dict:
    """The model entry `--target` names: conf/model composed with `overrides` as the app
    composes them (a model choice and model.* keys only); none: the embedded target."""
    if not overrides:
        return TARGET
    for given in overrides:
        key, sep, _ = given.lstrip("+~").partition("=")
        require(
            bool(sep) and (key == "model" or key.startswith("model.")),
            "--target",
            f"'{given}' is not model=NAME or model.KEY=VALUE (e.g. --target model=qwen3-8b "
            "model.path=/dir/with/config.json)",
        )
    try:
        return compose_config(list(overrides))["model"]
    except (HydraException, OmegaConfBaseException) as error:
        raise ConfigError(f"--target: {' '.join(overrides)}: {str(error).splitlines()[0]}") from None


def target_record(entry: dict) -> dict:
    """What names a target's answers (its config name and local path or hub id)."""
    return {key: entry.get(key) for key in ("name", "path", "id")}


def check_corpus_target(directory: Path, entry: dict, key: str) -> None:
    """A corpus directory holds one target's answers (TARGET_FILE; none: the embedded
    target's): answers of another target would teach a head the wrong model."""
    held = (
        json.loads((directory / TARGET_FILE).read_text())
        if (directory / TARGET_FILE).is_file()
        else target_record(TARGET)
    )
    require(
        held == target_record(entry),
        key,
        f"{directory} holds the answers of target {held}, not of {target_record(entry)}: "
        "give a corpus of this target's answers, or answer prompts with it first (specbench.train.corpus --target ...)",
    )


def exchanges(seed: int) -> list[tuple[str, str]]:
    """Every (human turn, gpt answer) pair of ShareGPT whose question overlaps no
    evaluation prompt, shuffled with `seed` (each pair stands alone as one chat turn)."""
    index = evaluation_index()
    pairs = []
    for conversation in sharegpt.conversations():
        turns = conversation.get("conversations") or []
        for question, answer in zip(turns, turns[1:]):
            if (
                question.get("from") == "human"
                and answer.get("from") == "gpt"
                and question.get("value")
                and answer.get("value")
            ):
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


def load_rows(
    answers: list[dict], tokenizer, sharegpt_count: int, seed: int, max_tokens: int
) -> tuple[list[dict], int]:
    """The target's answers, then ShareGPT's own answers; returns the rows and how many
    came from the target."""
    return answers + sharegpt_answers(tokenizer, sharegpt_count, seed, max_tokens), len(answers)
