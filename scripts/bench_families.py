"""Our AR against transformers' `generate` per model family, side by side per prompt.

For each family of conf/model (specbench/models/families.py: Llama-3.1, Vicuna, Qwen2,
Qwen3 untied and tied (0.6B), Qwen3-MoE) and each shape (`tiny`: 2 layers, hidden 32;
`135m`: SmolLM2-135M's hidden 576, 30 layers, 9 heads over 3 KV heads, vocabulary 49152), a
random-weight model of that exact architecture (a forward's cost does not depend on the
weights' values; nothing is downloaded) decodes the same random prompts greedily with our
engine (the forward `hardware.forward=auto` picks: lean for the dense families, the model's
own for MoE, plain kernels: no compile probe) and with `model.generate(do_sample=False)`,
back to back per prompt, alternating which goes first, so drift on a shared machine hits both
alike. What it reports are ratios (our tok/s over transformers'), per prompt and their median,
and whether the ids are identical (fp32: they must be); absolute times depend on the machine
and its load and are not the result. On a shared machine, `--threads 1 --clock process` times
each side by this process's CPU time (time.process_time), which leaves out the time other
processes held the cores; the default `wall` is what a user waits.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

import torch
import transformers
from bench_vs_transformers import hf_generate  # its own wall time is not used: `clock` times each side here

from specbench.engine.lean import forward_note, make_lm
from specbench.engine.loop import Limits, Method, generate
from specbench.engine.sampling import Sampling, seeded
from specbench.errors import require, run_command
from specbench.models.families import FAMILIES, SMOLLM2_135M, TINY, random_model
from specbench.trees.autoregressive import Autoregressive
from specbench.verify.standard import StandardVerifier

SHAPES = {"tiny": TINY, "135m": SMOLLM2_135M}
STOP = 2  # Llama's eos id; on random weights any id serves, the same one for both sides
CLOCKS = {"wall": time.perf_counter, "process": time.process_time}


def timed(clock, run) -> tuple[list[int], float]:
    start = clock()
    ids = run()
    return ids, clock() - start


def compare(
    family: str, shape: str, prompts: int, prompt_tokens: int, max_new_tokens: int, clock: str = "wall", log=print
) -> dict:
    """One family at one shape: per prompt our tok/s over transformers', and identity."""
    model = random_model(family, SHAPES[shape])
    model.generation_config.eos_token_id = STOP
    lm, ar = make_lm(model), Method(Autoregressive(), StandardVerifier())
    limits = Limits(max_new_tokens, frozenset({STOP}))
    generator = seeded(0, "cpu")  # prompt ids, drawn on the host
    inputs = [
        torch.randint(3, model.config.vocab_size, (prompt_tokens,), generator=generator).tolist()
        for _ in range(prompts)
    ]
    generate(lm, ar, inputs[0], Sampling(), Limits(8, frozenset({STOP})))  # warm-up, untimed
    hf_generate(model, inputs[0], 8, {STOP})
    ratios, identical = [], 0
    sides = {
        "ours": lambda prompt: generate(lm, ar, prompt, Sampling(), limits).ids,
        "hf": lambda prompt: hf_generate(model, prompt, max_new_tokens, {STOP})[0],
    }
    for i, prompt in enumerate(inputs):
        runs = {
            side: timed(CLOCKS[clock], lambda: sides[side](prompt))
            for side in (["ours", "hf"] if i % 2 == 0 else ["hf", "ours"])
        }
        (ours, ours_s), (theirs, theirs_s) = runs["ours"], runs["hf"]
        ratios.append((len(ours) / ours_s) / (len(theirs) / theirs_s))
        identical += ours == theirs
        log(
            f"  {family} {shape} prompt {i}: ours / transformers {ratios[-1]:.2f}x, {len(ours)} tokens, ids "
            f"{'identical' if ours == theirs else 'DIFFER'}"
        )
    return {
        "family": family,
        "shape": shape,
        "model": type(model).__name__,
        "forward": forward_note(model),
        "kind": lm.kind,
        "ratios": [round(r, 3) for r in ratios],
        "median_ratio": round(statistics.median(ratios), 3),
        "identical": identical,
        "prompts": prompts,
    }


def table(rows: list[dict]) -> str:
    lines = [
        "| family | shape | model | forward | ours / transformers (median) | per prompt | identical ids |",
        "|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        lines.append(
            f"| {r['family']} | {r['shape']} | {r['model']} | {r['forward']} | {r['median_ratio']:.2f}x | "
            f"{' '.join(f'{x:.2f}' for x in r['ratios'])} | {r['identical']}/{r['prompts']} |"
        )
    return "\n".join(lines)


def main(argv: list[str]) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--families", nargs="+", default=list(FAMILIES), help=f"of {', '.join(FAMILIES)}")
    parser.add_argument("--shapes", nargs="+", default=list(SHAPES), help=f"of {', '.join(SHAPES)}")
    parser.add_argument("--prompts", type=int, default=3)
    parser.add_argument("--prompt-tokens", type=int, default=64)
    parser.add_argument("--max-new-tokens", type=int, default=64)
    parser.add_argument("--threads", type=int, default=None, help="torch threads (default: torch's)")
    parser.add_argument(
        "--clock",
        choices=list(CLOCKS),
        default="wall",
        help="wall time, or this process's CPU time (a shared machine, --threads 1)",
    )
    parser.add_argument("--out", type=Path, default=None, help="also write the rows as JSON here")
    args = parser.parse_args(argv)
    unknown = [f for f in args.families if f not in FAMILIES] + [s for s in args.shapes if s not in SHAPES]
    require(
        not unknown,
        "--families/--shapes",
        f"unknown {unknown}; families: {', '.join(FAMILIES)}; shapes: {', '.join(SHAPES)}",
    )
    require(
        args.prompts >= 1 and args.max_new_tokens >= 1 and args.prompt_tokens >= 1,
        "--prompts/--prompt-tokens/--max-new-tokens",
        "must be at least 1",
    )
    if args.threads:
        torch.set_num_threads(args.threads)
    rows = [
        compare(f, s, args.prompts, args.prompt_tokens, args.max_new_tokens, args.clock)
        for s in args.shapes
        for f in args.families
    ]
    print(
        f"\nour AR over transformers {transformers.__version__} generate, fp32, T=0, "
        f"threads={torch.get_num_threads()}, {args.clock} clock, "
        f"{args.prompts} prompts of {args.prompt_tokens} tokens, up to {args.max_new_tokens} new (ratios > 1: "
        "ours faster)"
    )
    print(table(rows))
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(
            json.dumps(
                {"settings": vars(args) | {"out": str(args.out), "threads": torch.get_num_threads()}, "rows": rows},
                indent=1,
            )
        )


if __name__ == "__main__":
    run_command(main, sys.argv[1:])
