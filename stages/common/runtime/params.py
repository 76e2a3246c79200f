"""Typed access to `params.yaml`.

Each stage mirrors its `params.yaml` section in a frozen dataclass. `load_section` builds it and
raises `ValueError` naming the key for unknown keys or values of the wrong type, so a typo in
params.yaml fails loudly instead of silently falling back to a default.

Values are checked for meaning too. A field states what it allows with `param(default, min=1)` (also
`max`, `gt`, `lt`, `choices`, `nonempty`; a rule applies to each item of a list and each value of a
mapping), and no float anywhere may be NaN or infinite. `from_dict` checks each section as it builds it,
and a stage's `Params.__post_init__` calls `validate(self, STAGE)`, so a `Params` built directly (tests,
`dataclasses.replace`) is checked the same way, before the stage does any work. Errors are one line
naming the full key: `param 'clean.dedup.word_ngram': must be >= 1, got 0`.

`ConfigError` marks a mistake in params.yaml or in the inputs it names, found before any work: the stage
command (stages.common.runtime.cli) prints it as one line and exits with status 2, without a traceback.
"""
from __future__ import annotations

import dataclasses
import difflib
import math
import types
import typing
from collections.abc import Mapping
from pathlib import Path
from typing import Any, TypeVar

import yaml

T = TypeVar("T")

DEFAULT_PARAMS_PATH = Path("params.yaml")
RULES = ("min", "max", "gt", "lt", "choices", "nonempty")
# Field metadata key of `param(..., placement=True)`: see `param`.
PLACEMENT = "placement"


class ConfigError(ValueError):
    """A mistake in params.yaml or the inputs it names, in one line naming the key and what is allowed."""


def read_params(path: str | Path = DEFAULT_PARAMS_PATH) -> dict[str, Any]:
    path = Path(path)
    if not path.is_file():
        raise ConfigError(f"{path}: no such params file")
    try:
        params = yaml.safe_load(path.read_text(encoding="utf-8")) or {}
    except yaml.YAMLError as e:  # its message spans several lines: keep where and what
        mark = getattr(e, "problem_mark", None)
        where = f"{path}:{mark.line + 1}:{mark.column + 1}" if mark else str(path)
        problem = getattr(e, "problem", None) or str(e).splitlines()[0]
        raise ConfigError(f"{where}: not valid YAML ({problem})") from None
    if not isinstance(params, dict):
        raise ConfigError(f"{path}: top level must be a mapping, got {type(params).__name__}")
    return params


def param(default: Any = dataclasses.MISSING, *, default_factory: Any = dataclasses.MISSING, placement: bool = False,
          **rules: Any) -> Any:
    """A dataclass field with the values it allows: `min`/`max` (inclusive) and `gt`/`lt` (exclusive)
    bounds, `choices` (a collection of allowed values) and `nonempty` (strings, lists).

    `placement=True` marks a field that only says where or how the work runs (threads, workers, executor,
    output paths, progress bars, checkpoint cadence), not what it computes: resume and cache identities
    (stages.common.runtime.digest.fingerprint) leave it out, so changing it keeps finished work."""
    unknown = sorted(set(rules) - set(RULES))
    if unknown:
        raise TypeError(f"unknown param rule {unknown[0]!r} (known: {', '.join(RULES)})")
    metadata = {**rules, PLACEMENT: True} if placement else rules
    return dataclasses.field(default=default, default_factory=default_factory, metadata=metadata)


def _fmt(x: Any) -> str:
    return f"{x:g}" if isinstance(x, (int, float)) and not isinstance(x, bool) else repr(x)


def _bounds(rules: Mapping[str, Any]) -> str:
    """The allowed interval in words: `>= 1`, `in (0, 1]`."""
    low = f"[{_fmt(rules['min'])}" if "min" in rules else f"({_fmt(rules['gt'])}" if "gt" in rules else None
    high = f"{_fmt(rules['max'])}]" if "max" in rules else f"{_fmt(rules['lt'])})" if "lt" in rules else None
    if low and high:
        return f"in {low}, {high}"
    if low:
        return (">= " if low[0] == "[" else "> ") + low[1:]
    return ("<= " if high[-1] == "]" else "< ") + high[:-1]


def _check_value(key: str, value: Any, rules: Mapping[str, Any]) -> None:
    """One field's value against its rules, and every float in it against NaN and infinity."""
    if value is None or dataclasses.is_dataclass(value):
        return  # None: an optional value left out; dataclasses are checked field by field
    if rules.get("nonempty") and not value:
        raise ValueError(f"param {key!r}: must not be empty")
    item_rules = {k: v for k, v in rules.items() if k != "nonempty"}
    if isinstance(value, (list, tuple)):
        for i, item in enumerate(value):
            _check_value(f"{key}[{i}]", item, item_rules)
        return
    if isinstance(value, Mapping):
        for name, item in value.items():
            _check_value(f"{key}.{name}", item, item_rules)
        return
    if isinstance(value, float) and not math.isfinite(value):
        raise ValueError(f"param {key!r}: must be a finite number, got {value!r}")
    if "choices" in rules and value not in rules["choices"]:
        same_but_case = [c for c in rules["choices"] if str(c).lower() == str(value).lower()]
        raise ValueError(f"param {key!r}: must be one of {', '.join(map(str, rules['choices']))}, got {value!r}"
                         + (f" (did you mean {same_but_case[0]!r}?)" if same_but_case else ""))
    if isinstance(value, (int, float)) and not isinstance(value, bool) and (
            value < rules.get("min", value) or value > rules.get("max", value)
            or ("gt" in rules and value <= rules["gt"]) or ("lt" in rules and value >= rules["lt"])):
        raise ValueError(f"param {key!r}: must be {_bounds(rules)}, got {value!r}")


def validate(params: Any, section: str) -> None:
    """Check every field of the dataclass `params` (nested ones included) against its rules; keys in
    errors are `section.field`. Stages call it first thing in `Params.__post_init__`."""
    for f in dataclasses.fields(params):
        key, value = f"{section}.{f.name}", getattr(params, f.name)
        _check_value(key, value, f.metadata)
        if dataclasses.is_dataclass(value):
            validate(value, key)


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
    """Build dataclass `cls` from `data`, rejecting unknown keys, wrong types and values their field's rules
    (see `param`) do not allow."""
    hints = typing.get_type_hints(cls)
    fields = {f.name: f for f in dataclasses.fields(cls)}
    unknown = sorted(set(data) - set(fields))
    renamed = getattr(cls, "RENAMED_PARAMS", {})  # old key -> new key, for a dataclass whose keys were renamed
    if unknown and unknown[0] in renamed:
        raise ConfigError(f"param {prefix + unknown[0]!r} was renamed {prefix + renamed[unknown[0]]!r}: "
                          "rename it in the params file")
    if unknown:
        close = difflib.get_close_matches(unknown[0], fields, n=1)
        raise ValueError(f"unknown param {prefix + unknown[0]!r} ("
                         + (f"did you mean {prefix + close[0]!r}? " if close else "")
                         + f"known: {', '.join(sorted(fields))})")
    kwargs = {k: _check_type(prefix + k, v, hints[k]) for k, v in data.items()}
    for name, value in kwargs.items():  # before `cls` runs its own checks, which may not know the full key
        _check_value(prefix + name, value, fields[name].metadata)
    try:
        return cls(**kwargs)
    except TypeError as e:  # a required field is missing
        raise ValueError(f"params {prefix or cls.__name__}: {e}") from None


def load_section(section: str, cls: type[T], path: str | Path = DEFAULT_PARAMS_PATH) -> T:
    params = read_params(path)
    if section not in params:
        raise ValueError(f"{path}: missing section {section!r}")
    if not isinstance(params[section] or {}, dict):
        raise ValueError(f"param {section!r}: expected a mapping, got {params[section]!r}")
    return from_dict(cls, params[section] or {}, prefix=f"{section}.")
