"""CAST: the EAGLE-2/3 dynamic tree with its breadth, depth and verified size priced by
measured forward costs (Hong, Tan & Hu, "Inference-Cost-Aware Dynamic Tree Construction
for Efficient Inference in Large Language Models", section 4).

The tree grows as EAGLE's: layer 1 is the root's top-K children; every later layer is the
top-K children of each node expanded from the layer before. `depth` counts as EAGLE's
(and so Appendix E's): the layers drafted after the first, at most depth + 1 layers. Confidence v(u) is the
draft's path probability (exp of the cumulative log-prob). Three switches (the paper's
Table 3 ablations) replace EAGLE's fixed counts; with all three off this is exactly
EagleDynamicTree with the same top_k, depth and total_tokens.

- Breadth pruning: how many of layer i's candidates to expand (EAGLE: K). Algorithm 1 over
  u_k = batch mean of the k best confidences summed (eq. 1) and c_k = draft ms for k nodes
  / target ms for one token (eq. 2), threshold C1. Never more than K: the paper prunes
  EAGLE's top-K ("the initial number of nodes ... determined by the top-K"). One count per
  layer for the whole batch, as u and c are batch quantities.
- Depth pruning: draft layer i+1 only while alpha_i * u_{n_i} / c_{n_i} >= C2, alpha_i the
  mean of buffer A_i. A_i holds (FIFO, at most R values, initially {1}) the paper's
  confidence gain ratio phi_i = u^{(i+1)}_{n_{i+1}} / u^{(i)}_{n_i}: how much confident
  mass one more layer has carried over from this one. It is a draft-side quantity, known
  as soon as layer i+1 is breadth-pruned, so it is recorded while building, as the paper
  says; no accepted path is needed (hence no `observe`).
- Dynamic reranking (section 4.2): the nodes the expansion retained, the n_i kept at each
  layer i (the root is n_0 = 1), ranked by confidence; the best N = min(sum n_i, m) of them
  (m = total_tokens, root included) are the candidates, and Algorithm 1 over u_k (their
  batch-mean prefix sums) and c_k = target ms for k tokens / target ms for 1, threshold C3,
  says how many to verify. A drafted child that breadth pruning did not retain is not a
  candidate (without breadth pruning n_i = K, EAGLE's expanded top-K per layer). Without
  dynamic reranking the tree is reranked as EAGLE's: the best total_tokens - 1 of every
  drafted node.

Thresholds. Appendix E gives a single "threshold" per setting (4 for Llama-3.3-70B and
Vicuna-13B, 3 for the 8B models at batch size 1; 2.5 at batch size 8). We read it as the
common value of C1, C2 and C3: all three compare expected accepted tokens (confidence is
the acceptance proxy) with cost in target single-token forwards, i.e. the same exchange
rate, and the values track the speedups the paper reports in each setting, as a marginal
rule "spend while the return beats the rate already achieved" would. Each is its own
argument, defaulting to 3 (8B models, batch size 1).

`auto` thresholds (the `cast` method's default, as for every other method's shape): the
thresholds are chosen from AUTO_CANDIDATES by the predicted speedup on calibration prompts
(specbench/costs/autotune.py), and drafting is turned off when none is predicted to beat
AR: CAST always drafts its first layer, so on a weak drafter or a CPU where a 2-token
verification costs twice a 1-token one even its smallest tree loses. The candidates pair a
draft-side threshold (C1 = C2) with a verification threshold (C3) instead of one common
value: the profile prices a draft layer at the head's forward alone, while on a CPU the
engine's work per layer (top-K, tree bookkeeping) costs as much again, and an extra verified
node costs almost nothing where the target's curve is flat, so one common value either
drafts too deep or verifies too few (AMD EPYC Zen 5, bf16, 10 HumanEval prompts: common 6,
1.30x AR; C1 = C2 = 10 with C3 = 1.5, 1.51x). The paper's common values are among the
candidates. This is our extension, not the paper's; the replication runner pins Appendix
E's thresholds.

Costs are looked up at the current batch size (rows may have left since `begin`) and the
mean committed context of the rows.

A step that could not verify any draft node drafts nothing. Dynamic reranking compares
count k with count 1 by u_k - u_1 >= C3 (c_k - 1), and a node's confidence is at most 1,
so u_k - u_1 <= k - 1: where k - 1 < C3 (c_k - 1) for every k up to the cap (a batch whose
second verified token costs a third of the first, at C3 = 3), the tree is the root alone
whatever the drafter would say. The drafter is then not called (it reads what it missed
at its next call), and no phi is recorded, as no layer was built.
"""

from __future__ import annotations

import math
from collections import deque

from specbench.engine.parts import NestedStep, TreePolicy
from specbench.engine.tree import DraftTree, TopTokens, top_tokens
from specbench.engine.values import integer, number, switch
from specbench.errors import ConfigError
from specbench.trees.eagle import add_top_children, best_first, keep_best

NO_COSTS = "method.tree: CAST prices trees with the measured cost profile; set costs.profile=true"


def select_count(u: list[float], c: list[float], threshold: float) -> int:
    """Algorithm 1 (Select Maximum Valid Index): the largest k in 1..len(u) such that,
    for every smaller count i, going from i to k nodes gains at least `threshold` utility
    per unit of cost. Count 1 always qualifies. Written as du >= C * dc so that a flat
    stretch of a measured cost curve (dc = 0) counts as free instead of dividing by 0."""
    best = 1
    for k in range(1, len(u)):
        if all(u[k] - u[i] >= threshold * (c[k] - c[i]) for i in range(k)):
            best = k + 1
    return best


def batch_utility(scores: list[list[float]], size: int) -> list[float]:
    """u_k for k = 1..size: per row the sum of its k best confidences (`scores[b]` is
    best first; a row with fewer has nothing more to add), averaged over the rows (eq. 1)."""
    u, total = [], 0.0
    for k in range(size):
        total += sum(row[k] for row in scores if k < len(row))
        u.append(total / len(scores))
    return u


class CastTree(TreePolicy):
    """Cost-aware EAGLE tree. `buffer` is R, the length of each depth's FIFO of phi_i. The
    paper does not give it; 8 averages out step-to-step noise in phi while evicting the
    optimistic initial 1 within the first few dozen tokens of a sequence, and lets alpha
    follow changes in how predictable the text is (prose versus code) within a reply."""

    # a draft-side threshold C1 = C2 with a verification threshold C3 (module docstring), from
    # shallow to deep drafts and few to many verified, the loosest last (the pilot: costs/pilot.py);
    # Appendix E's common 2.5 / 3 / 4 among them
    COST_AWARE = True
    AUTO_CANDIDATES = [
        {"c1": draft, "c2": draft, "c3": verify}
        for draft in (10.0, 6.0, 4.0, 3.0, 2.5, 1.5)
        for verify in ((3.0,) if draft == 3.0 else (4.0, 2.5, 1.5, 1.0))
    ]
    SIZE_KEYS = ("top_k", "depth", "total_tokens", "buffer")

    def __init__(
        self,
        top_k: int = 12,
        depth: int = 13,
        total_tokens: int = 72,
        c1: float = 3.0,
        c2: float = 3.0,
        c3: float = 3.0,
        buffer: int = 8,
        breadth_pruning: bool = True,
        depth_pruning: bool = True,
        dynamic_rerank: bool = True,
    ):
        self.top_k = integer("method.tree.top_k", top_k, at_least=1)
        self.depth = integer("method.tree.depth", depth, at_least=0)
        self.total_tokens = integer("method.tree.total_tokens", total_tokens, at_least=2)
        self.buffer = integer("method.tree.buffer", buffer, at_least=1)
        self.c1 = number("method.tree.c1", c1, above=0)
        self.c2 = number("method.tree.c2", c2, above=0)
        self.c3 = number("method.tree.c3", c3, above=0)
        self.breadth_pruning = switch("method.tree.breadth_pruning", breadth_pruning)
        self.depth_pruning = switch("method.tree.depth_pruning", depth_pruning)
        self.dynamic_rerank = switch("method.tree.dynamic_rerank", dynamic_rerank)
        self.costs = None
        self.buffers: dict[int, deque] = {}  # layer i -> A_i

    @property
    def priced(self) -> bool:
        return self.breadth_pruning or self.depth_pruning or self.dynamic_rerank

    def widest(self) -> int:
        return self.total_tokens  # the cap: the cost-aware pruning verifies at most this many

    def begin(self, batch_size: int, costs) -> None:
        """A new batch: its cost profile, and fresh buffers (each batch starts from the
        paper's {1}, so a result does not depend on which batches ran before it). The
        batch size is not kept: rows leave, so `grow` prices at len(roots)."""
        if costs is None and self.priced:
            raise ConfigError(NO_COSTS)
        self.costs, self.buffers = costs, {}

    def alpha(self, layer: int) -> float:
        ratios = self.ratios(layer)
        return sum(ratios) / len(ratios)

    def ratios(self, layer: int) -> deque:
        """A_layer, created as {1} on first use."""
        return self.buffers.setdefault(layer, deque([1.0], maxlen=self.buffer))

    def grow(self, drafter, contexts, roots, sampling, generators) -> list[DraftTree]:
        if self.priced and self.costs is None:
            raise ConfigError(NO_COSTS)
        batch = len(roots)
        context = sum(len(c) for c in contexts) / batch
        at = self._at(batch, context)
        trees = [DraftTree.root(r) for r in roots]
        if not self._drafts_can_pay(at):
            return trees
        frontiers, fed, kept_utility = [[0] for _ in roots], 1, None
        retained = [[] for _ in roots]  # per row: the nodes each layer kept (n_i of them)
        for layer in range(1, self.depth + 2):
            tops = top_tokens(drafter.logits(contexts, trees, frontiers), self.top_k)
            layer_nodes = [best_first(t, self._expand(t, f, top)) for t, f, top in zip(trees, frontiers, tops)]
            scores = [[math.exp(t.logps[n]) for n in nodes[: self.top_k]] for t, nodes in zip(trees, layer_nodes)]
            u = batch_utility(scores, max(len(s) for s in scores))
            if not u:
                break
            count, deeper = self._layer(layer, u, at, fed, kept_utility)
            kept_utility = u[count - 1]
            for kept, nodes in zip(retained, layer_nodes):
                kept += nodes[:count]
            if not deeper:
                break
            frontiers = [sorted(nodes[:count]) for nodes in layer_nodes]
            fed += count
        if not self.dynamic_rerank:
            return [keep_best(t, self.total_tokens) for t in trees]
        ranked = [best_first(t, kept) for t, kept in zip(trees, retained)]
        keep = self._verified(trees, ranked, at)
        return [t.subtree(nodes[: keep - 1]) for t, nodes in zip(trees, ranked)]

    def _at(self, batch: int, context: float) -> tuple:
        """(batch size, mean committed context, the target's one-token ms there): what a grow
        prices its layers and its verified size against, looked up once per tree."""
        return batch, context, self.costs.target_ms(batch, context, 1) if self.priced else 1.0

    def _drafts_can_pay(self, at: tuple) -> bool:
        """Whether dynamic reranking could verify any draft node at `at` (module docstring):
        some count k > 1 within the cap with k - 1 >= C3 (c_k - 1). Without reranking the
        tree is EAGLE's and always verified."""
        if not self.dynamic_rerank:
            return True
        batch, context, one_token_ms = at
        return any(
            k - 1 >= self.c3 * (self.costs.target_ms(batch, context, k) / one_token_ms - 1)
            for k in range(2, self.total_tokens + 1)
        )

    def _layer(self, layer: int, u: list[float], at: tuple, fed: int, kept_utility) -> tuple[int, bool]:
        """How many of layer `layer`'s candidates to keep (breadth pruning over utilities `u`),
        phi of the layer before recorded, and whether to draft the next layer (depth pruning);
        `at`: (batch size, mean committed context, the target's one-token ms there)."""
        batch, context, one_token_ms = at
        cost = []
        if self.breadth_pruning or self.depth_pruning:
            # The paper reads its tables at select(c) = (max(floor(c / L), M - 1) + 1) L, a typo
            # for min: c rounded up to the grid of measured contexts, clamped to its last point.
            # The cost profile does that clamping itself (interpolating between grid points).
            # Eq. 2 prices layer i at the tree rows the drafter has cached (`fed`, root
            # included); it has the committed context cached too, so that is added.
            cost = [self.costs.draft_ms(batch, context + fed, k) / one_token_ms for k in range(1, len(u) + 1)]
        count = select_count(u, cost, self.c1) if self.breadth_pruning else len(u)
        if kept_utility:
            self.ratios(layer - 1).append(u[count - 1] / kept_utility)  # phi_{layer-1}
        if layer == self.depth + 1:
            return count, False
        return count, not (self.depth_pruning and self.alpha(layer) * u[count - 1] < self.c2 * cost[count - 1])

    def _verified(self, trees: list[DraftTree], ranked: list[list[int]], at: tuple) -> int:
        """Dynamic reranking: how many of the ranked candidates (root included) to verify;
        `at` as for `_layer`."""
        batch, context, one_token_ms = at
        size = min(self.total_tokens, 1 + max(len(nodes) for nodes in ranked))  # N, root included
        scores = [[1.0] + [math.exp(t.logps[n]) for n in nodes] for t, nodes in zip(trees, ranked)]
        cost = [self.costs.target_ms(batch, context, k) / one_token_ms for k in range(1, size + 1)]
        return select_count(batch_utility(scores, size), cost, self.c3)

    def nested_step(self, tree: DraftTree, path: list[int], draft_forwards: int, context: int) -> NestedStep:
        """This shape's tree read off a step of the loosest thresholds' (the pilot), as `grow`
        would build it from the same draft scores, buffers carried from step to step as a
        decode carries them: layer by layer the top-K children of the nodes kept, breadth,
        depth and verification pruned by this shape's thresholds. The pilot verified only
        part of what it drafted, so a node it pruned is missing here: an estimate, which the
        confirming decodes (costs/pilot.py) settle."""
        children = tree.child_lists()
        at = self._at(1, context)
        if not self._drafts_can_pay(at):
            return NestedStep(accepted=0, nodes=1, draft_forwards=0, reach=self.depth + 1)
        frontier, fed, kept_utility, layers = [0], 1, None, 0
        drafted, retained = [], []
        for layer in range(1, self.depth + 2):
            nodes = best_first(tree, [c for f in frontier for c in best_first(tree, children[f])[: self.top_k]])
            u = batch_utility([[math.exp(tree.logps[n]) for n in nodes[: self.top_k]]], min(len(nodes), self.top_k))
            layers += 1
            if not u:
                break
            count, deeper = self._layer(layer, u, at, fed, kept_utility)
            kept_utility = u[count - 1]
            drafted += nodes
            retained += nodes[:count]
            if not deeper:
                break
            frontier, fed = nodes[:count], fed + count
        if self.dynamic_rerank:
            ranked = best_first(tree, retained)
            kept = {0, *ranked[: self._verified([tree], [ranked], at) - 1]}
        else:
            kept = {0, *best_first(tree, drafted)[: self.total_tokens - 1]}
        inside = next((i for i, node in enumerate(path) if node not in kept), len(path))
        return NestedStep(accepted=inside - 1, nodes=len(kept), draft_forwards=layers, reach=self.depth + 1)

    def _expand(self, tree: DraftTree, frontier: list[int], top: TopTokens | None) -> list[int]:
        """Add each frontier node's top-K children (deterministic, as EAGLE); the new nodes."""
        if top is None or not frontier:
            return []
        return add_top_children(tree, frontier, top, self.top_k)
