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

`load_yaml` is the one reader of a params file (the stages, `refinery check`, the flows): at most
`MAX_PARAMS_BYTES`, no key twice in a mapping, and an alias (`*name`) only for a single value, at most
`MAX_ALIASES` of them, so a small hostile file cannot expand to billions of items. An error message shows
at most `SHOWN_CHARS` of a value (`shown`).
"""
from __future__ import annotations

import dataclasses
import difflib
import math
import reprlib
import types
import typing
from collections.abc import Mapping
from pathlib import Path
from typing import Any, NoReturn, TypeVar

import yaml

T = TypeVar("T")

DEFAULT_PARAMS_PATH = Path("params.yaml")
RULES = ("min", "max", "gt", "lt", "choices", "nonempty")
# Field metadata key of `param(..., placement=True)`: see `param`.
PLACEMENT = "placement"


class ConfigError(ValueError):
    """A mistake in params.yaml or the inputs it names, in one line naming the key and what is allowed."""


# A params file is tens of KiB; the cap bounds what parsing a hostile one may cost.
MAX_PARAMS_BYTES = 1 << 20
# Aliases share a path between sections (params.yaml has three); each may only stand for a single value.
MAX_ALIASES = 32
MAX_DEPTH = 32  # nesting of mappings and lists (params.yaml: 4); deeper would exhaust the parser's stack
SHOWN_CHARS = 60  # the most of a value an error message shows
MERGE_TAG = "tag:yaml.org,2002:merge"

_REPR = reprlib.Repr()  # Python 3.11's Repr takes no arguments: limits set below
_REPR.maxlevel, _REPR.maxlist, _REPR.maxtuple, _REPR.maxdict = 2, 6, 6, 4
_REPR.maxstring = _REPR.maxother = SHOWN_CHARS


def shorten(text: str, limit: int = SHOWN_CHARS) -> str:
    """`text` cut to `limit` characters, an ellipsis marking the cut."""
    return text if len(text) <= limit else text[:limit - 1] + "…"


def shown(value: Any, limit: int = SHOWN_CHARS) -> str:
    """`repr(value)` for an error message, at most `limit` characters; the repr of a large value is
    never built whole (reprlib stops at a few items and levels)."""
    return shorten(repr(value[:limit + 1]) if isinstance(value, str) else _REPR.repr(value), limit)


class _ParamsLoader(yaml.SafeLoader):
    """PyYAML's safe loader, refusing what a params file never needs: an alias of a mapping or list (a few
    lines of nested aliases stand for 10^9 items once walked), more than MAX_ALIASES aliases, nesting deeper
    than MAX_DEPTH and a key twice in one mapping (PyYAML would keep the last one silently)."""

    def __init__(self, text: str, source: str | Path) -> None:
        super().__init__(text)
        self.source = source
        self.num_aliases = 0
        self.keys: list[str] = []  # the path to the node being composed, for messages
        self.paths: dict[yaml.Node, str] = {}  # mapping node -> its dotted key

    def refuse(self, mark: yaml.Mark, problem: str) -> NoReturn:
        raise ConfigError(f"{self.source}:{mark.line + 1}:{mark.column + 1}: {problem}")

    def compose_node(self, parent: yaml.Node | None, index: Any) -> yaml.Node:
        if self.check_event(yaml.AliasEvent):
            event = self.peek_event()
            self.num_aliases += 1
            if self.num_aliases > MAX_ALIASES:
                self.refuse(event.start_mark, f"more than {MAX_ALIASES} aliases (*name); write the values out")
            if not isinstance(self.anchors.get(event.anchor), (yaml.ScalarNode, type(None))):
                self.refuse(event.start_mark, f"alias *{shorten(event.anchor)} stands for a mapping or list; "
                                              "an alias may only repeat a single value")
            return super().compose_node(parent, index)  # an undefined alias: PyYAML's error
        if len(self.keys) >= MAX_DEPTH:
            self.refuse(self.peek_event().start_mark, f"nested deeper than {MAX_DEPTH} levels")
        key = (index.value if isinstance(index, yaml.ScalarNode) else f"[{index}]" if isinstance(index, int)
               else "")
        self.keys.append(key)
        try:
            node = super().compose_node(parent, index)
        finally:
            self.keys.pop()
        if isinstance(node, yaml.MappingNode):
            self.paths[node] = ".".join(k for k in [*self.keys, key] if k).replace(".[", "[")
        return node

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:
        seen = set()
        for key_node, _ in node.value:
            if not isinstance(key_node, yaml.ScalarNode) or key_node.tag == MERGE_TAG:
                continue  # a list or mapping as a key: PyYAML refuses it; a merge: its keys are not written here
            key = self.construct_object(key_node)
            if key in seen:
                parent = self.paths.get(node, "")
                self.refuse(key_node.start_mark, f"key {shown(f'{parent}.{key}' if parent else key)} appears twice; "
                                                 "YAML keeps only one: remove the other")
            seen.add(key)
        return super().construct_mapping(node, deep)


def parse_yaml(text: str, source: str | Path) -> Any:
    """`text` (from `source`, for messages) as `load_yaml` reads it; ConfigError in one line."""
    loader = _ParamsLoader(text, source)
    try:
        return loader.get_single_data()
    except yaml.YAMLError as e:  # its message spans several lines: keep where and what
        mark = getattr(e, "problem_mark", None)
        where = f"{source}:{mark.line + 1}:{mark.column + 1}" if mark else str(source)
        problem = getattr(e, "problem", None) or str(e).splitlines()[0]
        raise ConfigError(f"{where}: not valid YAML ({shorten(problem, 2 * SHOWN_CHARS)})") from None
    except ConfigError:
        raise
    except ValueError as e:  # a scalar YAML resolves but Python refuses: a date 2024-13-01, a 5000-digit int
        raise ConfigError(f"{source}: not valid YAML ({shorten(str(e), 2 * SHOWN_CHARS)})") from None
    finally:
        loader.dispose()


def load_yaml(path: str | Path, what: str = "params file") -> Any:
    """The YAML file at `path`, read safely (see the module's docstring); ConfigError in one line."""
    path = Path(path)
    if not path.is_file():
        raise ConfigError(f"{path}: no such {what}")
    with open(path, "rb") as f:
        data = f.read(MAX_PARAMS_BYTES + 1)  # not more: the file may be far larger than the cap
    if len(data) > MAX_PARAMS_BYTES:
        raise ConfigError(f"{path}: larger than {MAX_PARAMS_BYTES // 1024} KiB, the most a {what} may be")
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as e:
        raise ConfigError(f"{path}: not UTF-8 text (byte {e.start})") from None
    return parse_yaml(text, path)


def read_params(path: str | Path = DEFAULT_PARAMS_PATH) -> dict[str, Any]:
    params = load_yaml(path) or {}
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
            _check_value(f"{key}.{shorten(str(name))}", item, item_rules)
        return
    if isinstance(value, float) and not math.isfinite(value):
        raise ValueError(f"param {key!r}: must be a finite number, got {shown(value)}")
    if "choices" in rules and value not in rules["choices"]:
        same_but_case = [c for c in rules["choices"] if str(c).lower() == str(value).lower()]
        raise ValueError(f"param {key!r}: must be one of {', '.join(map(str, rules['choices']))}, got {shown(value)}"
                         + (f" (did you mean {same_but_case[0]!r}?)" if same_but_case else ""))
    if isinstance(value, (int, float)) and not isinstance(value, bool) and (
            value < rules.get("min", value) or value > rules.get("max", value)
            or ("gt" in rules and value <= rules["gt"]) or ("lt" in rules and value >= rules["lt"])):
        raise ValueError(f"param {key!r}: must be {_bounds(rules)}, got {shown(value)}")


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
            raise ValueError(f"param {key!r}: expected a list, got {shown(value)}")
        item_type = args[0] if args else Any
        return tuple(_check_type(f"{key}[{i}]", v, item_type) for i, v in enumerate(value))
    if origin is dict:
        if not isinstance(value, dict):
            raise ValueError(f"param {key!r}: expected a mapping, got {shown(value)}")
        return dict(value)
    if annotation is Any:
        return value
    if annotation is float:
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise ValueError(f"param {key!r}: expected a number, got {shown(value)}")
        return float(value)
    if annotation is int:
        if isinstance(value, bool) or not isinstance(value, int):
            raise ValueError(f"param {key!r}: expected an integer, got {shown(value)}")
        return value
    if annotation is bool:
        if not isinstance(value, bool):
            raise ValueError(f"param {key!r}: expected true/false, got {shown(value)}")
        return value
    if annotation is str:
        if not isinstance(value, str):
            raise ValueError(f"param {key!r}: expected a string, got {shown(value)}")
        return value
    if dataclasses.is_dataclass(annotation):
        if not isinstance(value, dict):
            raise ValueError(f"param {key!r}: expected a mapping, got {shown(value)}")
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
        raise ValueError(f"unknown param {shown(prefix + unknown[0])} ("
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
        raise ValueError(f"param {section!r}: expected a mapping, got {shown(params[section])}")
    return from_dict(cls, params[section] or {}, prefix=f"{section}.")
