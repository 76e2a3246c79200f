import json
from pathlib import Path

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
    ids = [f"d{i}" for i in range(50)]
    texts = ["x" * 100] * 50
    sample = tokenizer.training_sample(ids, texts, 1000, seed=0)
    assert sample == sorted(sample) and len(sample) == 10 and sample == tokenizer.training_sample(ids, texts, 1000, 0)
    assert sample != tokenizer.training_sample(ids, texts, 1000, seed=1)


@pytest.mark.parametrize("overrides, match", [
    ({"vocab_size": 100}, "vocab_size"),
    ({"pad_token": "<|endoftext|>"}, "pad_token"),
    ({"max_train_chars": -1}, "max_train_chars"),
])
def test_invalid_params_are_named(overrides, match):
    with pytest.raises(ValueError, match=match):
        tokenizer.Params(input_dir="docs", out_dir="tok", metrics_path="tokenizer.json",
                         detail_path="tokenizer.detail.json", **overrides)
