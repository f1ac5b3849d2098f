"""Host synchronisations per decode step (issue 54, section 3): on a GPU every read of a
tensor's values waits for the device, so a step must read a small number of times that
does not grow with the batch size or the tree's size, for every method family."""

import pytest
import torch
from cast_fixtures import FakeCosts
from eagle_fixtures import drafter_for
from entmtp_fixtures import small_bank
from hydra_fixtures import hydra_state
from hydra_fixtures import write_heads as write_hydra
from medusa_fixtures import medusa_state
from medusa_fixtures import write_heads as write_medusa

from specbench.drafters.hydra import HydraDrafter
from specbench.drafters.medusa import MedusaDrafter
from specbench.drafters.prompt_lookup import PromptLookupDrafter
from specbench.drafters.small_lm import SmallLMDrafter
from specbench.engine.lm import TreeLM
from specbench.engine.loop import Limits, Method, generate_batch
from specbench.engine.sampling import Sampling
from specbench.engine.syncs import COPY, LIST_INDEX, counting_syncs
from specbench.engine.transfer import device_tensor, to_device
from specbench.models import hydra, medusa
from specbench.trees.autoregressive import Autoregressive
from specbench.trees.cast import CastTree
from specbench.trees.chain import Chain
from specbench.trees.eagle import EagleDynamicTree
from specbench.trees.entmtp import ScheduledTree
from specbench.trees.lookahead import LookaheadTree
from specbench.trees.static import StaticTree
from specbench.trees.talon import TalonTree
from specbench.verify.mars import MarsVerifier
from specbench.verify.standard import StandardVerifier
from specbench.verify.typical import TypicalVerifier

SMALL_CHOICES = [[0], [1], [0, 0]]
LARGE_CHOICES = [[r] for r in range(6)] + [[0, r] for r in range(4)] + [[1, 0], [1, 1], [2, 0]]
DEEP_CHOICES = SMALL_CHOICES + [[1, 0], [0, 0, 0], [0, 0, 1], [1, 0, 0]]  # 3 deep, what 3 Medusa/Hydra heads draft


def method_for(family: str, size: str, target, draft, directory) -> Method:
    """`family` on the tiny target with a small tree, a wider one of the same depth, or a deeper one."""
    large, deep = size == "large", size == "deep"
    choices = LARGE_CHOICES if large else DEEP_CHOICES if deep else SMALL_CHOICES
    dynamic = EagleDynamicTree(top_k=6 if large else 2, depth=5 if deep else 2, total_tokens=16 if large else 5)
    if family == "ar":
        return Method(Autoregressive(), StandardVerifier())
    if family == "sps":
        return Method(
            Chain(gamma=2 if size == "small" else 5),
            StandardVerifier(),
            SmallLMDrafter(draft, target.config.vocab_size),
        )
    if family == "pld":
        return Method(
            Chain(gamma=2 if size == "small" else 5), StandardVerifier(), PromptLookupDrafter(target.config.vocab_size)
        )
    if family == "lookahead":
        return Method(LookaheadTree(window=4, ngram=4 if deep else 3, candidates=6 if large else 2), StandardVerifier())
    if family == "eagle":
        return Method(StaticTree(choices=choices), StandardVerifier(), drafter_for(target, directory, kind="eagle1"))
    if family == "eagle2":
        return Method(dynamic, StandardVerifier(), drafter_for(target, directory, kind="eagle1"))
    if family in ("eagle3", "mars", "mars-paper"):
        verifier = (
            StandardVerifier()
            if family == "eagle3"
            else MarsVerifier(rule="paper" if family == "mars-paper" else "release")
        )
        return Method(dynamic, verifier, drafter_for(target, directory))
    if family == "talon":
        return Method(
            TalonTree(budget=16 if large else 5, top_k=6 if large else 2),
            StandardVerifier(),
            drafter_for(target, directory),
        )
    if family == "cast":
        tree = CastTree(top_k=6 if large else 2, depth=5 if deep else 2, total_tokens=16 if large else 5)
        return Method(tree, StandardVerifier(), drafter_for(target, directory), FakeCosts())
    if family == "medusa":
        heads, facts = medusa.load_heads(
            write_medusa(directory, medusa_state(3, 1), {"medusa_num_heads": 3, "medusa_num_layers": 1}),
            target,
            torch.float32,
            "k",
        )
        return Method(StaticTree(choices=choices), TypicalVerifier(), MedusaDrafter(heads, target, facts))
    if family == "hydra":
        heads, _ = hydra.load_heads(write_hydra(directory, hydra_state(target, 3, 1)), target, torch.float32, "k")
        return Method(StaticTree(choices=choices), TypicalVerifier(), HydraDrafter(heads, target))
    if family == "entmtp":
        heads, _ = hydra.load_heads(
            write_hydra(directory / "heads", hydra_state(target, 3, 1)), target, torch.float32, "k"
        )
        tree = ScheduledTree(
            str(small_bank(directory)), "gsm8k", policy="ladder", ladder=[1e-9, 1e-6] if size != "small" else [1.0, 2.0]
        )
        return Method(tree, TypicalVerifier(), HydraDrafter(heads, target))
    raise ValueError(family)


def reads_per_step(lm: TreeLM, method: Method, prompts, sampling: Sampling) -> list[tuple[int, int]]:
    """Per decode step after the first (prefill excluded): (host reads, levels grown on the
    host, i.e. calls of the drafter's `logits` other than the one under `root_logits`,
    which a tree grown on the device starts from)."""
    marks, calls, under_root = [], [0], [False]
    if method.drafter is not None:
        logits = method.drafter.logits

        def counted(*args):
            calls[0] += not under_root[0]
            return logits(*args)

        method.drafter.logits = counted
        if method.drafter.grows_on_device:
            root_logits = method.drafter.root_logits

            def root_counted(*args):
                under_root[0] = True
                try:
                    return root_logits(*args)
                finally:
                    under_root[0] = False

            method.drafter.root_logits = root_counted
    generators = [torch.Generator().manual_seed(i) for i in range(len(prompts))]
    with counting_syncs() as counts:
        generate_batch(
            lm,
            method,
            prompts,
            sampling,
            Limits(max_new_tokens=12),
            generators,
            on_step=lambda *_: marks.append((sum(counts.values()), calls[0])),
        )
    return [
        (reads - before, drafted - drafted_before)
        for (before, drafted_before), (reads, drafted) in zip(marks, marks[1:])
    ]


FAMILIES = [
    "ar",
    "sps",
    "pld",
    "lookahead",
    "eagle",
    "eagle2",
    "eagle3",
    "mars",
    "mars-paper",
    "talon",
    "cast",
    "medusa",
    "hydra",
    "entmtp",
]
# trees grown level by level on the host, one read per draft level: PLD's chain (its
# proposals are host values, no device read on a GPU), and the policies whose next level's
# size or whether there is one follows the draft's values (TALON's budget and gate, CAST's
# pricing)
PER_LEVEL = ("pld", "talon", "cast")


@pytest.mark.parametrize("temperature", [0.0, 1.0])
@pytest.mark.parametrize("family", FAMILIES)
def test_host_reads_per_step_do_not_grow_with_batch_or_tree(family, temperature, target, draft, prompts, tmp_path):
    """A step reads the finished tree once, the verification, the NLL and a policy's
    observation (Lookahead's window, EntMTP's confidence): the same count whatever the batch
    size, the tree's width and its depth. A tree grown on the host reads once per draft
    level in addition, never per row or per node."""
    if temperature and family in ("ar", "pld", "lookahead", "eagle", "eagle2", "talon", "cast", "hydra", "entmtp"):
        pytest.skip("the same verifier and tree code as a family checked at T>0")
    lm = TreeLM(target)
    sampling = Sampling(temperature=temperature)
    counts = set()
    for batch in (1, 4):
        for size in ("small", "large", "deep"):
            steps = reads_per_step(
                lm, method_for(family, size, target, draft, tmp_path / f"{batch}{size}"), prompts[:batch], sampling
            )
            assert steps
            if family in PER_LEVEL:
                assert all(reads <= 3 + levels for reads, levels in steps), (batch, size, steps)
            else:
                assert all(levels == 0 for _, levels in steps), "grown level by level on the host"
                counts |= {reads for reads, _ in steps}
    if family not in PER_LEVEL:
        assert len(counts) == 1 and counts.pop() <= 4, counts


def test_blocking_copies_are_counted_and_staged_ones_are_not():
    """On CPU, a copy counts where it would block on CUDA: `.to(device)` and
    `torch.tensor(..., device=...)` without non_blocking, a list index; copies staged
    through engine.transfer and dtype casts do not."""
    host = torch.arange(6)
    with counting_syncs() as counts:
        host.to("cpu")
        torch.tensor([1, 2], device="cpu")
        host[[0, 1]]
        host[torch.tensor([0, 1])]
        host.to(torch.float32)
        host.to("cpu", non_blocking=True)
        to_device(host, "cpu")
        device_tensor([1, 2], "cpu")
    assert (counts[COPY], counts[LIST_INDEX], sum(counts.values())) == (2, 1, 3), counts
