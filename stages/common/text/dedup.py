"""Exact and near-duplicate detection.

Exact: a 128-bit hash of the text case-folded with everything but letters and digits removed, so
whitespace, punctuation and case edits collapse. Near: MinHash signatures over word shingles, or
character shingles for CJK text, grouped by LSH bands. Both are datasketch's (its MinHash, its
MinHashLSH's choice of bands), computed here with numpy: importing datasketch imports scipy, 0.7 s
in every process that does, a fifth of a small run (tests check both against datasketch). Signatures
are computed in the workers; the index lives in one process and sees documents in input order, so the
first occurrence is the one kept, whatever the worker count.
"""
from __future__ import annotations

import hashlib
import math
import re
from dataclasses import dataclass

import numpy as np
import xxhash

from stages.common.runtime.params import param
from stages.common.text.quality import UNSPACED_LANGS

_WORD_RE = re.compile(r"[^\W_]+")  # runs of letters and digits


@dataclass(frozen=True)
class DedupParams:
    exact: bool = True
    near: bool = True
    num_perm: int = param(128, min=1)
    # estimated Jaccard similarity above which two documents are near duplicates
    threshold: float = param(0.7, min=0.0, max=1.0)
    word_ngram: int = param(3, min=1)
    char_ngram: int = param(5, min=1)


def exact_key(text: str) -> bytes:
    """Hash of the text case-folded, with everything but letters and digits removed."""
    return hashlib.blake2b("".join(_WORD_RE.findall(text.casefold())).encode(), digest_size=16).digest()


def shingles(text: str, lang: str, word_ngram: int, char_ngram: int) -> set[str]:
    """Character n-grams of the letters and digits (languages written without spaces), else word n-grams of
    the case-folded text."""
    if lang in UNSPACED_LANGS:
        chars = "".join(_WORD_RE.findall(text))
        n = char_ngram
        return {chars[i : i + n] for i in range(max(1, len(chars) - n + 1))}
    words = _WORD_RE.findall(text.casefold())
    if len(words) <= word_ngram:
        return {" ".join(words)}
    return set(map(" ".join, zip(*(words[i:] for i in range(word_ngram)))))


def _fmix32(h: np.ndarray) -> np.ndarray:
    """MurmurHash3's 32-bit finaliser (wrapping uint32 arithmetic)."""
    h = h ^ (h >> np.uint32(16))
    h = h * np.uint32(0x85EBCA6B)
    h = h ^ (h >> np.uint32(13))
    h = h * np.uint32(0xC2B2AE35)
    return h ^ (h >> np.uint32(16))


class Signer:
    """MinHash signatures (uint32) of a text's shingles, exactly as datasketch's `MinHash` makes them in its
    default scheme ("affine32") with xxh32 as the hash function (10x cheaper per shingle than its SHA-1,
    as well mixed): each shingle's hash, pre-mixed by MurmurHash3's finaliser, goes through `num_perm`
    permutations h -> a*h + b mod 2^32 (odd a), drawn from numpy's RandomState(seed) as datasketch draws
    them, and each permutation keeps its minimum."""

    def __init__(self, params: DedupParams, seed: int) -> None:
        self.params = params
        gen = np.random.RandomState(seed)
        self._a = gen.randint(0, 1 << 31, params.num_perm, dtype=np.uint32) * np.uint32(2) + np.uint32(1)
        self._b = gen.randint(0, 1 << 32, params.num_perm, dtype=np.uint32)

    def __call__(self, text: str, lang: str) -> np.ndarray:
        grams = shingles(text, lang, self.params.word_ngram, self.params.char_ngram)
        hashes = np.fromiter(map(xxhash.xxh32_intdigest, map(str.encode, grams)), dtype=np.uint32, count=len(grams))
        permuted = np.multiply.outer(_fmix32(hashes), self._a)
        permuted += self._b
        return np.minimum.reduce(permuted, axis=0)


def lsh_bands(threshold: float, num_perm: int) -> tuple[int, int]:
    """(bands, rows per band) as datasketch's MinHashLSH picks them (equal weights): among b * r <= num_perm,
    the first (b, then r, ascending) with the least false-positive plus false-negative probability mass
    around `threshold`. The integrands are polynomials of degree b * r, so Gauss-Legendre quadrature with
    num_perm // 2 + 1 nodes is exact; datasketch integrates them adaptively with scipy, whose import alone
    takes 0.7 s. A test checks the choice against datasketch's."""
    if num_perm < 2:
        raise ValueError("Too few permutation functions")
    nodes, weights = np.polynomial.legendre.leggauss(num_perm // 2 + 1)

    def integral(f, lo: float, hi: float) -> float:
        return (hi - lo) / 2 * float(weights @ f((hi - lo) / 2 * nodes + (hi + lo) / 2))

    best, choice = math.inf, (0, 0)
    for b in range(1, num_perm + 1):
        for r in range(1, num_perm // b + 1):
            false_positive = integral(lambda s: 1 - (1 - s**r) ** b, 0.0, threshold)
            false_negative = integral(lambda s: (1 - s**r) ** b, threshold, 1.0)
            error = 0.5 * false_positive + 0.5 * false_negative
            if error < best:
                best, choice = error, (b, r)
    if choice[0] < 2:
        raise ValueError("The number of bands are too small (b < 2)")
    return choice


class DedupIndex:
    """Global first-occurrence-wins index; `check` returns the id of the earlier copy, or None.

    Near duplicates by LSH, as datasketch's MinHashLSH finds them: a signature's `lsh_bands` bands of r
    values each, and a document is a candidate when any of its bands equals one of an earlier document's."""

    def __init__(self, params: DedupParams) -> None:
        self.params = params
        self._exact: dict[bytes, int] = {}
        self._kept_ids: list[str] = []
        num_bands, rows = lsh_bands(params.threshold, params.num_perm) if params.near else (0, 0)
        self._bands = [slice(i * rows, (i + 1) * rows) for i in range(num_bands)]
        self._buckets: list[dict[bytes, list[int]]] = [{} for _ in self._bands]  # per band: value -> kept docs

    def check(self, doc_id: str, key: bytes, signature: np.ndarray | None) -> tuple[str, str] | None:
        """(reason, dup_of) when the document duplicates an earlier kept one, else register it."""
        if self.params.exact and key in self._exact:
            return "dedup:exact", self._kept_ids[self._exact[key]]
        bands = None
        if self._bands and signature is not None:
            bands = [signature[band].tobytes() for band in self._bands]
            matches = [order for bucket, value in zip(self._buckets, bands) for order in bucket.get(value, ())]
            if matches:
                return "dedup:near", self._kept_ids[min(matches)]
        order = len(self._kept_ids)
        self._kept_ids.append(doc_id)
        if self.params.exact:
            self._exact[key] = order
        if bands is not None:
            for bucket, value in zip(self._buckets, bands):
                bucket.setdefault(value, []).append(order)
        return None
