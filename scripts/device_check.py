"""One command for a lent CUDA machine: the engine on random-weight models of Llama-3.1-8B
and Qwen3-8B shape (built here from transformers configs: a forward's speed does not depend
on the weights' values) with random EAGLE-3 heads, written to one markdown and one JSON file:

- T=0 identity, in fp32: our AR against transformers' `generate` (B=1), and EAGLE-3 against
  our AR at B=1 and B=4 (prompts of different lengths, one longer than the widest bucket);
- the target's forward cost f(n), n = 1..64 new tokens per row at B = 1, 4 and 16 after a
  fixed context (costs.profile's timing), in bf16 as the engine runs it (engine.compile=auto:
  static shapes and CUDA graphs on a GPU);
- our AR tok/s against transformers' `generate`, back to back per prompt, bf16, B=1;
- engine overhead per step: the share of decode time the profiled forwards do not explain,
  as a run's summary computes it (costs.predict), for AR and EAGLE-3 at B=1 and 4;
- host syncs per step (reads of device tensors into Python, specbench.engine.syncs).

    PYTHONPATH=. python scripts/device_check.py                # CUDA: under 8 minutes on one H100-class GPU
    PYTHONPATH=. python scripts/device_check.py --tiny         # tiny shapes on a CPU, engine.compile=static

The GPU machine needs torch (with CUDA) and transformers 5.x, and specbench's imports on
this path beyond them: hydra-core (which brings omegaconf, antlr4-python3-runtime and
PyYAML); numpy, safetensors and tqdm are transformers' own dependencies, so already there
(accelerate, for hardware=multi-gpu runs, is not needed here). With no package index there,
download them on a connected machine, copy the directory over, and install from it:

    pip download -d wheels hydra-core numpy safetensors tqdm     # on the connected machine
    pip install --no-index --find-links wheels hydra-core numpy safetensors tqdm

For another Python or platform than the connected machine's, add e.g. `--python-version 3.11
--platform manylinux2014_x86_64 --only-binary=:all:` to the download (antlr4-python3-runtime 4.9
is published as a source archive only: download it without --only-binary, in a second
`pip download -d wheels --no-deps antlr4-python3-runtime==4.9.3`; installing it needs
setuptools, which a Python with pip has). Leave torch and transformers out of both lists: pip
would replace the machine's CUDA build. Nothing is downloaded from the Hugging Face hub.
"""

from __future__ import annotations

import argparse
import gc
import json
import platform
import sys
import tempfile
import time
from dataclasses import asdict, dataclass
from pathlib import Path

import torch
import transformers
from safetensors.torch import save_file
from transformers import AutoModelForCausalLM, LlamaConfig, Qwen3Config

from bench_vs_transformers import config, hf_generate
from specbench import costs, methods
from specbench.costs.predict import predict
from specbench.costs.profile import CostProfile, finish_gpu_work, measure_drafter, measure_target
from specbench.engine.lean import supports
from specbench.engine.loop import Limits, generate, generate_batch
from specbench.engine.sampling import Sampling
from specbench.engine.syncs import counting_syncs
from specbench.errors import run_command
from specbench.models.eagle3 import Eagle3Head, head_config
from specbench.records import method_run

MAX_N = 64
BATCHES = (1, 4, 16)
EAGLE3_TREE = {"top_k": 8, "depth": 5, "total_tokens": 32}
TINY_EAGLE3_TREE = {"top_k": 3, "depth": 3, "total_tokens": 10}


@dataclass(frozen=True)
class Scale:
    """What a check runs: the model shapes, the prompts and how much is timed."""

    device: str
    compile: str  # engine.compile
    prompt_lengths: tuple[int, ...]  # the identity prompts (a batch of 4: one wider than every bucket)
    identity_tokens: int
    speed_prompts: int
    speed_tokens: int
    context: int  # f(n) is timed after this many cached rows
    repeats: int
    draft_n: int  # draft forwards are profiled for n = 1..draft_n


GPU = Scale("cuda", "auto", (37, 120, 64, 9), 48, 3, 128, 512, 3, 16)
TINY = Scale("cpu", "static", (23, 70, 41, 9), 24, 2, 32, 128, 1, 8)


def target_configs(tiny: bool) -> dict[str, transformers.PretrainedConfig]:
    """Llama-3.1-8B and Qwen3-8B as their published configs give them (or the same families
    at tiny shapes), with the conf/model entry each stands for."""
    if tiny:
        small = {"hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 5, "num_attention_heads": 4, "num_key_value_heads": 2,
                 "vocab_size": 512, "max_position_embeddings": 2048, "eos_token_id": 2, "tie_word_embeddings": False}
        return {"llama3.1-8b": LlamaConfig(**small, rope_theta=500000.0), "qwen3-8b": Qwen3Config(**small, head_dim=16)}
    llama = LlamaConfig(
        hidden_size=4096, intermediate_size=14336, num_hidden_layers=32, num_attention_heads=32, num_key_value_heads=8, vocab_size=128256,
        max_position_embeddings=131072, rms_norm_eps=1e-5, bos_token_id=128000, eos_token_id=128009, tie_word_embeddings=False,
        rope_parameters={"rope_type": "llama3", "rope_theta": 500000.0, "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                         "original_max_position_embeddings": 8192},
    )
    qwen = Qwen3Config(
        hidden_size=4096, intermediate_size=12288, num_hidden_layers=36, num_attention_heads=32, num_key_value_heads=8, head_dim=128,
        vocab_size=151936, max_position_embeddings=40960, rms_norm_eps=1e-6, rope_theta=1000000.0, bos_token_id=151643, eos_token_id=151645,
        tie_word_embeddings=False,
    )
    return {"llama3.1-8b": llama, "qwen3-8b": qwen}


def random_target(model_config, device: str) -> torch.nn.Module:
    """The model class its config names, with random weights, built on the device in fp32."""
    with torch.device(device):
        model = AutoModelForCausalLM.from_config(model_config, dtype=torch.float32, attn_implementation="sdpa")
    return model.eval()


def write_random_eagle3_head(target_config, directory: Path, device: str) -> dict:
    """An EAGLE-3 head for this target with random weights, saved as a published head is
    (config.json with draft_vocab_size and target_hidden_size, d2t/t2d maps), so the method
    loads it as it loads a real one. Returns its model entry."""
    draft_vocab = min(32000, target_config.vocab_size // 2)
    raw = {"architectures": ["LlamaForCausalLMEagle3"], "model_type": "llama", "hidden_size": target_config.hidden_size,
           "intermediate_size": target_config.intermediate_size, "num_attention_heads": target_config.num_attention_heads,
           "num_key_value_heads": target_config.num_key_value_heads, "num_hidden_layers": 1, "vocab_size": target_config.vocab_size,
           "draft_vocab_size": draft_vocab, "target_hidden_size": target_config.hidden_size, "rms_norm_eps": target_config.rms_norm_eps,
           "max_position_embeddings": target_config.max_position_embeddings, "rope_theta": 500000.0, "hidden_act": "silu"}
    with torch.device(device):
        head = Eagle3Head(head_config(raw))
    with torch.no_grad():
        head.d2t.zero_()  # draft id i is target id i
        head.t2d.zero_()
        head.t2d[:draft_vocab] = True
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "config.json").write_text(json.dumps(raw))
    save_file({k: v.to("cpu", torch.bfloat16 if v.is_floating_point() else v.dtype).contiguous() for k, v in head.state_dict().items()},
              directory / "model.safetensors")
    return {"name": f"random-eagle3-{target_config.model_type}", "path": str(directory)}


def random_prompts(lengths, vocab: int, seed: int) -> list[list[int]]:
    g = torch.Generator().manual_seed(seed)
    return [torch.randint(3, vocab, (n,), generator=g).tolist() for n in lengths]


class Engine:
    """The target as a run decodes with it (costs.target_lm, as specbench.plan builds it) and
    the methods it runs (methods.assemble), for one dtype."""

    def __init__(self, name: str, model, dtype: str, scale: Scale, head: dict, tiny: bool):
        mode = scale.compile if scale.compile == "auto" or supports(model) else "off"  # static needs the lean forward
        overrides = [f"model={name}", f"hardware={'cpu-fp32' if tiny else 'gpu'}", f"engine.compile={mode}"]
        self.cfg = config(*overrides)
        self.hardware = {**self.cfg["hardware"], "dtype": dtype}
        self.lm, _ = costs.target_lm(model, self.cfg, self.hardware)
        self.ar = methods.assemble(config("method=ar")["method"], model, self.hardware, self.lm.compiled)
        eagle3_cfg = config("method=eagle3")["method"]
        eagle3_cfg["drafter"]["head"] = head
        eagle3_cfg["tree"].update(TINY_EAGLE3_TREE if tiny else EAGLE3_TREE)
        self.eagle3_cfg = eagle3_cfg
        self.eagle3 = methods.assemble(eagle3_cfg, model, self.hardware, self.lm.compiled)

    def decode(self, method, prompts: list[list[int]], limits: Limits, batch: int):
        """Generations of `prompts`, `batch` rows at a time."""
        out = []
        for start in range(0, len(prompts), batch):
            out += generate_batch(self.lm, method, prompts[start : start + batch], Sampling(), limits)
        return out


def identity_rows(model, engine: Engine, prompts: list[list[int]], limits: Limits) -> list[dict]:
    """T=0: our AR against transformers' generate (B=1), EAGLE-3 against our AR (B=1, 4)."""
    eos = set(limits.stop_token_ids)
    ar = [generate(engine.lm, engine.ar, p, Sampling(), limits).ids for p in prompts]
    theirs = [hf_generate(model, p, limits.max_new_tokens, eos)[0] for p in prompts]
    rows = [compared("our AR vs transformers generate", 1, theirs, ar)]
    for batch in (1, 4):
        eagle3 = engine.decode(engine.eagle3, prompts, limits, batch)
        rows.append(compared("EAGLE-3 vs our AR", batch, ar, [g.ids for g in eagle3]) | {"tau": tau(eagle3)})
    return rows


def compared(check: str, batch: int, reference: list[list[int]], ids: list[list[int]]) -> dict:
    differing = [i for i, (a, b) in enumerate(zip(reference, ids)) if a != b]
    first = None
    if differing:
        a, b = reference[differing[0]], ids[differing[0]]
        first = {"prompt": differing[0], "token": next((j for j, (x, y) in enumerate(zip(a, b)) if x != y), min(len(a), len(b)))}
    return {"check": check, "batch": batch, "prompts": len(ids), "tokens": sum(map(len, ids)), "identical": not differing, "first_difference": first}


def tau(generations) -> float:
    return sum(len(g.ids) for g in generations) / max(sum(g.target_forwards for g in generations), 1)


def forward_costs(engine: Engine, scale: Scale) -> dict[int, object]:
    """f(n) for n = 1..MAX_N after `scale.context` rows, per batch size in BATCHES."""
    return {batch: measure_target(engine.lm, [scale.context], MAX_N, scale.repeats, batch=batch, every_n=True) for batch in BATCHES}


def ar_against_generate(model, engine: Engine, prompts: list[list[int]], limits: Limits) -> dict:
    """tok/s of our AR and of transformers' generate, back to back per prompt (alternating
    which goes first), B=1; the generation's own clock for ours, prefill included as in generate."""
    ours_tokens = ours_seconds = theirs_tokens = theirs_seconds = 0.0
    eos = set(limits.stop_token_ids)
    for i, prompt in enumerate(prompts):
        for side in (("ours", "theirs") if i % 2 == 0 else ("theirs", "ours")):
            finish_gpu_work()
            if side == "ours":
                run = generate(engine.lm, engine.ar, prompt, Sampling(), limits)
                ours_tokens, ours_seconds = ours_tokens + len(run.ids), ours_seconds + run.seconds
            else:
                ids, seconds = hf_generate(model, prompt, limits.max_new_tokens, eos)
                theirs_tokens, theirs_seconds = theirs_tokens + len(ids), theirs_seconds + seconds
    ours, theirs = ours_tokens / ours_seconds, theirs_tokens / theirs_seconds
    return {"prompts": len(prompts), "ours_tok_s": round(ours, 2), "generate_tok_s": round(theirs, 2), "ratio": round(ours / theirs, 3)}


def engine_overhead(engine: Engine, scale: Scale, curves: dict, prompts: list[list[int]], limits: Limits) -> list[dict]:
    """Per method and batch size: the share of decode time outside the profiled target and
    draft forwards, as a run's summary computes it (costs.predict over the run's records and
    a profile of these curves), and those ms per step."""
    drafter = costs.drafter_id(engine.eagle3_cfg["drafter"])
    draft_curves = {batch: measure_drafter(engine.eagle3.drafter, engine.lm, [scale.context], scale.draft_n, scale.repeats, batch=batch) for batch in (1, 4)}
    profile = CostProfile(key={"model": engine.cfg["model"]["name"], "dtype": engine.hardware["dtype"]}, target=curves[1], target_batches={str(b): c for b, c in curves.items() if b > 1},
                          drafters={drafter: draft_curves[1]}, drafter_batches={drafter: {"4": draft_curves[4]}})
    rows = []
    for name, method in (("ar", engine.ar), ("eagle3", engine.eagle3)):
        for batch in (1, 4):
            records = []
            for start in range(0, len(prompts), batch):
                rows_prompts = prompts[start : start + batch]
                generations = generate_batch(engine.lm, method, rows_prompts, Sampling(), limits)
                records += [asdict(method_run([(len(p), g, "")], len(rows_prompts), g.batch_seconds, f"b{start}", g.verify_seconds))
                            for p, g in zip(rows_prompts, generations)]
            forecast = predict(records, profile, drafter if name == "eagle3" else None)
            share = forecast["engine_overhead_share"]
            rows.append({"method": name, "batch": batch, "steps": forecast["steps"], "engine_overhead_share": round(share, 3),
                         "overhead_ms_per_step": round(1000 * share * forecast["measured_decode_seconds"] / forecast["steps"], 3),
                         "host_syncs_per_step": host_syncs_per_step(engine.lm, method, prompts[:batch], limits)})
    return rows


def host_syncs_per_step(lm, method, prompts: list[list[int]], limits: Limits) -> float:
    """Host synchronisations per decoding step of `method` on `prompts` (one batch): reads
    of tensors on the target's device between the first and the last verification (on a
    GPU only those wait for it; prefill excluded)."""
    marks = []
    with counting_syncs(lm.device) as counts:
        generate_batch(lm, method, prompts, Sampling(), limits, on_step=lambda *_: marks.append(sum(counts.values())))
    return (marks[-1] - marks[0]) / max(len(marks) - 1, 1)


def check_model(name: str, model_config, scale: Scale, tiny: bool, workdir: Path, log) -> dict:
    started = time.perf_counter()
    head = write_random_eagle3_head(model_config, workdir / f"{name}-eagle3", scale.device)
    eos = model_config.eos_token_id
    model = random_target(model_config, scale.device)
    vocab = model_config.vocab_size
    log(f"{name}: built ({sum(p.numel() for p in model.parameters()) / 1e9:.2f}B parameters) in {time.perf_counter() - started:.0f} s")
    identity_limits = Limits(max_new_tokens=scale.identity_tokens, stop_token_ids=frozenset({eos}))
    engine = Engine(name, model, "float32", scale, head, tiny)
    identity = identity_rows(model, engine, random_prompts(scale.prompt_lengths, vocab, seed=0), identity_limits)
    log(f"{name}: identity {['identical' if r['identical'] else 'DIFFERENT' for r in identity]} ({time.perf_counter() - started:.0f} s)")
    del engine
    gc.collect()  # the fp32 forward's cache and graphs (they refer back to it) go before the bf16 copy
    dtype = "float32" if tiny else "bfloat16"
    model.to(getattr(torch, dtype))
    engine = Engine(name, model, dtype, scale, head, tiny)
    curves = forward_costs(engine, scale)
    log(f"{name}: f(n) timed ({time.perf_counter() - started:.0f} s)")
    speed_limits = Limits(max_new_tokens=scale.speed_tokens, stop_token_ids=frozenset({eos}))
    speed_prompts = random_prompts([scale.context - 50 * i for i in range(scale.speed_prompts)], vocab, seed=1)
    ar_vs_generate = ar_against_generate(model, engine, speed_prompts, speed_limits)
    overhead = engine_overhead(engine, scale, curves, random_prompts(scale.prompt_lengths, vocab, seed=2), speed_limits)
    log(f"{name}: speed and overhead measured ({time.perf_counter() - started:.0f} s)")
    result = {
        "forward": engine.lm.kind, "dtype": dtype, "identity_dtype": "float32", "identity": identity,
        "forward_ms": {str(b): {"context": scale.context, "n": list(range(1, MAX_N + 1)), "ms": c.ms[0], "spread": c.spread[0]} for b, c in curves.items()},
        "ar_vs_generate": ar_vs_generate, "engine_overhead": overhead, "seconds": round(time.perf_counter() - started, 1),
    }
    del engine, model
    gc.collect()
    if torch.cuda.is_available():
        torch.cuda.empty_cache()
    return result


def environment(scale: Scale) -> dict:
    gpu = torch.cuda.get_device_name(0) if scale.device == "cuda" else None
    return {"torch": torch.__version__, "transformers": transformers.__version__, "python": platform.python_version(), "device": scale.device,
            "gpu": gpu, "gpus": torch.cuda.device_count() if gpu else 0, "cpu": platform.processor() or platform.machine(),
            "engine_compile": scale.compile, "torch_threads": torch.get_num_threads()}


def markdown(report: dict) -> str:
    env = report["environment"]
    lines = [f"# Device check ({'tiny shapes, CPU' if report['tiny'] else env['gpu']})", "",
             f"torch {env['torch']}, transformers {env['transformers']}, device {env['device']}, engine.compile={env['engine_compile']}; "
             f"{report['seconds']:.0f} s in all. Random weights: speeds hold, acceptance (tau) does not.", ""]
    models = report["models"]
    lines += ["## T=0 identity (fp32)", "", "| model | check | B | prompts | tokens | identical | first difference | tau |", "|---|---|---|---|---|---|---|---|"]
    for name, m in models.items():
        for r in m["identity"]:
            lines.append(f"| {name} | {r['check']} | {r['batch']} | {r['prompts']} | {r['tokens']} | {'yes' if r['identical'] else 'NO'} | "
                         f"{r['first_difference'] or '-'} | {format(r['tau'], '.2f') if 'tau' in r else '-'} |")
    lines += ["", "## Target forward cost f(n), ms", ""]
    for name, m in models.items():
        batches = list(m["forward_ms"])
        context = m["forward_ms"][batches[0]]["context"]
        lines += [f"{name} ({m['forward']}, {m['dtype']}), after {context} cached rows:", "", "| n | " + " | ".join(f"B={b}" for b in batches) + " |",
                  "|---|" + "---|" * len(batches)]
        for j, n in enumerate(m["forward_ms"][batches[0]]["n"]):
            lines.append(f"| {n} | " + " | ".join(f"{m['forward_ms'][b]['ms'][j]:.2f}" for b in batches) + " |")
        lines.append("")
    lines += ["## Our AR against transformers generate (B=1)", "", "| model | prompts | ours tok/s | generate tok/s | ratio |", "|---|---|---|---|---|"]
    for name, m in models.items():
        s = m["ar_vs_generate"]
        lines.append(f"| {name} | {s['prompts']} | {s['ours_tok_s']:.1f} | {s['generate_tok_s']:.1f} | {s['ratio']:.2f}x |")
    lines += ["", "## Engine overhead per step", "", "Decode time the profiled target and draft forwards do not explain (costs.predict, as a run's summary).", "",
              "| model | method | B | steps | overhead share | ms per step |", "|---|---|---|---|---|---|"]
    for name, m in models.items():
        for r in m["engine_overhead"]:
            lines.append(f"| {name} | {r['method']} | {r['batch']} | {r['steps']} | {100 * r['engine_overhead_share']:.0f}% | {r['overhead_ms_per_step']:.2f} |")
    lines += ["", "## Host syncs per step", "", "| model | method | B | host syncs per step |", "|---|---|---|---|"]
    for name, m in models.items():
        for r in m["engine_overhead"]:
            syncs = r["host_syncs_per_step"]
            lines.append(f"| {name} | {r['method']} | {r['batch']} | {syncs:.1f} |")
    return "\n".join(lines) + "\n"


def main(argv: list[str]) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tiny", action="store_true", help="tiny shapes on the CPU, engine.compile=static (what the tests run)")
    parser.add_argument("--out", default="results/device-check", help="directory for device-check.md and device-check.json")
    args = parser.parse_args(argv)
    scale = TINY if args.tiny else GPU
    if scale.device == "cuda" and not torch.cuda.is_available():
        sys.exit(f"device check: torch {torch.__version__} sees no CUDA GPU; run with --tiny for the CPU check")
    started = time.perf_counter()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)

    def log(message: str) -> None:
        print(f"[{time.perf_counter() - started:5.0f} s] {message}", flush=True)

    torch.manual_seed(0)
    with tempfile.TemporaryDirectory(prefix="device-check-") as workdir:
        models = {name: check_model(name, c, scale, args.tiny, Path(workdir), log) for name, c in target_configs(args.tiny).items()}
    report = {"tiny": args.tiny, "environment": environment(scale), "models": models, "seconds": round(time.perf_counter() - started, 1)}
    (out / "device-check.json").write_text(json.dumps(report, indent=1))
    (out / "device-check.md").write_text(markdown(report))
    log(f"wrote {out / 'device-check.md'} and {out / 'device-check.json'}")


if __name__ == "__main__":
    run_command(main, sys.argv[1:])
