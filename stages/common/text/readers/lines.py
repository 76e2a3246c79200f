"""Line reading and compression: gzip and zstd streams (a zstd file's frames are checked whole first: its
reader ends quietly where a cut file ends), the non-blank lines of a JSONL file, each held as at most its
first `hold` bytes, and whole text files. Imports `records`.
"""
from __future__ import annotations

import gzip
import io
import re
import zlib
from collections.abc import Iterator
from contextlib import ExitStack
from typing import BinaryIO

import zstandard

from stages.common.runtime.storage import open_input
from stages.common.runtime.urls import InputError, redact, url_path
from stages.common.text.readers.records import _id_hash, derive_id


_CHUNK_BYTES = 1 << 20
_BOM = b"\xef\xbb\xbf"
_BLANK_RE = re.compile(rb"[ \t\n\r\x0b\x0c]*")  # the bytes `bytes.strip()` removes: a blank line is only these
# What decompressors raise on damaged or cut input (gzip: EOFError, BadGzipFile for CRC/length, zlib.error).
_STREAM_ERRORS = (EOFError, OSError, zlib.error, zstandard.ZstdError)


def check_zstd_frames(f: BinaryIO, name: str) -> None:
    """Raise `InputError` unless every zstd frame in the open file `f` (`name`: what errors show) is
    complete, then rewind it. zstandard's stream reader ends quietly where a cut file ends, so this walks
    the frame and block headers (a few bytes each)."""
    size = f.seek(0, io.SEEK_END)

    def read_at(offset: int, n: int, what: str) -> bytes:
        if offset + n > size:
            raise InputError(f"{name}: truncated zstd stream: the file ends at byte {size}, inside the "
                             f"{what} at byte {offset}")
        f.seek(offset)
        return f.read(n)

    pos = 0
    while pos < size:
        frame = pos
        magic = int.from_bytes(read_at(pos, 4, "frame header"), "little")
        if magic & 0xFFFFFFF0 == 0x184D2A50:  # a skippable frame: its size, then that many bytes
            skip = int.from_bytes(read_at(pos + 4, 4, "frame header"), "little")
            if skip:
                read_at(pos + 8 + skip - 1, 1, "skippable frame")
            pos += 8 + skip
            continue
        if magic != 0xFD2FB528:
            raise InputError(f"{name}: corrupt zstd stream: no frame starts at byte {frame}")
        descriptor = read_at(pos + 4, 1, "frame header")[0]
        single_segment, has_checksum = descriptor >> 5 & 1, descriptor >> 2 & 1
        content_size_bytes = (single_segment, 2, 4, 8)[descriptor >> 6]
        pos += 5 + (1 - single_segment) + (0, 1, 2, 4)[descriptor & 3] + content_size_bytes
        last = False
        while not last:
            header = int.from_bytes(read_at(pos, 3, f"frame starting at byte {frame}"), "little")
            last, block_type, block_size = bool(header & 1), header >> 1 & 3, header >> 3
            if block_type == 3:
                raise InputError(f"{name}: corrupt zstd stream: invalid block type at byte {pos}")
            stored = 1 if block_type == 1 else block_size  # an RLE block stores its one byte
            if stored:
                read_at(pos + 3 + stored - 1, 1, f"frame starting at byte {frame}")
            pos += 3 + stored
        if has_checksum:
            read_at(pos, 4, f"frame starting at byte {frame}")
            pos += 4
    f.seek(0)

class _LineReader:
    """Non-blank lines of a binary stream as (line number, bytes, length, derived id). A line longer than
    `hold` bytes comes as its first `hold` bytes, and its id derived from all of it, while the rest is read
    past in chunks; runs of blank lines are skipped a chunk at a time. A UTF-8 byte-order mark at the start
    is dropped."""

    def __init__(self, f: BinaryIO, hold: int, source: str) -> None:
        self.f = f
        self.hold = hold
        self.source = source
        self.line_number = 0  # lines finished so far
        self.offset = 0  # decompressed bytes read so far

    def _read(self) -> bytes:
        chunk = self.f.read(_CHUNK_BYTES)
        self.offset += len(chunk)
        return chunk

    def __iter__(self) -> Iterator[tuple[int, bytes, int, str]]:
        buf = self._read()
        while 0 < len(buf) < len(_BOM):
            more = self._read()
            if not more:
                break
            buf += more
        pos = len(_BOM) if buf.startswith(_BOM) else 0
        while True:
            if pos >= len(buf):
                buf, pos = self._read(), 0
                if not buf:
                    return
            blank_end = _BLANK_RE.match(buf, pos).end()
            newline = buf.rfind(b"\n", pos, blank_end)
            if newline >= 0:  # whole blank lines, in one step however many
                self.line_number += buf.count(b"\n", pos, newline + 1)
                pos = newline + 1
                continue
            newline = buf.find(b"\n", pos)
            if newline >= 0:
                line, pos = buf[pos:newline + 1], newline + 1
                self.line_number += 1
                derived = derive_id(self.source, self.line_number, line) if len(line) > self.hold else ""
                yield self.line_number, line[:self.hold], len(line), derived
                continue
            # The line runs past this chunk: keep at most `hold` bytes of it.
            held = [buf[pos:pos + self.hold]]
            num_held, length, blank = len(held[0]), len(buf) - pos, blank_end == len(buf)
            digest = _id_hash(self.source, self.line_number + 1)
            digest.update(buf[pos:])
            while True:
                buf, pos = self._read(), 0
                if not buf:
                    break
                newline = buf.find(b"\n")
                piece = buf if newline < 0 else buf[:newline + 1]
                length += len(piece)
                digest.update(piece)
                blank = blank and _BLANK_RE.match(piece).end() == len(piece)
                if num_held < self.hold:
                    held.append(piece[:self.hold - num_held])
                    num_held += len(held[-1])
                if newline >= 0:
                    pos = newline + 1
                    break
            self.line_number += 1
            if not blank:
                derived = f"h-{digest.hexdigest()}" if length > self.hold else ""
                yield self.line_number, b"".join(held), length, derived


def _open_stream(path: str, stack: ExitStack) -> tuple[BinaryIO, BinaryIO]:
    """(decompressed stream, the file under it): the file's position says how far a damaged stream got."""
    raw = stack.enter_context(open_input(path))
    lower = url_path(path).lower()
    if lower.endswith(".gz"):
        return stack.enter_context(gzip.GzipFile(fileobj=raw, mode="rb")), raw
    if lower.endswith(".zst"):
        check_zstd_frames(raw, redact(path))
        reader = zstandard.ZstdDecompressor().stream_reader(raw, read_across_frames=True, closefd=False)
        return stack.enter_context(io.BufferedReader(reader, _CHUNK_BYTES)), raw  # reads return full chunks
    return raw, raw


def _stream_error(path: str, raw: BinaryIO, lines: _LineReader, error: Exception) -> InputError:
    return InputError(f"{path}: corrupt or truncated data after line {lines.line_number} (decompressed byte "
                      f"{lines.offset}, file byte {raw.tell()}): {error}")


def _read_text(f: BinaryIO, hold: int, source: str) -> tuple[bytes, int, str]:
    """A whole text file, without a leading byte-order mark, as (its first `hold` bytes, its length, and
    its derived id if it is longer)."""
    data = f.read(hold + len(_BOM))
    if data.startswith(_BOM):
        data = data[len(_BOM):]
    if len(data) <= hold:
        return data, len(data), ""
    digest = _id_hash(source, 1)
    digest.update(data)
    length = len(data)
    while chunk := f.read(_CHUNK_BYTES):
        length += len(chunk)
        digest.update(chunk)
    return data[:hold], length, f"h-{digest.hexdigest()}"
