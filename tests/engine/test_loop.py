"""The decoding loop: a tree that drafts nothing decodes as AR without the drafter, bookkeeping stays outside the clock,
and verification forwards are timed."""

import time

import pytest
from conftest import VOCAB

from specbench.drafters.small_lm import SmallLMDrafter
from specbench.engine import loop, methods
from specbench.engine.candidates import DRAFTING_OFF
from specbench.engine.lm import TreeLM
from specbench.engine.loop import Limits, Method, generate
from specbench.engine.sampling import Sampling
from specbench.errors import ConfigError
from specbench.trees.autoregressive import Autoregressive
from specbench.trees.chain import Chain
from specbench.verify.standard import StandardVerifier


def test_drafting_off_decodes_as_ar_without_running_the_drafter(target, draft, prompts):
    method_cfg = {
        "drafter": {"_target_": "specbench.drafters.prompt_lookup.load"},
        "tree": {"_target_": "specbench.trees.chain.Chain", "gamma": "auto"},
        "verifier": {"_target_": "specbench.verify.standard.StandardVerifier"},
    }
    with pytest.raises(
        ConfigError, match="^method.tree: gamma = auto is chosen by a run from measured costs; set a value here$"
    ):
        methods.assemble(method_cfg, target, {})
    method = methods.assemble({**method_cfg, "tree": DRAFTING_OFF}, target, {})
    assert method.drafter is None
    ar = generate(TreeLM(target), Method(Autoregressive(), StandardVerifier()), prompts[2], Sampling(), Limits(20))
    off = generate(TreeLM(target), method, prompts[2], Sampling(), Limits(20))
    assert off.ids == ar.ids and off.draft_forwards == 0 and set(off.accept_lengths) == {1}


def test_bookkeeping_is_outside_the_clock(target, draft, prompts, monkeypatch):
    lm = TreeLM(target)
    method = Method(Chain(3), StandardVerifier(), SmallLMDrafter(draft, VOCAB))
    limits = Limits(max_new_tokens=24)
    real_nll = loop._nll_rows

    def slow_nll(*args):
        time.sleep(0.05)
        return real_nll(*args)

    monkeypatch.setattr(loop, "_nll_rows", slow_nll)
    start = time.perf_counter()
    out = generate(lm, method, prompts[1], Sampling(), limits, on_step=lambda n, rows: time.sleep(0.05))
    wall = time.perf_counter() - start
    slept = 0.05 * (1 + 2 * out.target_forwards)
    assert wall >= slept and out.seconds < wall - 0.9 * slept


def test_the_loop_times_its_verification_forwards(target, draft, prompts):
    method = Method(Chain(2), StandardVerifier(), SmallLMDrafter(draft, VOCAB))
    out = generate(TreeLM(target), method, prompts[0], Sampling(), Limits(max_new_tokens=8))
    assert 0 < out.verify_seconds < out.batch_seconds - out.prefill_seconds
