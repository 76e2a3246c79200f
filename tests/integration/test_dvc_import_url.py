"""Tracking a remote input with DVC, as docs/clean.md describes: a real `dvc import-url` of a file served
by Python's http.server on 127.0.0.1, `dvc update` after it changes, and `clean` on the copy; a URL as
`clean.input`, which dvc.yaml makes an external dependency; and the same two over s3:// against a local
S3-compatible server (moto), through the dvc-s3 plugin."""
from __future__ import annotations

import gzip
import json
import re
from pathlib import Path

import pytest
import yaml

from stages import clean
from tests.conftest import BIN, init_dvc_repo, sh
from tests.fixtures.object_store import http_root, s3_server  # noqa: F401 (fixtures)
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


def test_import_url_from_s3_tracks_the_object_by_its_etag(tmp_path, s3_server):
    """`dvc import-url s3://...` (the dvc-s3 plugin, installed with the pipeline) against the local S3 server,
    found through AWS_ENDPOINT_URL as a user's S3-compatible store would be; `dvc update` after a rewrite."""
    url = s3_server.put("raw/a.jsonl.gz", gzip.compress(json.dumps({"id": "en", "text": EN}).encode() + b"\n"))
    (tmp_path / "repo").mkdir()
    repo = init_dvc_repo(tmp_path / "repo")
    sh([str(BIN / "dvc"), "import-url", url, "a.jsonl.gz"], repo, timeout=120)
    tracked = yaml.safe_load((repo / "a.jsonl.gz.dvc").read_text())
    assert tracked["deps"][0]["path"] == url and tracked["deps"][0].get("etag")
    assert gzip.decompress((repo / "a.jsonl.gz").read_bytes()).startswith(b'{"id": "en"')
    s3_server.put("raw/a.jsonl.gz", gzip.compress(json.dumps({"id": "zh", "text": ZH}).encode() + b"\n"))
    sh([str(BIN / "dvc"), "update", "a.jsonl.gz.dvc"], repo, timeout=120)
    assert yaml.safe_load((repo / "a.jsonl.gz.dvc").read_text())["deps"][0]["etag"] != tracked["deps"][0]["etag"]
    assert gzip.decompress((repo / "a.jsonl.gz").read_bytes()).startswith(b'{"id": "zh"')


ONE_DOC = gzip.compress(json.dumps({"id": "en", "text": EN}).encode() + b"\n")
TWO_DOCS = gzip.compress("\n".join(json.dumps({"id": i, "text": t}) for i, t in (("en", EN), ("zh", ZH))).encode()
                         + b"\n")


def check_external_dependency(repo_copy: Path, url: str, rewrite) -> None:
    """With `clean.input: <url>` (holding ONE_DOC), `dvc repro clean` reads it directly and records `url` in
    dvc.lock as an external dependency; after `rewrite()` changes what the URL holds, `dvc status` says so."""
    params = yaml.safe_load((repo_copy / "params.yaml").read_text())
    params["clean"].update(input=url, num_workers=1)
    (repo_copy / "params.yaml").write_text(yaml.safe_dump(params, sort_keys=False, allow_unicode=True))
    repo = init_dvc_repo(repo_copy)
    sh([str(BIN / "dvc"), "repro", "--single-item", "clean"], repo, timeout=300)
    metrics = json.loads((repo / params["clean"]["detail_path"]).read_text())
    assert metrics["num_read"] == 1 == metrics["num_kept"]
    lock = yaml.safe_load((repo / "dvc.lock").read_text())
    assert url in [dep["path"] for dep in lock["stages"]["clean"]["deps"]]
    assert "changed" not in sh([str(BIN / "dvc"), "status", "clean"], repo, timeout=120)
    rewrite()
    status = sh([str(BIN / "dvc"), "status", "clean"], repo, timeout=120)
    assert re.search(rf"modified:\s+{re.escape(url)}", status), status


def test_a_url_as_clean_input_is_an_external_dependency(repo_copy, http_root):
    """`clean.input: http://...`: read over the network, an external dependency DVC checks."""
    base, served = http_root
    (served / "ext.jsonl.gz").write_bytes(ONE_DOC)
    check_external_dependency(repo_copy, f"{base}/ext.jsonl.gz",
                              lambda: (served / "ext.jsonl.gz").write_bytes(TWO_DOCS))


def test_an_s3_prefix_as_clean_input_is_an_external_dependency(repo_copy, s3_server):
    """`clean.input: s3://bucket/prefix` on the local S3-compatible server, through dvc-s3."""
    s3_server.put("ext/raw/a.jsonl.gz", ONE_DOC)
    check_external_dependency(repo_copy, f"s3://{s3_server.bucket}/ext/raw",
                              lambda: s3_server.put("ext/raw/a.jsonl.gz", TWO_DOCS))
