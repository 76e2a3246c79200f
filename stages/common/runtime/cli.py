"""The command line every stage shares: `python -m stages.<name> [--params params.yaml]`.

Stages that run distributed (train, prune, qat) pass `torchrun`: their command then launches
`torchrun --standalone` with the process count and restart budget from params, and each worker process
(torchrun sets LOCAL_RANK) runs the stage's `run`. For several nodes, start `torchrun --nnodes ...
-m stages.<name>` yourself on each: a worker does not care who launched it.
"""
from __future__ import annotations

import argparse
import logging
import os
import subprocess
import sys
from collections.abc import Callable
from typing import Any

from stages.common.runtime.params import load_section

log = logging.getLogger("refinery.cli")


def torchrun_argv(stage: str, num_processes: int, max_restarts: int, params_path: str) -> list[str]:
    """torchrun's command as an argument list (no shell): one node, `num_processes` workers."""
    return [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nnodes=1",
            f"--nproc-per-node={num_processes}", f"--max-restarts={max_restarts}",
            "-m", f"stages.{stage}", "--params", params_path]


def stage_main(stage: str, params_cls: type, run: Callable[[Any], Any], doc: str | None,
               argv: list[str] | None = None, torchrun: Callable[[Any], tuple[int, int]] | None = None) -> None:
    """Parse `--params`, load the stage's section and run it. With `torchrun` (params -> (processes,
    max restarts)), outside a torchrun worker: launch the workers instead and exit with torchrun's status."""
    parser = argparse.ArgumentParser(prog=f"python -m stages.{stage}", description=(doc or stage).splitlines()[0])
    parser.add_argument("--params", default="params.yaml", help=f"params file (section `{stage}`)")
    args = parser.parse_args(argv)
    rank = f" [rank {os.environ['RANK']}]" if "RANK" in os.environ else ""
    logging.basicConfig(level=logging.INFO, format=f"%(asctime)s{rank} %(name)s %(levelname)s %(message)s")
    params = load_section(stage, params_cls, args.params)
    if torchrun is None or "LOCAL_RANK" in os.environ:
        run(params)
        return
    num_processes, max_restarts = torchrun(params)
    command = torchrun_argv(stage, num_processes, max_restarts, args.params)
    log.info("launching %s", " ".join(command))
    sys.exit(subprocess.run(command, check=False).returncode)
