"""Where a report's run came from: the git revision (and whether tracked files differ from it), the digest of
the params file, the digests dvc.lock records for the report's inputs, library versions and the machine.
Nothing here imports the libraries it names (versions come from their installed metadata)."""
from __future__ import annotations

import importlib.metadata
import os
import platform
import subprocess
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import yaml

from stages.common.runtime.digest import sha256_file

LIBRARIES = ("torch", "onnxruntime", "pyarrow", "prefect", "dvc", "langdetect", "transformers", "tokenizers")
CPU_FLAGS = ("avx2", "avx512f", "avx512_vnni", "avx_vnni", "avx512_bf16", "amx_bf16", "amx_int8")


def git_revision(cwd: str | Path = ".") -> dict[str, Any]:
    """HEAD's commit and whether tracked files differ from it; `None` outside a git checkout."""
    head = subprocess.run(["git", "rev-parse", "HEAD"], cwd=cwd, capture_output=True, text=True, check=False)
    if head.returncode:
        return {"commit": None, "dirty": None}
    status = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=cwd, capture_output=True,
                            text=True, check=True)
    return {"commit": head.stdout.strip(), "dirty": bool(status.stdout.strip())}


def overlaps(a: Path, b: Path) -> bool:
    return a == b or a in b.parents or b in a.parents


def lock_digests(lock: dict[str, Any], inputs: Sequence[str], lock_dir: str | Path = ".") -> list[dict[str, str]]:
    """For each input path, the outputs dvc.lock records that are it, hold it or lie inside it: the stage that
    wrote each and its digest. Lock paths are relative to `lock_dir` (the lock file's folder), inputs to the
    working directory."""
    base = Path(lock_dir).resolve()
    outs = [(stage, out) for stage, entry in (lock.get("stages") or {}).items() for out in entry.get("outs", [])]
    rows = []
    for path in inputs:
        resolved = Path(os.path.abspath(path))
        for stage, out in outs:
            if overlaps(resolved, Path(os.path.normpath(base / out["path"]))):
                rows.append({"input": path, "out": out["path"], "stage": stage,
                             "digest": str(out.get("md5") or out.get("hash") or "")})
    return rows


def versions(names: Sequence[str] = LIBRARIES) -> dict[str, str]:
    out = {"python": platform.python_version()}
    for name in names:
        try:
            out[name] = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            out[name] = "not installed"
    return out


def machine(cpuinfo: str) -> dict[str, Any]:
    """Platform, CPU model, cores and the vector / matrix extensions that decide the kernels (the text of
    /proc/cpuinfo, empty where there is none)."""
    model = next((line.split(":", 1)[1].strip() for line in cpuinfo.splitlines() if line.startswith("model name")),
                 platform.processor() or platform.machine())
    flags = next((set(line.split(":", 1)[1].split()) for line in cpuinfo.splitlines() if line.startswith("flags")),
                 set())
    return {"platform": platform.platform(), "cpu": model, "cores": os.cpu_count(),
            "cpu_flags": [f for f in CPU_FLAGS if f in flags]}


def lineage(params_path: str | Path, lock_path: str | Path, inputs: Sequence[str]) -> dict[str, Any]:
    lock_file = Path(lock_path)
    # libyaml's loader when PyYAML has it: a pipeline's dvc.lock takes the pure-Python one most of a second
    loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
    lock = yaml.load(lock_file.read_text(encoding="utf-8"), Loader=loader) if lock_file.is_file() else None
    cpuinfo = Path("/proc/cpuinfo")
    return {"git": git_revision(), "params_path": str(params_path), "params_sha256": sha256_file(params_path),
            "lock_path": str(lock_path), "lock_found": lock is not None, "stages": list((lock or {}).get("stages") or {}),
            "inputs": lock_digests(lock or {}, inputs, lock_file.parent), "versions": versions(),
            "machine": machine(cpuinfo.read_text(encoding="utf-8") if cpuinfo.is_file() else "")}
