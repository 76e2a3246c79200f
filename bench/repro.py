"""The demo's `dvc repro` from a fresh clone, at one or more commits side by side: each stage's wall time, the total,
and a no-op `dvc repro` once everything is up to date.

    python -m bench.repro                               # HEAD: the whole demo, then three no-op runs
    python -m bench.repro --revs a4afa51 HEAD           # two commits, one after the other, on the same machine
    python -m bench.repro --target perplexity --set demo_corpus.num_docs=2000 --out /tmp/repro   # a quick look

Each revision is cloned from this repository into a temporary folder (committed files only, a DVC cache of its own,
so nothing is reused between revisions or from this workspace), `--set key=value` overrides are written into the
clone's params.yaml, and `dvc repro [target]` runs there with this interpreter's environment (its folder first on
PATH; PYTHONPATH is the clone, so the clone's stages run, not this checkout's). The stage times come from the
moments DVC prints "Running stage" (each stage's time runs until the next stage starts, the last one's until DVC
exits). Then `dvc repro` runs `--noop-runs` times more with nothing to do. The load average is read at each
revision's start and end: revisions run one after another, so compare them only when the loads are alike. Results:
`<out>.json` and `<out>.md` (default bench/results/repro).
"""
from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import yaml

from bench import _provenance
from bench._provenance import git

ROOT = Path(__file__).resolve().parents[1]
RUNNING = re.compile(r"Running stage '([^']+)'")
# The whole pipeline as `dvc repro` runs it: bench/_provenance.py's default and dvc.yaml
MEASURES = ("stages", "flows", "params.yaml", "dvc.yaml")


def override(params_path: Path, assignments: list[str]) -> None:
    """Write `key.sub=value` (value parsed as YAML) into params.yaml; an unknown key is an error."""
    params = yaml.safe_load(params_path.read_text(encoding="utf-8"))
    for item in assignments:
        key, sep, value = item.partition("=")
        if not sep:
            sys.exit(f"bench.repro: --set {item!r}: expected key=value, e.g. demo_corpus.num_docs=2000")
        *parents, leaf = key.split(".")
        node = params
        for part in parents:
            node = node.get(part) if isinstance(node, dict) else None
        if not isinstance(node, dict) or leaf not in node:
            sys.exit(f"bench.repro: --set {key}: no such key in params.yaml")
        node[leaf] = yaml.safe_load(value)
    params_path.write_text(yaml.safe_dump(params, sort_keys=False, allow_unicode=True), encoding="utf-8")


def dvc(clone: Path, argv: list[str], log_path: Path) -> tuple[float, int, list[tuple[str, float]]]:
    """Run `dvc <argv>` in the clone: (wall seconds, exit status, [(stage, seconds since start it began)])."""
    bin_dir = str(Path(sys.executable).parent)  # dvc.yaml's `python` is this interpreter
    env = {**os.environ, "PYTHONPATH": str(clone), "DVC_NO_ANALYTICS": "1",
           "PATH": os.pathsep.join([bin_dir, os.environ.get("PATH", "")])}
    starts: list[tuple[str, float]] = []
    began = time.perf_counter()
    with open(log_path, "a", encoding="utf-8") as log:
        proc = subprocess.Popen([str(Path(bin_dir) / "dvc"), *argv], cwd=clone, env=env,
                                stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, errors="replace")
        assert proc.stdout is not None
        for line in proc.stdout:
            log.write(line)
            if match := RUNNING.search(line):
                starts.append((match.group(1), time.perf_counter() - began))
        status = proc.wait()
    return time.perf_counter() - began, status, starts


def run_rev(rev: str, args: argparse.Namespace, workdir: Path) -> dict[str, Any]:
    commit = git("rev-parse", "--short", rev)
    clone = workdir / commit
    subprocess.run(["git", "clone", "--quiet", str(ROOT), str(clone)], check=True)
    git("checkout", "--quiet", commit, cwd=clone)
    override(clone / "params.yaml", args.set)
    log_path = workdir / f"{commit}.log"
    print(f"[repro] {rev} ({commit}): dvc repro {args.target or ''} in {clone} (log {log_path})", flush=True)
    load_start = [round(x, 2) for x in os.getloadavg()]
    wall, status, starts = dvc(clone, ["repro", *([args.target] if args.target else [])], log_path)
    ends = [t for _, t in starts[1:]] + [wall]
    stages = {name: round(end - start, 1) for (name, start), end in zip(starts, ends)}
    row: dict[str, Any] = {"rev": rev, "commit": commit, "date": git("log", "-1", "--format=%cI", commit),
                           "returncode": status, "wall_s": round(wall, 1), "stages": stages,
                           "load_start": load_start}
    if status:
        row["log_tail"] = log_path.read_text(encoding="utf-8", errors="replace").splitlines()[-20:]
        print(f"[repro] {rev}: dvc repro failed (status {status}); log {log_path}", file=sys.stderr, flush=True)
    else:
        noop = [dvc(clone, ["repro", *([args.target] if args.target else [])], log_path) for _ in range(args.noop_runs)]
        row["noop_s"] = [round(w, 2) for w, _, _ in noop]
        row["noop_reran"] = sorted({name for _, _, s in noop for name, _ in s})  # stages a no-op run ran anyway
    row["load_end"] = [round(x, 2) for x in os.getloadavg()]
    if not args.keep:
        shutil.rmtree(clone, ignore_errors=True)
    return row


def side_by_side(runs: list[dict[str, Any]], names: list[str]) -> list[str]:
    """Where two commits ran more than once each (interleaved: a b a b), each stage's mean per commit and their
    ratio: interleaving spreads a drift in the machine's speed over both."""
    commits = list(dict.fromkeys(run["commit"] for run in runs if run["returncode"] == 0))
    groups = {c: [run for run in runs if run["commit"] == c and run["returncode"] == 0] for c in commits}
    if len(commits) != 2 or min(len(g) for g in groups.values()) < 2:
        return []
    a, b = commits

    def mean(commit: str, name: str | None) -> float | None:
        values = [run["wall_s"] if name is None else run["stages"].get(name) for run in groups[commit]]
        return None if None in values else sum(values) / len(values)

    lines = ["", f"Mean of {len(groups[a])} runs of {a} and {len(groups[b])} of {b}, in the order they ran:", "",
             f"| stage | {a} s | {b} s | ratio |", "| --- | --- | --- | --- |"]
    for name in [*names, None]:
        x, y = mean(a, name), mean(b, name)
        ratio = f"{y / x:.2f}x" if x and y else "-"
        cells = ["-" if v is None else f"{v:,.1f}" for v in (x, y)]
        lines.append(f"| {name or '**total**'} | {cells[0]} | {cells[1]} | {ratio} |")
    return lines


def markdown(r: dict[str, Any]) -> list[str]:
    lines = ["# The demo's `dvc repro` from a fresh clone (bench/repro.py)", "", *_provenance.header(r),
             "Each revision runs in a fresh clone with an empty DVC cache, one after the other. A stage's time runs "
             "from DVC's \"Running stage\" line to the next one (the last to DVC's exit), so it includes DVC's own "
             "work for the stage (hashing, caching its outputs). *no-op* is `dvc repro` again with nothing to do.",
             ""]
    if r["settings"]["set"]:
        lines += [f"Overrides: {', '.join(f'`{s}`' for s in r['settings']['set'])}.", ""]
    runs = r["runs"]
    names = list(dict.fromkeys(name for run in runs for name in run["stages"]))
    head = ["stage", *(f"{run['rev']} ({run['commit']}) s" for run in runs)]
    if len(runs) == 2:
        head.append("ratio")
    lines += ["| " + " | ".join(head) + " |", "|" + " --- |" * len(head)]

    def row(label: str, values: list[float | None]) -> str:
        cells = [label, *("-" if v is None else f"{v:,.1f}" for v in values)]
        if len(runs) == 2:
            a, b = values
            cells.append(f"{b / a:.2f}x" if a and b else "-")
        return "| " + " | ".join(cells) + " |"

    lines += [row(name, [run["stages"].get(name) for run in runs]) for name in names]
    lines.append(row("**total**", [run["wall_s"] if run["returncode"] == 0 else None for run in runs]))
    lines += side_by_side(runs, names)
    lines += ["", "| revision | exit | no-op `dvc repro` s | stages a no-op run ran | load start | load end |",
              "| --- | --- | --- | --- | --- | --- |"]
    for run in runs:
        noop = ", ".join(f"{s:.2f}" for s in run.get("noop_s", [])) or "-"
        lines.append(f"| {run['rev']} ({run['commit']}, {run['date']}) | {run['returncode']} | {noop} | "
                     f"{', '.join(run.get('noop_reran', [])) or 'none'} | {run['load_start']} | {run['load_end']} |")
    return lines + [""]



def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--revs", nargs="+", default=["HEAD"], help="commits to run, in this order")
    parser.add_argument("--target", default="", help="a dvc.yaml stage: repro up to it (default: every stage)")
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                        help="a params.yaml override in every clone, e.g. demo_corpus.num_docs=2000")
    parser.add_argument("--noop-runs", type=int, default=3, help="no-op `dvc repro` runs after the first")
    parser.add_argument("--out", type=Path, default=ROOT / "bench" / "results" / "repro",
                        help="results prefix: <out>.json and <out>.md")
    parser.add_argument("--keep", action="store_true", help="keep the clones (their paths are in the log)")
    args = parser.parse_args()
    for rev in args.revs:  # an unknown revision is an error before anything runs
        if subprocess.run(["git", "rev-parse", "--verify", "--quiet", f"{rev}^{{commit}}"], cwd=ROOT,
                          capture_output=True).returncode:
            sys.exit(f"bench.repro: --revs {rev}: not a commit of {ROOT}")
    out = args.out.resolve()
    results: dict[str, Any] = {
        **_provenance.stamp("repro", MEASURES),
        "settings": {"revs": args.revs, "target": args.target, "set": args.set, "noop_runs": args.noop_runs},
        "runs": []}
    workdir = Path(tempfile.mkdtemp(prefix="bench_repro_"))
    for rev in args.revs:
        results["runs"].append(run_rev(rev, args, workdir))
        _provenance.write(results, markdown, out=out)
    print("\n".join(markdown(results)))
    if any(run["returncode"] for run in results["runs"]):
        sys.exit(f"bench.repro: a dvc repro failed (see {out}.md)")


if __name__ == "__main__":
    main()
