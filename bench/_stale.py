"""List the results files in bench/results/ that are older than the code they measure.

    python -m bench._stale            # a table; exit 0
    python -m bench._stale --strict   # exit 1 if any results file is stale or names no commit

A results file is *current* when the commit it records (`commit`, see bench/_provenance.py) already holds the
last change to the code its benchmark measures: the benchmark's script and its `MEASURES` (a module-level
tuple of paths; bench/_provenance.DEFAULT_MEASURES where a script names none). It is *stale* when that code
changed in a later commit, and *unknown* when it records no commit, or one this repository does not have.
A results file is matched to its script by its `bench` field, else by the longest script name its file
name starts with (flows_full_demo.json: bench/flows.py), else by the script whose source names the file.
"""
from __future__ import annotations

import argparse
import ast
import json
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from bench._provenance import DEFAULT_MEASURES, RESULTS, ROOT, git

BENCH = ROOT / "bench"


@dataclass
class Status:
    results: str  # bench/results/<name>.json
    script: str | None
    commit: str | None
    last_change: str | None  # the last commit that changed the measured code
    state: str  # current, stale, unknown
    why: str


def measures(script: Path) -> tuple[str, ...]:
    """The script's module-level `MEASURES` tuple of paths, read without importing it (imports are heavy)."""
    for node in ast.parse(script.read_text(encoding="utf-8")).body:
        if (isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == "MEASURES" for t in node.targets)):
            return tuple(ast.literal_eval(node.value))
    return DEFAULT_MEASURES


def script_for(name: str, data: dict) -> Path | None:
    scripts = {p.stem: p for p in BENCH.glob("[a-z]*.py")}
    if isinstance(data.get("bench"), str) and data["bench"] in scripts:
        return scripts[data["bench"]]
    prefixes = [stem for stem in scripts if name == stem or name.startswith(stem + "_")]
    if prefixes:
        return scripts[max(prefixes, key=len)]
    # a script that writes a results file of another name names it in its source
    return next((p for p in scripts.values() if f'"{name}' in p.read_text(encoding="utf-8")), None)


def is_ancestor(older: str, newer: str) -> bool:
    return subprocess.run(["git", "merge-base", "--is-ancestor", older, newer], cwd=ROOT).returncode == 0


def status(path: Path) -> Status:
    rel = str(path.relative_to(ROOT))
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as e:
        return Status(rel, None, None, None, "unknown", f"unreadable: {e}")
    data = data if isinstance(data, dict) else {}
    script = script_for(path.stem, data)
    if script is None:
        return Status(rel, None, data.get("commit"), None, "unknown", "no bench/ script writes it")
    paths = [str(script.relative_to(ROOT)), *measures(script)]
    last = git("log", "-1", "--format=%h", "--", *paths) or None
    commit = data.get("commit")
    base = Status(rel, str(script.relative_to(ROOT)), commit, last, "unknown", "")
    if not commit:
        base.why = "records no commit"
    elif subprocess.run(["git", "cat-file", "-e", f"{commit}^{{commit}}"], cwd=ROOT,
                        capture_output=True).returncode:
        base.why = f"commit {commit} is not in this repository"
    elif last is None or is_ancestor(last, commit):
        base.state, base.why = "current", "no change to the measured code since"
    else:
        num = git("rev-list", "--count", f"{commit}..HEAD", "--", *paths)
        base.state, base.why = "stale", f"{num} later commits changed {', '.join(paths)}"
    if data.get("changed_files"):
        base.why += f"; written with uncommitted changes to {', '.join(data['changed_files'])}"
    return base


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--strict", action="store_true", help="exit 1 if any results file is not current")
    args = parser.parse_args()
    rows = [status(p) for p in sorted(RESULTS.glob("*.json"))]
    print("| results | script | its commit | last change to the measured code | state | why |")
    print("| --- | --- | --- | --- | --- | --- |")
    for r in rows:
        print(f"| {r.results} | {r.script or '-'} | {r.commit or '-'} | {r.last_change or '-'} | **{r.state}** | {r.why} |")
    behind = [r for r in rows if r.state != "current"]
    print(f"\n{len(rows) - len(behind)} of {len(rows)} results files are current; "
          f"{len(behind)} are stale or name no commit: rerun their benchmarks before quoting them.")
    if args.strict and behind:
        sys.exit(1)


if __name__ == "__main__":
    main()
