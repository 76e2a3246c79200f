import dataclasses
import hashlib
import json
import random
import tracemalloc
from pathlib import Path

import numpy as np
import pytest

from stages import tokenizer
from stages.common.lm import bpe
from tests.fixtures.lm_corpus import EN, ZH, synthetic_docs, write_docs


def make_params(tmp_path: Path, **overrides) -> tokenizer.Params:
    docs_dir = write_docs(tmp_path / "docs", synthetic_docs(200), rows_per_part=70)  # several part files
    return tokenizer.Params(input_dir=str(docs_dir), out_dir=str(tmp_path / "tok"),
                            metrics_path=str(tmp_path / "metrics" / "tokenizer.json"),
                            detail_path=str(tmp_path / "metrics" / "tokenizer.detail.json"), vocab_size=500,
                            **overrides)


def test_trains_saves_and_reports(tmp_path):
    params = make_params(tmp_path)
    metrics = tokenizer.run(params)
    out = Path(params.out_dir)
    assert (out / "_SUCCESS").is_file() and (out / bpe.TOKENIZER_FILE).is_file()
    tok = bpe.load(out)
    assert tok.get_vocab_size() == 500 and tok.token_to_id("<|endoftext|>") == 0 and tok.token_to_id("<|pad|>") == 1
    assert tok.decode(tok.encode(EN + ZH).ids) == EN + ZH
    assert metrics["num_docs"] == metrics["num_train_docs"] == 200 and metrics["vocab_size"] == 500
    assert metrics["chars_per_token.en"] > 2 and metrics["chars_per_token.zh"] > 0.5  # zh: 25% random characters
    assert json.loads(Path(params.detail_path).read_text()) == metrics


def test_training_sample_is_seeded_and_bounded(tmp_path):
    params = make_params(tmp_path, max_train_chars=5000)
    metrics = tokenizer.run(params)
    assert 5000 <= metrics["train_chars"] < 5000 + 2000 and metrics["num_train_docs"] < 200
    docs = [(f"d{i}", 100) for i in range(50)]
    sample = tokenizer.training_sample(docs, 1000, seed=0)
    assert sample == sorted(sample) and len(sample) == 10 and sample == tokenizer.training_sample(docs, 1000, 0)
    assert sample != tokenizer.training_sample(docs, 1000, seed=1)


def sorted_sample(ids: list[str], lengths: list[int], max_chars: int, seed: int) -> list[int]:
    """The sample as it was first written: every id sorted by its seeded hash, then a prefix of the lengths."""
    if not max_chars:
        return list(range(len(ids)))
    order = sorted(range(len(ids)), key=lambda i: hashlib.blake2b(f"{seed}:{ids[i]}".encode(), digest_size=8).digest())
    num_taken = int(np.searchsorted(np.cumsum([lengths[i] for i in order]), max_chars)) + 1
    return sorted(order[:num_taken])


@pytest.mark.parametrize("seed", [0, 1, 7])
def test_streamed_sample_is_the_sorted_one(seed):
    """The heap keeps exactly the documents the full sort took: ties of repeated ids, empty documents, budgets
    that end exactly on a document, a budget above the corpus."""
    rng = random.Random(seed)
    ids = [f"doc-{rng.randrange(400)}" for _ in range(600)]  # repeats: equal hashes, kept in input order
    lengths = [rng.choice([0, 0, 1, 5, 40, 300, 2000]) for _ in ids]
    order = sorted(range(len(ids)), key=lambda i: hashlib.blake2b(f"{seed}:{ids[i]}".encode(), digest_size=8).digest())
    exact = [int(c) for c in np.cumsum([lengths[i] for i in order])[[10, 100, 250]]]  # budgets hit exactly
    for max_chars in [0, 1, 999, 5000, 60_000, sum(lengths), sum(lengths) + 1, 10**9, *exact]:
        assert tokenizer.training_sample(zip(ids, lengths), max_chars, seed) == \
            sorted_sample(ids, lengths, max_chars, seed), max_chars


def test_sample_memory_is_bounded_by_the_budget_not_the_corpus():
    """100,000 documents streamed past a 20,000-character budget: the heap holds 200 of them."""
    docs = ((f"doc-{i}", 100) for i in range(100_000))
    tracemalloc.start()
    sample = tokenizer.training_sample(docs, 20_000, seed=0)
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    assert len(sample) == 200 and peak < 200_000, peak


def test_the_sample_is_what_trains_and_counts(tmp_path):
    params = make_params(tmp_path, max_train_chars=5000)
    metrics = tokenizer.run(params)
    docs = synthetic_docs(200)
    sample = sorted_sample([d["id"] for d in docs], [len(d["text"]) for d in docs], 5000, 0)
    assert metrics["num_train_docs"] == len(sample)
    assert metrics["train_chars"] == sum(len(docs[i]["text"]) for i in sample)
    full = tokenizer.run(dataclasses.replace(params, out_dir=str(tmp_path / "all"), max_train_chars=10**9))
    assert full["num_train_docs"] == full["num_docs"] == 200


@pytest.mark.parametrize("overrides, match", [
    ({"vocab_size": 100}, "vocab_size"),
    ({"pad_token": "<|endoftext|>"}, "pad_token"),
    ({"max_train_chars": -1}, "max_train_chars"),
])
def test_invalid_params_are_named(overrides, match):
    with pytest.raises(ValueError, match=match):
        tokenizer.Params(input_dir="docs", out_dir="tok", metrics_path="tokenizer.json",
                         detail_path="tokenizer.detail.json", **overrides)
