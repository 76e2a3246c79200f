"""Loading a training checkpoint runs no code from it: a folder from a shared DVC cache or remote may
have been rewritten, manifest digests included, by whoever could write there."""
from __future__ import annotations

import json
import logging
import os
import pickle
import shutil
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from stages import train
from stages.common.lm.model import CHECKPOINT_NAME, Transformer, preset
from stages.common.runtime.digest import file_digest
from stages.common.training import checkpoint
from stages.common.training.optim import OptimParams, configure_optimizer
from tests.fixtures.lm_corpus import one_torch_thread  # noqa: F401 (fixture)
from tests.stages.test_train import tiny_params

pytestmark = pytest.mark.usefixtures("one_torch_thread")

VOCAB = 64


class Payload:
    """What an attacker plants: unpickling it runs a shell command that creates `marker`."""

    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self):
        return os.system, (f"touch '{self.marker}'",)


def trained(seed: int = 0) -> tuple[Transformer, torch.optim.AdamW]:
    torch.manual_seed(seed)
    model = Transformer(preset("debug", VOCAB))
    optimizer = configure_optimizer(model, OptimParams(lr=0.01, warmup_steps=2), torch.device("cpu"))
    model(torch.randint(0, VOCAB, (2, 16))).float().mean().backward()
    optimizer.step()
    return model, optimizer


def fresh() -> tuple[Transformer, torch.optim.AdamW]:
    torch.manual_seed(1)
    model = Transformer(preset("debug", VOCAB))
    return model, configure_optimizer(model, OptimParams(lr=0.5, warmup_steps=2), torch.device("cpu"))


def replace_file(folder: Path, name: str, data: bytes) -> None:
    """Rewrite one file of a checkpoint and its manifest entry, as an attacker would, so the folder verifies."""
    (folder / name).write_bytes(data)
    manifest = json.loads((folder / checkpoint.MANIFEST).read_text())
    manifest["files"][name] = {"bytes": len(data), "xxh3_128": file_digest(folder / name)}
    (folder / checkpoint.MANIFEST).write_text(json.dumps(manifest, indent=1, sort_keys=True))


def plant_metadata(folder: Path, marker: Path) -> bytes:
    """The checkpoint's real metadata with a payload tucked inside, in place of `.metadata`."""
    metadata = checkpoint.read_metadata(folder)
    metadata.planner_data["model.extra"] = Payload(marker)
    data = pickle.dumps(metadata)
    replace_file(folder, ".metadata", data)
    return data


def test_save_then_load_restores_weights_optimizer_and_train_state(tmp_path):
    model, optimizer = trained()
    path = checkpoint.save(tmp_path, 1, model, optimizer, {"step": 1, "fingerprint": "x"}, keep=2)
    assert checkpoint.verify(path) is None
    other, other_optimizer = fresh()
    assert checkpoint.load(path, other, other_optimizer) == {"step": 1, "fingerprint": "x"}
    assert all(torch.equal(a, b) for a, b in zip(model.state_dict().values(), other.state_dict().values()))
    for group, other_group in zip(optimizer.param_groups, other_optimizer.param_groups):
        assert {k: v for k, v in group.items() if k != "params"} == {k: v for k, v in other_group.items()
                                                                      if k != "params"}
    state, other_state = optimizer.state_dict()["state"], other_optimizer.state_dict()["state"]
    assert all(torch.equal(state[i][key], other_state[i][key]) for i in state for key in state[i])


def test_checkpoints_written_into_a_hard_linked_copy_leave_the_original_intact(tmp_path):
    """The flows give an experiment's worktree the workspace's checkpoint folders as hard links
    (flows/experiment.py): safe only because this module never writes into an existing file. Overwriting a
    step, dropping old steps and clearing another run's checkpoints, all in the copy, change nothing of
    the original."""
    model, optimizer = trained()
    original, copy = tmp_path / "workspace" / "ckpt", tmp_path / "experiment" / "ckpt"
    for step in (1, 2):
        checkpoint.save(original, step, model, optimizer, {"step": step, "fingerprint": "a"}, keep=2)
    files = {p: (p.stat().st_ino, file_digest(p)) for p in original.rglob("*") if p.is_file()}
    shutil.copytree(original, copy, copy_function=os.link)
    assert all(p.stat().st_nlink == 2 for p in files)

    other, other_optimizer = trained(seed=1)
    checkpoint.save(copy, 2, other, other_optimizer, {"step": 2, "fingerprint": "b"}, keep=2)  # same step again
    checkpoint.save(copy, 3, other, other_optimizer, {"step": 3, "fingerprint": "b"}, keep=2)  # step 1 dropped
    assert checkpoint.resume(copy, "c", *fresh(), is_main=True) is None  # another run: all cleared
    assert checkpoint.list_checkpoints(copy) == []
    assert {p: (p.stat().st_ino, file_digest(p)) for p in original.rglob("*") if p.is_file()} == files
    assert all(checkpoint.verify(path) is None for path in checkpoint.list_checkpoints(original))


def test_a_planted_metadata_pickle_is_refused_and_never_run(tmp_path, caplog):
    model, optimizer = trained()
    older = checkpoint.save(tmp_path / "ckpt", 1, model, optimizer, {"step": 1}, keep=2)
    newest = checkpoint.save(tmp_path / "ckpt", 2, model, optimizer, {"step": 2}, keep=2)
    marker = tmp_path / "payload_ran"
    data = plant_metadata(newest, marker)
    pickle.loads(data)  # the payload is real: plain unpickling runs it
    assert marker.exists()
    marker.unlink()

    refusal = (f"refusing to load {newest / '.metadata'}: it references {os.system.__module__}.system, "
               "which a checkpoint never contains")
    assert checkpoint.verify(newest) == refusal  # its manifest matches: only reading the pickle tells
    with caplog.at_level(logging.WARNING, logger="refinery.checkpoint"):
        assert checkpoint.newest_valid(tmp_path / "ckpt") == older  # skipped like a damaged checkpoint
    assert refusal in caplog.text
    with pytest.raises(checkpoint.RefusedCheckpoint) as refused:
        checkpoint.load(newest, *fresh())
    assert str(refused.value) == refusal
    with pytest.raises(checkpoint.RefusedCheckpoint, match="which a checkpoint never contains"):
        checkpoint.consolidate(newest, model.config, tmp_path / "model.safetensors")
    assert not marker.exists()


@pytest.fixture(scope="module")
def two_checkpoints(tmp_path_factory, one_torch_thread) -> Path:
    """Steps 1 and 2 of run "run", to be copied by each test that damages them."""
    root = tmp_path_factory.mktemp("two_checkpoints") / "ckpt"
    model, optimizer = trained()
    for step in (1, 2):
        checkpoint.save(root, step, model, optimizer, {"step": step, "fingerprint": "run"}, keep=2)
    return root


def oversized(path: Path) -> None:
    with path.open("r+b") as f:
        f.truncate(checkpoint.MAX_MANIFEST_BYTES + 1)  # sparse: nothing is written


def without(name: str):
    def rewrite(path: Path) -> None:
        manifest = json.loads(path.read_text())
        del manifest["files"][name]
        path.write_text(json.dumps(manifest))
    return rewrite


@pytest.mark.parametrize("manifest, reason", [
    ("{}", 'expected an object with a "files" object, got {}'),
    ("[]", 'expected an object with a "files" object, got []'),
    ('{"files": 3}', 'expected an object with a "files" object, got {\'files\': 3}'),
    ('{"files": {"x": 5}}', "file 'x': expected {\"bytes\": <int>, \"xxh3_128\": <str>}, got 5"),
    ('{"files": {"x": {"bytes": "5", "xxh3_128": "0"}}}', "file 'x': expected"),
    ('{"files": {}}', "lists no .metadata"),
    (without("train_state.json"), "lists no train_state.json"),
    ('{"files": {"../step_00000001/.metadata": {"bytes": 1, "xxh3_128": "0"}}}',
     "lists '../step_00000001/.metadata', outside the checkpoint folder"),
    ('{"files": ', "not valid JSON (Expecting value: line 1 column 11 (char 10))"),
    ("[" * 200_000 + "]" * 200_000, "not valid JSON (nested too deeply)"),
    (b"\xff\xfe\x00", "not valid JSON"),
    (oversized, f"16,777,217 bytes, more than a manifest's {checkpoint.MAX_MANIFEST_BYTES:,}"),
], ids=["empty_object", "list", "files_a_number", "entry_a_number", "bytes_a_string", "no_files", "no_train_state",
        "outside", "cut_short", "deeply_nested", "not_utf8", "huge"])
def test_a_malformed_manifest_is_skipped_and_resume_falls_back(two_checkpoints, tmp_path, caplog, manifest, reason):
    root = tmp_path / "ckpt"
    shutil.copytree(two_checkpoints, root)
    older, newest = checkpoint.list_checkpoints(root)
    file = newest / checkpoint.MANIFEST
    if callable(manifest):
        manifest(file)
    else:
        file.write_bytes(manifest if isinstance(manifest, bytes) else manifest.encode())

    problem = checkpoint.verify(newest)
    assert problem.startswith("damaged manifest: ") and reason in problem and "\n" not in problem
    with caplog.at_level(logging.WARNING, logger="refinery.checkpoint"):
        state = checkpoint.resume(root, "run", *fresh(), is_main=True)
    assert state == {"step": 1, "fingerprint": "run"}  # the previous checkpoint, as for a damaged file
    assert f"skipping checkpoint {newest}: {problem}" in caplog.text
    assert checkpoint.list_checkpoints(root) == [older, newest]  # nothing cleared


@pytest.mark.parametrize("payload, reason", [
    (lambda marker: pickle.dumps({"not": "metadata"}), "it holds a dict, not DCP metadata"),
    (lambda marker: b"\x80\x04\x95", "not readable DCP metadata"),
    (lambda marker: pickle.dumps(Payload(marker), protocol=0), f"it references {os.system.__module__}.system"),
], ids=["plain_data", "truncated", "protocol_0_global"])
def test_metadata_that_is_not_dcp_metadata_is_refused(tmp_path, payload, reason):
    path = checkpoint.save(tmp_path, 1, *trained(), {"step": 1}, keep=2)
    marker = tmp_path / "payload_ran"
    replace_file(path, ".metadata", payload(marker))
    assert reason in checkpoint.verify(path)
    with pytest.raises(checkpoint.RefusedCheckpoint, match=reason):
        checkpoint.load(path, *fresh())
    assert not marker.exists()


def test_metadata_pointing_outside_the_folder_is_refused(tmp_path):
    (tmp_path / "secret.distcp").write_bytes(b"not a shard")
    path = checkpoint.save(tmp_path / "ckpt", 1, *trained(), {"step": 1}, keep=2)
    metadata = checkpoint.read_metadata(path)
    next(iter(metadata.storage_data.values())).relative_path = "../../secret.distcp"
    replace_file(path, ".metadata", pickle.dumps(metadata))
    with pytest.raises(checkpoint.RefusedCheckpoint, match="it points at '../../secret.distcp'"):
        checkpoint.load(path, *fresh())


def test_a_pickled_object_among_the_optimizer_settings_is_refused_and_never_run(tmp_path):
    """DCP stores non-tensor items (here the optimizer's param_groups) with torch.save and its default
    planner reads them back with weights_only=False; this module's planner reads them weights-only."""
    marker = tmp_path / "payload_ran"
    model, optimizer = trained()
    optimizer.param_groups[0]["note"] = Payload(marker)
    path = checkpoint.save(tmp_path, 1, model, optimizer, {"step": 1}, keep=2)
    assert not marker.exists()  # pickling does not run it
    other, other_optimizer = fresh()
    other_optimizer.param_groups[0]["note"] = "a string"  # so that the item is asked for on load
    with pytest.raises(checkpoint.RefusedCheckpoint,
                       match=r"refusing to load .*: its item optim\.param_groups\.0\.note is not plain data"):
        checkpoint.load(path, other, other_optimizer)
    assert not marker.exists()


def test_training_skips_a_tampered_checkpoint_and_ends_identical(tmp_path):
    params = tiny_params(tmp_path, max_steps=10, checkpoint={"every": 5, "keep": 3})
    train.run(params)
    reference = load_file(str(tmp_path / "model" / CHECKPOINT_NAME))
    marker = tmp_path / "payload_ran"
    plant_metadata(checkpoint.list_checkpoints(tmp_path / "ckpt")[-1], marker)

    resumed = train.run(params)  # step 10's folder is refused: resumes from step 5 and redoes 5..9
    assert resumed["resumed_from_step"] == 5
    weights = load_file(str(tmp_path / "model" / CHECKPOINT_NAME))
    assert all(torch.equal(reference[k], weights[k]) for k in reference)
    assert not marker.exists()
