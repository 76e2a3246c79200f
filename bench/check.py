"""`refinery check` on the demo workspace: wall time of the whole command (params, inputs and the data it
reads: the first records of every source, the labels, the projections), as a user runs it.

    python -m bench.check [--runs 3]

Needs the demo corpus (`make demo`, or `dvc repro demo_corpus`); writes bench/results/check.{json,md}.
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
TARGET_S = 10.0  # what a user waits for before `dvc repro`, on 2 cores


def cpu_flags() -> str:
    out = subprocess.run(["grep", "-o", r"avx512[a-z_]*\|avx2\|amx_int8\|avx_vnni", "/proc/cpuinfo"],
                         capture_output=True, text=True)
    return " ".join(sorted(set(out.stdout.split())))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args()
    if not (ROOT / "data" / "raw" / "demo").is_dir():
        sys.exit("bench.check: no demo corpus in data/raw/demo: run `make demo` or `dvc repro demo_corpus` first")
    command = [sys.executable, "-m", "stages.common.runtime.check", "--root", str(ROOT)]
    seconds, output = [], ""
    load_before = os.getloadavg()
    for _ in range(args.runs):
        start = time.perf_counter()
        proc = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, check=False)
        seconds.append(time.perf_counter() - start)
        if proc.returncode:
            sys.exit(f"bench.check: the check failed:\n{proc.stderr}")
        output = proc.stdout
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True).stdout
    results = {
        "command": "python -m bench.check " + " ".join(sys.argv[1:]),
        "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
        "commit": commit.strip(),
        "machine": {"cpus": os.cpu_count(), "cpu_flags": cpu_flags(), "python": platform.python_version(),
                    "load_before": [round(x, 2) for x in load_before],
                    "load_after": [round(x, 2) for x in os.getloadavg()]},
        "seconds": [round(s, 2) for s in seconds],
        "median_s": round(statistics.median(seconds), 2),
        "max_s": round(max(seconds), 2),
        "target_s": TARGET_S,
        "output": output.splitlines(),
    }
    out = ROOT / "bench" / "results"
    out.mkdir(parents=True, exist_ok=True)
    (out / "check.json").write_text(json.dumps(results, indent=2, ensure_ascii=False) + "\n")
    lines = ["# `refinery check` on the demo workspace", "",
             f"{results['date']}, commit {results['commit']}, machine: {results['machine']}", "",
             f"`{results['command'].strip()}`: the whole command ({args.runs} runs: "
             f"{', '.join(f'{s:.2f}' for s in seconds)} s), params, inputs and the data it reads.", "",
             f"**median {results['median_s']:.2f} s, slowest {results['max_s']:.2f} s** "
             f"(target: under {TARGET_S:g} s)", "", "What it printed:", "", "```", *results["output"], "```", ""]
    (out / "check.md").write_text("\n".join(lines))
    print("\n".join(lines))


if __name__ == "__main__":
    main()
