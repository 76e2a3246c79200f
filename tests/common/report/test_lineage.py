import subprocess

from stages.common.report import lineage

LOCK = {"schema": "2.0", "stages": {
    "clean": {"outs": [{"path": "data/clean", "md5": "aaa.dir"}]},
    "clean_metrics": {"outs": [{"path": "metrics/detail/clean.json", "md5": "bbb"}]},
    "train": {"outs": [{"path": "metrics/detail/train.json", "md5": "ccc"}, {"path": "models/train", "md5": "d.dir"}]},
}}


def test_lock_digests_cover_inputs_inside_outputs_and_outputs_inside_inputs(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    rows = lineage.lock_digests(LOCK, ["data/clean/docs", "metrics/detail", "models/train/", "other"])
    assert [(r["input"], r["out"], r["stage"], r["digest"]) for r in rows] == [
        ("data/clean/docs", "data/clean", "clean", "aaa.dir"),
        ("metrics/detail", "metrics/detail/clean.json", "clean_metrics", "bbb"),
        ("metrics/detail", "metrics/detail/train.json", "train", "ccc"),
        ("models/train/", "models/train", "train", "d.dir"),
    ]
    assert lineage.lock_digests({}, ["data/clean"]) == []
    # a lock file elsewhere: its paths are relative to its folder, the inputs may be absolute
    (rows,) = lineage.lock_digests(LOCK, [str(tmp_path / "repo" / "data" / "clean")], tmp_path / "repo")
    assert rows["out"] == "data/clean" and rows["digest"] == "aaa.dir"


def test_git_revision_and_uncommitted_changes(tmp_path):
    assert lineage.git_revision(tmp_path) == {"commit": None, "dirty": None}
    run = [["git", "init", "-q"], ["git", "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-q",
                                   "--allow-empty", "-m", "x"]]
    for argv in run:
        subprocess.run(argv, cwd=tmp_path, check=True)
    (tmp_path / "f").write_text("1")
    subprocess.run(["git", "add", "f"], cwd=tmp_path, check=True)
    state = lineage.git_revision(tmp_path)
    assert len(state["commit"]) == 40 and state["dirty"] is True


def test_versions_and_machine_come_without_importing_the_libraries():
    versions = lineage.versions(("pyarrow", "no-such-package-xyz"))
    assert versions["pyarrow"][0].isdigit() and versions["no-such-package-xyz"] == "not installed"
    cpuinfo = "model name\t: Test CPU @ 2GHz\nflags\t\t: fpu avx2 avx512f amx_int8 sse\n"
    machine = lineage.machine(cpuinfo)
    assert machine["cpu"] == "Test CPU @ 2GHz" and machine["cpu_flags"] == ["avx2", "avx512f", "amx_int8"]
    assert machine["cores"] >= 1
