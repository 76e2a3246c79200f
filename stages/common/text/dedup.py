"""Exact and near-duplicate detection.

Exact: a 128-bit hash of the text case-folded with everything but letters and digits removed, so
whitespace, punctuation and case edits collapse. Near: MinHash signatures (datasketch) over word
shingles, or character shingles for CJK text, grouped by LSH bands. Signatures are computed in the
workers; the index lives in one process and sees documents in input order, so the first occurrence is
the one kept, whatever the worker count.
"""
from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass

import numpy as np
import xxhash
from datasketch import LeanMinHash, MinHash, MinHashLSH

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


def shingles(text: str, lang: str, word_ngram: int, char_ngram: int) -> set[bytes]:
    if lang in CJK_LANGS:
        chars = _NON_WORD_RE.sub("", text)
        n = char_ngram
        return {chars[i : i + n].encode() for i in range(max(1, len(chars) - n + 1))}
    words = _NON_WORD_RE.sub(" ", text.casefold()).split()
    n = word_ngram
    return {" ".join(words[i : i + n]).encode() for i in range(max(1, len(words) - n + 1))}


class Signer:
    """Computes MinHash signatures with permutations built once per process."""

    def __init__(self, params: DedupParams, seed: int) -> None:
        self.params = params
        self.seed = seed
        template = MinHash(num_perm=params.num_perm, seed=seed, hashfunc=xxhash.xxh32_intdigest)
        self._permutations = template.permutations
        self._scheme = template.scheme

    def __call__(self, text: str, lang: str) -> np.ndarray:
        # xxh32 instead of datasketch's default SHA-1: 10x cheaper per shingle, as well mixed.
        m = MinHash(num_perm=self.params.num_perm, seed=self.seed, permutations=self._permutations,
                    scheme=self._scheme, hashfunc=xxhash.xxh32_intdigest)
        m.update_batch(list(shingles(text, lang, self.params.word_ngram, self.params.char_ngram)))
        return m.hashvalues


class DedupIndex:
    """Global first-occurrence-wins index; `check` returns the id of the earlier copy, or None."""

    def __init__(self, params: DedupParams, seed: int) -> None:
        self.params = params
        self.seed = seed
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
            minhash = LeanMinHash(seed=self.seed, hashvalues=signature, scheme=self._scheme)
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
