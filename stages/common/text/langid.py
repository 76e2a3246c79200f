"""Language identification: script analysis first, then a seeded `langdetect` on a bounded sample.

`langdetect` scores character n-grams, so on mixed-script text (Chinese man pages full of English
option names, English pages quoting a Chinese name) the script with more *characters* wins even when
the other carries the content. We count scripts first, pick the dominant one, weighting a CJK
character like a short word, and feed the detector only that script's characters, at most
`max_chars` of them from three evenly spaced windows (a man-page header alone misleads it).

The detector's cost is its random trials (`n_trials`) plus a Python pass over the sample. Two cases
need less than the full count, because the script already fixes the decision:
- Han without kana or hangul can only be Chinese. langdetect folds Han characters into shared
  classes and on such text often answers Korean (whose profile holds Hanja), so it is restricted to
  simplified vs. traditional Chinese by a prior, with one trial on a short sample.
- A script that no kept language is written in (Cyrillic when keeping zh and en): the document is
  dropped whatever the detector says, which then only names the language for the reason (one trial).
A seed makes each document's answer independent of worker count and order.
"""
from __future__ import annotations

import os
import re
from collections.abc import Iterable
from dataclasses import dataclass

import numpy as np
from langdetect import DetectorFactory, detector_factory
from langdetect.detector import Detector
from langdetect.lang_detect_exception import ErrorCode, LangDetectException
from langdetect.utils.ngram import NGram

_CJK = "\u3040-\u30ff\u31f0-\u31ff\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff\uac00-\ud7af\u1100-\u11ff"
_CJK_RE = re.compile(f"[{_CJK}]")
_CJK_RUN_RE = re.compile(f"[{_CJK}]+")
_NON_CJK_LETTER_RE = re.compile(f"[^\\W\\d_{_CJK}]")
# Kana proper (not the middle dot U+30FB, which Chinese text uses too) and hangul.
_KANA_RE = re.compile("[\u3041-\u3096\u30a1-\u30fa\u31f0-\u31ff]")
_HANGUL_RE = re.compile("[\uac00-\ud7af\u1100-\u11ff]")
# Non-CJK scripts with languages langdetect knows; anything else with letters counts as Latin.
_SCRIPT_RES = {
    "cyrillic": re.compile("[\u0400-\u04ff]"),
    "greek": re.compile("[\u0370-\u03ff]"),
    "arabic": re.compile("[\u0600-\u06ff]"),
    "hebrew": re.compile("[\u0590-\u05ff]"),
    "devanagari": re.compile("[\u0900-\u097f]"),
    "thai": re.compile("[\u0e00-\u0e7f]"),
}
LANG_SCRIPT = {
    "zh": "han", "ja": "kana", "ko": "hangul", "ru": "cyrillic", "uk": "cyrillic", "bg": "cyrillic",
    "mk": "cyrillic", "el": "greek", "ar": "arabic", "fa": "arabic", "ur": "arabic", "he": "hebrew",
    "hi": "devanagari", "mr": "devanagari", "ne": "devanagari", "th": "thai",
}
_HAN_ONLY_PRIOR = {"zh-cn": 0.5, "zh-tw": 0.5}
# One CJK character carries about as much as a short word, i.e. ~4 Latin/Cyrillic letters.
LETTERS_PER_CJK_CHAR = 4.0
# Script counts are taken on a bounded sample too, so a 100 KB page costs what a 3 KB one does.
SCRIPT_SAMPLE_CHARS = 3000

# langdetect codes folded to ISO 639-1.
_FOLD = {"zh-cn": "zh", "zh-tw": "zh"}
# The codes `LanguageIdentifier` answers with, so the only ones a list of languages to keep can match:
# langdetect's profiles (lower case), Chinese variants folded.
LANGUAGES = tuple(sorted({_FOLD.get(name, name) for name in os.listdir(detector_factory.PROFILES_DIRECTORY)}))


_SPACE_RUN_RE = re.compile(" {2,}")
_ASCII_LETTERISH_RE = re.compile("[A-z]")  # langdetect's own test: 'A' <= ch <= 'z'
# langdetect counts as non-Latin every character from U+0300 on except Latin Extended Additional.
_NON_LATIN_RE = re.compile("[\u0300-\u1dff\u1f00-\U0010ffff]")


class _NormalizedChars(dict):
    """`str.translate` table computing langdetect's per-character `NGram.normalize` once per character."""

    def __missing__(self, ordinal: int) -> str:
        self[ordinal] = value = NGram.normalize(chr(ordinal))
        return value


def _has_capital_run(word: str) -> bool:
    return any(a.isupper() and b.isupper() for a, b in zip(word, word[1:]))


def _char_loop_ngrams(text: str, known: dict) -> list[str]:
    """langdetect's `NGram.add_char` loop on already normalised text (used for words in capitals)."""
    result: list[str] = []
    grams, capital = " ", False
    for ch in text:
        last = grams[-1]
        if last == " ":
            grams, capital = " ", False
            if ch == " ":
                continue
        elif len(grams) >= 3:
            grams = grams[1:]
        grams += ch
        capital = ch.isupper() and (capital or last.isupper())
        if capital:
            continue
        for n in (1, 2, 3):
            if len(grams) < n:
                break
            w = grams[-n:]
            if w != " " and w in known:
                result.append(w)
    return result


class FastDetector(Detector):
    """langdetect's Detector with its per-character Python loops replaced by C-speed string operations
    and its trial loop run in numpy, five n-gram draws per step (the points where langdetect checks
    convergence). Same profiles, same draws from the same seeded RNG, same convergence rule; only the
    floating-point rounding of the products can differ, which the tests compare against stock."""

    _normalized = _NormalizedChars()
    _rows: dict[str, np.ndarray] = {}

    def append(self, text: str) -> None:
        text = NGram.normalize_vi(self.MAIL_RE.sub(" ", self.URL_RE.sub(" ", text)))
        self.text += _SPACE_RUN_RE.sub(" ", text[: self.max_text_length])

    def cleaning_text(self) -> None:
        if len(_ASCII_LETTERISH_RE.findall(self.text)) * 2 < len(_NON_LATIN_RE.findall(self.text)):
            self.text = _ASCII_LETTERISH_RE.sub("", self.text)

    def _extract_ngrams(self) -> list[str]:
        """langdetect's n-grams (1-3 characters, in its order), built per word instead of per character.

        langdetect slides a 3-character buffer over the normalised text, restarting it (with a
        leading space) at each word, and emits the last 1, 2 and 3 characters after each one. So a
        word `w` yields the n-grams of " " + w (+ " " when a space follows), unless two capitals in a
        row switch emission off; such words go through the original character loop.
        """
        known = self.word_lang_prob_map
        text = self.text.translate(self._normalized)
        words = text.split(" ")
        result: list[str] = []
        last = len(words) - 1
        for index, word in enumerate(words):
            if not word:
                continue
            padded = " " + word + (" " if index < last else "")
            if not word.islower() and _has_capital_run(word):
                result.extend(_char_loop_ngrams(padded, known))
                continue
            for j in range(1, len(padded)):
                for gram in (padded[j], padded[j - 1 : j + 1], padded[j - 2 : j + 1] if j >= 2 else ""):
                    if gram and gram != " " and gram in known:
                        result.append(gram)
        return result

    def _row(self, word: str) -> np.ndarray:
        row = self._rows.get(word)
        if row is None:
            row = self._rows[word] = np.asarray(self.word_lang_prob_map[word], dtype=np.float64)
        return row

    def _detect_block(self) -> None:
        self.cleaning_text()
        ngrams = self._extract_ngrams()
        if not ngrams:
            raise LangDetectException(ErrorCode.CantDetectError, "No features in text.")
        total = np.zeros(len(self.langlist))
        self.random.seed(self.seed)
        choice = self.random.choice
        for _ in range(self.n_trial):
            prob = np.array(self._init_probability(), dtype=np.float64)
            weight = (self.alpha + self.random.gauss(0.0, 1.0) * self.ALPHA_WIDTH) / self.BASE_FREQ
            i, step = 0, 1  # langdetect checks convergence after draw 0, then after every 5th draw
            while True:
                rows = np.stack([self._row(choice(ngrams)) for _ in range(step)])
                prob *= np.prod(weight + rows, axis=0)
                prob /= prob.sum()
                if prob.max() > self.CONV_THRESHOLD or i >= self.ITERATION_LIMIT:
                    break
                i, step = i + 5 if i else 5, 5
            total += prob / self.n_trial
        self.langprob = total.tolist()


@dataclass(frozen=True)
class LangResult:
    lang: str  # ISO 639-1, or "und" when nothing could be detected
    prob: float


def spread_sample(text: str, max_chars: int, num_windows: int = 3) -> str:
    """At most `max_chars` of `text`, from evenly spaced windows."""
    if len(text) <= max_chars:
        return text
    width = (max_chars - num_windows + 1) // num_windows  # room for the joining spaces
    step = (len(text) - width) // (num_windows - 1)
    return " ".join(text[i * step : i * step + width] for i in range(num_windows))


def script_sample(text: str, max_chars: int) -> tuple[str, str]:
    """(sample of the dominant script, that script: han | kana | hangul | cyrillic | ... | latin)."""
    text = spread_sample(text, SCRIPT_SAMPLE_CHARS)
    num_cjk = len(_CJK_RE.findall(text))
    num_other = len(_NON_CJK_LETTER_RE.findall(text)) if num_cjk else 1
    if num_cjk and num_cjk * LETTERS_PER_CJK_CHAR >= num_other:
        cjk = "".join(_CJK_RUN_RE.findall(text))
        if _KANA_RE.search(cjk):
            return spread_sample(cjk, max_chars // 2), "kana"
        if _HANGUL_RE.search(cjk):
            return spread_sample(cjk, max_chars // 2), "hangul"
        return spread_sample(cjk, max_chars // 4), "han"
    if num_cjk:
        text = _CJK_RUN_RE.sub(" ", text)
    counts = {script: len(pattern.findall(text)) for script, pattern in _SCRIPT_RES.items()}
    script = max(counts, key=counts.__getitem__)
    letters = len(_NON_CJK_LETTER_RE.findall(text)) if counts[script] else 0
    return spread_sample(text, max_chars), script if counts[script] * 2 > letters else "latin"


class LanguageIdentifier:
    def __init__(self, seed: int, max_chars: int = 400, n_trials: int = 3, keep: Iterable[str] = ()) -> None:
        DetectorFactory.seed = seed
        detector_factory.init_factory()
        self._factory = detector_factory._factory
        self._seed = seed
        self._max_chars = max_chars
        self._n_trials = n_trials
        self._kept_scripts = {LANG_SCRIPT.get(lang, "latin") for lang in keep}

    def __call__(self, text: str) -> LangResult:
        sample, script = script_sample(text, self._max_chars)
        detector = FastDetector(self._factory)
        detector.seed = self._seed
        detector.n_trial = self._n_trials
        if script == "han":
            detector.set_prior_map(_HAN_ONLY_PRIOR)
            detector.n_trial = 1
        elif self._kept_scripts and script not in self._kept_scripts:
            detector.n_trial = 1
        detector.set_max_text_length(self._max_chars)
        detector.append(sample)
        try:
            best = detector.get_probabilities()[0]
        except (LangDetectException, IndexError):  # no letters at all
            return LangResult("und", 0.0)
        return LangResult(_FOLD.get(best.lang, best.lang), float(best.prob))
