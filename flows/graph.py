"""The pipeline as DVC sees it: stages in dependency order, with their outputs, metrics and plots.

Read from DVC's own index (`dvc.repo.Repo`), so the order is `dvc dag`'s and a stage added to dvc.yaml
becomes a task of the flow with no change here.
"""
from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path

import networkx as nx
from dvc.repo import Repo
from dvc.stage import PipelineStage

from flows.commands import CommandResult


@dataclass(frozen=True)
class StageInfo:
    name: str  # DVC's address of the stage: the target of `dvc repro`
    needs: tuple[str, ...]  # the stages whose outputs it reads
    deps: tuple[str, ...]  # files and folders it depends on (params files included), relative to the workspace
    outs: tuple[str, ...]  # every output, relative to the workspace
    metrics: tuple[str, ...]
    plots: tuple[str, ...]
    uncached: tuple[str, ...]  # outputs with `cache: false` (metrics, plots): in git, not in DVC's cache


def _relative(path: str, root: str) -> str:
    return os.path.relpath(path, root)


def _address(stage: PipelineStage, root: str) -> str:
    """The `dvc repro` target relative to the workspace (DVC's `addressing` is relative to the cwd)."""
    dvcfile = _relative(stage.path, root)
    return stage.name if dvcfile == "dvc.yaml" else f"{dvcfile}:{stage.name}"


def stages_in_order(workspace: Path) -> list[StageInfo]:
    """Every command stage, dependencies first; stages independent of each other keep dvc.yaml's order."""
    with Repo(str(workspace)) as repo:
        stages = [s for s in repo.index.stages if isinstance(s, PipelineStage)]
        position = {stage: i for i, stage in enumerate(stages)}
        # DVC's graph points from a stage to the stages it depends on; reversed, a topological order
        # puts dependencies first.
        graph = repo.index.graph.reverse(copy=False).subgraph(stages)
        order = nx.lexicographical_topological_sort(graph, key=position.__getitem__)
        root = repo.root_dir
        return [StageInfo(name=_address(stage, root),
                          needs=tuple(_address(s, root) for s in graph.predecessors(stage)),
                          deps=tuple(_relative(d.fs_path, root) for d in stage.deps),
                          outs=tuple(_relative(o.fs_path, root) for o in stage.outs),
                          metrics=tuple(_relative(o.fs_path, root) for o in stage.outs if o.metric),
                          plots=tuple(_relative(o.fs_path, root) for o in stage.outs if o.plot),
                          uncached=tuple(_relative(o.fs_path, root) for o in stage.outs if not o.use_cache))
                for stage in order]


def stage_outcome(stage: str, result: CommandResult) -> str:
    """What `dvc repro <stage>` did to the stage, from DVC's own progress lines."""
    for line in result.output:
        if line.startswith(f"Stage '{stage}' didn't change"):
            return "up to date"
        if line.startswith(f"Stage '{stage}' is cached") or line.startswith(f"Restored stage '{stage}'"):
            return "restored from run cache"
        if line.startswith(f"Running stage '{stage}'"):
            return "ran"
    return "up to date"  # e.g. a frozen stage: DVC printed nothing about it


def stale_stages(stages: list[StageInfo], status_json: str) -> set[str]:
    """Stages `dvc repro` would run: those `dvc status --json` lists, and every stage downstream of one
    (its inputs will change when the upstream stage reruns, which status cannot know yet)."""
    stale = set(json.loads(status_json or "{}") or {})
    for stage in stages:  # dependency order: upstream verdicts are final when a stage is reached
        if any(need in stale for need in stage.needs):
            stale.add(stage.name)
    return stale


def status_json(output: list[str]) -> str:
    """The JSON line of `dvc status --json` (DVC may print warnings around it)."""
    return next((line for line in reversed(output) if line.startswith("{")), "{}")


def changed_deps(status_json: str) -> dict[str, dict[str, str]]:
    """`dvc status --json` -> {stage: {dependency path: change}}, from the `changed deps` entries."""
    changes: dict[str, dict[str, str]] = {}
    for stage, entries in (json.loads(status_json or "{}") or {}).items():
        for entry in entries:
            if isinstance(entry, dict) and "changed deps" in entry:
                changes.setdefault(stage, {}).update(entry["changed deps"])
    return changes
