"""Exact order statistics, percentiles and medians of more values than memory holds, streamed in chunks.

`Chunks` starts a fresh pass over the values, yielding `(values, groups)` per chunk: float values and, for each,
the group it counts in (a language code, say; a negative group: in none). Selection is by radix: each value maps
to an order-preserving 64-bit key (`sortable_keys`); a pass counts a group's keys by their leading 16 bits, the
bin holding a wanted rank is refined by the next 16 bits on the next pass, and once a bin holds at most
`max_collect` keys they are collected and sorted. Memory: a 65,536-count histogram or `max_collect` keys per
wanted rank, whatever the number of values; passes: 1 for a group of at most `max_collect` values, else 2 to 4.

The result is exact: the k-th smallest value itself, ties and all. `percentiles` and `medians` combine order
statistics with the same floating-point operations as np.percentile (method 'linear') and np.median, so they
return the same bits as those would on the values in memory (tested on random data with ties).
"""
from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass

import numpy as np

Chunks = Callable[[], Iterable[tuple[np.ndarray, np.ndarray]]]  # a new pass: (values, groups) per chunk
ALL = -1  # a wanted group standing for every value whose group is >= 0
DIGIT_BITS = 16
MAX_COLLECT = 1 << 20  # keys (8 bytes each) collected per bin to sort

_SIGN = np.uint64(1 << 63)


def sortable_keys(values: np.ndarray) -> np.ndarray:
    """uint64 keys in the order np.sort puts the float values: -0.0 and 0.0 equal, every NaN last."""
    v = np.asarray(values, dtype=np.float64) + 0.0  # -0.0 + 0.0 is 0.0
    bits = v.view(np.uint64)
    keys = np.where(bits & _SIGN, ~bits, bits | _SIGN)
    keys[np.isnan(v)] = np.iinfo(np.uint64).max
    return keys


def key_values(keys: np.ndarray) -> np.ndarray:
    """The float values of `sortable_keys`' keys."""
    keys = np.asarray(keys, dtype=np.uint64)
    return np.where(keys & _SIGN, keys & ~_SIGN, ~keys).view(np.float64)


def _members(groups: np.ndarray, group: int) -> np.ndarray:
    return groups >= 0 if group == ALL else groups == group


def group_counts(chunks: Chunks, wanted: Iterable[int]) -> dict[int, tuple[int, int]]:
    """(values, NaN values) of each wanted group, in one pass."""
    wanted = list(wanted)
    counts = dict.fromkeys(wanted, (0, 0))
    for values, groups in chunks():
        is_nan = np.isnan(values)
        for group in wanted:
            members = _members(groups, group)
            n, num_nan = counts[group]
            counts[group] = (n + int(members.sum()), num_nan + int((members & is_nan).sum()))
    return counts


@dataclass
class _Search:
    """One wanted rank: the leading `known_bits` of its key (`prefix`) and its rank among the keys sharing them."""
    group: int
    rank: int
    population: int  # keys in the bin being searched
    rank_in_bin: int
    prefix: int = 0
    known_bits: int = 0
    key: int | None = None

    @property
    def bin(self) -> tuple[int, int, int]:
        return self.group, self.prefix, self.known_bits


def select(chunks: Chunks, wanted: Mapping[int, Iterable[int]], counts: Mapping[int, int],
           max_collect: int | None = None) -> dict[tuple[int, int], float]:
    """The value of rank r (0 = smallest) of group g for each r in `wanted[g]`, keyed (g, r). `counts[g]`: the
    group's number of values (`group_counts`); every rank must be below it. `max_collect`: MAX_COLLECT."""
    max_collect = max_collect or MAX_COLLECT
    searches = [_Search(group, rank, counts[group], rank)
                for group, ranks in wanted.items() for rank in sorted(set(ranks))]
    for s in searches:
        if not 0 <= s.rank < s.population:
            raise ValueError(f"rank {s.rank} of group {s.group}, which has {s.population} values")
    while pending := [s for s in searches if s.key is None]:
        bins = {s.bin: s.population for s in pending}
        collected: dict[tuple[int, int, int], list[np.ndarray]] = {b: [] for b, n in bins.items() if n <= max_collect}
        histograms = {b: np.zeros(1 << DIGIT_BITS, dtype=np.int64) for b in bins if b not in collected}
        for values, groups in chunks():
            keys = sortable_keys(values)
            for group, prefix, known_bits in bins:
                in_bin = keys[_members(groups, group)]
                if known_bits:
                    in_bin = in_bin[(in_bin >> np.uint64(64 - known_bits)) == np.uint64(prefix)]
                if (group, prefix, known_bits) in collected:
                    collected[group, prefix, known_bits].append(in_bin)
                else:
                    digits = (in_bin >> np.uint64(64 - known_bits - DIGIT_BITS)) & np.uint64((1 << DIGIT_BITS) - 1)
                    histograms[group, prefix, known_bits] += np.bincount(digits.astype(np.intp),
                                                                         minlength=1 << DIGIT_BITS)
        sorted_bins = {b: np.sort(np.concatenate(parts)) for b, parts in collected.items()}
        for s in pending:
            if s.bin in sorted_bins:
                s.key = int(sorted_bins[s.bin][s.rank_in_bin])
                continue
            cumulative = np.cumsum(histograms[s.bin])
            digit = int(np.searchsorted(cumulative, s.rank_in_bin, side="right"))
            s.rank_in_bin -= int(cumulative[digit - 1]) if digit else 0
            s.population = int(histograms[s.bin][digit])
            s.prefix, s.known_bits = (s.prefix << DIGIT_BITS) | digit, s.known_bits + DIGIT_BITS
            if s.known_bits == 64:
                s.key = s.prefix
    return {(s.group, s.rank): float(key_values(np.array([s.key], dtype=np.uint64))[0]) for s in searches}


def _percentile_indexes(n: int, q: Sequence[float]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """np.percentile's (method 'linear') neighbouring ranks and weights for `n` values (numpy's _quantile)."""
    virtual = (n - 1) * np.true_divide(q, 100)
    previous = np.floor(virtual)
    following = previous + 1
    above = virtual >= n - 1
    previous[above], following[above] = -1, -1  # the largest value
    below = virtual < 0
    previous[below], following[below] = 0, 0
    previous, following = previous.astype(np.intp), following.astype(np.intp)
    return previous % n, following % n, np.asanyarray(virtual - previous)


def _lerp(a: np.ndarray, b: np.ndarray, t: np.ndarray) -> np.ndarray:
    """numpy's _lerp: a + (b - a) t, computed from b's side where t >= 0.5."""
    diff = b - a
    return np.where(t >= 0.5, b - diff * (1 - t), a + diff * t)


def percentiles(chunks: Chunks, groups: Iterable[int], q: Sequence[float],
                max_collect: int | None = None) -> dict[int, tuple[np.ndarray, int]]:
    """Per group with values: (np.percentile(its values, q), its number of values). NaN where it has a NaN."""
    counts = {g: c for g, c in group_counts(chunks, groups).items() if c[0]}
    plans = {g: _percentile_indexes(n, q) for g, (n, _) in counts.items()}
    wanted = {g: [*plan[0].tolist(), *plan[1].tolist()] for g, plan in plans.items() if not counts[g][1]}
    found = select(chunks, wanted, {g: counts[g][0] for g in wanted}, max_collect)
    out = {}
    for g, (previous, following, weight) in plans.items():
        if counts[g][1]:
            out[g] = (np.full(len(weight), np.nan), counts[g][0])
            continue
        a = np.array([found[g, int(r)] for r in previous])
        b = np.array([found[g, int(r)] for r in following])
        out[g] = (_lerp(a, b, weight), counts[g][0])
    return out


def medians(chunks: Chunks, groups: Iterable[int], max_collect: int | None = None) -> dict[int, float]:
    """Per group with values: np.median of its values (the mean of the two middle ones for an even count)."""
    counts = {g: c for g, c in group_counts(chunks, groups).items() if c[0]}
    middle = {g: sorted({(n - 1) // 2, n // 2}) for g, (n, num_nan) in counts.items() if not num_nan}
    found = select(chunks, middle, {g: counts[g][0] for g in middle}, max_collect)
    out = {}
    for g, (n, num_nan) in counts.items():
        if num_nan:
            out[g] = float("nan")
        else:  # np.mean of the middle one or two: their sum over their count
            out[g] = float(np.float64(sum(found[g, r] for r in middle[g])) / len(middle[g]))
    return out
