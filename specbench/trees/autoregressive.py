"""The empty tree: plain autoregressive decoding through the same loop."""

from specbench.engine.parts import TreePolicy
from specbench.engine.tree import DraftTree


class Autoregressive(TreePolicy):
    def grow(self, drafter, contexts, roots, sampling, generators) -> list[DraftTree]:
        return [DraftTree.root(root) for root in roots]
