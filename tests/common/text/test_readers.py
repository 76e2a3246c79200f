import contextlib
import encodings.aliases
import glob
import gzip
import io
import json
import os
import pkgutil
import random
import subprocess
import sys
import time
import tracemalloc
import uuid
import zlib
from collections import Counter

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import zstandard

from stages.common.text import readers
from stages.common.text.readers import InputError, Record, Rejection, iter_raw, list_input_files, parse_raw
from tests.conftest import ROOT, write_jsonl
from tests.fixtures.warc import EN_PAGE, write_warc, write_wet


def parse_all(files, max_bytes=10_000):
    return [parse_raw(raw, max_bytes) for raw in iter_raw(files, max_bytes)]


def test_jsonl_gz_zst_parquet_and_text_files(tmp_path):
    write_jsonl(tmp_path / "a.jsonl", [{"id": "a1", "text": "alpha", "url": "u"}])
    write_jsonl(tmp_path / "b.jsonl.gz", [{"text": "beta"}], compress=True)
    (tmp_path / "c.jsonl.zst").write_bytes(zstandard.ZstdCompressor().compress(b'{"id": 7, "text": "gamma"}\n'))
    pq.write_table(pa.table({"id": ["p1"], "text": ["delta"], "score": [0.5]}), tmp_path / "d.parquet")
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "e.txt").write_text("epsilon\nsecond line\n")
    (tmp_path / "ignored.xml").write_text("x")
    files = list_input_files(str(tmp_path))
    assert [f.rsplit("/", 1)[1] for f in files] == ["a.jsonl", "b.jsonl.gz", "c.jsonl.zst", "d.parquet", "e.txt"]
    records = parse_all(files)
    assert all(isinstance(r, Record) for r in records)
    assert [r.text for r in records] == ["alpha", "beta", "gamma", "delta", "epsilon\nsecond line\n"]
    assert records[0].id == "a1" and records[0].meta == {"url": "u"}
    assert records[2].id == "7"
    assert records[3].meta == {"score": 0.5}
    assert records[1].id.startswith("h-")


def test_each_input_file_is_opened_once(tmp_path, monkeypatch):
    """Every format reads its file through one open (a zstd file's frames are checked on that same handle)."""
    from stages.common.runtime import storage
    from stages.common.text.readers import lines, tabular, warc
    write_jsonl(tmp_path / "a.jsonl", [{"text": "alpha"}])
    write_jsonl(tmp_path / "b.jsonl.gz", [{"text": "beta"}], compress=True)
    (tmp_path / "c.jsonl.zst").write_bytes(zstandard.ZstdCompressor().compress(b'{"text": "gamma"}\n'))
    pq.write_table(pa.table({"text": ["delta"]}), tmp_path / "d.parquet")
    (tmp_path / "e.csv").write_text("text\nepsilon\n")
    (tmp_path / "f.txt").write_text("zeta\n")
    write_warc(tmp_path / "g.warc.gz")
    opened = Counter()

    def counting_open(path, *args, **kwargs):
        opened[os.path.basename(path)] += 1
        return storage.open_input(path, *args, **kwargs)

    for module in (lines, tabular, warc):
        if hasattr(module, "open_input"):
            monkeypatch.setattr(module, "open_input", counting_open)
    files = list_input_files(str(tmp_path))
    assert len(list(iter_raw(files))) > 7  # one record in each file but the WARC, which holds several
    assert opened == {os.path.basename(f): 1 for f in files}


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


# --- hostile input: nothing lost silently, no single record stops a run, bounded cost per record ---

def jsonl_bytes(n):
    return b"".join(json.dumps({"id": f"r{i}", "text": f"record {i} " + "x" * (i % 50)}).encode() + b"\n"
                    for i in range(n))


def read_ids(path, max_bytes=10_000):
    return [r.id for r in parse_all([str(path)], max_bytes)]


@pytest.mark.parametrize("checksum", [True, False])
def test_truncated_zst_fails_naming_file_and_offset(tmp_path, checksum):
    data = zstandard.ZstdCompressor(write_checksum=checksum).compress(jsonl_bytes(2000))
    path = tmp_path / "cut.jsonl.zst"
    path.write_bytes(data[:len(data) // 2])
    with pytest.raises(InputError, match=rf"cut\.jsonl\.zst: truncated zstd stream: the file ends at byte "
                                         rf"{len(data) // 2}") as error:
        list(iter_raw([str(path)]))
    assert "\n" not in str(error.value)


def test_zst_with_several_frames_is_read_whole(tmp_path):
    first, second = jsonl_bytes(3), b'{"id": "last", "text": "in the second frame"}\n'
    skippable = (0x184D2A50).to_bytes(4, "little") + (3).to_bytes(4, "little") + b"abc"
    path = tmp_path / "frames.jsonl.zst"
    path.write_bytes(zstandard.ZstdCompressor(write_checksum=True).compress(first) + skippable
                     + zstandard.ZstdCompressor().compress(second))
    assert read_ids(path) == ["r0", "r1", "r2", "last"]


def test_corrupt_zst_content_fails_naming_file_and_line(tmp_path):
    data = bytearray(zstandard.ZstdCompressor(write_checksum=True).compress(jsonl_bytes(20_000)))
    data[len(data) // 2] ^= 0xFF
    path = tmp_path / "flipped.jsonl.zst"
    path.write_bytes(bytes(data))
    with pytest.raises(InputError, match=r"flipped\.jsonl\.zst: corrupt or truncated data after line \d+ "
                                         r"\(decompressed byte \d+, file byte \d+\)"):
        list(iter_raw([str(path)]))


@pytest.mark.parametrize("damage", ["truncated", "crc", "length", "trailing_garbage", "bad_deflate"])
def test_damaged_gz_fails_naming_file_and_line(tmp_path, damage):
    data = gzip.compress(jsonl_bytes(2000))
    data = {"truncated": data[:len(data) // 2], "crc": data[:-8] + b"\0\0\0\0" + data[-4:],
            "length": data[:-4] + b"\1\0\0\0", "trailing_garbage": data + b"junk",
            "bad_deflate": data[:100] + bytes(50) + data[150:]}[damage]
    path = tmp_path / "damaged.jsonl.gz"
    path.write_bytes(data)
    with pytest.raises(InputError, match=r"damaged\.jsonl\.gz: corrupt or truncated data after line \d+") as error:
        list(iter_raw([str(path)]))
    assert "\n" not in str(error.value)


def test_corrupt_parquet_fails_naming_file(tmp_path):
    path = tmp_path / "broken.parquet"
    path.write_bytes(b"PAR1 not really parquet")
    with pytest.raises(InputError, match=r"broken\.parquet: unreadable Parquet data after row 0"):
        list(iter_raw([str(path)]))


@pytest.mark.parametrize("line, record_id", [
    (b'{"id": "t", "text": "lone \\ud800 surrogate"}', "t"),
    (b'{"id": "\\udc00", "text": "in the id"}', None),  # not usable: derived instead
    (b'{"id": "k", "text": "in a key", "f\\uDFFF": 1}', "k"),
    (b'{"id": "m", "text": "deep in meta", "meta": {"tags": ["ok", "\\ud83d"]}}', "m"),
])
def test_lone_surrogates_are_quarantined_with_a_writable_original(tmp_path, line, record_id):
    (result,) = parse_all([str(write_jsonl(tmp_path / "s.jsonl", [line]))])
    assert isinstance(result, Rejection) and result.reason == "invalid:surrogate"
    assert result.original == line.decode()  # the escape as written, which UTF-8 can store
    assert result.id == record_id if record_id else result.id.startswith("h-")
    pa.table({"id": [result.id], "record": [result.original]})  # encodes: no exception


def test_surrogate_pairs_are_text_not_errors(tmp_path):
    (result,) = parse_all([str(write_jsonl(tmp_path / "e.jsonl", [b'{"text": "smile \\ud83d\\ude00"}']))])
    assert isinstance(result, Record) and result.text == "smile \U0001F600"


@pytest.mark.parametrize("line", [
    b"[" * 100_000 + b"]" * 100_000,
    b'{"text": "x", "meta": ' + b"[" * 100_000 + b"]" * 100_000 + b"}",
    b'{"text": "x", "meta": ' + b'{"a": ' * 150 + b"1" + b"}" * 150 + b"}",
])
def test_deeply_nested_json_is_quarantined(tmp_path, line):
    (result,) = parse_all([str(write_jsonl(tmp_path / "d.jsonl", [line]))], max_bytes=1_000_000)
    assert isinstance(result, Rejection) and result.reason == "invalid:too_deep"


def test_parquet_values_that_do_not_convert_are_quarantined(tmp_path):
    text = pa.Array.from_buffers(pa.string(), 3, [None, *pa.array([b"good", b"bad\xff", b"fine"]).buffers()[1:]])
    ids = pa.Array.from_buffers(pa.string(), 3, [None, *pa.array([b"a", b"b", b"c\xfe"]).buffers()[1:]])
    when = pa.array([0, 0, 10**17], pa.timestamp("ms"))
    pq.write_table(pa.table({"id": ids, "text": text, "when": when}), tmp_path / "bad.parquet")
    good, bad_text, bad_id_and_time = parse_all([str(tmp_path / "bad.parquet")])
    assert isinstance(good, Record) and good.text == "good"
    assert isinstance(bad_text, Rejection) and bad_text.reason == "invalid:bad_utf8"
    assert json.loads(bad_text.original)["text"] == "bad\\xff"
    assert isinstance(bad_id_and_time, Rejection) and bad_id_and_time.reason == "invalid:bad_utf8"
    assert json.loads(bad_id_and_time.original)["id"] == "c\\xfe"
    assert "does not convert" in json.loads(bad_id_and_time.original)["when"]


def test_parquet_date_out_of_range_is_quarantined(tmp_path):
    pq.write_table(pa.table({"text": ["a", "b"], "when": pa.array([0, 10**17], pa.timestamp("ms"))}),
                   tmp_path / "t.parquet")
    ok, bad = parse_all([str(tmp_path / "t.parquet")])
    assert isinstance(ok, Record)
    assert isinstance(bad, Rejection) and bad.reason == "invalid:bad_value"


def write_gz_stream(path, pieces):
    with gzip.open(path, "wb", compresslevel=1) as f:
        for piece in pieces:
            f.write(piece)
    return path


def test_an_oversized_line_is_read_in_bounded_memory(tmp_path):
    line_mb = 20
    path = write_gz_stream(tmp_path / "big.jsonl.gz", [b'{"text": "'] + [b"y" * (1 << 20)] * line_mb
                           + [b'"}\n', b'{"id": "after", "text": "still read"}\n'])
    tracemalloc.start()
    try:
        raws = list(iter_raw([str(path)], max_record_bytes=1_000_000))
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 8_000_000  # the line is 20 MB; only max_record_bytes of it (plus a read chunk) is held
    big, after = raws
    assert big.num_bytes == len(b'{"text": "') + line_mb * (1 << 20) + len(b'"}\n')
    assert len(big.payload) == 1_000_001
    rejected = parse_raw(big, 1_000_000)
    assert rejected.reason == "invalid:oversized"
    assert rejected.original.startswith('{"text": "yyy')
    assert rejected.original.endswith(f"[truncated: the first 65536 of {big.num_bytes} bytes are kept]")
    assert len(rejected.original) < 70_000
    assert parse_raw(after, 1_000_000).id == "after" and after.index == 2
    whole_line = b'{"text": "' + b"y" * (line_mb << 20) + b'"}\n'
    assert rejected.id == readers.derive_id(str(path), 1, whole_line)  # the id of the whole line, as before


def test_an_oversized_text_file_is_read_in_bounded_memory(tmp_path):
    path = write_gz_stream(tmp_path / "big.txt.gz", [b"z" * (1 << 20)] * 5)
    (raw,) = iter_raw([str(path)], max_record_bytes=100_000)
    assert raw.num_bytes == 5 << 20 and len(raw.payload) == 100_001
    assert parse_raw(raw, 100_000).reason == "invalid:oversized"


def test_blank_lines_are_skipped_fast_and_line_numbers_kept(tmp_path):
    num_blank = 20 << 20
    path = write_gz_stream(tmp_path / "blank.jsonl.gz", [b"\n" * (1 << 20)] * 20
                           + [b"  \t\r\n" * 1000, b" " * (3 << 20), b'\n  {"id": "x", "text": "last"}'])
    start = time.perf_counter()
    (raw,) = iter_raw([str(path)])
    assert time.perf_counter() - start < 3  # 20M blank lines; line-at-a-time Python took minutes
    assert raw.index == num_blank + 1000 + 2
    assert raw.payload == b'  {"id": "x", "text": "last"}'  # leading blanks of a record are part of it


@pytest.mark.parametrize("chunk", [1, 3, 7, 64, 1 << 20])
def test_line_reader_agrees_with_line_iteration(tmp_path, monkeypatch, chunk):
    """Same records, line numbers and bytes (so ids) as reading line by line, across chunk edges."""
    monkeypatch.setattr(readers.lines, "_CHUNK_BYTES", chunk)
    rng = random.Random(chunk)
    pieces = [b"\n", b"  \n", b"\r\n", b" ", b"\t", b'{"text": "a b"}', b"x" * 40, b"\xc3\xa9", b"\x0c"]
    data = b"".join(rng.choice(pieces) for _ in range(3000))
    path = tmp_path / "mixed.jsonl"
    path.write_bytes(data)
    hold = 64 * 1024
    expected = [(i, line[:hold], len(line)) for i, line in enumerate(io.BytesIO(data), start=1) if line.strip()]
    assert [(r.index, r.payload, r.num_bytes) for r in iter_raw([str(path)])] == expected


def test_a_byte_order_mark_is_dropped(tmp_path):
    plain = write_jsonl(tmp_path / "plain" / "a.jsonl", [{"text": "first"}, {"text": "second"}])
    bom = tmp_path / "bom" / "a.jsonl"
    bom.parent.mkdir()
    bom.write_bytes(b"\xef\xbb\xbf" + plain.read_bytes())
    (tmp_path / "bom" / "b.txt").write_bytes(b"\xef\xbb\xbfdocument")
    records = parse_all(list_input_files(str(tmp_path / "bom")))
    assert all(isinstance(r, Record) for r in records)
    assert [r.text for r in records] == ["first", "second", "document"]
    assert [r.id for r in records[:2]] == read_ids(plain)  # the same ids as without the mark


def test_folder_search_does_not_follow_symlinked_folders(tmp_path):
    root = tmp_path / "raw"
    write_jsonl(root / "a.jsonl", [{"text": "a"}])
    write_jsonl(root / "sub" / "b.jsonl", [{"text": "b"}])
    write_jsonl(root / ".hidden" / "c.jsonl", [{"text": "c"}])
    (root / "sub" / "loop").symlink_to(root, target_is_directory=True)  # a loop back up the tree
    outside = write_jsonl(tmp_path / "elsewhere" / "d.jsonl", [{"text": "d"}]).parent
    (root / "link").symlink_to(outside, target_is_directory=True)
    expected = [str(root / "a.jsonl"), str(root / "sub" / "b.jsonl")]
    assert list_input_files(str(root)) == expected
    assert list_input_files(str(root / "**" / "*.jsonl")) == expected
    assert list_input_files(f"{root}/*/*.jsonl") == [str(root / "sub" / "b.jsonl")]


def test_folder_search_lists_what_glob_lists_without_symlinks(tmp_path, monkeypatch):
    for name in ["a.jsonl", "x/b.jsonl.gz", "x/y/c.parquet", ".h/d.jsonl", "x/.e.jsonl", "x/y/f.txt", "g.xml"]:
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_bytes(b"")
    for pattern in ["*", "*.jsonl*", "b*", "**/*.txt"]:
        assert list_input_files(str(tmp_path), pattern) == sorted({  # glob lists a file once per `**` match
            f for f in glob.glob(os.path.join(str(tmp_path), "**", pattern), recursive=True)
            if os.path.isfile(f) and not f.endswith(".xml")})
    monkeypatch.chdir(tmp_path)
    assert list_input_files("**/*.jsonl") == sorted(glob.glob("**/*.jsonl", recursive=True)) == ["a.jsonl"]


def test_a_file_name_that_is_not_utf8_is_an_error(tmp_path):
    name = os.fsdecode(b"bad\xff.jsonl")
    (tmp_path / name).write_bytes(b'{"text": "a"}\n')
    with pytest.raises(ValueError, match=r"not valid UTF-8"):
        list_input_files(str(tmp_path))


# --- WARC / WET ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("name", ["crawl.warc.gz", "crawl.warc"])
def test_warc_responses_are_documents_and_the_rest_quarantined_or_skipped(tmp_path, name):
    expected = write_warc(tmp_path / name, gzipped=name.endswith(".gz"))
    skipped = Counter()
    raws = list(iter_raw(list_input_files(str(tmp_path)), skipped=skipped))
    records = [parse_raw(raw, 100_000) for raw in raws]
    by_url = {raw.payload["url"]: r for raw, r in zip(raws, records)}
    assert {url: getattr(r, "reason", "") for url, r in by_url.items()} == expected
    assert skipped == {"warc_skipped.warcinfo": 1, "warc_skipped.request": 1, "warc_skipped.metadata": 1}
    en = by_url["http://a.example/en"]
    assert en.text == EN_PAGE and en.id.startswith("<urn:uuid:") and en.id == en.meta["warc_record_id"]
    assert en.meta["url"] == "http://a.example/en" and en.meta["date"].endswith("Z") and en.meta["http_status"] == 200
    assert "small café on the corner" in by_url["http://a.example/latin1"].text  # charset from <meta>
    assert "世世代代在河里捕鱼" in by_url["http://a.example/zh"].text  # charset from the header (GB2312)
    assert by_url["http://a.example/gz"].text == EN_PAGE.replace("river", "brook")  # chunked + gzip
    quarantined = by_url["http://a.example/missing"]
    assert json.loads(quarantined.original)["url"] == "http://a.example/missing" and quarantined.id.startswith("<urn:")


def test_wet_conversion_records_are_plain_text(tmp_path):
    write_wet(tmp_path / "CC-MAIN-1.warc.wet.gz", {"http://a.example/1": "First page text.",
                                                     "http://a.example/2": "Zweite Seite."})
    write_wet(tmp_path / "b.wet", {"http://a.example/3": "Third."})
    files = list_input_files(str(tmp_path))
    assert [os.path.basename(f) for f in files] == ["CC-MAIN-1.warc.wet.gz", "b.wet"]
    skipped = Counter()
    records = [parse_raw(raw, 1000) for raw in iter_raw(files, skipped=skipped)]
    assert [(r.text, r.meta["url"]) for r in records] == [
        ("First page text.", "http://a.example/1"), ("Zweite Seite.", "http://a.example/2"),
        ("Third.", "http://a.example/3")]
    assert skipped == {"warc_skipped.warcinfo": 2}


@pytest.mark.parametrize("cut", [40, 300])
def test_a_cut_warc_fails_naming_file_and_record(tmp_path, cut):
    path = tmp_path / "crawl.warc.gz"
    write_warc(path)
    path.write_bytes(path.read_bytes()[:-cut])
    with pytest.raises(InputError, match=r"crawl\.warc\.gz: truncated WARC file: it ends inside record \d+ "
                                         r"\(starting at byte \d+\)"):
        list(iter_raw([str(path)]))


def test_a_corrupt_warc_gz_fails_naming_file(tmp_path):
    path = tmp_path / "crawl.warc.gz"
    write_warc(path)
    data = bytearray(path.read_bytes())
    data[len(data) // 2:len(data) // 2 + 8] = bytes(8)
    path.write_bytes(bytes(data))
    with pytest.raises(InputError, match=r"crawl\.warc\.gz: corrupt WARC data after record \d+"):
        list(iter_raw([str(path)]))


def test_http_charset_falls_back_to_utf8_with_replacement():
    assert readers.warc._charset("text/html; charset=nonsense", b"<p>x</p>") == "utf-8"
    assert readers.warc._charset("text/html", b"<meta charset=\"Shift_JIS\">") == "shift_jis"
    assert readers.warc._charset("text/html; charset=ISO-8859-1", b"") == "cp1252"  # as browsers read latin-1


# --- WARC / HTTP: hostile pages -----------------------------------------------------------------------------

LAST_PAGE = b"<html><body><p>The last page of the file is still read.</p></body></html>"


def http(body: bytes, status: bytes = b"200 OK", content_type: bytes = b"text/html", headers: bytes = b"") -> bytes:
    return b"HTTP/1.1 " + status + b"\r\nContent-Type: " + content_type + b"\r\n" + headers + b"\r\n" + body


def write_raw_warc(path, blocks, types=None):
    """A WARC of records with exactly these blocks (warcio tidies a bad status line); a block is bytes, or
    (length, pieces) to stream one too big to hold. `.gz`: one gzip member per record. Returns the urls."""
    types = types or ["response"] * len(blocks)
    urls = [f"http://x.example/{i}" for i in range(len(blocks))]
    with open(path, "wb") as f:
        for i, (block, kind) in enumerate(zip(blocks, types)):
            length, pieces = (len(block), [block]) if isinstance(block, bytes) else block
            with gzip.GzipFile(fileobj=f, mode="wb", compresslevel=1) if str(path).endswith(".gz") else \
                    contextlib.nullcontext(f) as out:
                out.write(f"WARC/1.1\r\nWARC-Type: {kind}\r\nWARC-Record-ID: <urn:uuid:{uuid.UUID(int=i)}>\r\n"
                          f"WARC-Target-URI: {urls[i]}\r\nWARC-Date: 2024-01-01T00:00:00Z\r\n"
                          f"Content-Type: application/http; msgtype=response\r\nContent-Length: {length}\r\n\r\n"
                          .encode())
                for piece in pieces:
                    out.write(piece)
                out.write(b"\r\n\r\n")
    return urls


def read_pages(path, max_bytes=100_000):
    """(reason or "", text or original) per record of a WARC file; originals must fit an Arrow string column."""
    results = [parse_raw(raw, max_bytes) for raw in iter_raw([str(path)], max_bytes)]
    pa.array([getattr(r, "original", None) or r.text for r in results], pa.string())  # UTF-8 holds them all
    return [(r.reason, r.original) if isinstance(r, Rejection) else ("", r.text) for r in results]


NOT_TEXT_CODECS = ["zlib", "zlib_codec", "base64", "base64_codec", "hex", "hex_codec", "bz2", "bz2_codec", "rot13",
                   "rot_13", "uu", "uu_codec", "quopri", "quopri_codec", "idna", "undefined", "punycode",
                   "unicode_escape", "raw_unicode_escape"]


@pytest.mark.parametrize("name", NOT_TEXT_CODECS)
def test_a_charset_that_is_no_text_encoding_falls_back(tmp_path, name):
    page = "<p>caf\u00e9 \\u0041 +AGE-</p>".encode()  # UTF-8, with what escape and UTF-7 codecs would rewrite
    latin1 = b"<meta http-equiv='Content-Type' content='text/html; charset=" + name.encode() + b"'><p>caf\xe9</p>"
    path = tmp_path / "pages.warc"
    write_raw_warc(path, [http(page, content_type=b"text/html; charset=" + name.encode()),
                          http(latin1, content_type=b"text/html; charset=" + name.encode() + b"; x=1"),
                          http(b'<meta charset="' + name.encode() + b'">' + page),
                          http(b'<meta charset="' + name.encode() + b'"><p>caf\xe9</p>',
                               content_type=b"text/html; charset=iso-8859-1"),
                          http(LAST_PAGE)])
    pages = read_pages(path)
    assert pages[0] == ("", page.decode())  # the header's charset passed over: UTF-8
    assert pages[1] == ("", latin1.decode("utf-8", errors="replace"))  # a <meta> naming it too: UTF-8
    assert pages[2] == ("", '<meta charset="' + name + '">' + page.decode())
    assert pages[3][0] == "" and pages[3][1].endswith("<p>caf\u00e9</p>")  # the header's good charset wins
    assert pages[4] == ("", LAST_PAGE.decode())


def test_every_codec_python_knows_decodes_a_page_or_quarantines_it():
    names = set(encodings.aliases.aliases) | set(encodings.aliases.aliases.values())
    names |= {m.name for m in pkgutil.iter_modules(encodings.__path__)}
    body = b"<p>+2ADYAA- \\ud800 \\N{x} \xff\xfe\x00\xd8 \x80\x81 ok</p>"
    for name in sorted(names):
        block = http(body, content_type=b"text/html; charset=" + name.encode())
        rec = readers.WarcBlock("response", {"warc-record-id": "r"}, block, 0, len(block))
        result = parse_raw(readers.warc_record("a.warc", 1, rec), 10_000)
        assert isinstance(result, Record) or result.reason == "invalid:surrogate", name
        pa.array([getattr(result, "text", None) or result.original], pa.string())


@pytest.mark.parametrize("header, meta", [(b"text/html; charset=utf-7", b""),
                                          (b"text/html", b'<meta charset="UTF-7">')])
def test_text_that_decodes_to_lone_surrogates_is_quarantined(tmp_path, header, meta):
    path = tmp_path / "utf7.warc.gz"
    write_raw_warc(path, [http(meta + b"<p>+2ADYAA- and +2D3eAA- smile</p>", content_type=header),
                          http(LAST_PAGE)])
    (reason, original), last = read_pages(path)
    assert reason == "invalid:surrogate"
    assert json.loads(original)["text"].endswith("<p>\\ud800\\ud800 and \U0001F600 smile</p>")  # escaped, a pair kept
    assert last == ("", LAST_PAGE.decode())


def test_malformed_http_status_lines_and_lengths_are_quarantined(tmp_path):
    path = tmp_path / "status.warc"
    write_raw_warc(path, [
        http(b"<p>a</p>", status="\u00b200 OK".encode("latin-1")),  # `int` reads "²00"... and raises
        http(b"<p>b</p>", status="\u0663\u0660\u0660 OK".encode()),  # Arabic-Indic digits, as UTF-8
        http(b"<p>c</p>", status=b"4" * 5000 + b" Too Long"),  # over Python's 4300 digit limit
        http(b"<p>d</p>", status=b"20 OK"), http(b"<p>e</p>", status=b"2000 OK"),
        b"HTTP/1.1\r\nContent-Type: text/html\r\n\r\n<p>f</p>",  # no status at all
        http(b"<p>g</p>", headers="Content-Length: \u00b2\r\n".encode("latin-1")),  # not a number: not checked
        http(b"<p>h</p>", headers=b"Content-Length: " + b"9" * 5000 + b"\r\n"),
        http(b"-6\r\nabc", headers=b"Transfer-Encoding: chunked\r\n"),  # a negative chunk size stepped back forever
        http(b"0x3\r\nabc\r\n0\r\n\r\n", headers=b"Transfer-Encoding: chunked\r\n"),
        http(LAST_PAGE)])
    reasons = [reason for reason, _ in read_pages(path)]
    assert reasons == ["invalid:warc_bad_http"] * 6 + ["", "invalid:warc_truncated", "invalid:warc_truncated",
                                                       "invalid:warc_truncated", ""]


def test_http_status_reasons_are_classes_with_the_code_in_the_row(tmp_path):
    codes = [f"{i:03d}".encode() for i in range(1000) if i != 200] + [b"%d" % i for i in range(1000, 2001)]
    path = tmp_path / "codes.warc"
    write_raw_warc(path, [http(b"<p>x</p>", status=code + b" Whatever") for code in codes] + [http(LAST_PAGE)])
    pages = read_pages(path)
    assert len(pages) == 2001
    assert Counter(reason for reason, _ in pages) == {
        **{f"invalid:http_status_{d}xx": 100 for d in range(10)}, "invalid:http_status_2xx": 99,
        "invalid:warc_bad_http": 1001, "": 1}
    assert [json.loads(original)["http_status"] for _, original in pages[:999]] == [int(c) for c in codes[:999]]


def test_warc_record_types_outside_the_standard_are_counted_as_other(tmp_path):
    path = tmp_path / "types.warc"
    types = ["request", "metadata"] + [f"made-up-{i}" for i in range(50)] + ["response"]
    write_raw_warc(path, [b"x"] * (len(types) - 1) + [http(LAST_PAGE)], types)
    skipped = Counter()
    (last,) = [parse_raw(raw, 1000) for raw in iter_raw([str(path)], skipped=skipped)]
    assert skipped == {"warc_skipped.request": 1, "warc_skipped.metadata": 1, "warc_skipped.other": 50}
    assert last.text == LAST_PAGE.decode()


def test_a_body_that_inflates_past_the_size_limit_is_oversized(tmp_path):
    path = tmp_path / "bomb.warc"
    bomb = gzip.compress(b"<p>" + b"a" * (50 << 20), compresslevel=1)  # 50 MB in about 200 KB
    write_raw_warc(path, [http(bomb, headers=b"Content-Encoding: gzip\r\n"),
                          http(zlib.compress(b"<p>deflated</p>"), headers=b"Content-Encoding: deflate\r\n"),
                          http(LAST_PAGE)])
    tracemalloc.start()
    try:
        pages = read_pages(path, max_bytes=1_000_000)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert [reason for reason, _ in pages] == ["invalid:oversized", "", ""]
    assert peak < 8_000_000 and pages[1][1] == "<p>deflated</p>"


_READ_WARC = """
import json, re, sys
from pathlib import Path
from stages.common.text.readers import iter_raw, parse_raw
results = [parse_raw(raw, 1_000_000) for raw in iter_raw([sys.argv[1]], 1_000_000)]
peak_kb = int(re.search(r"VmHWM:\\s*(\\d+) kB", Path("/proc/self/status").read_text()).group(1))
print(json.dumps({"pages": [[getattr(r, "reason", ""), getattr(r, "original", "")] for r in results],
                  "peak_kb": peak_kb}))
"""


def read_in_subprocess(path):
    """(reason, original) per record of `path` read in a new process, and that process's peak memory. Its
    own: ru_maxrss would also count the memory of this process when it started the other."""
    done = subprocess.run([sys.executable, "-c", _READ_WARC, str(path)], cwd=ROOT, capture_output=True, check=True)
    out = json.loads(done.stdout)
    return out["pages"], out["peak_kb"] << 10


def big_page(num_mb):
    """(length, pieces) of an HTTP response with a `num_mb` MiB body, for `write_raw_warc` to stream."""
    head = http(b"", headers=b"Content-Length: %d\r\n" % (num_mb << 20))
    return len(head) + (num_mb << 20), [head, *[b"<p>" + b"a" * ((1 << 20) - 3)] * num_mb]


@pytest.mark.skipif(not os.path.exists("/proc/self/status"), reason="reads the peak memory from /proc")
def test_an_oversized_warc_record_is_read_past_in_bounded_memory(tmp_path):
    write_raw_warc(tmp_path / "small.warc.gz", [http(LAST_PAGE)])
    _, baseline = read_in_subprocess(tmp_path / "small.warc.gz")
    path = tmp_path / "big.warc.gz"  # about 300 KB
    write_raw_warc(path, [big_page(50), http(LAST_PAGE), big_page(20)])  # the last: the gzip end check
    pages, peak = read_in_subprocess(path)
    assert peak - baseline < 32 << 20  # the records are 50 and 20 MB; whole, the first took 200 MB
    assert [reason for reason, _ in pages] == ["invalid:oversized", "", "invalid:oversized"]
    for (_, original), (length, _) in zip(pages[::2], [big_page(50), big_page(20)]):
        row = json.loads(original)
        assert row["url"].startswith("http://x.example/") and row["id"].startswith("<urn:uuid:")
        assert row["block"].startswith("HTTP/1.1 200 OK\r\n") and len(row["block"]) < 66_000
        assert row["block"].endswith(f"[truncated: the first 65536 of {length} bytes are kept]")


# --- CSV / TSV, Arrow (datasets save_to_disk) ------------------------------------------------------------


def test_csv_and_tsv_with_quoted_multiline_fields_and_malformed_rows(tmp_path):
    (tmp_path / "a.csv").write_bytes(b'id,text,views\nr1,"first line\nsecond, quoted ""line""",3\n'
                                     b'r2,too,many,fields\n\nr3,short\nr4,"caf\xff",1\nr5,last,9\n')
    with gzip.open(tmp_path / "b.tsv.gz", "wb") as f:
        f.write(b"text\tid\nhello tab\tt1\n")
    files = list_input_files(str(tmp_path))
    raws = list(iter_raw(files))
    records = [parse_raw(raw, 1000) for raw in raws]
    assert [(r.id, getattr(r, "reason", "")) for r in records] == [
        ("r1", ""), (records[1].id, "invalid:csv_fields"), (records[2].id, "invalid:csv_fields"),
        (records[3].id, "invalid:bad_utf8"), ("r5", ""), ("t1", "")]
    assert records[0].text == 'first line\nsecond, quoted "line"' and records[0].meta == {"views": "3"}
    assert json.loads(records[1].original) == {"header": ["id", "text", "views"], "values": ["r2", "too", "many",
                                                                                            "fields"]}
    assert [raw.index for raw in raws] == [1, 2, 3, 4, 5, 1]


def test_a_cut_csv_gz_fails_naming_file(tmp_path):
    data = gzip.compress(b"id,text\n" + b"".join(b"r%d,some text here\n" % i for i in range(2000)))
    (tmp_path / "a.csv.gz").write_bytes(data[:len(data) // 2])
    with pytest.raises(InputError, match=r"a\.csv\.gz: corrupt or truncated data after row \d+"):
        list(iter_raw([str(tmp_path / "a.csv.gz")]))


def test_datasets_save_to_disk_folders_are_read_in_state_order(tmp_path):
    datasets = pytest.importorskip("datasets")
    rows = {"id": [f"d{i}" for i in range(6)], "content": [f"text {i}" for i in range(6)],
            "meta": [{"lang": "en", "n": i} for i in range(6)]}
    datasets.Dataset.from_dict(rows).save_to_disk(str(tmp_path / "single"), num_shards=3)
    datasets.DatasetDict({"train": datasets.Dataset.from_dict(rows), "test": datasets.Dataset.from_dict(
        {k: v[:2] for k, v in rows.items()})}).save_to_disk(str(tmp_path / "dict"))
    single = list_input_files(str(tmp_path / "single"))
    assert [os.path.basename(f) for f in single] == [f"data-0000{i}-of-00003.arrow" for i in range(3)]
    fields = readers.FieldMap(text="content", keep=("meta.n",))
    records = [parse_raw(raw, 1000, fields) for raw in iter_raw(single)]
    assert [(r.id, r.text, r.kept) for r in records] == [(f"d{i}", f"text {i}", {"meta.n": i}) for i in range(6)]
    assert records[0].meta == {"meta": {"lang": "en"}}
    split_files = list_input_files(str(tmp_path / "dict"))
    assert [os.path.relpath(f, tmp_path / "dict") for f in split_files] == [
        "test/data-00000-of-00001.arrow", "train/data-00000-of-00001.arrow"]  # no dataset_dict.json, state.json
    assert len(list(iter_raw(split_files))) == 8


def test_arrow_random_access_files_are_read_too(tmp_path):
    table = pa.table({"text": ["a b c", "d e f"], "id": [1, 2]})
    with pa.ipc.new_file(tmp_path / "t.arrow", table.schema) as w:
        w.write_table(table)
    assert [parse_raw(raw, 100).id for raw in iter_raw([str(tmp_path / "t.arrow")])] == ["1", "2"]


def test_a_forced_format_overrides_the_extension(tmp_path):
    (tmp_path / "a.txt").write_text("id\ttext\nx1\thello\n")
    records = [parse_raw(raw, 100) for raw in iter_raw([str(tmp_path / "a.txt")], fmt="tsv")]
    assert [(r.id, r.text) for r in records] == [("x1", "hello")]


# --- field mapping -----------------------------------------------------------------------------------------


def test_dotted_paths_find_text_id_and_kept_fields(tmp_path):
    write_jsonl(tmp_path / "a.jsonl", [
        {"payload": {"content": "nested text", "lang": "en"}, "doc": {"key": 7}, "url": "u1", "meta.body": "flat"},
        {"payload": {"lang": "de"}, "doc": {"key": 8}},
    ])
    fields = readers.FieldMap(text="payload.content", id="doc.key", keep=("url", "payload.lang", "absent.x"))
    first, second = [parse_raw(raw, 1000, fields) for raw in iter_raw([str(tmp_path / "a.jsonl")])]
    assert (first.id, first.text) == ("7", "nested text")
    assert first.kept == {"url": "u1", "payload.lang": "en", "absent.x": None}
    assert first.meta == {"payload": {}, "doc": {}, "meta.body": "flat"}  # the rest, less what was taken
    assert second.reason == "invalid:missing_text" and second.id == "8"
    flat = readers.FieldMap(text="meta.body")
    assert parse_raw(next(iter_raw([str(tmp_path / "a.jsonl")])), 1000, flat).text == "flat"  # a name with a dot
