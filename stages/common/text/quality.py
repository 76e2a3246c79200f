"""Heuristic quality rules in the spirit of Gopher (Rae et al., 2021) and C4, with CJK variants.

`QualityRules.check(text, lang)` runs cheap rules first and returns the first failing reason
(`quality:<rule>`) or None. Word rules do not apply to Chinese and Japanese, which are written
without spaces, so those languages get character-based counterparts. Thresholds are looser than
Gopher's: applied as-is they drop most man pages, fortunes and technical prose (see README).
"""
from __future__ import annotations

import itertools
import re
from collections import Counter
from dataclasses import dataclass

import numpy as np

from stages.common.runtime.params import param

CJK_LANGS = frozenset({"zh", "ja", "ko"})
_CJK_CHAR_RE = re.compile(r"[\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff\uac00-\ud7af]")
_BULLET_RE = re.compile(r"^\s*(?:[-*•·‣◦▪●]|\d+[.)])\s")
_ELLIPSIS_RE = re.compile(r"(?:\.\.\.|…)\s*$")
# From a word's first letter to its end: one match per word that has a letter. (`\S*?` in front, to
# match whole words, retries every position of a word without letters: quadratic on a long one.)
_WORD_WITH_LETTER_RE = re.compile(r"[^\W\d_]\S*")
# Gopher's stop words: real English prose contains at least two of them.
EN_STOP_WORDS = frozenset({"the", "be", "to", "of", "and", "that", "have", "with"})
_EN_STOP_WORD_RE = re.compile(r"\b(?:" + "|".join(sorted(EN_STOP_WORDS)) + r")\b", re.I)


@dataclass(frozen=True)
class QualityParams:
    min_chars: int = param(50, min=0)  # languages written with spaces; CJK text uses min_cjk_chars
    # word-based rules (languages written with spaces)
    min_words: int = param(10, min=0)
    min_mean_word_length: float = param(2.0, min=0.0)
    max_mean_word_length: float = param(12.0, min=0.0)
    max_symbol_word_ratio: float = param(0.1, min=0.0)  # per word: can exceed 1
    min_alpha_word_ratio: float = param(0.4, min=0.0, max=1.0)
    min_stop_words_en: int = param(2, min=0)
    # character-based rules (zh, ja, ko)
    min_cjk_chars: int = param(20, min=0)
    min_cjk_ratio: float = param(0.15, min=0.0, max=1.0)
    # layout and repetition rules (all languages)
    max_bullet_line_ratio: float = param(0.9, min=0.0, max=1.0)
    max_ellipsis_line_ratio: float = param(0.3, min=0.0, max=1.0)
    max_dup_line_ratio: float = param(0.5, min=0.0, max=1.0)
    max_dup_line_char_ratio: float = param(0.35, min=0.0, max=1.0)
    max_top_2gram_ratio: float = param(0.2, min=0.0, max=1.0)
    max_dup_ngram_char_ratio: float = param(0.45, min=0.0, max=1.0)


def _tokens(text: str, lang: str) -> list[str]:
    if lang in CJK_LANGS:
        return _CJK_CHAR_RE.findall(text)
    return text.split()


def _top_ngram_ratio(tokens: list[str], n: int, total: int) -> float:
    """Share of the `total` characters covered by the single most frequent n-gram (Gopher)."""
    if len(tokens) < n + 1:
        return 0.0
    counts = Counter(zip(*(tokens[i:] for i in range(n))))
    gram, count = counts.most_common(1)[0]
    if count < 2:
        return 0.0
    return count * sum(map(len, gram)) / total


def _dup_ngram_char_ratio(tokens: list[str], n: int, total: int) -> float:
    """Share of the `total` characters inside n-grams that occur more than once (Gopher), counted once each."""
    if len(tokens) < n * 2:
        return 0.0
    grams = list(zip(*(tokens[i:] for i in range(n))))
    counts = Counter(grams)
    if len(counts) == len(grams):  # no n-gram occurs twice
        return 0.0
    repeated = np.fromiter(map(counts.__getitem__, grams), dtype=np.int64, count=len(grams)) > 1
    # token j is covered when one of the n-grams starting at j-n+1 .. j is repeated
    covered = np.convolve(repeated, np.ones(n, dtype=np.int64)) > 0
    lengths = np.fromiter(map(len, tokens), dtype=np.int64, count=len(tokens))
    return int(lengths[covered].sum()) / total


class QualityRules:
    def __init__(self, params: QualityParams) -> None:
        self.p = params

    @property
    def min_any_chars(self) -> int:
        """Below this length no language passes, so such text is dropped before language ID."""
        return min(self.p.min_chars, self.p.min_cjk_chars)

    def check(self, text: str, lang: str) -> str | None:
        tokens = _tokens(text, lang)
        if lang in CJK_LANGS:
            reason = self._check_cjk(text, tokens)
        else:
            reason = self._check_words(text, tokens, lang)
        if reason:
            return reason
        return self._check_layout(text, tokens)

    def _check_cjk(self, text: str, chars: list[str]) -> str | None:
        p = self.p
        if len(chars) < p.min_cjk_chars:
            return "quality:too_short"
        non_space = len(text) - text.count(" ") - text.count("\n")
        if len(chars) / non_space < p.min_cjk_ratio:
            return "quality:low_cjk_ratio"
        return None

    def _check_words(self, text: str, words: list[str], lang: str) -> str | None:
        p = self.p
        if sum(map(len, words)) + len(words) < p.min_chars:
            return "quality:too_short"
        if len(words) < p.min_words:
            return "quality:too_few_words"
        mean_len = sum(map(len, words)) / len(words)
        if not p.min_mean_word_length <= mean_len <= p.max_mean_word_length:
            return "quality:mean_word_length"
        num_symbols = text.count("#") + text.count("...") + text.count("…")
        if num_symbols / len(words) > p.max_symbol_word_ratio:
            return "quality:symbol_ratio"
        if len(_WORD_WITH_LETTER_RE.findall(text)) / len(words) < p.min_alpha_word_ratio:
            return "quality:non_alpha_words"
        # Only whether there are `min_stop_words_en`: the search stops there.
        if lang == "en" and sum(1 for _ in itertools.islice(_EN_STOP_WORD_RE.finditer(text), p.min_stop_words_en)) \
                < p.min_stop_words_en:
            return "quality:stop_words"
        return None

    def _check_layout(self, text: str, tokens: list[str]) -> str | None:
        p = self.p
        lines = [line for line in text.split("\n") if line.strip()]
        if lines:
            if sum(1 for line in lines if _BULLET_RE.match(line)) / len(lines) > p.max_bullet_line_ratio:
                return "quality:bullet_lines"
            if sum(1 for line in lines if _ELLIPSIS_RE.search(line)) / len(lines) > p.max_ellipsis_line_ratio:
                return "quality:ellipsis_lines"
            line_counts = Counter(lines)
            dup_lines = [line for line in lines if line_counts[line] > 1]
            if len(dup_lines) / len(lines) > p.max_dup_line_ratio:
                return "quality:dup_lines"
            if sum(map(len, dup_lines)) / sum(map(len, lines)) > p.max_dup_line_char_ratio:
                return "quality:dup_line_chars"
        total = sum(map(len, tokens))
        if _top_ngram_ratio(tokens, 2, total) > p.max_top_2gram_ratio:
            return "quality:top_2gram"
        # 5-grams of words; for CJK, where a token is one character, 10-grams (about 5 words).
        n = 10 if tokens and len(tokens[0]) == 1 and _CJK_CHAR_RE.match(tokens[0]) else 5
        if _dup_ngram_char_ratio(tokens, n, total) > p.max_dup_ngram_char_ratio:
            return "quality:dup_ngrams"
        return None
