"""A chain of up to gamma draft tokens (SpS, PLD)."""

from __future__ import annotations

import torch

from specbench.engine.parts import NestedStep, TreePolicy
from specbench.engine.tree import DraftTree
from specbench.engine.values import integer


class Chain(TreePolicy):
    # shapes `gamma: auto` chooses from (specbench.costs.autotune), small to large
    AUTO_CANDIDATES = [{"gamma": g} for g in range(1, 11)]
    SIZE_KEYS = ("gamma",)

    def __init__(self, gamma: int = 5):
        self.gamma = integer("method.tree.gamma", gamma, at_least=1)

    def widest(self) -> int:
        return self.gamma + 1

    def deepest(self) -> int:
        return self.gamma

    def nested_step(self, tree: DraftTree, path: list[int], draft_forwards: int, context: int) -> NestedStep:
        """A shorter chain is the longer one's first gamma tokens: the same draws, one
        drafter call each."""
        return NestedStep(
            accepted=min(len(path) - 1, self.gamma),
            nodes=min(len(tree) - 1, self.gamma) + 1,
            draft_forwards=min(draft_forwards, self.gamma),
            reach=self.gamma,
        )

    def grow(self, drafter, contexts, roots, sampling, generators) -> list[DraftTree]:
        """Each row's chain grows by one token per draft forward until gamma tokens or
        until the drafter has nothing to propose for it."""
        if drafter.grows_on_device:
            return self._grow_on_device(drafter, contexts, roots, sampling, generators)
        trees = [DraftTree.root(root) for root in roots]
        tips = [0] * len(trees)  # a row's last node, None once its chain has ended
        for _ in range(self.gamma):
            if all(tip is None for tip in tips):
                break
            rows = drafter.logits(contexts, trees, [[tip] if tip is not None else [] for tip in tips])
            drafting = [b for b, (tip, logits) in enumerate(zip(tips, rows)) if tip is not None and logits is not None]
            tips = [tip if b in drafting else None for b, tip in enumerate(tips)]
            if not drafting:
                break
            q = sampling.probs(torch.cat([rows[b][:1] for b in drafting]))
            tokens = draw(q, sampling, [generators[b] for b in drafting])
            # one read per draft position for the whole batch: the tokens and their draft log-probs
            picked, logps = torch.stack([tokens.double(), q.gather(1, tokens[:, None])[:, 0].log().double()]).tolist()
            for i, b in enumerate(drafting):
                if not sampling.greedy:
                    trees[b].child_dists[tips[b]] = q[i]
                tips[b] = trees[b].add(tips[b], int(picked[i]), logps[i] if not sampling.greedy else 0.0)
        return trees

    def _grow_on_device(self, drafter, contexts, roots, sampling, generators) -> list[DraftTree]:
        """The loop above for a drafter that always proposes (a small LM): each drawn token
        is fed back as a device tensor and the chains are read back once, the same draws
        from the same generators in the same order."""
        logits = drafter.root_logits(contexts, roots)
        batch = len(roots)
        parents = torch.zeros(batch, 1, dtype=torch.long, device=logits.device)
        drawn, logps, dists = [], [], []
        for depth in range(self.gamma):
            if depth:
                logits = drafter.level_logits(drawn[-1][:, None], parents)[:, 0]
            q = sampling.probs(logits)
            tokens = draw(q, sampling, generators)
            drawn.append(tokens)
            logps.append(q.gather(1, tokens[:, None])[:, 0].log())
            dists.append(q)
        picked, row_logps = torch.stack(
            [torch.stack(drawn, dim=1).double(), torch.stack(logps, dim=1).double()]
        ).tolist()
        trees = []
        for b, root in enumerate(roots):
            tree = DraftTree.root(root)
            for depth, (token, logp) in enumerate(zip(picked[b], row_logps[b])):
                if not sampling.greedy:
                    tree.child_dists[depth] = dists[depth][b]
                tree.add(depth, int(token), logp if not sampling.greedy else 0.0)
            trees.append(tree)
        return trees


def draw(q: torch.Tensor, sampling, generators) -> torch.Tensor:
    """One token per row of `q` [rows, V]: the argmax when greedy, else a draw from row i
    with generators[i], so a host-grown and a device-grown chain draw alike."""
    if sampling.greedy:
        return q.argmax(-1)
    return torch.cat([torch.multinomial(row, 1, generator=generator) for row, generator in zip(q, generators)])
