"""The one command for a lent CUDA machine: the engine on random-weight models of Llama-3.1-8B
and Qwen3-8B shape (a forward's speed does not depend on the weights' values), in sections
that each land in $OUT (JSON and markdown, rewritten after every section) whatever happens
to the ones after it.

Before anything is built, each section's peak memory at these shapes, from meta-device models
(weights in fp32 and bf16, the EAGLE-3 head, the largest KV cache and logits): printed,
recorded, and on CUDA a section that cannot fit in the device's memory is skipped. Then per
model, with its share of --budget:
- build: the model in fp32 on the device, a random EAGLE-3 head saved as a published one is;
- identity (fp32): our AR against transformers' `generate` (B=1); EAGLE-3 (random head), and
  EAGLE-3 and SpS with an oracle drafter (drafts the target's own greedy tokens: τ must reach
  the tree's levels + 1) against our AR at B=1 and B=4, prompts of different lengths, one
  wider than every width bucket; at B=4 the oracle also misses at staggered depths, so rows
  accept different lengths (holes); at a first difference, the top-2 logit margin there;
- bf16 agreement: the same comparisons in bf16, as the share of tokens before the first
  difference (bf16 rounds differently per forward width: a rate, not a pass/fail);
- f(n): the target's forward for n = 1..64 new tokens at B = 1, 4, 16 after 512 and 4096
  cached rows (costs.profile's timing, every shape warmed and captured before it is timed),
  and the 60-node tree against one token;
- step split: per decoding step, the time in the target's forward, the draft levels, the
  tree's own work (its log-softmax, top-k and sort over the vocabulary; the draft levels it
  calls are theirs), the verifier, the commit, the loop's bookkeeping (NLL and statistics,
  which a run's clock leaves out) (CUDA events), and the host's share, what is left of the
  step's wall time, for AR, EAGLE-3 and oracle EAGLE-3 at B=1 and 4; AR per step eager (no
  graphs) vs graph replay vs `generate`; AR tok/s vs `generate`;
- host syncs: per step, the engine's own count (engine.syncs: reads and blocking copies)
  beside torch's (`torch.cuda.set_sync_debug_mode`);
- attention: per decode shape, which SDPA kernels accept the engine's call (and the
  alternatives: GQA in SDPA over the whole cache, no mask over the live prefix, K/V
  expanded, FlexAttention) and what each costs. It runs last: forcing every kernel is the
  likeliest to fault the device, and a fault (an illegal address, a device-side assert)
  fails every CUDA call after it, so the other sections land first;
each section with peak and reserved memory, graph captures and their seconds.

--budget counts from the process's start (imports and the build included), and each section
reads the clock inside its units (per decoding step, per 16 n of an f(n) curve, per attention
shape; FlexAttention's compile is not started with less than a minute left), so a call ends
within a step or so of it. On the lent machine (10 minutes a command, about 15 minutes of
machine time in all, its start included), one model a call, each given timeout_s=400:

    python scripts/device_check.py --models llama3.1-8b   # 300 s by default, about 5.5 minutes wall
    python scripts/device_check.py --models qwen3-8b
    OUT=$(mktemp -d) python scripts/device_check.py --tiny   # the same sections on tiny shapes, on a CPU

Without --models both models share the budget. It writes to $OUT, else --out. Exit status:
0 every section ok, 1 some not, 2 no CUDA, 3 the CUDA context was lost (the failing section
and what was measured are written, the sections after it skipped).

It needs torch, transformers, safetensors, numpy, tqdm and PyYAML (transformers' own
dependencies: on the lent machine already), finds the repository from its own path
(specbench need not be installed, no PYTHONPATH), and imports no hydra or omegaconf: the
method parts are built from conf/ with PyYAML. Nothing is downloaded. `--fail SECTION` makes
a section raise, to rehearse a crash: the others still land.
"""

from __future__ import annotations

import time

STARTED = time.perf_counter()  # the budget counts from here: the imports below take seconds on the lent machine

import importlib.util  # noqa: E402
import os  # noqa: E402
import sys  # noqa: E402
from pathlib import Path  # noqa: E402

REQUIRED = ("torch", "transformers", "safetensors", "numpy", "tqdm", "yaml")
MISSING = [name for name in REQUIRED if importlib.util.find_spec(name) is None]
if MISSING and __name__ == "__main__":
    sys.exit(
        f"device check: missing Python package(s) {', '.join(MISSING)} (needs {', '.join(REQUIRED)}; yaml is PyYAML)"
    )

os.environ.setdefault("TQDM_DISABLE", "1")  # progress bars would fill the 12 kB the lent machine sends back
ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import argparse  # noqa: E402
import gc  # noqa: E402
import importlib  # noqa: E402
import json  # noqa: E402
import platform  # noqa: E402
import tempfile  # noqa: E402
import traceback  # noqa: E402
import warnings  # noqa: E402
from collections import defaultdict  # noqa: E402
from dataclasses import dataclass  # noqa: E402

import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402
import transformers  # noqa: E402
import yaml  # noqa: E402
from safetensors.torch import save_file  # noqa: E402
from transformers import AutoModelForCausalLM, LlamaConfig, Qwen3Config  # noqa: E402

from specbench import costs  # noqa: E402
from specbench.costs import pool  # noqa: E402
from specbench.costs.profile import finish_gpu_work, interleaved, timed, tree_forward  # noqa: E402
from specbench.drafters.oracle import OracleDrafter  # noqa: E402
from specbench.engine import attention as engine_attention  # noqa: E402
from specbench.engine import loop as engine_loop  # noqa: E402
from specbench.engine.graphs import CAPTURES  # noqa: E402
from specbench.engine.kernels import Compiled  # noqa: E402
from specbench.engine.lean import INITIAL_ROWS, StaticTreeLM, cast, key_span, make_lm  # noqa: E402
from specbench.engine.loop import RESERVE_TREE_ROWS, Limits, Method, generate, generate_batch  # noqa: E402
from specbench.engine.sampling import Sampling  # noqa: E402
from specbench.engine.syncs import counting_syncs  # noqa: E402
from specbench.models.eagle3 import Eagle3Head, head_config  # noqa: E402
from specbench.trees.chain import Chain  # noqa: E402

MAX_N = 64
N_BLOCK = 16  # f(n) is timed this many n at a time, the clock read between blocks
BATCHES = (1, 4, 16)
TREE_NODES = 60  # the papers' wide trees (TALON, EAGLE-3 at 60 tokens) against one token
EAGLE3_TREE = {"top_k": 8, "depth": 5, "total_tokens": 32}  # 6 levels
TINY_EAGLE3_TREE = {"top_k": 3, "depth": 3, "total_tokens": 10}  # 4 levels
SPS_GAMMA = 5
GPU_BUDGET = 300.0  # one model a call: about 5.5 minutes wall with the last unit and the exit, of 10 a command
TINY_BUDGET = 3600.0  # the CPU rehearsal runs every section whole: ~20 minutes on a loaded 2-core machine
FLEX_COMPILE_S = 60  # a cold FlexAttention compile takes tens of seconds: not started with less left


@dataclass(frozen=True)
class Scale:
    """What a check runs: the model shapes, the prompts and how much is timed."""

    device: str
    compile: str  # engine.compile
    hardware: str  # conf/hardware entry
    prompt_lengths: tuple[int, ...]  # the identity prompts (a batch of 4: one wider than every bucket)
    identity_tokens: int
    speed_prompts: int
    speed_tokens: int
    contexts: tuple[int, ...]  # f(n) is timed after this many cached rows
    repeats: int
    eagle3_tree: dict


GPU = Scale("cuda", "auto", "gpu", (37, 120, 64, 9), 48, 3, 128, (512, 4096), 3, EAGLE3_TREE)
TINY = Scale("cpu", "static", "cpu-fp32", (23, 70, 41, 9), 24, 2, 32, (64, 300), 1, TINY_EAGLE3_TREE)
# each section's share of a model's budget (the model's budget: what is left of --budget over
# the models left); a section gets its share of what the sections after it leave, so time one
# does not use goes to the ones after it
SHARES = {
    "build": 0.08,
    "identity": 0.22,
    "bf16 agreement": 0.1,
    "f(n)": 0.22,
    "step split": 0.18,
    "host syncs": 0.08,
    "attention": 0.12,
}


# ---------------------------------------------------------------- configs from conf/, no hydra


def conf(group: str, name: str) -> dict:
    return yaml.safe_load((ROOT / "conf" / group / f"{name}.yaml").read_text())


def engine_defaults() -> dict:
    return yaml.safe_load((ROOT / "conf" / "config.yaml").read_text())["engine"]


def build_part(cfg: dict, **overrides):
    """The object a `_target_` config names, its other keys (and `overrides`) as arguments."""
    module, name = cfg["_target_"].rsplit(".", 1)
    params = {k: v for k, v in cfg.items() if k != "_target_"} | overrides
    return getattr(importlib.import_module(module), name)(**params)


# ---------------------------------------------------------------- models


def target_configs(tiny: bool) -> dict[str, transformers.PretrainedConfig]:
    """Llama-3.1-8B and Qwen3-8B as their published configs give them (or the same families
    at tiny shapes), under the conf/model entry each stands for."""
    if tiny:
        small = {
            "hidden_size": 64,
            "intermediate_size": 128,
            "num_hidden_layers": 5,
            "num_attention_heads": 4,
            "num_key_value_heads": 2,
            "vocab_size": 512,
            "max_position_embeddings": 2048,
            "eos_token_id": 2,
            "tie_word_embeddings": False,
        }
        return {"llama3.1-8b": LlamaConfig(**small, rope_theta=500000.0), "qwen3-8b": Qwen3Config(**small, head_dim=16)}
    llama = LlamaConfig(
        hidden_size=4096,
        intermediate_size=14336,
        num_hidden_layers=32,
        num_attention_heads=32,
        num_key_value_heads=8,
        vocab_size=128256,
        max_position_embeddings=131072,
        rms_norm_eps=1e-5,
        bos_token_id=128000,
        eos_token_id=128009,
        tie_word_embeddings=False,
        rope_parameters={
            "rope_type": "llama3",
            "rope_theta": 500000.0,
            "factor": 8.0,
            "low_freq_factor": 1.0,
            "high_freq_factor": 4.0,
            "original_max_position_embeddings": 8192,
        },
    )
    qwen = Qwen3Config(
        hidden_size=4096,
        intermediate_size=12288,
        num_hidden_layers=36,
        num_attention_heads=32,
        num_key_value_heads=8,
        head_dim=128,
        vocab_size=151936,
        max_position_embeddings=40960,
        rms_norm_eps=1e-6,
        rope_theta=1000000.0,
        bos_token_id=151643,
        eos_token_id=151645,
        tie_word_embeddings=False,
    )
    return {"llama3.1-8b": llama, "qwen3-8b": qwen}


def random_target(model_config, device: str) -> torch.nn.Module:
    """The model class its config names, with random weights, built on the device in fp32."""
    with torch.device(device):
        model = AutoModelForCausalLM.from_config(model_config, dtype=torch.float32, attn_implementation="sdpa")
    return model.eval()


def eagle3_head_config(target_config) -> dict:
    """config.json of an EAGLE-3 head for this target, as a published head writes it."""
    return {
        "architectures": ["LlamaForCausalLMEagle3"],
        "model_type": "llama",
        "hidden_size": target_config.hidden_size,
        "intermediate_size": target_config.intermediate_size,
        "num_attention_heads": target_config.num_attention_heads,
        "num_key_value_heads": target_config.num_key_value_heads,
        "num_hidden_layers": 1,
        "vocab_size": target_config.vocab_size,
        "draft_vocab_size": min(32000, target_config.vocab_size // 2),
        "target_hidden_size": target_config.hidden_size,
        "rms_norm_eps": target_config.rms_norm_eps,
        "max_position_embeddings": target_config.max_position_embeddings,
        "rope_theta": 500000.0,
        "hidden_act": "silu",
    }


def write_random_eagle3_head(target_config, directory: Path, device: str) -> dict:
    """An EAGLE-3 head for this target with random weights, saved as a published head is
    (config.json with draft_vocab_size and target_hidden_size, d2t/t2d maps), so the method
    loads it as it loads a real one. Returns its model entry."""
    raw = eagle3_head_config(target_config)
    with torch.device(device):
        head = Eagle3Head(head_config(raw))
    with torch.no_grad():
        head.d2t.zero_()  # draft id i is target id i
        head.t2d.zero_()
        head.t2d[: raw["draft_vocab_size"]] = True
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "config.json").write_text(json.dumps(raw))
    save_file(
        {
            k: v.to("cpu", torch.bfloat16 if v.is_floating_point() else v.dtype).contiguous()
            for k, v in head.state_dict().items()
        },
        directory / "model.safetensors",
    )
    return {"name": f"random-eagle3-{target_config.model_type}", "path": str(directory)}


def memory_estimate(model_config, scale: Scale) -> dict:
    """GiB each section holds at its peak at most, from meta-device models (no memory, no
    time): the weights in the section's dtype, the EAGLE-3 head, the largest KV cache it fills
    (the engine's cache: every layer's K and V, at least INITIAL_ROWS rows) and the largest
    logits (B x 64 rows x vocabulary, fp32); graph pools and the CUDA context (~0.5 GiB) are left out."""
    with torch.device("meta"):
        target = AutoModelForCausalLM.from_config(model_config, dtype=torch.float32)
        head = Eagle3Head(head_config(eagle3_head_config(model_config)))
    params = sum(p.numel() for p in target.parameters())
    head_params = sum(p.numel() for p in head.parameters())
    largest = max(p.numel() for p in target.parameters())
    c = model_config
    head_dim = getattr(c, "head_dim", None) or c.hidden_size // c.num_attention_heads
    speed = 2 if scale.device == "cuda" else 4  # bytes a parameter in the speed sections' dtype (bf16 on a GPU)

    def kv(batch: int, rows: int, size: int) -> int:
        return batch * max(rows, INITIAL_ROWS) * c.num_hidden_layers * c.num_key_value_heads * head_dim * 2 * size

    def logits(batch: int) -> int:
        return batch * MAX_N * c.vocab_size * 4

    decode_rows = max(scale.prompt_lengths) + max(scale.identity_tokens, scale.speed_tokens) + RESERVE_TREE_ROWS
    cache_rows = max(scale.contexts) + MAX_N
    # the attention section's largest call: B=16, n=64 after the longest context, K/V expanded per
    # group and the MATH kernel's fp32 scores over a cache twice the rows
    attention = 16 * c.num_attention_heads * 2 * cache_rows * (head_dim * 2 * speed + MAX_N * 4)
    sections = {
        "build": (params + head_params) * 4,
        "identity": (params + head_params) * 4 + kv(4, decode_rows, 4) + logits(4),
        # to_bf16 casts the fp32 weights one tensor at a time
        "bf16 agreement": max(params * 4 + largest * speed, (params + head_params) * speed + kv(4, decode_rows, speed))
        + logits(4),
        "f(n)": params * speed + kv(16, cache_rows, speed) + logits(16),
        "step split": (params + head_params) * speed
        + kv(4, decode_rows, speed)
        + kv(1, scale.contexts[0] + scale.speed_tokens, speed)  # the eager forward's own cache
        + logits(4),
        "host syncs": (params + head_params) * speed + kv(4, decode_rows, speed) + logits(4),
        "attention": (params + head_params) * speed + kv(4, decode_rows, speed) + attention,
    }

    def gib(n: int) -> float:
        return round(n / 2**30, 2)

    return {
        "weights_fp32": gib(params * 4),
        "weights_bf16": gib(params * 2),
        "eagle3_head_fp32": gib(head_params * 4),
        "largest_kv_cache": gib(kv(16, cache_rows, speed)),
        "sections": {name: gib(n) for name, n in sections.items()},
    }


def random_prompts(lengths, vocab: int, seed: int) -> list[list[int]]:
    g = torch.Generator().manual_seed(seed)
    return [torch.randint(3, vocab, (n,), generator=g).tolist() for n in lengths]


class Engine:
    """The target as a run decodes with it (costs.target_lm with conf/'s hardware and engine
    settings) and the methods built from conf/method, for the model's current dtype."""

    def __init__(self, name: str, model, scale: Scale, head: dict):
        dtype = str(next(model.parameters()).dtype).removeprefix("torch.")
        self.hardware = conf("hardware", scale.hardware) | {"dtype": dtype}
        self.cfg = {
            "model": conf("model", name),
            "hardware": self.hardware,
            "engine": engine_defaults() | {"compile": scale.compile},
            "method": None,
        }
        self.lm, _ = costs.target_lm(model, self.cfg, self.hardware, drafter_layers=True)
        self.model, self.scale, self.head = model, scale, head
        self.ar = self.method("ar")
        self._eagle3 = None

    def method(self, name: str, tree: dict | None = None, drafter=None) -> Method:
        cfg = conf("method", name)
        return Method(build_part(cfg["tree"], **(tree or {})), build_part(cfg["verifier"]), drafter)

    @property
    def eagle3(self) -> Method:
        """EAGLE-3 with the random head, loaded as a run loads a published one (once)."""
        if self._eagle3 is None:
            drafter = build_part(
                conf("method", "eagle3")["drafter"],
                target=self.model,
                hardware=self.hardware,
                compiled=self.lm.compiled,
                head=self.head,
            )
            self._eagle3 = self.method("eagle3", self.scale.eagle3_tree, drafter)
        return self._eagle3

    def oracle(self, name: str, references: dict, stagger: int = 0) -> Method:
        drafter = OracleDrafter(self.model.config.vocab_size, references, self.lm.device, stagger)
        tree = self.scale.eagle3_tree if name == "eagle3" else {"gamma": SPS_GAMMA}
        return self.method(name, tree, drafter)

    def decode(self, method: Method, prompts: list[list[int]], limits: Limits, batch: int, clock: Deadline):
        """The prompts `batch` at a time, the clock read after every step."""
        out = []
        for start in range(0, len(prompts), batch):
            out += generate_batch(
                self.lm, method, prompts[start : start + batch], Sampling(), limits, on_step=clock.on_step
            )
        return out


def levels(method: Method) -> int:
    """Draft levels of a method's tree (EAGLE's depth counts the levels after the first)."""
    tree = method.tree
    return tree.gamma if isinstance(tree, Chain) else tree.depth + 1


def hf_generate(model, prompt: list[int], max_new_tokens: int, eos: int) -> tuple[list[int], float]:
    ids = torch.tensor([prompt], device=model.device)
    finish_gpu_work()
    start = time.perf_counter()
    with torch.inference_mode():
        out = model.generate(
            ids,
            attention_mask=torch.ones_like(ids),
            max_new_tokens=max_new_tokens,
            min_new_tokens=max_new_tokens if eos is None else 0,
            do_sample=False,
            eos_token_id=eos,
            pad_token_id=eos if eos is not None else 0,
        )
    finish_gpu_work()
    return out[0, len(prompt) :].tolist(), time.perf_counter() - start


def top2_margin(model, prompt: list[int], before: list[int]) -> dict:
    """The target's top-2 logits after prompt + before (its own forward): a near-tie tells a
    rounding difference from a bug."""
    ids = torch.tensor([prompt + before], device=model.device)
    with torch.inference_mode():
        logits = model(ids).logits[0, -1].float()
    top = logits.topk(2)
    return {"top2": top.indices.tolist(), "margin": round(float(top.values[0] - top.values[1]), 5)}


def compared(
    check: str, batch: int, reference: list[list[int]], ids: list[list[int]], model=None, prompts=None
) -> dict:
    """Identity of `ids` with `reference` per prompt; at the first difference, where, and the margin there."""
    differing = [i for i, (a, b) in enumerate(zip(reference, ids)) if a != b]
    agreed = sum(
        next((j for j, (x, y) in enumerate(zip(a, b)) if x != y), min(len(a), len(b))) for a, b in zip(reference, ids)
    )
    first = None
    if differing:
        a, b = reference[differing[0]], ids[differing[0]]
        token = next((j for j, (x, y) in enumerate(zip(a, b)) if x != y), min(len(a), len(b)))
        first = {
            "prompt": differing[0],
            "token": token,
            "reference": a[token] if token < len(a) else None,
            "ours": b[token] if token < len(b) else None,
        }
        if model is not None:
            first |= top2_margin(model, prompts[differing[0]], a[:token])
    return {
        "check": check,
        "batch": batch,
        "prompts": len(ids),
        "tokens": sum(map(len, ids)),
        "identical": not differing,
        "agreement": round(agreed / max(sum(map(len, reference)), 1), 4),
        "first_difference": first,
    }


def with_tau(row: dict, generations, method: Method | None = None) -> dict:
    steps = [n for g in generations for n in g.accept_lengths[:-1]]
    # the prefill gives each first token: AR's tau is 1.00
    cycle_tokens = sum(len(g.ids) - 1 for g in generations if g.ids)
    row["tau"] = round(cycle_tokens / max(sum(g.target_forwards for g in generations), 1), 3)
    if method is not None:
        row["levels"] = levels(method)
        # steps that accepted every level
        row["full_steps"] = round(sum(n == levels(method) + 1 for n in steps) / max(len(steps), 1), 3)
    return row


# ---------------------------------------------------------------- sections


class OutOfTime(Exception):
    """A section's budget ran out."""


class Deadline:
    """When a section's budget runs out: `check` after each small unit of its work (a
    decoding step, a block of an f(n) curve, an attention shape)."""

    def __init__(self, deadline: float):
        self.deadline = deadline

    def left(self) -> float:
        return self.deadline - time.perf_counter()

    def check(self) -> None:
        if self.left() < 0:
            raise OutOfTime

    def on_step(self, *_) -> None:
        """generate_batch's on_step: a decode stops at the first step past the deadline."""
        self.check()


def identity(state: dict, clock: Deadline, result: dict) -> None:
    """fp32: our AR vs generate (B=1); EAGLE-3, oracle EAGLE-3 and oracle SpS vs our AR at B=1, 4."""
    model, engine = state["model"], state["engine"]
    prompts, limits = state["prompts"], state["limits"]
    result |= {"dtype": "float32", "rows": []}
    rows = result["rows"]
    ar, theirs = ar_and_generate(state, clock)
    state["references"] = references = {tuple(p): ids for p, ids in zip(prompts, ar)}
    rows.append(compared("our AR vs transformers generate", 1, theirs, ar, model, prompts))
    for label, make in (
        ("EAGLE-3 vs our AR", lambda stagger: engine.eagle3),
        ("oracle EAGLE-3 vs our AR", lambda stagger: engine.oracle("eagle3", references, stagger)),
        ("oracle SpS vs our AR", lambda stagger: engine.oracle("sps", references, stagger)),
    ):
        for batch, stagger in ((1, 0), (4, 0), (4, -1)):
            if stagger and label.startswith("EAGLE-3"):
                continue
            method = make(0)
            if stagger:
                method.drafter.stagger = levels(method)
            generations = engine.decode(method, prompts, limits, batch, clock)
            check = label + (" (staggered misses)" if stagger else "")
            rows.append(
                with_tau(
                    compared(check, batch, ar, [g.ids for g in generations], model, prompts),
                    generations,
                    method if "oracle" in label else None,
                )
            )
            clock.check()


def ar_and_generate(state: dict, clock: Deadline) -> tuple[list[list[int]], list[list[int]]]:
    """Our AR's tokens and transformers' generate's per prompt (the clock read after every
    step of ours and every prompt of theirs)."""
    model, engine, prompts, limits, eos = (
        state["model"],
        state["engine"],
        state["prompts"],
        state["limits"],
        state["eos"],
    )
    ar = [generate(engine.lm, engine.ar, p, Sampling(), limits, on_step=clock.on_step).ids for p in prompts]
    theirs = []
    for p in prompts:
        theirs.append(hf_generate(model, p, limits.max_new_tokens, eos)[0])
        clock.check()
    return ar, theirs


def to_bf16(state: dict) -> None:
    """The model in bf16, and an engine of its own (the fp32 one's cache and graphs released)."""
    if state.get("dtype") == "bfloat16":
        return
    state["engine"].lm.release()
    state.pop("engine")
    gc.collect()
    empty_cache()
    if state["scale"].device == "cuda":
        cast(state["model"], torch.bfloat16)  # RoPE inv_freq kept in fp32, as from_pretrained(dtype=bf16) loads it
    state["dtype"] = "bfloat16" if state["scale"].device == "cuda" else "float32"
    state["engine"] = Engine(state["name"], state["model"], state["scale"], state["head"])


def bf16_agreement(state: dict, clock: Deadline, result: dict) -> None:
    """The identity comparisons in the speed dtype (bf16 on a GPU; fp32 on the tiny CPU run)."""
    to_bf16(state)
    model, engine, prompts, limits = state["model"], state["engine"], state["prompts"], state["limits"]
    result |= {"dtype": state["dtype"], "rows": []}
    ar, theirs = ar_and_generate(state, clock)
    references = {tuple(p): ids for p, ids in zip(prompts, ar)}
    result["rows"].append(compared("our AR vs transformers generate", 1, theirs, ar, model, prompts))
    for batch in (1, 4):
        method = engine.oracle("eagle3", references)
        generations = engine.decode(method, prompts, limits, batch, clock)
        result["rows"].append(
            with_tau(
                compared("oracle EAGLE-3 vs our AR", batch, ar, [g.ids for g in generations], model, prompts),
                generations,
                method,
            )
        )
        clock.check()


def forward_curve(lm, batch: int, context: int, repeats: int, clock: Deadline, curve: dict) -> None:
    """f(n), n = 1..MAX_N, at B=batch after `context` cached rows, into curve["ms"] and
    ["spread"]: costs.profile.measure_target's timing (the cache cut back to the context after
    every forward, each shape warmed and captured first, shuffled passes), N_BLOCK n at a time,
    so a curve the clock cuts keeps the n it timed."""
    with torch.inference_mode():
        lm.reset(batch)
        lm.reserve(context + MAX_N)
        lm.forward(contexts=[torch.randint(3, lm.vocab_size, (context,)).tolist()] * batch)
        for first in range(1, MAX_N + 1, N_BLOCK):
            ns = range(first, min(first + N_BLOCK, MAX_N + 1))
            timings = interleaved({n: (tree_forward(lm, n), None) for n in ns}, repeats, seed=context + first)
            curve["ms"] += [round(timings[n][0], 3) for n in ns]
            curve["spread"] += [round(timings[n][1], 3) for n in ns]
            clock.check()


def forward_costs(state: dict, clock: Deadline, result: dict) -> None:
    """f(n), n = 1..MAX_N, per batch size and context (each shape warmed, and captured, before it is timed)."""
    to_bf16(state)
    engine, scale = state["engine"], state["scale"]
    result |= {"dtype": state["dtype"], "forward": engine.lm.kind, "n": list(range(1, MAX_N + 1)), "curves": {}}
    for context in scale.contexts:
        for batch in BATCHES:
            curve = {"batch": batch, "context": context, "ms": [], "spread": []}
            result["curves"][f"B={batch} c={context}"] = curve
            forward_curve(engine.lm, batch, context, scale.repeats, clock, curve)
            curve[f"f({TREE_NODES})/f(1)"] = round(curve["ms"][TREE_NODES - 1] / curve["ms"][0], 3)


BACKENDS = ("FLASH_ATTENTION", "EFFICIENT_ATTENTION", "CUDNN_ATTENTION", "MATH")


def attention_options(lm: StaticTreeLM, batch: int, n: int, context: int) -> dict:
    """The engine's attention call for a forward of n tokens per row after `context` rows
    and the alternatives, as (q, k, v, mask, kwargs), at the model's shapes and dtype."""
    heads, kv, d, dtype, device = lm.heads, lm.kv_heads, lm.head_dim, lm.embed.dtype, lm.device
    width = n if n == 1 else next(b for b in (1, 2, 4, 8, 16, 32, 64) if b >= n)
    capacity = max(1024, 2 * (context + width))
    span = key_span(context + width, capacity)
    q = torch.randn(batch, heads, width, d, dtype=dtype, device=device)
    k, v = (torch.randn(batch, kv, capacity, d, dtype=dtype, device=device) for _ in range(2))
    live = torch.zeros(batch, 1, width, capacity, dtype=torch.bool, device=device)
    live[..., : context + width] = True
    groups = heads // kv
    folded_mask = live[..., :span].repeat(1, 1, groups, 1)
    options = {
        "engine: folded GQA, mask over the key span": (
            q.reshape(batch, kv, groups * width, d),
            k[:, :, :span],
            v[:, :, :span],
            folded_mask,
            {},
        ),
        "GQA in SDPA, mask over the whole cache": (q, k, v, live, {"enable_gqa": groups > 1}),
        "K/V expanded per group, mask over the key span": (
            q,
            k[:, :, :span].repeat_interleave(groups, 1),
            v[:, :, :span].repeat_interleave(groups, 1),
            live[..., :span],
            {},
        ),
    }
    if n == 1:
        options["no mask over the live prefix (AR)"] = (
            q,
            k[:, :, : context + 1],
            v[:, :, : context + 1],
            None,
            {"enable_gqa": groups > 1},
        )
    return options


def sdpa_report(q, k, v, mask, kwargs, repeats: int) -> dict:
    """Which SDPA kernels accept this call, each one's ms, and the default's."""
    from torch.nn.attention import SDPBackend, sdpa_kernel

    def run():
        return F.scaled_dot_product_attention(q, k, v, attn_mask=mask, **kwargs)

    out = {"default_ms": round(timed(run, max(repeats, 3))[0], 4), "backends": {}}
    for name in BACKENDS:
        backend = getattr(SDPBackend, name, None)
        if backend is None:
            continue
        try:
            with warnings.catch_warnings(), sdpa_kernel([backend]):
                warnings.simplefilter("ignore")
                out["backends"][name.lower()] = round(timed(run, max(repeats, 3))[0], 4)
        except (RuntimeError, NotImplementedError):
            out["backends"][name.lower()] = None  # not eligible for this call
    eligible = {k: ms for k, ms in out["backends"].items() if ms is not None}
    # the kernel whose time the default's matches
    out["ran"] = min(eligible, key=lambda k: abs(eligible[k] - out["default_ms"])) if eligible else None
    return out


def flex_report(lm: StaticTreeLM, batch: int, n: int, context: int, repeats: int) -> dict:
    """FlexAttention (compiled) with a block mask over the live columns, GQA on."""
    from torch.nn.attention.flex_attention import create_block_mask, flex_attention

    heads, kv, d, dtype, device = lm.heads, lm.kv_heads, lm.head_dim, lm.embed.dtype, lm.device
    columns = key_span(context + n, 2 * (context + n))
    q = torch.randn(batch, heads, n, d, dtype=dtype, device=device)
    k, v = (torch.randn(batch, kv, columns, d, dtype=dtype, device=device) for _ in range(2))
    limit = context + n

    def live(b, h, q_index, kv_index):
        return kv_index < limit

    block = create_block_mask(live, batch, None, n, columns, device=device)
    compiled = torch.compile(flex_attention)
    return {
        "ms": round(timed(lambda: compiled(q, k, v, block_mask=block, enable_gqa=heads != kv), max(repeats, 3))[0], 4)
    }


def attention(state: dict, clock: Deadline, result: dict) -> None:
    to_bf16(state)
    lm, scale = state["engine"].lm, state["scale"]
    result |= {"dtype": state["dtype"], "rows": []}
    shapes = [
        (1, 1, scale.contexts[0]),
        (1, 1, scale.contexts[-1]),
        (4, 1, scale.contexts[-1]),
        (1, 32, scale.contexts[0]),
        (1, TREE_NODES, scale.contexts[0]),
        (16, 64, scale.contexts[-1]),
    ]
    with torch.inference_mode():
        for batch, n, context in shapes:
            row = {"batch": batch, "n": n, "context": context, "options": {}}
            result["rows"].append(row)
            for label, (q, k, v, mask, kwargs) in attention_options(lm, batch, n, context).items():
                row["options"][label] = sdpa_report(q, k, v, mask, kwargs, scale.repeats)
            if scale.device == "cuda" and batch == 1 and n in (1, TREE_NODES):  # a compile per shape: two shapes only
                flex = "FlexAttention, block mask over the live columns"
                if clock.left() < FLEX_COMPILE_S:
                    row["options"][flex] = {"skipped": f"under {FLEX_COMPILE_S} s left for its compile"}
                else:
                    try:
                        row["options"][flex] = flex_report(lm, batch, n, context, scale.repeats)
                    except Exception as error:  # noqa: BLE001 - recorded: an option that does not run is a finding
                        row["options"][flex] = {"error": repr(error)[:300]}
            clock.check()


class PhaseTimer:
    """Time spent in the engine's parts during a decode: CUDA events around each call on a
    GPU (device time between them), wall time elsewhere. A part called inside another (the
    draft levels inside the tree's grow) is taken off the outer one, so each part counts
    its own time once."""

    def __init__(self, cuda: bool):
        self.cuda, self.spans, self.open, self.restore = cuda, [], [], []

    def wrap(self, owner, attribute: str, phase) -> None:
        original = getattr(owner, attribute)

        def in_phase(*args, **kwargs):
            span = {"phase": phase() if callable(phase) else phase, "inner": []}
            if self.open:
                self.open[-1]["inner"].append(span)
            self.open.append(span)
            span["start"] = self.now()
            out = original(*args, **kwargs)
            span["end"] = self.now()
            self.open.pop()
            self.spans.append(span)
            return out

        self.restore.append((owner, attribute, original if attribute in vars(owner) else None))
        setattr(owner, attribute, in_phase)

    def now(self):
        if not self.cuda:
            return time.perf_counter()
        event = torch.cuda.Event(enable_timing=True)
        event.record()
        return event

    def span_ms(self, span: dict) -> float:
        if self.cuda:
            return span["start"].elapsed_time(span["end"])
        return 1000 * (span["end"] - span["start"])

    def ms(self) -> dict[str, float]:
        finish_gpu_work()
        out = defaultdict(float)
        for span in self.spans:
            out[span["phase"]] += self.span_ms(span) - sum(self.span_ms(inner) for inner in span["inner"])
        return dict(out)

    def close(self) -> None:
        for owner, attribute, original in reversed(self.restore):
            if original is None:
                delattr(owner, attribute)  # the class's method shows through again
            else:
                setattr(owner, attribute, original)


def first_call_is_prefill(phase: str):
    """A phase name for PhaseTimer.wrap that calls a part's first call, the prefill's, "prefill"."""
    calls = []

    def name() -> str:
        calls.append(None)
        return "prefill" if len(calls) == 1 else phase

    return name


def step_split(lm, method: Method, prompts: list[list[int]], limits: Limits, cuda: bool, clock: Deadline) -> dict:
    """ms per decoding step (prefill excluded) in each part, and the host's share: the step's
    wall time the parts' time does not cover. The parts: the target's forward, its commit, the
    verifier, the drafter's levels and commit, the tree policy's own work (grow and observe,
    the drafter's levels taken off) and the loop's bookkeeping (the NLL of the new tokens and
    the step's statistics, which a run's clock pauses for)."""
    # warm-up: every shape captured before the timed decode
    generate_batch(lm, method, prompts, Sampling(), limits, on_step=clock.on_step)
    timer = PhaseTimer(cuda)
    timer.wrap(lm, "forward", first_call_is_prefill("target forward"))
    timer.wrap(lm, "commit", "commit")
    timer.wrap(method.verifier, "accept_rows", "verifier")
    if method.drafter is not None:
        for attribute in ("logits", "root_logits", "level_logits", "commit"):
            timer.wrap(method.drafter, attribute, "draft commit" if attribute == "commit" else "draft levels")
    timer.wrap(method.tree, "grow", "tree")
    timer.wrap(method.tree, "observe", "tree")
    timer.wrap(engine_loop, "_nll_rows", first_call_is_prefill("bookkeeping"))
    timer.wrap(engine_loop, "_record_step", "bookkeeping")
    marks = []

    def mark(*_):
        marks.append(time.perf_counter())
        clock.check()

    try:
        generate_batch(lm, method, prompts, Sampling(), limits, on_step=mark)
        parts = timer.ms()
    finally:
        timer.close()
    steps = max(len(marks) - 1, 1)
    parts.pop("prefill", None)
    wall = 1000 * (marks[-1] - marks[0]) / steps if len(marks) > 1 else 0.0
    # the first step's parts ran before its mark
    per_step = {name: round(ms / len(marks), 3) for name, ms in parts.items()}
    return {
        "steps": len(marks),
        "wall_ms_per_step": round(wall, 3),
        "parts_ms_per_step": per_step,
        "host_ms_per_step": round(max(wall - sum(per_step.values()), 0.0), 3),
    }


def ar_per_step(state: dict, clock: Deadline, out: dict) -> None:
    """AR at B=1 per step (prefill excluded), into `out`: the lean forward eagerly, the static
    forward's graph replay, and transformers' generate (its time for N tokens less its time for 1)."""
    model, engine, scale = state["model"], state["engine"], state["scale"]
    prompt = random_prompts([scale.contexts[0]], model.config.vocab_size, seed=3)[0]
    limits = Limits(max_new_tokens=scale.speed_tokens)
    for label, lm in (
        ("eager (lean forward, no graphs)", make_lm(model, "lean", Compiled())),
        ("graph replay (static forward)", engine.lm),
    ):
        try:
            generate(lm, engine.ar, prompt, Sampling(), limits, on_step=clock.on_step)
            g = generate(lm, engine.ar, prompt, Sampling(), limits, on_step=clock.on_step)
        finally:
            if lm is not engine.lm:
                lm.release()
        out[label] = round(1000 * (g.seconds - g.prefill_seconds) / max(len(g.ids) - 1, 1), 3)
    hf_generate(model, prompt, 2, None)
    one = min(hf_generate(model, prompt, 1, None)[1] for _ in range(2))
    clock.check()
    ids, seconds = hf_generate(model, prompt, scale.speed_tokens, None)
    out["transformers generate"] = round(1000 * (seconds - one) / max(len(ids) - 1, 1), 3)


def ar_against_generate(state: dict, clock: Deadline, out: dict) -> None:
    """tok/s of our AR and of generate, back to back per prompt (alternating which goes first),
    B=1, into `out` after every prompt (the clock read between prompts)."""
    model, engine, scale = state["model"], state["engine"], state["scale"]
    prompts = random_prompts(
        [scale.contexts[0] - 50 * i for i in range(scale.speed_prompts)], model.config.vocab_size, seed=1
    )
    limits = Limits(max_new_tokens=scale.speed_tokens)
    totals = {"ours": [0, 0.0], "theirs": [0, 0.0]}
    generate(engine.lm, engine.ar, prompts[0], Sampling(), limits)
    for i, prompt in enumerate(prompts):
        for side in ("ours", "theirs") if i % 2 == 0 else ("theirs", "ours"):
            finish_gpu_work()
            if side == "ours":
                g = generate(engine.lm, engine.ar, prompt, Sampling(), limits)
                tokens, seconds = len(g.ids), g.seconds
            else:
                ids, seconds = hf_generate(model, prompt, limits.max_new_tokens, None)
                tokens = len(ids)
            totals[side][0] += tokens
            totals[side][1] += seconds
        ours, theirs = (totals[s][0] / totals[s][1] for s in ("ours", "theirs"))
        out |= {
            "prompts": i + 1,
            "tokens": scale.speed_tokens,
            "ours_tok_s": round(ours, 2),
            "generate_tok_s": round(theirs, 2),
            "ratio": round(ours / theirs, 3),
        }
        clock.check()


def speed(state: dict, clock: Deadline, result: dict) -> None:
    to_bf16(state)
    engine, scale = state["engine"], state["scale"]
    result |= {"dtype": state["dtype"], "split": []}
    prompts = random_prompts(scale.prompt_lengths, state["model"].config.vocab_size, seed=2)
    limits = Limits(max_new_tokens=scale.speed_tokens)
    references = {
        tuple(p): generate(engine.lm, engine.ar, p, Sampling(), limits, on_step=clock.on_step).ids for p in prompts
    }
    for name, method in (
        ("ar", engine.ar),
        ("eagle3", engine.eagle3),
        ("oracle eagle3", engine.oracle("eagle3", references)),
    ):
        for batch in (1, 4):
            result["split"].append(
                {"method": name, "batch": batch}
                | step_split(engine.lm, method, prompts[:batch], limits, scale.device == "cuda", clock)
            )
    result["ar_ms_per_step"] = {}
    ar_per_step(state, clock, result["ar_ms_per_step"])
    result["ar_vs_generate"] = {}
    ar_against_generate(state, clock, result["ar_vs_generate"])


def host_syncs(state: dict, clock: Deadline, result: dict) -> None:
    """Per step: the engine's count (reads and blocking copies of device tensors) and torch's."""
    to_bf16(state)
    engine, scale = state["engine"], state["scale"]
    prompts = random_prompts(scale.prompt_lengths, state["model"].config.vocab_size, seed=4)
    limits = Limits(max_new_tokens=24)
    cuda = scale.device == "cuda"
    result |= {"dtype": state["dtype"], "rows": []}
    rows = result["rows"]
    for name, method in (("ar", engine.ar), ("eagle3", engine.eagle3)):
        for batch in (1, 4):
            generate_batch(engine.lm, method, prompts[:batch], Sampling(), limits)  # warm: captures are not steps
            ours, torchs = [], []
            with counting_syncs(engine.lm.device) as counts, warnings.catch_warnings(record=True) as caught:
                warnings.simplefilter("always")
                if cuda:
                    torch.cuda.set_sync_debug_mode("warn")
                try:
                    generate_batch(
                        engine.lm,
                        method,
                        prompts[:batch],
                        Sampling(),
                        limits,
                        on_step=lambda *_: (
                            ours.append(dict(counts)),
                            torchs.append(sum("synchroniz" in str(w.message) for w in caught)),
                        ),
                    )
                finally:
                    if cuda:
                        torch.cuda.set_sync_debug_mode(0)
            steps = max(len(ours) - 1, 1)
            by_kind = {k: round((ours[-1].get(k, 0) - ours[0].get(k, 0)) / steps, 2) for k in ours[-1]} if ours else {}
            rows.append(
                {
                    "method": name,
                    "batch": batch,
                    "steps": len(ours),
                    "engine_count_per_step": round(sum(by_kind.values()), 2),
                    "by_kind": by_kind,
                    "torch_count_per_step": round((torchs[-1] - torchs[0]) / steps, 2) if cuda and torchs else None,
                }
            )
            clock.check()


def build(state: dict, clock: Deadline, result: dict) -> None:
    name, model_config, scale = state["name"], state["config"], state["scale"]
    state["head"] = write_random_eagle3_head(model_config, state["workdir"] / f"{name}-eagle3", scale.device)
    state["model"] = random_target(model_config, scale.device)
    state["eos"] = model_config.eos_token_id
    state["prompts"] = random_prompts(scale.prompt_lengths, model_config.vocab_size, seed=0)
    state["limits"] = Limits(max_new_tokens=scale.identity_tokens, stop_token_ids=frozenset({state["eos"]}))
    state["engine"] = Engine(name, state["model"], scale, state["head"])
    state["dtype"] = "float32"
    result |= {
        "parameters_b": round(sum(p.numel() for p in state["model"].parameters()) / 1e9, 3),
        "forward": state["engine"].lm.kind,
    }


SECTIONS = {
    "build": build,
    "identity": identity,
    "bf16 agreement": bf16_agreement,
    "f(n)": forward_costs,
    "step split": speed,
    "host syncs": host_syncs,
    "attention": attention,  # last: see the module's docstring
}


# ---------------------------------------------------------------- the report


def empty_cache() -> None:
    if torch.cuda.is_available():
        torch.cuda.empty_cache()


def memory() -> dict | None:
    if not torch.cuda.is_available():
        return None
    try:
        return {
            "peak_allocated_gib": round(torch.cuda.max_memory_allocated() / 2**30, 2),
            "reserved_gib": round(torch.cuda.memory_reserved() / 2**30, 2),
        }
    except RuntimeError as error:  # a lost CUDA context fails every call: the section's record still lands
        return {"error": repr(error)[:300]}


def lost_cuda_context() -> str | None:
    """None where the device still works, else the error a synchronize raises. An illegal
    address or a device-side assert is sticky: every CUDA call after it fails the same way,
    so nothing more can be measured in this process."""
    if not torch.cuda.is_available():
        return None
    try:
        torch.cuda.synchronize()
    except Exception as error:  # noqa: BLE001 - torch raises RuntimeError or its AcceleratorError
        return repr(error)[:500]
    return None


def environment(scale: Scale) -> dict:
    gpu = torch.cuda.get_device_name(0) if scale.device == "cuda" else None
    return {
        "torch": torch.__version__,
        "transformers": transformers.__version__,
        "python": platform.python_version(),
        "device": scale.device,
        "gpu": gpu,
        "cuda": torch.version.cuda,
        "cpu": platform.processor() or platform.machine(),
        "engine_compile": scale.compile,
        "torch_threads": torch.get_num_threads(),
    }


class Report:
    """The check's results, written whole to `out` after every section: the JSON first, then
    the markdown (a section that cannot be rendered says so there and in the JSON)."""

    def __init__(self, out: Path, tiny: bool, scale: Scale, budget: float, started: float = STARTED):
        self.out, self.started = out, started
        self.lost_cuda = None  # the error that lost the CUDA context, once one has
        self.data = {
            "tiny": tiny,
            "environment": environment(scale),
            "budget_s": budget,
            "seconds": 0.0,
            "sections": {},
        }

    def run(self, label: str, fn, state: dict, seconds: float, forced: bool, log) -> None:
        started, captures = time.perf_counter(), (CAPTURES.count, CAPTURES.seconds)
        entry = {"status": "running", "budget_s": round(seconds, 1), "result": {}}
        try:
            if torch.cuda.is_available():
                torch.cuda.reset_peak_memory_stats()
            if forced:
                raise RuntimeError(f"forced by --fail {label.split(': ', 1)[1]!r}")
            # fills the result as it goes: what it measured stays
            fn(state, Deadline(started + seconds), entry["result"])
            entry["status"] = "ok"
        except OutOfTime:
            entry["status"] = "stopped: out of budget"
        except Exception:  # noqa: BLE001 - the section's traceback is its result; the next section runs
            entry |= {"status": "failed", "traceback": traceback.format_exc()[-4000:]}
        entry |= {
            "seconds": round(time.perf_counter() - started, 1),
            "memory": memory(),
            "graph_captures": CAPTURES.count - captures[0],
            "capture_seconds": round(CAPTURES.seconds - captures[1], 2),
        }
        self.data["sections"][label] = entry
        self.write()  # before anything touches the device again
        # after every section, not only a failed one: a part that records its own errors (a
        # forced SDPA kernel) can end "ok" on a lost context
        self.lost_cuda = lost_cuda_context()
        if self.lost_cuda:
            entry["cuda_context"] = f"lost: {self.lost_cuda}"
            self.write()
        log(
            f"{label}: {entry['status']} in {entry['seconds']:.0f} s"
            + (" (CUDA context lost)" if self.lost_cuda else "")
        )

    def skip(self, label: str, why: str) -> None:
        self.data["sections"][label] = {"status": f"skipped: {why}"}
        self.write()

    def write(self) -> None:
        self.data["seconds"] = round(time.perf_counter() - self.started, 1)
        self.data["attention_kernels"] = attention_kernels()
        self.out.mkdir(parents=True, exist_ok=True)
        self.put("device-check.json", json.dumps(self.data, indent=1, default=repr))
        failures = {}
        text = markdown(self.data, failures)
        if failures or "render_failures" in self.data:
            self.data["render_failures"] = failures
            self.put("device-check.json", json.dumps(self.data, indent=1, default=repr))
        self.put("device-check.md", text)

    def put(self, name: str, text: str) -> None:
        """`text` as out/name, whole or not at all (written beside it, then renamed)."""
        partial = self.out / f".{name}.partial"
        partial.write_text(text)
        partial.replace(self.out / name)


def markdown(report: dict, failures: dict | None = None) -> str:
    """The report as markdown, each section rendered from the keys its result has so far; a
    section whose rendering raises says "render failed" (and is added to `failures`)."""
    env = report["environment"]
    lines = [
        f"# Device check ({'tiny shapes, CPU' if report['tiny'] else env['gpu']})",
        "",
        f"torch {env['torch']} (CUDA {env['cuda']}), transformers {env['transformers']}, Python {env['python']}, "
        f"engine.compile={env['engine_compile']}; "
        f"{report['seconds']:.0f} s of a {report['budget_s']:.0f} s budget (from the process's start). Random "
        "weights: speeds hold, a learned drafter's acceptance does not "
        "(the oracle drafter drafts the target's own tokens).",
        "",
        "| section | status | s | peak GiB | graph captures (s) |",
        "|---|---|---|---|---|",
    ]
    for label, entry in report["sections"].items():
        mem = (entry.get("memory") or {}).get("peak_allocated_gib", "-")
        lines.append(
            f"| {label} | {entry['status']} | {entry.get('seconds', '-')} | {mem} | "
            f"{entry.get('graph_captures', '-')} ({entry.get('capture_seconds', '-')}) |"
        )
    if report.get("attention_kernels", {}).get("ran"):
        lines += ["", *render_kernels(report["attention_kernels"])]
    if report.get("memory_estimate_gib"):
        lines += ["", render_memory(report["memory_estimate_gib"], report.get("device_memory_gib"))]
    for label, entry in report["sections"].items():
        result = entry.get("result")
        if entry.get("cuda_context"):
            lines += ["", f"## {label}: CUDA context {entry['cuda_context']}"]
        if entry.get("traceback"):
            lines += ["", f"## {label}: failed", "", "```", entry["traceback"].strip()[-1500:], "```"]
        if not result:
            continue
        lines += ["", f"## {label}", ""]
        kind = label.split(": ", 1)[1]
        try:
            lines += RENDER.get(kind, lambda r: [f"`{json.dumps(r)[:2000]}`"])(result)
        except Exception as error:  # noqa: BLE001 - the JSON holds the result: the report still lands
            lines.append(f"render failed: {error!r}")
            if failures is not None:
                failures[label] = repr(error)
    return "\n".join(lines) + "\n"


def attention_kernels() -> dict:
    """The SDPA kernel order the engine sets on a GPU and the kernel each kind of its calls got
    (engine.attention.KERNELS_RAN), so far."""
    return {
        "order_on_gpu": [kernel.name.lower() for kernel in engine_attention.KERNELS],
        "ran": [
            {"device": d, "dtype": t, "layout": layout, "batch": b, "query_rows": rows, "kernel": kernel}
            for (d, t, layout, b, rows), kernel in engine_attention.KERNELS_RAN.items()
        ],
    }


def render_kernels(kernels: dict) -> list[str]:
    lines = [
        "Attention kernels the engine's calls got (order on a GPU: "
        f"{', '.join(kernels['order_on_gpu'])}; cuDNN never):",
        "",
        "| device | dtype | layout | B | query rows | kernel |",
        "|---|---|---|---|---|---|",
    ]
    for r in kernels["ran"]:
        lines.append(
            f"| {r.get('device')} | {r.get('dtype')} | {r.get('layout')} | {r.get('batch')} | "
            f"{r.get('query_rows')} | {r.get('kernel')} |"
        )
    return lines


def render_memory(estimates: dict, device_gib: float | None) -> str:
    on = f"; the device has {device_gib} GiB" if device_gib else ""
    return f"Estimated peak GiB per section{on}: " + "; ".join(
        f"{name}: " + ", ".join(f"{section} {gib}" for section, gib in estimate["sections"].items())
        for name, estimate in estimates.items()
    )


def render_identity(result: dict) -> list[str]:
    lines = [
        f"dtype {result.get('dtype', '-')}",
        "",
        "| check | B | prompts | tokens | identical | agreement | tau | levels | full steps | first difference |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in result.get("rows", []):
        lines.append(
            f"| {r['check']} | {r['batch']} | {r['prompts']} | {r['tokens']} | "
            f"{'yes' if r['identical'] else 'NO'} | {r['agreement']:.3f} | "
            f"{r.get('tau', '-')} | {r.get('levels', '-')} | {r.get('full_steps', '-')} | "
            f"{json.dumps(r['first_difference']) if r['first_difference'] else '-'} |"
        )
    return lines


def render_costs(result: dict) -> list[str]:
    """The curves at a few n: a curve the clock cut shows "-" past the n it timed."""
    curves = result.get("curves", {})
    labels = list(curves)
    lines = [
        f"{result.get('forward', '-')}, {result.get('dtype', '-')}; ms per forward of n new tokens per row",
        "",
        "| n | " + " | ".join(labels) + " |",
        "|---|" + "---|" * len(labels),
    ]
    for j, n in enumerate(result.get("n", [])):
        if n in (1, 2, 4, 8, 16, 24, 32, 48, 60, 64):
            cells = (f"{curves[k]['ms'][j]:.3f}" if j < len(curves[k]["ms"]) else "-" for k in labels)
            lines.append(f"| {n} | " + " | ".join(cells) + " |")
    ratio = f"f({TREE_NODES})/f(1)"
    cells = (f"{curves[k][ratio]:.2f}" if ratio in curves[k] else "-" for k in labels)
    lines.append(f"| {ratio} | " + " | ".join(cells) + " |")
    return lines


def render_attention(result: dict) -> list[str]:
    lines = ["| B | n | context | option | ran | default ms | eligible (ms) |", "|---|---|---|---|---|---|---|"]
    for r in result.get("rows", []):
        for label, o in r["options"].items():
            if "backends" in o:
                eligible = ", ".join(f"{k} {v}" for k, v in o["backends"].items() if v is not None)
                lines.append(
                    f"| {r['batch']} | {r['n']} | {r['context']} | {label} | {o['ran']} | {o['default_ms']} | "
                    f"{eligible} |"
                )
            else:
                lines.append(
                    f"| {r['batch']} | {r['n']} | {r['context']} | {label} | - | {o.get('ms', '-')} | "
                    f"{o.get('error') or o.get('skipped', '')} |"
                )
    return lines


def render_speed(result: dict) -> list[str]:
    lines = [
        f"dtype {result.get('dtype', '-')}",
        "",
        "| method | B | steps | wall ms/step | host ms/step | parts ms/step |",
        "|---|---|---|---|---|---|",
    ]
    for r in result.get("split", []):
        parts = ", ".join(f"{k} {v}" for k, v in r["parts_ms_per_step"].items())
        lines.append(
            f"| {r['method']} | {r['batch']} | {r['steps']} | {r['wall_ms_per_step']} | {r['host_ms_per_step']} "
            f"| {parts} |"
        )
    if result.get("ar_ms_per_step"):
        lines += ["", "AR at B=1, ms per step: " + ", ".join(f"{k} {v}" for k, v in result["ar_ms_per_step"].items())]
    if result.get("ar_vs_generate"):
        s = result["ar_vs_generate"]
        lines += [
            "",
            f"Our AR {s.get('ours_tok_s', '-')} tok/s against generate {s.get('generate_tok_s', '-')} tok/s "
            f"({s.get('ratio', '-')}x; {s.get('prompts', '-')} prompts x {s.get('tokens', '-')} tokens, B=1)",
        ]
    return lines


def render_syncs(result: dict) -> list[str]:
    lines = [
        "| method | B | steps | engine count per step | by kind | torch count per step |",
        "|---|---|---|---|---|---|",
    ]
    for r in result.get("rows", []):
        lines.append(
            f"| {r['method']} | {r['batch']} | {r['steps']} | {r['engine_count_per_step']} | "
            f"{json.dumps(r['by_kind'])} | {r['torch_count_per_step']} |"
        )
    return lines


RENDER = {
    "build": lambda r: [f"{r.get('parameters_b', '-')}B parameters, {r.get('forward', '-')}"],
    "identity": render_identity,
    "bf16 agreement": render_identity,
    "f(n)": render_costs,
    "attention": render_attention,
    "step split": render_speed,
    "host syncs": render_syncs,
}


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--tiny", action="store_true", help="tiny shapes on the CPU, engine.compile=static (what the tests run)"
    )
    parser.add_argument(
        "--out", default="results/device-check", help="directory for device-check.md and .json when $OUT is not set"
    )
    parser.add_argument(
        "--budget",
        type=float,
        help=f"seconds for the whole call, counted from the process's start (imports included); each section gets "
        f"its share (default {GPU_BUDGET:.0f}: one model a call on the lent machine; {TINY_BUDGET:.0f} with --tiny)",
    )
    parser.add_argument(
        "--fail",
        action="append",
        default=[],
        choices=sorted(SECTIONS),
        help="make this section raise (a crash rehearsal; repeatable)",
    )
    parser.add_argument(
        "--models", nargs="+", choices=["llama3.1-8b", "qwen3-8b"], help="only these model shapes (default: both)"
    )
    args = parser.parse_args(argv)
    scale = TINY if args.tiny else GPU
    if scale.device == "cuda" and not torch.cuda.is_available():
        print(
            f"device check: torch {torch.__version__} sees no CUDA GPU; run with --tiny for the CPU rehearsal",
            file=sys.stderr,
        )
        return 2
    budget = args.budget if args.budget is not None else TINY_BUDGET if args.tiny else GPU_BUDGET
    out = Path(os.environ.get("OUT") or args.out)
    report = Report(out, args.tiny, scale, budget)
    deadline = report.started + budget

    def log(message: str) -> None:
        print(f"[{time.perf_counter() - report.started:5.0f} s] {message}", flush=True)

    torch.manual_seed(0)
    transformers.logging.set_verbosity_error()  # generate's notices would crowd the output the lent machine sends back
    models = {name: c for name, c in target_configs(args.tiny).items() if not args.models or name in args.models}
    device_gib = round(torch.cuda.get_device_properties(0).total_memory / 2**30, 2) if scale.device == "cuda" else None
    estimates = {name: memory_estimate(model_config, scale) for name, model_config in models.items()}
    report.data |= {"memory_estimate_gib": estimates, "device_memory_gib": device_gib}
    log(render_memory(estimates, device_gib))
    report.write()
    with tempfile.TemporaryDirectory(prefix="device-check-") as workdir:
        for index, (name, model_config) in enumerate(models.items()):
            model_deadline = time.perf_counter() + (deadline - time.perf_counter()) / (len(models) - index)
            state = {"name": name, "config": model_config, "scale": scale, "workdir": Path(workdir)}
            sections = list(SECTIONS)
            for position, section in enumerate(sections):
                label = f"{name}: {section}"
                share = SHARES[section] / sum(SHARES[s] for s in sections[position:])
                seconds = share * (model_deadline - time.perf_counter())
                needs = estimates[name]["sections"][section]
                if report.lost_cuda:
                    report.skip(label, "the CUDA context was lost in an earlier section")
                elif "model" not in state and section != "build":
                    report.skip(label, "the model was not built")
                elif deadline - time.perf_counter() <= 1 or seconds <= 1:
                    report.skip(label, "the check's budget is spent")
                elif device_gib and needs > device_gib:
                    report.skip(label, f"needs about {needs} GiB, the device has {device_gib}")
                else:
                    if device_gib and needs > 0.9 * device_gib:
                        log(f"{label}: needs about {needs} GiB of the device's {device_gib}: it may run out")
                    report.run(label, SECTIONS[section], state, seconds, section in args.fail, log)
            if "engine" in state and not report.lost_cuda:
                state["engine"].lm.release()
                pool.release_all()  # the next model is built beside nothing of this one
            state.clear()
            gc.collect()
            if not report.lost_cuda:
                empty_cache()
    failed = [label for label, entry in report.data["sections"].items() if entry["status"] != "ok"]
    log(
        f"wrote {out / 'device-check.md'} and .json; {len(report.data['sections']) - len(failed)} of "
        f"{len(report.data['sections'])} sections ok" + (f"; not ok: {', '.join(failed)}" if failed else "")
    )
    if report.lost_cuda:
        log(f"the CUDA context was lost: {report.lost_cuda}")
        return 3
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
