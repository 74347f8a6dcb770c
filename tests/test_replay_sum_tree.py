"""``plr_gym.replay.SumTree.update``: batches with repeated leaves and sibling leaves, bit for bit."""

from __future__ import annotations

import numpy as np

from plr_gym.replay.sum_tree import SumTree


def test_update_equals_a_rebuild_from_the_final_leaves() -> None:
    rng = np.random.default_rng(0)
    capacity = 5000  # depth 13: three levels updated node by node below the top 10
    tree = SumTree(capacity)
    leaves = rng.random(capacity)
    leaves[::7] = 0.0  # zero leaves: excluded from the min tree
    tree.build(leaves)
    for _ in range(50):
        indices = rng.integers(0, 64, size=40)  # many repeats and many siblings in one batch
        values = rng.random(40) * (rng.random(40) < 0.8)
        tree.update(indices, values)
        leaves[indices] = values  # numpy assignment: the last of repeated indices wins
        expected = SumTree(capacity)
        expected.build(leaves)
        np.testing.assert_array_equal(tree.sums, expected.sums)
        np.testing.assert_array_equal(tree.mins, expected.mins)
    assert tree.min == float(leaves[leaves > 0].min())


def test_find_keeps_the_shape_of_its_values() -> None:
    """A scalar finds one leaf (a scalar), a batch one leaf per value, a 2-D batch keeps its shape."""
    tree = SumTree(4)
    tree.update(np.arange(4), np.array([1.0, 0.0, 2.0, 1.0]))
    found = tree.find(0.5)
    assert np.ndim(found) == 0 and found == 0
    assert tree.find([0.5, 1.0, 2.9, 3.5]).tolist() == [0, 2, 2, 3]
    values = np.array([[0.5], [2.9]])
    assert tree.find(values).tolist() == [[0], [2]]
    assert values.tolist() == [[0.5], [2.9]]  # the caller's values are not changed
