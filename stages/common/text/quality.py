"""Heuristic quality rules in the spirit of Gopher (Rae et al., 2021) and C4, by script.

`QualityRules.check(text, lang)` runs cheap rules first and returns the first failing reason
(`quality:<rule>`) or None; `judge` returns that rule's measured value with it (the ratio, count or
length it compared with its threshold), for the quarantine and the report. Which rules apply follows how the language is written, not which
language it is:
- languages written without spaces between words (Chinese, Japanese, Thai, Lao, Khmer, Burmese:
  `SCRIPT_CHARS`) get character rules, counted on the characters of their script;
- every other language gets word rules on whitespace-separated words, which count letters of any
  script (Cyrillic, Greek, Hangul, ...), plus the stop-word rule where `stopwords.yaml` has a list.
Korean is written with spaces between words (eojeol), so it gets word rules: its words are a few
syllable blocks long, within the word-length bounds, and word n-grams mean what they mean elsewhere.
Layout and repetition rules apply to all. Thresholds are looser than Gopher's: applied as-is they drop
most man pages, fortunes and technical prose (see README).
"""
from __future__ import annotations

import itertools
import re
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import ClassVar

import numpy as np
import yaml

from stages.common.runtime.params import param

STOP_WORDS_PATH = Path(__file__).with_name("stopwords.yaml")
# Han, kana and hangul, as Chinese and Japanese text mixes them.
_CJK = "\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff\uac00-\ud7af"
# Languages written without spaces between words -> the characters of their script (Unicode blocks,
# combining vowel signs included: each code point counts as one character).
SCRIPT_CHARS = {
    "zh": _CJK,
    "ja": _CJK,
    "th": "\u0e00-\u0e7f",  # Thai
    "lo": "\u0e80-\u0eff",  # Lao
    "km": "\u1780-\u17ff\u19e0-\u19ff",  # Khmer and Khmer symbols
    "my": "\u1000-\u109f\ua9e0-\ua9ff\uaa60-\uaa7f",  # Myanmar and its extensions
}
UNSPACED_LANGS = frozenset(SCRIPT_CHARS)
# The repeated n-gram rule takes word 5-grams; in these languages, character n-grams of about five words:
# Chinese words average under two characters, Japanese ones (kana endings, katakana loanwords) nearer
# three, and a Thai, Lao, Khmer or Burmese word is about four code points (its vowel signs and tone
# marks are code points of their own).
DUP_NGRAM_CHARS = {"zh": 10, "ja": 15, "th": 20, "lo": 20, "km": 20, "my": 20}
_SCRIPT_CHAR_RES = {lang: re.compile(f"[{chars}]") for lang, chars in SCRIPT_CHARS.items()}
_CJK_CHAR_RE = _SCRIPT_CHAR_RES["zh"]
_BULLET_RE = re.compile(r"^\s*(?:[-*•·‣◦▪●]|\d+[.)])\s")
_ELLIPSIS_RE = re.compile(r"(?:\.\.\.|…)\s*$")
# From a word's first letter (of any script) to its end: one match per word that has a letter. (`\S*?`
# in front, to match whole words, retries every position of a word without letters: quadratic on a long one.)
_WORD_WITH_LETTER_RE = re.compile(r"[^\W\d_]\S*")
# Stripped from both ends of a word before it is looked up in a stop-word list.
_WORD_PUNCT = "\"'`.,;:!?()[]{}<>«»‹›„“”‚‘’…—–-/\\*_¡¿|।॥"


def script_chars(lang: str) -> re.Pattern[str] | None:
    """One character of `lang`'s script, for a language written without spaces; None for the others."""
    return _SCRIPT_CHAR_RES.get(lang)


@cache
def stop_words() -> dict[str, frozenset[str]]:
    """Per language, its most frequent function words (stopwords.yaml), case-folded."""
    with STOP_WORDS_PATH.open(encoding="utf-8") as f:
        lists = yaml.safe_load(f)
    return {lang: frozenset(word.casefold() for word in words.split()) for lang, words in lists.items()}


def languages_without_stop_words(langs: Iterable[str]) -> list[str]:
    """The languages of `langs` that get word rules but have no stop-word list: the rule skips them."""
    return sorted(lang for lang in set(langs) if lang not in UNSPACED_LANGS and lang not in stop_words())


@dataclass(frozen=True)
class QualityParams:
    min_chars: int = param(50, min=0)  # languages written with spaces; the others use min_script_chars
    # word-based rules (languages written with spaces)
    min_words: int = param(10, min=0)
    min_mean_word_length: float = param(2.0, min=0.0)
    max_mean_word_length: float = param(12.0, min=0.0)
    max_symbol_word_ratio: float = param(0.1, min=0.0)  # per word: can exceed 1
    min_alpha_word_ratio: float = param(0.4, min=0.0, max=1.0)  # words with a letter of any script
    min_stop_words: int = param(2, min=0)  # languages with a list in stopwords.yaml
    # character-based rules (languages written without spaces: SCRIPT_CHARS)
    min_script_chars: int = param(20, min=0)
    min_script_ratio: float = param(0.15, min=0.0, max=1.0)
    # layout and repetition rules (all languages)
    max_bullet_line_ratio: float = param(0.9, min=0.0, max=1.0)
    max_ellipsis_line_ratio: float = param(0.3, min=0.0, max=1.0)
    min_ellipsis_lines: int = param(3, min=0)  # and at least this many such lines (short texts: see _check_layout)
    max_dup_line_ratio: float = param(0.5, min=0.0, max=1.0)
    max_dup_line_char_ratio: float = param(0.35, min=0.0, max=1.0)
    max_top_2gram_ratio: float = param(0.2, min=0.0, max=1.0)
    max_dup_ngram_char_ratio: float = param(0.45, min=0.0, max=1.0)
    # the two n-gram rules above judge texts of at least this many words (character rules: characters of
    # about as many words, DUP_NGRAM_CHARS); a shorter text is judged on the 2-grams that open its lines
    ngram_min_words: int = param(100, min=0)

    # Keys these rules had under other names: an old params file gets an error naming the new key.
    RENAMED_PARAMS: ClassVar[dict[str, str]] = {"min_stop_words_en": "min_stop_words",
                                                 "min_cjk_chars": "min_script_chars",
                                                 "min_cjk_ratio": "min_script_ratio"}


def _tokens(text: str, lang: str) -> list[str]:
    """The characters of the language's script (written without spaces), else whitespace-separated words."""
    chars = _SCRIPT_CHAR_RES.get(lang)
    return chars.findall(text) if chars else text.split()


def _top_ngram_ratio(tokens: list[str], n: int, total: int) -> float:
    """Share of the `total` characters covered by the single most frequent n-gram (Gopher)."""
    if len(tokens) < n + 1:
        return 0.0
    counts = Counter(zip(*(tokens[i:] for i in range(n))))
    gram, count = counts.most_common(1)[0]
    if count < 2:
        return 0.0
    return count * sum(map(len, gram)) / total


def _top_opening_2gram_ratio(text: str, lang: str, total: int) -> float:
    """Share of the `total` characters covered by the 2-gram that opens the most lines, where it opens at
    least two ("Copyright (c) ..." down a list of notices)."""
    openings = Counter()
    for line in text.split("\n"):
        tokens = _tokens(line, lang)
        if len(tokens) >= 2:
            openings[tokens[0], tokens[1]] += 1
    if not openings:
        return 0.0
    gram, count = openings.most_common(1)[0]
    return count * sum(map(len, gram)) / total if count >= 2 else 0.0


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


Failed = tuple[str, float]  # a rule's reason and the value it measured


class QualityRules:
    def __init__(self, params: QualityParams) -> None:
        self.p = params

    @property
    def min_any_chars(self) -> int:
        """Below this length no language passes, so such text is dropped before language ID."""
        return min(self.p.min_chars, self.p.min_script_chars)

    def check(self, text: str, lang: str) -> str | None:
        return self.judge(text, lang)[0]

    def judge(self, text: str, lang: str) -> tuple[str | None, float | None]:
        """(the first failing rule's reason, the value it measured), or (None, None)."""
        tokens = _tokens(text, lang)
        if lang in UNSPACED_LANGS:
            failed = self._check_chars(text, tokens)
        else:
            failed = self._check_words(text, tokens, lang)
        return failed or self._check_layout(text, tokens, lang) or (None, None)

    def _check_chars(self, text: str, chars: list[str]) -> Failed | None:
        """No stop-word rule here: finding words needs a segmenter, and the most frequent particles (的, の)
        are single characters found in nearly any text of the script, boilerplate included. The script
        ratio does that rule's job: how much of the text is written in the language's script at all."""
        p = self.p
        if len(chars) < p.min_script_chars:
            return "quality:too_short", len(chars)
        non_space = len(text) - text.count(" ") - text.count("\n")
        if len(chars) / non_space < p.min_script_ratio:
            return "quality:low_script_ratio", len(chars) / non_space
        return None

    def _check_words(self, text: str, words: list[str], lang: str) -> Failed | None:
        p = self.p
        if sum(map(len, words)) + len(words) < p.min_chars:
            return "quality:too_short", sum(map(len, words)) + len(words)
        if len(words) < p.min_words:
            return "quality:too_few_words", len(words)
        mean_len = sum(map(len, words)) / len(words)
        if not p.min_mean_word_length <= mean_len <= p.max_mean_word_length:
            return "quality:mean_word_length", mean_len
        num_symbols = text.count("#") + text.count("...") + text.count("…")
        if num_symbols / len(words) > p.max_symbol_word_ratio:
            return "quality:symbol_ratio", num_symbols / len(words)
        alpha_ratio = len(_WORD_WITH_LETTER_RE.findall(text)) / len(words)
        if alpha_ratio < p.min_alpha_word_ratio:
            return "quality:non_alpha_words", alpha_ratio
        listed = stop_words().get(lang)
        if listed is not None and p.min_stop_words:
            # Only whether there are `min_stop_words`: the search stops there.
            found = (word for word in words if word.strip(_WORD_PUNCT).casefold() in listed)
            num_found = sum(1 for _ in itertools.islice(found, p.min_stop_words))
            if num_found < p.min_stop_words:
                return "quality:stop_words", num_found
        return None

    def _check_layout(self, text: str, tokens: list[str], lang: str) -> Failed | None:
        p = self.p
        lines = [line for line in text.split("\n") if line.strip()]
        if lines:
            bullet_ratio = sum(1 for line in lines if _BULLET_RE.match(line)) / len(lines)
            if bullet_ratio > p.max_bullet_line_ratio:
                return "quality:bullet_lines", bullet_ratio
            # Gopher's ratio targets pages of truncated teasers and link lists ("Read more..."); in a text of a
            # few lines, one or two lines trailing off (speech, chat, verse) would decide it alone.
            num_ellipsis = sum(1 for line in lines if _ELLIPSIS_RE.search(line))
            if num_ellipsis >= p.min_ellipsis_lines and num_ellipsis / len(lines) > p.max_ellipsis_line_ratio:
                return "quality:ellipsis_lines", num_ellipsis / len(lines)
            line_counts = Counter(lines)
            dup_lines = [line for line in lines if line_counts[line] > 1]
            if len(dup_lines) / len(lines) > p.max_dup_line_ratio:
                return "quality:dup_lines", len(dup_lines) / len(lines)
            dup_chars = sum(map(len, dup_lines)) / sum(map(len, lines))
            if dup_chars > p.max_dup_line_char_ratio:
                return "quality:dup_line_chars", dup_chars
        total = sum(map(len, tokens))
        n = DUP_NGRAM_CHARS.get(lang, 5)  # 5-grams of words, or of characters about as long
        if len(tokens) * 5 < p.ngram_min_words * n:
            # A short text: a phrase said twice is a large share of it (a fortune and its attribution, the nick
            # on every line of a short chat), so n-gram shares say little about it. What still marks a short
            # list of notices is a 2-gram that opens line after line.
            top = _top_opening_2gram_ratio(text, lang, total)
            if top > p.max_top_2gram_ratio:
                return "quality:top_2gram_line_starts", top
            return None
        top = _top_ngram_ratio(tokens, 2, total)
        if top > p.max_top_2gram_ratio:
            return "quality:top_2gram", top
        dup = _dup_ngram_char_ratio(tokens, n, total)
        if dup > p.max_dup_ngram_char_ratio:
            return "quality:dup_ngrams", dup
        return None
