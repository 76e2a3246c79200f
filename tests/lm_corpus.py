"""A tiny synthetic bilingual corpus for the tokenizer / model / perplexity tests.

English and Chinese documents built from small vocabularies and fixed sentence patterns (so a tiny
model learns them in a few dozen steps), plus a share of `noisy` documents (random letters and
characters) that any LM finds hard: the corpus has a real perplexity spread.
"""
from __future__ import annotations

import random
from pathlib import Path

import pyarrow as pa
import pytest
import torch

from stages.common.io import DOC_SCHEMA, ShardWriter

EN_WORDS = ("river town people water spring snow bread street market school teacher garden house window "
            "morning evening family friend village mountain road train station letter book table").split()
EN_PATTERNS = ("the {0} near the {1} is quiet in the {2} .", "a {0} and a {1} walked to the {2} .",
               "in the {0} the {1} waits for the {2} .")
ZH_WORDS = "河流 小镇 人们 春天 积雪 面包 街道 市场 学校 老师 花园 房子 窗户 早上 晚上 家人 朋友 村庄 山路 火车 车站 书信".split()
ZH_PATTERNS = ("{0}旁边的{1}在{2}很安静。", "{0}和{1}一起走到{2}。", "在{0}里{1}等着{2}。")
EN = "The river runs through the old town, and the people who live there have fished in it for generations."
ZH = "这条河流经古老的小镇，住在那里的人们世世代代在河里捕鱼。春天，河水上涨。"


@pytest.fixture(scope="module")
def one_torch_thread():
    """Tiny models gain nothing from a second thread, and on a busy machine two OpenMP threads can be
    100x slower than one (each parallel region waits for a descheduled thread)."""
    num_threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(num_threads)


def sentence(rng: random.Random, lang: str) -> str:
    words, patterns = (EN_WORDS, EN_PATTERNS) if lang == "en" else (ZH_WORDS, ZH_PATTERNS)
    return rng.choice(patterns).format(*(rng.choice(words) for _ in range(3)))


def noisy_text(rng: random.Random, lang: str, num_chars: int) -> str:
    if lang == "en":
        return " ".join("".join(rng.choice("abcdefghijklmnopqrstuvwxyz") for _ in range(rng.randint(2, 9)))
                        for _ in range(num_chars // 6))
    return "".join(chr(rng.randint(0x4E00, 0x9FFF)) for _ in range(num_chars))


def synthetic_docs(num_docs: int, seed: int = 0, noisy_share: float = 0.3) -> list[dict]:
    rng = random.Random(seed)
    docs = []
    for i in range(num_docs):
        lang = "en" if i % 2 == 0 else "zh"
        if rng.random() < noisy_share:
            text = noisy_text(rng, lang, rng.randint(60, 300))
        else:
            text = " ".join(sentence(rng, lang) for _ in range(rng.randint(3, 30)))
        docs.append({"id": f"doc-{i:05d}", "text": text, "lang": lang, "lang_prob": 1.0, "source": "synthetic",
                     "meta": "{}"})
    return docs


def write_docs(folder: Path, docs: list[dict], quality_scores: list[float] | None = None,
               rows_per_shard: int = 100_000) -> Path:
    """Write docs as the clean stage does (part-*.parquet), with a quality_score column when given."""
    schema = DOC_SCHEMA
    if quality_scores is not None:
        schema = schema.append(pa.field("quality_score", pa.float32()))
        docs = [{**d, "quality_score": q} for d, q in zip(docs, quality_scores)]
    writer = ShardWriter(folder, schema, rows_per_shard)
    for doc in docs:
        writer.write(doc)
    writer.close()
    return folder
