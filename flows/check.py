"""`refinery check` for the flows: the workspace's params.yaml and the inputs it names, checked before a
flow runs anything, so a mistake fails the run before DVC removes any output.

The check runs as the command `python -m stages.check` in the workspace, like every stage
(`dvc repro` runs `python -m stages.<name>` there): it judges params.yaml with the workspace's own stage
code, and this process never imports the stages (nor torch).
"""
from __future__ import annotations

import logging
import os
import subprocess
import sys
from pathlib import Path

from flows.commands import command_env
from flows.config import ROOT

CHECK_MODULE = "stages.check"
CONFIG_ERROR_STATUS = 2  # the check's exit status for mistakes in params.yaml or its inputs


def check_command(root: Path, params: Path | None = None, params_only: bool = False) -> list[str]:
    return [sys.executable, "-m", CHECK_MODULE, "--root", str(root), *(["--params", str(params)] if params else []),
            *(["--params-only"] if params_only else [])]


def stage_env() -> dict[str, str]:
    """The environment of a `python -m stages.*` command started from here: a workspace without its own
    `stages` package (or a checkout that is not installed) imports the one these flows ship with."""
    env = command_env()
    env["PYTHONPATH"] = os.pathsep.join(p for p in (env.get("PYTHONPATH", ""), str(ROOT)) if p)
    return env


def check_workspace(root: Path, log: logging.Logger | logging.LoggerAdapter | None = None) -> None:
    """Run the check on the workspace at `root`; ValueError with its one-line messages (one per mistake)
    when params.yaml or an input it names is wrong, RuntimeError when the check itself fails."""
    proc = subprocess.run(check_command(root), cwd=root, env=stage_env(), capture_output=True, text=True,
                          stdin=subprocess.DEVNULL)
    if proc.returncode == CONFIG_ERROR_STATUS:
        errors = [line.removeprefix("error: ") for line in proc.stderr.splitlines() if line.startswith("error: ")]
        raise ValueError("\n".join(errors) or proc.stderr.strip())
    if proc.returncode != 0:
        raise RuntimeError(f"`{' '.join(check_command(root))}` failed (exit {proc.returncode}):\n"
                           + "\n".join(proc.stderr.splitlines()[-30:]))
    if log is not None:
        log.info("%s", proc.stdout.strip())
