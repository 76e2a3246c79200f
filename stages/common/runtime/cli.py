"""The command line every stage shares: `python -m stages.<name> [--params params.yaml]`.

Stages that run distributed (train, prune, qat) pass `torchrun`: their command then launches
`torchrun --standalone` with the process count and restart budget from params, and each worker process
(torchrun sets LOCAL_RANK) runs the stage's `run`. For several nodes, start `torchrun --nnodes ...
-m stages.<name>` yourself on each: a worker does not care who launched it.

A mistake in params.yaml or in the inputs it names (any ValueError while the section loads, a
`ConfigError` from the stage's own checks) is printed as one line, `error: param '<stage>.<key>': ...`,
and the command exits with status 2, before torchrun or any work starts. An input file that cannot be
read whole (`InputError`: corrupt, cut short, or a remote read that failed after its retries) is one line
too, with status 1. Other errors keep their traceback.
"""
from __future__ import annotations

import argparse
import logging
import os
import subprocess
import sys
from collections.abc import Callable
from typing import Any, NoReturn

from stages.common.runtime.params import ConfigError, load_section
from stages.common.runtime.urls import InputError

log = logging.getLogger("refinery.cli")
CONFIG_ERROR_STATUS = 2  # as argparse exits on a wrong command line
INPUT_ERROR_STATUS = 1


def config_error(error: Exception) -> NoReturn:
    """Exit on a configuration mistake: its message on one line of stderr, no traceback."""
    print(f"error: {' '.join(str(error).split())}", file=sys.stderr)
    sys.exit(CONFIG_ERROR_STATUS)


def torchrun_argv(stage: str, num_processes: int, max_restarts: int, params_path: str) -> list[str]:
    """torchrun's command as an argument list (no shell): one node, `num_processes` workers."""
    return [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nnodes=1",
            f"--nproc-per-node={num_processes}", f"--max-restarts={max_restarts}",
            "-m", f"stages.{stage}", "--params", params_path]


def stage_main(stage: str, params_cls: type, run: Callable[[Any], Any], doc: str | None,
               argv: list[str] | None = None, torchrun: Callable[[Any], tuple[int, int]] | None = None,
               check: Callable[[Any], None] | None = None, epilog: str | None = None) -> None:
    """Parse `--params`, load the stage's section and run it. With `torchrun` (params -> (processes,
    max restarts)), outside a torchrun worker: first `check(params)` (what each worker checks when it
    starts: inputs, outputs), then launch the workers and exit with torchrun's status."""
    description = " ".join((doc or stage).split("\n\n")[0].split())  # the docstring's first paragraph
    parser = argparse.ArgumentParser(prog=f"python -m stages.{stage}", description=description, epilog=epilog)
    parser.add_argument("--params", default="params.yaml", help=f"params file (section `{stage}`)")
    args = parser.parse_args(argv)
    rank = f" [rank {os.environ['RANK']}]" if "RANK" in os.environ else ""
    logging.basicConfig(level=logging.INFO, format=f"%(asctime)s{rank} %(name)s %(levelname)s %(message)s")
    launch = torchrun is not None and "LOCAL_RANK" not in os.environ
    try:
        params = load_section(stage, params_cls, args.params)
        if launch:
            if check is not None:
                check(params)
            num_processes, max_restarts = torchrun(params)
    except ValueError as e:  # params.yaml or the inputs it names: the user's to fix, before anything starts
        config_error(e)
    if not launch:
        try:
            run(params)
        except ConfigError as e:  # the stage's checks at the start of `run`
            config_error(e)
        except InputError as e:  # an input file that cannot be read whole: nothing was published
            print(f"error: {' '.join(str(e).split())}", file=sys.stderr)
            sys.exit(INPUT_ERROR_STATUS)
        return
    command = torchrun_argv(stage, num_processes, max_restarts, args.params)
    log.info("launching %s", " ".join(command))
    # torchrun gives each worker OMP_NUM_THREADS=1 when it is unset, and says so in a four-line banner on
    # every launch; the workers set their own thread count anyway (training.parallel.set_cpu_threads).
    env = {**os.environ, "OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS", "1")}
    sys.exit(subprocess.run(command, check=False, env=env).returncode)
