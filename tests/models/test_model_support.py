"""Which models the tool runs and how it says so: an unsupported family is refused from its
config.json before any weights load, the run names the forward that ran and why, and every
measured cache is keyed by the target's weights, not by its config name."""

import json
import shutil
import sys

import pytest
import torch
from conftest import ROOT, own_cache, run_in_process
from omegaconf import OmegaConf
from transformers import BertConfig, GPT2Config, GPT2LMHeadModel

from specbench import costs
from specbench.costs import cache
from specbench.costs import compile as compile_rule
from specbench.costs import dtype as dtype_rule
from specbench.errors import ConfigError
from specbench.models import registry
from specbench.models.families import random_model
from specbench.run import plan, summary

VICUNA = OmegaConf.to_container(OmegaConf.load(ROOT / "conf" / "model" / "vicuna-7b.yaml"))


def saved(model: torch.nn.Module, directory) -> str:
    model.save_pretrained(directory)
    return str(directory)


def test_an_unsupported_family_is_one_line_before_any_weights_load(tmp_path, monkeypatch):
    """A GPT-2 checkpoint given as model.path: exit 2, one line naming its model_type and
    architecture and the families that run; the weights are never read."""
    torch.manual_seed(0)
    gpt2 = saved(
        GPT2LMHeadModel(
            GPT2Config(n_layer=1, n_embd=16, n_head=2, vocab_size=64, n_positions=64, bos_token_id=0, eos_token_id=0)
        ),
        tmp_path / "gpt2",
    )

    def weights_read(*args, **kwargs):
        raise AssertionError("weights loaded")

    monkeypatch.setattr(registry.AutoModelForCausalLM, "from_pretrained", weights_read)
    result = run_in_process(
        [
            sys.executable,
            "-m",
            "specbench",
            f"output_root={tmp_path / 'out'}",
            "method=ar",
            f"model.path={gpt2}",
            "hardware=cpu-fp32",
            "dataset.limit=1",
        ]
    )
    assert result.returncode == 2, result.stderr[-2000:]
    [line] = result.stderr.strip().splitlines()
    assert (
        f"model: {gpt2} holds a 'gpt2' model (GPT2LMHeadModel)" in line
        and "model_type llama, qwen2, qwen3, qwen3_moe" in line
    )
    encoder = tmp_path / "bert"
    BertConfig(num_hidden_layers=1, hidden_size=16, num_attention_heads=2, intermediate_size=32).save_pretrained(
        encoder
    )
    with pytest.raises(
        ConfigError, match=r"model.sps_draft: .* holds a 'bert' model \(no architectures listed\); specbench runs"
    ):
        registry.load_model({"name": "bert", "path": str(encoder)}, "float32", "cpu", key="model.sps_draft")


def test_the_run_says_which_forward_ran_and_why(tmp_path, capsys):
    """Dense families run lean; Qwen3-MoE runs on its own forward, and the console line and
    the decisions the summary reports say so with the reason."""
    for family, note in (
        ("qwen3", "lean"),
        ("qwen3-moe", "hf (Qwen3MoeForCausalLM: mixture-of-experts runs on the model's own forward)"),
    ):
        model = random_model(family)
        cfg = {
            "model": {"name": family, "path": saved(model, tmp_path / family)},
            "method": {"drafter": None, "tree": {}},
            "hardware": {"device": "cpu", "forward": "auto"},
            "engine": {"compile": "off"},
        }
        target = plan.forward_of(cfg, model, "float32")
        assert target.forward_note == note and f"forward: {note} [{target.lm.kind}, float32]" in capsys.readouterr().out
        run_cfg = {
            **cfg,
            "hardware": {**cfg["hardware"], "dtype": "float32", "name": "cpu-fp32"},
            "seed": 0,
            "gen": {"batch_size": 1},
        }
        env = summary.environment(
            run_cfg, {"forward": target.lm.kind, "forward_note": target.forward_note, "fingerprint": {}}
        )
        assert (env["forward"], env["forward_note"]) == (target.lm.kind, note)


def test_caches_are_keyed_by_the_weights_not_the_config_name(tmp_path, monkeypatch):
    """model=vicuna-7b with model.path=A and with model.path=B (other weights): different
    cache names, compile probes and profile keys; a copy of A elsewhere: A's. Two weight files
    that agree in their first MB (a fine-tune that kept its first tensor) differ too."""
    monkeypatch.setenv("SPECBENCH_CACHE", str(own_cache(tmp_path / "cache")))
    monkeypatch.setattr(
        compile_rule, "measure", lambda model, forward, sizes, **_: {"plain": {str(n): 1.0 for n in sizes}}
    )
    monkeypatch.setattr(
        compile_rule,
        "measure_int8",
        lambda model, packed: {k: {str(n): 1.0 for n in compile_rule.INT8_ROWS} for k in ("float", "int8")},
    )
    monkeypatch.setattr(dtype_rule, "forward_in", lambda model_cfg, dtype, *_: dtype)  # what is timed is not the point
    monkeypatch.setattr(dtype_rule, "measure", lambda lms, sizes, **_: {d: {str(n): 1.0 for n in sizes} for d in lms})
    a = saved(random_model("vicuna", seed=1), tmp_path / "a")
    b = saved(random_model("vicuna", seed=2), tmp_path / "b")
    copy_of_a = shutil.copytree(a, tmp_path / "copy")
    names = {
        where: registry.cache_name({**VICUNA, "path": str(path)})
        for where, path in (("a", a), ("b", b), ("copy", copy_of_a))
    }
    assert names["a"] != names["b"] and names["a"] == names["copy"] and names["a"].startswith("vicuna-7b-")
    for where in ("a", "b"):
        entry = {**VICUNA, "path": str(tmp_path / where)}
        cfg = {
            "model": entry,
            "hardware": {"dtype": "auto", "device": "cpu", "threads": 1, "forward": "auto"},
            "engine": {},
            "method": {"drafter": None, "tree": {}},
        }
        # fp16 weights off: the dtype is then timed on any CPU (an AVX2-only one settles it untimed otherwise)
        dtype_rule.resolve(cfg["hardware"], entry, engine={"compile": "auto", "fp16_weights": "off"})
        costs.target_lm(registry.load_model(entry, "float32", "cpu"), cfg, {**cfg["hardware"], "dtype": "float32"})
    cached = sorted(p.name for p in cache.root().glob("*.json"))
    for where in ("a", "b"):
        assert [n for n in cached if n.startswith(f"compile-{names[where]}-float32-")], cached
        assert [n for n in cached if n.startswith(f"dtype-{names[where]}-auto-compile-auto")], cached
    keys = {where: costs.profile_key(names[where], "float32", "cpu", 1, "LeanTreeLM") for where in names}
    assert costs.profile_path(keys["a"]) != costs.profile_path(keys["b"]) and costs.profile_path(
        keys["a"]
    ) == costs.profile_path(keys["copy"])

    fine_tunes = []
    for seed in (1, 2):
        directory = tmp_path / f"fine-tune-{seed}"
        directory.mkdir()
        (directory / "config.json").write_text(json.dumps({"model_type": "llama"}))
        head = torch.randint(
            0, 256, (registry.SAMPLE_BYTES,), generator=torch.Generator().manual_seed(0), dtype=torch.uint8
        )
        rest = torch.randint(
            0, 256, (3 * registry.SAMPLE_BYTES,), generator=torch.Generator().manual_seed(seed), dtype=torch.uint8
        )
        (directory / "model.safetensors").write_bytes(head.numpy().tobytes() + rest.numpy().tobytes())
        fine_tunes.append({"name": "vicuna-7b", "path": str(directory)})
    assert registry.cache_name(fine_tunes[0]) != registry.cache_name(fine_tunes[1])

    # the loaded model names its files (the same key as its entry); one built in memory, with
    # no files, is keyed by its tensors (a benchmark's or the GPU check's random weights)
    loaded = registry.load_model({**VICUNA, "path": a}, "float32", "cpu")
    assert registry.cache_name(VICUNA, model=loaded) == names["a"]
    in_memory = {seed: registry.cache_name(VICUNA, model=random_model("vicuna", seed=seed)) for seed in (1, 2)}
    assert in_memory[1] != in_memory[2] and in_memory[1] == registry.cache_name(
        VICUNA, model=random_model("vicuna", seed=1)
    )
