"""The end-of-run summary: one screen from the detail metrics, whatever has run so far."""
from __future__ import annotations

import json
from pathlib import Path

import yaml

from flows.summary import summary_text

EXPORT_CSV = """model,precision,num_params,file_mb,latency_ms_b1,latency_ms_b1_median,tokens_per_s_b8,val_ppl_easy,val_ppl_medium,val_ppl_hard,val_ppl_all
trained,fp32,1377408,5.3062,2.5727,2.7,50538.2,27.9529,130.7994,136.99,83.3127
qat_int8,int8,1016960,1.0698,1.5883,1.8,92287.9,24.305,123.2855,128.7216,76.5425
"""


def workspace(tmp_path: Path, **details: dict) -> Path:
    params = {stage: {"detail_path": f"metrics/detail/{stage}.json"}
              for stage in ("clean", "semantic_filter", "perplexity", "train")}
    params["export"] = {"plot_path": "metrics/export.csv"}
    (tmp_path / "params.yaml").write_text(yaml.safe_dump(params), encoding="utf-8")
    for stage, metrics in details.items():
        path = tmp_path / "metrics" / "detail" / f"{stage}.json"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(metrics), encoding="utf-8")
    return tmp_path


def test_summary_of_a_finished_run_fits_one_screen(tmp_path: Path) -> None:
    root = workspace(
        tmp_path,
        clean={"num_read": 100, "num_kept": 60, "num_quarantined": 40, "kept.en": 35, "kept.zh": 25},
        semantic_filter={"num_read": 60, "num_kept": 50, "num_quarantined": 10, "kept.en": 30, "kept.zh": 20},
        perplexity={**{f"docs.{lang}.{tier}": n for lang, n in (("en", 10), ("zh", 6))
                       for tier in ("easy", "medium", "hard")},
                    **{f"docs.train.{t}": 15 for t in ("easy", "medium", "hard")},
                    **{f"docs.val.{t}": 1 for t in ("easy", "medium", "hard")},
                    **{f"tokens.train.{t}": 2_328_103 for t in ("easy", "medium", "hard")}},
        train={"val.easy.perplexity": 25.97, "val.medium.perplexity": 125.6, "val.hard.perplexity": 136.9,
               "steps": 400, "tokens_seen": 1638400, "num_params": 1377408, "seconds": 107.0})
    (root / "metrics" / "export.csv").write_text(EXPORT_CSV, encoding="utf-8")
    text = summary_text(root)
    lines = text.splitlines()
    assert len(lines) <= 30 and max(map(len, lines)) <= 100
    assert any(line.split() == ["all", "100", "60", "50", "16", "16", "16"] for line in lines)
    assert any(line.split() == ["en", "35", "30", "10", "10", "10"] for line in lines)
    assert "(50 quarantined" in text and "easy 2.33M" in text
    assert "easy 25.97 | medium 125.60 | hard 136.90" in text
    qat = next(line for line in lines if line.startswith("qat_int8")).split()
    assert qat == ["qat_int8", "int8", "1.02M", "1.07", "1.59", "24.30", "123.29", "128.72"]


def test_summary_before_anything_ran_says_so(tmp_path: Path) -> None:
    text = summary_text(workspace(tmp_path))
    assert "clean stage has not run yet" in text and "train stage has not run yet" in text
    assert "export stage has not run yet" in text


def test_summary_shows_the_funnel_of_each_source(tmp_path: Path) -> None:
    sources = {"source.crawl.num_read": 32, "source.crawl.num_kept": 20, "source.export.num_read": 51,
               "source.export.num_kept": 11}
    root = workspace(tmp_path, clean={"num_read": 83, "num_kept": 31, "num_quarantined": 52, "kept.en": 31, **sources},
                     semantic_filter={"num_read": 31, "num_kept": 29, "kept.en": 29, "source.crawl.num_kept": 19,
                                      "source.export.num_kept": 10})
    lines = summary_text(root).splitlines()
    assert "  source crawl                32      20        19" in lines
    assert "  source export               51      11        10" in lines
    one = workspace(tmp_path, clean={"num_read": 83, "num_kept": 31, "source.demo.num_read": 83,
                                     "source.demo.num_kept": 31})
    assert "source demo" not in summary_text(one)  # one source: the language rows say it all


def test_figures_of_stale_stages_are_marked(tmp_path: Path) -> None:
    root = workspace(tmp_path, clean={"num_read": 100, "num_kept": 60, "kept.en": 60},
                     train={"val.easy.perplexity": 25.97, "steps": 400})
    (root / "metrics" / "export.csv").write_text(EXPORT_CSV)
    fresh = summary_text(root)
    assert "stale" not in fresh and "clean*" not in fresh
    text = summary_text(root, frozenset({"train", "export"}))
    assert "Trained model (stale): train would rerun" in text and "(stale) export would rerun" in text
    assert "clean*" not in text
    text = summary_text(root, frozenset({"clean"}))
    assert "clean*" in text.splitlines()[0] and "* stale: clean would rerun" in text
