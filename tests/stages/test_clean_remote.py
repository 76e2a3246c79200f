"""`clean` on an object-store input (moto's S3 server on 127.0.0.1): the same documents as the same files
read locally, retries that change nothing, a failure that publishes nothing, and no credential anywhere."""
from __future__ import annotations

import dataclasses
import json
import logging
from pathlib import Path

import pytest
import yaml

from stages import clean
from stages.common.runtime import storage
from stages.common.text.readers import InputError
from tests.fixtures.object_store import SECRET, flaky_reads, http_root, s3_server  # noqa: F401 (fixtures)
from tests.stages.test_clean import corpus, make_params, outputs


@pytest.fixture(autouse=True)
def no_retry_delay(monkeypatch):
    monkeypatch.setattr(storage, "RETRY_DELAY_S", 0.0)


@pytest.fixture(scope="module")
def local_and_remote(tmp_path_factory, s3_server):
    """(the test corpus's folder, the same files under an s3:// prefix, the clean outputs of the local run)."""
    tmp = tmp_path_factory.mktemp("local")
    raw = corpus(tmp)
    params = make_params(tmp, raw, num_workers=1)
    metrics = clean.run(params)
    return raw, s3_server.put_folder(raw, "corpus/raw"), outputs(params), metrics


def without_source(rows: list[dict]) -> list[dict]:
    return [{k: v for k, v in row.items() if k not in ("source", "file")} for row in rows]


def test_remote_input_gives_the_local_output(tmp_path, local_and_remote, caplog):
    raw, url, (local_docs, local_quarantine), local_metrics = local_and_remote
    caplog.set_level(logging.DEBUG)  # botocore's and s3fs's debug lines too: none may hold the secret
    params = make_params(tmp_path, url, num_workers=1)
    metrics = clean.run(params)
    docs, quarantine = outputs(params)
    assert metrics["num_read"] == metrics["num_kept"] + metrics["num_quarantined"] == local_metrics["num_read"]
    assert without_source(docs) == without_source(local_docs)  # same ids, texts, languages, meta
    assert without_source(quarantine) == without_source(local_quarantine)
    assert {row["file"] for row in docs + quarantine} == {f"{url}/part-0.jsonl.gz"}
    written = b"".join(p.read_bytes() for p in tmp_path.rglob("*") if p.is_file())
    assert SECRET.encode() not in written and SECRET not in caplog.text


def test_reads_that_fail_twice_are_retried_without_changing_the_output(tmp_path, local_and_remote, monkeypatch,
                                                                       caplog):
    _, url, expected, _ = local_and_remote
    tried = flaky_reads(monkeypatch, failures=2)
    params = make_params(tmp_path, url, num_workers=2, batch_size=4)  # a process pool forked after the reads
    clean.run(params)
    assert [without_source(rows) for rows in outputs(params)] == [without_source(rows) for rows in expected]
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING and "retry" in r.getMessage()]
    assert len(warnings) == 2 and len(tried) > 2
    assert SECRET not in caplog.text


def test_reads_that_keep_failing_stop_the_run_and_publish_nothing(tmp_path, local_and_remote, monkeypatch, capsys):
    _, url, _, _ = local_and_remote
    params = make_params(tmp_path, url, num_workers=1)
    clean.run(params)
    before = outputs(params)
    flaky_reads(monkeypatch, failures=None)
    with pytest.raises(InputError, match=rf"^{url}/part-0\.jsonl\.gz: reading at byte 0 failed after 4 tries"):
        clean.run(dataclasses.replace(params, languages=("de",)))
    assert outputs(params) == before
    # The command line: one line naming the file, status 1.
    section = {k: v for k, v in dataclasses.asdict(params).items() if k not in ("normalize", "quality", "dedup")}
    params_file = tmp_path / "params.yaml"
    params_file.write_text(yaml.safe_dump({"clean": {**section, "languages": ["de"]}}))
    capsys.readouterr()  # the first run's progress bar
    with pytest.raises(SystemExit) as exit_status:
        clean.main(["--params", str(params_file)])
    err = capsys.readouterr().err.strip()
    assert exit_status.value.code == 1 and err.count("\n") == 0
    assert err.startswith(f"error: {url}/part-0.jsonl.gz: reading at byte 0 failed") and SECRET not in err
    assert outputs(params) == before


def test_a_presigned_https_input_leaves_its_signature_nowhere(tmp_path, local_and_remote, http_root, caplog):
    raw, _, (local_docs, local_quarantine), _ = local_and_remote
    base, served = http_root
    (served / "part-0.jsonl.gz").write_bytes((raw / "part-0.jsonl.gz").read_bytes())
    caplog.set_level(logging.DEBUG)
    params = make_params(tmp_path, f"{base}/part-0.jsonl.gz?X-Amz-Signature={SECRET}", num_workers=1)
    clean.run(params)
    docs, quarantine = outputs(params)
    assert without_source(docs) == without_source(local_docs) and without_source(quarantine) == without_source(
        local_quarantine)
    assert {row["file"] for row in docs + quarantine} == {f"{base}/part-0.jsonl.gz"}
    written = b"".join(p.read_bytes() for p in tmp_path.rglob("*") if p.is_file())
    assert SECRET.encode() not in written and SECRET not in caplog.text


def test_a_missing_remote_input_is_one_config_error(tmp_path, s3_server):
    params = make_params(tmp_path, f"s3://{s3_server.bucket}/nothing/here", num_workers=1)
    with pytest.raises(clean.ConfigError, match=rf"param 'clean.input': s3://{s3_server.bucket}/nothing/here does"):
        clean.run(params)
    assert not Path(params.out_dir).exists() and not json.dumps(dataclasses.asdict(params)).count(SECRET)


def test_every_format_reads_the_same_from_a_bucket_as_from_disk(tmp_path, s3_server):
    """A WARC crawl, a CSV file and a `datasets` save_to_disk folder under one prefix, listed with a
    recursive glob: the same documents and quarantine as the same folder on disk, every record accounted for."""
    import datasets

    from tests.fixtures.warc import write_warc
    from tests.stages.test_clean import DE

    en = ("A lighthouse keeper on the northern island kept a diary for thirty years, and in it he wrote about "
          "the storms, the ships that passed and the birds that came back every spring to nest on the rocks.")
    en2 = ("The library in the old mill lends tools as well as books: a neighbour can borrow a ladder, a drill or "
           "a sewing machine for a week, and the volunteers who run it repair whatever comes back broken.")
    zh = "山脚下的村子里有一所小学，老师每天早上骑自行车走十几里山路来上课，孩子们在操场上等着他，风雨无阻已经二十年了。"

    raw = tmp_path / "raw"
    raw.mkdir()
    write_warc(raw / "crawl.warc.gz")
    (raw / "reviews.csv").write_text(f'id,text\nc1,"{en2}"\nc2,"{DE}"\nc3,broken,row\n')
    datasets.Dataset.from_dict({"id": ["a1", "a2"], "text": [en, zh]}).save_to_disk(str(raw / "hf"), num_shards=2)
    url = s3_server.put_folder(raw, "formats/raw")
    runs = []
    for name, source in (("local", str(raw)), ("remote", f"{url}/**")):
        params = make_params(tmp_path / name, source, num_workers=1, keep_fields=("url",))
        metrics = clean.run(params)
        docs, quarantine = outputs(params)
        assert metrics["num_read"] == len(docs) + len(quarantine) == metrics["num_kept"] + metrics["num_quarantined"]
        runs.append((without_source(docs), without_source(quarantine), metrics["num_read"]))
    assert runs[0] == runs[1]
    docs, quarantine, num_read = runs[1]
    assert {"c1", "a1", "a2"} <= {d["id"] for d in docs} and any(d["url"] for d in docs)
    assert {"invalid:csv_fields", "invalid:http_status_4xx", "lang:de"} <= {q["reason"] for q in quarantine}
