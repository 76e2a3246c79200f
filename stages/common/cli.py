"""The command line every stage shares: `python -m stages.<name> [--params params.yaml]`."""
from __future__ import annotations

import argparse
import logging
from collections.abc import Callable
from typing import Any

from stages.common.params import load_section


def stage_main(stage: str, params_cls: type, run: Callable[[Any], Any], doc: str | None,
               argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog=f"python -m stages.{stage}", description=(doc or stage).splitlines()[0])
    parser.add_argument("--params", default="params.yaml", help=f"params file (section `{stage}`)")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(levelname)s %(message)s")
    run(load_section(stage, params_cls, args.params))
