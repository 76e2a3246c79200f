"""Metrics files: the headline and the detail, and never a NaN in either."""
import json
import math

import numpy as np
import pytest

from stages.common.runtime.metrics import rounded, select, write_metrics


def test_headline_is_rounded_and_the_detail_kept_whole(tmp_path):
    metrics = {"kept.en": 3, "kept.zh": 4, "docs_per_s": 1051.416, "share": 0.012345}
    write_metrics(metrics, {"docs_per_s": metrics["docs_per_s"], "share": metrics["share"]}, tmp_path / "m.json",
                  tmp_path / "detail" / "m.json")
    assert json.loads((tmp_path / "detail" / "m.json").read_text()) == metrics
    assert json.loads((tmp_path / "m.json").read_text()) == {"docs_per_s": 1051.0, "share": 0.01235}
    assert select(metrics, "kept") == {"en": 3, "zh": 4} and rounded("text") == "text"


@pytest.mark.parametrize("bad", [math.nan, math.inf, -math.inf, np.float32("nan"), np.float64("inf")])
def test_a_non_finite_figure_is_refused_by_key_and_nothing_is_written(tmp_path, bad):
    metrics = {"num_val_docs": 0, "val_perplexity": bad, "num_docs": 69}
    with pytest.raises(ValueError, match=r"detail\.json: metric 'val_perplexity' is -?(nan|inf), not a finite number"):
        write_metrics(metrics, {"num_docs": 69}, tmp_path / "m.json", tmp_path / "detail.json")
    with pytest.raises(ValueError, match=r"m\.json: metric 'ref_val_ppl' is .*\(also 'tokens_per_s'\)"):
        write_metrics({"num_docs": 69}, {"ref_val_ppl": bad, "tokens_per_s": math.nan}, tmp_path / "m.json",
                      tmp_path / "detail.json")
    assert list(tmp_path.iterdir()) == []
