"""WARC/WET web archives, read through FastWARC: `response` and `conversion` records as rows (kind
`warc`), the HTTP response parsed, its transfer and content encodings undone and its character set found.
Imports `records` and `lines`.
"""
from __future__ import annotations

import codecs
import re
import zlib
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any, BinaryIO

from stages.common.runtime.storage import open_input
from stages.common.runtime.urls import InputError, redact
from stages.common.text.readers.lines import _CHUNK_BYTES
from stages.common.text.readers.records import (
    DEFAULT_MAX_RECORD_BYTES,
    OVERSIZED_KEEP_BYTES,
    RawRecord,
    _SURROGATE_RE,
    _oversized_original,
)


HTML_TYPES = ("text/html", "application/xhtml+xml")
_DOCUMENT_RECORD_TYPES = ("response", "conversion")
_META_CHARSET_RE = re.compile(rb"""<meta[^>]{0,200}?charset\s*=\s*["']?\s*([A-Za-z0-9_.:-]{1,40})""", re.I)
_HEADER_CHARSET_RE = re.compile(r"charset\s*=\s*[\"']?\s*([A-Za-z0-9_.:-]{1,40})", re.I)
# Codecs that call themselves text encodings but do not read a web page: they raise on most bytes (idna,
# punycode, undefined) or turn backslash escapes into characters (*-escape).
_NOT_PAGE_CODECS = frozenset({"idna", "punycode", "undefined", "unicode-escape", "raw-unicode-escape"})
# The record types of the WARC standard: the skipped-record counters name only these (any other is `other`),
# so a file cannot add metric names.
_WARC_RECORD_TYPES = frozenset({"warcinfo", "response", "resource", "request", "metadata", "revisit", "conversion",
                                "continuation"})
_STATUS_RE = re.compile(r"[0-9]{3}")  # ASCII digits: `str.isdigit` and `int` also take "²" and "٣"
_DIGITS_RE = re.compile(r"[0-9]+")
_CHUNK_SIZE_RE = re.compile(rb"0*[0-9A-Fa-f]{1,15}")  # `int(x, 16)` also takes "-6", "+6", "0x6" and "6_0"


@dataclass(frozen=True)
class WarcBlock:
    """One WARC record as a reader library gives it: its type, WARC headers and undecoded block."""
    record_type: str
    headers: dict[str, str]  # names lower-cased
    block: bytes  # the whole block, or only its first OVERSIZED_KEEP_BYTES where it is over the size limit
    offset: int  # where the record starts in the (compressed) file
    num_bytes: int  # the whole block's length


def warc_blocks(f: BinaryIO, path: str, max_bytes: int | None = None) -> Iterator[WarcBlock]:
    """Every record of a WARC file, through FastWARC (bench/warc.py compares it with warcio). A block over
    `max_bytes` is kept only as its first OVERSIZED_KEEP_BYTES and read past without holding it. FastWARC
    stops quietly where a cut file ends, so a block shorter than its Content-Length is an `InputError`."""
    from fastwarc.warc import ArchiveIterator  # a few ms to import: only for WARC inputs

    index = last = 0
    try:
        for record in ArchiveIterator(f, parse_http=False):
            index, last = index + 1, record.stream_pos
            size = record.content_length
            block = record.reader.read(size if max_bytes is None or size <= max_bytes else OVERSIZED_KEEP_BYTES)
            num_bytes = len(block) + record.reader.consume()  # the rest, streamed past
            headers = {k.lower(): v for k, v in record.headers.items()}
            if num_bytes < size:
                raise InputError(f"{path}: truncated WARC file: it ends inside record {index} (starting at byte "
                                 f"{last}), {num_bytes} of its {size} bytes read")
            yield WarcBlock(headers.get("warc-type", "unknown"), headers, block, last, num_bytes)
    except (OSError, ValueError) as e:
        if isinstance(e, InputError):
            raise
        raise InputError(f"{path}: corrupt WARC data after record {index} (file byte {f.tell()}): {e}") from e
    if index and path.lower().endswith(".gz"):
        # A cut inside the last gzip member's end (the record's closing CRLFs, the gzip trailer) leaves its
        # block whole: check that this member, one record, decompresses to its end and the file ends there.
        f.seek(last)
        try:
            complete = _gzip_member_ends(f)
        except zlib.error as e:
            raise InputError(f"{path}: corrupt WARC data in record {index} (starting at byte {last}): {e}") from e
        if not complete:
            raise InputError(f"{path}: truncated WARC file: it ends inside record {index} (starting at byte {last})")


def _gzip_member_ends(f: BinaryIO) -> bool:
    """Whether the gzip member at `f`'s position decompresses to its end, inflated a chunk at a time (one
    member can hold a block of any size)."""
    member = zlib.decompressobj(31)
    while not member.eof and (data := f.read(_CHUNK_BYTES)):
        while data and not member.eof:
            member.decompress(data, _CHUNK_BYTES)
            data = member.unconsumed_tail
    member.flush()  # what the last call held back: at most a few hundred bytes
    return member.eof


def _iter_warc(path: str, skipped: Counter[str], max_record_bytes: int) -> Iterator[RawRecord]:
    index, source = 0, redact(path)
    with open_input(path) as f:
        for rec in warc_blocks(f, source, max_record_bytes):
            if rec.record_type not in _DOCUMENT_RECORD_TYPES:
                kind = rec.record_type if rec.record_type in _WARC_RECORD_TYPES else "other"
                skipped[f"warc_skipped.{kind}"] += 1
                continue
            index += 1
            yield warc_record(source, index, rec, max_record_bytes)


def warc_record(path: str, index: int, rec: WarcBlock, max_record_bytes: int = DEFAULT_MAX_RECORD_BYTES) -> RawRecord:
    """A WARC response (HTTP) or conversion (extracted text) record as a row, with a reason where it is
    not a document: `invalid:oversized` (a block over `max_record_bytes`: the row keeps its first 64 KiB as
    `block`; or a body that inflates past it), `invalid:warc_truncated` (WARC-Truncated, or an HTTP body
    shorter than its Content-Length), `invalid:warc_bad_http` (no HTTP status line of three digits, or no
    headers), `invalid:http_status_<class>` (anything but 200, by class: `http_status_3xx`, `_4xx`, ...; the
    code is in the row's `http_status`), `invalid:warc_not_html` (a response that is not text/html or XHTML),
    `invalid:warc_bad_encoding` (a gzip/deflate/chunked body that does not decode), `invalid:surrogate`
    (text that decodes to lone surrogates, as UTF-7 can: the row has them as `\\ud800` escapes)."""
    h = rec.headers
    row: dict[str, Any] = {"id": h.get("warc-record-id"), "url": h.get("warc-target-uri"),
                           "date": h.get("warc-date"), "warc_record_id": h.get("warc-record-id")}
    if rec.num_bytes > max_record_bytes:  # `rec.block` is only the block's start
        row["block"] = _oversized_original(rec.block, rec.num_bytes, "warc")
        return RawRecord(path, index, "warc", row, rec.num_bytes, "invalid:oversized")
    if rec.record_type == "conversion":
        row["text"] = rec.block.decode("utf-8", errors="replace")
        error = "invalid:warc_truncated" if "warc-truncated" in h else ""
        return RawRecord(path, index, "warc", row, rec.num_bytes, error)
    error, status, http_headers, body = _http_response(rec.block)
    content_type = http_headers.get("content-type", "")
    row.update(http_status=status, content_type=content_type or None)
    if not error and "warc-truncated" in h:
        error = "invalid:warc_truncated"
    if not error and status != 200:
        error = f"invalid:http_status_{status // 100}xx"  # a class: reasons are metric names, one per value
    if not error and content_type.split(";")[0].strip().lower() not in HTML_TYPES:
        error = "invalid:warc_not_html"
    if not error:
        error, body = _decoded_body(body, http_headers, max_record_bytes)
    if error in ("", "invalid:warc_truncated"):
        text = body.decode(_charset(content_type, body), errors="replace")
        if _SURROGATE_RE.search(text):  # UTF-7 can spell them; no UTF-8 output can hold them
            error, text = error or "invalid:surrogate", _escape_surrogates(text)
        row["text"] = text
    return RawRecord(path, index, "warc", row, rec.num_bytes, error)


def _escape_surrogates(text: str) -> str:
    """`text` with each lone surrogate written as its JSON escape (`\\ud800`), which UTF-8 can hold."""
    return _SURROGATE_RE.sub(lambda m: f"\\u{ord(m.group()):04x}", text)


def _http_response(block: bytes) -> tuple[str, int | None, dict[str, str], bytes]:
    """(reason or "", status code, headers with lower-cased names, body) of an HTTP response block."""
    end = block.find(b"\r\n\r\n")
    sep = 4
    if end < 0:
        end, sep = block.find(b"\n\n"), 2
    if end < 0:
        return "invalid:warc_bad_http", None, {}, b""
    lines = block[:end].decode("latin-1").splitlines()
    status_line = lines[0].split(None, 2) if lines else []
    if len(status_line) < 2 or not status_line[0].startswith("HTTP/") or not _STATUS_RE.fullmatch(status_line[1]):
        return "invalid:warc_bad_http", None, {}, b""
    headers: dict[str, str] = {}
    for line in lines[1:]:
        name, colon, value = line.partition(":")
        if colon:
            headers[name.strip().lower()] = value.strip()
    return "", int(status_line[1]), headers, block[end + sep:]


def _decoded_body(body: bytes, headers: dict[str, str], max_bytes: int) -> tuple[str, bytes]:
    """The body without its transfer and content encodings (chunked; gzip, deflate), and a reason where
    it is cut short, does not decode or inflates past `max_bytes`."""
    if "chunked" in headers.get("transfer-encoding", "").lower():
        body, complete = _dechunk(body)
        if not complete:
            return "invalid:warc_truncated", body
    elif len(body) < _content_length(headers.get("content-length", "")):
        return "invalid:warc_truncated", body
    encoding = headers.get("content-encoding", "").strip().lower()
    if encoding in ("gzip", "x-gzip", "deflate"):
        try:
            body = _inflate(body, encoding == "deflate", max_bytes + 1)
        except zlib.error:
            return "invalid:warc_bad_encoding", b""
        if len(body) > max_bytes:
            return "invalid:oversized", b""
    elif encoding not in ("", "identity"):
        return "invalid:warc_bad_encoding", b""
    return "", body


def _content_length(value: str) -> int:
    """An HTTP Content-Length header's value, 0 where it is not a number of ASCII digits."""
    if not _DIGITS_RE.fullmatch(value.strip()):
        return 0
    digits = value.strip().lstrip("0")
    return int(digits[:19] or "0")  # 19 digits are more than any body: `int` refuses over 4300 digits


def _inflate(body: bytes, deflate: bool, limit: int) -> bytes:
    """At most `limit` bytes of the decompressed body (a few KB can inflate to gigabytes). gzip: wbits 47
    detects a gzip or zlib header; deflate: zlib, else raw deflate, as some servers send it."""
    if not deflate:
        return zlib.decompressobj(47).decompress(body, limit)
    try:
        return zlib.decompressobj().decompress(body, limit)
    except zlib.error:
        return zlib.decompressobj(-15).decompress(body, limit)


def _dechunk(body: bytes) -> tuple[bytes, bool]:
    parts, pos = [], 0
    while True:
        end = body.find(b"\r\n", pos)
        if end < 0:
            return b"".join(parts), False
        size_text = body[pos:end].split(b";")[0].strip()
        if not _CHUNK_SIZE_RE.fullmatch(size_text):  # a negative size would step back and loop forever
            return b"".join(parts), False
        size = int(size_text, 16)
        if size == 0:
            return b"".join(parts), True
        if end + 2 + size > len(body):
            parts.append(body[end + 2:])
            return b"".join(parts), False
        parts.append(body[end + 2:end + 2 + size])
        pos = end + 2 + size + 2


def _charset(content_type: str, body: bytes) -> str:
    """The body's character set: the Content-Type header's, else a <meta> tag's in the first 4 KB, else
    UTF-8 (decoded with replacement characters where the bytes disagree). A name that is no text encoding
    (unknown, or a codec such as zlib, base64 or idna) is passed over."""
    for match in (_HEADER_CHARSET_RE.search(content_type), _META_CHARSET_RE.search(body, 0, 4096)):
        if match:
            name = match.group(1)
            codec = _page_codec(name.decode("ascii") if isinstance(name, bytes) else name)
            if codec:
                return "cp1252" if codec in ("latin-1", "iso8859-1", "ascii") else codec  # as browsers read them
    return "utf-8"


def _page_codec(name: str) -> str | None:
    """The codec `name` stands for if it reads text, else None: unknown, bytes-to-bytes (zlib, base64, hex:
    `bytes.decode` refuses them) or one of _NOT_PAGE_CODECS."""
    try:
        info = codecs.lookup(name)
    except LookupError:
        return None
    if not info._is_text_encoding or info.name in _NOT_PAGE_CODECS or info.name.endswith("-escape"):
        return None
    return info.name
