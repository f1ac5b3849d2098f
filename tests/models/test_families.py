"""Every model family conf/model names, lossless (issue 54, sections 1 and 1b): a tiny random
model of each exact Hugging Face class (2 layers, GQA where the real one has it, a small
BPE vocabulary trained here), saved with its tokenizer as a user's local model directory.
Heads for it are trained by the trainers with `--target model=<config> model.path=DIR`
(the target answers its own training prompts first); then at T=0 in fp32 AR equals
transformers' generate and every method equals AR at batch sizes 1 and 3, one T>0 check
per family keeps the target's distribution, and the command line runs each family."""

import copy
import json
import os
import sys
from pathlib import Path

import pytest
import torch
from conftest import noisy_copy, own_cache, run_in_process
from scipy.stats import chisquare
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
from transformers import (
    AutoModelForCausalLM,
    LlamaConfig,
    PreTrainedTokenizerFast,
    Qwen2Config,
    Qwen3Config,
    Qwen3MoeConfig,
)

from specbench.engine.lm import TreeLM
from specbench.engine.loop import Limits, Method, generate_batch
from specbench.engine.methods import assemble
from specbench.engine.sampling import Sampling
from specbench.run.config import compose_config
from specbench.trees.autoregressive import Autoregressive
from specbench.verify.standard import StandardVerifier

VOCAB = 320
SIZES = dict(
    vocab_size=VOCAB,
    hidden_size=32,
    intermediate_size=64,
    num_hidden_layers=2,
    max_position_embeddings=1024,
    bos_token_id=1,
    eos_token_id=2,
    pad_token_id=0,
)
# scaled from position 64 on, so the tests' contexts reach it
LLAMA3_ROPE = {
    "rope_type": "llama3",
    "rope_theta": 500000.0,
    "factor": 8.0,
    "low_freq_factor": 1.0,
    "high_freq_factor": 4.0,
    "original_max_position_embeddings": 64,
}
# conf/model name -> the tiny config of its family's exact class
FAMILIES = {
    "llama3.1-8b": LlamaConfig(**SIZES, num_attention_heads=4, num_key_value_heads=2, rope_parameters=LLAMA3_ROPE),
    "vicuna-7b": LlamaConfig(**SIZES, num_attention_heads=4, num_key_value_heads=4),  # Llama-2: no GQA, no rope scaling
    "qwen2-7b": Qwen2Config(**SIZES, num_attention_heads=4, num_key_value_heads=2),  # q/k/v biases
    "qwen3-8b": Qwen3Config(**SIZES, num_attention_heads=4, num_key_value_heads=2, head_dim=16),  # q/k norms
    "qwen3-235b": Qwen3MoeConfig(
        **SIZES,
        num_attention_heads=4,
        num_key_value_heads=2,
        head_dim=16,
        num_experts=4,
        num_experts_per_tok=2,
        moe_intermediate_size=32,
    ),
    # DeepSeek-R1-Distill-Llama
    "dsl-8b": LlamaConfig(**SIZES, num_attention_heads=4, num_key_value_heads=2, rope_parameters=LLAMA3_ROPE),
}
CHAT_TEMPLATE = (
    "{% for m in messages %}<|{{ m['role'] }}|>{{ m['content'] }}</s>{% endfor %}"
    "{% if add_generation_prompt %}<|assistant|>{% endif %}"
)
TEXT = (
    "A user asks a question and the assistant answers it. Write a short story about a robot that learns to paint. "
    "What is the capital of France? Explain how a computer stores numbers in memory, step by step. "
    "def add(a, b): return a + b. The quick brown fox jumps over the lazy dog, again and again."
)
GREEDY = Sampling()
LIMITS = Limits(max_new_tokens=32, stop_token_ids=frozenset({2}))
HARDWARE = {"dtype": "float32", "device": "cpu", "forward": "hf"}
TREES = {  # the methods' auto shapes, fixed
    "pld": ["method.tree.gamma=4"],
    "sps": ["method.tree.gamma=3"],
    "lookahead": ["method.tree.window=4", "method.tree.ngram=3", "method.tree.candidates=3"],
    "eagle": ["method.tree.size=null"],
    "medusa": ["method.tree.size=null"],
    "hydra": ["method.tree.size=null"],
    "eagle3": ["method.tree.top_k=3", "method.tree.depth=3", "method.tree.total_tokens=10"],
}
TRAINING = [
    "--steps",
    "40",
    "--batch",
    "4",
    "--length",
    "64",
    "--lr",
    "3e-3",
    "--sharegpt-answers",
    "0",
    "--draft-vocab",
    "128",
    "--validation-rows",
    "4",
    "--checkpoint-every",
    "1000",
    "--threads",
    "1",
]


def tiny_tokenizer() -> PreTrainedTokenizerFast:
    """A byte-level BPE of VOCAB tokens learnt from TEXT (every byte is a token, so any prompt
    encodes), with the chat template the corpus and the runs format prompts with."""
    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=VOCAB, special_tokens=["<pad>", "<s>", "</s>"], initial_alphabet=pre_tokenizers.ByteLevel.alphabet()
    )
    tokenizer.train_from_iterator([TEXT], trainer)
    assert tokenizer.get_vocab_size() == VOCAB
    return PreTrainedTokenizerFast(
        tokenizer_object=tokenizer, bos_token="<s>", eos_token="</s>", pad_token="<pad>", chat_template=CHAT_TEMPLATE
    )


def tiny_model(config, seed: int):
    torch.manual_seed(seed)
    model = AutoModelForCausalLM.from_config(copy.deepcopy(config)).eval()
    with torch.no_grad():  # a sharper output layer: greedy continuations are not near-ties
        model.get_output_embeddings().weight.mul_(8)
    return model


def save_model(model, directory: Path) -> Path:
    model.save_pretrained(directory)
    tiny_tokenizer().save_pretrained(directory)
    return directory


def prompts_of_different_lengths(tokenizer) -> list[list[int]]:
    """Chat prompts of 3 lengths (what runs and the corpus ask the target)."""
    from specbench.data.chat import chat_prompt

    questions = [
        "Why?",
        "Write a short story about a robot that learns to paint.",
        "Explain how a computer stores numbers in memory, step by step, "
        "and what the quick brown fox has to do with it.",
    ]
    return [chat_prompt(tokenizer, [{"role": "user", "content": q}]) for q in questions]


class Family:
    """One family's tiny target on disk, its same-family draft and the heads the trainers
    made for it."""

    def __init__(self, name: str, root: Path, steps: int):
        self.name, self.root = name, root
        self.target = tiny_model(FAMILIES[name], seed=0)
        self.path = save_model(self.target, root / "model")
        self.draft_path = root / "draft"
        noisy_copy(self.target, 0.3, seed=1).save_pretrained(self.draft_path)
        self.tokenizer = tiny_tokenizer()
        self.prompts = prompts_of_different_lengths(self.tokenizer)
        self.heads = root / "heads"
        training = [*TRAINING[:1], str(steps), *TRAINING[2:]]
        result = run_in_process(
            [
                sys.executable,
                "-m",
                "specbench.train.joint",
                "--train",
                "eagle3",
                "eagle",
                "medusa",
                "hydra",
                "--target",
                *self.target_args,
                "--answers",
                "16",
                "--out",
                str(self.heads),
                *training,
            ]
        )
        assert result.returncode == 0, result.stderr[-3000:]
        lm = TreeLM(self.target)
        self.ar = generate_batch(lm, Method(Autoregressive(), StandardVerifier()), self.prompts, GREEDY, LIMITS)

    @property
    def target_args(self) -> list[str]:
        return [f"model={self.name}", f"model.path={self.path}"]

    def drafter_args(self, method: str, draft: Path | None = None) -> list[str]:
        """The overrides pointing `method` at this family's draft (or `draft`) or trained heads."""
        if method == "sps":
            return [f"method.drafter.model={{name:draft,path:{draft or self.draft_path}}}"]
        if method in ("eagle", "eagle3"):
            return [f"method.drafter.head={{name:{method},path:{self.heads / method}}}"]
        if method in ("medusa", "hydra"):
            return [f"method.drafter.heads={{name:{method},path:{self.heads / method}}}"]
        return []

    def method(self, name: str, draft: Path | None = None) -> Method:
        cfg = compose_config([*self.target_args, f"method={name}", *TREES[name], *self.drafter_args(name, draft)])
        return assemble(cfg["method"], self.target, HARDWARE)


STEPS = {"qwen3-8b": 150}  # the family whose heads must accept (issue 54 §1b); the others train a few steps
built: dict[str, Family] = {}


@pytest.fixture(scope="module")
def family(request, tmp_path_factory):
    name = request.param
    if name not in built:
        built[name] = Family(name, tmp_path_factory.mktemp(name), STEPS.get(name, 20))
    return built[name]


def lm_of(family: Family):
    from specbench.engine.lean import make_lm

    return make_lm(family.target, HARDWARE["forward"])


ALL = pytest.mark.parametrize("family", list(FAMILIES), indirect=True)


@ALL
def test_ar_equals_transformers_generate(family):
    for prompt, ours in zip(family.prompts, family.ar, strict=True):
        ids = family.target.generate(
            torch.tensor([prompt]),
            max_new_tokens=LIMITS.max_new_tokens,
            do_sample=False,
            eos_token_id=2,
            pad_token_id=0,
        )
        assert ids[0, len(prompt) :].tolist() == ours.ids
    assert len({len(p) for p in family.prompts}) == 3


METHODS = ["pld", "lookahead", "sps", "eagle", "eagle3", "medusa", "hydra"]


@ALL
@pytest.mark.parametrize("method", METHODS)
def test_every_method_equals_ar(family, method):
    """At T=0 every row of a batch of 1 or 3 prompts of different lengths gets AR's ids,
    with the engine's own forward choice for the family."""
    built_method = family.method(method)
    for batch in (1, 3):
        outputs = []
        for start in range(0, len(family.prompts), batch):
            outputs += generate_batch(
                lm_of(family), built_method, family.prompts[start : start + batch], GREEDY, LIMITS
            )
        assert [o.ids for o in outputs] == [a.ids for a in family.ar], (method, batch)
        assert [o.stop_reason for o in outputs] == [a.stop_reason for a in family.ar]


def tau(outputs) -> float:
    """Tokens per target forward."""
    return sum(len(o.ids) for o in outputs) / sum(len(o.accept_lengths) for o in outputs)


@pytest.mark.parametrize("family", ["qwen3-8b"], indirect=True)
def test_heads_trained_for_a_users_qwen3_target_accept_its_tokens(family, tmp_path):
    """Issue 54 §1b: heads (and an SpS draft) trained by `--target model=qwen3-8b
    model.path=DIR` on the target's own answers load from their directories, decode
    losslessly and accept drafts (tau above 1)."""
    taus = {}
    for method in ("eagle3", "eagle", "medusa", "hydra"):
        outputs = generate_batch(lm_of(family), family.method(method), family.prompts, GREEDY, LIMITS)
        assert [o.ids for o in outputs] == [a.ids for a in family.ar]
        taus[method] = tau(outputs)
    draft = tmp_path / "sps-draft"
    result = run_in_process(
        [
            sys.executable,
            "-m",
            "specbench.train.sps_draft",
            "train",
            "--target",
            *family.target_args,
            "--answers",
            "16",
            "--out",
            str(draft),
            "--from-target",
            "0",
            *TRAINING[2:],
            "--steps",
            "60",
        ]
    )
    assert result.returncode == 0, result.stderr[-3000:]
    outputs = generate_batch(lm_of(family), family.method("sps", draft), family.prompts, GREEDY, LIMITS)
    assert [o.ids for o in outputs] == [a.ids for a in family.ar]
    taus["sps"] = tau(outputs)
    print(taus)
    assert min(taus.values()) > 1.2, taus


SAMPLED = Sampling(temperature=1.0, top_k=4)
DRAWS = 600


def two_token_counts(family: Family, method: Method, prompt: list[int]) -> dict[tuple[int, int], int]:
    """How often each first two tokens came out of DRAWS decodings of `prompt`, each row
    with its own generator, decoded in batches."""
    counts: dict[tuple[int, int], int] = {}
    for start in range(0, DRAWS, 200):
        generators = [torch.Generator().manual_seed(start + i) for i in range(200)]
        for out in generate_batch(lm_of(family), method, [prompt] * 200, SAMPLED, Limits(max_new_tokens=2), generators):
            counts[tuple(out.ids[:2])] = counts.get(tuple(out.ids[:2]), 0) + 1
    return counts


def exact_two_token_probs(target, prompt: list[int]) -> dict[tuple[int, int], float]:
    """p(x1) p(x2 | x1) under SAMPLED, from the target's own logits."""
    with torch.no_grad():
        first = SAMPLED.probs(target(torch.tensor([prompt])).logits[0, -1])
        probs = {}
        for a in first.nonzero().flatten().tolist():
            second = SAMPLED.probs(target(torch.tensor([prompt + [a]])).logits[0, -1])
            probs |= {(a, b): float(first[a] * second[b]) for b in second.nonzero().flatten().tolist()}
    return probs


@ALL
def test_sampling_keeps_the_targets_distribution(family):
    """At T=1 (top-k 4) SpS with the family's draft emits its first two tokens as the
    target's own p(x1) p(x2 | x1) says (chi-square; cells expecting under 5 draws pooled)."""
    prompt = family.prompts[1]
    counts = two_token_counts(family, family.method("sps"), prompt)
    probs = exact_two_token_probs(family.target, prompt)
    assert set(counts) <= set(probs), "emitted a pair the target gives probability 0"
    big = [pair for pair, p in probs.items() if p * DRAWS >= 5]
    observed = [counts.get(pair, 0) for pair in big] + [DRAWS - sum(counts.get(pair, 0) for pair in big)]
    expected = [probs[pair] * DRAWS for pair in big] + [DRAWS * (1 - sum(probs[pair] for pair in big))]
    assert len(big) >= 3
    assert chisquare(observed, expected).pvalue > 1e-3


CLI_METHOD = {
    "llama3.1-8b": "eagle3",
    "vicuna-7b": "medusa",
    "qwen2-7b": "hydra",
    "qwen3-8b": "sps",
    "qwen3-235b": "eagle",
    "dsl-8b": "pld",
}
# no cost profile, compile probe or calibration: what they time is the 135M model's business (tests/test_cli.py)
QUICK = [
    "dataset.limit=2",
    "dataset.max_turns=1",
    "gen.max_new_tokens=12",
    "costs.profile=false",
    "costs.calibrate_tree=false",
    "engine.compile=off",
    "hardware.dtype=float32",
]


@ALL
def test_the_command_line_runs_a_local_model_of_each_family(family, tmp_path):
    """`python -m specbench model=<config> model.path=DIR method=...` end to end, with the
    heads or draft made for that target (each family runs another method); its outputs
    are the target's greedy ones (the run checks them against paired AR)."""
    method = CLI_METHOD[family.name]
    result = run_in_process(
        [
            sys.executable,
            "-m",
            "specbench",
            f"output_root={tmp_path}",
            *family.target_args,
            f"method={method}",
            *TREES[method],
            *family.drafter_args(method),
            *QUICK,
        ],
        env={**os.environ, "SPECBENCH_CACHE": str(own_cache(tmp_path / "cache"))},
    )
    assert result.returncode == 0, result.stderr[-3000:]
    [path] = (tmp_path / method).glob("*/summary.json")
    summary = json.loads(path.read_text())
    assert summary["config"]["model"]["path"] == str(family.path) and summary["results"]["samples"] == 2
    assert summary["agreement_with_baseline"]["exact_match_rate"] == 1.0  # the paired AR run's ids


@pytest.mark.parametrize(
    "target, message",
    [
        (
            ["model=gpt-9"],
            "error: model: unknown model 'gpt-9' (neither a conf/model name nor a hub id in one); choose one of",
        ),
        (["dataset=gsm8k"], "error: --target: 'dataset=gsm8k' is not model=NAME or model.KEY=VALUE"),
        (["model=qwen3-8b", "model.path=/nowhere"], "error: --target.path: /nowhere has no config.json"),
    ],
)
def test_a_bad_target_is_one_line(target, message, tmp_path):
    result = run_in_process(
        [
            sys.executable,
            "-m",
            "specbench.train.eagle3",
            "--target",
            *target,
            "--answers",
            "4",
            "--out",
            str(tmp_path / "h"),
        ]
    )
    assert (
        result.returncode == 2
        and result.stderr.strip().splitlines() == [result.stderr.strip()]
        and result.stderr.startswith(message)
    ), result.stderr[-2000:]


@pytest.mark.parametrize("family", ["qwen2-7b"], indirect=True)
def test_a_corpus_of_another_target_is_refused(family, tmp_path):
    """The answers made for one target never train another's heads: the embedded model's
    corpus (no target.json) for the Qwen2 target, or the Qwen2 corpus for the embedded one."""
    embedded_corpus = tmp_path / "embedded"
    embedded_corpus.mkdir()
    (embedded_corpus / "answers-t0-0of1.jsonl").write_text("")
    for target, data in ((family.target_args, embedded_corpus), ([], family.root / "heads.corpus")):
        result = run_in_process(
            [
                sys.executable,
                "-m",
                "specbench.train.medusa",
                *(["--target", *target] if target else []),
                "--data",
                str(data),
                "--out",
                str(tmp_path / "h"),
            ]
        )
        assert result.returncode == 2 and result.stderr.startswith(
            f"error: --data: {data} holds the answers of target"
        ), result.stderr[-2000:]
