import pytest

from stages.common.lm import bpe
from tests.fixtures.lm_corpus import EN, ZH, synthetic_docs

SPECIAL = dict(eos_token="<|endoftext|>", pad_token="<|pad|>")


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    texts = [d["text"] for d in synthetic_docs(200)] + [EN, ZH] * 5
    tokenizer = bpe.train_bpe(texts, vocab_size=600, min_frequency=2, extra_special_tokens=("<|mask|>",), **SPECIAL)
    out = tmp_path_factory.mktemp("tok")
    bpe.save(tokenizer, out, **SPECIAL)
    return tokenizer, out


@pytest.mark.parametrize("text", [EN, ZH, "混合 mixed 文本 with digits 2024 and emoji 🙂 and tabs\tand\nnewlines  ",
                                  "繁體中文：臺灣的資訊"])
def test_round_trip_chinese_and_english(trained, text):
    tokenizer, _ = trained
    ids = tokenizer.encode(text).ids
    assert tokenizer.decode(ids) == text  # byte-level: lossless, even for characters never seen in training


def test_special_tokens_come_first_and_merges_compress(trained):
    tokenizer, _ = trained
    assert [tokenizer.token_to_id(t) for t in ("<|endoftext|>", "<|pad|>", "<|mask|>")] == [0, 1, 2]
    assert tokenizer.get_vocab_size() == 600
    seen_en, seen_zh = "the river near the town is quiet in the morning .", "河流旁边的小镇在学校很安静。"
    assert len(tokenizer.encode(seen_en).ids) < len(seen_en.split()) + 2  # whole words merged, not bytes
    assert len(tokenizer.encode(seen_zh).ids) < len(seen_zh)  # frequent 2-character words are one token


def test_transformers_loads_the_saved_folder(trained):
    from transformers import AutoTokenizer, PreTrainedTokenizerFast

    tokenizer, out = trained
    for loaded in (PreTrainedTokenizerFast.from_pretrained(str(out)), AutoTokenizer.from_pretrained(str(out))):
        assert loaded.eos_token == "<|endoftext|>" and loaded.eos_token_id == 0 and loaded.pad_token_id == 1
        assert loaded(ZH + EN)["input_ids"] == tokenizer.encode(ZH + EN).ids
        assert loaded.decode(loaded(ZH + EN)["input_ids"]) == ZH + EN
    assert bpe.eos_token_of(out) == "<|endoftext|>"


def test_training_is_deterministic(tmp_path):
    texts = [d["text"] for d in synthetic_docs(100, seed=3)]
    for name in ("a", "b"):
        (tmp_path / name).mkdir()
        bpe.save(bpe.train_bpe(texts, 400, 2, **SPECIAL), tmp_path / name, **SPECIAL)
    for file in ("tokenizer.json", "tokenizer_config.json"):
        assert (tmp_path / "a" / file).read_bytes() == (tmp_path / "b" / file).read_bytes()


def test_encode_is_parallel_batch_equivalent(trained):
    tokenizer, _ = trained
    texts = [EN, ZH, "", "x"]
    assert [list(ids) for ids in bpe.encode(tokenizer, texts)] == [tokenizer.encode(t).ids for t in texts]


def test_unknown_special_token_is_named(trained):
    with pytest.raises(ValueError, match="<|nope|>"):
        bpe.special_token_id(trained[0], "<|nope|>")
