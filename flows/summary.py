"""The run summary `make demo` (and `refinery demo`) prints at the end: one screen, read from metrics/.

`print_summary(root)` prints it for the workspace at `root`; `python -m flows.summary` does the same for
the current directory.
"""
from __future__ import annotations

import sys
from pathlib import Path


def summary_text(root: Path) -> str:
    """The summary as text (placeholder until the headline metrics land)."""
    return "\n".join(f"{p.relative_to(root)}" for p in sorted((root / "metrics").glob("*.json")))


def print_summary(root: Path) -> None:
    print(summary_text(Path(root)))


if __name__ == "__main__":
    print_summary(Path(sys.argv[1]) if len(sys.argv) > 1 else Path.cwd())
