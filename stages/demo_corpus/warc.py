"""A small web crawl in the demo corpus: some of the html documents, served as HTTP responses in a WARC
file (`WARC_NAME`) instead of JSONL lines, so that `clean` reads a web archive too.

Which documents: `warc_docs` html pages, evenly spread over the stream, that are well formed and neither
a duplicate nor the original of one (their id changes to the WARC record id, which no duplicate label
could follow). Each becomes a request record and an HTTP 200 `text/html; charset=utf-8` response; three
of them are served as records `clean` must quarantine, labelled `malformed` (`WARC_MALFORMED`): as a PDF
(`warc_not_html`), as a 404 page (`http_status_4xx`) and cut short with `WARC-Truncated: length`
(`warc_truncated`). A warcinfo record comes first.

Deterministic: record ids are UUIDs hashed from the seed and the record's position, dates fixed, each
record its own gzip member with mtime 0. The bytes are written here (the WARC 1.1 format is a version
line, headers, a blank line, the block and two CRLFs): the stage uses runtime dependencies only.
"""
from __future__ import annotations

import dataclasses
import gzip
import hashlib
import uuid
from datetime import datetime, timedelta, timezone

from stages.demo_corpus.records import Doc

WARC_NAME = "crawl-00000.warc.gz"
WARC_MALFORMED = ("warc_not_html", "http_status_4xx", "warc_truncated")
_START = datetime(2024, 5, 1, 12, 0, 0, tzinfo=timezone.utc)
_FAKE_PDF = b"%PDF-1.4\n1 0 obj << /Type /Catalog >> endobj\ntrailer << /Root 1 0 R >>\n%%EOF\n"


def pick(docs: list[Doc], warc_docs: int) -> list[int]:
    """Stream positions of the html documents that go into the WARC, evenly spread."""
    originals = {d.dup_of for d in docs if d.dup_of}
    eligible = [i for i, d in enumerate(docs) if d.kind == "html" and d.malformed is None and d.dup_of is None
                and d.id not in originals]
    if not warc_docs or not eligible:
        return []
    step = max(1, len(eligible) // warc_docs)
    return eligible[::step][:warc_docs]


def record_id(seed: int, n: int) -> str:
    digest = hashlib.blake2b(f"{seed}:warc:{n}".encode(), digest_size=16).digest()
    return f"<urn:uuid:{uuid.UUID(bytes=digest, version=4)}>"


def _record(warc_type: str, rid: str, date: datetime, block: bytes, url: str = "", content_type: str = "",
            extra: tuple[tuple[str, str], ...] = ()) -> bytes:
    headers = [("WARC-Type", warc_type), ("WARC-Record-ID", rid), ("WARC-Date", date.strftime("%Y-%m-%dT%H:%M:%SZ"))]
    headers += [("WARC-Target-URI", url)] if url else []
    headers += [*extra, ("Content-Type", content_type), ("Content-Length", str(len(block)))]
    head = "WARC/1.1\r\n" + "".join(f"{k}: {v}\r\n" for k, v in headers) + "\r\n"
    return gzip.compress(head.encode() + block + b"\r\n\r\n", compresslevel=6, mtime=0)


def _http(status: str, content_type: str, body: bytes, length: int | None = None) -> bytes:
    head = (f"HTTP/1.1 {status}\r\nContent-Type: {content_type}\r\n"
            f"Content-Length: {len(body) if length is None else length}\r\n\r\n")
    return head.encode() + body


def build(docs: list[Doc], seed: int, warc_docs: int) -> tuple[bytes, list[Doc], list[Doc]]:
    """(the WARC file's bytes, the documents left for the JSONL shards, the WARC's documents in order, as
    labelled: id = record id; the last three of kind `malformed`)."""
    chosen = pick(docs, warc_docs)
    taken = set(chosen)
    parts = [_record("warcinfo", record_id(seed, 0), _START, f"software: refinery demo_corpus\r\nseed: {seed}\r\n"
                     .encode(), content_type="application/warc-fields", extra=(("WARC-Filename", WARC_NAME),))]
    warc_docs_out: list[Doc] = []
    broken = dict(zip(chosen[-len(WARC_MALFORMED):], WARC_MALFORMED)) if len(chosen) > len(WARC_MALFORMED) else {}
    for n, i in enumerate(chosen, start=1):
        d = docs[i]
        url = d.url or f"https://demo.example/page/{n}"
        date = _START + timedelta(seconds=n)
        body = d.text.encode("utf-8")
        malformed = broken.get(i)
        truncated = malformed == "warc_truncated"
        sent = body[:len(body) // 2] if truncated else body  # the Content-Length stays that of the whole body
        status = "404 Not Found" if malformed == "http_status_4xx" else "200 OK"
        block = (_http(status, "application/pdf", _FAKE_PDF) if malformed == "warc_not_html"
                 else _http(status, "text/html; charset=utf-8", sent, len(body)))
        extra = (("WARC-Truncated", "length"),) if truncated else ()
        request = f"GET /{url.split('/', 3)[-1] if url.count('/') >= 3 else ''} HTTP/1.1\r\nHost: demo\r\n\r\n"
        parts.append(_record("request", record_id(seed, 2 * n - 1), date, request.encode(), url,
                             "application/http; msgtype=request"))
        rid = record_id(seed, 2 * n)
        parts.append(_record("response", rid, date, block, url, "application/http; msgtype=response", extra))
        warc_docs_out.append(dataclasses.replace(d, id=rid, url=url, malformed=malformed,
                                                 kind="malformed" if malformed else d.kind))
    return b"".join(parts), [d for i, d in enumerate(docs) if i not in taken], warc_docs_out
