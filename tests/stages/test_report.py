"""The report stage on a tiny finished run (tests/fixtures/report.py): every section, counts that add up, text
escaped, no address anywhere in the file, and headless Chromium renders a non-blank page holding each section."""
from __future__ import annotations

import hashlib
import html
import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from stages import report
from stages.common.report import browser
from stages.common.report.html import SECTIONS
from tests.conftest import ROOT, skip_or_fail
from tests.fixtures.report import write_lineage_files, write_run

# an absolute address (any scheme) or a protocol-relative one in an attribute or a stylesheet
SCHEME_RE = re.compile(r"[a-z][a-z0-9+.-]*://", re.IGNORECASE)
ATTRIBUTE_RE = re.compile(r"""\b(?:src|href|srcset|action|poster|data|xlink:href)\s*=\s*["']?([^"'\s>]*)""", re.IGNORECASE)


def make_params(root: Path, **overrides) -> report.Params:
    """Params with paths relative to `root`, the working directory of the test (as under `dvc repro`)."""
    write_run(root)
    write_lineage_files(root)
    return report.Params(
        clean_dir="data/clean", filtered_dir="data/semantic_filter",
        semantic_validation_path="models/semantic_head/validation.parquet", docs_dir="data/perplexity/docs",
        metrics_dir="metrics/detail", hist_path="metrics/perplexity_hist.csv",
        train_steps_path="metrics/train_steps.csv", train_val_path="metrics/train_val.csv",
        export_table_path="metrics/export.csv", samples_path="models/export/samples.json",
        params_path="params.yaml", lock_path="dvc.lock", out_path="reports/index.html",
        funnel_path="metrics/funnel.csv", **{"curriculum_path": "", **overrides})


@pytest.fixture
def page(tmp_path, monkeypatch) -> str:
    monkeypatch.chdir(tmp_path)
    result = report.run(make_params(tmp_path))
    text = (tmp_path / "reports" / "index.html").read_text(encoding="utf-8")
    assert result["bytes"] == len(text.encode())
    funnel = (tmp_path / "metrics" / "funnel.csv").read_text(encoding="utf-8").splitlines()  # `dvc plots show`
    assert funnel[:3] == ["step,lang,docs", "read,all,46", "kept by clean,all,27"]
    assert "kept by semantic_filter,en,12" in funnel and "kept by semantic_filter,zh,9" in funnel
    return text


def cells(page: str, first: str) -> list[str]:
    """The cells of the table row whose first cell is `first`, unescaped, tags removed."""
    row = re.search(rf"<tr[^>]*><td[^>]*>{re.escape(first)}</td>(.*?)</tr>", page)
    assert row, first
    return [html.unescape(re.sub(r"<[^>]+>", "", c)) for c in re.findall(r"<td[^>]*>(.*?)</td>", row.group(1))]


def test_the_page_holds_every_section_with_counts_that_add_up(page):
    for sid, title in SECTIONS:
        assert f'<section id="{sid}"><h2>{html.escape(title)}</h2>' in page and f'href="#{sid}"' in page
    # 27 clean documents + 19 quarantined = 46 read; 21 kept by the semantic filter (12 en, 9 zh)
    assert cells(page, "read")[:2] == ["46", "100.0%"]
    assert cells(page, "kept by clean")[:4] == ["27", "58.7%", "15", "12"]
    assert cells(page, "kept by semantic_filter")[:4] == ["21", "45.7%", "12", "9"]
    tiers = [int(cells(page, f"tier {t}")[0]) for t in ("easy", "medium", "hard")]
    assert sum(tiers) == 21
    assert "clean: 19 of 46 documents dropped (41.3%)" in page
    assert "semantic_filter: 6 of 27 documents dropped (22.2%)" in page
    # families sorted by count, each with its reasons; drops of other languages count as `other`
    clean = page[page.index("clean: 19 of 46"):page.index("semantic_filter: 6 of 27")]
    families = re.findall(r'<tr class="family"><td>([^<]+)</td>', clean)
    assert families == ["language", "quality rule", "duplicate", "invalid record"]
    assert cells(page, "<code>lang:de</code>")[-1] == "5"
    assert "0.350" in page and "0.500" in page  # the semantic filter's thresholds per language
    assert page.count('<polyline') >= 6 and page.count("<svg") >= 11  # curves, histograms, funnel
    assert cells(page, "qat_int8")[0] == "int8" and "The river walks" in page and "我们的河流" in page
    exact_on = cells(page, "x86 CPUs whose integer kernels compute the INT8 file exactly")
    assert exact_on == ["int8.exact_on", "every x86 CPU with AVX2 or later"]
    assert cells(page, html.escape("largest |w_a| + |w_b| of same-sign int8 weights adjacent along K "
                                   "(<= 128: exact without VNNI)"))[-1] == "126"


def test_the_curriculum_study_shows_under_training_only_when_its_results_are_there(page, tmp_path):
    assert "Does the curriculum help?" not in page  # no curriculum_path: no section
    arm = {"final_loss": {"all": {"mean": 5.1, "std": 0.02, "min": 5.08, "max": 5.12}}, "reached": "3/3"}
    study = {"date": "2026-01-01 00:00 UTC", "setup": {"preset": "cpu_small", "steps": 150, "tokens_per_arm": 614400,
                                                       "seeds": [0, 1, 2]},
             "comparison": {"alpha": 0.05, "target_loss": 5.1, "arms": {
                 "uniform": arm, "moving": {**arm, "diff_vs_baseline": 0.03, "welch": {"p": 0.21}, "significant": False,
                                            "reached": "0/3"}}},
             "stability": {"variants": [{"name": "seed 1", "per_lang": {"en": {"spearman": 0.97, "same_tier": 0.88}}}]}}
    (tmp_path / "curriculum.json").write_text(json.dumps(study))
    for path, shown in (("curriculum.json", True), ("absent.json", False)):
        report.run(make_params(tmp_path, curriculum_path=path))
        text = (tmp_path / "reports" / "index.html").read_text(encoding="utf-8")
        assert ("Does the curriculum help?" in text) == shown
    report.run(make_params(tmp_path, curriculum_path="curriculum.json"))
    text = (tmp_path / "reports" / "index.html").read_text(encoding="utf-8")
    assert cells(text, "moving") == ["5.1000 ± 0.0200", "5.0800–5.1200", "+0.0300", "0.210", "no", "0/3"]
    assert cells(text, "seed 1") == ["en", "0.970", "88.0%"]
    # a file written before the Holm correction: its raw p, said to be uncorrected
    assert "Welch p (uncorrected)" in text and "Holm" not in text
    # the current file: the Holm-corrected p over the whole family, and `significant` follows it
    study["setup"]["eval_windows"] = 64
    study["statistics"] = {"commit": "abc1234", "date": "2026-01-02 00:00 UTC", "command": "python -m bench.curriculum"}
    study["comparison"]["correction"] = {"method": "holm", "num_tests": 12}
    study["comparison"]["arms"]["moving"].update(welch={"p": 0.04, "p_holm": 0.48}, significant=False,
                                                 significant_raw=True)
    (tmp_path / "curriculum.json").write_text(json.dumps(study))
    report.run(make_params(tmp_path, curriculum_path="curriculum.json"))
    text = (tmp_path / "reports" / "index.html").read_text(encoding="utf-8")
    assert cells(text, "moving") == ["5.1000 ± 0.0200", "5.0800–5.1200", "+0.0300", "0.480", "no", "0/3"]
    assert "Holm-corrected over 12 tests" in text and ">Holm p</th>" in text and "uncorrected" not in text
    assert "the first 64 windows of each tier of the val split" in text and "whole validation split" not in text


def test_text_is_escaped_and_the_file_names_no_address(page):
    assert "<script" not in page.lower() and "&lt;script&gt;" in page and "&lt;b&gt;runs&lt;/b&gt;" in page
    assert not SCHEME_RE.search(page), SCHEME_RE.search(page)
    assert "https[:]//example.com/page" in page  # addresses in examples are defanged, not dropped
    assert all(value.startswith("#") for value in ATTRIBUTE_RE.findall(page)), ATTRIBUTE_RE.findall(page)
    assert "url(" not in page and "@import" not in page
    assert "default-src 'none'" in page  # the browser refuses any request the page might still make
    assert "\x00" not in page and "\\x00\\x07" in page


def test_examples_are_few_and_short(page):
    examples = [html.unescape(e) for e in re.findall(r"<div class=ex>(.*?)</div>", page, re.DOTALL)]
    drops = [e for e in examples if not e.startswith("perplexity ")]
    # per stage and family, the 2 most frequent reasons, 3 records each at most
    assert page.count("<h4>clean: <code>") == 7 and page.count("<h4>semantic_filter: <code>") == 2
    assert len(drops) == 3 + 3 + 3 + 2 + 2 + 1 + 2 + 3 + 2
    assert all(len(e) <= 300 + len("…") + 4 * 2 for e in drops)  # control characters become \xNN
    tiers = [e for e in examples if e.startswith("perplexity ")]
    assert len(tiers) == 2 * 2 * 3  # 2 per language and tier
    # a rule's drop shows the text it judged and what it measured, not the raw record
    judged = [e for e in drops if "judged text" in e]
    assert len(judged) == 2 and all(e.startswith("<b>measured 1</b> judged text ") for e in judged)


def test_lineage_names_the_revision_params_digest_and_the_lock_digests(page, tmp_path):
    assert hashlib.sha256((tmp_path / "params.yaml").read_bytes()).hexdigest() in page
    assert cells(page, "data/clean") == ["data/clean", "clean", "c0ffee.dir"]
    assert cells(page, "data/perplexity/docs") == ["data/perplexity", "perplexity", "beef.dir"]
    assert "not a git checkout" in page  # tmp_path is no repository
    for library in ("torch", "onnxruntime", "pyarrow", "prefect", "dvc", "langdetect"):
        assert f"<td>{library}</td>" in page


def test_a_missing_input_is_one_line_naming_the_file(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    params = make_params(tmp_path)
    (tmp_path / "metrics" / "detail" / "train.json").unlink()
    with pytest.raises(FileNotFoundError, match=r"^metrics/detail/train\.json: not found") as e:
        report.run(params)
    assert "\n" not in str(e.value)
    assert not (tmp_path / "reports" / "index.html").exists()


def test_the_stage_does_not_import_torch():
    """The report must stay a second or so of `dvc repro`: torch alone takes longer to import."""
    code = "import sys, stages.report; print(sorted(m for m in ('torch', 'onnxruntime') if m in sys.modules))"
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def test_chromium_renders_every_section_of_a_non_blank_page(page, tmp_path):
    if browser.find_browser() is None:
        skip_or_fail("no Chromium on PATH (.ci/run installs Debian's chromium; apt-get install chromium)")
    shot = tmp_path / "report.png"
    dom = browser.render((tmp_path / "reports" / "index.html").as_uri(), shot, width=1280, height=2000)
    for sid, _ in SECTIONS:
        assert f'<section id="{sid}">' in dom, sid
    assert dom.count("<svg") == page.count("<svg")
    pixels = browser.read_png(shot)
    assert pixels.shape[:2] == (2000, 1280)
    colours = {tuple(p) for p in pixels[::7, ::7, :3].reshape(-1, 3)}
    assert pixels.std() > 10 and len(colours) > 20  # text, tables and charts, not a blank or single-colour page
