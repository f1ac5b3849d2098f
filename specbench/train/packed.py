"""The target's answers packed small enough to commit, so training data outlives the
machine it was generated on (runs/ is not committed, and machines change between
sessions).

A pack is one safetensors file: every answer's token ids end to end (uint16: the
embedded target's vocabulary is 49,152), their offsets and temperatures; the prompt
keys go in its metadata. Prompts are not stored: they come from the corpus's sources
(ShareGPT human turns from the pip package, the standard library's documented functions, the
made math word problems), where `unpack` finds them again by key and formats them with the tokenizer's chat template,
as `specbench.train.corpus` did when it generated them.

    python -m specbench.train.packed --data runs/corpus --out corpus/smollm2-135m/answers-2026-11-25.safetensors

packs the answers of runs/corpus that no pack beside the output holds yet.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import torch
from safetensors import safe_open
from safetensors.torch import save_file

from specbench.data.chat import chat_prompt
from specbench.errors import require, run_command
from specbench.train.prompts.sources import SOURCES, prompt_table


def pack(rows: list[dict], path: Path, note: str = "") -> None:
    """Write the answers of `rows` (key, temperature, answer ids) to one safetensors file."""
    ids = [t for row in rows for t in row["answer"]]
    if any(not 0 <= t < 2**16 for t in ids):
        raise ValueError("answer ids do not fit uint16")
    offsets = [0]
    for row in rows:
        offsets.append(offsets[-1] + len(row["answer"]))
    tensors = {
        "answer_ids": torch.tensor(ids, dtype=torch.int32).to(torch.uint16),
        "offsets": torch.tensor(offsets, dtype=torch.int64),
        "temperatures": torch.tensor([row["temperature"] for row in rows], dtype=torch.float32),
    }
    path.parent.mkdir(parents=True, exist_ok=True)
    save_file(tensors, str(path), metadata={"keys": json.dumps([row["key"] for row in rows]), "note": note})


def keys_of(path: Path) -> list[str]:
    with safe_open(str(path), "pt") as f:
        return json.loads(f.metadata()["keys"])


def unpack(path: Path, tokenizer) -> list[dict]:
    """Rows of key, temperature, prompt ids and answer ids, as the corpus JSONL holds them."""
    with safe_open(str(path), "pt") as f:
        keys = json.loads(f.metadata()["keys"])
        ids, offsets = f.get_tensor("answer_ids").to(torch.int64).tolist(), f.get_tensor("offsets").tolist()
        temperatures = f.get_tensor("temperatures").tolist()
    texts = prompt_texts(set(keys))
    missing = [k for k in keys if k not in texts]
    if missing:
        raise ValueError(
            f"{path}: {len(missing)} prompt keys are in no prompt source here (the ShareGPT package, this Python's "
            f"standard library, the math word problems; first: {missing[0]})"
        )
    prompts = {key: chat_prompt(tokenizer, [{"role": "user", "content": texts[key]}]) for key in set(keys)}
    return [
        {"key": key, "temperature": round(t, 4), "prompt": prompts[key], "answer": ids[offsets[i] : offsets[i + 1]]}
        for i, (key, t) in enumerate(zip(keys, temperatures))
    ]


def prompt_texts(keys: set[str]) -> dict[str, str]:
    """Key -> the prompt it was made from, searched source by source (ShareGPT first) as the
    corpus's deduplication kept it: the first with that normalized text."""
    texts = {}
    for source in SOURCES:
        table = prompt_table(source)
        texts |= {key: table[key] for key in keys - texts.keys() if key in table}
        if len(texts) == len(keys):
            break
    return texts


def read_answers(sources: list[str], tokenizer=None) -> list[dict]:
    """The target's answers (rows of prompt/answer ids) from JSONL files, packs
    (.safetensors, see specbench.train.packed; their prompts are rebuilt with `tokenizer`)
    and directories of either (corpus shards answers-*.jsonl, packs *.safetensors), in a
    stable order; a torn last line of a shard still being written is skipped, and an
    answer found twice (a pack of a corpus that is also read) is kept once."""
    files = []
    for source in map(Path, sources):
        files += (
            sorted(source.glob("*.safetensors")) + sorted(source.glob("answers-*.jsonl"))
            if source.is_dir()
            else [source]
        )
    rows, seen = [], set()
    for path in files:
        if path.suffix == ".safetensors":
            if tokenizer is None:
                raise ValueError(f"{path}: a pack needs the tokenizer to rebuild its prompts")
            found = unpack(path, tokenizer)
        else:
            found = []
            for line in path.open():
                try:
                    found.append(json.loads(line))
                except json.JSONDecodeError:
                    continue
        for row in found:
            if (row.get("key"), row.get("temperature")) not in seen or row.get("key") is None:
                seen.add((row.get("key"), row.get("temperature")))
                rows.append(row)
    return rows


def main(argv: list[str]) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--data", nargs="+", required=True, help="corpus directories or answer JSONL files")
    parser.add_argument("--out", required=True, help="the pack to write (.safetensors)")
    parser.add_argument("--note", default="", help="how the answers were generated (kept in the pack's metadata)")
    args = parser.parse_args(argv)
    out = Path(args.out)
    # a pack may hold answers no longer on this machine (runs/ is not committed): never rewrite one
    require(
        not out.exists(),
        "--out",
        f"{out} exists; a pack is never rewritten: name a new file (its answers stay out of the new one)",
    )
    packed = packed_pairs(out.parent)
    rows = [r for r in read_answers(args.data) if (r["key"], round(r["temperature"], 4)) not in packed]
    pack(rows, out, args.note)
    print(
        f"{len(rows)} answers, {sum(len(r['answer']) for r in rows)} tokens -> {out} "
        f"({out.stat().st_size / 2**20:.1f} MiB)"
    )


def packed_pairs(directory: Path) -> set[tuple[str, float]]:
    """(prompt key, temperature) of every answer the packs in `directory` hold."""
    return {
        (k, t) for path in Path(directory).glob("*.safetensors") for k, t in zip(keys_of(path), temperatures_of(path))
    }


def temperatures_of(path: Path) -> list[float]:
    with safe_open(str(path), "pt") as f:
        return [round(t, 4) for t in f.get_tensor("temperatures").tolist()]


if __name__ == "__main__":
    run_command(main, sys.argv[1:])
