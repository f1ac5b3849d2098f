"""Our loop against transformers' own generate on the same model, dtype and prompts.

Per prompt, ours and transformers run back to back (alternating which goes first), so
drift on this machine hits both alike; the ratios are what to quote.
  ar  vs  model.generate(do_sample=False)
  pld vs  model.generate(prompt_lookup_num_tokens=gamma, max_matching_ngram_size=max_ngram)
  sps vs  model.generate(assistant_model=<the same draft model object>), the assistant set to
          the same fixed draft length gamma (constant schedule, no confidence early stop)
Draft lengths are fixed (pld 10, sps 5) so both sides run the same shape; the dtype is the
hardware's (auto: measured). transformers' assistant must score the target's whole
vocabulary: a draft with its own (drafters.small_lm.DraftVocab) is handed to it as the same
layers with a full-vocabulary output layer that gives every other token -inf
(`transformers_assistant`), so both sides draft the same tokens, but its forward reads
the full output layer where ours reads only the draft's rows.
"""

from __future__ import annotations

import argparse
import sys
import time

import torch
from hydra import compose, initialize_config_dir
from omegaconf import OmegaConf

from specbench import costs
from specbench.costs import dtype as dtype_rule
from specbench.data import questions
from specbench.data.chat import chat_prompt, stop_token_ids
from specbench.engine import methods
from specbench.engine.loop import Limits, generate
from specbench.engine.sampling import Sampling
from specbench.errors import run_command
from specbench.models import registry
from specbench.run.config import CONF_DIR


def config(*overrides: str) -> dict:
    with initialize_config_dir(str(CONF_DIR), version_base="1.3"):
        return OmegaConf.to_container(compose("config", overrides=list(overrides)), resolve=True)


def hf_generate(model, prompt, max_new_tokens, eos, **kwargs):
    ids = torch.tensor([prompt], device=model.device)
    start = time.perf_counter()
    with torch.inference_mode():
        out = model.generate(
            ids,
            attention_mask=torch.ones_like(ids),
            max_new_tokens=max_new_tokens,
            do_sample=False,
            eos_token_id=sorted(eos),
            pad_token_id=sorted(eos)[0],
            **kwargs,
        )
    return out[0, len(prompt) :].tolist(), time.perf_counter() - start


def transformers_assistant(drafter) -> torch.nn.Module:
    """The SpS drafter's model as transformers' assisted generation can use it: itself, or
    for a draft with its own vocabulary the same layers and input embedding (shared) under
    an output layer over the target's vocabulary, the draft's rows where they are and
    -inf (a bias) for every other token."""
    model, vocab = drafter.lm.model, drafter.vocab
    if vocab is None:
        return model
    config = model.config.__class__.from_dict({**model.config.to_dict(), "vocab_size": vocab.target_vocab_size})
    expanded = type(model)(config).to(model.dtype).eval()
    own = {k: v for k, v in model.state_dict().items() if not k.startswith(("lm_head.", "model.embed_tokens."))}
    expanded.load_state_dict(own, strict=False)
    expanded.model.embed_tokens = model.get_input_embeddings()
    output = torch.nn.Linear(config.hidden_size, vocab.target_vocab_size, bias=True, dtype=model.dtype)
    with torch.no_grad():
        output.weight.zero_()
        output.weight[vocab.ids] = model.get_output_embeddings().weight
        output.bias.fill_(float("-inf"))
        output.bias[vocab.ids] = 0.0
    expanded.lm_head = output
    return expanded


def compare(cfg: dict, max_new_tokens: int, log=print) -> dict:
    """tok/s of ours and transformers' for ar, pld and sps on the config's prompts, side by
    side per prompt; {name: {"ours", "hf", "ratio", "identical", "prompts"}}. Ours runs
    the model's own weights, as transformers does (engine.fp16_weights off): the ratio is
    the engines', not FBGEMM's fp16-weight kernel's."""
    cfg = {**cfg, "engine": {**(cfg.get("engine") or {}), "fp16_weights": "off"}}
    hardware = dict(cfg["hardware"])
    hardware["dtype"], _ = dtype_rule.resolve(hardware, cfg["model"], engine=cfg["engine"])
    torch.set_num_threads(hardware["threads"])
    model, tokenizer = registry.load(cfg["model"], hardware["dtype"], hardware["device"])
    eos = stop_token_ids(model, tokenizer, cfg["model"])
    limits = Limits(max_new_tokens, frozenset(eos))
    target, _ = costs.target_lm(model, cfg, hardware)
    # fixed draft lengths, the same on both sides (transformers' prompt lookup default is 10)
    pld_cfg, sps_cfg = (
        config("method=pld", "method.tree.gamma=10")["method"],
        config("method=sps", "method.tree.gamma=5")["method"],
    )
    ours = {
        name: methods.assemble(c, model, hardware)
        for name, c in (("ar", cfg["baseline"]["method"]), ("pld", pld_cfg), ("sps", sps_cfg))
    }
    assistant = transformers_assistant(ours["sps"].drafter)
    assistant.generation_config.num_assistant_tokens = sps_cfg["tree"]["gamma"]
    assistant.generation_config.num_assistant_tokens_schedule = "constant"
    assistant.generation_config.assistant_confidence_threshold = 0.0
    theirs = {
        "ar": {},
        "pld": {
            "prompt_lookup_num_tokens": pld_cfg["tree"]["gamma"],
            "max_matching_ngram_size": pld_cfg["drafter"]["max_ngram"],
        },
        "sps": {"assistant_model": assistant},
    }
    prompts = [
        chat_prompt(tokenizer, [{"role": "user", "content": s.turns[0]}]) for s in questions.load(cfg["dataset"])
    ]
    for name in ours:  # warm-up, untimed
        generate(target, ours[name], prompts[0], Sampling(), Limits(16, frozenset(eos)))
        hf_generate(model, prompts[0], 16, eos, **theirs[name])
    totals = {(name, side): [0, 0.0] for name in ours for side in ("ours", "hf")}
    agree = {name: 0 for name in ours}
    for i, prompt in enumerate(prompts):
        for name in ours:
            runs = {}
            for side in ["ours", "hf"] if i % 2 == 0 else ["hf", "ours"]:
                if side == "ours":
                    out = generate(target, ours[name], prompt, Sampling(), limits)
                    runs[side] = (out.ids, out.seconds)
                else:
                    runs[side] = hf_generate(model, prompt, max_new_tokens, eos, **theirs[name])
                totals[name, side][0] += len(runs[side][0])
                totals[name, side][1] += runs[side][1]
            agree[name] += runs["ours"][0] == runs["hf"][0]
            log(
                f"prompt {i}: {name} ours {len(runs['ours'][0]) / runs['ours'][1]:.1f} tok/s, transformers "
                f"{len(runs['hf'][0]) / runs['hf'][1]:.1f} tok/s"
            )
    rows = {}
    for name in ours:
        ours_tps = totals[name, "ours"][0] / totals[name, "ours"][1]
        hf_tps = totals[name, "hf"][0] / totals[name, "hf"][1]
        rows[name] = {
            "ours": ours_tps,
            "hf": hf_tps,
            "ratio": ours_tps / hf_tps,
            "identical": agree[name],
            "prompts": len(prompts),
        }
    weights_mb = sum(p.numel() * p.element_size() for p in model.parameters()) / 1e6
    bandwidth = read_bandwidth_gb_s()
    rows["settings"] = {
        "dtype": hardware["dtype"],
        "threads": torch.get_num_threads(),
        "max_new_tokens": max_new_tokens,
        "weights_mb": weights_mb,
        "read_gb_s": bandwidth,
        "floor_tok_s": bandwidth * 1e3 / weights_mb,
    }
    return rows


def read_bandwidth_gb_s(gib: float = 1.0, repeats: int = 5) -> float:
    """GB/s torch reads memory at here (median of `repeats` sums over a buffer far larger
    than the caches): one-token decoding reads every weight once, so weights / this is
    the fastest a token can be."""
    buffer = torch.ones(int(gib * 2**30) // 4, dtype=torch.float32)
    buffer.sum()  # warm-up: pages touched
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        buffer.sum()
        times.append(time.perf_counter() - start)
    return buffer.numel() * 4 / sorted(times)[len(times) // 2] / 1e9


def prompt_parser(doc: str, prompts: int) -> argparse.ArgumentParser:
    """The options of a side-by-side script: how many prompts, tokens, and Hydra overrides
    (read by `prompt_config`)."""
    parser = argparse.ArgumentParser(description=doc, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--prompts", type=int, default=prompts)
    parser.add_argument("--max-new-tokens", type=int, default=128)
    parser.add_argument("overrides", nargs="*", help="Hydra overrides, e.g. dataset=humaneval or hardware=cpu-fp32")
    return parser


def prompt_config(args: argparse.Namespace) -> dict:
    """The config of `prompt_parser`'s arguments: that many first turns of the dataset."""
    return config(f"dataset.limit={args.prompts}", "dataset.max_turns=1", *args.overrides)


def main(argv: list[str]) -> None:
    args = prompt_parser(__doc__, prompts=10).parse_args(argv)
    cfg = prompt_config(args)
    rows = compare(cfg, args.max_new_tokens)
    settings = rows.pop("settings")
    print(
        f"\n{cfg['model']['name']} {settings['dtype']} threads={settings['threads']} prompts={args.prompts} "
        f"max_new_tokens={args.max_new_tokens} T=0"
    )
    for name, r in rows.items():
        print(
            f"{name:4s} ours {r['ours']:6.1f} tok/s | transformers {r['hf']:6.1f} tok/s | ratio {r['ratio']:.2f} "
            f"| identical outputs {r['identical']}/{r['prompts']}"
        )
    print(floor_line(rows["ar"]["ours"], settings))


def floor_line(ar_tok_s: float, settings: dict) -> str:
    return (
        f"AR (ours) {ar_tok_s:.1f} tok/s = {100 * ar_tok_s / settings['floor_tok_s']:.0f}% of the "
        "memory-bandwidth floor: "
        f"{settings['weights_mb']:.0f} MB of weights read per token at {settings['read_gb_s']:.1f} GB/s (torch "
        "reading 1 GiB here) "
        f"allow at most {settings['floor_tok_s']:.1f} tok/s"
    )


if __name__ == "__main__":
    run_command(main, sys.argv[1:])
