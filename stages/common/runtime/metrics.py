"""Metrics files: the few headline figures people compare between runs, and the full detail beside them.

A stage computes one flat dict of figures (`a.b.c` keys). `write_metrics` writes all of it to the stage's
`detail_path`, an output the report reads, and a handful of headline figures to `metrics_path`, the file
dvc.yaml declares as the stage's metrics: `dvc metrics show/diff` and `dvc exp show` stay one screen wide.
Stages that report the same kind of figure use the same headline name (`num_read`, `kept.<lang>`,
`docs_per_s`, `val_ppl.<tier>`, ...), so DVC puts them in one column.

Every figure is a finite number (or a string, a flag): a NaN or an infinity is refused before either file is
written, naming its key. A figure that cannot be measured (an empty split, an empty tier) is left out, or
the stage stops earlier and says why; it never reaches `dvc metrics show` as NaN.
"""
from __future__ import annotations

import math
import numbers
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from stages.common.runtime.atomic import write_json

SIGNIFICANT_DIGITS = 4  # headline floats only; the detail file keeps full precision
KEPT = "kept"  # the prefix of `kept(lang)`, for `select`


# The names of the figures that code other than their stage reads (the report, the flow summary, bench): one
# definition each, used by the stage that writes the figure and by every reader.
def kept(lang: str) -> str:
    """Documents a filter stage (clean, semantic_filter) keeps in language `lang`: headline and detail."""
    return f"{KEPT}.{lang}"


def threshold(lang: str) -> str:
    """semantic_filter's drop threshold for language `lang` (`*`: the pooled head's)."""
    return f"threshold.{lang}"


def semantic_val(lang: str, figure: str) -> str:
    """semantic_filter's validation `figure` (precision, recall, num_keep, ...) for language `lang`."""
    return f"val.{lang}.{figure}"


def val_perplexity(tier: str, start: bool = False) -> str:
    """train's validation perplexity on `tier` (`all`: every tier) after the last step, or before the first."""
    return f"val.{tier}.perplexity" + ("_start" if start else "")


def val_ppl(tier: str) -> str:
    """The headline of `val_perplexity(tier)`, which `dvc metrics show` lists."""
    return f"val_ppl.{tier}"


def rounded(value: Any) -> Any:
    """A float to SIGNIFICANT_DIGITS significant digits (1051.416 -> 1051.0, 0.012345 -> 0.01235)."""
    return float(f"{value:.{SIGNIFICANT_DIGITS}g}") if isinstance(value, float) else value


def select(metrics: Mapping[str, Any], prefix: str) -> dict[str, Any]:
    """The figures under `prefix.` with the prefix removed, in key order (`kept.` -> {"en": .., "zh": ..})."""
    return {k[len(prefix) + 1:]: v for k, v in sorted(metrics.items()) if k.startswith(prefix + ".")}


def check_finite(metrics: Mapping[str, Any], path: str | Path) -> None:
    """ValueError naming the figures bound for `path` that are NaN or infinite."""
    bad = [k for k, v in sorted(metrics.items()) if isinstance(v, numbers.Real) and not math.isfinite(v)]
    if bad:
        raise ValueError(f"{path}: metric {bad[0]!r} is {metrics[bad[0]]}, not a finite number"
                         + (f" (also {', '.join(map(repr, bad[1:]))})" if bad[1:] else "")
                         + ": a figure that cannot be measured is left out, not written as NaN")


def write_metrics(metrics: Mapping[str, Any], headline: Mapping[str, Any], metrics_path: str | Path,
                  detail_path: str | Path) -> None:
    """Every figure to `detail_path`, the headline (floats rounded) to `metrics_path`; nothing written when a
    figure is not finite (`check_finite`)."""
    check_finite(metrics, detail_path)
    check_finite(headline, metrics_path)
    write_json(detail_path, dict(metrics))
    write_json(metrics_path, {k: rounded(v) for k, v in headline.items()})
