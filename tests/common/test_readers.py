import json

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import zstandard

from stages.common.readers import Record, Rejection, iter_raw, list_input_files, parse_raw
from tests.conftest import write_jsonl


def parse_all(files, max_bytes=10_000):
    return [parse_raw(raw, max_bytes) for raw in iter_raw(files)]


def test_jsonl_gz_zst_parquet_and_text_files(tmp_path):
    write_jsonl(tmp_path / "a.jsonl", [{"id": "a1", "text": "alpha", "url": "u"}])
    write_jsonl(tmp_path / "b.jsonl.gz", [{"text": "beta"}], compress=True)
    (tmp_path / "c.jsonl.zst").write_bytes(zstandard.ZstdCompressor().compress(b'{"id": 7, "text": "gamma"}\n'))
    pq.write_table(pa.table({"id": ["p1"], "text": ["delta"], "score": [0.5]}), tmp_path / "d.parquet")
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "e.txt").write_text("epsilon\nsecond line\n")
    (tmp_path / "ignored.csv").write_text("x")
    files = list_input_files(str(tmp_path))
    assert [f.rsplit("/", 1)[1] for f in files] == ["a.jsonl", "b.jsonl.gz", "c.jsonl.zst", "d.parquet", "e.txt"]
    records = parse_all(files)
    assert all(isinstance(r, Record) for r in records)
    assert [r.text for r in records] == ["alpha", "beta", "gamma", "delta", "epsilon\nsecond line\n"]
    assert records[0].id == "a1" and records[0].meta == {"url": "u"}
    assert records[2].id == "7"
    assert records[3].meta == {"score": 0.5}
    assert records[1].id.startswith("h-")


def test_glob_and_pattern_select_files(tmp_path):
    write_jsonl(tmp_path / "x.jsonl", [{"text": "a"}])
    write_jsonl(tmp_path / "y.jsonl", [{"text": "b"}])
    assert len(list_input_files(str(tmp_path / "*.jsonl"))) == 2
    assert len(list_input_files(str(tmp_path), pattern="y*")) == 1
    with pytest.raises(ValueError, match="matches no"):
        list_input_files(str(tmp_path), pattern="z*")
    with pytest.raises(ValueError, match="does not exist"):
        list_input_files(str(tmp_path / "missing"))


def test_derived_ids_are_stable_and_distinct_for_repeated_lines(tmp_path):
    path = write_jsonl(tmp_path / "r.jsonl", [{"text": "same"}, {"text": "same"}])
    first, second = parse_all([str(path)])
    assert first.id != second.id
    assert [r.id for r in parse_all([str(path)])] == [first.id, second.id]


@pytest.mark.parametrize("line, reason", [
    (b'{"id": "t", "text": "trunc', "invalid:bad_json"),
    (b'{"id": "u", "text": "caf\xe9"}', "invalid:bad_utf8"),
    (b'[1, 2, 3]', "invalid:not_object"),
    (b'{"id": "m", "body": "no text field"}', "invalid:missing_text"),
    (b'{"id": "n", "text": 42}', "invalid:non_string_text"),
    (b'{"id": "l", "text": ["a"]}', "invalid:non_string_text"),
    (b'{"id": "z", "text": null}', "invalid:non_string_text"),
    (b'{"id": "e", "text": "   \\n\\t "}', "invalid:empty"),
    (b'{"id": "b", "text": "' + b"\\u0000\\u0001\\u0002\\u0003" * 10 + b'"}', "invalid:binary"),
    (b'{"id": "o", "text": "' + b"x" * 20_000 + b'"}', "invalid:oversized"),
])
def test_malformed_records_are_rejected_with_reason_and_original(tmp_path, line, reason):
    path = write_jsonl(tmp_path / "bad.jsonl", [line])
    (result,) = parse_all([str(path)])
    assert isinstance(result, Rejection)
    assert result.reason == reason
    assert result.original.encode("utf-8", "backslashreplace").startswith(line[:20].replace(b"\xe9", b"\\xe9"))


def test_parquet_rows_with_bad_text(tmp_path):
    pq.write_table(pa.table({"id": ["a", "b"], "text": [None, "ok"]}), tmp_path / "d.parquet")
    bad, good = parse_all([str(tmp_path / "d.parquet")])
    assert isinstance(bad, Rejection) and bad.reason == "invalid:non_string_text"
    assert json.loads(bad.original) == {"id": "a", "text": None}
    assert isinstance(good, Record)
