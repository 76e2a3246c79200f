"""SIGKILL of a data stage's whole process tree at seeded random moments during its work: each output
folder is then either complete (with its marker) or absent, and a rerun publishes the same bytes as an
uninterrupted run. A kill counts only when it lands while the stage runs and after that run has written
to its work folder (its progress); a run that ends first is run again. The stages run as DVC runs them
(`python -m stages.<name> --params ...`), on tiny inputs."""
from __future__ import annotations

import dataclasses
import hashlib
import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from stages.common.runtime.atomic import SUCCESS_MARKER
from tests.fixtures.lm_corpus import one_torch_thread, synthetic_docs, write_docs  # noqa: F401 (fixture)
from tests.stages.test_clean import corpus as clean_corpus
from tests.stages.test_clean import make_params as clean_params
from tests.stages.test_perplexity import make_params as ppl_params
from tests.stages.test_semantic_filter import pipeline  # noqa: F401 (fixture: clean -> embed -> head on fixtures)

pytestmark = pytest.mark.integration
ROOT = Path(__file__).resolve().parents[2]
NUM_KILLS = 3


def tree(folders: list[Path]) -> dict[str, str]:
    """Every file under the folders: relative path -> digest of its bytes."""
    return {f"{folder.name}/{p.relative_to(folder)}": hashlib.sha256(p.read_bytes()).hexdigest()
            for folder in folders for p in sorted(folder.rglob("*")) if p.is_file()}


def start(stage: str, params_file: Path) -> subprocess.Popen:
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(ROOT)}
    return subprocess.Popen([sys.executable, "-m", f"stages.{stage}", "--params", str(params_file)], cwd=ROOT,
                            env=env, start_new_session=True, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)


def write_params(path: Path, stage: str, params) -> Path:
    def plain(value):
        if isinstance(value, dict):
            return {k: plain(v) for k, v in value.items()}
        return list(map(plain, value)) if isinstance(value, (list, tuple)) else value

    path.write_text(yaml.safe_dump({stage: plain(dataclasses.asdict(params))}, allow_unicode=True))
    return path


def progress(work: Path) -> dict[str, tuple[int, int]] | None:
    """What the work folder holds (path -> size, mtime); None while it does not exist."""
    if not work.exists():
        return None
    found = {}
    for folder, _, files in os.walk(work):  # a folder removed while walked is skipped, not an error
        for name in files:
            path = os.path.join(folder, name)
            try:
                stat = os.stat(path)
            except FileNotFoundError:  # renamed or removed while listed
                continue
            found[path] = (stat.st_size, stat.st_mtime_ns)
    return found


def wait_for_progress(proc: subprocess.Popen, work: Path, before, timeout: float) -> float | None:
    """The moment the running stage has changed its work folder from `before`; None if it ended first."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        now = progress(work)
        if now is not None and now != before:
            return time.monotonic()
        if proc.poll() is not None:
            return None
        time.sleep(0.02)
    pytest.fail(f"{work}: no progress in {timeout:.0f} s")


def kill_anywhere(stage: str, params, outputs: list[Path], work: Path, tmp_path: Path, seed: int) -> None:
    """A reference run in `reference/`, then runs killed at random moments of their work until NUM_KILLS
    kills landed, then a full rerun."""
    reference_params = dataclasses.replace(params, **{
        k: str(tmp_path / "reference" / Path(v).name) for k, v in dataclasses.asdict(params).items()
        if isinstance(v, str) and Path(v).is_relative_to(tmp_path / "run")})
    reference_work = tmp_path / "reference" / work.name
    proc = start(stage, write_params(tmp_path / "reference.yaml", stage, reference_params))
    work_began = wait_for_progress(proc, reference_work, None, 300)
    assert work_began is not None, f"{stage}: the reference run never wrote to its work folder"
    assert proc.wait(timeout=300) == 0, proc.stderr.read().decode()[-3000:]
    work_s = time.monotonic() - work_began  # how long the reference run worked
    reference = tree([tmp_path / "reference" / out.name for out in outputs])

    params_file = write_params(tmp_path / "run.yaml", stage, params)
    rng = random.Random(seed)
    landed = runs = 0
    while landed < NUM_KILLS:
        runs += 1
        assert runs <= 4 * NUM_KILLS, f"{stage}: {runs - 1} runs, only {landed} killed during their work"
        before = progress(work)
        proc = start(stage, params_file)
        if wait_for_progress(proc, work, before, 300) is None:  # it ended before writing anything
            assert proc.wait() == 0, proc.stderr.read().decode()[-3000:]
            continue
        time.sleep(rng.uniform(0, work_s))
        working = proc.poll() is None and progress(work) is not None
        try:
            os.killpg(proc.pid, signal.SIGKILL)  # the stage, its pool workers and forkserver
        except ProcessLookupError:  # it ended (and poll() reaped it) in between
            pass
        if proc.wait() != -signal.SIGKILL:  # it had finished: not a kill during its work
            assert proc.returncode == 0, proc.stderr.read().decode()[-3000:]
            continue
        landed += working
        for out in outputs:
            assert not out.exists() or (out / SUCCESS_MARKER).is_file(), f"{out}: half-published"
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            try:
                os.killpg(proc.pid, 0)
            except ProcessLookupError:
                break
            time.sleep(0.1)
        else:
            pytest.fail(f"{stage}: processes of the killed run still alive")

    proc = start(stage, params_file)
    assert proc.wait(timeout=300) == 0, proc.stderr.read().decode()[-3000:]
    assert tree(outputs) == reference
    assert not work.exists()
    leftovers = [p.name for out in outputs for p in out.parent.iterdir() if p.name.startswith(f".{out.name}.")]
    assert leftovers == []


def test_clean_killed_anywhere(tmp_path):
    raw = clean_corpus(tmp_path)
    params = clean_params(tmp_path / "run", raw, num_workers=2, batch_size=2)
    kill_anywhere("clean", params, [tmp_path / "run" / "out"], tmp_path / "run" / "work", tmp_path, seed=1)


def test_semantic_filter_killed_anywhere(tmp_path, pipeline):
    run = tmp_path / "run"
    params = dataclasses.replace(pipeline, out_dir=str(run / "out"), metrics_path=str(run / "filter.json"),
                                 detail_path=str(run / "filter.detail.json"),
                                 work_dir=str(run / "work"), batch_size=1, num_workers=2)
    kill_anywhere("semantic_filter", params, [run / "out"], run / "work", tmp_path, seed=3)


def test_perplexity_killed_anywhere(tmp_path, one_torch_thread):
    from stages import tokenizer

    docs_dir = write_docs(tmp_path / "docs", synthetic_docs(160, seed=3, noisy_share=0.25), rows_per_part=80)
    tokenizer.run(tokenizer.Params(input_dir=str(docs_dir), out_dir=str(tmp_path / "tok"),
                                   metrics_path=str(tmp_path / "tok.json"),
                                   detail_path=str(tmp_path / "tok.detail.json"), vocab_size=300))
    params = ppl_params(tmp_path, (docs_dir, tmp_path / "tok", None), device="cpu", num_threads=1,
                        read_batch_docs=32)
    run = tmp_path / "run"
    kill_anywhere("perplexity", params, [run / "out", run / "model"], run / "work", tmp_path, seed=2)
