"""Training checkpoints: sharded with `torch.distributed.checkpoint` (DCP), written atomically,
verified on resume, the last K kept.

    <root>/step_00000200/
        .metadata, __<rank>_0.distcp    model + optimizer state (DCP: every rank writes its own shards;
                                        loads into any other layout, e.g. FSDP -> single process)
        rng_rank00000.safetensors ...   each rank's torch RNG states
        train_state.json                step, scheduler, loss scaler, clip history, counters, metrics history
        manifest.json                   every file above with its size and xxh3-128 digest
        _SUCCESS                        written last: a folder without it is incomplete

All ranks write into `.step_<n>.tmp`; after a barrier rank 0 writes the manifest and the marker and
renames the folder into place, so a crash at any point leaves either the complete checkpoint or none.
On resume the newest checkpoint whose files all match the manifest and whose DCP metadata passes the
allow-list below is used; a damaged, incomplete or refused one is logged and skipped.

What loading trusts. A checkpoint folder may come from a shared DVC cache or remote, and whoever can
write there can rewrite the manifest too (it is a digest, not a signature), so no file of a checkpoint
is trusted to be free of code:
- `.metadata` is a pickle (DCP's format). It is read by `read_metadata`, an unpickler that admits only
  the globals DCP's metadata consists of (its dataclasses, `torch.Size`, dtypes, layouts, a path); any
  other reference raises `RefusedCheckpoint` naming the file, before DCP reads anything else, and so
  does metadata that points DCP at files outside the folder.
- The `.distcp` shards hold tensors, which DCP reads with `torch.load(weights_only=True)`, and a few
  non-tensor items (the optimizer's param_groups: numbers, flags, betas, parameter names), which DCP's
  default planner would unpickle with `weights_only=False`; this module's planner reads them with
  `weights_only=True` too.
- RNG states are safetensors and the train state is JSON: neither format can carry code.
What stays trusted: this code and the libraries it runs (torch's weights-only unpickler, safetensors,
the json module), and the other processes of the same job (DCP exchanges its plans between ranks as
pickles over the process group). The consolidated model (`stages.common.lm.model`) is one safetensors file.

Every checkpoint carries its run's fingerprint (stages.common.runtime.digest.fingerprint: the params that
shape the weights, the input data, the code the stage imports); `resume` continues only a run with the
same fingerprint and clears the others.
The train, prune and qat stages all checkpoint and resume through this module.
"""
from __future__ import annotations

import io
import json
import logging
import pickle
import re
import reprlib
import shutil
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
import torch.distributed.checkpoint as dcp
from safetensors.torch import load_file, save_file
from torch import nn
from torch.distributed.checkpoint._traverse import set_element
from torch.distributed.checkpoint.default_planner import DefaultLoadPlanner
from torch.distributed.checkpoint.metadata import Metadata, StorageMeta
from torch.distributed.checkpoint.planner import ReadItem
from torch.distributed.checkpoint.state_dict import get_state_dict, set_state_dict

from stages.common.lm.model import TIED_OUTPUT, ModelConfig, Transformer, save_checkpoint
from stages.common.runtime.atomic import SUCCESS_MARKER
from stages.common.runtime.digest import file_digest

log = logging.getLogger("refinery.checkpoint")
STEP_DIR = re.compile(r"^step_(\d{8})$")
MANIFEST = "manifest.json"
TRAIN_STATE = "train_state.json"
# A manifest names a few files per rank (a few hundred bytes each): a larger one is not one `save` wrote,
# and is not read into memory.
MAX_MANIFEST_BYTES = 16 * 2**20


# DCP warns that it "assumes a single process" whenever no process group exists: that is the intent here.
warnings.filterwarnings("ignore", message="torch.distributed is disabled, unavailable or uninitialized")


@dataclass(frozen=True)
class CheckpointParams:
    every: int = 100  # steps between checkpoints (and one at the end); 0 = only at the end
    keep: int = 2  # newest checkpoints kept

    def __post_init__(self) -> None:
        if self.every < 0 or self.keep < 1:
            raise ValueError(f"params '*.checkpoint': every must be >= 0 and keep >= 1, got {self}")


def _barrier() -> None:
    if dist.is_initialized():
        dist.barrier()


def _rank() -> int:
    return dist.get_rank() if dist.is_initialized() else 0


def _rng_state() -> dict[str, torch.Tensor]:
    state = {"cpu": torch.get_rng_state()}
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        state["cuda"] = torch.cuda.get_rng_state()
    return state


def save(root: Path, step: int, module: nn.Module, optimizer: torch.optim.Optimizer, train_state: dict[str, Any],
         keep: int) -> Path:
    """Collective: every rank calls it. Returns the checkpoint folder."""
    final, tmp = root / f"step_{step:08d}", root / f".step_{step:08d}.tmp"
    if _rank() == 0:
        shutil.rmtree(tmp, ignore_errors=True)
        tmp.mkdir(parents=True)
    _barrier()
    model_state, optim_state = get_state_dict(module, optimizer)
    dcp.save({"model": model_state, "optim": optim_state}, checkpoint_id=tmp, no_dist=not dist.is_initialized())
    save_file(_rng_state(), str(tmp / f"rng_rank{_rank():05d}.safetensors"))
    _barrier()
    if _rank() == 0:
        (tmp / TRAIN_STATE).write_text(json.dumps(train_state, sort_keys=True))
        files = sorted(p for p in tmp.rglob("*") if p.is_file())
        manifest = {str(p.relative_to(tmp)): {"bytes": p.stat().st_size, "xxh3_128": file_digest(p)} for p in files}
        (tmp / MANIFEST).write_text(json.dumps({"step": step, "files": manifest}, indent=1, sort_keys=True))
        (tmp / SUCCESS_MARKER).write_text("")
        shutil.rmtree(final, ignore_errors=True)
        tmp.rename(final)
        for old in list_checkpoints(root)[:-keep] if keep > 0 else []:
            shutil.rmtree(old, ignore_errors=True)
        log.info("checkpoint step %d -> %s", step, final)
    _barrier()
    return final


def list_checkpoints(root: Path) -> list[Path]:
    """Checkpoint folders under `root`, oldest first (complete or not)."""
    if not root.is_dir():
        return []
    return sorted(p for p in root.iterdir() if p.is_dir() and STEP_DIR.match(p.name))


def read_manifest(path: Path) -> dict[str, tuple[int, str]]:
    """The files the manifest of checkpoint folder `path` lists: name -> (bytes, xxh3-128). Raises
    ValueError saying what is wrong with a manifest that is not one `save` writes (cut short, rewritten,
    another program's), so that `verify` skips the folder like any other damaged checkpoint."""
    file = path / MANIFEST
    num_bytes = file.stat().st_size
    if num_bytes > MAX_MANIFEST_BYTES:
        raise ValueError(f"{num_bytes:,} bytes, more than a manifest's {MAX_MANIFEST_BYTES:,}")
    try:
        manifest = json.loads(file.read_bytes())
    except RecursionError:  # json recurses once per level of nesting
        raise ValueError("not valid JSON (nested too deeply)") from None
    except ValueError as e:
        raise ValueError(f"not valid JSON ({e})") from None
    files = manifest.get("files") if isinstance(manifest, dict) else None
    if not isinstance(files, dict):
        raise ValueError(f'expected an object with a "files" object, got {reprlib.repr(manifest)}')
    listed: dict[str, tuple[int, str]] = {}
    for name, entry in files.items():
        parts = Path(name).parts
        if not parts or Path(name).is_absolute() or ".." in parts:
            raise ValueError(f"lists {name!r}, outside the checkpoint folder")
        if not (isinstance(entry, dict) and type(entry.get("bytes")) is int and isinstance(entry.get("xxh3_128"), str)):
            raise ValueError(f'file {name!r}: expected {{"bytes": <int>, "xxh3_128": <str>}}, '
                             f"got {reprlib.repr(entry)}")
        listed[name] = (entry["bytes"], entry["xxh3_128"])
    missing = [name for name in (".metadata", TRAIN_STATE) if name not in listed]  # what resuming reads first
    if missing:
        raise ValueError(f"lists no {missing[0]}")
    return listed


def verify(path: Path) -> str | None:
    """None when the checkpoint is complete and intact, else what is wrong with it."""
    if not (path / SUCCESS_MARKER).is_file():
        return "incomplete (no _SUCCESS marker)"
    try:
        files = read_manifest(path)
    except (OSError, ValueError) as e:
        return f"damaged manifest: {' '.join(str(e).split())}"
    for name, (num_bytes, digest) in files.items():
        file = path / name
        if not file.is_file():
            return f"missing file {name}"
        if file.stat().st_size != num_bytes or file_digest(file) != digest:
            return f"damaged file {name} (size or digest differs from the manifest)"
    try:
        read_metadata(path)  # the manifest proves nothing about a folder whose manifest was rewritten too
    except (OSError, RefusedCheckpoint) as e:
        return str(e)
    return None


def newest_valid(root: Path) -> Path | None:
    """Rank 0 checks, newest first; every rank gets the same answer."""
    choice: list[str | None] = [None]
    if _rank() == 0:
        for path in reversed(list_checkpoints(root)):
            problem = verify(path)
            if problem is None:
                choice[0] = str(path)
                break
            log.warning("skipping checkpoint %s: %s", path, problem)
    if dist.is_initialized():
        dist.broadcast_object_list(choice, src=0)  # a list of one str: plain data, no arbitrary objects
    return Path(choice[0]) if choice[0] else None


class RefusedCheckpoint(pickle.UnpicklingError):
    """A checkpoint file that would need more than plain checkpoint data to load (tampered, or not ours)."""


# Every global a DCP `.metadata` pickle of this module's checkpoints references, listed from real
# checkpoints (train, prune and QAT models; one process, DDP, FSDP2, TP and PP under torchrun) by an
# unpickler that records what it is asked to import. Each one, called with any arguments, only builds
# a value: a dataclass, an enum member, a tuple of ints, a path object, a layout looked up by name.
_METADATA_GLOBALS = frozenset({
    *(("torch.distributed.checkpoint.metadata", name) for name in (
        "Metadata", "StorageMeta", "MetadataIndex", "TensorStorageMetadata", "BytesStorageMetadata",
        "ChunkStorageMetadata", "TensorProperties", "_MEM_FORMAT_ENCODING")),
    ("torch.distributed.checkpoint.filesystem", "_StorageInfo"),
    ("torch", "Size"),
    ("torch.serialization", "_get_layout"),  # how torch pickles a torch.layout
    ("pathlib", "PosixPath"),  # StorageMeta.checkpoint_id: the folder it was saved to
    *(("torch", name) for name, value in vars(torch).items() if isinstance(value, torch.dtype)),
})


class _MetadataUnpickler(pickle.Unpickler):
    def __init__(self, file: io.BufferedIOBase, path: Path) -> None:
        super().__init__(file)
        self.path = path

    def find_class(self, module: str, name: str) -> Any:
        # The only way a pickle reaches a callable is through here (GLOBAL, STACK_GLOBAL and the
        # copyreg extension codes all ask find_class), so nothing outside the allow-list can run.
        if (module, name) not in _METADATA_GLOBALS:
            raise RefusedCheckpoint(f"refusing to load {self.path}: it references {module}.{name}, "
                                    "which a checkpoint never contains")
        return super().find_class(module, name)


def read_metadata(path: Path) -> Metadata:
    """The DCP metadata of checkpoint folder `path` (what `FileSystemReader.read_metadata` returns, but
    unpickled through the allow-list above): raises `RefusedCheckpoint` naming the file if it is
    anything else, or if it points DCP at data outside the folder."""
    file = path / ".metadata"
    with file.open("rb") as f:
        try:
            metadata = _MetadataUnpickler(f, file).load()
        except RefusedCheckpoint:
            raise
        except Exception as e:  # a truncated or garbled pickle fails in many ways; all mean the same
            raise RefusedCheckpoint(f"refusing to load {file}: not readable DCP metadata ({e!r})") from e
    if not isinstance(metadata, Metadata):
        raise RefusedCheckpoint(f"refusing to load {file}: it holds a {type(metadata).__name__}, not DCP metadata")
    for info in (metadata.storage_data or {}).values():
        name = getattr(info, "relative_path", None)
        if not isinstance(name, str) or name != Path(name).name or name.startswith("."):
            raise RefusedCheckpoint(f"refusing to load {file}: it points at {name!r}, outside the checkpoint's shards")
    return metadata


class _Reader(dcp.FileSystemReader):
    """DCP's file reader with its one pickle, `.metadata`, read through `read_metadata`. (No `rank`
    keyword: this module never writes per-rank metadata, so DCP has no fallback file to try.)"""

    def read_metadata(self) -> Metadata:
        metadata = read_metadata(Path(self.path))
        if metadata.storage_meta is None:
            metadata.storage_meta = StorageMeta()
        metadata.storage_meta.load_id = self.load_id
        return metadata


class _LoadPlanner(DefaultLoadPlanner):
    """DCP's default planner, except that non-tensor items (the optimizer's param_groups: floats, bools,
    a tuple of betas, parameter names) are read with torch's weights-only unpickler, which builds only
    plain containers, numbers, strings and tensors. DefaultLoadPlanner uses `weights_only=False`."""

    def __init__(self, path: Path) -> None:
        super().__init__()
        self.path = path

    def load_bytes(self, read_item: ReadItem, value: io.BytesIO) -> None:
        fqn = read_item.dest_index.fqn
        try:
            obj = torch.load(value, weights_only=True)
        except pickle.UnpicklingError as e:
            raise RefusedCheckpoint(f"refusing to load {self.path}: its item {fqn} is not plain data "
                                    f"({str(e).splitlines()[0]})") from e
        if self.flatten_state_dict:
            set_element(self.original_state_dict, self.mappings[fqn], obj)
        else:
            self.state_dict[fqn] = obj


def _dcp_load(state: dict[str, Any], path: Path, no_dist: bool) -> None:
    read_metadata(path)  # refuses a tampered folder with its own error (dcp.load would wrap it in another)
    try:
        dcp.load(state, storage_reader=_Reader(path), planner=_LoadPlanner(path), no_dist=no_dist)
    except dcp.CheckpointException as e:  # DCP gathers every rank's error into one; a refusal is the headline
        refused = [error for error, _ in e.failures.values() if isinstance(error, RefusedCheckpoint)]
        if refused:
            raise refused[0] from e
        raise


def load(path: Path, module: nn.Module, optimizer: torch.optim.Optimizer) -> dict[str, Any]:
    """Collective: load model, optimizer and this rank's RNG state; returns the train state."""
    model_state, optim_state = get_state_dict(module, optimizer)  # initialises empty optimizer state
    state = {"model": model_state, "optim": optim_state}
    _dcp_load(state, path, no_dist=not dist.is_initialized())
    set_state_dict(module, optimizer, model_state_dict=state["model"], optim_state_dict=state["optim"])
    rng_file = path / f"rng_rank{_rank():05d}.safetensors"
    if rng_file.is_file():
        rng = load_file(str(rng_file))
        torch.set_rng_state(rng["cpu"])
        if "cuda" in rng and torch.cuda.is_available():
            torch.cuda.set_rng_state(rng["cuda"])
    else:
        log.warning("%s: no RNG state for rank %d (saved with fewer ranks); RNG not restored", path, _rank())
    return json.loads((path / TRAIN_STATE).read_text())


def resume(root: Path, run_id: str, module: nn.Module, optimizer: torch.optim.Optimizer,
           is_main: bool) -> dict[str, Any] | None:
    """Collective. Load the newest valid checkpoint under `root` if it belongs to run `run_id` and return
    its train state; otherwise clear `root`'s checkpoints (another configuration or code) and return None."""
    latest = newest_valid(root)
    if latest is not None:
        saved_id = json.loads((latest / TRAIN_STATE).read_text()).get("fingerprint")
        if saved_id == run_id:
            state = load(latest, module, optimizer)
            if is_main:
                log.info("resumed from %s (step %d)", latest, state["step"])
            return state
        if is_main:
            log.warning("checkpoints in %s belong to another configuration or code (%s, now %s): starting afresh",
                        root, saved_id, run_id)
    if is_main and root.exists():
        for old in list_checkpoints(root):
            shutil.rmtree(old)
    _barrier()
    return None


def consolidate(path: Path, config: ModelConfig, out_file: Path) -> Transformer:
    """Rebuild the full model from a (sharded) checkpoint on this process alone and write it as one
    safetensors file (`stages.common.lm.model` format)."""
    model = Transformer(config)
    saved = {key.removeprefix("model.") for key in read_metadata(path).state_dict_metadata if key.startswith("model.")}
    wanted = {k: v for k, v in model.state_dict().items() if k in saved}
    missing = set(model.state_dict()) - saved - ({TIED_OUTPUT} if config.tie_embeddings else set())
    if missing:
        raise ValueError(f"{path}: checkpoint lacks {sorted(missing)[:5]}")
    state = {"model": wanted}
    _dcp_load(state, path, no_dist=True)
    model.load_state_dict(state["model"], strict=False)
    save_checkpoint(model, out_file)
    return model
