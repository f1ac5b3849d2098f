"""Training text that teaches a drafter the target's own behaviour: the target's answers
(greedy and sampled) to prompts that are not in any evaluation set.

Prompts come from a source (--source, each asked as a single-turn chat): `sharegpt`, every
human turn of the ShareGPT conversations the pip package ships; `python-stdlib`,
HumanEval-style completion requests for the documented functions of the standard library
(specbench/train/prompts/code.py); `math-word-problems`, grade-school problems made from
templates and asked as GSM8K asks (specbench/train/prompts/math.py); `function-problems`,
short programming exercises made from task templates and asked as HumanEval asks
(specbench/train/prompts/functions.py); `chat-requests`, writing, role-play, reasoning,
extraction and explanation requests made from templates (specbench/train/prompts/chat.py). They are deduplicated by
normalized text, minus any
prompt that shares a 13-word span with (or equals) a prompt of an evaluation set:
MT-Bench, HumanEval, GSM8K test and, when ../shared/data is beside the checkout, its question files. Answers are
generated in shards, one JSONL file per (source, shard, temperature), appended and flushed
per batch, so an interrupted run resumes where it stopped and several processes can share
the work. Answers outlive the machine as packs (specbench/train/packed.py, `make corpus-pack`).

    python -m specbench.train.corpus --out runs/corpus --shards 2 --shard 0 &
    python -m specbench.train.corpus --out runs/corpus --shards 2 --shard 1 &
    python -m specbench.train.corpus --out runs/corpus --source python-stdlib --temperatures 0
    python -m specbench.train.corpus --out runs/qwen3-8b-corpus --target model=qwen3-8b model.path=/models/Qwen3-8B

A corpus directory holds one target's answers: `--target` names it as the app does
(default: the embedded model) and the directory records it (target.json), so answers of
two targets never mix in one directory and a trainer refuses a corpus of another target.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import torch
from tqdm import tqdm

from specbench import costs
from specbench.data.chat import chat_prompt
from specbench.engine.loop import Limits, Method, generate_batch
from specbench.engine.sampling import Sampling, seeded
from specbench.errors import run_command
from specbench.metrics.records import read_records
from specbench.models import registry
from specbench.train.data import (
    TARGET,
    TARGET_FILE,
    add_target_argument,
    check_corpus_target,
    target_entry,
    target_record,
)
from specbench.train.packed import packed_pairs
from specbench.train.prompts.contamination import evaluation_index
from specbench.train.prompts.sources import COMMITTED_PACKS, SOURCES, prompt_key, training_prompts
from specbench.trees.autoregressive import Autoregressive
from specbench.verify.standard import StandardVerifier


def shard_path(out_dir: Path, source: str, temperature: float, shard: int, shards: int) -> Path:
    """The JSONL file of one (source, temperature, shard); ShareGPT's keep their first name."""
    name = "answers" if source == "sharegpt" else f"answers-{source}"
    return out_dir / f"{name}-t{temperature:g}-{shard}of{shards}.jsonl"


def generate(args) -> None:
    """Answer the prompts through the decoding engine's batched AR (its lean forward and
    the compile choices measured for this CPU: 256 tokens/s against transformers' generate's
    177 at batch size 16 in bf16 on an AMD EPYC Zen 4, 2 threads), each row seeded by its
    prompt key. Prompts answered already, in the shard or in a pack, are skipped; the
    target loads only when some are left."""
    torch.set_num_threads(args.threads)
    entry = target_entry(tuple(args.target))
    out_dir = Path(args.out)
    if out_dir.is_dir() and any(out_dir.iterdir()):
        check_corpus_target(out_dir, entry, "--out")
    tokenizer = registry.load_tokenizer(entry, "--target")
    texts = training_prompts(evaluation_index(), args.seed, args.source)[: args.prompts][args.shard :: args.shards]
    encoded = ((t, chat_prompt(tokenizer, [{"role": "user", "content": t}])) for t in texts)
    prompts = [(t, ids) for t, ids in encoded if len(ids) <= args.max_prompt_tokens]
    out_dir.mkdir(parents=True, exist_ok=True)
    embedded = target_record(entry) == target_record(TARGET)
    if not embedded:
        (out_dir / TARGET_FILE).write_text(json.dumps(target_record(entry)))
    packs = args.packs if args.packs is not None else [str(COMMITTED_PACKS)] if embedded else []
    packed = set().union(*(packed_pairs(Path(d)) for d in packs))
    target = None
    method = Method(Autoregressive(), StandardVerifier())
    limits = Limits(max_new_tokens=args.max_new_tokens, stop_token_ids=frozenset({tokenizer.eos_token_id}))
    deadline = time.time() + args.minutes * 60
    for temperature in args.temperatures:
        path = shard_path(out_dir, args.source, temperature, args.shard, args.shards)
        done = {row["key"] for row in read_records(path)}  # a torn last line is cut, so appends stay valid
        done |= {key for key, t in packed if t == round(temperature, 4)}
        todo = [(t, ids) for t, ids in prompts if prompt_key(t) not in done]
        bar = tqdm(
            total=len(prompts),
            initial=len(prompts) - len(todo),
            desc=f"target answers {args.source} T={temperature:g} shard {args.shard}",
            unit="prompt",
        )
        if todo and target is None:
            model = registry.load_model(entry, args.dtype, "cpu", "--target")
            target, _ = costs.target_lm(model, {"model": entry}, {"device": "cpu", "threads": args.threads})
        tokens, seconds = 0, 0.0
        with open(path, "a") as f:
            for batch in length_sorted_batches(todo, args.batch, window=args.batch * 32):
                if time.time() > deadline:
                    return
                keys = [prompt_key(t) for t, _ in batch]
                generators = [seeded(int(k[:12], 16) + args.seed, target.device) for k in keys]
                answers = generate_batch(
                    target, method, [ids for _, ids in batch], Sampling(temperature), limits, generators
                )
                for key, (_, prompt), answer in zip(keys, batch, answers):
                    f.write(
                        json.dumps({"key": key, "temperature": temperature, "prompt": prompt, "answer": answer.ids})
                        + "\n"
                    )
                f.flush()
                tokens, seconds = tokens + sum(len(a.ids) for a in answers), seconds + answers[0].batch_seconds
                bar.set_postfix(tok_s=f"{tokens / seconds:.0f}")
                bar.update(len(batch))
        bar.close()


def length_sorted_batches(prompts: list, batch: int, window: int):
    """Batches of prompts of similar length (sorted within windows of the given order),
    so little of each batched forward is spent on padding."""
    for start in range(0, len(prompts), window):
        chunk = sorted(prompts[start : start + window], key=lambda p: len(p[1]))
        for i in range(0, len(chunk), batch):
            yield chunk[i : i + batch]


def arguments() -> argparse.ArgumentParser:
    """The command's options (trainers that answer prompts first parse theirs with it)."""
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", required=True, help="directory of answer shards")
    parser.add_argument("--source", choices=sorted(SOURCES), default="sharegpt", help="where the prompts come from")
    parser.add_argument("--shards", type=int, default=1)
    parser.add_argument("--shard", type=int, default=0)
    parser.add_argument(
        "--prompts", type=int, help="answer only the first this many prompts of the shuffled order (default: all)"
    )
    parser.add_argument("--temperatures", type=float, nargs="+", default=[0.0, 0.8])
    parser.add_argument("--batch", type=int, default=16)
    parser.add_argument("--max-new-tokens", type=int, default=256)
    parser.add_argument("--max-prompt-tokens", type=int, default=384)
    parser.add_argument("--dtype", default="float32", help="float32 unless the CPU has native bf16 matmul")
    parser.add_argument("--minutes", type=float, default=600, help="stop after this long (re-run to continue)")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--packs",
        nargs="*",
        help="directories of answer packs: prompts answered there (at the same temperature) are not answered again "
        "(default: the committed packs for the embedded target, none for another)",
    )
    add_target_argument(parser)
    return parser


if __name__ == "__main__":
    run_command(lambda argv: generate(arguments().parse_args(argv)), sys.argv[1:])
