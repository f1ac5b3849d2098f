"""T=0: every lossless method yields exactly AR's ids (fp32, tiny random models)."""

import pytest

from specbench.drafters.prompt_lookup import PromptLookupDrafter
from specbench.drafters.small_lm import SmallLMDrafter
from specbench.engine.lm import TreeLM
from specbench.engine.loop import Limits, Method, generate
from specbench.engine.sampling import Sampling
from specbench.trees.autoregressive import Autoregressive
from specbench.trees.chain import Chain
from specbench.trees.eagle import EagleDynamicTree
from specbench.trees.talon import TalonTree
from specbench.verify.mars import MarsVerifier
from specbench.verify.standard import StandardVerifier

from conftest import VOCAB
from random_tree import RandomTree

GREEDY = Sampling()
LIMITS = Limits(max_new_tokens=40, stop_token_ids=frozenset({2}))


@pytest.fixture(scope="module")
def ar_outputs(target, prompts):
    lm = TreeLM(target)
    method = Method(Autoregressive(), StandardVerifier())
    return [generate(lm, method, p, GREEDY, LIMITS) for p in prompts]


def test_ar_matches_transformers_generate(target, prompts, ar_outputs):
    import torch

    for prompt, ours in zip(prompts[:5], ar_outputs):
        ids = target.generate(torch.tensor([prompt]), max_new_tokens=40, do_sample=False, eos_token_id=2, pad_token_id=0)
        assert ids[0, len(prompt):].tolist() == ours.ids


@pytest.mark.parametrize(
    "name",
    ["sps_noisy_draft", "sps_same_model", "pld", "random_tree_noisy", "random_tree_same_model", "dynamic_tree_noisy",
     "talon_noisy", "mars_theta_1_tree", "mars_theta_1_chain"],
)
def test_identical_to_ar(name, target, draft, prompts, ar_outputs):
    drafter_model = target if "same_model" in name else draft
    if name.startswith("sps"):
        method = Method(Chain(4), StandardVerifier(), SmallLMDrafter(drafter_model, VOCAB))
    elif name == "pld":
        method = Method(Chain(6), StandardVerifier(), PromptLookupDrafter(VOCAB))
    elif name.startswith("dynamic_tree"):
        method = Method(EagleDynamicTree(top_k=3, depth=4, total_tokens=10), StandardVerifier(), SmallLMDrafter(drafter_model, VOCAB))
    elif name == "talon_noisy":
        method = Method(TalonTree(budget=12, mu=0.03, top_k=3), StandardVerifier(), SmallLMDrafter(drafter_model, VOCAB))
    elif name == "mars_theta_1_tree":  # r <= 1 always, so theta = 1 never relaxes: strict greedy
        method = Method(EagleDynamicTree(top_k=3, depth=4, total_tokens=10), MarsVerifier(theta=1.0), SmallLMDrafter(drafter_model, VOCAB))
    elif name == "mars_theta_1_chain":
        method = Method(Chain(4), MarsVerifier(theta=1.0), SmallLMDrafter(drafter_model, VOCAB))
    else:
        method = Method(RandomTree(size=14, seed=3), StandardVerifier(), SmallLMDrafter(drafter_model, VOCAB))
    lm = TreeLM(target)
    accepted_drafts = 0
    for prompt, ar in zip(prompts, ar_outputs):
        out = generate(lm, method, prompt, GREEDY, LIMITS)
        assert out.ids == ar.ids
        assert out.stop_reason == ar.stop_reason
        assert sum(out.accept_lengths) >= len(out.ids) - 1
        accepted_drafts += sum(n - 1 for n in out.accept_lengths)
    # the test must exercise acceptance, not only rejections
    assert accepted_drafts > len(prompts)


def test_same_model_draft_accepts_whole_chains(target, prompts, ar_outputs):
    method = Method(Chain(4), StandardVerifier(), SmallLMDrafter(target, VOCAB))
    for _ in range(2):  # counts are per generation even when the drafter is reused
        out = generate(TreeLM(target), method, prompts[0], GREEDY, Limits(max_new_tokens=41))
        assert out.accept_lengths == [5] * 8
        assert out.target_forwards == 8 and out.draft_forwards == 8 * 4


def test_max_new_tokens_cuts_the_last_step(target, prompts):
    method = Method(Chain(4), StandardVerifier(), SmallLMDrafter(target, VOCAB))
    for n in (1, 2, 7):
        out = generate(TreeLM(target), method, prompts[1], GREEDY, Limits(max_new_tokens=n))
        ar = generate(TreeLM(target), Method(Autoregressive(), StandardVerifier()), prompts[1], GREEDY, Limits(max_new_tokens=n))
        assert out.ids == ar.ids and len(out.ids) == n and out.stop_reason == "length"
