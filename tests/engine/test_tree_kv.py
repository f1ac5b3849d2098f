"""Tree attention mask, depth positions and in-place KV commit on hand-built trees, for
one row and for batches whose rows have different context lengths, trees and accepted
path lengths (the batched cache then holds padding and masked holes)."""

import pytest
import torch

from specbench.engine.lean import LeanTreeLM
from specbench.engine.lm import TreeLM
from specbench.engine.tree import DraftTree

LMS = {"hf": TreeLM, "lean": LeanTreeLM}


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


def chain_tree(root: int, tokens: list[int]) -> DraftTree:
    tree = DraftTree.root(root)
    for token in tokens:
        tree.add(len(tree) - 1, token)
    return tree


def bushy_tree() -> DraftTree:
    #      0(root=3)
    #    /    |     \
    #  1(40) 2(41)  3(42)
    #    |           |   \
    #  4(50)       5(51) 6(52)
    #               |
    #             7(60)
    tree = DraftTree.root(3)
    for parent, token in [(0, 40), (0, 41), (0, 42), (1, 50), (3, 51), (3, 52), (5, 60)]:
        tree.add(parent, token)
    return tree


def test_tree_structure():
    tree = hand_tree()
    assert tree.depths == [0, 1, 1, 2, 2, 2, 3]
    assert tree.path_to(6) == [0, 1, 4, 6]
    assert tree.children(1) == [3, 4]
    mask = tree.ancestor_mask()
    assert mask[6].nonzero().flatten().tolist() == [0, 1, 4, 6]
    assert mask[5].nonzero().flatten().tolist() == [0, 2, 5]


def test_tree_mask_in_the_cache(target):
    lm = TreeLM(target)
    lm.forward(contexts=[[5, 6, 8]])
    tree = hand_tree()
    lm.forward(trees=[tree], nodes=[[0, 1, 2]])
    feed = lm.layout.feed([0], [tree], [[3, 4, 5, 6]])
    mask = feed.mask[0]
    # rows: new nodes 3 4 5 6; columns: 3 context, cached nodes 0 1 2, new nodes 3 4 5 6
    assert mask.shape == (4, 10) and mask[:, :3].all()
    assert mask[0].tolist()[3:] == [True, True, False, True, False, False, False]
    assert mask[3].tolist()[3:] == [True, True, False, False, True, False, True]
    # positions: committed length 3 + depth
    assert feed.positions[0].tolist() == [5, 5, 5, 6]


def test_tree_mask_in_a_batched_cache(target):
    """Row 0's context is shorter than row 1's: its padding columns are never attended,
    and each row's nodes see its own context and its own ancestors only."""
    lm = TreeLM(target)
    lm.reset(batch_size=2)
    lm.forward(contexts=[[5, 6, 8], [5, 6, 8, 9, 10]])
    trees = [hand_tree(), chain_tree(4, [11, 12, 13, 14, 15, 16])]
    lm.forward(trees=trees, nodes=[[0, 1, 2], [0, 1]])
    assert lm.layout.lengths == [3, 5]
    assert lm.layout.node_columns == [{0: 5, 1: 6, 2: 7}, {0: 5, 1: 6}]
    feed = lm.layout.feed([0, 0], trees, [[3, 4, 5, 6], [2, 3]])
    # columns: 5 context (row 0: 3 + 2 padding), 3 tree columns, then the 4 new ones
    assert feed.mask.shape == (2, 4, 12)
    row0, row1 = feed.mask[0], feed.mask[1]
    assert row0[:, :3].all() and not row0[:, 3:5].any()
    assert row0[0].tolist()[5:] == [True, True, False, True, False, False, False]
    assert row0[3].tolist()[5:] == [True, True, False, False, True, False, True]
    assert row1[:2, :5].all()
    assert row1[0].tolist()[5:] == [True, True, False, True, False, False, False]  # node 2: 0 1 2
    assert row1[1].tolist()[5:] == [True, True, False, True, True, False, False]  # node 3: 0 1 2 3
    assert not row1[:2, 10:].any()  # row 1 feeds 2 of the 4 new columns: never its padding
    assert feed.positions.tolist() == [[5, 5, 5, 6], [7, 8, 0, 0]]
    # 1 + the largest position, from the host's bookkeeping: RoPE tables size by it unread
    assert feed.position_bound == 9


def sequential_logits(model, ids):
    with torch.inference_mode():
        return model(input_ids=torch.tensor([ids])).logits[0]


# rows of different context lengths and different trees
CONTEXTS = [[5, 6, 8, 9, 10], [5, 6], [17, 3, 9, 44, 12, 70, 8, 8, 1]]


def row_trees():
    return [hand_tree(), bushy_tree(), chain_tree(9, [30, 31, 32])]


@pytest.mark.parametrize("lm_class", ["hf", "lean"])
@pytest.mark.parametrize("batch", [1, 3])
def test_every_node_sees_exactly_its_path(target, lm_class, batch):
    contexts, trees = CONTEXTS[:batch], row_trees()[:batch]
    lm = LMS[lm_class](target)
    lm.reset(batch)
    with torch.inference_mode():
        lm.forward(contexts=contexts)
        logits = lm.forward(trees=trees, nodes=[range(len(t)) for t in trees])
    assert [z.shape[0] for z in logits] == [len(t) for t in trees]
    for context, tree, row_logits in zip(contexts, trees, logits):
        for node in range(len(tree)):
            path_tokens = [tree.tokens[n] for n in tree.path_to(node)]
            expected = sequential_logits(target, context + path_tokens)[-1]
            torch.testing.assert_close(row_logits[node], expected, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("lm_class", ["hf", "lean"])
@pytest.mark.parametrize("batch", [1, 3])
def test_tree_fed_in_two_parts_equals_one_forward(target, lm_class, batch):
    contexts, trees = CONTEXTS[:batch], row_trees()[:batch]
    # per row: the first forward feeds a prefix of the nodes (the chain row none at all)
    first_nodes = [[0, 1, 2], [0, 1, 2, 3, 4], []][:batch]
    whole, split = LMS[lm_class](target), LMS[lm_class](target)
    whole.reset(batch)
    split.reset(batch)
    with torch.inference_mode():
        whole.forward(contexts=contexts)
        all_logits = whole.forward(trees=trees, nodes=[range(len(t)) for t in trees])
        split.forward(contexts=contexts)
        first = split.forward(trees=trees, nodes=first_nodes)
        second = split.forward(trees=trees, nodes=[range(len(f), len(t)) for f, t in zip(first_nodes, trees)])
    for b in range(batch):
        parts = [z for z in (first[b], second[b]) if z is not None]
        assert (first[b] is None) == (not first_nodes[b])
        torch.testing.assert_close(torch.cat(parts), all_logits[b], rtol=1e-4, atol=1e-4)


def cache_columns(lm) -> int:
    return lm._rows if isinstance(lm, LeanTreeLM) else lm.cache.get_seq_length()


@pytest.mark.parametrize("lm_class", ["hf", "lean"])
def test_commit_keeps_exactly_the_accepted_path(target, lm_class):
    context, tree = [5, 6, 8], hand_tree()
    lm = LMS[lm_class](target)
    with torch.inference_mode():
        lm.forward(contexts=[context])
        lm.forward(trees=[tree], nodes=[range(len(tree))])
        lm.commit([[0, 1, 4, 6]])
        assert lm.layout.lengths == [7] and cache_columns(lm) == 7
        assert lm.layout.node_columns == [{}]
        next_logits = lm.forward(contexts=[[40]])[0][-1]
    committed = context + [7, 11, 22, 31, 40]
    torch.testing.assert_close(next_logits, sequential_logits(target, committed)[-1], rtol=1e-4, atol=1e-4)


# Per row, two rounds of (tree, accepted path, next context tokens). Accepted lengths
# differ between rows in each round, so the shorter rows are left with masked holes,
# and the second round's trees are read on top of those holes.
ROUNDS = [
    (row_trees, [[0, 1, 4, 6], [0, 3], [0, 1, 2]], [[40], [41, 42], [43]]),
    (
        lambda: [bushy_tree(), hand_tree(), chain_tree(9, [30, 31, 32, 33])],
        [[0, 3], [0, 1, 4, 6], [0, 1, 2, 3, 4]],
        [[44, 45], [46], [47, 48, 49]],
    ),
]


def run_rounds(lm, rows: list[int]):
    """Feed CONTEXTS[rows], then the ROUNDS for those rows; per round the committed lengths and
    the logits after the next context, and finally the logits of every round's tree."""
    lm.reset(len(rows))
    kept, after, tree_logits = [], [], []
    with torch.inference_mode():
        lm.forward(contexts=[CONTEXTS[r] for r in rows])
        for make_trees, paths, nexts in ROUNDS:
            trees = [make_trees()[r] for r in rows]
            tree_logits.append(lm.forward(trees=trees, nodes=[range(len(t)) for t in trees]))
            lm.commit([paths[r] for r in rows])
            kept.append(list(lm.layout.lengths))
            after.append(lm.forward(contexts=[nexts[r] for r in rows]))
    return kept, after, tree_logits


def committed_text(row: int, rounds: int) -> list[int]:
    text = list(CONTEXTS[row])
    for make_trees, paths, nexts in ROUNDS[:rounds]:
        tree = make_trees()[row]
        text += [tree.tokens[n] for n in paths[row]] + nexts[row]
    return text


@pytest.mark.parametrize("lm_class", ["hf", "lean"])
def test_batched_commit_keeps_each_rows_path(target, lm_class):
    """Rows accept paths of different lengths: every row then continues exactly as if
    its accepted tokens had been fed as plain context, and as the row does alone."""
    lm = LMS[lm_class](target)
    kept, after, tree_logits = run_rounds(lm, [0, 1, 2])
    assert kept == [[5 + 4, 2 + 2, 9 + 3], [10 + 2, 6 + 4, 13 + 5]]  # context before the commit + the path
    assert lm.layout.lengths == [len(committed_text(r, 2)) for r in range(3)]
    for b in range(3):
        for round_index in range(2):
            text = committed_text(b, round_index + 1)
            assert after[round_index][b].shape[0] == 1  # the last context token's logits
            torch.testing.assert_close(
                after[round_index][b][-1], sequential_logits(target, text)[-1], rtol=1e-4, atol=1e-4
            )
        # the row done alone: same lengths and logits
        alone_kept, alone_after, alone_trees = run_rounds(LMS[lm_class](target), [b])
        assert [k[b] for k in kept] == [k[0] for k in alone_kept]
        for round_index in range(2):
            torch.testing.assert_close(after[round_index][b], alone_after[round_index][0], rtol=1e-5, atol=1e-5)
            torch.testing.assert_close(tree_logits[round_index][b], alone_trees[round_index][0], rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("lm_class", ["hf", "lean"])
def test_rows_leave_the_batch(target, lm_class):
    """After `keep`, the remaining rows (holes and all) continue as they would alone."""
    lm = LMS[lm_class](target)
    run_rounds(lm, [0, 1, 2])
    lm.keep([0, 2])
    assert lm.batch_size == 2 and lm.layout.lengths == [len(committed_text(r, 2)) for r in (0, 2)]
    with torch.inference_mode():
        trees = [hand_tree(), bushy_tree()]
        logits = lm.forward(trees=trees, nodes=[range(len(t)) for t in trees])
        lm.commit([[0, 2, 5], [0]])
        lm.keep([1])
        last = lm.forward(contexts=[[7, 8]])[0]
    for row, tree, row_logits in zip((0, 2), trees, logits):
        text = committed_text(row, 2)
        for node in range(len(tree)):
            expected = sequential_logits(target, text + [tree.tokens[n] for n in tree.path_to(node)])[-1]
            torch.testing.assert_close(row_logits[node], expected, rtol=1e-4, atol=1e-4)
    expected = sequential_logits(target, committed_text(2, 2) + [3, 7, 8])[-1]
    torch.testing.assert_close(last[-1], expected, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("lm_class", ["hf", "lean"])
def test_context_and_nodes_in_one_forward(target, lm_class):
    """As a draft LM reads after a commit: in one forward row 0 feeds new context then
    its tree, row 1 only tree nodes, row 2 only context. Every node still sees exactly
    its path, and committed paths of different lengths continue as plain context."""
    lm = LMS[lm_class](target)
    lm.reset(3)
    contexts = [[5, 6], [17, 3, 9, 44], [1, 2, 3]]
    trees = [hand_tree(), bushy_tree(), None]
    with torch.inference_mode():
        lm.forward(contexts=contexts)
        logits = lm.forward(contexts=[[8, 9, 10], [], [4]], trees=trees, nodes=[range(7), range(8), []])
        assert lm.layout.lengths == [5, 4, 4]
        lm.commit([[0, 1, 4], [0, 3, 5, 7], []])
        assert lm.layout.lengths == [8, 8, 4]
        after = lm.forward(contexts=[[40], [41], [42, 43]])
    texts = [[5, 6, 8, 9, 10], [17, 3, 9, 44]]
    for text, tree, row_logits in zip(texts, trees, logits):
        for node in range(len(tree)):
            expected = sequential_logits(target, text + [tree.tokens[n] for n in tree.path_to(node)])[-1]
            torch.testing.assert_close(row_logits[node], expected, rtol=1e-4, atol=1e-4)
    torch.testing.assert_close(logits[2][-1], sequential_logits(target, [1, 2, 3, 4])[-1], rtol=1e-4, atol=1e-4)
    texts = [[5, 6, 8, 9, 10, 7, 11, 22, 40], [17, 3, 9, 44, 3, 42, 51, 60, 41], [1, 2, 3, 4, 42, 43]]
    for text, row_logits in zip(texts, after):
        torch.testing.assert_close(row_logits[-1], sequential_logits(target, text)[-1], rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("lm_class", ["hf", "lean"])
def test_commit_of_a_partly_cached_path(target, lm_class):
    """A drafter that never read the accepted leaf keeps only the cached prefix."""
    lm = LMS[lm_class](target)
    tree = hand_tree()
    with torch.inference_mode():
        lm.forward(contexts=[[5, 6]])
        lm.forward(trees=[tree], nodes=[[0, 1, 2]])
        lm.commit([[0, 1, 4]])
        assert lm.layout.lengths == [4]  # the unread leaf is not kept
        logits = lm.forward(contexts=[[22, 50]])[0][-1]
    torch.testing.assert_close(logits, sequential_logits(target, [5, 6, 7, 11, 22, 50])[-1], rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("lm_class", ["hf", "lean"])
def test_commit_of_partly_cached_paths_in_a_batch(target, lm_class):
    """Row 0 read only part of its accepted path, row 1 all of it, row 2 only its root."""
    lm = LMS[lm_class](target)
    lm.reset(3)
    trees = [hand_tree(), hand_tree(), bushy_tree()]
    with torch.inference_mode():
        lm.forward(contexts=[[5, 6], [9, 8, 7, 6], [1]])
        lm.forward(trees=trees, nodes=[[0, 1, 2], range(7), [0]])
        lm.commit([[0, 1, 4], [0, 1, 4, 6], [0, 3, 5]])
        assert lm.layout.lengths == [4, 8, 2]
        logits = lm.forward(contexts=[[22, 50], [50], [42, 51, 50]])
    texts = [[5, 6, 7, 11, 22, 50], [9, 8, 7, 6, 7, 11, 22, 31, 50], [1, 3, 42, 51, 50]]
    for text, row_logits in zip(texts, logits):
        torch.testing.assert_close(row_logits[-1], sequential_logits(target, text)[-1], rtol=1e-4, atol=1e-4)
