"""List the results files in bench/results/ that are older than the code they measure.

    python -m bench._stale            # a table; exit 0
    python -m bench._stale --strict   # exit 1 if any results file is stale or names no commit
    python -m bench._stale --rerun    # rerun the command each stale results file records, then list again

A results file is *current* when the commit it records (`commit`, see bench/_provenance.py) already holds the
last change to the code its benchmark measures: the benchmark's script and its `MEASURES` (a module-level
tuple of paths; bench/_provenance.DEFAULT_MEASURES where a script names none). It is *stale* when that code
changed in a later commit, and *unknown* when it records no commit, or one this repository does not have.
A results file is matched to its script by its `bench` field, else by the longest script name its file
name starts with (flows_full_demo.json: bench/flows.py), else by the script whose source names the file.

`--rerun` runs, one after another, the command that each results file not current records (`command`, e.g.
`python -m bench.scale --sizes 24000 384000 ...`, so a file written with other arguments is rewritten with
the same ones), each command once, with this Python; then it lists again. Benchmarks time things: run it on
an otherwise idle machine. `--dry-run` prints the commands only.
"""
from __future__ import annotations

import argparse
import ast
import json
import os
import shlex
import subprocess
import sys
import time
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
    command: str | None = None  # what wrote it: "python -m bench.<name> [arguments]"


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
    command = data.get("command") if isinstance(data.get("command"), str) else None
    base = Status(rel, str(script.relative_to(ROOT)), commit, last, "unknown", "", command)
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


def rerun(rows: list[Status], dry_run: bool = False) -> list[str]:
    """Run the recorded command of each results file in `rows` that is not current, each command once, in
    the order of `rows`; return the commands that failed (or could not run: no command, or not a benchmark)."""
    commands: dict[str, list[str]] = {}
    failed = []
    for r in rows:
        if r.state == "current":
            continue
        words = shlex.split(r.command or "")
        if words[:2] != ["python", "-m"] or len(words) < 3 or not words[2].startswith("bench."):
            print(f"{r.results}: no `python -m bench.<name>` command recorded ({r.command!r}); rerun it by hand")
            failed.append(r.command or r.results)
            continue
        commands.setdefault(shlex.join(words), []).append(r.results)
    for n, (command, files) in enumerate(commands.items(), start=1):
        load = " ".join(f"{x:.2f}" for x in os.getloadavg())
        print(f"[{n}/{len(commands)}] {command}  (writes {', '.join(files)}; load {load})", flush=True)
        if dry_run:
            continue
        start = time.monotonic()
        code = subprocess.run([sys.executable, *shlex.split(command)[1:]], cwd=ROOT).returncode
        print(f"[{n}/{len(commands)}] {'done' if code == 0 else f'FAILED (exit {code})'} in "
              f"{time.monotonic() - start:.0f} s", flush=True)
        if code:
            failed.append(command)
    return failed


def table(rows: list[Status]) -> None:
    print("| results | script | its commit | last change to the measured code | state | why |")
    print("| --- | --- | --- | --- | --- | --- |")
    for r in rows:
        print(f"| {r.results} | {r.script or '-'} | {r.commit or '-'} | {r.last_change or '-'} | **{r.state}** | {r.why} |")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--strict", action="store_true", help="exit 1 if any results file is not current")
    parser.add_argument("--rerun", action="store_true",
                        help="rerun the recorded command of every results file that is not current, then list again")
    parser.add_argument("--dry-run", action="store_true", help="with --rerun: print the commands, run nothing")
    args = parser.parse_args()
    rows = [status(p) for p in sorted(RESULTS.glob("*.json"))]
    failed = []
    if args.rerun:
        failed = rerun(rows, args.dry_run)
        if not args.dry_run:
            rows = [status(p) for p in sorted(RESULTS.glob("*.json"))]
    table(rows)
    behind = [r for r in rows if r.state != "current"]
    print(f"\n{len(rows) - len(behind)} of {len(rows)} results files are current; "
          f"{len(behind)} are stale or name no commit: rerun their benchmarks before quoting them.")
    if failed:
        print("failed: " + "; ".join(failed))
    if (args.strict and behind) or (failed and not args.dry_run):
        sys.exit(1)


if __name__ == "__main__":
    main()
