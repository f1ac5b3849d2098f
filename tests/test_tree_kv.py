"""Tree attention mask, depth positions and in-place KV commit on hand-built trees."""

import torch

from specbench.engine.lm import TreeLM
from specbench.engine.tree import DraftTree


def hand_tree() -> DraftTree:
    #        0(root=7)
    #       /         \
    #     1(11)       2(12)
    #    /    \          \
    #  3(21)  4(22)      5(23)
    #           |
    #         6(31)
    tree = DraftTree.root(7)
    for parent, token in [(0, 11), (0, 12), (1, 21), (1, 22), (2, 23), (4, 31)]:
        tree.add(parent, token)
    return tree


def test_tree_structure():
    tree = hand_tree()
    assert tree.depths == [0, 1, 1, 2, 2, 2, 3]
    assert tree.path_to(6) == [0, 1, 4, 6]
    assert tree.children(1) == [3, 4]
    assert not tree.is_chain()
    mask = tree.ancestor_mask()
    assert mask[6].nonzero().flatten().tolist() == [0, 1, 4, 6]
    assert mask[5].nonzero().flatten().tolist() == [0, 2, 5]


def test_tree_mask_in_the_cache(target):
    lm = TreeLM(target)
    lm.forward(context=[5, 6, 8])
    tree = hand_tree()
    lm.forward(tree=tree, nodes=[0, 1, 2])
    mask = lm._mask(0, tree, [3, 4, 5, 6])[0, 0]
    # rows: new nodes 3 4 5 6; columns: 3 context, cached nodes 0 1 2, new nodes 3 4 5 6
    assert mask.shape == (4, 10) and mask[:, :3].all()
    assert mask[0].tolist()[3:] == [True, True, False, True, False, False, False]
    assert mask[3].tolist()[3:] == [True, True, False, False, True, False, True]


def sequential_logits(model, ids):
    with torch.inference_mode():
        return model(input_ids=torch.tensor([ids])).logits[0]


def test_every_node_sees_exactly_its_path(target):
    context = [5, 6, 8, 9, 10]
    tree = hand_tree()
    lm = TreeLM(target)
    with torch.inference_mode():
        lm.forward(context=context)
        logits = lm.forward(tree=tree, nodes=range(len(tree)))
    for node in range(len(tree)):
        path_tokens = [tree.tokens[n] for n in tree.path_to(node)]
        expected = sequential_logits(target, context + path_tokens)[-1]
        torch.testing.assert_close(logits[node], expected, rtol=1e-4, atol=1e-4)


def test_tree_fed_in_two_parts_equals_one_forward(target):
    context, tree = [5, 6, 8], hand_tree()
    whole, split = TreeLM(target), TreeLM(target)
    with torch.inference_mode():
        whole.forward(context=context)
        all_logits = whole.forward(tree=tree, nodes=range(len(tree)))
        split.forward(context=context)
        first = split.forward(tree=tree, nodes=[0, 1, 2])
        second = split.forward(tree=tree, nodes=[3, 4, 5, 6])
    torch.testing.assert_close(torch.cat([first, second]), all_logits, rtol=1e-4, atol=1e-4)


def test_commit_keeps_exactly_the_accepted_path(target):
    context, tree = [5, 6, 8], hand_tree()
    lm = TreeLM(target)
    with torch.inference_mode():
        lm.forward(context=context)
        lm.forward(tree=tree, nodes=range(len(tree)))
        kept = lm.commit([0, 1, 4, 6])
        assert kept == 4 and lm.committed == 7 and lm.cache.get_seq_length() == 7
        next_logits = lm.forward(context=[40])[-1]
    committed = context + [7, 11, 22, 31, 40]
    torch.testing.assert_close(next_logits, sequential_logits(target, committed)[-1], rtol=1e-4, atol=1e-4)


def test_commit_of_a_partly_cached_path(target):
    """A drafter that never read the accepted leaf keeps only the cached prefix."""
    lm = TreeLM(target)
    tree = hand_tree()
    with torch.inference_mode():
        lm.forward(context=[5, 6])
        lm.forward(tree=tree, nodes=[0, 1, 2])
        assert lm.commit([0, 1, 4]) == 2
        assert lm.committed == 4
        logits = lm.forward(context=[22, 50])[-1]
    torch.testing.assert_close(logits, sequential_logits(target, [5, 6, 7, 11, 22, 50])[-1], rtol=1e-4, atol=1e-4)
