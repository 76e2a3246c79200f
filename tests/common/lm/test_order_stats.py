"""Exact streamed order statistics: the same bits as np.percentile / np.median, in bounded memory."""
import tracemalloc

import numpy as np
import pytest

from stages.common.lm import order_stats
from stages.common.lm.order_stats import ALL, key_values, medians, percentiles, select, sortable_keys
from stages.common.lm.scoring import POOLED, compute_cutoffs, lang_codes, streamed_cutoffs


def chunked(values: np.ndarray, groups: np.ndarray, size: int):
    def chunks():
        for start in range(0, len(values), size):
            yield values[start:start + size], groups[start:start + size]
    return chunks


def tied_values(rng: np.random.Generator, n: int) -> np.ndarray:
    """Lognormal perplexities (>= 1), a third of them rounded so that many are equal, a few repeated outright."""
    values = 1 + rng.lognormal(4, 1.5, n)
    values[: n // 3] = np.round(values[: n // 3])
    values[rng.integers(0, n, n // 10)] = values[0]
    return rng.permutation(values)


def test_keys_sort_like_the_values():
    values = np.array([3.5, -0.0, 0.0, -2.0, np.inf, -np.inf, 1e-300, -1e-300, 7.0, np.nan, 2.0])
    keys = sortable_keys(values)
    finite = ~np.isnan(values)
    assert (np.argsort(keys[finite], kind="stable") == np.argsort(values[finite] + 0.0, kind="stable")).all()
    assert keys[np.isnan(values)] == np.iinfo(np.uint64).max
    np.testing.assert_array_equal(key_values(keys)[finite], values[finite] + 0.0)


@pytest.mark.parametrize("max_collect", [1 << 20, 64, 1])  # all collected at once; refined 16 bits at a time
@pytest.mark.parametrize("chunk", [7, 1000, 100_000])
def test_order_statistics_equal_a_sort(max_collect, chunk):
    rng = np.random.default_rng(chunk + max_collect)
    values = tied_values(rng, 5000)
    groups = rng.integers(-1, 3, len(values))  # -1: in no group
    chunks = chunked(values, groups, chunk)
    wanted = {g: [0, 1, 17, int((groups == g).sum()) - 1] for g in range(3)}
    wanted[ALL] = [0, 2500, int((groups >= 0).sum()) - 1]
    counts = {g: int((groups == g).sum()) for g in range(3)} | {ALL: int((groups >= 0).sum())}
    found = select(chunks, wanted, counts, max_collect)
    for g, ranks in wanted.items():
        ordered = np.sort(values[groups >= 0] if g == ALL else values[groups == g])
        assert [found[g, r] for r in ranks] == [ordered[r] for r in ranks]


@pytest.mark.parametrize("n", [1, 2, 3, 10, 101, 1000, 4097])
def test_percentiles_and_medians_are_numpys_bits(n):
    rng = np.random.default_rng(n)
    values = tied_values(rng, n)
    groups = np.zeros(n, dtype=np.int32)
    q = (0.5, 33.3, 50.0, 66.7, 99.5)
    for max_collect in (1 << 20, 3):
        got, count = percentiles(chunked(values, groups, 997), [0], q, max_collect)[0]
        assert count == n and got.tolist() == np.percentile(values, q).tolist()
        assert medians(chunked(values, groups, 997), [0], max_collect)[0] == np.median(values)


def test_a_nan_makes_the_group_nan_as_in_numpy():
    values = np.array([1.0, np.nan, 3.0, 4.0])
    (got, _), = percentiles(chunked(values, np.zeros(4, np.int32), 2), [0], (33.3, 66.7)).values()
    assert np.isnan(got).all() and np.isnan(np.percentile(values, (33.3, 66.7))).all()
    assert np.isnan(medians(chunked(values, np.zeros(4, np.int32), 2), [0])[0])


def reference_cutoffs(ppl, langs, q, min_docs):
    """compute_cutoffs as it was written on np.percentile over the arrays in memory."""
    cutoffs = {POOLED: tuple(np.percentile(ppl, q)) + (len(ppl), "pooled")}
    for lang in sorted(set(langs.tolist())):
        values = ppl[langs == lang]
        cutoffs[lang] = (tuple(np.percentile(values, q)) + (len(values), "lang") if len(values) >= min_docs
                         else cutoffs[POOLED][:2] + (len(values), "pooled"))
    return cutoffs


@pytest.mark.parametrize("seed", range(4))
def test_streamed_cutoffs_equal_np_percentile_with_ties_and_pooling(seed, monkeypatch):
    monkeypatch.setattr(order_stats, "MAX_COLLECT", 50)  # bins refined until they hold 50 values or fewer
    rng = np.random.default_rng(seed)
    sizes = {"en": 3000, "zh": 1200, "ja": 40, "th": 3}
    langs = rng.permutation(np.array([lang for lang, n in sizes.items() for _ in range(n)], dtype=object))
    ppl = tied_values(rng, len(langs))
    expected = reference_cutoffs(ppl, langs, (33.3, 66.7), 100)
    got = compute_cutoffs(ppl, langs, (33.3, 66.7), 100)
    assert {k: (c.easy_max, c.medium_max, c.num_docs, c.source) for k, c in got.items()} == expected
    # In chunks, with a subset left out (the 'reference' option): the subset's own percentiles.
    names, codes = lang_codes(langs)
    subset = rng.random(len(langs)) < 0.4
    streamed = streamed_cutoffs(chunked(ppl, np.where(subset, codes, -1), 333), names, (33.3, 66.7), 100)
    expected = reference_cutoffs(ppl[subset], langs[subset], (33.3, 66.7), 100)
    assert {k: (c.easy_max, c.medium_max, c.num_docs, c.source) for k, c in streamed.items()} == expected


def test_cutoffs_of_a_large_memmap_hold_no_per_document_array(tmp_path, monkeypatch):
    """Four million perplexities on disk, read in chunks of 100,000: the selection's peak allocation is a few
    chunks and histograms, not the 32 MB of the values, and does not depend on their number."""
    monkeypatch.setattr(order_stats, "MAX_COLLECT", 1 << 16)
    n, chunk = 4_000_000, 100_000
    rng = np.random.default_rng(0)
    ppl = np.memmap(tmp_path / "ppl.bin", dtype=np.float64, mode="w+", shape=(n,))
    codes = np.memmap(tmp_path / "lang.bin", dtype=np.int32, mode="w+", shape=(n,))
    for start in range(0, n, chunk):
        ppl[start:start + chunk] = np.round(rng.lognormal(4, 1, chunk), 2)
        codes[start:start + chunk] = rng.integers(0, 3, chunk)
    ppl.flush()
    codes.flush()
    tracemalloc.start()
    got = streamed_cutoffs(chunked(ppl, codes, chunk), ["en", "fr", "zh"], (33.3, 66.7), 100)
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    print(f"peak {peak / 2**20:.1f} MB")
    assert peak < n * 8 / 3, f"{peak / 2**20:.1f} MB"
    in_memory = np.asarray(ppl)
    langs = np.array(["en", "fr", "zh"], dtype=object)[np.asarray(codes)]
    expected = reference_cutoffs(in_memory, langs, (33.3, 66.7), 100)
    assert {k: (c.easy_max, c.medium_max, c.num_docs, c.source) for k, c in got.items()} == expected


def reference_histogram_rows(ppl, langs, cutoffs, num_bins=40):
    """histogram_rows as it was written on the arrays in memory."""
    from stages.common.lm.scoring import TIERS, assign_tiers
    logp = np.log10(ppl)
    low, high = np.percentile(logp, [0.5, 99.5])
    high = max(high, low + 1e-6)
    edges = np.linspace(low, high, num_bins + 1)
    centers = (edges[:-1] + edges[1:]) / 2
    rows = []
    for lang in sorted(set(langs.tolist())):
        c = cutoffs.get(lang, cutoffs[POOLED])
        counts, _ = np.histogram(np.clip(logp[langs == lang], low, high), bins=edges)
        center_tiers = assign_tiers(10 ** centers, np.full(num_bins, lang, dtype=object), {lang: c, POOLED: c})
        rows += [(lang, "bin", round(float(a), 4), round(float(b), 4), int(n), TIERS[t])
                 for a, b, n, t in zip(edges[:-1], edges[1:], counts, center_tiers)]
        rows += [(lang, "cutoff", round(float(np.log10(v)), 4), round(float(np.log10(v)), 4), 0, name)
                 for v, name in ((c.easy_max, "easy|medium"), (c.medium_max, "medium|hard"))]
    return rows


def test_streamed_histogram_rows_equal_the_in_memory_ones(monkeypatch):
    from stages.common.lm.scoring import streamed_histogram_rows
    monkeypatch.setattr(order_stats, "MAX_COLLECT", 50)
    rng = np.random.default_rng(5)
    langs = rng.permutation(np.array(["en"] * 2000 + ["zh"] * 700 + ["th"] * 5, dtype=object))
    ppl = tied_values(rng, len(langs))
    cutoffs = compute_cutoffs(ppl, langs, (33.3, 66.7), 100)
    names, codes = lang_codes(langs)
    assert streamed_histogram_rows(chunked(ppl, codes, 333), names, cutoffs) == \
        reference_histogram_rows(ppl, langs, cutoffs)
