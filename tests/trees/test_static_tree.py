"""Static trees (trees/static.py): topologies from choice lists, release files read without running them, and each
depth's ranked candidates."""

import pytest
import torch

from specbench.drafters.medusa import MedusaDrafter
from specbench.engine.sampling import Sampling
from specbench.engine.tree import DraftTree
from specbench.errors import ConfigError
from specbench.trees.static import StaticTree, Topology, read_choices


class FixedDrafter(MedusaDrafter):
    """Heads whose outputs are given per step (to build trees by hand)."""

    def __init__(self, logits, on_device=True):
        self.feature_layers, self.forwards, self.grows_on_device = (), 0, on_device
        self.heads = [None] * logits.shape[1]
        self._logits = dict(enumerate(logits.unbind(1)))


def test_topology_from_choices():
    topology = Topology.from_choices([[1, 0], [0], [1], [0, 0], [0, 0, 2], [0, 0, 0], [0, 0, 1]])
    assert topology.choices == ((0,), (1,), (0, 0), (1, 0), (0, 0, 0), (0, 0, 1), (0, 0, 2))
    assert topology.parents == (-1, 0, 0, 1, 2, 3, 3, 3)
    assert topology.depths == (0, 1, 1, 2, 2, 3, 3, 3)
    assert topology.ranks == (-1, 0, 1, 0, 0, 0, 1, 2)
    assert topology.top_k == (2, 1, 1, 3, 0, 0, 0, 0)
    assert topology.expanded == ((0,), (1, 2), (3,))
    tree = DraftTree(tokens=[0] * 8, parents=list(topology.parents), depths=list(topology.depths), logps=[0.0] * 8)
    assert torch.equal(topology.ancestors, tree.ancestor_mask())


@pytest.mark.parametrize(
    "choices,message",
    [
        ([[0], [0, 1, 0]], "has no parent (0, 1)"),
        ([[0], [0]], "duplicate"),
        ([[0], [-1]], "ranks >= 0"),
        ([], "non-empty"),
    ],
)
def test_bad_choice_lists_are_one_clear_error(choices, message):
    with pytest.raises(
        ConfigError, match=r"method\.tree\.choices: .*" + message.replace("(", r"\(").replace(")", r"\)")
    ):
        Topology.from_choices(choices)


def test_choices_are_read_from_a_release_file_without_running_it(tmp_path):
    source = tmp_path / "choices.py"
    source.write_text("import os\nos.remove('nothing')\nsmall_tree = [[0], [1], [0, 0]]\nother = [[0]]\n")
    assert read_choices(str(source), "small_tree") == [[0], [1], [0, 0]]
    assert StaticTree(choices_file=str(source), choices_name="other").topology.choices == ((0,),)
    with pytest.raises(ConfigError, match="assigns no missing"):
        read_choices(str(source), "missing")


def test_a_static_tree_can_keep_the_first_nodes_of_its_list():
    full = [[0], [1], [2], [0, 0], [0, 1], [1, 0], [0, 0, 0]]
    assert StaticTree(full, size=4).topology.choices == ((0,), (1,), (2,), (0, 0))
    assert StaticTree(list(reversed(full)), size=2).topology.choices == ((0,), (1,))  # list order does not matter
    assert StaticTree(full, size=99).topology.choices == StaticTree(full).topology.choices
    with pytest.raises(ConfigError, match=r"^method\.tree\.size: must be an integer >= 1"):
        StaticTree(full, size=0)
    from specbench.engine.candidates import candidates

    options = candidates({"_target_": "specbench.trees.static.StaticTree", "choices": full, "size": "auto"})
    assert [o["size"] for o in options][:4] == [1, 2, 3, 4] and all(o["choices"] == full for o in options)


@pytest.mark.parametrize("on_device", [True, False])
def test_static_tree_takes_each_depths_ranked_candidates(on_device):
    """The same tree whether it is filled on the device (one read) or depth by depth on the host."""
    # head 0 ranks tokens 5 > 7 > 9, head 1 ranks 11 > 3, head 2 ranks 4
    logits = torch.full((1, 3, 16), -10.0)
    logits[0, 0, [5, 7, 9]] = torch.tensor([3.0, 2.0, 1.0])
    logits[0, 1, [11, 3]] = torch.tensor([2.0, 1.0])
    logits[0, 2, 4] = 5.0
    tree = StaticTree([[0], [1], [2], [0, 0], [0, 1], [1, 0], [0, 0, 0]]).grow(
        FixedDrafter(logits, on_device), [[1]], [8], Sampling(), [None]
    )[0]
    assert tree.tokens == [8, 5, 7, 9, 11, 3, 11, 4]
    assert tree.parents == [-1, 0, 0, 0, 1, 1, 2, 4]
    logp = torch.log_softmax(logits[0], -1)
    assert tree.logps[7] == pytest.approx(float(logp[0, 5] + logp[1, 11] + logp[2, 4]))
    with pytest.raises(ConfigError, match="deeper than the 3 Medusa heads" if on_device else "nothing at depth 4"):
        StaticTree([[0], [0, 0], [0, 0, 0], [0, 0, 0, 0]]).grow(
            FixedDrafter(logits, on_device), [[1]], [8], Sampling(), [None]
        )
