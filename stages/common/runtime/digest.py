"""Content digests. `file_digest` (xxh3-128 of a file's bytes) is what manifests and cache keys record;
`fingerprint` is the one identity of a stage's resumable work: the data stages' work folders
(stages.common.runtime.executor.WorkDir) and the train, prune and qat checkpoints
(stages.common.training.checkpoint) are reused only under the same fingerprint.

A fingerprint covers
- the params, less the fields marked `param(..., placement=True)`: those say where or how the work runs
  (threads, workers, executor, output paths, progress bars, checkpoint cadence), not what it computes;
- the inputs, as cheaply as each stage can tell them apart: a path by its name, size and modification
  time (data shards, which DVC replaces rather than edits), a URL by its redacted name, size and what its
  store reports of its version (ETag, version id, modification time), bytes as they are (what the stage already
  holds or digested: a model file's `file_digest`, the token shards' manifest, weights in memory);
- the source of the stage's module and of every `stages` module it imports, directly or through
  others, package `__init__` files included. The imports are read from the source (the AST), not from
  `sys.modules`, so the fingerprint is the same whatever else the process imported, and files are named
  relative to the checkout, so it is the same wherever the checkout lies.

`code_digest` is the code part alone (the dataset cards name it); `sha256_file` is what the run report's
lineage and the model registry record of a file; `seeded_hash` / `hash_unit` fix a number to a key and a
seed, for sampling and splits that do not depend on the order of the documents.
"""
from __future__ import annotations

import ast
import dataclasses
import hashlib
import json
import os
from collections.abc import Iterable
from pathlib import Path
from types import ModuleType
from typing import Any, Literal

import xxhash

from stages.common.runtime.params import PLACEMENT


def seeded_hash(key: str, seed: int, byteorder: Literal["little", "big"]) -> int:
    """blake2b-64 of `"<seed>:<key>"` as an unsigned integer, its bytes read in `byteorder` (the callers
    differ, and each keeps its own: their outputs depend on it)."""
    return int.from_bytes(hashlib.blake2b(f"{seed}:{key}".encode(), digest_size=8).digest(), byteorder)


def hash_unit(key: str, seed: int, byteorder: Literal["little", "big"]) -> float:
    """A number in [0, 1) fixed by (seed, key): deterministic sampling that does not depend on order."""
    return seeded_hash(key, seed, byteorder) / 2**64


def sha256_file(path: str | Path) -> str:
    """SHA-256 of a file's bytes (hex), read in 1 MiB chunks."""
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while chunk := f.read(1 << 20):
            h.update(chunk)
    return h.hexdigest()


def file_digest(path: Path) -> str:
    """xxh3-128 of a file's bytes (hex), read in 4 MiB chunks."""
    h = xxhash.xxh3_128()
    with open(path, "rb") as f:
        while chunk := f.read(1 << 22):
            h.update(chunk)
    return h.hexdigest()


def fingerprint(params: Any, inputs: Iterable[str | Path | bytes], stage: ModuleType) -> str:
    """The identity of `stage`'s work on `inputs` under `params` (a dataclass): 32 hex digits. Pass the
    stage's own module (`sys.modules[__name__]`, which is `__main__` under `python -m`)."""
    h = hashlib.blake2b(digest_size=16)
    h.update(json.dumps(settings(params), sort_keys=True, default=str).encode() + b"\n")
    for item in inputs:
        if isinstance(item, bytes):
            h.update(b"bytes %d\n" % len(item) + item)
        else:  # a local file: its size and modification time (a remote one comes as bytes: storage.fingerprint_of)
            st = os.stat(item)
            h.update(f"file {item}\0{st.st_size}\0{st.st_mtime_ns}\n".encode())
    hash_code(h, stage, "code ")
    return h.hexdigest()


def code_digest(stage: ModuleType) -> tuple[str, int]:
    """(blake2b-128 of the source of `stage` and of every `stages` module it imports, named relative to the
    checkout; the number of those files). The same code gives the same digest, committed or not."""
    h = hashlib.blake2b(digest_size=16)
    num_files = hash_code(h, stage, "")
    return h.hexdigest(), num_files


def hash_code(h: Any, stage: ModuleType, tag: str) -> int:
    """Feed `h` the source of `stage` and of every `stages` module it imports, each file as
    `<tag><path relative to the checkout>\\0<bytes>\\n<source>`; returns the number of files."""
    root, files = stage_code(stage)
    for path in files:
        source = read_source(path)
        h.update(f"{tag}{path.relative_to(root).as_posix()}\0{len(source)}\n".encode() + source)
    return len(files)


def settings(params: Any) -> Any:
    """`params` as JSON-able values, nested dataclasses included, less their placement-only fields."""
    if dataclasses.is_dataclass(params) and not isinstance(params, type):
        return {f.name: settings(getattr(params, f.name)) for f in dataclasses.fields(params)
                if not f.metadata.get(PLACEMENT)}
    if isinstance(params, (list, tuple)):
        return [settings(v) for v in params]
    if isinstance(params, dict):
        return {k: settings(v) for k, v in params.items()}
    return params


def read_source(path: Path) -> bytes:
    return path.read_bytes()


def stage_code(stage: ModuleType) -> tuple[Path, list[Path]]:
    """(the checkout, the files of `stage` and of every module of its top package it imports, transitively,
    sorted). Imports anywhere in a file count, those inside functions too."""
    spec = getattr(stage, "__spec__", None)
    name = spec.name if spec is not None else stage.__name__  # `python -m stages.x` runs it as __main__
    path = Path(stage.__file__).resolve()
    root = path.parents[name.count(".") + (path.name == "__init__.py")]
    package = name.partition(".")[0]
    found: dict[str, Path] = {}
    pending = [name]
    while pending:
        module = pending.pop()
        if module in found or (file := _module_file(root, module)) is None:
            continue
        found[module] = file
        parts = module.split(".")
        pending += [".".join(parts[:i]) for i in range(1, len(parts))]  # importing a module runs its packages
        pending += [m for m in _imports(module, file) if m == package or m.startswith(package + ".")]
    return root, sorted(set(found.values()))


def _module_file(root: Path, module: str) -> Path | None:
    base = root.joinpath(*module.split("."))
    for path in (base.with_name(base.name + ".py"), base / "__init__.py"):
        if path.is_file():
            return path
    return None  # not a module: a name imported from one (`from stages.x import Params`)


def _imports(module: str, file: Path) -> list[str]:
    """Absolute names of what `file` (module `module`) imports: for `from a import b`, both `a` and `a.b`."""
    package = module if file.name == "__init__.py" else module.rpartition(".")[0]
    names: list[str] = []
    for node in ast.walk(ast.parse(read_source(file), str(file))):
        if isinstance(node, ast.Import):
            names += [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.rsplit(".", node.level - 1)[0] if node.level > 1 else package
                base = f"{anchor}.{base}" if base else anchor
            names += [base, *(f"{base}.{alias.name}" for alias in node.names)]
    return names
