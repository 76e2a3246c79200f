"""What every results file in bench/results/ records about how it was made, and how it is written.

A figure is only worth quoting with the code, machine and load it came from, so every benchmark starts its
results from `stamp()` and writes them with `write()`:

- `command`, `date`, `bench` (the script's name);
- `commit`: the checkout's HEAD, and `changed_files`: the files under the code the benchmark measures that
  differ from it (uncommitted), so a figure from a dirty tree says so;
- `machine`: CPU model, cores, the CPU flags that decide the kernels, memory, Python;
- `load`: the 1/5/15-minute load averages at the start and (written by `write`) at the end.

bench/_stale.py reads `bench` and `commit` back to list results older than the code they measure.
"""
from __future__ import annotations

import json
import os
import platform
import shlex
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, Callable

from stages.common.report.lineage import machine

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "bench" / "results"
# What a benchmark measures unless its script names its own `MEASURES`: the stages, flows and params
DEFAULT_MEASURES = ("stages", "flows", "params.yaml")


def git(*argv: str, cwd: Path = ROOT) -> str:
    return subprocess.run(["git", *argv], cwd=cwd, capture_output=True, text=True, check=True).stdout.strip()


def load_average() -> list[float]:
    return [round(x, 2) for x in os.getloadavg()]


def memory_gb() -> float | None:
    try:
        with open("/proc/meminfo", encoding="ascii") as f:
            return round(int(next(line.split()[1] for line in f if line.startswith("MemTotal:"))) * 1024 / 1e9, 1)
    except (OSError, StopIteration):
        return None


def stamp(bench: str, measures: tuple[str, ...] = DEFAULT_MEASURES) -> dict[str, Any]:
    """The provenance fields a results dict starts from (`bench`: the script's module name under bench/)."""
    cpuinfo = Path("/proc/cpuinfo")
    # -z: NUL-separated entries, names verbatim (each entry is two status letters, a space, the path)
    status = subprocess.run(["git", "status", "--porcelain", "-z", "--", *measures, f"bench/{bench}.py"], cwd=ROOT,
                            capture_output=True, text=True, check=True).stdout
    changed = [entry for entry in status.split("\0") if len(entry) > 3]
    return {"bench": bench,
            "command": " ".join([f"python -m bench.{bench}", *map(shlex.quote, sys.argv[1:])]),  # shell words
            "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
            "commit": git("rev-parse", "--short", "HEAD"),
            "changed_files": [line[3:] for line in changed],  # porcelain: two status letters and a space
            "machine": {**machine(cpuinfo.read_text(encoding="utf-8") if cpuinfo.is_file() else ""),
                        # cores: the machine's; usable_cores: those this process may run on (affinity, cgroups)
                        "usable_cores": len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else None,
                        "memory_gb": memory_gb(), "python": platform.python_version()},
            "load": {"start": load_average()}}


def header(results: dict[str, Any]) -> list[str]:
    """Markdown lines naming the command, commit, machine and load of `results` (made by `stamp`)."""
    m, load = results["machine"], results.get("load", {})
    changed = (f" (uncommitted changes: {', '.join(results['changed_files'])})"
               if results.get("changed_files") else "")
    return [f"`{results['command']}`, {results['date']}, commit {results['commit']}{changed}.", "",
            f"Machine: {m['cpu']}, {m['cores']} cores, {m.get('memory_gb')} GB memory, Python {m['python']}, "
            f"CPU flags {' '.join(m['cpu_flags']) or 'none'}; load average {load.get('start')} at the start, "
            f"{load.get('end')} at the end.", ""]


def write(results: dict[str, Any], render: Callable[[dict[str, Any]], list[str]], name: str | None = None,
          out: Path | None = None, record_end: bool = True) -> Path:
    """Record the load now as the load at the end (unless `record_end` is false: results rewritten later,
    e.g. statistics recomputed from a finished run, keep the run's), then write `results` as <out>.json and
    `render(results)` as <out>.md (default out: bench/results/<name or bench>), each to a temp file renamed
    into place. Returns the .json path."""
    if record_end:
        results.setdefault("load", {})["end"] = load_average()
    out = out or RESULTS / (name or results["bench"])
    out.parent.mkdir(parents=True, exist_ok=True)
    for suffix, text in ((".json", json.dumps(results, indent=2, ensure_ascii=False, default=str) + "\n"),
                         (".md", "\n".join(render(results)).rstrip("\n") + "\n")):
        path = out.with_name(out.name + suffix)
        tmp = path.with_name(f".{path.name}.tmp")
        tmp.write_text(text, encoding="utf-8")
        os.replace(tmp, path)
    return out.with_name(out.name + ".json")
