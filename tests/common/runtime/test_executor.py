"""The shard executor's local implementation: order, completion markers, resume, work folder identity.
(The Ray implementation runs the same code paths in tests/integration/test_ray_executor.py.)"""
import contextlib
import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import psutil
import pytest

from stages.common.runtime.atomic import is_complete
from stages.common.runtime.executor import SUMMARY, WorkDir, check_executor, map_shards

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


def test_invalid_executor_is_named():
    with pytest.raises(ValueError, match="clean.executor"):
        check_executor("clean", "dask", "")
    with pytest.raises(ValueError, match="clean.address"):
        check_executor("clean", "local", "auto")


def _sleep_in_shard(payload: tuple[int, str], folder: Path) -> dict:
    value, log_dir = payload
    (Path(log_dir) / f"pid-{value}").write_text(str(os.getpid()))
    time.sleep(120)
    return {"value": value}


DRIVER = textwrap.dedent("""
    import sys
    from stages.common.runtime.executor import WorkDir, map_shards
    from tests.common.runtime.test_executor import _init, _sleep_in_shard
    work, log_dir = sys.argv[1:]
    print("forkserver", flush=True)
    list(map_shards(_sleep_in_shard, [(0, log_dir), (1, log_dir)], WorkDir(work, "fp"), "local", "", 2, _init, (1,)))
""")


def _alive(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def test_pool_workers_end_when_the_driver_is_killed(tmp_path):
    """SIGKILL of the stage process alone: its workers (children of the forkserver) must not finish or
    start shards behind it."""
    log_dir = tmp_path / "log"
    log_dir.mkdir()
    driver = subprocess.Popen([sys.executable, "-c", DRIVER, str(tmp_path / "work"), str(log_dir)])
    try:
        for _ in range(600):
            if len(list(log_dir.glob("pid-*"))) == 2:
                break
            time.sleep(0.1)
        workers = [int(p.read_text()) for p in log_dir.glob("pid-*")]
        assert len(workers) == 2
        helpers = [p.pid for p in psutil.Process(driver.pid).children(recursive=True)]  # forkserver, tracker
        assert set(workers) <= set(helpers)
        driver.send_signal(signal.SIGKILL)
        driver.wait()
        deadline = time.monotonic() + 5
        while any(map(_alive, helpers)) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert not [pid for pid in helpers if _alive(pid)]
    finally:
        for pid in [driver.pid] + [int(p.read_text()) for p in log_dir.glob("pid-*")]:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)


LISTENING = textwrap.dedent("""
    import json, sys
    import psutil
    import ray  # imported before the stage starts Ray: ray reads its settings at import
    from stages.common.runtime.executor import init_ray
    assert init_ray("", num_cpus=1)
    ray.get(ray.remote(lambda: 1).remote())  # a worker process is up too
    me = psutil.Process()
    addresses = set()
    for p in [me, *me.children(recursive=True)]:
        try:
            addresses |= {(p.name(), c.laddr.ip) for c in p.net_connections("inet") if c.status == psutil.CONN_LISTEN}
        except psutil.Error:
            pass
    print(json.dumps(sorted(addresses)))
    ray.shutdown()
""")


@pytest.mark.integration
def test_a_local_ray_cluster_listens_on_loopback_only():
    pytest.importorskip("ray")
    env = {k: v for k, v in os.environ.items() if not k.startswith("RAY_")}
    out = subprocess.run([sys.executable, "-c", LISTENING], capture_output=True, text=True, timeout=300, env=env,
                         check=True).stdout
    addresses = json.loads(out.strip().splitlines()[-1])
    assert {name for name, _ in addresses} >= {"gcs_server", "raylet"}
    assert [(name, ip) for name, ip in addresses if ip not in ("127.0.0.1", "::ffff:127.0.0.1", "::1")] == []


def test_a_single_shard_runs_inline(tmp_path):
    """One shard: no pool (its start-up would be all it added); the initializer runs here, in this process."""
    work = WorkDir(tmp_path / "work", "fp")
    pids = [r.summary["pid"] for r in map_shards(_pid_shard, ["only"], work, "local", "", 4, _noop, ())]
    assert pids == [os.getpid()]
    work = WorkDir(tmp_path / "work2", "fp")
    pids = [r.summary["pid"] for r in map_shards(_pid_shard, ["a", "b"], work, "local", "", 2, _noop, ())]
    assert os.getpid() not in pids


def _pid_shard(payload, folder):
    return {"pid": os.getpid()}


def _noop():
    pass
