"""Prefect artifacts of a pipeline run: each stage's metrics, then a summary with the model comparison.

Keys are stable (`stage-<name>`, `model-comparison`, `pipeline-summary`), so the UI shows each one's
history across runs. Tables and markdown are built from plain dicts by small pure functions.
"""
from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml
from prefect.artifacts import create_markdown_artifact, create_table_artifact

from flows.graph import StageInfo


def artifact_key(*parts: str) -> str:
    """Prefect keys allow lowercase letters, digits and dashes only."""
    text = "-".join(parts).lower()
    return "".join(c if c.isalnum() and c.isascii() else "-" for c in text).strip("-")


def flatten(data: Any, prefix: str = "") -> dict[str, Any]:
    """Nested metrics as `a.b.c` keys, like `dvc metrics show`."""
    if not isinstance(data, dict):
        return {prefix or "value": data}
    flat: dict[str, Any] = {}
    for key, value in data.items():
        name = f"{prefix}.{key}" if prefix else str(key)
        flat.update(flatten(value, name) if isinstance(value, dict) else {name: value})
    return flat


def read_metrics(path: Path) -> dict[str, Any]:
    """A JSON or YAML metrics file (YAML reads both)."""
    data = yaml.safe_load(path.read_text(encoding="utf-8"))
    return data if isinstance(data, dict) else {"value": data}


def metric_rows(stage: StageInfo, root: Path) -> list[dict[str, Any]]:
    return [{"file": rel, "metric": key, "value": value}
            for rel in stage.metrics if (root / rel).is_file()
            for key, value in flatten(read_metrics(root / rel)).items()]


def publish_stage(stage: StageInfo, root: Path, outcome: str) -> None:
    """The stage's metrics as a table artifact (a markdown note for a stage that declares none)."""
    key = artifact_key("stage", stage.name)
    rows = metric_rows(stage, root)
    if rows:
        create_table_artifact(rows, key=key, description=f"`{stage.name}` ({outcome}): {', '.join(stage.metrics)}")
        return
    outs = "\n".join(f"- `{o}`" for o in stage.outs) or "- (none)"
    create_markdown_artifact(f"### `{stage.name}` ({outcome})\n\nNo metrics declared. Outputs:\n\n{outs}\n",
                             key=key, description=f"`{stage.name}`: no metrics")


def comparison_rows(metrics: dict[str, Any]) -> list[dict[str, Any]]:
    """One row per model when metrics are grouped by model (`{model: {metric: value}}`); the ungrouped
    numbers form a last row, so nothing in the file is hidden."""
    grouped = {k: v for k, v in metrics.items() if isinstance(v, dict)}
    rows = [{"model": name, **flatten(values)} for name, values in grouped.items()]
    rest = {k: v for k, v in metrics.items() if k not in grouped}
    if rest:
        rows.append({"model": "(all)", **rest})
    return rows


def markdown_table(rows: list[dict[str, Any]]) -> str:
    columns = list(dict.fromkeys(c for row in rows for c in row))
    lines = ["| " + " | ".join(columns) + " |", "|" + "---|" * len(columns)]
    lines += ["| " + " | ".join(_cell(row.get(c, "")) for c in columns) + " |" for row in rows]
    return "\n".join(lines)


def _cell(value: Any) -> str:
    return f"{value:.6g}" if isinstance(value, float) else str(value).replace("|", "\\|")


def link(path: Path, label: str = "") -> str:
    return f"[{label or path.name}]({path.resolve().as_uri()})"
