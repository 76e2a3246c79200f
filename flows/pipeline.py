"""The `pipeline` flow: one task per DVC stage, in `dvc dag` order, each running `dvc repro <stage>`.

DVC decides what is stale and keeps the cache and dvc.lock; the flow only orders, logs and reports.
Two modes:
- workspace: the stages are reproduced in the workspace, exactly as `dvc repro` would;
- experiment (whenever parameters are overridden, and for every run the `pipeline` deployment starts
  from the UI): the same tasks in a private worktree, saved as a DVC experiment (flows/experiment.py);
  the workspace's params.yaml is not edited.
A stage that fails fails its task and the flow with the stage's own output; a task is retried only when
DVC's lock was busy (re-running `dvc repro <stage>` is idempotent). One run at a time per workspace.
An experiment's worktree is removed when its run ends, however it ends: by the run itself, by a state
hook when the run fails, crashes or is cancelled (Prefect then kills the run's process), and in any
case by the next run, which removes whatever an earlier one left.

The workspace is not a flow parameter: whoever can start a run through the API must not choose which
repository's commands it executes. It is `$REFINERY_WORKSPACE` (set by `flows.serve --workspace`), else
the repository these flows ship in; `set_params` and `experiment_name` are checked (flows/validation.py).
"""
from __future__ import annotations

import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from prefect import Flow, flow, get_run_logger, task
from prefect.artifacts import create_markdown_artifact, create_table_artifact
from prefect.cache_policies import NO_CACHE
from prefect.client.schemas.objects import FlowRun, State
from prefect.logging.loggers import flow_run_logger
from prefect.runtime import flow_run

from flows import experiment as exp_worktree
from flows.artifacts import markdown_table, model_comparison, output_rows, plot_lines, publish_stage
from flows.check import check_workspace
from flows.commands import CommandFailed, dvc, run
from flows.config import FlowsConfig, load_config, resolve_present, resolve_workspace, workspace_params
from flows.graph import StageInfo, stage_outcome, stages_in_order, stale_stages, status_json
from flows.lock import WorkspaceBusy, workspace_lock
from flows.validation import check_experiment_name, check_overrides


@dataclass(frozen=True)
class StageRun:
    stage: str
    outcome: str  # ran | up to date | restored from run cache
    seconds: float


def _retry_when_dvc_lock_busy(task, task_run, state) -> bool:  # noqa: ANN001 (Prefect's hook signature)
    error = state.result(raise_on_failure=False)
    return isinstance(error, CommandFailed) and error.dvc_lock_busy


@task(name="dvc-status", cache_policy=NO_CACHE, retry_condition_fn=_retry_when_dvc_lock_busy)
def find_stale(cwd: Path, stages: list[StageInfo]) -> set[str]:
    """One `dvc status` for the whole pipeline: the stages DVC would run (see `reproduce_stage`)."""
    output = run(dvc("status", "--json"), cwd, get_run_logger(), quiet=True).output
    stale = stale_stages(stages, status_json(output))
    get_run_logger().info("stages to reproduce: %s", ", ".join(s.name for s in stages if s.name in stale) or "none")
    return stale


@task(name="dvc-repro", task_run_name="{stage.name}", cache_policy=NO_CACHE,
      retry_condition_fn=_retry_when_dvc_lock_busy)
def reproduce_stage(stage: StageInfo, cwd: Path, stale: bool) -> StageRun:
    """`dvc repro <stage>` (its output streamed into this task's log), then the stage's metrics artifact.

    A stage that `dvc status` found up to date, with all its upstream stages, is not handed to
    `dvc repro` again: DVC has already said it would skip it, and a DVC start per stage would cost more
    than the whole check (an up-to-date pipeline should take under 15 s end to end)."""
    start = time.perf_counter()
    log = get_run_logger()
    if stale:
        result = run(dvc("repro", stage.name), cwd, log, what=f"stage {stage.name!r} (dvc repro)")
        outcome = stage_outcome(stage.name, result)
    else:
        log.info("Stage %r and its upstream stages are up to date (dvc status): nothing to reproduce", stage.name)
        outcome = "up to date"
    publish_stage(stage, cwd, outcome)
    return StageRun(stage.name, outcome, round(time.perf_counter() - start, 2))


@task(name="prepare-experiment", cache_policy=NO_CACHE)
def prepare_experiment(workspace: Path, exp_dir: Path, overrides: list[str],
                       checkpoint_dirs: list[str]) -> list[StageInfo]:
    """A worktree of the workspace, its finished work included (cached outputs linked from DVC's cache,
    uncached ones and the checkpoint folders from the workspace), with the overrides applied; returns its
    stages."""
    log = get_run_logger()
    exp_worktree.create_worktree(workspace, exp_dir, log)
    exp_worktree.link_uncached_outputs(workspace, exp_dir, stages_in_order(workspace), log, checkpoint_dirs)
    if overrides:
        exp_worktree.set_params(exp_dir, overrides)
        log.info("parameters for this experiment: %s", " ".join(overrides))
    exp_worktree.checkout(exp_dir, log)
    check_workspace(exp_dir, log)  # the experiment's params.yaml, overrides included, before any stage runs
    return stages_in_order(exp_dir)


@task(name="dvc-exp-save", cache_policy=NO_CACHE)
def save_experiment(exp_dir: Path, name: str, stages: list[StageInfo]) -> None:
    exp_worktree.save_experiment(exp_dir, name, stages, get_run_logger())


@task(name="summary", cache_policy=NO_CACHE)
def summarize(cwd: Path, stages: list[StageInfo], runs: list[StageRun], cfg: FlowsConfig, heading: str,
              outputs_note: str) -> None:
    """The model comparison (one row per model of the export stage) and the run's summary: what each stage
    did, the final outputs with their sizes, the plot files."""
    export = {s.name: s for s in stages}.get(cfg.export_stage)
    parts = [f"## {heading}", markdown_table([asdict(r) for r in runs])]
    comparison = model_comparison(export, cwd) if export else None
    if comparison:
        source, rows = comparison
        create_table_artifact(rows, key="model-comparison", description=f"one row per model, from `{source}`")
        parts += [f"### Model comparison (`{source}`)", markdown_table(rows)]
    else:
        parts.append(f"### Model comparison\n\nNo per-model table from a `{cfg.export_stage}` stage in this "
                     f"pipeline yet.")
    final = export or stages[-1]
    label = "Exported files" if export else f"Outputs of the last stage, `{final.name}`"
    outputs = output_rows(final.outs, cwd)
    parts.append(f"### {label}\n\n{outputs_note}\n\n" + (markdown_table(outputs) if outputs else "(none yet)"))
    plots = plot_lines(stages, cwd)
    if plots:
        parts.append("### Plots (`dvc plots show` draws them)\n\n" + "\n".join(plots))
    create_markdown_artifact("\n\n".join(parts) + "\n", key="pipeline-summary", description=heading)


def _reproduce_all(cwd: Path, stages: list[StageInfo], cfg: FlowsConfig) -> list[StageRun]:
    retries = {"retries": cfg.dvc_lock_retries, "retry_delay_seconds": cfg.retry_delay_s}
    repro = reproduce_stage.with_options(**retries)
    stale = find_stale.with_options(**retries)(cwd, stages)
    return [repro(stage, cwd, stage.name in stale) for stage in stages]


def _remove_worktree_of_run(flow: Flow, flow_run: FlowRun, state: State) -> None:
    """State hook (failed, crashed, cancelled): remove the run's experiment worktree. A cancelled or crashed
    run's process was killed, maybe before its own cleanup ran; the runner calls this afterwards. Under
    the workspace lock, so a run that started meanwhile is never disturbed (it removes leftovers itself)."""
    log = flow_run_logger(flow_run, flow)
    root = resolve_workspace()
    cfg = load_config(root)
    name = flow_run.parameters.get("experiment_name") or flow_run.name
    try:
        check_experiment_name(name)
    except ValueError:
        return  # the run was refused before it made anything
    exp_dir = _experiments_root(root, cfg) / name
    if not exp_dir.exists():
        return
    try:
        with workspace_lock(root, f"cleanup of flow run {flow_run.name!r} ({flow_run.id})", 0, log):
            exp_worktree.remove_worktree(root, exp_dir, log)
    except WorkspaceBusy:
        log.info("%s is left for the next run to remove: another run holds the workspace", exp_dir)


def _experiments_root(root: Path, cfg: FlowsConfig) -> Path:
    """Where experiment worktrees live, one folder per experiment name."""
    return root / cfg.experiments_dir / "exps"


@flow(name="pipeline", on_failure=[_remove_worktree_of_run], on_crashed=[_remove_worktree_of_run],
      on_cancellation=[_remove_worktree_of_run])
def pipeline(set_params: list[str] | None = None, experiment: bool | None = None,
             experiment_name: str = "", profile: str = "") -> dict[str, Any]:
    """Reproduce every DVC stage, one task each.

    set_params: `dvc exp run --set-param` overrides of existing, non-path params.yaml values, same type,
    e.g. `train.max_steps=50`; they make the run an experiment.
    profile: a named set of overrides from flows/config.yaml's `profiles` (`quick`: training, pruning, QAT
    and export shrunk together, for a look in minutes), applied before set_params.
    experiment: run as a DVC experiment (default: only when there are overrides); the workspace is untouched.
    experiment_name: the experiment's name in `dvc exp show` (default: this flow run's name); letters,
    digits, `.`, `_`, `-`.
    """
    root = resolve_workspace()
    cfg = load_config(root)
    log = get_run_logger()
    if profile and profile not in cfg.profiles:
        raise ValueError(f"profile {profile!r} is not one of flows/config.yaml's profiles: "
                         f"{', '.join(sorted(cfg.profiles)) or 'none'}")
    overrides = [*cfg.profiles.get(profile, []), *(set_params or [])]
    check_overrides(overrides, workspace_params(root))
    as_experiment = bool(overrides) if experiment is None else experiment
    if overrides and not as_experiment:
        raise ValueError("parameter overrides run only as a DVC experiment: the workspace's params.yaml is never "
                         "edited by a flow (drop experiment=false, or edit params.yaml yourself)")
    name = experiment_name or flow_run.get_name()
    if as_experiment or experiment_name:
        # Whoever starts a run also chooses its flow run name: the default name is checked the same way.
        check_experiment_name(name, "experiment_name" if experiment_name else "the flow run name (the default "
                                                                             "experiment_name)")
    owner = f"flow run {flow_run.get_name()!r} ({flow_run.get_id()})"
    with workspace_lock(root, owner, cfg.lock_wait_s, log):
        exp_worktree.remove_leftover_worktrees(root, _experiments_root(root, cfg), log)
        if as_experiment:
            return _run_experiment(root, cfg, overrides, name)
        check_workspace(root, log)  # params.yaml and its inputs, before DVC removes any output
        stages = stages_in_order(root)
        runs = _reproduce_all(root, stages, cfg)
        summarize(root, stages, runs, cfg, f"Pipeline run `{flow_run.get_name()}` in the workspace", "")
        return {"mode": "workspace", "stages": [asdict(r) for r in runs]}


def _run_experiment(root: Path, cfg: FlowsConfig, overrides: list[str], name: str) -> dict[str, Any]:
    exp_dir = _experiments_root(root, cfg) / name
    try:
        checkpoint_dirs = resolve_present(cfg.checkpoint_dirs, workspace_params(root))
        stages = prepare_experiment(root, exp_dir, overrides, checkpoint_dirs)
        runs = _reproduce_all(exp_dir, stages, cfg)
        save_experiment(exp_dir, name, stages)
        note = (f"In DVC's cache as experiment `{name}`: `dvc exp show` compares it, `dvc exp apply {name}` "
                f"puts its params, metrics and outputs in the workspace.")
        heading = f"Experiment `{name}` ({' '.join(overrides) or 'no overrides'})"
        summarize(exp_dir, stages, runs, cfg, heading, note)
        return {"mode": "experiment", "experiment": name, "set_params": overrides,
                "stages": [asdict(r) for r in runs]}
    finally:
        if exp_dir.exists():
            exp_worktree.remove_worktree(root, exp_dir, get_run_logger())
