"""The empty tree: plain autoregressive decoding through the same loop."""

from specbench.engine.tree import DraftTree


class Autoregressive:
    def build(self, drafter, context, root, sampling, generator) -> DraftTree:
        return DraftTree.root(root)
