"""The run summary `make demo` (and `refinery demo`) prints at the end: one screen, read from the stages'
detail metrics (paths from params.yaml), so it needs no torch and works on any finished workspace.

    Documents per language   read  clean  semantic   easy  medium   hard
    ...
    Trained model: validation perplexity per tier ...
    Models of the chain (onnxruntime, batch 1): parameters, file size, latency, perplexity per tier

`python -m flows.summary [workspace]` prints it for a workspace (default: the current directory).
Figures of a stage that `dvc repro` would rerun (its inputs, code or params changed since, or a stage
before it did) are marked stale, so new document counts never pass for the models trained on old ones.
"""
from __future__ import annotations

import csv
import json
import subprocess
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from stages.common.lm.tiers import TIERS
from stages.common.runtime.metrics import KEPT, kept, val_perplexity
from stages.common.runtime.params import read_params

STALE = "(stale)"  # beside a figure whose stage `dvc repro` would rerun
REPORT_HINT = "Full report: reports/index.html · compare runs: dvc metrics diff, dvc exp show, dvc plots diff"


def _detail(root: Path, params: Mapping[str, Any], stage: str) -> dict[str, Any]:
    path = params.get(stage, {}).get("detail_path")
    if not path or not (root / path).is_file():
        return {}
    return json.loads((root / path).read_text(encoding="utf-8"))


def _sub(metrics: Mapping[str, Any], prefix: str) -> dict[str, Any]:
    return {k[len(prefix):]: v for k, v in metrics.items() if k.startswith(prefix)}


def _count(value: Any) -> str:
    return "-" if value is None else f"{value:,}"


def _short(value: float) -> str:
    """1377408 -> 1.38M, 2328103 -> 2.33M, 4096 -> 4.1k."""
    for scale, unit in ((1e9, "G"), (1e6, "M"), (1e3, "k")):
        if abs(value) >= scale:
            return f"{value / scale:.3g}{unit}"
    return f"{value:g}"


def funnel_lines(clean: Mapping[str, Any], semantic: Mapping[str, Any], ppl: Mapping[str, Any],
                 stale: frozenset[str] = frozenset()) -> list[str]:
    """Documents per language through the curation stages, then per difficulty tier."""
    if not clean:
        return ["Documents: the clean stage has not run yet."]
    langs = sorted(set(_sub(clean, f"{KEPT}.")) | set(_sub(semantic, f"{KEPT}.")))
    mark = {stage: "*" if stage in stale else "" for stage in ("clean", "semantic_filter", "perplexity")}
    header = (f"{'Documents per language':<24}{'read':>8}{'clean' + mark['clean']:>8}"
              f"{'semantic' + mark['semantic_filter']:>10}" + "".join(f"{t + mark['perplexity']:>8}" for t in TIERS))
    per_tier = [ppl.get(f"docs.train.{t}", 0) + ppl.get(f"docs.val.{t}", 0) if ppl else None for t in TIERS]
    lines = [header, f"{'all':<24}{_count(clean.get('num_read')):>8}{_count(clean.get('num_kept')):>8}"
                     f"{_count(semantic.get('num_kept')):>10}" + "".join(f"{_count(n):>8}" for n in per_tier)]
    for lang in langs:
        lines.append(f"{'  ' + lang:<24}{'':>8}{_count(clean.get(kept(lang))):>8}"
                     f"{_count(semantic.get(kept(lang))):>10}"
                     + "".join(f"{_count(ppl.get(f'docs.{lang}.{t}')):>8}" for t in TIERS))
    sources = sorted({k.split(".")[1] for k in clean if k.startswith("source.") and k.endswith(".num_read")})
    if len(sources) > 1:  # the funnel of each input source (clean.sources)
        for source in sources:
            lines.append(f"{'  source ' + source:<24}{_count(clean.get(f'source.{source}.num_read')):>8}"
                         f"{_count(clean.get(f'source.{source}.num_kept')):>8}"
                         f"{_count(semantic.get(f'source.{source}.num_kept')):>10}")
    dropped = clean.get("num_quarantined", 0) + semantic.get("num_quarantined", 0)
    lines.append(f"  ({_count(dropped)} quarantined, each with its reason, in data/*/quarantine)")
    if ppl:
        tokens = ", ".join(f"{t} {_short(ppl.get(f'tokens.train.{t}', 0))}" for t in TIERS)
        lines.append(f"Tokens for training: {tokens}")
    if any(mark.values()):
        lines.append(f"  * stale: {', '.join(s for s, m in mark.items() if m)} would rerun (`refinery status`): "
                     "these figures are the last run's")
    return lines


def train_lines(train: Mapping[str, Any], stale: frozenset[str] = frozenset()) -> list[str]:
    if not train:
        return ["Trained model: the train stage has not run yet."]
    ppl = " | ".join(f"{t} {train[val_perplexity(t)]:.2f}" for t in TIERS if val_perplexity(t) in train)
    mark = f" {STALE}: train would rerun, on other data or params" if "train" in stale else ""
    return [f"Trained model{mark}: validation perplexity {ppl}",
            f"  {train.get('steps', '?')} steps, {_short(train.get('tokens_seen', 0))} tokens, "
            f"{_short(train.get('num_params', 0))} parameters, {train.get('seconds', 0):.0f} s "
            f"({train.get('num_processes', 1)} processes, {train.get('precision', '?')})"]


def model_lines(rows: list[dict[str, str]], stale: frozenset[str] = frozenset()) -> list[str]:
    """The export stage's comparison: every model of the chain, measured the same way."""
    if not rows:
        return ["Models: the export stage has not run yet."]
    header = f"{'Models (onnxruntime)':<18}{'precision':>10}{'params':>9}{'file MB':>9}{'latency ms':>12}" + "".join(
        f"{'ppl ' + t:>11}" for t in TIERS)
    lines = [header]
    for r in rows:
        lines.append(f"{r['model']:<18}{r['precision']:>10}{_short(float(r['num_params'])):>9}"
                     f"{float(r['file_mb']):>9.2f}{float(r['latency_ms_b1']):>12.2f}"
                     + "".join(f"{float(r[f'val_ppl_{t}']):>11.2f}" for t in TIERS))
    lines.append("  latency: batch 1, fastest of the timed runs; ppl: validation perplexity per tier")
    if "export" in stale:
        lines.append(f"  {STALE} export would rerun: these are the last run's models")
    return lines


def stale_stages_of(root: Path) -> frozenset[str]:
    """The stages `dvc repro` would run in the workspace (none where DVC cannot tell: not a DVC repo)."""
    from flows.commands import command_env, dvc
    from flows.graph import stages_in_order, stale_stages, status_json

    proc = subprocess.run(dvc("status", "--json"), cwd=root, env=command_env(), capture_output=True, text=True,
                          stdin=subprocess.DEVNULL, check=False)
    if proc.returncode:
        return frozenset()
    return frozenset(stale_stages(stages_in_order(root), status_json(proc.stdout.splitlines())))


def summary_text(root: Path, stale: frozenset[str] = frozenset()) -> str:
    """The summary; figures of the stages in `stale` are marked as such."""
    root = Path(root)
    params = read_params(root / "params.yaml")
    plot = params.get("export", {}).get("plot_path")
    rows: list[dict[str, str]] = []
    if plot and (root / plot).is_file():
        with open(root / plot, newline="", encoding="utf-8") as f:
            rows = list(csv.DictReader(f))
    sections = [funnel_lines(_detail(root, params, "clean"), _detail(root, params, "semantic_filter"),
                             _detail(root, params, "perplexity"), stale),
                train_lines(_detail(root, params, "train"), stale),
                model_lines(rows, stale),
                [REPORT_HINT]]
    return "\n\n".join("\n".join(lines) for lines in sections)


def print_summary(root: Path, check_stale: bool = True) -> None:
    """Print the summary; `check_stale` asks DVC which figures are stale (not needed right after a repro)."""
    root = Path(root)
    print(summary_text(root, stale_stages_of(root) if check_stale and (root / ".dvc").is_dir() else frozenset()))


if __name__ == "__main__":
    print_summary(Path(sys.argv[1]) if len(sys.argv) > 1 else Path.cwd())
