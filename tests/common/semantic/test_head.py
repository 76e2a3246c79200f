"""Choosing the filter's threshold from the head's validation scores: the best F1 of the drop class, or the
most drops at a target precision."""
import numpy as np
import pytest

from stages.common.semantic.head import choose_threshold


@pytest.mark.parametrize("p_keep, is_drop, target, expected", [
    ([0.01, 0.02, 0.03, 0.6, 0.9, 0.95], [1, 1, 1, 0, 0, 0], None, 0.315),  # separable: mid-gap
    ([0.01, 0.5, 0.4, 0.6, 0.9, 0.95], [1, 1, 0, 0, 0, 0], None, 0.55),  # best F1 drops one keep
    ([0.01, 0.5, 0.4, 0.6, 0.9, 0.95], [1, 1, 0, 0, 0, 0], 1.0, 0.205),  # precision 1: drop only the sure one
])
def test_threshold_selection(p_keep, is_drop, target, expected):
    got = choose_threshold(np.array(p_keep), np.array(is_drop, dtype=bool), target)
    assert got == pytest.approx(expected)
