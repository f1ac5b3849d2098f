"""AR through the engine with one-token attention in the model's dtype against fp32
(`Compiled.float_attention`, which `engine.compile=auto` decides by a probe), at several
batch sizes. Per batch of prompts the two run back to back, alternating which goes first,
so drift hits both alike; the ratio is what to quote. Both use the packing the probe chose.

    python scripts/bench_attention.py --batches 1 4 16 --prompts 32 --max-new-tokens 128
"""

from __future__ import annotations

import dataclasses
import sys

import torch
from bench_vs_transformers import prompt_config, prompt_parser

from specbench import costs
from specbench.costs import dtype as dtype_rule
from specbench.data import questions
from specbench.data.chat import chat_prompt, stop_token_ids
from specbench.engine.lean import make_lm
from specbench.engine.loop import Limits, Method, generate_batch
from specbench.engine.sampling import Sampling
from specbench.errors import run_command
from specbench.models import registry
from specbench.trees.autoregressive import Autoregressive
from specbench.verify.standard import StandardVerifier


def main(argv: list[str]) -> None:
    parser = prompt_parser(__doc__, prompts=32)
    parser.add_argument("--batches", type=int, nargs="+", default=[1, 4, 16])
    args = parser.parse_args(argv)
    cfg = prompt_config(args)
    hardware = dict(cfg["hardware"])
    hardware["dtype"], _ = dtype_rule.resolve(hardware, cfg["model"])
    torch.set_num_threads(hardware["threads"])
    model, tokenizer = registry.load(cfg["model"], hardware["dtype"], hardware["device"])
    chosen, _ = costs.target_lm(model, cfg, hardware)
    compiled = chosen.compiled
    lms = {
        name: make_lm(model, hardware.get("forward", "auto"), dataclasses.replace(compiled, float_attention=flag))
        for name, flag in ((hardware["dtype"], False), ("fp32", True))
    }
    limits = Limits(args.max_new_tokens, frozenset(stop_token_ids(model, tokenizer, cfg["model"])))
    method = Method(Autoregressive(), StandardVerifier())
    prompts = [
        chat_prompt(tokenizer, [{"role": "user", "content": s.turns[0]}]) for s in questions.load(cfg["dataset"])
    ]
    for lm in lms.values():  # warm-up, untimed
        generate_batch(lm, method, prompts[:2], Sampling(), Limits(16, limits.stop_token_ids))
    print(
        f"{cfg['model']['name']} "
        f"{dataclasses.replace(compiled, float_attention=False).precision(hardware['dtype'])} {compiled} "
        f"threads={torch.get_num_threads()} "
        f"prompts={len(prompts)} max_new_tokens={args.max_new_tokens} T=0 dataset={cfg['dataset']['name']}"
    )
    print(f"| batch size | {' | '.join(f'{name} attention tok/s' for name in lms)} | ratio | identical rows |")
    print("| --- | --- | --- | --- | --- |")
    for batch in args.batches:
        tokens, seconds, identical = {name: 0 for name in lms}, {name: 0.0 for name in lms}, 0
        for i, start in enumerate(range(0, len(prompts) - batch + 1, batch)):
            rows = prompts[start : start + batch]
            ids = {}
            for name in list(lms) if i % 2 == 0 else list(lms)[::-1]:
                out = generate_batch(lms[name], method, rows, Sampling(), limits)
                tokens[name] += sum(len(g.ids) for g in out)
                seconds[name] += out[0].batch_seconds
                ids[name] = [g.ids for g in out]
            identical += sum(a == b for a, b in zip(*ids.values()))
        speeds = [tokens[name] / seconds[name] for name in lms]
        print(
            f"| {batch} | {speeds[0]:.1f} | {speeds[1]:.1f} | {speeds[1] / speeds[0]:.2f}x | {identical} of "
            f"{len(prompts) // batch * batch} |",
            flush=True,
        )


if __name__ == "__main__":
    run_command(main, sys.argv[1:])
