"""Runner sweeps pin each method's paper shape unless the sweep sets it."""

from specbench.replicate.sweep import Sweep, pin


def test_runners_pin_paper_shapes_unless_a_sweep_sets_them():
    defaults = {
        "eagle3": {"config.method.tree.depth": 8, "config.method.tree.total_tokens": 60},
        "talon": {"config.method.tree.budget": 60},
    }
    pinned = pin([Sweep("t", ["method=talon,eagle3", "method.tree.total_tokens=32"])], defaults)
    assert [s.overrides for s in pinned] == [
        ["method=talon", "method.tree.total_tokens=32", "method.tree.budget=60"],
        ["method=eagle3", "method.tree.total_tokens=32", "method.tree.depth=8"],
    ]
