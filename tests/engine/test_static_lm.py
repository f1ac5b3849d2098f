"""The static-shape forward (engine.compile=static; CUDA graphs on a GPU, engine/graphs.py) computes what the
lean forward computes: it runs here on a CPU, eagerly, through the same static buffers."""

import pytest
import torch
from conftest import VOCAB
from test_lean import three_uneven_rows

from specbench.costs import compile as compile_rule
from specbench.drafters.small_lm import SmallLMDrafter
from specbench.engine.graphs import BUCKETS, Replay, bucket
from specbench.engine.kernels import Compiled
from specbench.engine.lean import SPAN_STEP, LeanTreeLM, StaticTreeLM, make_lm
from specbench.engine.lm import TreeLM
from specbench.engine.loop import Limits, Method, generate, generate_batch
from specbench.engine.sampling import Sampling
from specbench.trees.autoregressive import Autoregressive
from specbench.trees.eagle import EagleDynamicTree
from specbench.verify.standard import StandardVerifier

STATIC = Compiled(static=True)
LIMITS = Limits(max_new_tokens=40, stop_token_ids=frozenset({2}))


def test_widths_pad_to_the_next_bucket():
    assert [bucket(n) for n in (1, 2, 3, 5, 9, 17, 33, 64)] == [1, 2, 4, 8, 16, 32, 64, 64]
    assert bucket(max(BUCKETS) + 1) is None  # prefill: the lean forward's own path


def test_static_mode_builds_the_static_forward(target, tmp_path):
    compiled, record = compile_rule.resolve("static", target, "tiny", {"device": "cpu"}, tmp_path)
    assert compiled == STATIC and record is None
    lm = make_lm(target, "auto", compiled)
    assert isinstance(lm, StaticTreeLM) and lm.kind == "LeanTreeLM-static"
    assert type(make_lm(target, "hf", compiled)) is TreeLM


def test_padded_forwards_give_the_unpadded_logits_and_features(target):
    """test_lean's three uneven rows, padded to width buckets (tree widths 3, 5, 7 and 12)
    and with a prefill wider than every bucket."""
    ours = make_lm(target, "lean", STATIC)
    three_uneven_rows(ours, LeanTreeLM(target), first_prompt=80)
    assert {key[0][2] for key in ours._replays} == {16}  # the widest forward since the last keep ran padded
    # the live context's span, not the whole cache
    assert {key[0][3] for key in ours._replays} == {SPAN_STEP} and ours._k.shape[3] > SPAN_STEP


@pytest.fixture(scope="module")
def reference_ids(target, prompts):
    """AR with the model's own forward, one prompt at a time."""
    ar = Method(Autoregressive(), StandardVerifier())
    return [generate(TreeLM(target), ar, prompt, Sampling(), LIMITS).ids for prompt in prompts[:6]]


@pytest.mark.parametrize("batch", [1, 3])
@pytest.mark.parametrize("tree", ["ar", "dynamic"])
def test_decoding_gives_the_same_ids(target, draft, prompts, reference_ids, tree, batch):
    """AR and a dynamic tree (a draft model that runs static too) at T=0 on the static
    forward give the model's own AR ids."""
    if tree == "ar":
        method = Method(Autoregressive(), StandardVerifier())
    else:
        method = Method(
            EagleDynamicTree(top_k=3, depth=3, total_tokens=10),
            StandardVerifier(),
            SmallLMDrafter(draft, VOCAB, "lean", STATIC),
        )
        assert isinstance(method.drafter.lm, StaticTreeLM)
    lm = make_lm(target, "lean", STATIC)
    ids = []
    for start in range(0, 6, batch):
        ids += [out.ids for out in generate_batch(lm, method, prompts[start : start + batch], Sampling(), LIMITS)]
    assert ids == reference_ids


def test_a_replay_reads_each_calls_inputs_from_its_own_buffers():
    """Off a GPU a Replay calls its function on its static buffers (what a graph replays):
    new inputs are copied in, the caller's tensors are never the ones read."""
    seen = []

    def double(x):
        seen.append(x)
        return 2 * x

    first = torch.tensor([1.0, 2.0])
    replay = Replay(double, (first,))
    assert replay(first).tolist() == [2.0, 4.0]
    assert replay(torch.tensor([5.0, 7.0])).tolist() == [10.0, 14.0]
    assert seen[0] is seen[1] is replay.inputs[0] and seen[0] is not first


def test_a_model_spread_over_devices_runs_its_own_forward(tmp_path):
    """A device map across GPUs (hardware=multi-gpu) leaves the lean forward, which keeps one
    cache on one device; engine.compile=auto then compiles nothing."""
    from conftest import tiny_llama

    model = tiny_llama(0)
    model.model.layers[1].to("meta")  # stands for a second GPU
    assert type(make_lm(model, "auto", STATIC)) is TreeLM
    assert compile_rule.resolve("auto", model, "tiny", {"device": "auto"}, tmp_path)[0] == Compiled()


def test_an_lm_built_for_one_dtype_is_released_not_reused_after_the_model_changes():
    """costs.pool.lm keys the target's LM by its weights' dtype: after model.to(bf16) a new
    LM is built, and the fp32 one's cache (and graphs, on a GPU) are freed."""
    from conftest import tiny_llama

    from specbench.costs import pool

    model = tiny_llama(seed=7)
    fp32 = pool.lm(model, "auto", STATIC)
    generate(fp32, Method(Autoregressive(), StandardVerifier()), [5, 6, 7, 8], Sampling(), Limits(max_new_tokens=4))
    assert fp32._k is not None and pool.lm(model, "auto", STATIC) is fp32
    model.to(torch.bfloat16)
    bf16 = pool.lm(model, "auto", STATIC)
    assert bf16 is not fp32 and fp32._k is None and fp32._replays == {}
    assert bf16.embed.dtype == torch.bfloat16


@pytest.mark.parametrize("family", ["vicuna", "llama3.1", "qwen3"])
def test_every_head_grouping_decodes_as_the_model_does(family):
    """Vicuna has as many KV heads as query heads, Llama-3.1 and Qwen3 group them: on the static
    forward a prefill wider than every bucket, then AR and a dynamic tree (a draft model on the
    static forward too) at B = 1 and 2, give the model's own AR ids."""
    from conftest import noisy_copy

    from specbench.models.families import random_model

    model = random_model(family)
    vocab = model.config.vocab_size
    g = torch.Generator().manual_seed(5)
    prompts = [torch.randint(3, vocab, (n,), generator=g).tolist() for n in (max(BUCKETS) + 9, 12, 30)]
    limits = Limits(max_new_tokens=24)
    ar = Method(Autoregressive(), StandardVerifier())
    expected = [generate(TreeLM(model), ar, p, Sampling(), limits).ids for p in prompts]
    tree = Method(
        EagleDynamicTree(top_k=3, depth=3, total_tokens=10),
        StandardVerifier(),
        SmallLMDrafter(noisy_copy(model, 0.3, seed=2), vocab, "lean", STATIC),
    )
    lm = make_lm(model, "lean", STATIC)
    for method in (ar, tree):
        for batch in (1, 2):
            ids = []
            for start in range(0, len(prompts), batch):
                ids += [g.ids for g in generate_batch(lm, method, prompts[start : start + batch], Sampling(), limits)]
            assert ids == expected, (method.tree, batch)


@pytest.mark.parametrize("family", ["vicuna", "llama3.1"])
def test_the_static_forward_is_capture_safe(family, monkeypatch):
    """What a CUDA graph captures holds no host read and no branch on a tensor's value: dynamo
    traces the static forward as one graph (fullgraph), under the GPU's attention kernel order."""
    from specbench.engine import attention
    from specbench.models.families import random_model

    monkeypatch.setattr(attention, "kernels", lambda device: attention.sdpa_kernel(list(attention.KERNELS), True))
    lm = make_lm(random_model(family), "lean", STATIC)
    generate(lm, Method(Autoregressive(), StandardVerifier()), list(range(3, 40)), Sampling(), Limits(max_new_tokens=3))
    inputs = next(iter(lm._replays.values())).inputs
    torch._dynamo.reset()
    traced = torch.compile(lm._static_forward, fullgraph=True, backend="eager")
    with torch.inference_mode():
        torch.testing.assert_close(traced(*inputs)[0], lm._static_forward(*inputs)[0])


def test_a_released_pool_holds_no_model():
    """A caller that builds its next model itself (the device check, model after model) lets the
    pool go first: the previous model's weights are freed, not held by an LM until the next
    LM is built."""
    import gc
    import weakref

    from conftest import tiny_llama

    from specbench.costs import pool

    model = tiny_llama(seed=8)
    lm = pool.lm(model, "auto", STATIC)
    generate(lm, Method(Autoregressive(), StandardVerifier()), [5, 6, 7], Sampling(), Limits(max_new_tokens=2))
    alive = weakref.ref(model)
    pool.release_all()
    assert lm._k is None
    del model, lm
    gc.collect()
    assert alive() is None


def test_cast_keeps_rope_frequencies_in_fp32():
    """As from_pretrained loads a bf16 model: weights in bf16, inv_freq exact (model.to rounds it)."""
    from specbench.engine.lean import cast
    from specbench.models.families import random_model

    exact = random_model("llama3.1").model.rotary_emb.inv_freq.clone()
    model = cast(random_model("llama3.1"), torch.bfloat16)
    assert model.model.embed_tokens.weight.dtype == torch.bfloat16
    assert torch.equal(model.model.rotary_emb.inv_freq, exact)
    rounded = random_model("llama3.1").to(torch.bfloat16).model.rotary_emb.inv_freq
    assert not torch.equal(rounded.float(), exact)
