"""Typed columns for the fields a stage keeps (`clean.keep_fields`).

A kept field becomes a real column of the docs dataset. Its type is inferred once, before any output is
written, from the values the first records hold (`infer_kind`), so every part of a dataset has the same
schema: all booleans -> bool, all integers -> int64, integers and floats -> float64, all strings -> string;
anything else (objects, lists, a mix of types) -> a string column holding each value as JSON, since the
shape of nested values may change from record to record where an Arrow struct could not. A field with no
value in those records is a string column. A later value that does not fit its column's type (a string
in an int64 column) is written as null and counted (`coerce` says whether it fit); a JSON column takes
any value.
"""
from __future__ import annotations

import json
from collections.abc import Iterable
from typing import Any

import pyarrow as pa

KIND_TYPES = {"bool": pa.bool_(), "int": pa.int64(), "float": pa.float64(), "string": pa.string(),
              "json": pa.string()}
_INT64 = (-(1 << 63), (1 << 63) - 1)


def _kind(value: Any) -> str:
    if isinstance(value, bool):
        return "bool"
    if isinstance(value, int):
        return "int" if _INT64[0] <= value <= _INT64[1] else "json"
    if isinstance(value, float):
        return "float"
    if isinstance(value, str):
        return "string"
    return "json"


def infer_kind(values: Iterable[Any]) -> str:
    """The column kind (a key of KIND_TYPES) for a field with these sample values (None: no value)."""
    kinds = {_kind(v) for v in values if v is not None}
    if not kinds:
        return "string"
    if len(kinds) == 1:
        return kinds.pop()
    return "float" if kinds == {"int", "float"} else "json"


def coerce(value: Any, kind: str) -> tuple[Any, bool]:
    """(the value as its column stores it, whether it fit); a value that does not fit becomes None."""
    if value is None:
        return None, True
    if kind == "json":
        return json.dumps(value, ensure_ascii=False, default=str), True
    found = _kind(value)
    if found == kind:
        return value, True
    if kind == "float" and found == "int":
        return float(value), True
    return None, False


def schema_with(base: pa.Schema, kinds: dict[str, str]) -> pa.Schema:
    """`base` with one column per kept field, in the order given."""
    for name, kind in kinds.items():
        base = base.append(pa.field(name, KIND_TYPES[kind]))
    return base
