"""Prefect artifacts of a pipeline run: each stage's metrics, then a summary with the model comparison.

Keys are stable (`stage-<name>`, `model-comparison`, `pipeline-summary`), so the UI shows each one's
history across runs. Tables and markdown are built from plain dicts by small pure functions. Artifacts
hold their content, never links to the run's files: a browser does not open `file://` links from the UI,
and an experiment's files are gone with its worktree.
"""
from __future__ import annotations

import csv
import io
import subprocess
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


# The export stage's per-model table (a CSV output, the data of its plot), as a person reads it; other
# columns keep their names.
MODEL_COLUMNS = {
    "model": "model", "precision": "precision", "num_params": "parameters", "file_mb": "file (MB)",
    "latency_ms_b1": "latency, batch 1, fastest (ms)", "latency_ms_b1_median": "latency, batch 1, median (ms)",
    "tokens_per_s_b8": "tokens/s, batch 8", "val_ppl_easy": "val ppl easy", "val_ppl_medium": "val ppl medium",
    "val_ppl_hard": "val ppl hard", "val_ppl_all": "val ppl all",
}
TABLE_SUFFIXES = {".csv": ",", ".tsv": "\t"}
BASELINE_COLUMN = "val_ppl_all"  # the figure the model comparison sets beside the baseline's


def read_table(path: Path) -> list[dict[str, Any]]:
    """A CSV/TSV file as rows, numbers parsed."""
    with open(path, newline="", encoding="utf-8") as f:
        return [{k: _number(v) for k, v in row.items()}
                for row in csv.DictReader(f, delimiter=TABLE_SUFFIXES[path.suffix.lower()])]


def table_files(stage: StageInfo, root: Path) -> list[str]:
    """The stage's CSV/TSV output files that exist, in dvc.yaml's order: plot data, whether the stage
    declares them as its plots or dvc.yaml's top-level plots draw them."""
    return [rel for rel in stage.outs if Path(rel).suffix.lower() in TABLE_SUFFIXES and (root / rel).is_file()]


def _number(text: str) -> Any:
    for kind in (int, float):
        try:
            return kind(text)
        except ValueError:
            pass
    return text


def model_comparison(stage: StageInfo, root: Path) -> tuple[str, list[dict[str, Any]]] | None:
    """The stage's per-model table: its first CSV/TSV output with a `model` column, one row per model in
    the file's order (the chain's), columns renamed for reading, then each model's validation perplexity
    in the baseline (the table as committed at HEAD: the run an experiment started from) and the change.
    None when it has none."""
    for rel in table_files(stage, root):
        rows = read_table(root / rel)
        if rows and "model" in rows[0]:
            baseline = {row["model"]: row.get(BASELINE_COLUMN) for row in committed_table(root, rel)}
            out = []
            for row in rows:
                renamed = {MODEL_COLUMNS.get(k, k): v for k, v in row.items()}
                base, now = baseline.get(row["model"]), row.get(BASELINE_COLUMN)
                renamed[f"baseline {MODEL_COLUMNS[BASELINE_COLUMN]}"] = base
                renamed["vs baseline"] = (f"{(now - base) / base:+.1%}" if isinstance(base, (int, float)) and base
                                          and isinstance(now, (int, float)) else None)
                out.append(renamed)
            return rel, out
    return None


def committed_table(root: Path, rel: str) -> list[dict[str, Any]]:
    """The CSV/TSV file `rel` as committed at HEAD ([] outside git or where HEAD has no such file)."""
    proc = subprocess.run(["git", "show", f"HEAD:{rel}"], cwd=root, capture_output=True, text=True, check=False)
    if proc.returncode:
        return []
    delimiter = TABLE_SUFFIXES[Path(rel).suffix.lower()]
    return [{k: _number(v) for k, v in row.items()}
            for row in csv.DictReader(io.StringIO(proc.stdout), delimiter=delimiter)]


def output_rows(outs: tuple[str, ...], root: Path) -> list[dict[str, Any]]:
    """Each existing output with its number of files and size."""
    rows = []
    for rel in outs:
        path = root / rel
        files = [p for p in path.rglob("*") if p.is_file()] if path.is_dir() else [path] if path.is_file() else []
        if files:
            rows.append({"output": rel, "files": len(files), "size": size_text(sum(p.stat().st_size for p in files))})
    return rows


def size_text(num_bytes: int) -> str:
    for unit, scale in (("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if num_bytes >= scale:
            return f"{num_bytes / scale:.1f} {unit}"
    return f"{num_bytes} B"


def plot_lines(stages: list[StageInfo], root: Path) -> list[str]:
    """One line per table a stage wrote (what `dvc plots show` draws): its stage, rows and columns."""
    lines = []
    for stage in stages:
        for rel in table_files(stage, root):
            path = root / rel
            with open(path, encoding="utf-8") as f:
                header = f.readline().strip().split(TABLE_SUFFIXES[path.suffix.lower()])
                num_rows = sum(1 for line in f if line.strip())
            lines.append(f"- `{rel}` ({stage.name}): {num_rows} rows of {', '.join(header)}")
    return lines


def markdown_table(rows: list[dict[str, Any]]) -> str:
    columns = list(dict.fromkeys(c for row in rows for c in row))
    lines = ["| " + " | ".join(columns) + " |", "|" + "---|" * len(columns)]
    lines += ["| " + " | ".join(_cell(row.get(c, "")) for c in columns) + " |" for row in rows]
    return "\n".join(lines)


def _cell(value: Any) -> str:
    return f"{value:.6g}" if isinstance(value, float) else str(value).replace("|", "\\|")
