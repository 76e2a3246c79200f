"""The word lists, templates and HTML skeletons of the demo corpus, read from the data files beside
this module (`data/*.yaml`, `data/html/*.html`) into one namespace, `T`: each YAML table by its name in
upper case (`en_nouns` -> `T.EN_NOUNS`), each HTML skeleton by its file name (`page.html` -> `T.PAGE`).
YAML lists become tuples, so the tables are immutable and compare equal to the Python literals they
replaced; the corpus depends on their exact text and order.
"""
from __future__ import annotations

import string
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import yaml

DATA_DIR = Path(__file__).parent / "data"


def _frozen(value: Any) -> Any:
    """YAML lists as tuples, recursively (inside mappings too)."""
    if isinstance(value, list):
        return tuple(_frozen(v) for v in value)
    if isinstance(value, dict):
        return {k: _frozen(v) for k, v in value.items()}
    return value


def load(name: str) -> dict[str, Any]:
    """The tables of one data file, by their lower-case names."""
    data = yaml.safe_load((DATA_DIR / name).read_bytes())
    if not isinstance(data, dict):
        raise ValueError(f"{DATA_DIR / name}: top level must be a mapping")
    return {key: _frozen(value) for key, value in data.items()}


def html_template(name: str) -> string.Template:
    """An HTML skeleton with $placeholders, byte for byte (no newline translation)."""
    return string.Template((DATA_DIR / "html" / name).read_bytes().decode("utf-8"))


def load_all() -> SimpleNamespace:
    """Every table of every data file and every HTML skeleton, by upper-case name (see the module docstring)."""
    tables: dict[str, Any] = {}
    for path in sorted(DATA_DIR.glob("*.yaml")):
        for key, value in load(path.name).items():
            if key.upper() in tables:
                raise ValueError(f"{path}: table '{key}' is also in another data file")
            tables[key.upper()] = value
    for path in sorted((DATA_DIR / "html").glob("*.html")):
        tables[path.stem.upper()] = html_template(path.name)
    return SimpleNamespace(**tables)


T = load_all()
