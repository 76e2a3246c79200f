"""Remote inputs through fsspec, against real servers on 127.0.0.1: moto's S3 server and Python's http.server."""
from __future__ import annotations

import contextlib
import gzip
import http.server
import json
import logging
import socket
import threading
import time
from collections.abc import Iterator

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import zstandard

from stages.common.runtime import storage, urls
from stages.common.runtime.ownership import missing_input
from stages.common.runtime.storage import fingerprint_of
from stages.common.text.readers import InputError, iter_raw, list_input_files, parse_raw
from tests.fixtures.object_store import SECRET, flaky_reads, http_root, s3_server  # noqa: F401 (fixtures)

RECORDS = [{"id": f"r{i}", "text": f"document number {i} " * 20} for i in range(50)]
JSONL = b"".join(json.dumps(r).encode() + b"\n" for r in RECORDS)


@pytest.fixture(autouse=True)
def no_retry_delay(monkeypatch):
    monkeypatch.setattr(storage, "RETRY_DELAY_S", 0.0)


def texts(files: list[str]) -> list[tuple[str, str, int]]:
    return [(r.source, parse_raw(r, 10**6).text, r.index) for r in iter_raw(files)]


def test_redact_drops_user_info_query_and_fragment():
    assert urls.redact("https://user:pa55@host.example:8443/a/b.jsonl?X-Amz-Signature=abc&t=1#frag") == \
        "https://host.example:8443/a/b.jsonl"
    assert urls.redact("s3://bucket/raw/a.jsonl.gz") == "s3://bucket/raw/a.jsonl.gz"
    assert urls.redact("hf://datasets/org/name/data/*.parquet") == "hf://datasets/org/name/data/*.parquet"
    assert urls.redact("data/raw/a?b.jsonl") == "data/raw/a?b.jsonl"  # a local path (a glob) is left alone
    assert missing_input("clean", "input", "https://u:pw@h/x.jsonl?sig=s3cr3t") == \
        "param 'clean.input': https://h/x.jsonl does not exist"
    message = "GET https://u:pw@h/x.jsonl?sig=s3cr3t failed; sig=s3cr3t"
    assert urls.scrub(message, "https://u:pw@h/x.jsonl?sig=s3cr3t") == \
        "GET https://h/x.jsonl failed; <redacted>"
    url = "https://h/x.jsonl?sig=a%2Fb%3D%3D&k=v"  # an error may spell the query decoded or re-encoded
    assert "a/b==" not in urls.scrub("GET https://h/x.jsonl?sig=a/b==&k=v", url)


def test_reads_jsonl_gz_and_parquet_objects(s3_server):
    gz = s3_server.put("read/a.jsonl.gz", gzip.compress(JSONL))
    sink = pa.BufferOutputStream()
    pq.write_table(pa.Table.from_pylist(RECORDS), sink, row_group_size=7)
    parquet = s3_server.put("read/b.parquet", sink.getvalue().to_pybytes())
    zst = s3_server.put("read/c.jsonl.zst", zstandard.ZstdCompressor(write_checksum=True).compress(JSONL))
    assert list_input_files(gz) == [gz]
    got = texts([gz, parquet, zst])
    expected = [(url, r["text"], i) for url in (gz, parquet, zst) for i, r in enumerate(RECORDS, 1)]
    assert got == expected
    assert storage.input_size(gz) == s3_server.fs().size(f"{s3_server.bucket}/read/a.jsonl.gz")


def test_globs_and_prefix_with_pattern_list_sorted(s3_server):
    for key in ("glob/raw/b.jsonl.gz", "glob/raw/a.jsonl.gz", "glob/raw/c.parquet", "glob/raw/notes.md",
                "glob/raw/sub/d.jsonl.gz", "glob/raw/.hidden/e.jsonl.gz", "glob/other/f.jsonl.gz"):
        s3_server.put(key, b"{}\n")
    url = f"s3://{s3_server.bucket}/glob"
    assert list_input_files(f"{url}/raw/*.jsonl.gz") == [f"{url}/raw/a.jsonl.gz", f"{url}/raw/b.jsonl.gz"]
    assert list_input_files(f"{url}/raw/**/*.jsonl.gz") == [f"{url}/raw/a.jsonl.gz", f"{url}/raw/b.jsonl.gz",
                                                            f"{url}/raw/sub/d.jsonl.gz"]
    assert list_input_files(f"{url}/raw", "*.jsonl.gz") == [f"{url}/raw/a.jsonl.gz", f"{url}/raw/b.jsonl.gz",
                                                            f"{url}/raw/sub/d.jsonl.gz"]
    assert list_input_files(f"{url}/raw") == [f"{url}/raw/a.jsonl.gz", f"{url}/raw/b.jsonl.gz",
                                              f"{url}/raw/c.parquet", f"{url}/raw/sub/d.jsonl.gz"]
    with pytest.raises(ValueError, match="does not exist"):
        list_input_files(f"{url}/missing")
    with pytest.raises(ValueError, match="matches no"):
        list_input_files(f"{url}/raw/*.txt")
    assert all(storage.exists(f"{url}/{path}") for path in ("raw", "raw/a.jsonl.gz", "raw/*.gz"))
    assert not storage.exists(f"{url}/missing") and not storage.exists(f"{url}/missing/*.gz")


def test_fingerprint_follows_the_object_version(s3_server):
    url = s3_server.put("fp/a.jsonl", b'{"text": "one"}\n')
    first = fingerprint_of(url)
    assert first == fingerprint_of(url) and "ETag" in first and url in first
    s3_server.put("fp/a.jsonl", b'{"text": "two"}\n')
    assert fingerprint_of(url) != first


def test_a_failed_read_is_retried_at_the_byte_reached(s3_server, monkeypatch, caplog):
    data = bytes(range(256)) * 40
    url = s3_server.put("retry/blob.jsonl", data)
    with storage.open_input(url) as f:
        first = f.read(1000)
        tried = flaky_reads(monkeypatch, failures=2)
        rest = [f.read(1000) for _ in range(10)]
    assert first + b"".join(rest) == data
    assert tried[:3] == [1000, 1000, 1000]  # reopened and sought to where the failed read started
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 2 and all(f"{url}: reading at byte 1000 failed" in w for w in warnings)
    assert "retry 1/3" in warnings[0] and "ConnectionResetError" in warnings[0]


def test_a_read_that_keeps_failing_is_one_input_error(s3_server, monkeypatch):
    url = s3_server.put("retry/a.jsonl.gz", gzip.compress(JSONL))
    tried = flaky_reads(monkeypatch, failures=None)
    with pytest.raises(InputError) as e:
        list(iter_raw([url]))
    assert str(e.value).startswith(f"{url}: reading at byte 0 failed after 4 tries: ConnectionResetError")
    assert "\n" not in str(e.value) and len(tried) == 4


def test_https_input_is_read_and_its_secrets_never_shown(http_root, monkeypatch, caplog):
    base, folder = http_root
    (folder / "a.jsonl.gz").write_bytes(gzip.compress(JSONL))
    url = f"http://reader:{SECRET}@{base.removeprefix('http://')}/a.jsonl.gz?token={SECRET}"
    files = list_input_files(url)
    assert files == [url]  # read as given
    got = texts(files)
    assert got == [(f"{base}/a.jsonl.gz", r["text"], i) for i, r in enumerate(RECORDS, 1)]
    with pytest.raises(ValueError, match="takes no wildcards") as e:
        list_input_files(f"{base}/*.jsonl.gz?token={SECRET}")
    missing = f"{base}/missing.jsonl?token={SECRET}"
    assert not storage.exists(missing)
    with pytest.raises(ValueError) as missing_error:
        list_input_files(missing)
    assert SECRET not in str(e.value) + str(missing_error.value) + caplog.text
    assert SECRET not in fingerprint_of(url)


def test_gs_urls_go_to_gcsfs():
    """No GCS server can be reached here (and gcsfs takes seconds to look for default credentials): check
    only that a gs:// URL goes to gcsfs with the bucket path, not to the local disk."""
    import fsspec
    fs, path = fsspec.core.url_to_fs("gs://refinery-raw/a.jsonl", token="anon", skip_instance_cache=True)
    assert type(fs).__module__.startswith("gcsfs") and path == "refinery-raw/a.jsonl"
    assert urls.is_url("gs://refinery-raw/a.jsonl") and not urls.is_url("data/raw/a.jsonl")


def test_hf_urls_go_to_the_hub_and_an_unreachable_store_is_one_input_error(monkeypatch):
    """The Hub cannot be reached here: offline mode makes huggingface_hub refuse every request at once, as
    a network failure would, and the listing reports that rather than "does not exist"."""
    from huggingface_hub import constants
    monkeypatch.setattr(constants, "is_offline_mode", lambda: True)
    url = "hf://datasets/org/name/data/a.jsonl"
    with pytest.raises(InputError, match=rf"^{url}: cannot be looked up: OfflineModeIsEnabled"):
        list_input_files(url)
    with pytest.raises(InputError, match=rf"^{url}: opening at byte 0 failed after 4 tries: OfflineModeIsEnabled"):
        storage.open_input(url)


def test_an_unknown_protocol_is_one_line():
    with pytest.raises(ValueError, match=r"^input nosuch://x/a.jsonl: .*nosuch"):
        list_input_files("nosuch://x/a.jsonl")


@pytest.fixture
def silent_port() -> Iterator[int]:
    """A port on 127.0.0.1 whose server accepts every connection and never answers."""
    server, accepted = socket.socket(), []
    server.bind(("127.0.0.1", 0))
    server.listen(64)

    def accept() -> None:
        with contextlib.suppress(OSError):  # the socket closed at the end of the test
            while True:
                accepted.append(server.accept()[0])

    threading.Thread(target=accept, daemon=True).start()
    yield server.getsockname()[1]
    server.close()
    for conn in accepted:
        conn.close()


def closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture
def short_timeouts(monkeypatch):
    storage.set_timeouts(0.2, 0.2)
    yield
    storage.set_timeouts()


def test_a_silent_server_times_out_and_a_closed_port_is_refused(silent_port, short_timeouts):
    silent = f"http://127.0.0.1:{silent_port}/a.jsonl?token={SECRET}"
    start = time.monotonic()
    with pytest.raises(InputError) as looked_up:
        list_input_files(silent)
    assert time.monotonic() - start < 5  # a HEAD, then a GET, each given up after 0.2 s (the default: 5 min each)
    assert str(looked_up.value).startswith(f"http://127.0.0.1:{silent_port}/a.jsonl: cannot be looked up: timed out")
    with pytest.raises(InputError, match=r": opening at byte 0 failed after 4 tries: timed out") as opened:
        storage.open_input(silent)
    closed = f"http://127.0.0.1:{closed_port()}/a.jsonl?token={SECRET}"
    with pytest.raises(InputError, match=r": cannot be looked up: connection refused: ") as refused:
        storage.exists(closed)
    with pytest.raises(InputError, match=r": opening at byte 0 failed after 4 tries: connection refused"):
        storage.open_input(closed)
    messages = [str(e.value) for e in (looked_up, opened, refused)]
    assert all("\n" not in m and SECRET not in m for m in messages), messages


def test_s3_requests_time_out_and_a_closed_endpoint_is_refused(silent_port, short_timeouts, monkeypatch):
    from s3fs import S3FileSystem

    monkeypatch.setattr(S3FileSystem, "retries", 1)  # s3fs's own retries (5) multiply the wait, not the outcome
    for key, value in (("AWS_ACCESS_KEY_ID", "AKIAFAKE"), ("AWS_SECRET_ACCESS_KEY", SECRET),
                       ("AWS_DEFAULT_REGION", "us-east-1"), ("AWS_ENDPOINT_URL", f"http://127.0.0.1:{silent_port}")):
        monkeypatch.setenv(key, value)
    monkeypatch.delenv("AWS_ENDPOINT_URL_S3", raising=False)
    S3FileSystem.clear_instance_cache()  # botocore reads the endpoint when the file system is made
    try:
        start = time.monotonic()
        with pytest.raises(InputError, match=r"^s3://bucket/a.jsonl: cannot be looked up: timed out: ReadTimeoutError"):
            list_input_files("s3://bucket/a.jsonl")
        assert time.monotonic() - start < 8  # 2 attempts of 0.2 s and a backoff, not 5 of s3fs's default 15 s
        S3FileSystem.clear_instance_cache()
        monkeypatch.setenv("AWS_ENDPOINT_URL", f"http://127.0.0.1:{closed_port()}")
        with pytest.raises(InputError, match=r"^s3://bucket/a.jsonl: cannot be looked up: connection refused"):
            list_input_files("s3://bucket/a.jsonl")
    finally:
        S3FileSystem.clear_instance_cache()


class _StatusHandler(http.server.BaseHTTPRequestHandler):
    """Answers every request with the status its path starts with: /403/... is forbidden, /404/... missing."""

    def do_HEAD(self) -> None:
        self.send_response(int(self.path.split("/")[1]))
        self.send_header("Content-Length", "0")
        self.end_headers()

    do_GET = do_HEAD

    def log_message(self, format: str, *args) -> None:
        pass


def test_http_403_is_forbidden_and_404_not_found():
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _StatusHandler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    base = f"http://127.0.0.1:{server.server_address[1]}"
    try:
        with pytest.raises(InputError, match=rf"^{base}/403/a.jsonl: cannot be looked up: forbidden: .*403") as listed:
            list_input_files(f"{base}/403/a.jsonl?token={SECRET}")
        with pytest.raises(InputError, match=rf"^{base}/403/a.jsonl: opening at byte 0 failed: forbidden") as opened:
            storage.open_input(f"{base}/403/a.jsonl?token={SECRET}")
        assert SECRET not in str(listed.value) + str(opened.value), str(listed.value)
        with pytest.raises(ValueError, match=rf"^input {base}/404/a.jsonl does not exist \(the store answered: "
                                             r"not found\)$"):
            list_input_files(f"{base}/404/a.jsonl")
        assert not storage.exists(f"{base}/404/a.jsonl")
        with pytest.raises(InputError, match=rf"^{base}/404/a.jsonl: opening at byte 0 failed: not found"):
            storage.open_input(f"{base}/404/a.jsonl")
    finally:
        server.shutdown()
        server.server_close()
