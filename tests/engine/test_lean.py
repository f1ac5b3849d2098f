"""The lean forward computes what the model's own forward does (fp32) for every dense model
family: logits and features over context, trees and after commits, and identical ids when
decoding."""

import copy
import json
import subprocess
import sys

import pytest
import torch
from conftest import ROOT, VOCAB, tiny_llama
from transformers import AutoModelForCausalLM

from specbench.costs import compile as compile_rule
from specbench.drafters.small_lm import SmallLMDrafter
from specbench.engine import kernels, methods
from specbench.engine.kernels import Compiled, PackedLinear, pack_linears
from specbench.engine.lean import INITIAL_ROWS, LeanTreeLM, RopeTable, forward_note, make_lm, supports, unsupported
from specbench.engine.lm import TreeLM
from specbench.engine.loop import Limits, Method, generate, generate_batch
from specbench.engine.sampling import Sampling
from specbench.engine.tree import DraftTree
from specbench.errors import ConfigError
from specbench.models import families
from specbench.models.families import FAMILIES, random_model
from specbench.trees.autoregressive import Autoregressive
from specbench.trees.chain import Chain
from specbench.trees.eagle import EagleDynamicTree
from specbench.verify.standard import StandardVerifier


def random_ids(n: int, seed: int) -> list[int]:
    return torch.randint(3, VOCAB, (n,), generator=torch.Generator().manual_seed(seed)).tolist()


def binary_tree(root: int, size: int) -> DraftTree:
    tree = DraftTree.root(root)
    for i in range(1, size):
        tree.add((i - 1) // 2, 3 + i)
    return tree


def chain(root: int, tokens: list[int]) -> DraftTree:
    tree = DraftTree.root(root)
    for token in tokens:
        tree.add(len(tree) - 1, token)
    return tree


def same_outputs(ours, theirs):
    """check(run): `run` on both LMs gives the same logits per row (None where a row fed
    nothing) and the same features."""

    def check(run):
        ours_out, theirs_out = run(ours), run(theirs)
        assert [z is None for z in ours_out] == [z is None for z in theirs_out]
        torch.testing.assert_close(ours_out, theirs_out, rtol=1e-5, atol=1e-5)
        torch.testing.assert_close(ours.features, theirs.features, rtol=1e-5, atol=1e-5)

    return check


PACKED = [Compiled(), Compiled(packed_from=1), Compiled(packed_from=4)]
DENSE_FAMILIES = [family for family in FAMILIES if family != "qwen3-moe"]


@pytest.fixture(scope="module", params=DENSE_FAMILIES)
def family_target(request):
    """A tiny random model of each dense family (Llama-3.1's rope scaling, Vicuna's full
    attention heads, Qwen2's q/k/v biases, Qwen3's head norms, tied embeddings)."""
    return random_model(request.param)


@pytest.mark.parametrize("compiled", PACKED, ids=str)
def test_logits_and_features_match_the_model_forward(family_target, compiled):
    target = family_target
    assert supports(target)
    ours, theirs = LeanTreeLM(target, compiled), TreeLM(target)
    assert isinstance(ours.lm_head, PackedLinear) == (compiled.packed_from is not None)  # the output layer too
    ours.feature_layers = theirs.feature_layers = (0, 1, 2)
    prompt = random_ids(30, 0)
    tree = binary_tree(5, 12)
    follow_up = DraftTree.root(7)
    follow_up.add(follow_up.add(0, 9), 10)

    def check(run):
        torch.testing.assert_close(run(ours), run(theirs), rtol=1e-5, atol=1e-5)
        torch.testing.assert_close(ours.features, theirs.features, rtol=1e-5, atol=1e-5)

    with torch.inference_mode():
        check(lambda lm: lm.forward(contexts=[prompt]))
        check(lambda lm: lm.forward(trees=[tree], nodes=[range(len(tree))]))
        for lm in (ours, theirs):
            lm.commit([[0, 2, 5]])  # a path that is not a prefix of the cached rows: rows move
        check(lambda lm: lm.forward(trees=[follow_up], nodes=[range(3)]))
        for lm in (ours, theirs):
            lm.commit([[0]])
        check(lambda lm: lm.forward(trees=[DraftTree.root(4)], nodes=[[0]]))


def three_uneven_rows(ours, theirs, first_prompt: int):
    """Drive `ours` and `theirs` through one scenario, checking every forward's logits and
    features equal: three rows of different prompt lengths (row 0's `first_prompt` tokens),
    trees of different widths, accepted paths of different lengths (rows move and leave
    masked holes), rows feeding nothing or part of a tree, new context, then a row leaving.
    Returns `check` for further steps."""
    ours.feature_layers = theirs.feature_layers = (0, 1, 2)
    for lm in (ours, theirs):
        lm.reset(3)
    prompts = [random_ids(first_prompt, 0), random_ids(7, 1), random_ids(19, 2)]
    trees = [binary_tree(5, 12), chain(6, [20, 21, 22, 23]), binary_tree(8, 5)]
    follow_ups = [chain(7, [9, 10]), binary_tree(11, 7), DraftTree.root(4)]
    check = same_outputs(ours, theirs)

    with torch.inference_mode():
        check(lambda lm: lm.forward(contexts=prompts))
        check(lambda lm: lm.forward(trees=trees, nodes=[range(len(t)) for t in trees]))
        for lm in (ours, theirs):
            lm.commit([[0, 2, 5], [0, 1, 2, 3, 4], [0]])
        assert ours.layout.lengths == theirs.layout.lengths
        # row 2 feeds nothing, row 1 only part of its tree
        check(lambda lm: lm.forward(trees=follow_ups, nodes=[range(3), [0, 1, 3], []]))
        check(lambda lm: lm.forward(trees=follow_ups, nodes=[[], [2, 5, 6], [0]]))
        for lm in (ours, theirs):
            lm.commit([[0, 1], [0, 2, 6], [0]])
        assert ours.layout.lengths == theirs.layout.lengths
        check(lambda lm: lm.forward(contexts=[[12], [13, 14, 15], []]))
        for lm in (ours, theirs):
            lm.keep([0, 1])
        check(lambda lm: lm.forward(trees=[trees[2], trees[0]], nodes=[range(5), range(12)]))
    return check


def test_batched_logits_and_features_match_the_model_forward(family_target):
    ours, theirs = LeanTreeLM(family_target), TreeLM(family_target)
    check = three_uneven_rows(ours, theirs, first_prompt=30)
    with torch.inference_mode():
        for lm in (ours, theirs):
            lm.commit([[0, 1, 3], [0, 2]])
            lm.keep([1])
        check(lambda lm: lm.forward(contexts=[[16, 17]]))


LIMITS = Limits(max_new_tokens=40, stop_token_ids=frozenset({2}))


@pytest.fixture(scope="module")
def reference_ids(target, prompts):
    """AR with the model's own forward, one prompt at a time."""
    ar = Method(Autoregressive(), StandardVerifier())
    return [generate(TreeLM(target), ar, prompt, Sampling(), LIMITS).ids for prompt in prompts[:8]]


@pytest.mark.parametrize("compiled", PACKED, ids=str)
@pytest.mark.parametrize("batch", [1, 3])
@pytest.mark.parametrize("tree", ["chain", "dynamic"])
def test_decoding_gives_the_same_ids(target, draft, prompts, reference_ids, tree, batch, compiled):
    """Batches of 3 (the last of 2) hold prompts of different lengths; packed weights from
    4 tokens on mix both kernels in one decode."""
    policy = Chain(4) if tree == "chain" else EagleDynamicTree(top_k=3, depth=3, total_tokens=10)
    method = Method(policy, StandardVerifier(), SmallLMDrafter(draft, VOCAB, "lean"))
    lm = LeanTreeLM(target, compiled)
    lean = []
    for start in range(0, 8, batch):
        lean += [
            out.ids for out in generate_batch(lm, method, prompts[start : min(start + batch, 8)], Sampling(), LIMITS)
        ]
    assert lean == reference_ids


@pytest.mark.parametrize("tree", ["chain", "dynamic"])
def test_a_draft_model_on_int8_weights_keeps_decoding_lossless(target, draft, prompts, reference_ids, tree):
    """The draft model's projections and output layer on int8 weights below 3 rows (its
    one-token steps; a dynamic tree's levels of 3 rows stay float), the target's never."""
    policy = Chain(4) if tree == "chain" else EagleDynamicTree(top_k=3, depth=3, total_tokens=10)
    compiled = Compiled(packed_from=4, int8_drafts_below=3)
    drafter = SmallLMDrafter(draft, VOCAB, "lean", compiled)
    assert drafter.lm.int8_layers is not None and drafter.lm.lm_head.int8 is not None
    lm = LeanTreeLM(target, compiled)
    assert lm.int8_layers is None and lm.lm_head.int8 is None
    method = Method(policy, StandardVerifier(), drafter)
    assert [generate(lm, method, p, Sampling(), LIMITS).ids for p in prompts[:4]] == reference_ids[:4]


def test_packed_linears_compute_what_the_plain_ones_do():
    """A drafter's projections on packed weights: every nn.Linear swapped (nested, with
    and without bias), the same state_dict keys, the plain kernel below `packed_from` rows
    (bit for bit) and the same values from it on; None packs nothing."""
    torch.manual_seed(0)
    plain = torch.nn.Sequential(
        torch.nn.Linear(24, 40), torch.nn.Sequential(torch.nn.Linear(40, 16, bias=False), torch.nn.SiLU())
    )
    packed = pack_linears(copy.deepcopy(plain), Compiled(packed_from=4))
    assert [type(m) for m in packed.modules() if isinstance(m, (torch.nn.Linear, PackedLinear))] == [
        PackedLinear,
        PackedLinear,
    ]
    assert packed.state_dict().keys() == plain.state_dict().keys()
    with torch.inference_mode():
        small, large = torch.randn(1, 3, 24), torch.randn(2, 5, 24)
        assert torch.equal(packed(small), plain(small))
        torch.testing.assert_close(packed(large), plain(large), rtol=1e-5, atol=1e-5)
    untouched = pack_linears(plain, Compiled())
    assert untouched is plain and type(plain[0]) is torch.nn.Linear


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_int8_drafter_linears_quantize_per_row_below_their_threshold(dtype):
    """Below `int8_drafts_below` rows a drafter's projection computes with its int8 weight
    (each row scaled so its largest magnitude is 127): exactly the dequantized weight's
    product, within a rounding step of the plain one; from the threshold on, the packed or
    plain weight as before; int8 alone (packing off) swaps the layers too."""
    torch.manual_seed(0)
    plain = torch.nn.Sequential(torch.nn.Linear(32, 48), torch.nn.Linear(48, 16, bias=False)).to(dtype)
    quantized = pack_linears(copy.deepcopy(plain), Compiled(int8_drafts_below=3))
    layer = quantized[0]
    weight, scales = layer.int8
    assert weight.dtype == torch.int8 and scales.dtype == dtype and weight.abs().amax(dim=1).eq(127).all()
    dequantized = weight.float() * scales.float()[:, None]
    assert (dequantized - plain[0].weight.float()).abs().le(scales.float()[:, None]).all()
    tol = {"rtol": 2e-2, "atol": 2e-2} if dtype == torch.bfloat16 else {"rtol": 1e-4, "atol": 1e-4}
    with torch.inference_mode():
        few, many = torch.randn(1, 2, 32, dtype=dtype), torch.randn(1, 3, 32, dtype=dtype)
        torch.testing.assert_close(layer(few).float(), few.float() @ dequantized.T + layer.bias.float(), **tol)
        assert not torch.equal(layer(few), plain[0](few))
        assert torch.equal(layer(many), plain[0](many))


@pytest.mark.parametrize("rope_type", ["default", "llama3"])
def test_rope_table_gives_the_rotary_embeddings_values(rope_type):
    """Bit for bit, in fp32 and bf16, at positions in its first table and past it (the
    table grows), for rows of different positions; llama3 scaling changes inv_freq only."""
    from transformers import LlamaConfig
    from transformers.models.llama.modeling_llama import LlamaRotaryEmbedding

    scaling = {
        "rope_type": "llama3",
        "factor": 8.0,
        "low_freq_factor": 1.0,
        "high_freq_factor": 4.0,
        "original_max_position_embeddings": 64,
    }
    config = LlamaConfig(
        hidden_size=64,
        num_attention_heads=4,
        max_position_embeddings=8192,
        rope_scaling=scaling if rope_type == "llama3" else None,
    )
    rotary = LlamaRotaryEmbedding(config)
    table = RopeTable(rotary)
    for positions in (
        torch.tensor([[0, 1, 2, 7]]),
        torch.tensor([[5, 6, 7], [300, 301, 302]]),
        torch.tensor([[INITIAL_ROWS + 10, 3 * INITIAL_ROWS]]),
    ):
        for dtype in (torch.float32, torch.bfloat16):
            x = torch.zeros(positions.shape[0], positions.shape[1], 64, dtype=dtype)
            for ours, theirs in zip(table(x, positions), rotary(x, positions)):
                assert ours.dtype == theirs.dtype and torch.equal(ours, theirs)


def test_drafters_follow_the_targets_compile_choice(target, draft, tmp_path):
    """The code loading a drafter passes its target's choice; an SpS draft LM runs the same
    way, and without a choice passed (tests, scripts) runs plain."""
    chosen = Compiled(packed_from=4, float_attention=True)
    draft.save_pretrained(tmp_path)
    method_cfg = {
        "drafter": {"_target_": "specbench.drafters.small_lm.load", "model": {"name": "draft", "path": str(tmp_path)}}
    }
    hardware = {"dtype": "float32", "device": "cpu", "forward": "lean"}
    assert methods.load_drafter(method_cfg, target, hardware, LeanTreeLM(target, chosen).compiled).lm.compiled == chosen
    assert methods.load_drafter(method_cfg, target, hardware).lm.compiled == Compiled()


def test_a_row_stopping_before_any_draft_leaves(target, draft):
    """SpS with a lean draft LM: row 0's first token is a stop token, so it leaves the
    batch before the draft has read anything; row 1 still decodes as it does alone."""
    prompts = [[5, 9, 14, 3, 22], [7, 8, 40, 41, 6, 12]]
    with torch.inference_mode():
        first = [int(TreeLM(target).forward(contexts=[p])[0][-1].argmax()) for p in prompts]
    assert first[0] != first[1]
    limits = Limits(max_new_tokens=10, stop_token_ids=frozenset({first[0]}))
    method = Method(Chain(3), StandardVerifier(), SmallLMDrafter(draft, VOCAB, "lean"))
    ar = Method(Autoregressive(), StandardVerifier())
    outputs = generate_batch(LeanTreeLM(target), method, prompts, Sampling(), limits)
    assert [o.ids for o in outputs] == [generate(TreeLM(target), ar, p, Sampling(), limits).ids for p in prompts]
    assert outputs[0].ids == [first[0]] and outputs[0].target_forwards == 0


@pytest.mark.parametrize("batch", [1, 2])
def test_lean_cache_grows_past_its_first_allocation(target, batch):
    lm, reference = LeanTreeLM(target), TreeLM(target)
    prompts = [random_ids(1000, 1), random_ids(1010, 2)][:batch]
    more = [list(range(3, 40)), list(range(5, 30))][:batch]
    with torch.inference_mode():
        for model in (lm, reference):
            model.reset(batch)
            model.forward(contexts=prompts)
        torch.testing.assert_close(lm.forward(contexts=more), reference.forward(contexts=more), rtol=1e-5, atol=1e-5)


def test_forward_choice():
    """Every dense family runs lean; mixture-of-experts and variants the lean forward does not
    compute run on the model's own forward, and the note a run reports says which and why."""
    for family in DENSE_FAMILIES:
        model = random_model(family)
        assert isinstance(make_lm(model), LeanTreeLM) and forward_note(model) == "lean", family
    llama = tiny_llama(3)
    assert type(make_lm(llama, "hf")) is TreeLM and forward_note(llama, "hf") == "hf (hardware.forward=hf)"
    moe = random_model("qwen3-moe")
    assert type(make_lm(moe)) is TreeLM
    assert forward_note(moe) == "hf (Qwen3MoeForCausalLM: mixture-of-experts runs on the model's own forward)"
    windowed = families.config("qwen2")  # a variant the lean forward does not compute
    windowed.use_sliding_window, windowed.sliding_window, windowed.layer_types = (
        True,
        16,
        ["sliding_attention", "full_attention"],
    )
    windowed = AutoModelForCausalLM.from_config(windowed)
    assert "sliding-window" in unsupported(windowed) and type(make_lm(windowed)) is TreeLM
    with pytest.raises(ConfigError, match="hardware.forward: lean: Qwen2ForCausalLM: sliding-window"):
        make_lm(windowed, "lean")
    with pytest.raises(ConfigError, match="hardware.forward"):
        make_lm(llama, "fast")


@pytest.mark.parametrize("tree", ["chain", "dynamic"])
def test_torch_compiled_layers_give_the_same_ids(target, draft, prompts, reference_ids, tree):
    """engine.compile=torch: chain and tree forwards of several sizes through one compiled layer."""
    policy = Chain(4) if tree == "chain" else EagleDynamicTree(top_k=3, depth=3, total_tokens=10)
    method = Method(policy, StandardVerifier(), SmallLMDrafter(draft, VOCAB, "lean"))
    lm = LeanTreeLM(target, Compiled(torch=True))
    assert [generate(lm, method, p, Sampling(), LIMITS).ids for p in prompts[:3]] == reference_ids[:3]


def test_auto_packs_from_where_packing_wins_with_no_loss_at_a_larger_size():
    plain = {"1": 30.0, "2": 31.0, "4": 33.0, "8": 36.0, "16": 40.0, "64": 60.0}
    faster_from_4 = {"1": 32.0, "2": 32.0, "4": 30.0, "8": 35.0, "16": 35.0, "64": 50.0}
    assert compile_rule.packed_from({"plain": plain, "packed": faster_from_4}) == 4
    assert compile_rule.packed_from({"plain": plain, "packed": {k: v - 1 for k, v in plain.items()}}) == 1
    assert compile_rule.packed_from({"plain": plain, "packed": {**faster_from_4, "64": 61.0}}) is None
    assert compile_rule.packed_from({"plain": plain, "packed": {**faster_from_4, "8": 36.0}}) == 16  # ties are not wins
    # within the noise at 64: packing from 4 costs nothing measurable there
    within_noise = {"64": ["packed=plain"]}
    assert compile_rule.packed_from({"plain": plain, "packed": faster_from_4, "ties": within_noise}) == 4
    assert compile_rule.packed_from({"plain": plain, "packed": faster_from_4, "ties": {"2": ["packed=plain"]}}) == 4
    everywhere = {n: ["packed=plain"] for n in plain}  # never measurably faster: the weights stay as they are
    assert compile_rule.packed_from({"plain": plain, "packed": faster_from_4, "ties": everywhere}) is None
    wins_to_16 = {"16": ["packed=plain"], "64": ["packed=plain"]}
    assert compile_rule.packed_from({"plain": plain, "packed": faster_from_4, "ties": wins_to_16}) == 4


def test_fp16_weights_need_only_tie_where_the_probe_cannot_tell_them_apart():
    plain = {"1": 60.0, "2": 100.0, "4": 110.0, "8": 120.0, "16": 140.0}
    fp16 = {"1": 30.0, "2": 35.0, "4": 40.0, "8": 60.0, "16": 145.0}
    assert not compile_rule.fp16_wins({"plain": plain, "fp16": fp16})
    assert compile_rule.fp16_wins({"plain": plain, "fp16": fp16, "ties": {"16": ["fp16=plain"]}})
    assert not compile_rule.fp16_wins({"plain": plain, "fp16": fp16, "ties": {"16": ["packed=plain"]}})


def test_drafters_use_int8_weights_below_where_int8_stops_winning():
    float_us = {"1": 400.0, "2": 450.0, "4": 440.0, "8": 490.0, "16": 530.0, "32": 600.0}
    assert (
        compile_rule.int8_below(
            {"float": float_us, "int8": {**float_us, "1": 200.0, "2": 240.0, "4": 230.0, "8": 320.0}}
        )
        == 16
    )
    # fp32 here: never
    assert compile_rule.int8_below({"float": float_us, "int8": {k: v + 1 for k, v in float_us.items()}}) == 0
    assert compile_rule.int8_below({"float": float_us, "int8": {k: v / 2 for k, v in float_us.items()}}) == 64
    # a tie is no win
    assert compile_rule.int8_below({"float": float_us, "int8": {**float_us, "1": 100.0, "2": 450.0}}) == 2
    halved = {k: v / 2 for k, v in float_us.items()}
    assert compile_rule.int8_below({"float": float_us, "int8": halved, "ties": {"4": ["int8=packed"]}}) == 4


def test_compile_choice_and_bad_values(tmp_path):
    llama = tiny_llama(3)
    cpu = {"device": "cpu", "forward": "auto"}
    assert compile_rule.resolve("off", llama, "tiny", cpu, tmp_path)[0] == Compiled()
    assert compile_rule.resolve("packed", llama, "tiny", cpu, tmp_path)[0] == Compiled(packed_from=1)
    chosen, record = compile_rule.resolve("auto", llama, "tiny", cpu, tmp_path, log=lambda *_: None)
    assert chosen == Compiled(
        packed_from=compile_rule.packed_from(record["probe"]), int8_drafts_below=compile_rule.int8_below(record["int8"])
    )
    assert set(record["int8"]["int8"]) == set(record["int8"]["float"]) == {str(n) for n in compile_rule.INT8_ROWS}
    assert compile_rule.resolve("auto", llama, "tiny", cpu, tmp_path, int8_mode="off")[0].int8_drafts_below == 0
    assert list(tmp_path.glob("compile-tiny-float32-*.json"))  # measured once, then cached
    assert compile_rule.resolve("auto", llama, "tiny", cpu, tmp_path, log=pytest.fail)[0] == chosen
    cached = next(tmp_path.glob("compile-tiny-float32-*.json"))
    cached.write_text(json.dumps({**json.loads(cached.read_text()), "version": compile_rule.PROBE_VERSION - 1}))
    timed = []
    compile_rule.resolve("auto", llama, "tiny", cpu, tmp_path, log=timed.append)
    assert timed  # a probe of an older forward (before packed output layers) is timed again
    with pytest.raises(ConfigError, match="engine.int8_drafts: unknown 'always'; choose one of auto, off"):
        compile_rule.resolve("auto", llama, "tiny", cpu, tmp_path, int8_mode="always")
    with pytest.raises(ConfigError, match="engine.compile: unknown 'fast'"):
        compile_rule.resolve("fast", llama, "tiny", cpu, tmp_path)
    with pytest.raises(ConfigError, match="engine.compile: packed needs the lean forward"):
        compile_rule.resolve("packed", llama, "tiny", {**cpu, "forward": "hf"}, tmp_path)
    with pytest.raises(ConfigError, match="oneDNN's CPU layout"):
        compile_rule.resolve("packed", llama, "tiny", {**cpu, "device": "cuda"}, tmp_path)


def test_fp32_attention_changes_only_one_token_forwards_in_bf16(target):
    """Compiled(float_attention=True): a one-token-per-row forward of a bf16 model attends in
    fp32 (closer to the fp32 model than bf16 attention is), wider forwards are untouched, and
    in fp32 it computes exactly what the plain lean forward does."""
    bf16 = copy.deepcopy(target).to(torch.bfloat16)
    lms = {
        name: LeanTreeLM(bf16, Compiled(float_attention=name == "fp32 attention"))
        for name in ("bf16 attention", "fp32 attention")
    }
    exact = LeanTreeLM(target)
    prompts = [random_ids(300, 0), random_ids(280, 1)]
    tree = binary_tree(5, 6)
    out = {}
    with torch.inference_mode():
        for name, lm in {**lms, "fp32": exact}.items():
            lm.reset(2)
            lm.forward(contexts=prompts)
            one = lm.forward(trees=[DraftTree.root(7), DraftTree.root(8)], nodes=[[0], [0]])
            lm.commit([[0], [0]])
            wide = lm.forward(trees=[tree, tree], nodes=[range(6)] * 2)
            out[name] = (torch.cat(one).float(), torch.cat(wide).float())
    assert torch.equal(out["bf16 attention"][1], out["fp32 attention"][1])
    error = {name: (out[name][0] - out["fp32"][0]).abs().max() for name in lms}
    assert error["fp32 attention"] < 0.05 and not torch.equal(out["bf16 attention"][0], out["fp32 attention"][0])
    fp32_lm = LeanTreeLM(target, Compiled(float_attention=True))
    with torch.inference_mode():
        for lm in (fp32_lm, exact):
            lm.reset(1)
            lm.forward(contexts=[prompts[0]])
        torch.testing.assert_close(
            fp32_lm.forward(trees=[DraftTree.root(7)], nodes=[[0]]),
            exact.forward(trees=[DraftTree.root(7)], nodes=[[0]]),
            rtol=0,
            atol=0,
        )


def test_auto_attends_in_fp32_only_where_it_wins_at_every_batch_size(tmp_path):
    assert compile_rule.float_attention_wins({"model dtype": {"1": 30.0, "8": 70.0}, "float32": {"1": 29.0, "8": 48.0}})
    assert not compile_rule.float_attention_wins(
        {"model dtype": {"1": 30.0, "8": 70.0}, "float32": {"1": 31.0, "8": 48.0}}
    )
    tied = {"model dtype": {"1": 30.0}, "float32": {"1": 29.0}, "ties": {"1": ["float32=model dtype"]}}
    assert not compile_rule.float_attention_wins(tied)  # within the noise: attention stays in the model's dtype
    llama = tiny_llama(3).to(torch.bfloat16)
    alone = compile_rule.resolve(
        "auto", llama, "tiny", {"device": "cpu", "forward": "auto"}, tmp_path, log=lambda *_: None
    )[1]
    assert set(alone["attention"]["float32"]) == {"1"}  # a run at batch size 1 times batch size 1 alone
    chosen, record = compile_rule.resolve(
        "auto", llama, "tiny", {"device": "cpu", "forward": "auto"}, tmp_path, log=lambda *_: None, batch=8
    )
    assert set(record["attention"]) == {"model dtype", "float32", "ties"}
    assert set(record["attention"]["float32"]) == {"1", "8"}
    assert chosen.float_attention == compile_rule.float_attention_wins(record["attention"])
    fp32_record = compile_rule.resolve(
        "auto", tiny_llama(3), "tiny", {"device": "cpu", "forward": "auto"}, tmp_path, log=lambda *_: None
    )[1]
    assert "attention" not in fp32_record  # nothing to gain in fp32


def test_a_dtype_this_cpu_cannot_pack_is_never_packed(tmp_path, monkeypatch):
    """On a CPU whose oneDNN refuses to pack bf16 (AVX2 only), auto times the plain forward
    alone and `packed` is one clear error, not a crash inside oneDNN."""
    monkeypatch.setattr(compile_rule, "packs", lambda dtype: dtype == torch.float32)
    llama = tiny_llama(3).to(torch.bfloat16)
    cpu = {"device": "cpu", "forward": "auto"}
    chosen, record = compile_rule.resolve("auto", llama, "tiny", cpu, tmp_path, log=lambda *_: None)
    assert set(record["probe"]) == {"plain", "ties"} and chosen.packed_from is None
    with pytest.raises(ConfigError, match="engine.compile: oneDNN cannot pack bfloat16"):
        compile_rule.resolve("packed", llama, "tiny", cpu, tmp_path)
    assert compile_rule.resolve("packed", tiny_llama(3), "tiny", cpu, tmp_path)[0] == Compiled(packed_from=1)


def fp16_rounded(model: torch.nn.Module) -> torch.nn.Module:
    """A copy whose linear layers (the output layer too, untied) hold their weights
    rounded to fp16 and back: what Compiled(fp16_weights=True) computes with."""
    rounded = copy.deepcopy(model)
    for module in rounded.modules():
        if isinstance(module, torch.nn.Linear):
            module.weight = torch.nn.Parameter(module.weight.detach().half().float().clone())
    return rounded


def test_fp16_weights_compute_the_model_forward_on_fp16_rounded_weights(family_target):
    """Projections and output layer on FBGEMM's fp16 weights with fp32 activations: the
    model's own forward over fp16-rounded linear weights (embeddings, norms and biases
    untouched), over context, a tree and after a commit; the rounding changes the logits."""
    target = family_target
    ours, theirs, exact = LeanTreeLM(target, Compiled(fp16_weights=True)), TreeLM(fp16_rounded(target)), TreeLM(target)
    assert ours.kind == "LeanTreeLM-fp16-weights" and ours.lm_head.fp16 is not None
    prompt, tree = random_ids(30, 1), binary_tree(5, 12)
    with torch.inference_mode():
        for run in (
            lambda lm: lm.forward(contexts=[prompt]),
            lambda lm: lm.forward(trees=[tree], nodes=[range(len(tree))]),
        ):
            got, want, unrounded = run(ours), run(theirs), run(exact)
            torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-4)
            assert not torch.equal(got[0], unrounded[0])
        for lm in (ours, theirs):
            lm.commit([[0, 2, 5]])
        torch.testing.assert_close(
            ours.forward(contexts=[[7, 8]]), theirs.forward(contexts=[[7, 8]]), rtol=1e-4, atol=1e-4
        )


def int8_rounded(model: torch.nn.Module) -> torch.nn.Module:
    """A copy whose linear layers hold their int8 weights dequantized (quantize_int8):
    what a draft forward on int8 weights computes with."""
    rounded = copy.deepcopy(model)
    for module in rounded.modules():
        if isinstance(module, torch.nn.Linear):
            weight, scales = kernels.quantize_int8(module.weight)
            module.weight = torch.nn.Parameter(weight.float() * scales[:, None])
    return rounded


def test_a_drafts_int8_weights_compute_the_model_forward_on_them(family_target):
    """A draft model's one-token forwards (below int8_drafts_below rows) on int8 weights,
    biases and head norms as they are: the model's own forward over its dequantized weights."""
    ours, theirs = (
        LeanTreeLM(family_target, Compiled(int8_drafts_below=2), draft=True),
        TreeLM(int8_rounded(family_target)),
    )
    with torch.inference_mode():
        for token in random_ids(12, 3):
            torch.testing.assert_close(
                ours.forward(contexts=[[token]]), theirs.forward(contexts=[[token]]), rtol=1e-4, atol=1e-4
            )


@pytest.mark.parametrize("batch", [1, 3])
@pytest.mark.parametrize("tree", ["chain", "dynamic"])
def test_fp16_weights_decode_the_ids_ar_gives_on_them(target, draft, prompts, tree, batch):
    """Target and draft model on fp16 weights (as a run with them decodes): AR's ids on the
    same forward, one prompt at a time, for every row of a batch."""
    compiled = Compiled(fp16_weights=True)
    lm = LeanTreeLM(target, compiled)
    ar = [generate(lm, Method(Autoregressive(), StandardVerifier()), p, Sampling(), LIMITS).ids for p in prompts[:6]]
    policy = Chain(4) if tree == "chain" else EagleDynamicTree(top_k=3, depth=3, total_tokens=10)
    drafter = SmallLMDrafter(draft, VOCAB, "lean", compiled)
    assert drafter.lm.compiled.fp16_weights and drafter.lm.int8_layers is None
    method = Method(policy, StandardVerifier(), drafter)
    drafted = []
    for start in range(0, 6, batch):
        drafted += [out.ids for out in generate_batch(lm, method, prompts[start : start + batch], Sampling(), LIMITS)]
    assert drafted == ar


def test_drafter_linears_on_fp16_weights():
    """pack_linears with fp16 weights: every input size on the fp16-rounded weight, bias kept."""
    torch.manual_seed(0)
    plain = torch.nn.Sequential(torch.nn.Linear(24, 40), torch.nn.Linear(40, 16, bias=False))
    half = pack_linears(copy.deepcopy(plain), Compiled(fp16_weights=True, packed_from=1))
    with torch.inference_mode():
        for x in (torch.randn(1, 1, 24), torch.randn(2, 5, 24)):
            torch.testing.assert_close(half(x), fp16_rounded(plain)(x), rtol=1e-5, atol=1e-5)


def test_fp16_weights_only_where_auto_dtype_leaves_numbers_to_the_tool_and_they_win(tmp_path):
    """fp16 weights round the model, so engine.fp16_weights=auto applies only under
    hardware.dtype=auto, and there only where its forward is at most the plain or packed
    one at every probed size; on forces it; bad values and impossible cases get one line."""
    assert compile_rule.fp16_mode({}, "auto") == "auto"
    assert compile_rule.fp16_mode({}, "float32") == compile_rule.fp16_mode({"fp16_weights": "off"}, "auto") == "off"
    assert compile_rule.fp16_mode({"fp16_weights": "on"}, "float32") == "on"
    with pytest.raises(ConfigError, match="engine.fp16_weights: unknown 'yes'; choose one of auto, on, off"):
        compile_rule.fp16_mode({"fp16_weights": "yes"}, "auto")
    plain = {"1": 60.0, "2": 115.0, "4": 93.0, "8": 124.0, "16": 125.0, "64": 304.0}
    packed = {"1": 55.0, "2": 105.0, "4": 73.0, "8": 107.0, "16": 120.0, "64": 268.0}
    fp16 = {"1": 35.0, "2": 41.0, "4": 51.0, "8": 65.0, "16": 104.0, "64": 304.0}
    assert compile_rule.fp16_wins({"plain": plain, "packed": packed, "fp16": fp16})  # slower at 64 (prefill) only
    assert compile_rule.fp16_wins({"plain": plain, "fp16": {**fp16, "4": 93.0}})  # a tie with plain counts
    assert not compile_rule.fp16_wins({"plain": plain, "packed": packed, "fp16": {**fp16, "16": 121.0}})
    assert not compile_rule.fp16_wins({"plain": plain, "packed": packed})

    llama, cpu = tiny_llama(3), {"device": "cpu", "forward": "auto"}
    chosen, record = compile_rule.resolve("auto", llama, "tiny", cpu, tmp_path, log=lambda *_: None, fp16="auto")
    assert set(record["probe"]) == {"plain", "packed", "fp16", "ties"}
    assert chosen.fp16_weights == compile_rule.fp16_wins(record["probe"])
    assert not compile_rule.resolve("auto", llama, "tiny", cpu, tmp_path, fp16="off")[0].fp16_weights
    assert compile_rule.resolve("off", llama, "tiny", cpu, tmp_path, fp16="on")[0] == Compiled(fp16_weights=True)
    with pytest.raises(ConfigError, match="engine.fp16_weights: on needs the lean forward of a float32 model"):
        compile_rule.resolve("auto", llama.to(torch.bfloat16), "tiny", cpu, tmp_path, fp16="on")


@pytest.fixture
def fbgemm_fp16_removed(monkeypatch):
    """This torch as a future one without FBGEMM's fp16-weight ops (torch says it will remove them)."""
    monkeypatch.delattr(torch, "fbgemm_pack_gemm_matrix_fp16")
    monkeypatch.delattr(torch, "fbgemm_linear_fp16_weight_fp32_activation")
    kernels.has_fp16_weights.cache_clear()
    yield
    kernels.has_fp16_weights.cache_clear()


def test_without_fbgemm_fp16_ops_fp16_weights_are_not_offered(fbgemm_fp16_removed, tmp_path, monkeypatch):
    """auto keeps the fp32 weights, even where a probe cached before the ops went says fp16
    won; on is refused in one line."""
    assert not kernels.has_fp16_weights()
    fp16_won = {
        "plain": {str(n): 10.0 for n in compile_rule.PROBE_SIZES},
        "fp16": {str(n): 5.0 for n in compile_rule.PROBE_SIZES},
    }
    monkeypatch.setattr(compile_rule, "measure", lambda *args, **kwargs: fp16_won)
    monkeypatch.setattr(
        compile_rule,
        "measure_int8",
        lambda *args: {
            "float": {str(n): 1.0 for n in compile_rule.INT8_ROWS},
            "int8": {str(n): 2.0 for n in compile_rule.INT8_ROWS},
        },
    )
    llama, cpu = tiny_llama(3), {"device": "cpu", "forward": "auto"}
    chosen, record = compile_rule.resolve("auto", llama, "tiny", cpu, tmp_path, log=lambda *_: None, fp16="auto")
    assert compile_rule.fp16_wins(record["probe"]) and chosen == Compiled()
    with pytest.raises(
        ConfigError, match="engine.fp16_weights: on needs the lean forward of a float32 model on a CPU whose torch has"
    ):
        compile_rule.resolve("off", llama, "tiny", cpu, tmp_path, fp16="on")


def test_fp16_weights_run_without_torchs_deprecation_warning():
    """The fp16-weight ops' deprecation warning is silenced (see docs/fp16-weights.md), and
    only it: the warning filters are as they were, so other warnings still print. Its own
    process: torch warns once per process."""
    code = (
        "import warnings, torch\n"
        "from specbench.engine.kernels import fp16_linear, pack_fp16\n"
        "filters = list(warnings.filters)\n"
        "fp16_linear(torch.randn(2, 16), pack_fp16(torch.randn(8, 16)))\n"
        "assert warnings.filters == filters\n"
        "warnings.warn('another warning')\n"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT)
    assert result.returncode == 0, result.stderr
    assert "deprecated" not in result.stderr and "another warning" in result.stderr
