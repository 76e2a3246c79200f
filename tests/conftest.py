from __future__ import annotations

import gzip
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent  # the venv's bin: dvc, and the `python` dvc.yaml commands run
SHARED_DEVSET = ROOT.parent / "shared" / "devset"


def pytest_report_header(config) -> str:
    """Which integer kernels onnxruntime runs INT8 models with here: the INT8 tests' results must not depend
    on it (they also run the models on an emulated AVX2 CPU without VNNI)."""
    from stages.common.compress.onnx_runtime import cpu_flags, int8_kernels
    flags = sorted(f for f in cpu_flags() if f.startswith(("avx2", "avx512f", "avx512bw", "avx512_vnni", "avx_vnni",
                                                           "amx_int8")))
    return f"cpu: {' '.join(flags) or 'no AVX2'}; onnxruntime int8 kernels: {int8_kernels()}"


# Set by .ci/run: what the README claims is checked on real tools and data, so a missing one (qemu-user,
# Chromium, ../shared/devset) fails the run there instead of skipping its tests.
REQUIRE_ALL_ENV = "REFINERY_REQUIRE_ALL"


def skip_or_fail(what: str) -> None:
    """Skip the test for want of `what` (a tool or data a user's clone may lack; pytest's summary lists the
    reason), or fail it under REFINERY_REQUIRE_ALL=1, where nothing the README claims may go unchecked."""
    if os.environ.get(REQUIRE_ALL_ENV) == "1":
        pytest.fail(f"{what} ({REQUIRE_ALL_ENV}=1: required, not skipped)")
    pytest.skip(f"{what}; not checked here ({REQUIRE_ALL_ENV}=1, as .ci/run sets, makes this a failure)")


@pytest.fixture
def devset_dir() -> Path:
    """The labelled devset in ../shared (real documents); absent in a user's fresh clone, so tests using it
    skip there (and fail under REFINERY_REQUIRE_ALL=1)."""
    if not (SHARED_DEVSET / "devset.jsonl").is_file():
        skip_or_fail("../shared/devset is not present")
    return SHARED_DEVSET


@pytest.fixture(scope="session")
def devset_texts() -> list[str]:
    """The raw texts of the devset (real documents: man pages, HTML, fortunes, in 12 languages) and of its
    Chinese boilerplate file, for checking fast paths against the code they replace; skips without them."""
    if not (SHARED_DEVSET / "devset.jsonl").is_file():
        skip_or_fail("../shared/devset is not present")
    return [json.loads(line)["text"] for name in ("devset.jsonl", "devset_zh_boilerplate.jsonl")
            for line in (SHARED_DEVSET / name).open(encoding="utf-8")]


def write_jsonl(path: Path, records: list, compress: bool = False) -> Path:
    """Write records (dicts become JSON, bytes are written raw) one per line."""
    lines = [r if isinstance(r, bytes) else json.dumps(r, ensure_ascii=False).encode() for r in records]
    data = b"\n".join(lines) + b"\n"
    path.parent.mkdir(parents=True, exist_ok=True)
    if compress:
        with gzip.open(path, "wb") as f:
            f.write(data)
    else:
        path.write_bytes(data)
    return path


@pytest.fixture
def repo_copy(tmp_path: Path) -> Path:
    """A copy of the project's pipeline files (code, dvc.yaml, params.yaml, the curriculum study the report
    depends on) in a fresh folder."""
    dst = tmp_path / "repo"
    dst.mkdir()
    for name in ("stages", "dvc.yaml", "params.yaml", "requirements.lock", "bench/results/curriculum.json"):
        src = ROOT / name
        if src.is_dir():
            shutil.copytree(src, dst / name, ignore=shutil.ignore_patterns("__pycache__"))
        else:
            (dst / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src, dst / name)
    return dst


def sh(args: list[str], cwd: Path, timeout: int = 600) -> str:
    """Run a real command with the venv first on PATH; fail the test with its output if it fails."""
    env = {**os.environ, "PATH": f"{BIN}{os.pathsep}{os.environ['PATH']}", "DVC_NO_ANALYTICS": "1"}
    proc = subprocess.run(args, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)
    assert proc.returncode == 0, f"{' '.join(args)} failed:\n{proc.stdout}\n{proc.stderr}"
    return proc.stdout + proc.stderr


def init_dvc_repo(repo: Path) -> Path:
    """Make `repo` a fresh git + DVC repository with analytics off."""
    sh(["git", "init", "--quiet"], repo)
    sh([str(BIN / "dvc"), "init", "--quiet"], repo)
    sh([str(BIN / "dvc"), "config", "core.analytics", "false"], repo)
    return repo
