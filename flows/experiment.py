"""A pipeline run with parameter overrides, recorded as a DVC experiment, the workspace left untouched.

`dvc exp run --temp` runs the whole pipeline as one command; to keep one Prefect task per stage this
does what it does, with DVC's and git's own commands: a private git worktree of HEAD (plus the
workspace's uncommitted changes) sharing the workspace's DVC cache, the overrides applied to the
worktree's params.yaml by DVC's `--set-param` code, then `dvc repro <stage>` per stage there and
`dvc exp save`, which stores the experiment under the workspace's git refs, so it is listed by
`dvc exp show` and can be restored with `dvc exp apply`. The workspace's params.yaml is never written.
"""
from __future__ import annotations

import logging
import shutil
from pathlib import Path

from dvc.exceptions import InvalidArgumentError
from dvc.utils.hydra import apply_overrides

from flows.commands import CommandFailed, dvc, run
from flows.graph import StageInfo

Log = logging.Logger | logging.LoggerAdapter


def create_worktree(workspace: Path, exp_dir: Path, log: Log) -> None:
    """A detached git worktree of HEAD with the workspace's uncommitted files and DVC outputs."""
    if exp_dir.exists():  # left by a run that crashed: no other run can be using it, we hold the workspace
        log.warning("removing %s, left by an earlier run", exp_dir)
        remove_worktree(workspace, exp_dir, log)
    try:
        run(["git", "rev-parse", "--verify", "--quiet", "HEAD"], workspace, log, quiet=True)
    except CommandFailed as e:
        raise ValueError(f"{workspace}: no git commit yet; DVC experiments are based on one, commit first") from e
    exp_dir.parent.mkdir(parents=True, exist_ok=True)
    run(["git", "worktree", "add", "--detach", str(exp_dir), "HEAD"], workspace, log)
    copy_uncommitted(workspace, exp_dir, log)
    cache_dir = run(dvc("cache", "dir"), workspace, log, quiet=True).output[-1].strip()
    run(dvc("cache", "dir", "--local", cache_dir), exp_dir, log)
    # Links instead of copies: checking out a large pipeline costs no disk and little time. DVC makes
    # linked files read-only and unlinks outputs before a stage rewrites them, so the cache stays intact.
    run(dvc("config", "--local", "cache.type", "hardlink,copy"), exp_dir, log)
    run(dvc("checkout", "--allow-missing"), exp_dir, log)


def copy_uncommitted(workspace: Path, exp_dir: Path, log: Log) -> None:
    """Carry over what `git worktree add` does not: modified and untracked (not ignored) files, and
    deletions, as `dvc exp run --temp` does."""
    listing = run(["git", "ls-files", "-z", "--modified", "--others", "--exclude-standard"], workspace, log,
                  quiet=True).output
    paths = sorted({p for line in listing for p in line.split("\0") if p})
    for rel in paths:
        src, dst = workspace / rel, exp_dir / rel
        if src.is_file() or src.is_symlink():
            dst.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src, dst, follow_symlinks=False)
        else:
            dst.unlink(missing_ok=True)
    if paths:
        log.info("experiment includes %d uncommitted change(s): %s", len(paths), ", ".join(paths[:10]))


def copy_uncached_outputs(workspace: Path, exp_dir: Path, stages: list[StageInfo], log: Log) -> None:
    """Copy `cache: false` outputs (metrics, plots) that git does not carry (e.g. a gitignored metrics/):
    `dvc checkout` cannot restore them, and without them every stage would look changed and rerun."""
    copied = []
    for stage in stages:
        for rel in stage.uncached:
            src, dst = workspace / rel, exp_dir / rel
            if src.is_file() and not dst.exists():
                dst.parent.mkdir(parents=True, exist_ok=True)
                shutil.copy2(src, dst)
                copied.append(rel)
    if copied:
        log.info("copied %d untracked metrics/plots file(s) from the workspace", len(copied))


def set_params(exp_dir: Path, overrides: list[str]) -> None:
    """Apply `--set-param` overrides (`section.key=value`, Hydra syntax) to the worktree's params.yaml,
    with the code `dvc exp run --set-param` uses (comments and layout are kept)."""
    try:
        apply_overrides(exp_dir / "params.yaml", list(overrides))
    except InvalidArgumentError as e:
        # DVC's message alone ("Invalid `--set-param` value") does not say which one or why.
        raise ValueError(f"invalid parameter override(s) {list(overrides)}: {e.__cause__ or e}") from e


def save_experiment(exp_dir: Path, name: str, stages: list[StageInfo], log: Log) -> None:
    """`dvc exp save` in the worktree; untracked metrics/plots and dvc.lock are included explicitly so
    that `dvc exp show` has the run's metrics even where the workspace gitignores them."""
    include = ["dvc.lock"] + [rel for s in stages for rel in s.uncached]
    args = ["exp", "save", "--name", name]
    for rel in include:
        if (exp_dir / rel).is_file():
            args += ["--include-untracked", rel]
    run(dvc(*args), exp_dir, log)


def remove_worktree(workspace: Path, exp_dir: Path, log: Log) -> None:
    run(["git", "worktree", "remove", "--force", str(exp_dir)], workspace, log)
