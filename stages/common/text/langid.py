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

import functools
import itertools
import json
import math
import operator
import os
import random
import re
from collections.abc import Iterable
from dataclasses import dataclass

import numpy as np
from langdetect import detector_factory
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


class _UpperChars(dict):
    """`str.translate` table marking each character "U" where `str.isupper` holds, "-" elsewhere."""

    def __missing__(self, ordinal: int) -> str:
        self[ordinal] = value = "U" if chr(ordinal).isupper() else "-"
        return value


_upper_chars = _UpperChars()


def _has_capital_run(word: str) -> bool:
    """Two characters in a row for which `str.isupper` holds."""
    return "UU" in word.translate(_upper_chars)


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


class SeededDraws:
    """What langdetect's trials draw from `random.Random(seed)`, reproduced in bulk with numpy.

    A detector reseeds its generator for every text, so every text consumes the same stream of 32-bit
    Mersenne Twister outputs; numpy's MT19937, given the state `random.Random(seed)` starts from, makes
    that stream in one call. `gauss` and `choices` consume it exactly as CPython's `random.gauss` and
    `random.choice` do (tests check them against `random.Random`).
    """

    def __init__(self, seed: int) -> None:
        key_and_pos = random.Random(seed).getstate()[1]
        self._bits = np.random.MT19937()
        self._bits.state = {"bit_generator": "MT19937",
                            "state": {"key": np.array(key_and_pos[:-1], dtype=np.uint32), "pos": key_and_pos[-1]}}
        self.words = np.empty(0, dtype=np.uint32)
        self._gauss_pairs: dict[int, tuple[float, float]] = {}

    def _words(self, end: int) -> np.ndarray:
        """The stream up to `end` at least."""
        if end > len(self.words):
            more = self._bits.random_raw(max(end - len(self.words), 1 << 14)).astype(np.uint32)
            self.words = np.concatenate([self.words, more])
        return self.words

    def _random(self, pos: int) -> float:
        """`random.random()` from the two words at `pos`."""
        a, b = (int(w) for w in self._words(pos + 2)[pos : pos + 2])
        return ((a >> 5) * 67108864.0 + (b >> 6)) * (1.0 / 9007199254740992.0)

    def gauss(self, pos: int, cached: float | None) -> tuple[float, int, float | None]:
        """`random.gauss(0.0, 1.0)` at `pos` with `cached` its `gauss_next`: (value, new pos, new cache).
        Every text's first trial draws it at position 0, so the values are kept by position."""
        if cached is not None:
            return cached, pos, None
        pair = self._gauss_pairs.get(pos)
        if pair is None:
            x2pi = self._random(pos) * random.TWOPI
            g2rad = math.sqrt(-2.0 * math.log(1.0 - self._random(pos + 2)))
            pair = self._gauss_pairs[pos] = (math.cos(x2pi) * g2rad, math.sin(x2pi) * g2rad)
        return pair[0], pos + 4, pair[1]

    def choices(self, pos: np.ndarray, n: np.ndarray, count: int) -> tuple[np.ndarray, np.ndarray]:
        """For each stream position `pos[i]` and sequence length `n[i]` (< 2**32): `count` successive
        `random.choice` indices into a sequence of `n[i]` from `pos[i]`, and the stream position after each,
        as (picks, after), both of shape (len(pos), count). choice takes `n.bit_length()` bits from a word
        and retries while they are >= n."""
        shift = np.array([32 - int(length).bit_length() for length in n], dtype=np.uint32)[:, None]
        width = 2 * count + 64  # more than half of the words are accepted
        while True:
            offsets = pos[:, None] + np.arange(width)
            candidates = self._words(int(pos.max()) + width)[offsets] >> shift
            accepted = candidates < n[:, None]
            rank = np.cumsum(accepted, axis=1)
            if (rank[:, -1] >= count).all():
                break
            width *= 2
        chosen = accepted & (rank <= count)
        picks = candidates[chosen].reshape(len(pos), count).astype(np.intp)
        return picks, offsets[chosen].reshape(len(pos), count) + 1


class LanguageProfiles:
    """langdetect's language profiles as its `DetectorFactory.load_profile` reads them (languages in the
    order the profile folder lists them, an n-gram's probability in a language its count over that
    language's number of n-grams of its length), held as one matrix with a row per n-gram and a column per
    language, built with numpy (langdetect's loader builds a list of 55 floats for each of its 87,598
    n-grams in Python: 0.3 s in every worker process). Each word's n-grams are kept as row numbers, since
    words recur."""

    def __init__(self, directory: str = detector_factory.PROFILES_DIRECTORY) -> None:
        self.langlist: list[str] = []
        profiles = []
        for filename in os.listdir(directory):
            path = os.path.join(directory, filename)
            if filename.startswith(".") or not os.path.isfile(path):
                continue
            with open(path, encoding="utf-8") as f:
                profile = json.load(f)
            self.langlist.append(profile["name"])
            profiles.append(profile)
        self.row = {gram: i for i, gram in enumerate(dict.fromkeys(itertools.chain.from_iterable(
            profile["freq"] for profile in profiles)))}
        self.grams = list(self.row)
        self.matrix = np.zeros((len(self.grams), len(self.langlist)))
        for column, profile in enumerate(profiles):
            freq = profile["freq"]
            rows = np.fromiter(map(self.row.__getitem__, freq), dtype=np.intp, count=len(freq))
            counts = np.fromiter(freq.values(), dtype=np.float64, count=len(freq))
            lengths = np.fromiter(map(len, freq), dtype=np.intp, count=len(freq))
            kept = (lengths >= 1) & (lengths <= 3)  # as langdetect's add_profile: 1.0 * count / n_words[length - 1]
            n_words = np.asarray(profile["n_words"], dtype=np.float64)
            self.matrix[rows[kept], column] = 1.0 * counts[kept] / n_words[lengths[kept] - 1]
        self._word_rows: dict[str, list[int]] = {}

    def word_rows(self, padded: str) -> list[int]:
        """Rows of the known n-grams of `padded` (" " + word, and " " after it unless it ends the text)."""
        rows = self._word_rows.get(padded)
        if rows is None:
            if len(self._word_rows) >= 200_000:
                self._word_rows.clear()
            rows = self._word_rows[padded] = [self.row[gram] for gram in _word_ngrams(padded, self.row)]
        return rows


@functools.cache
def load_profiles() -> LanguageProfiles:
    """The profiles, read once per process."""
    return LanguageProfiles()


# Convergence checks per block of draws. A block costs a few numpy calls for all texts at once, so small
# blocks cost little and spare computing draws past a trial's end (half of the trials on real text end by
# check 8, 90% by check 16).
_CHECKS_PER_BLOCK = (4, 4, 4, 4, 8, 16, 32, 1 << 30)


_sum, _max = np.add.reduce, np.maximum.reduce


class FastDetector(Detector):
    """langdetect's Detector with its per-character Python loops replaced by C-speed string operations
    and its trial loop run in numpy. Same profiles, same draws from the same seeded generator (made in
    bulk: `SeededDraws`), same convergence rule; the five n-grams drawn between two convergence checks
    are multiplied together before they scale the probabilities, so only the floating-point rounding of
    the products can differ from stock, which the tests compare against."""

    _normalized = _NormalizedChars()
    _draws: dict[int, SeededDraws] = {}  # by seed

    def __init__(self, profiles: LanguageProfiles, seed: int) -> None:
        # Detector's attributes, from `profiles` rather than a DetectorFactory; no generator of its own.
        self.profiles = profiles
        self.langlist = profiles.langlist
        self.seed = seed
        self.text = ""
        self.langprob: list[float] | None = None
        self.alpha = self.ALPHA_DEFAULT
        self.n_trial = 7
        self.max_text_length = 10000
        self.prior_map: list[float] | None = None
        self.verbose = False

    def append(self, text: str) -> None:
        text = self.URL_RE.sub(" ", text) if "://" in text else text
        text = self.MAIL_RE.sub(" ", text) if "@" in text else text  # what they need; their scans are slow
        text = NGram.normalize_vi(text)
        self.text += _SPACE_RUN_RE.sub(" ", text[: self.max_text_length])

    def cleaning_text(self) -> None:
        if len(_ASCII_LETTERISH_RE.findall(self.text)) * 2 < len(_NON_LATIN_RE.findall(self.text)):
            self.text = _ASCII_LETTERISH_RE.sub("", self.text)

    def _extract_rows(self) -> list[int]:
        """langdetect's n-grams (1-3 characters, in its order) as profile table rows, built per word
        instead of per character.

        langdetect slides a 3-character buffer over the normalised text, restarting it (with a
        leading space) at each word, and emits the last 1, 2 and 3 characters after each one. So a
        word `w` yields the n-grams of " " + w (+ " " when a space follows), unless two capitals in a
        row switch emission off; such words go through the original character loop.
        """
        words = self.text.translate(self._normalized).split(" ")
        rows: list[int] = []
        last = len(words) - 1
        for index, word in enumerate(words):
            if word:
                rows += self.profiles.word_rows(" " + word + (" " if index < last else ""))
        return rows

    def _extract_ngrams(self) -> list[str]:
        """The n-grams themselves, as stock langdetect lists them (the tests compare the two)."""
        return [self.profiles.grams[i] for i in self._extract_rows()]

    def _detect_block(self) -> None:
        self.cleaning_text()
        rows = np.array(self._extract_rows(), dtype=np.intp)
        if not len(rows):
            raise LangDetectException(ErrorCode.CantDetectError, "No features in text.")
        _detect_in_lockstep([(self, rows)])


def detect_all(detectors: list[FastDetector]) -> None:
    """Detect the language of each detector's text (appended), as its own get_probabilities would, all at
    once: each trial's convergence checks run in lockstep across the texts, a few numpy calls per check
    for all of them instead of for each. Every text's probabilities are scaled, summed and compared
    exactly as alone, so the answers are identical. A text without n-grams is left undetected (its
    get_probabilities raises, as langdetect's does)."""
    todo = []
    for detector in detectors:
        detector.cleaning_text()
        rows = np.array(detector._extract_rows(), dtype=np.intp)
        if len(rows):
            todo.append((detector, rows))
    _detect_in_lockstep(todo)


@dataclass
class _Trials:
    """One text's trials in progress."""
    detector: FastDetector
    rows: np.ndarray  # its n-grams as profile rows
    draws: SeededDraws
    pos: int = 0  # position in the generator's stream (langdetect reseeds its generator for each text)
    cached: float | None = None  # the generator's gauss_next
    weight: float = 0.0
    prob: np.ndarray | None = None
    total: np.ndarray | None = None


_LOCKSTEP_TEXTS = 256  # texts whose trials run together: bounds the (texts, draws, languages) factors


def _detect_in_lockstep(todo: list[tuple[FastDetector, np.ndarray]]) -> None:
    texts = []
    for detector, rows in todo:
        draws = FastDetector._draws.get(detector.seed)
        if draws is None:
            draws = FastDetector._draws[detector.seed] = SeededDraws(detector.seed)
        texts.append(_Trials(detector, rows, draws, total=np.zeros(len(detector.langlist))))
    for trial in range(max((text.detector.n_trial for text in texts), default=0)):
        running = [text for text in texts if text.detector.n_trial > trial]
        for text in running:
            d = text.detector
            z, text.pos, text.cached = text.draws.gauss(text.pos, text.cached)
            text.weight = (d.alpha + z * d.ALPHA_WIDTH) / d.BASE_FREQ
        groups: dict[tuple[int, int], list[_Trials]] = {}  # texts on the same stream and profiles
        for text in running:
            groups.setdefault((id(text.draws), id(text.detector.profiles)), []).append(text)
        for group in groups.values():
            for start in range(0, len(group), _LOCKSTEP_TEXTS):
                _run_trials(group[start : start + _LOCKSTEP_TEXTS])
        for text in running:
            text.total += text.prob / text.detector.n_trial
    for text in texts:
        text.detector.langprob = text.total.tolist()


def _run_trials(running: list[_Trials]) -> None:
    """One trial of each text (all on one stream and one set of profiles), from its stream position;
    sets its probabilities and the position after its last draw.

    langdetect checks convergence after draw 0 and then after every fifth draw (draw i = 5c for check c),
    stopping once a language passes CONV_THRESHOLD or at ITERATION_LIMIT. The texts' draws and the
    products of the five factors between checks are computed for all of them a block of checks at a time,
    then the checks for all texts still running at once."""
    limit, threshold = Detector.ITERATION_LIMIT, Detector.CONV_THRESHOLD
    last_check = -(-limit // 5)  # the first c with 5c >= the limit
    draws, matrix = running[0].draws, running[0].detector.profiles.matrix
    probs = np.array([text.detector._init_probability() for text in running], dtype=np.float64)
    lengths = np.array([len(text.rows) for text in running])
    rows = np.concatenate([text.rows for text in running])
    starts = np.cumsum(lengths) - lengths  # of each text's rows in `rows`
    weights = np.array([text.weight for text in running])
    pos = np.array([text.pos for text in running])
    alive = np.arange(len(running))  # the texts still running, as indices into `running`
    check = 0
    for block in _CHECKS_PER_BLOCK:
        end = min(check + block, last_check + 1)  # checks [check, end)
        first_draw = 0 if check == 0 else 5 * check - 4
        picks, after = draws.choices(pos[alive], lengths[alive], 5 * (end - 1) + 1 - first_draw)
        factors = weights[alive, None, None] + matrix[rows[starts[alive, None] + picks]]  # (texts, draws, languages)
        steps = factors[:, 1:] if check == 0 else factors  # check 0 follows a single draw
        products = steps.reshape(len(alive), -1, 5, factors.shape[2]).prod(axis=2)
        if check == 0:
            products = np.concatenate([factors[:, :1], products], axis=1)
        for j in range(end - check):
            probs *= products[:, j]
            probs /= _sum(probs, axis=1)[:, None]  # each row as alone: the same pairwise sum of its values
            done = _max(probs, axis=1) > threshold
            if done.any() or 5 * (check + j) >= limit:
                done |= 5 * (check + j) >= limit
                last_draw = 5 * j if check == 0 else 5 * j + 4
                for i in np.flatnonzero(done):
                    running[alive[i]].prob, running[alive[i]].pos = probs[i].copy(), int(after[i, last_draw])
                keep = np.flatnonzero(~done)
                if not len(keep):
                    return
                probs, products, after, alive = probs[keep], products[keep], after[keep], alive[keep]
        pos[alive] = after[:, -1]
        check = end
    raise AssertionError("the iteration limit ends every trial")


def _word_ngrams(padded: str, known: dict) -> list[str]:
    """The known n-grams of one padded word, in langdetect's order."""
    if not padded.islower() and _has_capital_run(padded):
        return _char_loop_ngrams(padded, known)
    # After each character from the second on: the 1-, 2- and 3-gram ending there (no 3-gram after the
    # second), built and looked up in C. A lone space (the trailing one) is no profile n-gram, so the
    # look-up drops it, as langdetect does.
    unigrams = padded[1:]
    bigrams = list(map(operator.add, padded, unigrams))
    trigrams = ["", *map(operator.add, bigrams, padded[2:])]
    return list(filter(known.__contains__, itertools.chain.from_iterable(zip(unigrams, bigrams, trigrams))))


@dataclass(frozen=True)
class LangResult:
    lang: str  # ISO 639-1, or "und" when nothing could be detected: the most probable language
    prob: float  # its probability (langdetect's, per detector code: zh-cn and zh-tw apart)
    # The probability of the text being in one of the languages kept (`LanguageIdentifier`'s `keep`; the
    # sum of their probabilities, each averaged over the trials): related languages kept together
    # (ru/bg/uk, es/pt, cs/sk, zh-cn/zh-tw) split the detector's probability on short text, while the text
    # is certainly in one of them. At least `prob` when the top language is kept.
    kept_prob: float = 0.0


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
    if text.isascii():  # no CJK, no other script: what the counts below come to
        return spread_sample(text, max_chars), "latin"
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
        self._profiles = load_profiles()
        self._seed = seed
        self._max_chars = max_chars
        self._n_trials = n_trials
        self._kept_scripts = {LANG_SCRIPT.get(lang, "latin") for lang in keep}
        keep = set(keep)
        # the profile columns of the kept languages, in the detector's order (the sum is taken in it)
        self._kept_columns = [i for i, name in enumerate(self._profiles.langlist) if _FOLD.get(name, name) in keep]
        prior = FastDetector(self._profiles, seed)
        prior.set_prior_map(_HAN_ONLY_PRIOR)
        self._han_prior = prior.prior_map

    def configure(self, detector: Detector, sample: str, script: str) -> Detector:
        """Set `detector` up for a sample of `script` (see the module's docstring) and append the sample."""
        detector.seed = self._seed
        detector.n_trial = self._n_trials
        if script == "han":
            detector.prior_map = self._han_prior  # what set_prior_map(_HAN_ONLY_PRIOR) makes; only ever copied
            detector.n_trial = 1
        elif self._kept_scripts and script not in self._kept_scripts:
            detector.n_trial = 1
        detector.set_max_text_length(self._max_chars)
        detector.append(sample)
        return detector

    def identify(self, texts: list[str]) -> list[LangResult]:
        """The language of each text, all detected at once (`detect_all`); the same answers as one by one."""
        detectors = [self.configure(FastDetector(self._profiles, self._seed), *script_sample(text, self._max_chars))
                     for text in texts]
        detect_all(detectors)
        return [_result(detector, self._kept_columns) for detector in detectors]

    def __call__(self, text: str) -> LangResult:
        return self.identify([text])[0]


def _result(detector: Detector, kept_columns: list[int]) -> LangResult:
    try:
        best = detector.get_probabilities()[0]
    except (LangDetectException, IndexError):  # no letters at all
        return LangResult("und", 0.0)
    # every language's probability, below langdetect's reporting threshold (0.1) too
    kept_prob = float(sum(detector.langprob[i] for i in kept_columns))
    return LangResult(_FOLD.get(best.lang, best.lang), float(best.prob), min(kept_prob, 1.0))
