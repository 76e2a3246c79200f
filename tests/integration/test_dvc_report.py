"""A real `dvc repro` of the report stage, on the outputs of a tiny finished run placed where the stages put
them (tests/fixtures/report.py): the page is a cached output, and nothing reruns until an input changes."""
from __future__ import annotations

import json
import time
from pathlib import Path

import pytest
import yaml

from tests.conftest import BIN, init_dvc_repo, sh
from tests.fixtures.report import write_run

pytestmark = pytest.mark.integration


def test_repro_report_then_nothing_to_do_until_an_input_changes(repo_copy: Path):
    repo = init_dvc_repo(repo_copy)
    write_run(repo)
    # --single-item: the upstream stages' outputs are in place, as after a run
    start = time.perf_counter()
    out = sh([str(BIN / "dvc"), "repro", "--single-item", "report"], repo)
    seconds = time.perf_counter() - start
    assert "Running stage 'report'" in out, out
    page = (repo / "reports" / "index.html").read_text(encoding="utf-8")
    assert '<section id="compression">' in page
    lock = yaml.safe_load((repo / "dvc.lock").read_text())
    assert sorted(o["path"] for o in lock["stages"]["report"]["outs"]) == ["metrics/funnel.csv", "reports/index.html"]
    assert (repo / "reports" / ".gitignore").read_text().strip() == "/index.html"  # cached: DVC keeps it out of git
    assert seconds < 60, seconds

    assert "Running stage" not in sh([str(BIN / "dvc"), "repro", "--single-item", "report"], repo)
    samples = json.loads((repo / "models/export/samples.json").read_text())
    samples["samples"][0]["int8"] = "The river changed"
    (repo / "models/export/samples.json").write_text(json.dumps(samples))
    assert "Running stage 'report'" in sh([str(BIN / "dvc"), "repro", "--single-item", "report"], repo)
    assert "The river changed" in (repo / "reports" / "index.html").read_text(encoding="utf-8")
