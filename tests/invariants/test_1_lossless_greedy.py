"""T=0: every lossless method yields exactly AR's ids (fp32, tiny random models)."""

import pytest
from conftest import VOCAB, own_vocabulary_copy
from random_tree import RandomTree

from specbench.drafters.prompt_lookup import PromptLookupDrafter
from specbench.drafters.small_lm import SmallLMDrafter
from specbench.engine.lean import LeanTreeLM
from specbench.engine.lm import TreeLM
from specbench.engine.loop import Limits, Method, generate, generate_batch
from specbench.engine.sampling import Sampling
from specbench.trees.autoregressive import Autoregressive
from specbench.trees.cast import CastTree
from specbench.trees.chain import Chain
from specbench.trees.eagle import EagleDynamicTree
from specbench.trees.lookahead import LookaheadTree
from specbench.trees.opt import OptTree
from specbench.trees.static import StaticTree
from specbench.trees.talon import TalonTree
from specbench.verify.mars import MarsVerifier
from specbench.verify.standard import StandardVerifier

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
        ids = target.generate(
            torch.tensor([prompt]), max_new_tokens=40, do_sample=False, eos_token_id=2, pad_token_id=0
        )
        assert ids[0, len(prompt) :].tolist() == ours.ids


class LinearCosts:
    """Forward costs a + b * batch * n (ms), as a profile would give (CAST prices with them);
    gentle enough that CAST still drafts at batch size 8."""

    def target_ms(self, batch, context, n):
        return 10 + 0.05 * batch * n

    def draft_ms(self, batch, context, n):
        return 1 + 0.01 * batch * n


class AlternatingCosts(LinearCosts):
    """A target whose extra verified tokens are nearly free at most contexts and dear at every
    third (mean context divisible by 3): there CAST cannot verify a draft node, drafts nothing,
    and its drafter catches up at the next step it drafts."""

    def target_ms(self, batch, context, n):
        return 10 + (8.0 if int(context) % 3 == 0 else 0.05) * (n - 1)


@pytest.mark.parametrize(
    "name,batch",
    [
        (name, batch)
        for name in (
            "sps_noisy_draft",
            "sps_same_model",
            "pld",
            "random_tree_noisy",
            "random_tree_same_model",
            "dynamic_tree_noisy",
            "talon_noisy",
            "opt_tree_noisy",
            "mars_theta_1_tree",
            "mars_theta_1_chain",
            "cast_noisy",
            "cast_skipping",
            "lookahead",
            "ar",
        )
        for batch in (1, 3)
    ]
    + [
        (name, 8)
        for name in ("sps_noisy_draft", "pld", "random_tree_noisy", "cast_noisy", "cast_skipping", "lookahead", "ar")
    ],
)
def test_identical_to_ar(name, batch, target, draft, prompts, ar_outputs):
    """Every row of a batch (prompts of different lengths, rows stopping at different
    steps) yields exactly the ids AR gives that prompt alone."""
    drafter_model = target if "same_model" in name else draft
    if name.startswith("sps"):
        method = Method(Chain(4), StandardVerifier(), SmallLMDrafter(drafter_model, VOCAB))
    elif name == "pld":
        method = Method(Chain(6), StandardVerifier(), PromptLookupDrafter(VOCAB))
    elif name.startswith("dynamic_tree"):
        method = Method(
            EagleDynamicTree(top_k=3, depth=3, total_tokens=10),
            StandardVerifier(),
            SmallLMDrafter(drafter_model, VOCAB),
        )
    elif name == "talon_noisy":
        method = Method(
            TalonTree(budget=12, mu=0.03, top_k=3), StandardVerifier(), SmallLMDrafter(drafter_model, VOCAB)
        )
    elif name == "mars_theta_1_tree":  # r <= 1 always, so theta = 1 never relaxes: strict greedy
        method = Method(
            EagleDynamicTree(top_k=3, depth=3, total_tokens=10),
            MarsVerifier(theta=1.0),
            SmallLMDrafter(drafter_model, VOCAB),
        )
    elif name == "mars_theta_1_chain":
        method = Method(Chain(4), MarsVerifier(theta=1.0), SmallLMDrafter(drafter_model, VOCAB))
    elif name == "cast_noisy":
        tree = CastTree(top_k=3, depth=4, total_tokens=12, c1=0.5, c2=0.5, c3=0.5)
        method = Method(tree, StandardVerifier(), SmallLMDrafter(drafter_model, VOCAB), costs=LinearCosts())
    elif name == "cast_skipping":
        tree = CastTree(top_k=3, depth=4, total_tokens=12, c1=0.5, c2=0.5, c3=1.5)
        method = Method(tree, StandardVerifier(), SmallLMDrafter(drafter_model, VOCAB), costs=AlternatingCosts())
    elif name == "opt_tree_noisy":
        method = Method(
            OptTree(nodes=8, threshold=0.2, max_depth=5), StandardVerifier(), SmallLMDrafter(drafter_model, VOCAB)
        )
    elif name == "lookahead":
        method = Method(LookaheadTree(window=4, ngram=3, candidates=3), StandardVerifier())
    elif name == "ar":
        method = Method(Autoregressive(), StandardVerifier())
    else:
        method = Method(RandomTree(size=14, seed=3), StandardVerifier(), SmallLMDrafter(drafter_model, VOCAB))
    lm = TreeLM(target)
    outputs = []
    for start in range(0, len(prompts), batch):
        outputs += generate_batch(lm, method, prompts[start : start + batch], GREEDY, LIMITS)
    for out, ar in zip(outputs, ar_outputs, strict=True):
        assert out.ids == ar.ids
        assert out.stop_reason == ar.stop_reason
        assert sum(out.accept_lengths) >= len(out.ids) - 1
    if name != "ar":  # the test must exercise acceptance, not only rejections
        assert sum(n - 1 for out in outputs for n in out.accept_lengths) > len(prompts)
    if name == "cast_skipping":  # steps without drafting, and drafting after them
        forwards = [n for out in outputs for n in out.step_draft_forwards]
        assert 0 in forwards and max(forwards) > 0


@pytest.mark.parametrize("batch", [3, 8])
def test_lean_forward_batched_identical_to_ar(batch, target, draft, prompts, ar_outputs):
    """The lean forward's batched cache (holes where rows accept fewer tokens) gives AR's ids."""
    lm = LeanTreeLM(target)
    method = Method(
        EagleDynamicTree(top_k=3, depth=3, total_tokens=10), StandardVerifier(), SmallLMDrafter(draft, VOCAB, "lean")
    )
    outputs = []
    for start in range(0, len(prompts), batch):
        outputs += generate_batch(lm, method, prompts[start : start + batch], GREEDY, LIMITS)
    assert [o.ids for o in outputs] == [a.ids for a in ar_outputs]


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
        ar = generate(
            TreeLM(target), Method(Autoregressive(), StandardVerifier()), prompts[1], GREEDY, Limits(max_new_tokens=n)
        )
        assert out.ids == ar.ids and len(out.ids) == n and out.stop_reason == "length"


@pytest.fixture(scope="module")
def own_vocab_draft_dir(tmp_path_factory, draft):
    """The noisy draft as an own-vocabulary draft on disk, as the SpS trainer ships one:
    80 of the 96 output rows (the stop token among them), no input embedding."""
    from safetensors.torch import save_file

    from specbench.train.sps_draft import shipped_weights

    own, vocab = own_vocabulary_copy(draft, list(range(16, 94)) + [1, 2])
    out = tmp_path_factory.mktemp("own-vocab-draft")
    own.config.save_pretrained(out)
    save_file(shipped_weights(own, vocab), out / "model.safetensors")
    return out


@pytest.mark.parametrize("forward,batch", [("hf", 1), ("hf", 3), ("lean", 3)])
def test_own_vocabulary_draft_identical_to_ar(forward, batch, target, own_vocab_draft_dir, prompts, ar_outputs):
    """A draft with its own output vocabulary (the target's input embedding, 80 output
    rows) drafts only its tokens and still yields AR's ids."""
    from specbench.drafters.small_lm import own_vocab_draft

    model, vocab = own_vocab_draft(own_vocab_draft_dir, target, "test draft")
    assert model.get_input_embeddings() is target.get_input_embeddings()
    drafter = SmallLMDrafter(model, VOCAB, forward, vocab=vocab)
    method = Method(EagleDynamicTree(top_k=3, depth=3, total_tokens=10), StandardVerifier(), drafter)
    outputs = []
    for start in range(0, len(prompts), batch):
        outputs += generate_batch(TreeLM(target), method, prompts[start : start + batch], GREEDY, LIMITS)
    assert [o.ids for o in outputs] == [a.ids for a in ar_outputs]
    assert sum(n - 1 for out in outputs for n in out.accept_lengths) > len(prompts)


@pytest.mark.parametrize("policy,temperature", [("chain", 0.0), ("chain", 1.0), ("dynamic", 0.0), ("static", 0.0)])
def test_small_lm_trees_grown_on_the_device_equal_the_host_loops(policy, temperature, target, draft, prompts):
    """A small draft LM fed each level as device tensors (one read for the tree, one to find
    the accepted nodes) grows the host loop's trees, the same draws from the same
    generators, and keeps the same accepted nodes in its cache (nothing re-read), at every
    step of a batched decode of prompts of different lengths."""
    import torch

    tree = {
        "chain": Chain(4),
        "dynamic": EagleDynamicTree(top_k=3, depth=3, total_tokens=10),
        "static": StaticTree(choices=[[0], [1], [2], [0, 0], [0, 1], [1, 0], [0, 0, 0], [1, 0, 0]]),
    }[policy]
    on_device, on_host = SmallLMDrafter(draft, VOCAB), SmallLMDrafter(draft, VOCAB)
    on_host.grows_on_device = False
    sampling = Sampling(temperature=temperature)
    lm = TreeLM(target)
    texts = [list(prompts[b]) for b in (0, 3, 5)]
    lm.reset(len(texts))
    seeds = [[torch.Generator().manual_seed(b) for b in range(len(texts))] for _ in range(2)]
    with torch.inference_mode():
        roots = [int(z[-1].argmax()) for z in lm.forward(contexts=texts)]
        for drafter in (on_device, on_host):
            drafter.begin(texts, None)
        for _ in range(6):
            trees = tree.grow(on_device, texts, roots, sampling, seeds[0])
            expected = tree.grow(on_host, texts, roots, sampling, seeds[1])
            for grown, want in zip(trees, expected, strict=True):
                assert (grown.tokens, grown.parents, grown.logps, grown.origin) == (
                    want.tokens,
                    want.parents,
                    want.logps,
                    want.origin,
                )
                assert grown.child_dists.keys() == want.child_dists.keys()
            logits = lm.forward(trees=trees, nodes=[range(len(t)) for t in trees])
            accepted = StandardVerifier().accept_rows(trees, logits, GREEDY, [None] * len(trees))
            paths = [a.path for a in accepted]
            lm.commit(paths)
            for drafter in (on_device, on_host):
                drafter.commit(trees, paths)
            assert on_device.lm.layout.lengths == on_host.lm.layout.lengths
            assert torch.equal(on_device.lm.layout.valid, on_host.lm.layout.valid)
            texts = [text + [t.tokens[n] for n in path] for text, t, path in zip(texts, trees, paths)]
            roots = [a.next_token for a in accepted]
    assert on_device.forwards == on_host.forwards
