"""Plain AR through our engine in bf16 against fp32, same prompts, side by side per prompt
(alternating which goes first, so drift hits both alike; the ratio is what to quote).

On a CPU without native bf16 matmul a one-token bf16 forward still reads half the bytes,
so plain decoding can be fastest in bf16 where every drafting method is fastest in fp32
(specbench/costs/dtype.py): this measures what that costs a drafting method's user.

    python scripts/bench_dtype.py --prompts 5 --max-new-tokens 128
"""

from __future__ import annotations

import sys

import torch
from bench_vs_transformers import prompt_config, prompt_parser

from specbench import costs
from specbench.costs import dtype as dtype_rule
from specbench.data import questions
from specbench.data.chat import chat_prompt, stop_token_ids
from specbench.engine.loop import Limits, Method, generate
from specbench.engine.sampling import Sampling
from specbench.errors import run_command
from specbench.models import registry
from specbench.trees.autoregressive import Autoregressive
from specbench.verify.standard import StandardVerifier


def compare_dtypes(cfg: dict, max_new_tokens: int, log=print) -> dict:
    """{dtype: tok/s} of plain AR for each candidate dtype, plus "identical" (prompts whose
    ids agree across dtypes), "prompts", "forwards" (each dtype's forward as a run would
    choose it) and "precisions" (what each computed in, e.g. fp32 activations on fp16 weights)."""
    hardware = dict(cfg["hardware"])
    torch.set_num_threads(hardware["threads"])
    lms, tokenizer, eos = {}, None, set()
    for dtype in dtype_rule.CANDIDATES:
        model, tokenizer = registry.load(cfg["model"], dtype, hardware["device"])
        lms[dtype], _ = costs.target_lm(model, cfg, {**hardware, "dtype": dtype})
        eos = stop_token_ids(model, tokenizer, cfg["model"])
    method, limits = Method(Autoregressive(), StandardVerifier()), Limits(max_new_tokens, frozenset(eos))
    prompts = [
        chat_prompt(tokenizer, [{"role": "user", "content": s.turns[0]}]) for s in questions.load(cfg["dataset"])
    ]
    for lm in lms.values():  # warm-up, untimed
        generate(lm, method, prompts[0], Sampling(), Limits(16, limits.stop_token_ids))
    tokens, seconds, identical = {d: 0 for d in lms}, {d: 0.0 for d in lms}, 0
    for i, prompt in enumerate(prompts):
        outs = {}
        for dtype in list(lms) if i % 2 == 0 else list(lms)[::-1]:
            outs[dtype] = out = generate(lms[dtype], method, prompt, Sampling(), limits)
            tokens[dtype] += len(out.ids)
            seconds[dtype] += out.seconds
        identical += len({tuple(out.ids) for out in outs.values()}) == 1
        log(f"prompt {i}: AR " + ", ".join(f"{d} {len(outs[d].ids) / outs[d].seconds:.1f}" for d in lms) + " tok/s")
    return {
        **{d: tokens[d] / seconds[d] for d in lms},
        "identical": identical,
        "prompts": len(prompts),
        "forwards": {d: lm.kind for d, lm in lms.items()},
        "precisions": {d: lm.compiled.precision(d) for d, lm in lms.items()},
    }


def main(argv: list[str]) -> None:
    args = prompt_parser(__doc__, prompts=5).parse_args(argv)
    cfg = prompt_config(args)
    rows = compare_dtypes(cfg, args.max_new_tokens)
    print(
        f"{cfg['model']['name']} AR, threads={torch.get_num_threads()} prompts={rows['prompts']} "
        f"max_new_tokens={args.max_new_tokens} T=0 "
        f"dataset={cfg['dataset']['name']}: "
        + ", ".join(f"{rows['precisions'][d]} {rows[d]:.1f} tok/s" for d in dtype_rule.CANDIDATES)
        + ", "
        f"bf16/fp32 {rows['bfloat16'] / rows['float32']:.2f}x, identical ids {rows['identical']}/{rows['prompts']}"
    )


if __name__ == "__main__":
    run_command(main, sys.argv[1:])
