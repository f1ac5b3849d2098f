"""The lean Llama forward computes what the model's own forward does (fp32): logits and
features over context, trees and after commits, and identical ids when decoding."""

import pytest
import torch

from specbench.drafters.small_lm import SmallLMDrafter
from specbench.engine.lean import LeanTreeLM, make_lm, supports
from specbench.engine.lm import TreeLM
from specbench.engine.loop import Limits, Method, generate
from specbench.engine.sampling import Sampling
from specbench.engine.tree import DraftTree
from specbench.errors import ConfigError
from specbench.trees.autoregressive import Autoregressive
from specbench.trees.chain import Chain
from specbench.trees.eagle import EagleDynamicTree
from specbench.verify.standard import StandardVerifier

from conftest import VOCAB, tiny_llama


def test_logits_and_features_match_the_model_forward(target):
    ours, theirs = LeanTreeLM(target), TreeLM(target)
    ours.feature_layers = theirs.feature_layers = (0, 1, 2)
    prompt = torch.randint(3, VOCAB, (30,), generator=torch.Generator().manual_seed(0)).tolist()
    tree = DraftTree.root(5)
    for i in range(1, 12):
        tree.add((i - 1) // 2, 3 + i)
    follow_up = DraftTree.root(7)
    follow_up.add(follow_up.add(0, 9), 10)
    def check(run):
        torch.testing.assert_close(run(ours), run(theirs), rtol=1e-5, atol=1e-5)
        torch.testing.assert_close(ours.features, theirs.features, rtol=1e-5, atol=1e-5)

    with torch.inference_mode():
        check(lambda lm: lm.forward(context=prompt))
        check(lambda lm: lm.forward(tree=tree, nodes=range(len(tree))))
        for lm in (ours, theirs):
            lm.commit([0, 2, 5])  # a path that is not a prefix of the cached rows: rows move
        check(lambda lm: lm.forward(tree=follow_up, nodes=range(3)))
        for lm in (ours, theirs):
            lm.commit([0])
        check(lambda lm: lm.forward(tree=DraftTree.root(4), nodes=[0]))


@pytest.mark.parametrize("tree", ["chain", "dynamic"])
def test_decoding_gives_the_same_ids(target, draft, prompts, tree):
    policy = Chain(4) if tree == "chain" else EagleDynamicTree(top_k=3, depth=4, total_tokens=10)
    limits = Limits(max_new_tokens=40, stop_token_ids=frozenset({2}))
    for prompt in prompts[:8]:
        reference = generate(TreeLM(target), Method(Autoregressive(), StandardVerifier()), prompt, Sampling(), limits).ids
        lean = generate(LeanTreeLM(target), Method(policy, StandardVerifier(), SmallLMDrafter(draft, VOCAB, "lean")), prompt, Sampling(), limits)
        assert lean.ids == reference


def test_lean_cache_grows_past_its_first_allocation(target):
    lm, reference = LeanTreeLM(target), TreeLM(target)
    prompt = torch.randint(3, VOCAB, (1000,), generator=torch.Generator().manual_seed(1)).tolist()
    with torch.inference_mode():
        lm.forward(context=prompt)
        reference.forward(context=prompt)
        torch.testing.assert_close(lm.forward(context=list(range(3, 40))), reference.forward(context=list(range(3, 40))), rtol=1e-5, atol=1e-5)


def test_forward_choice():
    llama = tiny_llama(3)
    assert isinstance(make_lm(llama), LeanTreeLM) and type(make_lm(llama, "hf")) is TreeLM
    llama.config.attention_bias = True  # a variant the lean forward does not compute
    assert not supports(llama) and type(make_lm(llama)) is TreeLM
    with pytest.raises(ConfigError, match="hardware.forward"):
        make_lm(llama, "lean")
    with pytest.raises(ConfigError, match="hardware.forward"):
        make_lm(llama, "fast")
