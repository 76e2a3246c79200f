from pathlib import Path

import numpy as np
import pytest

from stages.common.lm import doc_columns, order_stats
from stages.common.lm.corpus import ScoredCorpus, chunked, reference_subset
from stages.common.lm.doc_columns import DocColumns
from stages.common.runtime.digest import hash_unit


def test_chunked_keeps_order_and_the_short_tail():
    assert list(chunked(iter(range(7)), 3)) == [[0, 1, 2], [3, 4, 5], [6]]
    assert list(chunked([], 3)) == []


def columns_corpus(folder: Path, langs: list[str], **columns: np.ndarray) -> ScoredCorpus:
    """A ScoredCorpus of per-document columns only (no token shard), as tokenize_corpus writes them."""
    names, codes = np.unique(np.array(langs, dtype=object), return_inverse=True)
    doc_columns = DocColumns(folder)
    doc_columns.append(lang=codes.astype(np.int32), **columns)
    doc_columns.close()
    return ScoredCorpus(doc_columns, names.tolist(), "quality" in columns, None)


def test_reference_subset_without_scores_is_a_seeded_sample(tmp_path):
    def subset(seed: int, name: str) -> np.ndarray:
        units = np.array([hash_unit(f"ref:d{i}", seed, "little") for i in range(4000)])
        corpus = columns_corpus(tmp_path / name, ["en"] * 4000, ref_unit=units)
        return np.array(reference_subset(corpus, 0.3))

    mask = subset(0, "a")
    assert 0.28 < mask.mean() < 0.32 and (mask == subset(0, "b")).all() and (mask != subset(1, "c")).any()


@pytest.mark.parametrize("scan_docs, max_collect", [(None, None), (97, 5)])  # one chunk; many, bins refined
def test_reference_subset_by_score_is_the_stable_top_share_per_language(tmp_path, monkeypatch, scan_docs, max_collect):
    """Per language the top `fraction` by score, ties (and NaN, last) in input order: what a stable argsort of
    the scores of each language picks, whatever the chunking of the columns."""
    if scan_docs:
        monkeypatch.setattr(doc_columns, "SCAN_DOCS", scan_docs)
        monkeypatch.setattr(order_stats, "MAX_COLLECT", max_collect)
    rng = np.random.default_rng(3)
    langs = rng.choice(["en", "zh", "th"], size=1500, p=[0.6, 0.39, 0.01]).tolist()
    quality = np.round(rng.random(1500), 1)  # eleven distinct scores: ties everywhere
    quality[rng.integers(0, 1500, 30)] = np.nan
    got = np.array(reference_subset(columns_corpus(tmp_path, langs, quality=quality), 0.3))
    expected = np.zeros(1500, dtype=bool)
    for lang in set(langs):
        members = np.flatnonzero(np.array(langs) == lang)
        order = members[np.argsort(-quality[members], kind="stable")]
        expected[order[:max(1, round(0.3 * len(members)))]] = True
    assert (got == expected).all()
