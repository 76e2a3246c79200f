"""A pipeline run with parameter overrides, recorded as a DVC experiment, the workspace left untouched.

`dvc exp run --temp` runs the whole pipeline as one command; to keep one Prefect task per stage this
does what it does, with DVC's and git's own commands: a private git worktree of HEAD (plus the
workspace's uncommitted changes) sharing the workspace's DVC cache, the overrides applied to the
worktree's params.yaml by DVC's `--set-param` code, then `dvc repro <stage>` per stage there and
`dvc exp save`, which stores the experiment under the workspace's git refs, so it is listed by
`dvc exp show` and can be restored with `dvc exp apply`. The workspace's params.yaml is never written.
The worktree also gets the workspace's `cache: false` outputs (metrics, copied), so that DVC finds unchanged
stages up to date there and reruns only what the overrides change, and its checkpoint folders (hard links),
so that a stage rerun there with the same fingerprint resumes.
"""
from __future__ import annotations

import errno
import logging
import os
import shutil
from pathlib import Path

from dvc.config import Config
from dvc.exceptions import InvalidArgumentError
from dvc.repo import Repo
from dvc.utils.hydra import apply_overrides

from flows.commands import CommandFailed, dvc, run
from flows.graph import StageInfo
from flows.validation import check_override_sizes
from stages.common.runtime.params import shorten, shown

Log = logging.Logger | logging.LoggerAdapter


def create_worktree(workspace: Path, exp_dir: Path, log: Log) -> None:
    """A detached git worktree of HEAD with the workspace's uncommitted files, sharing its DVC cache (the
    outputs are checked out once the overrides are applied: `checkout`)."""
    try:
        run(["git", "rev-parse", "--verify", "--quiet", "HEAD"], workspace, log, quiet=True)
    except CommandFailed as e:
        raise ValueError(f"{workspace}: no git commit yet; DVC experiments are based on one, commit first") from e
    exp_dir.parent.mkdir(parents=True, exist_ok=True)
    run(["git", "worktree", "add", "--detach", str(exp_dir), "HEAD"], workspace, log)
    copy_uncommitted(workspace, exp_dir, log)
    share_cache(workspace, exp_dir)


def share_cache(workspace: Path, exp_dir: Path) -> None:
    """Point the worktree at the workspace's DVC cache, what `dvc cache dir --local <dir>` and
    `dvc config --local cache.type hardlink,copy` write, through DVC's config code in this process (a DVC
    start costs a second or more; three of them were most of an up-to-date experiment's time).

    Links instead of copies: checking out a large pipeline costs no disk and little time. DVC makes
    linked files read-only and unlinks outputs before a stage rewrites them, so the cache stays intact."""
    with Repo(str(workspace)) as repo:
        cache_dir = repo.cache.local_cache_dir
    with Config(dvc_dir=str(exp_dir / ".dvc")).edit("local") as conf:
        conf["cache"]["dir"] = cache_dir
        conf["cache"]["type"] = "hardlink,copy"


def checkout(exp_dir: Path, log: Log) -> None:
    """The cached outputs of the worktree's dvc.lock, linked from the shared cache (what is not in the
    cache stays missing: those stages are stale anyway)."""
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


def link_uncached_outputs(workspace: Path, exp_dir: Path, stages: list[StageInfo], log: Log,
                          checkpoint_dirs: tuple[str, ...] | list[str] = ()) -> None:
    """Give the worktree what neither git nor `dvc checkout` brings: the workspace's `cache: false` outputs
    (e.g. a gitignored metrics/), without which DVC sees every stage that declares one as changed and
    reruns it and everything after it; and `checkpoint_dirs`, folders of resumable work that are not DVC
    outputs (flows/config.yaml), so that a stage rerun in the worktree with the same fingerprint (say, after
    an override of a setting that changes no result) resumes from the workspace's checkpoints.

    A file (metrics, plots: small) is copied, since a stage may rewrite it in place (`open(path, "w")`),
    which through a link would change the workspace's copy. A folder (checkpoints: gigabytes) is a tree of
    hard links, no bytes copied: checkpoint folders are only ever changed by writing new files and
    renaming or deleting them (stages/common/training/checkpoint.py: a new `.step_<n>.tmp` renamed into
    place, old steps and other runs' checkpoints removed whole), which replaces the worktree's links and
    leaves the workspace's files as they are. What git already put in the worktree is kept."""
    linked, copied = [], []
    for rel in [*(rel for stage in stages for rel in stage.uncached), *checkpoint_dirs]:
        src, dst = workspace / rel, exp_dir / rel
        if dst.exists() or not src.exists():
            continue
        dst.parent.mkdir(parents=True, exist_ok=True)
        if src.is_dir():
            shutil.copytree(src, dst, symlinks=True, copy_function=_link_or_copy)
            linked.append(rel)
        else:
            shutil.copy2(src, dst)
            copied.append(rel)
    if linked or copied:
        log.info("from the workspace: %d folder(s) linked (%s), %d metrics/plots file(s) copied",
                 len(linked), ", ".join(linked) or "none", len(copied))


def _link_or_copy(src: str, dst: str) -> None:
    try:
        os.link(src, dst)
    except OSError as e:
        if e.errno != errno.EXDEV:
            raise
        shutil.copy2(src, dst)  # the output lives on another file system than the workspace's .dvc/tmp


def set_params(exp_dir: Path, overrides: list[str]) -> None:
    """Apply `--set-param` overrides (`section.key=value`, Hydra syntax) to the worktree's params.yaml,
    with the code `dvc exp run --set-param` uses (comments and layout are kept). Their number and length are
    checked first: DVC parses them with Hydra, whose time grows with the square of an override's length."""
    check_override_sizes(overrides)
    try:
        apply_overrides(exp_dir / "params.yaml", list(overrides))
    except InvalidArgumentError as e:
        # DVC's message alone ("Invalid `--set-param` value") does not say which one or why.
        raise ValueError(f"invalid parameter override(s) {shown(list(overrides))}: "
                         f"{shorten(' '.join(str(e.__cause__ or e).split()), 200)}") from e


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
    """Delete the worktree's folder, then let git forget it (also one left half made by a killed run,
    which `git worktree remove` would refuse)."""
    shutil.rmtree(exp_dir)
    run(["git", "worktree", "prune"], workspace, log, quiet=True)
    log.info("removed the experiment worktree %s", exp_dir)


def remove_leftover_worktrees(workspace: Path, exps_dir: Path, log: Log) -> None:
    """Remove every worktree under `exps_dir`: at the start of a run, which holds the workspace lock, any
    one there was left by a run that was cancelled or killed before it could remove its own."""
    leftovers = sorted(exps_dir.iterdir()) if exps_dir.is_dir() else []
    for path in leftovers:
        log.warning("removing %s, left by an earlier run", path)
        shutil.rmtree(path)
    if leftovers:
        run(["git", "worktree", "prune"], workspace, log, quiet=True)
