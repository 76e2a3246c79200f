"""What the readers yield and how a record is judged: `RawRecord` (what a reader read, unparsed),
`parse_raw` (one raw record to a `Record` or a `Rejection` with a reason, never an exception), `FieldMap`
(where the text, the id and the kept fields are), the ids derived from where a record came from and what it
holds, and the size limits with the helpers that keep an oversized record's start for its quarantine row.
Imports nothing else of the package.
"""
from __future__ import annotations

import hashlib
import json
import os
import re
from dataclasses import dataclass, field
from typing import Any


DEFAULT_MAX_RECORD_BYTES = 1_000_000  # the `clean.max_record_bytes` default
OVERSIZED_KEEP_BYTES = 64 * 1024  # of a record over the size limit, what its quarantine row keeps
MAX_JSON_DEPTH = 100  # nesting deeper than this is quarantined (Python's JSON recursion gives out near 1000)

# Control characters other than tab, newline, carriage return and escape (ANSI colours are text).
_BINARY_CONTROL_RE = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1a\x1c-\x1f]")
_SURROGATE_RE = re.compile("[\ud800-\udfff]")  # only JSON escapes make these; UTF-8 cannot encode them
_SURROGATE_ESCAPE_RE = re.compile(r"\\u[dD][89a-fA-F]")


@dataclass(frozen=True)
class RawRecord:
    source: str  # path as given (relative stays relative: ids do not depend on the checkout); a URL redacted
    index: int  # 1-based line (JSONL), row (Parquet) or 1 (text file)
    kind: str  # "json" | "row" | "warc" (a row whose text and id are the record's own) | "text"
    payload: Any  # bytes for json/text (only the first bytes when over the size limit), dict for row/warc
    num_bytes: int  # the record's full size as read
    error: str = ""  # a reason the reader already found (a Parquet value that cannot be converted)
    derived_id: str = ""  # `derive_id` of the whole record, set where `payload` holds only its start
    origin: int = 0  # which input source it came from (clean.sources), for the reader's caller


ROW_KINDS = ("row", "warc")  # records whose payload is already a dict of fields


@dataclass(frozen=True)
class FieldMap:
    """Where a record's text, id and kept fields are: field names, or dotted paths into nested objects
    (`payload.content`; a field whose own name has a dot is found first), looked up after `rename`
    ((old, new) pairs of top-level field names). A WARC/WET record's text and id are always its own
    (`text`, `id`), whatever `text` and `id` say."""
    text: str = "text"
    id: str = "id"
    keep: tuple[str, ...] = ()
    rename: tuple[tuple[str, str], ...] = ()

    def renamed(self, obj: dict[str, Any]) -> dict[str, Any]:
        if not self.rename:
            return obj
        names = dict(self.rename)
        return {names.get(key, key): value for key, value in obj.items()}


DEFAULT_FIELDS = FieldMap()


@dataclass(frozen=True)
class Record:
    id: str
    text: str
    source: str
    index: int
    meta: dict[str, Any] = field(default_factory=dict)  # the record's other fields
    kept: dict[str, Any] = field(default_factory=dict)  # FieldMap.keep: path -> value (None where absent)


@dataclass(frozen=True)
class Rejection:
    id: str
    reason: str
    source: str
    index: int
    original: str  # the record as read (JSON or the raw line with bad bytes escaped), so nothing is lost


def _id_hash(source: str, index: int) -> Any:
    return hashlib.blake2b(digest_size=10, key=f"{os.path.basename(source)}:{index}".encode()[:64])


def derive_id(source: str, index: int, content: bytes) -> str:
    """A stable id from where the record came from and what it holds."""
    digest = _id_hash(source, index)
    digest.update(content)
    return f"h-{digest.hexdigest()}"


def _is_binary(text: str) -> bool:
    sample = text[:4096]
    return len(_BINARY_CONTROL_RE.findall(sample)) > max(8, len(sample) // 20)


def _too_deep(obj: Any) -> bool:
    """Whether lists/objects nest deeper than MAX_JSON_DEPTH (walked without recursion)."""
    stack = [(v, 2) for v in obj.values() if isinstance(v, (dict, list))]
    while stack:
        value, depth = stack.pop()
        if depth > MAX_JSON_DEPTH:
            return True
        children = value.values() if isinstance(value, dict) else value
        stack += [(v, depth + 1) for v in children if isinstance(v, (dict, list))]
    return False


def _oversized_original(data: bytes, num_bytes: int, kind: str) -> str:
    kept = data[:OVERSIZED_KEEP_BYTES]
    text = kept.decode("utf-8", errors="backslashreplace")
    text = text.rstrip("\n") if kind == "json" else text
    if len(kept) < num_bytes:
        text += f"\n[truncated: the first {len(kept)} of {num_bytes} bytes are kept]"
    return text


_MISSING = object()
_JSON_GROWTH = 5  # json.dumps writes a parsed JSON line at most about 4.5 times as long (see _fields_over)
_UNREADABLE = frozenset({"invalid:bad_utf8", "invalid:bad_value", "invalid:csv_syntax"})


def get_field(obj: dict[str, Any], path: str) -> Any:
    """`obj[path]`, else the value at the dotted `path` through nested objects; `_MISSING` if neither."""
    if path in obj:
        return obj[path]
    value: Any = obj
    for part in path.split("."):
        if not isinstance(value, dict) or part not in value:
            return _MISSING
        value = value[part]
    return value


def _without(obj: dict[str, Any], paths: list[str]) -> dict[str, Any]:
    """`obj` less the fields at `paths` (copies along each path; `obj` itself is left as it was)."""
    out = dict(obj)
    for path in paths:
        if path in out:
            del out[path]
            continue
        parts, node, parents = path.split("."), out, []
        for part in parts[:-1]:
            child = node.get(part)
            if not isinstance(child, dict):
                break
            node[part] = dict(child)
            parents.append(node)
            node = node[part]
        else:
            node.pop(parts[-1], None)
    return out


def field_names(obj: dict[str, Any], prefix: str = "", depth: int = 2) -> list[str]:
    """The fields of `obj`, nested objects' fields as dotted paths (two levels), for error messages."""
    names = []
    for key, value in obj.items():
        names.append(prefix + str(key))
        if isinstance(value, dict) and depth > 1:
            names += field_names(value, f"{prefix}{key}.", depth - 1)
    return names


def _fields_over(raw: RawRecord, original: str, kept: dict[str, Any], meta: dict[str, Any], limit: int) -> bool:
    """Whether the record's other fields, as JSON as the `meta` and kept-field columns hold them, are over
    `limit` bytes. Measured only where they may be: in a row whose JSON is over it, or in a JSON line that
    `json.dumps` could write over it (up to _JSON_GROWTH times as long: "1e15" -> "1000000000000000.0")."""
    if raw.kind == "text" or not (_over(original, limit) if raw.kind in ROW_KINDS
                                  else _JSON_GROWTH * raw.num_bytes > limit):
        return False
    return _over(json.dumps({**kept, **meta}, ensure_ascii=False, default=str), limit)


def _capped(original: str) -> str:
    data = original.encode("utf-8", "surrogatepass")
    return _oversized_original(data, len(data), "row")


def _over(text: str, limit: int) -> bool:
    """Whether `text` is over `limit` bytes as UTF-8 (encoded only where its length leaves doubt)."""
    return len(text) > limit or (4 * len(text) > limit and len(text.encode("utf-8", "surrogatepass")) > limit)


def parse_raw(raw: RawRecord, max_record_bytes: int, fields: FieldMap = DEFAULT_FIELDS) -> Record | Rejection:
    """Validate one raw record; every failure becomes a `Rejection` with a reason, never an exception."""
    if raw.kind == "warc":
        fields = FieldMap("text", "id", fields.keep, fields.rename)
    if raw.kind in ROW_KINDS:
        obj: Any = fields.renamed(raw.payload)
        original = json.dumps(obj, ensure_ascii=False, default=str)
        fallback_id = derive_id(raw.source, raw.index, original.encode())
        if raw.error:  # the reader's reason; a record whose values did not decode keeps no id of its own
            given = None if raw.error in _UNREADABLE else get_field(obj, fields.id)
            given_id = str(given) if isinstance(given, (str, int)) and str(given) else fallback_id
            if raw.error == "invalid:oversized" and raw.kind == "row":  # the reader kept its first bytes only
                original = _oversized_original(original.encode("utf-8", "surrogatepass"), raw.num_bytes, "row")
            return Rejection(given_id, raw.error, raw.source, raw.index, original)
    else:
        data: bytes = raw.payload
        fallback_id = raw.derived_id or derive_id(raw.source, raw.index, data)
        if raw.num_bytes > max_record_bytes:  # before decoding: `data` may be only the start of the record
            return Rejection(fallback_id, "invalid:oversized", raw.source, raw.index,
                             _oversized_original(data, raw.num_bytes, raw.kind))
        try:
            decoded = data.decode("utf-8")
        except UnicodeDecodeError:
            return Rejection(fallback_id, "invalid:bad_utf8", raw.source, raw.index,
                             data.decode("utf-8", errors="backslashreplace"))
        original = decoded.rstrip("\n") if raw.kind == "json" else decoded
        if raw.kind == "text":  # the file is the text, whatever `fields.text` says
            obj = {fields.text: decoded}
        else:
            try:
                obj = json.loads(decoded)
            except RecursionError:
                return Rejection(fallback_id, "invalid:too_deep", raw.source, raw.index, original)
            except ValueError:
                return Rejection(fallback_id, "invalid:bad_json", raw.source, raw.index, original)
            if not isinstance(obj, dict):
                return Rejection(fallback_id, "invalid:not_object", raw.source, raw.index, original)
            obj = fields.renamed(obj)
    given_id = get_field(obj, fields.id)
    record_id = str(given_id) if isinstance(given_id, (str, int)) and str(given_id) else fallback_id
    if raw.kind == "json":
        # A lone surrogate escape ("\ud800") decodes, but no UTF-8 output can hold it.
        if _SURROGATE_ESCAPE_RE.search(decoded) and _SURROGATE_RE.search(json.dumps(obj, ensure_ascii=False)):
            record_id = fallback_id if _SURROGATE_RE.search(record_id) else record_id
            return Rejection(record_id, "invalid:surrogate", raw.source, raw.index, original)
        if _too_deep(obj):
            return Rejection(record_id, "invalid:too_deep", raw.source, raw.index, original)
    text = get_field(obj, fields.text)
    if text is _MISSING:
        return Rejection(record_id, "invalid:missing_text", raw.source, raw.index, original)
    if not isinstance(text, str):
        return Rejection(record_id, "invalid:non_string_text", raw.source, raw.index, original)
    if raw.kind in ROW_KINDS and _over(text, max_record_bytes):
        return Rejection(record_id, "invalid:oversized", raw.source, raw.index, _capped(original))
    if not text.strip():
        return Rejection(record_id, "invalid:empty", raw.source, raw.index, original)
    if _is_binary(text):
        return Rejection(record_id, "invalid:binary", raw.source, raw.index, original)
    kept = {}
    if fields is DEFAULT_FIELDS or fields == DEFAULT_FIELDS:
        meta = {k: v for k, v in obj.items() if k not in ("id", "text")}
    else:
        for path in fields.keep:
            value = get_field(obj, path)
            kept[path] = None if value is _MISSING else value
        meta = _without(obj, [fields.id, fields.text, *fields.keep])
    if _fields_over(raw, original, kept, meta, max_record_bytes):  # no published value may be over the limit
        return Rejection(record_id, "invalid:oversized", raw.source, raw.index,
                         original if raw.kind == "json" else _capped(original))
    return Record(record_id, text, raw.source, raw.index, meta, kept)
