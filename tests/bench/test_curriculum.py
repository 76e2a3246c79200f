"""bench/curriculum.py's analysis on synthetic curves: spread, steps to reach a loss, the tests and their Holm
correction, what the validation windows cover, tier agreement."""
from __future__ import annotations

import json
import sys

import numpy as np
import pytest

from bench import curriculum
from tests.fixtures.lm_corpus import one_torch_thread, synthetic_docs, write_docs  # noqa: F401 (fixture)


def test_spread_is_mean_sample_std_and_range():
    s = curriculum.spread([1.0, 2.0, 3.0])
    assert s == {"n": 3, "mean": 2.0, "std": 1.0, "min": 1.0, "max": 3.0}
    assert curriculum.spread([4.0])["std"] == 0.0


def test_steps_to_reach_interpolates_between_eval_points():
    steps, losses = [0, 10, 20, 30], [8.0, 6.0, 5.0, 4.5]
    assert curriculum.steps_to_reach(steps, losses, 5.5) == pytest.approx(15.0)  # halfway from 6.0 at 10 to 5.0 at 20
    assert curriculum.steps_to_reach(steps, losses, 5.0) == pytest.approx(20.0)
    assert curriculum.steps_to_reach(steps, losses, 9.0) == 0.0  # already there at the first eval
    assert curriculum.steps_to_reach(steps, losses, 4.0) is None  # never reached
    # a curve that dips below, comes back up and goes below again: the first crossing counts
    assert curriculum.steps_to_reach([0, 10, 20, 30], [6.0, 4.0, 6.0, 3.0], 5.0) == pytest.approx(5.0)


def test_welch_and_permutation_tests():
    a, b = [5.0, 5.1, 5.2], [4.0, 4.1, 4.2]
    welch = curriculum.welch(a, b)
    assert welch["t"] == pytest.approx(1.0 / np.sqrt(0.01 / 3 + 0.01 / 3)) and welch["df"] == pytest.approx(4.0)
    assert welch["p"] < 0.001
    perm = curriculum.permutation_p(a, b)
    # completely separated groups: only the observed split and its mirror are as extreme -> 2 / 20
    assert perm == {"p": pytest.approx(0.1), "splits": 20, "min_p": pytest.approx(0.1)}
    assert curriculum.permutation_p([1.0, 2.0, 3.0], [1.0, 2.0, 3.0])["p"] == 1.0
    assert curriculum.welch([1.0, 2.0, 3.0], [1.5, 2.5, 2.0])["p"] > 0.5


def test_holm_matches_the_textbook_example():
    # Holm (1979) as on Wikipedia's page: 4 tests, sorted 0.005, 0.01, 0.03, 0.04 times 4, 3, 2, 1
    assert curriculum.holm([0.01, 0.04, 0.03, 0.005]) == pytest.approx([0.03, 0.06, 0.06, 0.02])
    # at alpha 0.05 the two smallest are rejected, as in the step-down procedure (0.005 < 0.05/4, 0.01 < 0.05/3,
    # 0.03 > 0.05/2 stops it)
    assert [p < 0.05 for p in curriculum.holm([0.01, 0.04, 0.03, 0.005])] == [True, False, False, True]
    assert curriculum.holm([0.02]) == [0.02] and curriculum.holm([]) == []


def test_holm_is_monotone_capped_at_one_and_passes_none_through():
    raw = [0.2, 0.001, 0.04, 0.9, 0.04, 0.5, 0.011]
    adjusted = curriculum.holm(raw)
    assert all(a >= p for a, p in zip(adjusted, raw))
    by_raw = [a for _, a in sorted(zip(raw, adjusted))]
    assert by_raw == sorted(by_raw)  # a smaller raw p never gets a larger adjusted p
    assert adjusted[4] == adjusted[2]  # ties stay tied
    assert curriculum.holm([0.4, 0.7, 0.9]) == [1.0, 1.0, 1.0]  # 1.2, 1.4 and 0.9 -> max so far, capped
    assert max(curriculum.holm([0.3] * 5)) == 1.0
    # None is a test that could not run: it stays None and does not count in m
    assert curriculum.holm([None, 0.01, None, 0.04]) == pytest.approx([None, 0.02, None, 0.04])


def test_val_coverage_counts_the_trainers_windows():
    setup = {"eval_windows": 4, "seq_len": 10, "val_tokens": {"easy": 100, "medium": 35, "hard": 10}}
    cov = curriculum.val_coverage(setup)
    # easy: 90 start positions, non-overlapping from 0 -> 9 windows, the first 4 kept; medium: starts 0, 10, 20;
    # hard: too short for one window (11 tokens)
    assert cov["windows"] == {"easy": 4, "medium": 3, "hard": 0}
    assert cov["tokens"] == {"easy": 40, "medium": 30, "hard": 0} and cov["share"] == pytest.approx(70 / 145)
    text = curriculum.validation_text(setup)
    assert text.startswith("the first 4 windows of each tier of the perplexity stage's val split")
    assert "medium has only 3" in text and "70 of the split's 145 tokens, 48%" in text
    # a stored setup without val token counts: no share is made up
    assert curriculum.val_coverage({"eval_windows": 4, "seq_len": 10}) is None
    assert curriculum.validation_text({"eval_windows": 4}) == \
        "the first 4 windows of each tier of the perplexity stage's val split"


def curve(final: float) -> list[float]:
    return [8.0, (8.0 + final) / 2, final]


def test_compare_arms_against_the_uniform_baseline():
    def runs(finals, offset=0.0):
        return [{"seed": i, "steps": [0, 50, 100],
                 "loss": {"all": curve(f), "easy": curve(f - 1 + offset), "medium": curve(f), "hard": curve(f + 1)}}
                for i, f in enumerate(finals)]

    result = curriculum.compare_arms({"uniform": runs([5.0, 5.02, 4.98]), "better": runs([4.50, 4.52, 4.48]),
                                      "same": runs([5.01, 4.97, 5.03])})
    assert result["target_loss"] == pytest.approx(5.0)
    better, same = result["arms"]["better"], result["arms"]["same"]
    assert better["diff_vs_baseline"] == pytest.approx(-0.5) and better["significant"] and better["significant_raw"]
    assert not same["significant"] and same["welch"]["p"] > 0.5
    # the same test per validation set
    assert better["per_set"]["hard"]["diff"] == pytest.approx(-0.5) and better["per_set"]["hard"]["significant"]
    assert set(better["per_set"]) == {"all", "easy", "medium", "hard"} and not same["per_set"]["easy"]["significant"]
    # one family: 2 arms x 4 val sets, Holm over all 8 Welch p-values; the `all` row repeats its per-set test
    assert result["correction"]["method"] == "holm" and result["correction"]["num_tests"] == 8
    tests = [t for arm in ("better", "same") for t in result["arms"][arm]["per_set"].values()]
    assert [t["p_holm"] for t in tests] == pytest.approx(curriculum.holm([t["p"] for t in tests]))
    assert better["welch"]["p_holm"] == better["per_set"]["all"]["p_holm"] > better["welch"]["p"]
    assert better["permutation"]["p"] == better["per_set"]["all"]["p_perm"] == pytest.approx(0.1)
    # the better arm reaches 5.0 before its last eval point (interpolated), the uniform arm at about its end
    assert all(50 < s < 100 for s in better["steps_to_target"]) and better["reached"] == "3/3"
    assert result["arms"]["uniform"]["final_loss"]["all"]["mean"] == pytest.approx(5.0)
    uniform = result["arms"]["uniform"]["steps_to_target"]  # finals 5.0, 5.02, 4.98 against their mean 5.0
    assert uniform[0] == pytest.approx(100) and uniform[1] is None and 50 < uniform[2] < 100
    assert result["arms"]["uniform"]["reached"] == "2/3" and "welch" not in result["arms"]["uniform"]


def test_significant_follows_the_holm_p_not_the_raw_one():
    """An arm whose raw p is below alpha alone but not after correcting for the family is not significant."""
    def runs(finals):
        return [{"seed": i, "steps": [0, 100], "loss": {s: [8.0, f] for s in ("all", "easy", "medium", "hard")}}
                for i, f in enumerate(finals)]

    result = curriculum.compare_arms({"uniform": runs([5.0, 5.05, 4.95]), "a": runs([5.13, 5.18, 5.08]),
                                      "b": runs([5.0, 5.05, 4.95])})
    row = result["arms"]["a"]
    assert row["welch"]["p"] < 0.05 < row["welch"]["p_holm"]
    assert row["significant_raw"] and not row["significant"]
    assert all(t["significant_raw"] and not t["significant"] for t in row["per_set"].values())


def test_restat_recomputes_the_statistics_of_the_stored_runs_and_keeps_the_rest(tmp_path, monkeypatch):
    def runs(finals):
        return [{"seed": i, "steps": [0, 100], "loss": {s: [8.0, f + d] for s, d in
                                                        (("all", 0), ("easy", -0.4), ("medium", 0), ("hard", 0.3))},
                 "train_loss": f, "wall_s": 1.0, "cpu_s": 1.0} for i, f in enumerate(finals)]

    stored_runs = {"uniform": runs([5.0, 5.05, 4.95]), "moving": runs([5.13, 5.18, 5.08])}
    setup = {"preset": "debug", "num_params": 1000, "steps": 100, "demo_steps": 400, "warmup_steps": 10,
             "global_batch": 2, "seq_len": 10, "tokens_per_arm": 2000, "threads": 1, "precision": "fp32",
             "seeds": [0, 1, 2], "eval_every": 100, "eval_windows": 4, "uniform_ratios": [0.4, 0.35, 0.25],
             "train_tokens": {"easy": 400, "medium": 350, "hard": 250},
             "val_tokens": {"easy": 100, "medium": 100, "hard": 100}}
    study = {"bench": "curriculum", "command": "python -m bench.curriculum", "date": "2026-01-02 03:04 UTC",
             "commit": "abc1234", "changed_files": [],
             "machine": {"cpu": "test CPU", "cores": 2, "cpu_flags": [], "memory_gb": 8.0, "python": "3.11",
                         "platform": "Linux", "torch": "2"}, "load": {"start": [0.5, 0.5, 0.5]},
             "wall_s": 60.0, "cpu_s": 60.0, "setup": setup, "complete": True,
             "runs": stored_runs, "comparison": {"old": True}, "stability": None, "contents": None, "limits": []}
    (tmp_path / "study.json").write_text(json.dumps(study))
    monkeypatch.setattr(sys, "argv", ["bench/curriculum.py", "--restat", "--out", str(tmp_path / "study")])
    curriculum.restat(tmp_path / "study")
    result = json.loads((tmp_path / "study.json").read_text())
    assert result["runs"] == stored_runs and result["setup"] == setup
    assert {k: result[k] for k in ("command", "date", "commit", "machine")} == {
        k: study[k] for k in ("command", "date", "commit", "machine")}  # the training runs' provenance stays
    comparison = result["comparison"]
    assert comparison["correction"]["num_tests"] == 4 and "p_holm" in comparison["arms"]["moving"]["welch"]
    assert set(result["statistics"]) == {"commit", "date", "command"}
    assert result["statistics"]["command"].startswith("python -m bench.curriculum --restat")
    md = (tmp_path / "study.md").read_text()
    assert "`python -m bench.curriculum`, 2026-01-02 03:04 UTC, commit abc1234." in md
    assert "Machine: test CPU, 2 cores" in md and "torch 2" in md
    assert f"Statistics recomputed from the stored runs by commit {result['statistics']['commit'][:7]}" in md
    assert "| Welch p | Holm p | perm. p |" in md and "Holm-corrected over 4 tests, alpha 0.05" in md
    # 4 windows x 10 predicted tokens of each tier's 100 val tokens
    assert "the first 4 windows of each tier of the perplexity stage's val split" in md
    assert "120 of the split's 300 tokens, 40%" in md


def test_restat_refuses_a_study_that_records_no_commit(tmp_path, monkeypatch):
    """A results file written before the provenance stamp cannot be restated: its runs' commit is unknown."""
    old = {"command": "python -m bench.curriculum", "date": "2026-01-02 03:04 UTC", "machine": {"cpus": 2},
           "runs": {}, "setup": {}}
    (tmp_path / "study.json").write_text(json.dumps(old))
    monkeypatch.setattr(sys, "argv", ["bench/curriculum.py", "--restat", "--out", str(tmp_path / "study")])
    with pytest.raises(SystemExit, match=r"study\.json records no commit .*rerun the study"):
        curriculum.restat(tmp_path / "study")
    assert json.loads((tmp_path / "study.json").read_text()) == old and not (tmp_path / "study.md").exists()


def test_tier_agreement_per_language():
    rng = np.random.default_rng(0)
    ppl = np.exp(rng.normal(4, 1, size=300))
    langs = np.array(["en"] * 150 + ["zh"] * 150, dtype=object)
    noisy = ppl * np.exp(np.where(langs == "zh", rng.normal(0, 3, size=300), 0.0))  # en: the same order
    out = curriculum.tier_agreement(ppl, noisy, langs, (33.3, 66.7), min_docs=10)
    assert out["en"]["spearman"] == pytest.approx(1.0) and out["en"]["same_tier"] == 1.0
    assert out["en"]["two_tiers_apart"] == 0.0 and np.trace(out["en"]["confusion"]) == 150
    assert out["zh"]["spearman"] < 0.8 and out["zh"]["same_tier"] < 1.0 and out["zh"]["docs"] == 150


def test_stability_scores_every_variant(tmp_path, one_torch_thread):
    """Each variant draws its own reference subset from the same documents (a second draw on one corpus
    once failed: the subset is a column the corpus keeps)."""
    import argparse

    import yaml

    from stages import tokenizer
    from tests.conftest import ROOT
    docs = synthetic_docs(120, seed=4, noisy_share=0.2)
    docs_dir = write_docs(tmp_path / "docs", docs, rows_per_part=60)
    tokenizer.run(tokenizer.Params(input_dir=str(docs_dir), out_dir=str(tmp_path / "tok"),
                                   metrics_path=str(tmp_path / "tok.json"),
                                   detail_path=str(tmp_path / "tok.detail.json"), vocab_size=300))
    params_file = yaml.safe_load((ROOT / "params.yaml").read_text(encoding="utf-8"))
    reference = params_file["perplexity"]["reference"]
    params_file["perplexity"]["reference"] = {**reference, "preset": "debug", "steps": 2, "batch_size": 2,
                                              "optim": {**reference["optim"], "warmup_steps": 1}}
    params_file["perplexity"].update({"min_docs_per_lang": 1, "max_score_tokens": 64})
    published = {"id": np.array([d["id"] for d in docs], dtype=object),
                 "perplexity": np.linspace(2.0, 50.0, len(docs))}
    args = argparse.Namespace(docs_dir=docs_dir, tokenizer_dir=tmp_path / "tok", threads=1, stability_docs=20,
                              subset_fractions=[0.15])
    out = curriculum.stability(args, params_file, tmp_path / "work", published)
    assert [v["name"] for v in out["variants"]] == [f"seed {params_file['perplexity']['seed'] + 1}", "subset 0.15"]
    for v in out["variants"]:
        assert v["reference_docs"] > 0 and set(v["per_lang"]) == {"en", "zh"}
