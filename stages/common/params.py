"""Typed access to `params.yaml`.

Each stage mirrors its `params.yaml` section in a frozen dataclass. `load_section` builds it and
raises `ValueError` naming the key for unknown keys or values of the wrong type, so a typo in
params.yaml fails loudly instead of silently falling back to a default.
"""
from __future__ import annotations

import dataclasses
import types
import typing
from pathlib import Path
from typing import Any, TypeVar

import yaml

T = TypeVar("T")

DEFAULT_PARAMS_PATH = Path("params.yaml")


def read_params(path: str | Path = DEFAULT_PARAMS_PATH) -> dict[str, Any]:
    with open(path, encoding="utf-8") as f:
        params = yaml.safe_load(f) or {}
    if not isinstance(params, dict):
        raise ValueError(f"{path}: top level must be a mapping, got {type(params).__name__}")
    return params


def _check_type(key: str, value: Any, annotation: Any) -> Any:
    """Validate (and lightly coerce) one value against its dataclass annotation."""
    origin = typing.get_origin(annotation)
    args = typing.get_args(annotation)
    if origin in (typing.Union, types.UnionType):
        if value is None and type(None) in args:
            return None
        errors = []
        for arg in args:
            if arg is type(None):
                continue
            try:
                return _check_type(key, value, arg)
            except ValueError as e:
                errors.append(str(e))
        raise ValueError(errors[0])
    if origin in (tuple, list):
        if not isinstance(value, (list, tuple)):
            raise ValueError(f"param {key!r}: expected a list, got {value!r}")
        item_type = args[0] if args else Any
        return tuple(_check_type(f"{key}[{i}]", v, item_type) for i, v in enumerate(value))
    if origin is dict:
        if not isinstance(value, dict):
            raise ValueError(f"param {key!r}: expected a mapping, got {value!r}")
        return dict(value)
    if annotation is Any:
        return value
    if annotation is float:
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise ValueError(f"param {key!r}: expected a number, got {value!r}")
        return float(value)
    if annotation is int:
        if isinstance(value, bool) or not isinstance(value, int):
            raise ValueError(f"param {key!r}: expected an integer, got {value!r}")
        return value
    if annotation is bool:
        if not isinstance(value, bool):
            raise ValueError(f"param {key!r}: expected true/false, got {value!r}")
        return value
    if annotation is str:
        if not isinstance(value, str):
            raise ValueError(f"param {key!r}: expected a string, got {value!r}")
        return value
    if dataclasses.is_dataclass(annotation):
        if not isinstance(value, dict):
            raise ValueError(f"param {key!r}: expected a mapping, got {value!r}")
        return from_dict(annotation, value, prefix=f"{key}.")
    return value


def from_dict(cls: type[T], data: dict[str, Any], prefix: str = "") -> T:
    """Build dataclass `cls` from `data`, rejecting unknown keys and wrong types."""
    hints = typing.get_type_hints(cls)
    names = {f.name for f in dataclasses.fields(cls)}
    unknown = sorted(set(data) - names)
    if unknown:
        raise ValueError(f"unknown param {prefix + unknown[0]!r} (known: {', '.join(sorted(names))})")
    kwargs = {k: _check_type(prefix + k, v, hints[k]) for k, v in data.items()}
    try:
        return cls(**kwargs)
    except TypeError as e:  # a required field is missing
        raise ValueError(f"params {prefix or cls.__name__}: {e}") from None


def load_section(section: str, cls: type[T], path: str | Path = DEFAULT_PARAMS_PATH) -> T:
    params = read_params(path)
    if section not in params:
        raise ValueError(f"{path}: missing section {section!r}")
    return from_dict(cls, params[section] or {}, prefix=f"{section}.")
