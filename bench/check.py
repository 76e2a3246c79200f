"""`refinery check` on the demo workspace: wall time of the whole command (params, inputs and the data it
reads: the first records of every source, the labels, the projections), as a user runs it.

    python -m bench.check [--runs 3]

Needs the demo corpus (`make demo`, or `dvc repro demo_corpus`); writes bench/results/check.{json,md}.
"""
from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from bench import _provenance

ROOT = Path(__file__).resolve().parents[1]
TARGET_S = 10.0  # what a user waits for before `dvc repro`, on 2 cores
# It checks every stage's params against dvc.yaml and reads every input: bench/_provenance.py's default and dvc.yaml
MEASURES = ("stages", "flows", "params.yaml", "dvc.yaml")


def markdown(results: dict[str, Any]) -> list[str]:
    seconds = results["seconds"]
    return ["# `refinery check` on the demo workspace", "", *_provenance.header(results),
            f"The whole command ({len(seconds)} runs: {', '.join(f'{s:.2f}' for s in seconds)} s), params, inputs "
            "and the data it reads.", "",
            f"**median {results['median_s']:.2f} s, slowest {results['max_s']:.2f} s** "
            f"(target: under {results['target_s']:g} s)", "", "What it printed:", "", "```", *results["output"],
            "```", ""]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args()
    if not (ROOT / "data" / "raw" / "demo").is_dir():
        sys.exit("bench.check: no demo corpus in data/raw/demo: run `make demo` or `dvc repro demo_corpus` first")
    command = [sys.executable, "-m", "stages.check", "--root", str(ROOT)]
    seconds, output = [], ""
    stamp = _provenance.stamp("check", MEASURES)
    for _ in range(args.runs):
        start = time.perf_counter()
        proc = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, check=False)
        seconds.append(time.perf_counter() - start)
        if proc.returncode:
            sys.exit(f"bench.check: the check failed:\n{proc.stderr}")
        output = proc.stdout
    results = {
        **stamp,
        "seconds": [round(s, 2) for s in seconds],
        "median_s": round(statistics.median(seconds), 2),
        "max_s": round(max(seconds), 2),
        "target_s": TARGET_S,
        "output": output.splitlines(),
    }
    _provenance.write(results, markdown)
    print("\n".join(markdown(results)))


if __name__ == "__main__":
    main()
