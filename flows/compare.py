"""`refinery compare`: runs side by side, one row each, with the headline figures that decide between them
and their change against a baseline.

A run is the workspace, a DVC experiment (`dvc exp show` names them) or a git revision; its figures are
the stages' headline metrics files as that run left them (`dvc exp show --json` for the workspace and
the experiments, `git show REV:<file>` for a revision). The baseline is HEAD unless `--baseline` names
another run. Nothing here imports torch or DVC's Python API: DVC and git run as commands.
"""
from __future__ import annotations

import json
import subprocess
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from flows.commands import command_env, dvc
from stages.common.runtime.metrics import val_ppl
from stages.common.runtime.params import read_params

# (column, stage, key in the stage's headline metrics, which way is better: -1 lower, +1 higher, 0 neither)
FIGURES: tuple[tuple[str, str, str, int], ...] = (
    ("read", "clean", "num_read", 0),
    ("clean", "clean", "num_kept", 0),
    ("semantic", "semantic_filter", "num_kept", 0),
    ("ref ppl", "perplexity", "ref_val_ppl", -1),
    ("ppl all", "train", val_ppl("all"), -1),
    ("ppl hard", "train", val_ppl("hard"), -1),
    ("train tok/s", "train", "tokens_per_s", 1),
    ("int8 ppl x", "export", "ratio.int8_ppl_vs_fp32", -1),
    ("int8 MB", "export", "file_mb", -1),
    ("int8 ms", "export", "latency_ms", -1),
)


@dataclass
class Run:
    name: str  # workspace, an experiment's name, a branch or a revision
    rev: str  # the git revision (an experiment's commit), or "workspace"
    figures: dict[str, float | None] = field(default_factory=dict)  # column -> value


def metrics_paths(root: Path) -> dict[str, str]:
    """stage -> its headline metrics file, from params.yaml (`<stage>.metrics_path`)."""
    params = read_params(root / "params.yaml")
    return {stage: params[stage]["metrics_path"] for _, stage, _, _ in FIGURES
            if isinstance(params.get(stage), dict) and params[stage].get("metrics_path")}


def figures_from(metrics: Mapping[str, Mapping[str, Any]], paths: Mapping[str, str]) -> dict[str, float | None]:
    """The columns of FIGURES from {metrics file: its values}."""
    out: dict[str, float | None] = {}
    for column, stage, key, _ in FIGURES:
        value = (metrics.get(paths.get(stage, "")) or {}).get(key)
        out[column] = value if isinstance(value, (int, float)) and not isinstance(value, bool) else None
    return out


def exp_show_runs(entries: Sequence[Mapping[str, Any]], paths: Mapping[str, str]) -> list[Run]:
    """The workspace, each baseline commit and its experiments from `dvc exp show --json`."""

    def run_of(entry: Mapping[str, Any]) -> Run:
        data = entry.get("data") or {}
        metrics = {path: (value or {}).get("data") or {} for path, value in (data.get("metrics") or {}).items()}
        rev = str(entry.get("rev", ""))
        return Run(entry.get("name") or (rev if rev == "workspace" else rev[:7]), rev, figures_from(metrics, paths))

    runs = []
    for entry in entries:
        runs.append(run_of(entry))
        for group in entry.get("experiments") or []:
            runs += [run_of(rev) for rev in group.get("revs") or []]
    return runs


def git_run(root: Path, rev: str, paths: Mapping[str, str]) -> Run | None:
    """A git revision's committed metrics (None when `rev` is not one)."""
    proc = subprocess.run(["git", "rev-parse", "--verify", "--quiet", f"{rev}^{{commit}}"], cwd=root,
                          capture_output=True, text=True, check=False)
    if proc.returncode:
        return None
    sha = proc.stdout.strip()
    metrics = {}
    for path in set(paths.values()):
        shown = subprocess.run(["git", "show", f"{sha}:{path}"], cwd=root, capture_output=True, text=True,
                               check=False)
        metrics[path] = json.loads(shown.stdout) if shown.returncode == 0 else {}
    return Run(rev, sha, figures_from(metrics, paths))


def collect(root: Path, names: Sequence[str]) -> list[Run]:
    """The runs named (all of `dvc exp show`'s when none is), in the order given; ValueError naming one
    that is neither an experiment nor a git revision."""
    paths = metrics_paths(root)
    proc = subprocess.run(dvc("exp", "show", "--json", "--no-pager"), cwd=root, env=command_env(),
                          capture_output=True, text=True, stdin=subprocess.DEVNULL, check=False)
    if proc.returncode:
        raise RuntimeError(f"`dvc exp show` failed: {(proc.stderr or proc.stdout).strip().splitlines()[-1:]}")
    shown = exp_show_runs(json.loads(proc.stdout or "[]"), paths)
    if not names:
        return shown
    by_name = {key: run for run in shown for key in (run.name, run.rev, run.rev[:7])}
    runs = []
    for name in names:
        run = by_name.get(name) or git_run(root, name, paths)
        if run is None:
            raise ValueError(f"{name!r} is neither a DVC experiment (`dvc exp show`) nor a git revision")
        runs.append(run)
    return runs


def _cell(value: float | None) -> str:
    if value is None:
        return "-"
    if abs(value) >= 1000:
        return f"{value:,.0f}"
    return f"{value:.4g}"


def _delta(value: float | None, base: float | None, better: int) -> str:
    if value is None or base is None or not base or value == base:
        return ""
    change = (value - base) / abs(base)
    sign = "+" if change > 0 else ""
    judged = "" if not better else " ✓" if change * better > 0 else " ✗"
    return f"{sign}{change:.1%}{judged}"


def table_lines(runs: Sequence[Run], baseline: Run) -> list[str]:
    """One row per run (values), each followed by its changes against `baseline` (✓ better, ✗ worse)."""
    width = max(12, *(len(run.name) for run in runs)) + 2
    lines = [f"{'run':<{width}}" + "".join(f"{column:>12}" for column, *_ in FIGURES)]
    for run in runs:
        lines.append(f"{run.name:<{width}}" + "".join(f"{_cell(run.figures.get(c)):>12}" for c, *_ in FIGURES))
        if run is not baseline:
            deltas = [_delta(run.figures.get(c), baseline.figures.get(c), better) for c, _, _, better in FIGURES]
            if any(deltas):
                lines.append(f"{'  vs ' + baseline.name:<{width}}" + "".join(f"{d:>12}" for d in deltas))
    stages = sorted({stage for _, stage, _, _ in FIGURES})
    lines.append(f"  baseline: {baseline.name}; figures from the headline metrics of {', '.join(stages)}")
    return lines


def compare(root: Path, names: Sequence[str], baseline_name: str | None = None) -> list[str]:
    runs = collect(root, names)
    if not runs:
        raise ValueError("no runs to compare: run the pipeline first")
    baseline = next((r for r in runs if baseline_name in (r.name, r.rev, r.rev[:7])), None) if baseline_name else None
    if baseline_name and baseline is None:
        extra = collect(root, [baseline_name])[0]
        runs, baseline = [extra, *runs], extra
    if baseline is None:  # HEAD: the first commit `dvc exp show` lists after the workspace
        baseline = next((r for r in runs if r.rev != "workspace"), runs[0])
    return table_lines(runs, baseline)
