"""The shard executor's local implementation: order, completion markers, resume, fingerprints.
(The Ray implementation runs the same code paths in tests/integration/test_ray_executor.py.)"""
import dataclasses
import json
from pathlib import Path

import pytest

from stages.common.atomic import is_complete
from stages.common.executor import SUMMARY, WorkDir, check_executor, fingerprint, map_shards

_offset = 0


def _init(offset: int) -> None:
    global _offset
    _offset = offset


def _square(payload: tuple[int, str], folder: Path) -> dict:
    """Writes the shard's result; logs that it ran; the payload -1 fails (a lost shard)."""
    value, log_dir = payload
    if value < 0:
        raise RuntimeError("worker lost")
    (Path(log_dir) / f"ran-{value}").write_text("")
    (folder / "value.json").write_text(json.dumps(value * value + _offset))
    return {"value": value}


def run(work: WorkDir, values: list[int], log_dir: Path, num_workers: int = 1) -> list:
    log_dir.mkdir(exist_ok=True)
    payloads = [(v, str(log_dir)) for v in values]
    return list(map_shards(_square, payloads, work, "local", "", num_workers, _init, (1,)))


@pytest.mark.parametrize("num_workers", [1, 2])
def test_results_in_order_with_markers(tmp_path, num_workers):
    work = WorkDir(tmp_path / "work", "fp")
    results = run(work, list(range(7)), tmp_path / "log", num_workers)
    assert [r.index for r in results] == list(range(7))
    assert [r.summary for r in results] == [{"value": v} for v in range(7)]
    assert [json.loads((r.folder / "value.json").read_text()) for r in results] == [v * v + 1 for v in range(7)]
    assert all(is_complete(r.folder) and (r.folder / SUMMARY).is_file() and not r.resumed for r in results)
    assert not [p for p in work.path.iterdir() if p.name.startswith(".")]  # no temp folder left


def test_rerun_redoes_only_unfinished_shards(tmp_path):
    work = WorkDir(tmp_path / "work", "fp")
    with pytest.raises(RuntimeError, match="worker lost"):  # shard 3 fails: 0-2 are finished
        run(work, [0, 1, 2, -1, 4, 5], tmp_path / "log1")
    assert [is_complete(work.shard(i)) for i in range(6)] == [True, True, True, False, False, False]
    results = run(WorkDir(tmp_path / "work", "fp"), [0, 1, 2, 3, 4, 5], tmp_path / "log2", num_workers=2)
    assert sorted(p.name for p in (tmp_path / "log2").iterdir()) == ["ran-3", "ran-4", "ran-5"]
    assert [r.resumed for r in results] == [True] * 3 + [False] * 3
    assert [r.summary["value"] for r in results] == list(range(6))


def test_other_settings_clear_the_work_folder(tmp_path):
    run(WorkDir(tmp_path / "work", "fp1"), [0, 1], tmp_path / "log1")
    results = run(WorkDir(tmp_path / "work", "fp2"), [0, 1], tmp_path / "log2")
    assert not any(r.resumed for r in results)
    assert len(list((tmp_path / "log2").iterdir())) == 2


@dataclasses.dataclass(frozen=True)
class P:
    threshold: float = 0.5
    executor: str = "local"
    address: str = ""
    num_workers: int = 0


def test_fingerprint_follows_settings_and_input_not_placement(tmp_path):
    data = tmp_path / "in.jsonl"
    data.write_text("a\n")
    base = fingerprint(P(), [data])
    assert fingerprint(P(executor="ray", address="auto", num_workers=8), [data]) == base
    assert fingerprint(P(threshold=0.6), [data]) != base
    data.write_text("ab\n")
    assert fingerprint(P(), [data]) != base
    assert fingerprint(P(), [data], extra=b"weights") != fingerprint(P(), [data])


def test_invalid_executor_is_named():
    with pytest.raises(ValueError, match="clean.executor"):
        check_executor("clean", "dask", "")
    with pytest.raises(ValueError, match="clean.address"):
        check_executor("clean", "local", "auto")
