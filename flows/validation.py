"""What a run's parameters may ask for. Anyone who can start a run through the API chooses them, so they
may tune the pipeline but never point it somewhere else.

- `set_params` (`dvc exp run --set-param` overrides) may only change a value params.yaml already has, to a
  value of the same type, parsed exactly as DVC will parse it (Hydra's override grammar). A value that
  names a location is never overridden: its key ends in `dir`, `path`, `file`, `input`, `output` (or
  their plurals), `checkpoint`, `address` or `url`, or its current or new value looks like a path (a
  string with `/` or `\\`, or starting with `.` or `~`). Those are set in params.yaml, under review.
- At most `MAX_OVERRIDES` overrides, each at most `MAX_OVERRIDE_BYTES` long and `MAX_OVERRIDES_BYTES` in all,
  refused before any is parsed: Hydra's parser (which DVC uses too) takes time quadratic in the length of
  one override (a list value of 100,000 items, 300 KB: ten minutes), linear in their number.
- `experiment_name` becomes a folder name and a git ref: letters, digits, `.`, `_`, `-` only.
"""
from __future__ import annotations

import re
from typing import Any

from hydra.core.override_parser.overrides_parser import OverridesParser
from hydra.core.override_parser.types import OverrideType
from hydra.errors import HydraException

from stages.common.runtime.dvcfile import lookup
from stages.common.runtime.params import shorten, shown

LOCATION_SUFFIXES = ("dir", "path", "file", "input", "output")
LOCATION_NAMES = ("checkpoint", "address", "url")
EXPERIMENT_NAME_MAX = 64
MAX_OVERRIDES = 200  # a profile's and set_params together
# In UTF-8. One override: room for a list of every language code (200 bytes), parsed in about 20 ms (4 KiB:
# 170 ms); all of them: at most 8 such lists, well under a second.
MAX_OVERRIDE_BYTES = 1024
MAX_OVERRIDES_BYTES = 8 * 1024
EXPERIMENT_NAME_RE = re.compile(rf"[A-Za-z0-9][A-Za-z0-9._-]{{0,{EXPERIMENT_NAME_MAX - 1}}}")
_MISSING = object()


def check_overrides(overrides: list[str], params: dict[str, Any]) -> None:
    """Raise ValueError (one line, naming the override) unless every override is allowed against `params`,
    the workspace's params.yaml."""
    check_override_sizes(overrides)
    parser = OverridesParser.create()
    for text in overrides:
        try:
            override = parser.parse_override(text)
        except (HydraException, RecursionError) as e:  # RecursionError: brackets nested hundreds deep
            raise ValueError(f"set_params {shown(text)} does not parse ({shorten(str(e).splitlines()[0])}); "
                             f"use section.key=value, e.g. train.max_steps=50") from None
        _check_override(text, override, params)


def check_override_sizes(overrides: Any) -> None:
    """Raise ValueError unless `overrides` is a list of at most MAX_OVERRIDES strings, of at most
    MAX_OVERRIDE_BYTES each and MAX_OVERRIDES_BYTES in all: cheap checks, before anything parses them."""
    if not isinstance(overrides, (list, tuple)):
        raise ValueError(f"set_params must be a list of section.key=value strings, got {type(overrides).__name__}")
    if len(overrides) > MAX_OVERRIDES:
        raise ValueError(f"set_params: {len(overrides):,} overrides (the profile's included); at most "
                         f"{MAX_OVERRIDES} are allowed")
    num_bytes = 0
    for text in overrides:
        if not isinstance(text, str):
            raise ValueError(f"set_params {shown(text)}: each override must be a string, section.key=value")
        size = len(text.encode("utf-8", "surrogatepass"))  # surrogatepass: a lone surrogate JSON may carry
        if size > MAX_OVERRIDE_BYTES:
            raise ValueError(f"set_params {shown(text)}: {size:,} bytes; one override may be at most "
                             f"{MAX_OVERRIDE_BYTES:,}")
        num_bytes += size
        if num_bytes > MAX_OVERRIDES_BYTES:
            raise ValueError(f"set_params: the overrides (the profile's included) are longer than the "
                             f"{MAX_OVERRIDES_BYTES:,} bytes allowed in all")


def _check_override(text: str, override: Any, params: dict[str, Any]) -> None:
    key = override.key_or_group
    if override.type is not OverrideType.CHANGE or override.package is not None or override.is_sweep_override():
        raise ValueError(f"set_params {shown(text)}: only a plain section.key=value is allowed "
                         f"(no +, ++, ~, @package or sweeps)")
    current = _lookup(params, key)
    if current is _MISSING:
        raise ValueError(f"set_params {shown(text)}: params.yaml has no key {shown(key)}; "
                         "only existing keys can be set")
    if isinstance(current, dict):
        raise ValueError(f"set_params {shown(text)}: {shown(key)} is a section; set its keys one by one")
    if names_location(key) or looks_like_path(current):
        raise ValueError(f"set_params {shown(text)}: {shown(key)} names a file or folder, which a run cannot "
                         f"change; edit params.yaml instead")
    value = override.value()
    if type(value) is not type(current):
        raise ValueError(f"set_params {shown(text)}: {shown(key)} must stay a {type(current).__name__} "
                         f"(now {shown(current)}), got a {type(value).__name__}")
    if looks_like_path(value):
        raise ValueError(f"set_params {shown(text)}: the value looks like a path, which a run cannot set; "
                         f"edit params.yaml instead")
    if any("${" in s for s in _strings(value)):
        raise ValueError(f"set_params {shown(text)}: interpolations (${{...}}) are not allowed in values")


def _lookup(params: dict[str, Any], dotted: str) -> Any:
    try:
        return lookup(params, dotted)
    except KeyError:
        return _MISSING


def names_location(key: str) -> bool:
    name = key.rsplit(".", 1)[-1].lower()
    return any(stem.endswith(LOCATION_SUFFIXES) or stem in LOCATION_NAMES for stem in (name, name.removesuffix("s")))


def looks_like_path(value: Any) -> bool:
    return any("/" in s or "\\" in s or s.startswith((".", "~")) for s in _strings(value))


def _strings(value: Any) -> list[str]:
    if isinstance(value, str):
        return [value]
    if isinstance(value, (list, tuple)):
        return [s for item in value for s in _strings(item)]
    if isinstance(value, dict):
        return [s for item in [*value.keys(), *value.values()] for s in _strings(item)]
    return []


def check_experiment_name(name: str, what: str = "experiment_name") -> None:
    """Raise ValueError unless `name` is safe as a folder name and a DVC experiment (git ref) name."""
    if not EXPERIMENT_NAME_RE.fullmatch(name) or ".." in name or name.endswith((".", ".lock")):
        raise ValueError(f"{what} {name!r} is not allowed: use 1-{EXPERIMENT_NAME_MAX} letters, digits, "
                         f"'.', '_' or '-', starting with a letter or digit (no '..', no trailing '.' or '.lock')")
