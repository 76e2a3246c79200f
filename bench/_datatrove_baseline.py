"""The datatrove pipeline a user would assemble instead of `clean` (run by bench/clean_vs_datatrove.py with
the Python of its own virtualenv, where datatrove, spaCy and langdetect are installed; it imports nothing
from this project):

    JsonlReader -> GopherRepetitionFilter -> GopherQualityFilter -> LambdaFilter(seeded langdetect keeps
    zh-cn, zh-tw, en) -> JsonlWriter, on a LocalPipelineExecutor with one task per worker.

All filters take datatrove's default arguments (English word tokenizer: spaCy's blank `en`).

    python bench/_datatrove_baseline.py INPUT_FOLDER OUTPUT_FOLDER LOGGING_FOLDER WORKERS
"""
import sys

from datatrove.data import Document
from datatrove.executor import LocalPipelineExecutor
from datatrove.pipeline.filters import GopherQualityFilter, GopherRepetitionFilter, LambdaFilter
from datatrove.pipeline.readers import JsonlReader
from datatrove.pipeline.writers import JsonlWriter

KEEP = ("zh-cn", "zh-tw", "en")


def keep_zh_en(doc: Document) -> bool:
    from langdetect import DetectorFactory, detect
    from langdetect.lang_detect_exception import LangDetectException

    DetectorFactory.seed = 0  # langdetect is random; seeded, each document's answer is reproducible
    try:
        return detect(doc.text) in KEEP
    except LangDetectException:  # no letters at all
        return False


def main() -> None:
    input_folder, output_folder, logging_folder, workers = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
    pipeline = [
        JsonlReader(input_folder),
        GopherRepetitionFilter(),
        GopherQualityFilter(),
        LambdaFilter(keep_zh_en),
        JsonlWriter(output_folder),
    ]
    LocalPipelineExecutor(pipeline, tasks=workers, workers=workers, logging_dir=logging_folder).run()


if __name__ == "__main__":
    main()
