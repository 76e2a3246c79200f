"""The dataset card: derived from the written Parquet schema (typed columns it does not know included), loadable
by Hugging Face `datasets` through its configs, deterministic, and free of credentials and local paths."""
from dataclasses import dataclass
from pathlib import Path

import pyarrow as pa
import pytest

from stages import clean
from stages.common.runtime.parquet import DOC_SCHEMA, QUARANTINE_SCHEMA, PartWriter
from stages.common.text.dataset_card import dataset_card, hf_dtype, public, size_category, write_dataset_card
from tests.fixtures.hf_datasets import hf_load


@dataclass(frozen=True)
class Nested:
    threshold: float = 0.7


@dataclass(frozen=True)
class Params:
    input: str = "s3://AKIAKEY:s3cr3t@bucket/raw/?X-Amz-Signature=abc#frag"
    tokenizer_dir: str = "/home/someone/models/tok"
    out_dir: str = "data/out"
    metrics_path: str = "metrics/x.json"
    work_dir: str = "/scratch/work"
    seed: int = 3
    dedup: Nested = Nested()


def publish(folder: Path, extra: list[tuple[str, pa.DataType]], rows: list[dict]) -> Path:
    """docs/ with the standard columns plus `extra` (as `clean.keep_fields` may add), an empty quarantine, and
    files that are not part of the dataset."""
    docs = PartWriter(folder / "docs", pa.schema([*DOC_SCHEMA, *extra]), rows_per_part=2)
    for row in rows:
        docs.write(row)
    docs.close()
    PartWriter(folder / "quarantine", QUARANTINE_SCHEMA, 10).close()
    (folder / "tokens").mkdir()
    (folder / "tokens" / "train.bin").write_bytes(b"\0" * 64)
    (folder / "cutoffs.csv").write_text("lang,easy_max\nen,3.0\n")
    return folder


def rows() -> list[dict]:
    return [{"id": f"d{i}", "text": "é" * (i + 1), "lang": ("en", "zh", None)[i % 3], "lang_prob": 0.5,
             "source": "a.jsonl", "meta": "{}", "year": 2000 + i, "url": None if i % 2 else f"https://x/{i}",
             "ok": i % 2 == 0, "weight": i / 4} for i in range(5)]


TYPED = [("year", pa.int64()), ("url", pa.string()), ("ok", pa.bool_()), ("weight", pa.float64())]


def test_public_strips_credentials_queries_and_local_paths():
    assert public("s3://AKIAKEY:s3cr3t@bucket/raw/?X-Amz-Signature=abc#frag") == "s3://bucket/raw/"
    assert public("https://user@example.com:8443/d?token=1") == "https://example.com:8443/d"
    assert public("/home/someone/data/raw") == "…/raw"
    assert public("data/raw/demo") == "data/raw/demo"


def test_size_categories_and_dtypes():
    assert [size_category(n) for n in (0, 999, 1000, 123_456, 10**13)] == ["n<1K", "n<1K", "1K<n<10K",
                                                                          "100K<n<1M", "n>1T"]
    assert [hf_dtype(t) for t in (pa.float32(), pa.large_string(), pa.int64(), pa.bool_(), pa.date32(),
                                  pa.list_(pa.string()))] == ["float32", "large_string", "int64", "bool", "date32",
                                                              None]


def test_card_follows_the_written_schema_and_loads_with_hf_datasets(tmp_path):
    folder = publish(tmp_path / "out", TYPED, rows())
    write_dataset_card(folder, "clean", clean, Params())
    card = (folder / "README.md").read_text()
    assert card == dataset_card(folder, "clean", clean, Params())  # nothing from the clock or the machine
    assert "language:\n- \"en\"\n- \"zh\"\nsize_categories:\n- \"n<1K\"\ntask_categories:\n- text-generation\n" in card
    assert "  - name: \"year\"\n    dtype: int64" in card and "  - name: \"weight\"\n    dtype: float64" in card
    assert "| `year` | `int64` |  |" in card and "| `ok` | `bool` |  |" in card  # unknown: type, no meaning
    assert "| `en` | 2 | 10 |" in card and "| (none) | 1 | 6 |" in card  # "é" is two bytes
    assert "5 documents, 30 bytes of text (UTF-8)" in card and "in 3 part file(s)" in card
    assert "`quarantine/`: 0 dropped records" in card
    # Params: what shaped the output, without credentials, queries, local paths or the stage's own outputs.
    assert "| `input` | `\"s3://bucket/raw/\"` |" in card and "| `dedup.threshold` | `0.7` |" in card
    assert "| `tokenizer_dir` | `\"…/tok\"` |" in card
    for hidden in ("s3cr3t", "AKIAKEY", "Signature", "frag", "someone", "scratch", "metrics/x.json", "data/out"):
        assert hidden not in card, hidden

    # The configs point load_dataset at docs/ only: not the token shards, the CSV or the (empty) quarantine.
    folder_load, glob_load = hf_load(tmp_path, {"path": str(folder)},
                                     {"path": "parquet", "data_files": f"{folder}/docs/*.parquet"})
    assert folder_load == glob_load
    assert folder_load["num_rows"] == 5 and [r["id"] for r in folder_load["rows"]] == [f"d{i}" for i in range(5)]
    assert folder_load["features"] == {"id": "string", "text": "large_string", "lang": "string",
                                       "lang_prob": "float32", "source": "string", "file": "string", "meta": "string",
                                       "year": "int64", "url": "string", "ok": "bool", "weight": "float64"}
    assert folder_load["rows"][1]["url"] is None and folder_load["rows"][2]["lang"] is None


def test_a_nested_column_leaves_the_features_to_datasets(tmp_path):
    folder = publish(tmp_path / "out", [("tags", pa.list_(pa.string()))],
                     [{"id": "a", "text": "x", "lang": "en", "tags": ["p", "q"]}])
    write_dataset_card(folder, "clean", clean, Params())
    card = (folder / "README.md").read_text()
    default = card.split("- config_name: default\n")[2].split("- config_name: quarantine")[0]  # dataset_info's
    assert "features:" not in default and "num_examples: 1" in default
    assert "| `tags` | `list<element: string>` |  |" in card
    (loaded,) = hf_load(tmp_path, {"path": str(folder)})
    assert loaded["rows"][0]["tags"] == ["p", "q"]


def test_a_wrong_row_count_in_the_card_is_caught_by_datasets(tmp_path):
    """`datasets` checks the card's num_examples against what it read: a card out of step fails loudly."""
    folder = publish(tmp_path / "out", [], [{"id": "a", "text": "x"}, {"id": "b", "text": "y"}])
    write_dataset_card(folder, "clean", clean, Params())
    card = folder / "README.md"
    card.write_text(card.read_text().replace("num_examples: 2", "num_examples: 3", 1))
    with pytest.raises(AssertionError, match="NonMatchingSplitsSizesError"):
        hf_load(tmp_path, {"path": str(folder)})


def test_an_empty_dataset_gets_a_card_that_says_so(tmp_path):
    folder = publish(tmp_path / "out", [], [])
    write_dataset_card(folder, "clean", clean, Params())
    card = (folder / "README.md").read_text()
    assert "language:" not in card and "num_examples: 0" in card and "0 documents, 0 bytes of text" in card
    assert "The dataset is empty: `datasets` refuses to load an empty split" in card
