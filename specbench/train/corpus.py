"""Training text that teaches a drafter the target's own behaviour: the target's answers
(greedy and sampled) to prompts that are not in any evaluation set.

Prompts are every human turn of the ShareGPT conversations the pip package ships (as a
single-turn chat), deduplicated by normalized text, minus any prompt that shares a
13-word span with (or equals) a prompt of an evaluation set: MT-Bench, HumanEval, GSM8K
test and the question files in ../shared/data. Answers are generated in shards, one
JSONL file per (shard, temperature), appended and flushed per batch, so an interrupted
run resumes where it stopped and several processes can share the work.

    python -m specbench.train.corpus --out runs/corpus --shards 2 --shard 0 &
    python -m specbench.train.corpus --out runs/corpus --shards 2 --shard 1 &
"""

from __future__ import annotations

import argparse
import hashlib
import json
import random
import time
from pathlib import Path

import torch
from tqdm import tqdm

from specbench.data import sharegpt
from specbench.models import registry
from specbench.run import chat_prompt, read_records
from specbench.train.contamination import EvalIndex, evaluation_index, normalize
from specbench.train.data import TARGET


def training_prompts(eval_index: EvalIndex, seed: int) -> list[str]:
    """Deduplicated ShareGPT human turns with no evaluation overlap, shuffled by `seed`."""
    seen, prompts = set(), []
    for conversation in sharegpt.conversations():
        for turn in conversation.get("conversations", []):
            text = (turn.get("value") or "").strip()
            key = " ".join(normalize(text))
            if turn.get("from") != "human" or len(key) < 8 or key in seen:
                continue
            seen.add(key)
            if not eval_index.overlaps(text):
                prompts.append(text)
    random.Random(seed).shuffle(prompts)
    return prompts


def prompt_key(text: str) -> str:
    return hashlib.sha256(" ".join(normalize(text)).encode()).hexdigest()[:16]


def generate(args) -> None:
    torch.set_num_threads(args.threads)
    torch.manual_seed(args.seed + args.shard)
    model, tokenizer = registry.load(TARGET, args.dtype, "cpu")
    texts = training_prompts(evaluation_index(), args.seed)[: args.prompts][args.shard :: args.shards]
    encoded = ((t, chat_prompt(tokenizer, [{"role": "user", "content": t}])) for t in texts)
    prompts = [(t, ids) for t, ids in encoded if len(ids) <= args.max_prompt_tokens]
    out_dir = Path(args.out)
    out_dir.mkdir(parents=True, exist_ok=True)
    pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id
    deadline = time.time() + args.minutes * 60
    for temperature in args.temperatures:
        path = out_dir / f"answers-t{temperature:g}-{args.shard}of{args.shards}.jsonl"
        done = {row["key"] for row in read_records(path)}  # a torn last line is cut, so appends stay valid
        todo = [(t, ids) for t, ids in prompts if prompt_key(t) not in done]
        bar = tqdm(total=len(prompts), initial=len(prompts) - len(todo), desc=f"target answers T={temperature:g} shard {args.shard}", unit="prompt")
        with open(path, "a") as f, torch.inference_mode():
            for batch in length_sorted_batches(todo, args.batch, window=args.batch * 32):
                if time.time() > deadline:
                    return
                width = max(len(ids) for _, ids in batch)
                ids = torch.tensor([[pad] * (width - len(p)) + p for _, p in batch])
                mask = torch.tensor([[0] * (width - len(p)) + [1] * len(p) for _, p in batch])
                sampling = {"do_sample": True, "temperature": temperature, "top_p": 1.0, "top_k": 0} if temperature > 0 else {"do_sample": False}
                answers = model.generate(input_ids=ids, attention_mask=mask, max_new_tokens=args.max_new_tokens, pad_token_id=pad, **sampling)
                for (text, prompt), answer in zip(batch, answers[:, width:].tolist()):
                    if tokenizer.eos_token_id in answer:
                        answer = answer[: answer.index(tokenizer.eos_token_id) + 1]
                    else:
                        answer = [t for t in answer if t != pad]
                    f.write(json.dumps({"key": prompt_key(text), "temperature": temperature, "prompt": prompt, "answer": answer}) + "\n")
                f.flush()
                bar.update(len(batch))
        bar.close()


def length_sorted_batches(prompts: list, batch: int, window: int):
    """Batches of prompts of similar length (sorted within windows of the given order),
    so little of each batched forward is spent on padding."""
    for start in range(0, len(prompts), window):
        chunk = sorted(prompts[start : start + window], key=lambda p: len(p[1]))
        for i in range(0, len(chunk), batch):
            yield chunk[i : i + batch]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", required=True, help="directory of answer shards")
    parser.add_argument("--shards", type=int, default=1)
    parser.add_argument("--shard", type=int, default=0)
    parser.add_argument("--prompts", type=int, help="answer only the first this many prompts of the shuffled order (default: all)")
    parser.add_argument("--temperatures", type=float, nargs="+", default=[0.0, 0.8])
    parser.add_argument("--batch", type=int, default=16)
    parser.add_argument("--max-new-tokens", type=int, default=256)
    parser.add_argument("--max-prompt-tokens", type=int, default=384)
    parser.add_argument("--dtype", default="float32", help="float32 unless the CPU has native bf16 matmul")
    parser.add_argument("--minutes", type=float, default=600, help="stop after this long (re-run to continue)")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--seed", type=int, default=0)
    generate(parser.parse_args())


if __name__ == "__main__":
    main()
