"""T>0: the verifier reproduces the target distribution, chain and tree (chi-square).

A synthetic target and draft assign a distribution to every prefix over a small
vocabulary; we draft, verify, and compare the first two emitted tokens with
p(x1) p(x2 | x1). A deliberately broken verifier must fail the same test."""

import itertools

import pytest
import torch
from scipy.stats import chisquare

from specbench.engine.parts import Acceptance
from specbench.engine.sampling import Sampling, sample
from specbench.engine.tree import DraftTree
from specbench.verify.standard import StandardVerifier

V = 5
DRAWS = 10_000


class Synthetic:
    """Logits for every prefix, fixed by a seed; `skew` pushes the draft away from the target.
    Each prefix's logits are made once and remembered: the draws ask for the same few
    prefixes tens of thousands of times."""

    def __init__(self, seed: int, skew: float):
        self.seed, self.skew = seed, skew
        self.made: dict[tuple, torch.Tensor] = {}

    def logits(self, prefix: tuple, role: str) -> torch.Tensor:
        key = (role == "draft", prefix)
        if key not in self.made:
            # tuples of ints hash the same in every process (strings would not)
            g = torch.Generator().manual_seed(hash((self.seed, *key)) % 2**31)
            scores = torch.randn(V, generator=g) * 1.5
            if role == "draft":
                scores = scores - self.skew * self.logits(prefix, "target")  # disagree on purpose
            self.made[key] = scores
        return self.made[key].clone()


def draw_children(tree, node, q, k, generator):
    """k children of `node`, drawn from q in order without replacement."""
    tree.child_dists[node] = q
    remaining = q.clone()
    for _ in range(min(k, int((q > 0).sum()))):
        token = sample(remaining / remaining.sum(), generator)
        remaining[token] = 0
        tree.add(node, token, float(q[token].log()))


def build(shape: str, world: Synthetic, sampling: Sampling, generator) -> DraftTree:
    tree = DraftTree.root(0)
    widths = {"chain": [1, 1, 1], "tree": [3, 2], "wide": [V, 1]}[shape]
    frontier = [0]
    for width in widths:
        next_frontier = []
        for node in frontier:
            prefix = tuple(tree.tokens[n] for n in tree.path_to(node)[1:])
            q = sampling.probs(world.logits(prefix, "draft"))
            before = len(tree)
            draw_children(tree, node, q, width, generator)
            next_frontier += range(before, len(tree))
        frontier = next_frontier
    return tree


def emitted_pair(tree, accepted: Acceptance, world, sampling, generator) -> tuple[int, int]:
    tokens = [tree.tokens[n] for n in accepted.path[1:]] + [accepted.next_token]
    if len(tokens) < 2:  # the next step of the loop would sample the second token
        tokens.append(sample(sampling.probs(world.logits(tuple(tokens), "target")), generator))
    return tokens[0], tokens[1]


def target_logits(tree, world):
    rows = [world.logits(tuple(tree.tokens[n] for n in tree.path_to(node)[1:]), "target") for node in range(len(tree))]
    return torch.stack(rows)


def p_value(shape, skew, sampling, verify, world: Synthetic | None = None) -> float:
    world = world or Synthetic(seed=7, skew=skew)
    generator = torch.Generator().manual_seed(11)
    counts = torch.zeros(V, V)
    for _ in range(DRAWS):
        tree = build(shape, world, sampling, generator)
        accepted = verify(tree, target_logits(tree, world), sampling, generator)
        counts[emitted_pair(tree, accepted, world, sampling, generator)] += 1
    p1 = sampling.probs(world.logits((), "target"))
    expected = torch.stack([p1[a] * sampling.probs(world.logits((a,), "target")) for a in range(V)])
    keep = expected.flatten() > 0
    assert counts.flatten()[~keep].sum() == 0, "emitted a token the target gives probability 0"
    return chisquare(counts.flatten()[keep], expected.flatten()[keep] * DRAWS).pvalue


CASES = list(itertools.product(["chain", "tree", "wide"], [0.0, 3.0]))


@pytest.mark.parametrize("shape,skew", CASES)
def test_distribution_preserved(shape, skew):
    assert p_value(shape, skew, Sampling(temperature=1.0), StandardVerifier().accept) > 1e-3


def test_distribution_preserved_with_temperature_top_k_top_p():
    sampling = Sampling(temperature=0.7, top_k=4, top_p=0.9)
    assert p_value("tree", 3.0, sampling, StandardVerifier().accept) > 1e-3


def test_a_draft_with_its_own_vocabulary_keeps_the_distribution():
    """A draft that can only draft tokens 0, 2 and 3 (a draft vocabulary, mapped back to the
    target's with -inf elsewhere) still leaves p unchanged."""
    from specbench.drafters.small_lm import DraftVocab

    vocab = DraftVocab(torch.tensor([0, 2, 3]), V)

    class OwnVocabulary(Synthetic):
        def logits(self, prefix, role):
            scores = super().logits(prefix, role)
            return vocab.to_target(scores[vocab.ids]) if role == "draft" else scores

    def verify(tree, logits, sampling, generator):
        assert set(tree.tokens[1:]) <= {0, 2, 3}
        return StandardVerifier().accept(tree, logits, sampling, generator)

    assert p_value("tree", 0.0, Sampling(temperature=1.0), verify, OwnVocabulary(seed=7, skew=0.0)) > 1e-3


def test_a_verifier_that_ignores_the_target_is_caught():
    def accept_everything(tree, logits, sampling, generator):
        path = [0]
        while tree.children(path[-1]):
            path.append(tree.children(path[-1])[0])
        return Acceptance(path, sample(sampling.probs(logits[path[-1]]), generator))

    assert p_value("chain", 3.0, Sampling(temperature=1.0), accept_everything) < 1e-6


def test_point_mass_drafts_are_verified_losslessly():
    """Deterministic children (no draft distribution, e.g. prompt lookup) still keep p."""
    world = Synthetic(seed=3, skew=0.0)
    sampling = Sampling(temperature=1.0)
    generator = torch.Generator().manual_seed(5)
    counts = torch.zeros(V)
    for _ in range(DRAWS):
        tree = DraftTree.root(0)
        tree.add(0, 1)
        tree.add(0, 3)
        accepted = StandardVerifier().accept(tree, target_logits(tree, world), sampling, generator)
        counts[([tree.tokens[n] for n in accepted.path[1:]] + [accepted.next_token])[0]] += 1
    expected = sampling.probs(world.logits((), "target")) * DRAWS
    assert chisquare(counts, expected).pvalue > 1e-3


@pytest.mark.parametrize("policy", ["chain", "tree", "lookahead"])
def test_batched_rows_sample_what_they_sample_alone(policy, target, draft, prompts):
    """At T>0 each row of a batch draws from its own generator exactly the sequence it
    draws decoded alone (draft samples, acceptance tests, corrections): batching changes
    no row's sampling process, so the distribution tests above hold per row."""
    from conftest import VOCAB

    from specbench.drafters.small_lm import SmallLMDrafter
    from specbench.engine.lm import TreeLM
    from specbench.engine.loop import Limits, Method, generate, generate_batch
    from specbench.trees.chain import Chain
    from specbench.trees.eagle import EagleDynamicTree
    from specbench.trees.lookahead import LookaheadTree

    if policy == "lookahead":  # no draft model: the window and the n-gram pool live in the policy
        method = Method(LookaheadTree(window=4, ngram=3, candidates=3), StandardVerifier())
    else:
        tree = Chain(3) if policy == "chain" else EagleDynamicTree(top_k=3, depth=2, total_tokens=8)
        method = Method(tree, StandardVerifier(), SmallLMDrafter(draft, VOCAB))
    sampling, limits = Sampling(temperature=1.0), Limits(max_new_tokens=24, stop_token_ids=frozenset({2}))
    rows = prompts[:6]
    alone = [
        generate(TreeLM(target), method, p, sampling, limits, torch.Generator().manual_seed(i)).ids
        for i, p in enumerate(rows)
    ]
    generators = [torch.Generator().manual_seed(i) for i in range(len(rows))]
    together = [g.ids for g in generate_batch(TreeLM(target), method, rows, sampling, limits, generators)]
    assert together == alone
    assert len({tuple(ids) for ids in alone}) > 1


def textbook_sibling_tests(p, tokens, valid, uniforms, q, inclusive):
    """The rule as the papers write it, one pass over the whole vocabulary per sibling rank:
    the oracle sibling_tests' column form must reproduce."""
    accepted = torch.full((len(p),), -1, dtype=torch.long)
    for rank in range(tokens.shape[1]):
        x, ok = tokens[:, rank : rank + 1], valid[:, rank]
        p_x = p.gather(1, x)[:, 0].double()
        ratio = p_x / q[:, rank]
        hit = uniforms[:, rank].double() <= ratio if inclusive else uniforms[:, rank].double() < ratio
        accepted = torch.where(ok & (accepted < 0) & hit, rank, accepted)
        lowered = p.scatter(1, x, (p_x - q[:, rank]).clamp_min(0.0).to(p.dtype)[:, None])
        p = torch.where(ok[:, None], lowered / lowered.sum(-1, keepdim=True), p)
    return accepted, p


@pytest.mark.parametrize("point_masses", [True, False], ids=["point-masses", "release-q"])
def test_sibling_tests_equal_the_textbook_rule_with_the_same_uniforms(point_masses):
    """Standard sampling (deterministic children: q = 1) and MARS's release rule (q = the
    draft's own probability) test siblings in one column pass; on 200 random nodes of up to
    12 children (some leaves) they accept the same child as the full-vocabulary loop and
    leave the same distribution for the correction."""
    from specbench.verify.standard import sibling_tests, sibling_tokens

    g = torch.Generator().manual_seed(0)
    vocab, width, nodes = 50, 12, 200
    p = torch.softmax(torch.randn(nodes, vocab, generator=g) * 2, -1)
    # children among each node's likeliest tokens, in shuffled order: the earlier rejections move much of p
    likeliest = p.topk(width, -1).indices
    children = [
        likeliest[n, torch.randperm(width, generator=g)][: int(torch.randint(0, width + 1, (1,), generator=g))].tolist()
        for n in range(nodes)
    ]
    p[0] = torch.tensor([0.5, 0.3, 0.2] + [0.0] * (vocab - 3))  # all of p on the children: the last test must accept
    children[0] = [2, 1, 0]
    tokens, valid = sibling_tokens(children, width, "cpu")
    uniforms = torch.rand(nodes, width, generator=g)
    q = (
        torch.ones(nodes, width, dtype=torch.float64)
        if point_masses
        else torch.rand(nodes, width, generator=g, dtype=torch.float64) * 0.5 + 0.01
    )
    ours = sibling_tests(p, tokens, valid, uniforms, q, inclusive=not point_masses)
    oracle = textbook_sibling_tests(p, tokens, valid, uniforms, q, inclusive=not point_masses)
    assert torch.equal(ours[0], oracle[0]) and (ours[0] >= 0).sum() > 20 and (ours[0] < 0).sum() > 20
    assert ours[0][0] >= 0
    defined = ~oracle[1].isnan().any(-1)  # the textbook loop divides by zero once p is used up
    assert torch.allclose(ours[1][defined], oracle[1][defined], atol=1e-6) and defined.sum() > nodes - 5
    assert torch.allclose(ours[1].sum(-1), torch.ones(nodes), atol=1e-5)
