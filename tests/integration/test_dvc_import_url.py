"""Tracking a remote input with DVC, as docs/clean.md describes: a real `dvc import-url` of a file served
by Python's http.server on 127.0.0.1, `dvc update` after it changes, and `clean` on the copy; a URL as
`clean.input`, which dvc.yaml makes an external dependency. s3:// needs
the dvc-s3 plugin (`pip install "dvc[s3]"`), which is not installed here; this checks that DVC says so."""
from __future__ import annotations

import gzip
import json
import os
import re
import subprocess
from pathlib import Path

import pytest
import yaml

from stages import clean
from tests.conftest import BIN, init_dvc_repo, sh
from tests.fixtures.object_store import http_root  # noqa: F401 (fixture)
from tests.stages.test_clean import EN, ZH

pytestmark = pytest.mark.integration


def test_import_url_tracks_a_remote_file_and_update_refreshes_it(tmp_path, http_root):
    base, served = http_root
    (served / "part-0.jsonl.gz").write_bytes(gzip.compress(json.dumps({"id": "en", "text": EN}).encode() + b"\n"))
    repo = tmp_path / "repo"
    repo.mkdir()
    init_dvc_repo(repo)
    (repo / "data" / "raw").mkdir(parents=True)
    sh([str(BIN / "dvc"), "import-url", f"{base}/part-0.jsonl.gz", "data/raw/part-0.jsonl.gz"], repo, timeout=120)
    tracked = yaml.safe_load((repo / "data" / "raw" / "part-0.jsonl.gz.dvc").read_text())
    assert tracked["deps"][0]["path"] == f"{base}/part-0.jsonl.gz" and tracked["frozen"] is True
    assert (repo / "data" / "raw" / "part-0.jsonl.gz").read_bytes() == (served / "part-0.jsonl.gz").read_bytes()

    lines = [json.dumps({"id": i, "text": text}) for i, text in (("en", EN), ("zh", ZH))]
    (served / "part-0.jsonl.gz").write_bytes(gzip.compress("\n".join(lines).encode() + b"\n"))
    sh([str(BIN / "dvc"), "update", "data/raw/part-0.jsonl.gz.dvc"], repo, timeout=120)
    assert yaml.safe_load((repo / "data" / "raw" / "part-0.jsonl.gz.dvc").read_text())["deps"] != tracked["deps"]
    out = tmp_path / "out"
    metrics = clean.run(clean.Params(
        input=str(repo / "data" / "raw"), out_dir=str(out / "clean"), metrics_path=str(out / "m.json"),
        detail_path=str(out / "d.json"), reasons_plot_path=str(out / "r.csv"), work_dir=str(out / "work"),
        num_workers=1))
    assert metrics["num_read"] == 2 == metrics["num_kept"]


def test_import_url_from_s3_needs_the_dvc_s3_plugin(tmp_path):
    try:
        import dvc_s3  # noqa: F401
    except ImportError:
        pass
    else:
        pytest.skip("dvc-s3 is installed: covered by the docs' recipe, not here")
    repo = init_dvc_repo(tmp_path)
    env = {**os.environ, "PATH": f"{BIN}{os.pathsep}{os.environ['PATH']}", "DVC_NO_ANALYTICS": "1"}
    proc = subprocess.run([str(BIN / "dvc"), "import-url", "s3://refinery-raw/a.jsonl", "a.jsonl"], cwd=repo, env=env,
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode != 0 and "dvc-s3" in proc.stdout + proc.stderr
    assert not Path(repo / "a.jsonl").exists()


def test_a_url_as_clean_input_is_an_external_dependency(repo_copy, http_root):
    """`clean.input: http://...`: `dvc repro clean` reads it over the network, records it in dvc.lock as an
    external dependency, and `dvc status` notices when the file behind the URL changes."""
    base, served = http_root
    (served / "ext.jsonl.gz").write_bytes(gzip.compress(json.dumps({"id": "en", "text": EN}).encode() + b"\n"))
    params = yaml.safe_load((repo_copy / "params.yaml").read_text())
    params["clean"].update(input=f"{base}/ext.jsonl.gz", num_workers=1)
    (repo_copy / "params.yaml").write_text(yaml.safe_dump(params, sort_keys=False, allow_unicode=True))
    repo = init_dvc_repo(repo_copy)
    sh([str(BIN / "dvc"), "repro", "--single-item", "clean"], repo, timeout=300)
    metrics = json.loads((repo / params["clean"]["detail_path"]).read_text())
    assert metrics["num_read"] == 1 == metrics["num_kept"]
    lock = yaml.safe_load((repo / "dvc.lock").read_text())
    assert f"{base}/ext.jsonl.gz" in [dep["path"] for dep in lock["stages"]["clean"]["deps"]]
    assert "changed" not in sh([str(BIN / "dvc"), "status", "clean"], repo, timeout=120)

    lines = [json.dumps({"id": i, "text": text}) for i, text in (("en", EN), ("zh", ZH))]
    (served / "ext.jsonl.gz").write_bytes(gzip.compress("\n".join(lines).encode() + b"\n"))
    status = sh([str(BIN / "dvc"), "status", "clean"], repo, timeout=120)
    assert re.search(rf"modified:\s+{re.escape(base)}/ext\.jsonl\.gz", status), status
