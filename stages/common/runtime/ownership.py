"""Which paths a stage may read and replace, checked when it starts, before any work (`check_owned_paths`,
called first in each stage's `run`): inputs that do not exist are refused, saying which stage of dvc.yaml
makes them (`missing_input`), and so are output folders that overlap the stage's inputs (local ones: a URL
cannot overlap a folder), each other, the working directory or `data/`, and existing folders the stage did
not make (their marker, stages.common.runtime.atomic). The error is a `ConfigError`: the stage command prints
it as one line.
"""
from __future__ import annotations

import glob
import itertools
import os
from collections.abc import Callable, Mapping
from pathlib import Path

from stages.common.runtime.atomic import SUCCESS_MARKER, WORK_LOCK, WORK_MARKER, check_replaceable
from stages.common.runtime.dvcfile import maker, read_dvc_stages
from stages.common.runtime.params import ConfigError, read_params
from stages.common.runtime.urls import is_url, redact


def input_exists(path: str | Path, url_exists: Callable[[str], bool] | None = None) -> bool:
    """A file or folder exists; for a glob (clean.input may be one), the folder before its first wildcard.
    A URL (clean.input may be one) is asked of `url_exists` (stages.common.runtime.storage.exists: only the
    stages that read URLs depend on the file system code); ValueError for a URL without it."""
    if is_url(path):
        if url_exists is None:
            raise ValueError(f"{redact(path)}: a URL, and no file system to ask was given")
        return url_exists(str(path))
    parts = Path(path).expanduser().parts
    if not any(glob.has_magic(p) for p in parts):
        return os.path.lexists(Path(path).expanduser())
    plain = parts[:next(i for i, p in enumerate(parts) if glob.has_magic(p))]
    return Path(*plain).is_dir() if plain else True


def missing_input(stage: str, key: str, path: str, root: Path | None = None) -> str:
    """The one-line error for a stage input that does not exist, saying which stage makes it when the
    workspace's dvc.yaml (at `root`, default the working directory: where DVC runs the stage) knows."""
    root = Path.cwd() if root is None else root
    message = f"param '{stage}.{key}': {redact(path)} does not exist"
    if is_url(path) or not (root / "dvc.yaml").is_file() or not (root / "params.yaml").is_file():
        return message
    relative = os.path.relpath(Path(path).expanduser().resolve(), root.resolve())
    made_by = maker(relative, read_dvc_stages(root), read_params(root / "params.yaml"))
    if made_by:
        return f"{message} (made by stage {made_by!r}: run it first, `dvc repro {made_by}`)"
    return f"{message} and no stage in dvc.yaml makes it"


def _folder(path: str | Path) -> Path:
    """The folder a path names, resolved; for a glob, the folder before its first wildcard."""
    parts = Path(path).expanduser().parts
    plain = list(itertools.takewhile(lambda p: not glob.has_magic(p), parts))
    return Path(*plain).resolve() if plain else Path.cwd()


def _overlap(a: Path, b: Path) -> bool:
    return a == b or a.is_relative_to(b) or b.is_relative_to(a)


def check_owned_paths(stage: str, inputs: Mapping[str, str | Path], outputs: Mapping[str, str | Path],
                      work: Mapping[str, str | Path] | None = None,
                      url_exists: Callable[[str], bool] | None = None) -> None:
    """For the start of a stage's `run`, before any work: ConfigError naming the param when an input does
    not exist, or when an output folder (`outputs`: published with `atomic_dir`; `work`: a WorkDir) is the
    working directory, contains it, is `data/`, overlaps an input or another output, or exists without
    a marker, or with one naming another stage. Empty input params ("": not used) are skipped. A stage that
    reads URLs passes `url_exists` (stages.common.runtime.storage.exists); for the others a URL input is an
    error naming the param."""
    for key, path in inputs.items():
        if str(path) and is_url(path) and url_exists is None:
            raise ConfigError(f"param '{stage}.{key}': {redact(path)} is a URL; this stage reads local paths only")
        if str(path) and not input_exists(path, url_exists):
            raise ConfigError(missing_input(stage, key, str(path)))
    work = dict(work or {})
    cwd = Path.cwd().resolve()
    sources = {key: _folder(path) for key, path in inputs.items() if str(path) and not is_url(path)}
    folders = {key: Path(path).expanduser().resolve() for key, path in {**outputs, **work}.items()}
    for key, folder in folders.items():
        name = f"'{stage}.{key}'"
        if cwd.is_relative_to(folder) or folder == cwd / "data":
            raise ConfigError(f"param {name} must be a folder of its own, not {folder}: the stage replaces it whole")
        for source_key, source in sources.items():
            if _overlap(folder, source):
                raise ConfigError(f"param {name} ({folder}) overlaps input '{stage}.{source_key}' ({source}); "
                                 f"pick a folder outside the stage's inputs")
        for other_key, other in folders.items():
            if other_key < key and _overlap(folder, other):
                raise ConfigError(f"params {name} and '{stage}.{other_key}' overlap ({folder}, {other}); "
                                 f"give each a folder of its own")
        if key in work:
            check_replaceable(folder, WORK_MARKER, f"{stage}.{key}", frozenset({WORK_LOCK}))
        else:
            check_replaceable(folder, SUCCESS_MARKER, f"{stage}.{key}", stage=stage)
