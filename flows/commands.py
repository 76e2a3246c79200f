"""Running DVC and git as external commands, their output streamed line by line into a logger.

Commands are argument lists, never shell strings, so nothing from params or the UI is ever parsed by a
shell. DVC runs as `python -m dvc` from this interpreter, and the interpreter's folder leads PATH, so
the `python` of each dvc.yaml command is the same virtual environment.
"""
from __future__ import annotations

import logging
import os
import signal
import subprocess
import sys
from collections import deque
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import IO

TAIL_LINES = 30  # output lines kept for an error message: the stage's own traceback ends there
DVC_LOCK_BUSY = "Unable to acquire lock"  # DVC's message when another dvc process holds the repo
STOP_GRACE_S = 10  # an interrupted command's time to exit after SIGTERM before SIGKILL
CREDENTIAL_VARS = ("PREFECT_API_AUTH_STRING", "PREFECT_SERVER_API_AUTH_STRING")


class CommandFailed(RuntimeError):
    """An external command exited non-zero; the message ends with its last output lines."""

    def __init__(self, what: str, returncode: int, tail: list[str]) -> None:
        self.returncode = returncode
        self.tail = tail
        super().__init__(f"{what} failed (exit {returncode}):\n" + "\n".join(tail))

    @property
    def dvc_lock_busy(self) -> bool:
        return any(DVC_LOCK_BUSY in line for line in self.tail)


@dataclass(frozen=True)
class CommandResult:
    output: list[str]  # every line, for callers that parse it (DVC's progress markers, --json)


def dvc(*args: str) -> list[str]:
    return [sys.executable, "-m", "dvc", *args]


def command_env() -> dict[str, str]:
    bin_dir = str(Path(sys.executable).parent)
    # No PYTHONUNBUFFERED: the stages log to stderr (line-buffered anyway), and unbuffered writes made a
    # stage that forks worker processes while other threads write (semantic_filter's pool) deadlock.
    # Stages never talk to Prefect: they do not get the API credentials (flows/serve.py).
    env = {k: v for k, v in os.environ.items() if k not in CREDENTIAL_VARS}
    return {**env, "PATH": f"{bin_dir}{os.pathsep}{os.environ.get('PATH', '')}", "DVC_NO_ANALYTICS": "1"}


def _lines(stream: IO[bytes]) -> Iterator[str]:
    """Lines of a byte stream split on \\n only: a progress bar's \\r updates collapse to their last state
    (text mode would turn every \\r into a line and flood the log)."""
    for raw in stream:
        line = raw.decode("utf-8", errors="replace").rstrip("\r\n").split("\r")[-1]
        yield line.rstrip()


def _stop(proc: subprocess.Popen, log: logging.Logger | logging.LoggerAdapter) -> None:
    """SIGTERM to the command's process group, SIGKILL if it is still there after STOP_GRACE_S."""
    for sig in (signal.SIGTERM, signal.SIGKILL):
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            return
        try:
            proc.wait(timeout=STOP_GRACE_S)
            return
        except subprocess.TimeoutExpired:
            log.warning("command %d did not stop within %g s of SIGTERM: killing it", proc.pid, STOP_GRACE_S)


def run(args: list[str], cwd: Path, log: logging.Logger | logging.LoggerAdapter, what: str = "",
        quiet: bool = False) -> CommandResult:
    """Run `args` in `cwd`, logging each output line (stderr merged) as it comes; raise CommandFailed."""
    what = what or " ".join(Path(a).name if i == 0 else a for i, a in enumerate(args))
    log.debug("$ %s (in %s)", " ".join(args), cwd)
    output: list[str] = []
    tail: deque[str] = deque(maxlen=TAIL_LINES)
    # A session of its own, so that the command and everything it starts (dvc's stage command, torchrun's
    # workers) can be stopped together: a run that is cancelled or interrupted stops its stage with it.
    with subprocess.Popen(args, cwd=cwd, env=command_env(), stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                          stdin=subprocess.DEVNULL, start_new_session=True) as proc:
        try:
            for line in _lines(proc.stdout):
                output.append(line)
                tail.append(line)
                if line and not quiet:
                    log.info("%s", line)
        except BaseException:  # cancellation (SIGTERM), Ctrl-C: not swallowed, the command is stopped first
            _stop(proc, log)
            raise
    if proc.returncode != 0:
        raise CommandFailed(what, proc.returncode, list(tail))
    return CommandResult(output)
