"""The oracle drafter (specbench.drafters.oracle): with the target's own greedy continuation
drafted, every level of the tree is accepted (τ = levels + 1) and the output is AR's, on the
host and device growth paths, at B=1 and B=4 with prompts of different lengths; staggered
misses make the rows of a batch accept different lengths (holes) and change nothing."""

import pytest
from conftest import VOCAB

from specbench.drafters.oracle import OracleDrafter
from specbench.engine.kernels import Compiled
from specbench.engine.lean import make_lm
from specbench.engine.loop import Limits, Method, generate, generate_batch
from specbench.engine.sampling import Sampling
from specbench.errors import ConfigError
from specbench.trees.autoregressive import Autoregressive
from specbench.trees.chain import Chain
from specbench.trees.eagle import EagleDynamicTree
from specbench.verify.standard import StandardVerifier

LIMITS = Limits(max_new_tokens=30)
# (policy, levels)
TREES = {
    "eagle": (lambda: EagleDynamicTree(top_k=3, depth=3, total_tokens=10), 4),
    "chain": (lambda: Chain(gamma=4), 4),
}


@pytest.fixture(scope="module")
def uneven(prompts):
    """Four prompts of four different lengths."""
    by_length = {len(p): p for p in reversed(prompts)}
    return [by_length[n] for n in sorted(by_length)[:4]]


@pytest.fixture(scope="module")
def references(target, uneven):
    ar = Method(Autoregressive(), StandardVerifier())
    lm = make_lm(target, "lean")
    return {tuple(p): generate(lm, ar, p, Sampling(), LIMITS).ids for p in uneven}


@pytest.mark.parametrize("forward", ["lean", "static"])
@pytest.mark.parametrize("host", [False, True])
@pytest.mark.parametrize("tree", sorted(TREES))
@pytest.mark.parametrize("batch", [1, 4])
def test_an_oracle_draft_is_accepted_whole_and_changes_nothing(target, uneven, references, tree, batch, host, forward):
    make_tree, levels = TREES[tree]
    drafter = OracleDrafter(VOCAB, references, "cpu")
    drafter.grows_on_device = not host
    lm = make_lm(target, "lean", Compiled(static=forward == "static"))
    rows = uneven[:batch]
    assert len({len(p) for p in rows}) == batch  # prompts of different lengths
    generations = generate_batch(lm, Method(make_tree(), StandardVerifier(), drafter), rows, Sampling(), LIMITS)
    for prompt, generation in zip(rows, generations):
        assert generation.ids == references[tuple(prompt)]
        # the last step may stop early
        assert set(generation.accept_lengths[:-1]) == {levels + 1}, generation.accept_lengths
        assert len(generation.ids) / generation.target_forwards > levels  # τ


@pytest.mark.parametrize("tree", sorted(TREES))
def test_staggered_misses_leave_holes_and_change_nothing(target, uneven, references, tree):
    make_tree, levels = TREES[tree]
    drafter = OracleDrafter(VOCAB, references, "cpu", stagger=levels)
    lm = make_lm(target, "lean", Compiled(static=True))
    generations = generate_batch(lm, Method(make_tree(), StandardVerifier(), drafter), uneven, Sampling(), LIMITS)
    assert [g.ids for g in generations] == [references[tuple(p)] for p in uneven]
    first_steps = [g.accept_lengths[0] for g in generations]
    assert first_steps == [1, 2, 3, 4], first_steps  # row b drafts b levels right at step 0
    assert all(set(g.accept_lengths[:-1]) <= set(range(1, levels + 2)) for g in generations)


def test_a_prompt_without_a_reference_is_refused(references):
    with pytest.raises(ConfigError, match="no reference continuation"):
        OracleDrafter(VOCAB, references, "cpu").begin([[5, 6, 7]], None)
