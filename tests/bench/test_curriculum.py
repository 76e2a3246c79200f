"""bench/curriculum.py's analysis on synthetic curves: spread, steps to reach a loss, the tests, tier agreement."""
from __future__ import annotations

import numpy as np
import pytest

from tests.conftest import load_bench

bench = load_bench("curriculum")


def test_spread_is_mean_sample_std_and_range():
    s = bench.spread([1.0, 2.0, 3.0])
    assert s == {"n": 3, "mean": 2.0, "std": 1.0, "min": 1.0, "max": 3.0}
    assert bench.spread([4.0])["std"] == 0.0


def test_steps_to_reach_interpolates_between_eval_points():
    steps, losses = [0, 10, 20, 30], [8.0, 6.0, 5.0, 4.5]
    assert bench.steps_to_reach(steps, losses, 5.5) == pytest.approx(15.0)  # halfway from 6.0 at 10 to 5.0 at 20
    assert bench.steps_to_reach(steps, losses, 5.0) == pytest.approx(20.0)
    assert bench.steps_to_reach(steps, losses, 9.0) == 0.0  # already there at the first eval
    assert bench.steps_to_reach(steps, losses, 4.0) is None  # never reached
    # a curve that dips below, comes back up and goes below again: the first crossing counts
    assert bench.steps_to_reach([0, 10, 20, 30], [6.0, 4.0, 6.0, 3.0], 5.0) == pytest.approx(5.0)


def test_welch_and_permutation_tests():
    a, b = [5.0, 5.1, 5.2], [4.0, 4.1, 4.2]
    welch = bench.welch(a, b)
    assert welch["t"] == pytest.approx(1.0 / np.sqrt(0.01 / 3 + 0.01 / 3)) and welch["df"] == pytest.approx(4.0)
    assert welch["p"] < 0.001
    perm = bench.permutation_p(a, b)
    # completely separated groups: only the observed split and its mirror are as extreme -> 2 / 20
    assert perm == {"p": pytest.approx(0.1), "splits": 20, "min_p": pytest.approx(0.1)}
    assert bench.permutation_p([1.0, 2.0, 3.0], [1.0, 2.0, 3.0])["p"] == 1.0
    assert bench.welch([1.0, 2.0, 3.0], [1.5, 2.5, 2.0])["p"] > 0.5


def curve(final: float) -> list[float]:
    return [8.0, (8.0 + final) / 2, final]


def test_compare_arms_against_the_uniform_baseline():
    def runs(finals, offset=0.0):
        return [{"seed": i, "steps": [0, 50, 100],
                 "loss": {"all": curve(f), "easy": curve(f - 1 + offset), "medium": curve(f), "hard": curve(f + 1)}}
                for i, f in enumerate(finals)]

    result = bench.compare_arms({"uniform": runs([5.0, 5.02, 4.98]), "better": runs([4.50, 4.52, 4.48]),
                                 "same": runs([5.01, 4.97, 5.03])})
    assert result["target_loss"] == pytest.approx(5.0)
    better, same = result["arms"]["better"], result["arms"]["same"]
    assert better["diff_vs_baseline"] == pytest.approx(-0.5) and better["significant"]
    assert not same["significant"] and same["welch"]["p"] > 0.5
    # the same test per validation set
    assert better["per_set"]["hard"]["diff"] == pytest.approx(-0.5) and better["per_set"]["hard"]["significant"]
    assert set(better["per_set"]) == {"all", "easy", "medium", "hard"} and not same["per_set"]["easy"]["significant"]
    # the better arm reaches 5.0 before its last eval point (interpolated), the uniform arm at about its end
    assert all(50 < s < 100 for s in better["steps_to_target"]) and better["reached"] == "3/3"
    assert result["arms"]["uniform"]["final_loss"]["all"]["mean"] == pytest.approx(5.0)
    uniform = result["arms"]["uniform"]["steps_to_target"]  # finals 5.0, 5.02, 4.98 against their mean 5.0
    assert uniform[0] == pytest.approx(100) and uniform[1] is None and 50 < uniform[2] < 100
    assert result["arms"]["uniform"]["reached"] == "2/3" and "welch" not in result["arms"]["uniform"]


def test_tier_agreement_per_language():
    rng = np.random.default_rng(0)
    ppl = np.exp(rng.normal(4, 1, size=300))
    langs = np.array(["en"] * 150 + ["zh"] * 150, dtype=object)
    noisy = ppl * np.exp(np.where(langs == "zh", rng.normal(0, 3, size=300), 0.0))  # en: the same order
    out = bench.tier_agreement(ppl, noisy, langs, (33.3, 66.7), min_docs=10)
    assert out["en"]["spearman"] == pytest.approx(1.0) and out["en"]["same_tier"] == 1.0
    assert out["en"]["two_tiers_apart"] == 0.0 and np.trace(out["en"]["confusion"]) == 150
    assert out["zh"]["spearman"] < 0.8 and out["zh"]["same_tier"] < 1.0 and out["zh"]["docs"] == 150
