"""Exact and near-duplicate detection.

Exact: a 128-bit hash of the text case-folded with everything but letters and digits removed, so
whitespace, punctuation and case edits collapse. Near: MinHash signatures over word shingles, or
character shingles for CJK text, grouped by LSH bands (datasketch). Signatures are computed in the
workers; the index lives in one process and sees documents in input order, so the first occurrence is
the one kept, whatever the worker count.
"""
from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass

import numpy as np
import xxhash

from stages.common.runtime.params import param
from stages.common.text.quality import CJK_LANGS

_NON_WORD_RE = re.compile(r"[\W_]+")


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
    return hashlib.blake2b(_NON_WORD_RE.sub("", text.casefold()).encode(), digest_size=16).digest()


def shingles(text: str, lang: str, word_ngram: int, char_ngram: int) -> set[str]:
    if lang in CJK_LANGS:
        chars = _NON_WORD_RE.sub("", text)
        n = char_ngram
        return {chars[i : i + n] for i in range(max(1, len(chars) - n + 1))}
    words = _NON_WORD_RE.sub(" ", text.casefold()).split()
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
    them, and each permutation keeps its minimum. Done here in numpy rather than by datasketch because
    importing datasketch imports scipy (for the LSH index's tuning), about a second of start-up in every
    worker process; the index (`DedupIndex`, in the driver) uses datasketch, and a test checks that the
    two agree."""

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


class DedupIndex:
    """Global first-occurrence-wins index; `check` returns the id of the earlier copy, or None."""

    def __init__(self, params: DedupParams, seed: int) -> None:
        from datasketch import LeanMinHash, MinHash, MinHashLSH  # here, not at the top: see `Signer`

        self.params = params
        self.seed = seed
        self._lean = LeanMinHash
        self._exact: dict[bytes, int] = {}
        self._lsh = MinHashLSH(threshold=params.threshold, num_perm=params.num_perm) if params.near else None
        self._kept_ids: list[str] = []
        self._scheme = MinHash(num_perm=1, seed=seed).scheme

    def check(self, doc_id: str, key: bytes, signature: np.ndarray | None) -> tuple[str, str] | None:
        """(reason, dup_of) when the document duplicates an earlier kept one, else register it."""
        if self.params.exact and key in self._exact:
            return "dedup:exact", self._kept_ids[self._exact[key]]
        minhash = None
        if self._lsh is not None and signature is not None:
            minhash = self._lean(seed=self.seed, hashvalues=signature, scheme=self._scheme)
            candidates = self._lsh.query(minhash)
            if candidates:
                return "dedup:near", self._kept_ids[min(candidates)]
        order = len(self._kept_ids)
        self._kept_ids.append(doc_id)
        if self.params.exact:
            self._exact[key] = order
        if minhash is not None:
            self._lsh.insert(order, minhash, check_duplication=False)
        return None
