"""EAGLE-2/3 dynamic tree: grow by cumulative draft log-probability, then rerank.

The first draft forward gives the root's top-K children. Then, `depth` times, the K
newest nodes with the highest cumulative log-prob are expanded (one draft forward for
all of them), each adding its top-K children. `depth` counts as EAGLE's release does
(its tree-building loop runs `depth` times after the first forward): a tree of
depth + 1 levels and depth + 1 draft forwards, so a paper's `depth=7` is written as is. Finally every drafted node is
ranked by
cumulative log-prob and the best N-1 are kept with the root (N = total_tokens); a
child never outscores its parent, so the kept nodes form a subtree.

Children are the draft's deterministic top-K, so the verifier treats them as point
masses (q = 1): lossless at any temperature. EAGLE's release does the same: its
evaluate_posterior accepts a child with probability p / 1 and removes it from the
residual, without the draft's q.
"""

from __future__ import annotations

import torch

from specbench.engine.parts import NestedStep, TreePolicy
from specbench.engine.tree import DraftTree, TopTokens, top_tokens
from specbench.engine.values import integer


class EagleDynamicTree(TreePolicy):
    # shapes `auto` chooses from (specbench.costs.autotune), small to large; the depth-0 ones
    # (one draft forward, k siblings verified at once) suit drafters that are dear to run
    AUTO_CANDIDATES = [
        {"top_k": k, "depth": d, "total_tokens": n}
        for k, d, n in (
            (1, 0, 2),
            (2, 0, 3),
            (4, 0, 5),
            (1, 1, 3),
            (2, 1, 4),
            (2, 2, 6),
            (3, 3, 8),
            (4, 3, 12),
            (4, 4, 16),
            (6, 5, 24),
            (8, 5, 32),
            (10, 6, 60),
        )
    ]
    SIZE_KEYS = ("top_k", "depth", "total_tokens")

    def __init__(self, top_k: int = 10, depth: int = 7, total_tokens: int = 60):
        self.top_k = integer("method.tree.top_k", top_k, at_least=1)
        self.depth = integer("method.tree.depth", depth, at_least=0)
        self.total_tokens = integer("method.tree.total_tokens", total_tokens, at_least=2)

    def widest(self) -> int:
        return self.total_tokens

    def deepest(self) -> int:
        return self.depth + 1  # depth counts the levels drafted after the first

    def nested_step(self, tree: DraftTree, path: list[int], draft_forwards: int, context: int) -> NestedStep:
        """This shape's tree read off a wider one's, as `grow` would build it from the same
        draft scores: level by level, each of the k best nodes of the last level (by
        cumulative log-prob) keeps its k best children, and the total_tokens - 1 best of all
        these are verified. An estimate where the wider tree was pruned past a node this
        shape would keep: the confirming decodes (costs/pilot.py) decide."""
        children: dict[int, list[int]] = {}
        for node in range(1, len(tree)):
            children.setdefault(tree.parents[node], []).append(node)
        frontier, eligible = [0], []
        for _ in range(self.depth + 1):
            level = [
                c for p in frontier for c in sorted(children.get(p, []), key=lambda n: -tree.logps[n])[: self.top_k]
            ]
            eligible += level
            frontier = sorted(level, key=lambda n: -tree.logps[n])[: self.top_k]
        kept = {0} | set(sorted(eligible, key=lambda n: (-tree.logps[n], n))[: self.total_tokens - 1])
        inside = next((i for i, node in enumerate(path) if node not in kept), len(path))
        return NestedStep(
            accepted=inside - 1,
            nodes=len(kept),
            draft_forwards=min(draft_forwards, self.depth + 1),
            reach=self.depth + 1,
        )

    def grow(self, drafter, contexts, roots, sampling, generators) -> list[DraftTree]:
        if drafter.grows_on_device:
            return self._grow_on_device(drafter, contexts, roots)
        trees = [DraftTree.root(root) for root in roots]
        frontiers = [[0] for _ in trees]
        for _ in range(self.depth + 1):
            if not any(frontiers):
                break
            rows = top_tokens(drafter.logits(contexts, trees, frontiers), self.top_k)
            frontiers = [
                expand_top_k(tree, frontier, top, self.top_k) if top is not None else []
                for tree, frontier, top in zip(trees, frontiers, rows)
            ]
        return [keep_best(tree, self.total_tokens) for tree in trees]

    def _grow_on_device(self, drafter, contexts, roots) -> list[DraftTree]:
        """The same trees as the host loop above, grown without reading anything back: every
        level's candidates and the next frontier stay on the device (a stable sort ranks
        them, ties to the older node as `best_first` does), and every drafted node is read
        back in one transfer at the end. A level's candidates are its frontier's top-k
        children, frontier node by node (the host loop's order), so the node numbering
        differs from the host's only where it skips children of log-prob -inf."""
        logp = torch.log_softmax(drafter.root_logits(contexts, roots).float(), dim=-1)
        k = min(self.top_k, logp.shape[-1])
        top = logp.topk(k, dim=-1)
        batch = len(roots)
        # the newest level's candidates: token, parent (index into `drafted`, -1: the root), cumulative log-prob
        tokens, parents, scores = top.indices, torch.full_like(top.indices, -1), top.values.double()
        drafted, offset = [], 0  # offset: where the newest level starts in `drafted`
        for _ in range(self.depth):
            drafted.append((tokens, parents, scores))
            frontier = torch.sort(torch.sort(scores, dim=1, descending=True, stable=True).indices[:, :k], dim=1).values
            # candidate c is child c % k of the fed node in slot c // k (the root's children: slot 0)
            logits = drafter.level_logits(tokens.gather(1, frontier), frontier // k)
            top = torch.log_softmax(logits.float(), dim=-1).topk(k, dim=-1)
            tokens = top.indices.reshape(batch, -1)
            parents = (offset + frontier).repeat_interleave(k, dim=1)
            scores = (scores.gather(1, frontier)[:, :, None] + top.values.double()).reshape(batch, -1)
            offset += drafted[-1][0].shape[1]
        drafted.append((tokens, parents, scores))
        tokens, parents, scores = (torch.cat(part, dim=1) for part in zip(*drafted))
        rows = torch.stack([tokens.double(), parents.double(), scores]).tolist()
        return [keep_best(_host_tree(root, *row), self.total_tokens) for root, row in zip(roots, zip(*rows))]


def _host_tree(root: int, tokens: list[float], parents: list[float], scores: list[float]) -> DraftTree:
    """Drafted nodes (parent -1: the root) as a DraftTree, without the nodes of log-prob
    -inf (the host loop never adds them; their descendants are -inf too)."""
    index = {-1: 0}
    tree = DraftTree.root(root)
    for i, (token, parent, score) in enumerate(zip(tokens, parents, scores)):
        if score > float("-inf"):
            index[i] = tree.add(index[int(parent)], int(token))
            tree.logps[-1] = score  # the device's float64 sum, bit for bit the host loop's
    return tree


def expand_top_k(tree: DraftTree, frontier: list[int], top: TopTokens, top_k: int) -> list[int]:
    """Add each frontier node's top-k children; return the k best new nodes (by
    cumulative log-prob), in tree order: the next frontier."""
    return sorted(best_first(tree, add_top_children(tree, frontier, top, top_k))[:top_k])


def add_top_children(tree: DraftTree, frontier: list[int], top: TopTokens, top_k: int) -> list[int]:
    """Add each frontier node's top-k children (deterministic: the verifier treats them
    as point masses) from its row's `top_tokens`; returns the new nodes."""
    children = []
    for parent, values, tokens in zip(frontier, *top):
        for value, token in zip(values[:top_k], tokens[:top_k]):
            if value > float("-inf"):
                children.append(tree.add(parent, token, value))
    return children


def keep_best(tree: DraftTree, total_tokens: int) -> DraftTree:
    """The root and the total_tokens - 1 drafted nodes of highest cumulative log-prob."""
    return tree.subtree(best_first(tree, range(1, len(tree)))[: total_tokens - 1])


def best_first(tree: DraftTree, nodes) -> list[int]:
    """Nodes by cumulative log-prob, best first; ties to the older node."""
    return sorted(nodes, key=lambda n: (-tree.logps[n], n))
