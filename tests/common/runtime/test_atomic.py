"""Stages replace or delete only what they made: output folders with their marker, work folders with their
fingerprint, empty folders; never an input, the working directory or `data/`."""
import dataclasses
import json
import os
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from stages import clean
from stages.common.runtime.atomic import SUCCESS_MARKER, atomic_dir, is_complete, marker_stage
from stages.common.runtime.executor import WorkDir
from stages.common.runtime.ownership import check_owned_paths
from tests.stages.test_clean import corpus, make_params


def test_a_folder_without_the_marker_is_refused_and_kept(tmp_path):
    target = tmp_path / "raw"
    target.mkdir()
    (target / "part-0.jsonl").write_text("{}\n")
    with pytest.raises(ValueError, match=r"^refusing to replace .*raw: it exists and was not created by this stage; "
                                         r"remove it or pick another clean.out_dir$"):
        with atomic_dir(target, "clean.out_dir"):
            pass
    assert (target / "part-0.jsonl").read_text() == "{}\n"
    with pytest.raises(ValueError, match="pick another work_dir"):
        WorkDir(target, "fp")
    assert sorted(p.name for p in target.iterdir()) == ["part-0.jsonl"]


def test_own_output_and_empty_folders_are_replaced(tmp_path):
    target = tmp_path / "out"
    target.mkdir()  # empty: as DVC may leave it
    for value in ("one", "two"):
        with atomic_dir(target) as tmp:
            (tmp / "value").write_text(value)
        assert (target / "value").read_text() == value and (target / SUCCESS_MARKER).is_file()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out"]


def test_the_marker_names_the_stage_and_another_stages_output_is_refused(tmp_path):
    target = tmp_path / "raw"
    with atomic_dir(target, "demo_corpus.out_dir", stage="demo_corpus") as tmp:
        (tmp / "part-0.jsonl").write_text("{}\n")
    assert json.loads((target / SUCCESS_MARKER).read_text()) == {"stage": "demo_corpus"}
    refused = (rf"^refusing to replace {re.escape(str(target))}: it is the output of stage 'demo_corpus', "
               r"not of 'clean'; pick another clean.out_dir$")
    with pytest.raises(ValueError, match=refused):
        check_owned_paths("clean", {}, {"out_dir": target})
    with pytest.raises(ValueError, match=refused):
        with atomic_dir(target, "clean.out_dir", stage="clean"):
            pass
    with pytest.raises(ValueError, match="it is the output of stage 'demo_corpus'; pick another output folder$"):
        with atomic_dir(target):  # a writer of no stage (the executor's shards) may not replace it either
            pass
    assert sorted(p.name for p in target.iterdir()) == [SUCCESS_MARKER, "part-0.jsonl"]
    check_owned_paths("demo_corpus", {}, {"out_dir": target})
    with atomic_dir(target, stage="demo_corpus") as tmp:  # its own stage replaces it
        (tmp / "part-1.jsonl").write_text("{}\n")
    assert sorted(p.name for p in target.iterdir()) == [SUCCESS_MARKER, "part-1.jsonl"]


def test_an_empty_marker_of_an_older_run_is_replaced_and_then_named(tmp_path):
    """Markers were empty before they named their stage: such an output (or a shard's) names no stage, and
    stays replaceable, or every output would have to be removed by hand after an upgrade."""
    target = tmp_path / "out"
    target.mkdir()
    (target / SUCCESS_MARKER).write_text("")
    assert marker_stage(target) is None and is_complete(target)
    check_owned_paths("clean", {}, {"out_dir": target})
    with atomic_dir(target, stage="clean"):
        pass
    assert marker_stage(target) == "clean"
    with atomic_dir(tmp_path / "shard") as tmp:  # a shard: no stage, an empty marker, complete
        pass
    assert (tmp_path / "shard" / SUCCESS_MARKER).read_text() == "" and is_complete(tmp_path / "shard")


@pytest.mark.parametrize("content", ["not json", '{"stage": 3}', "[]", '{"stage": ""}', "x" * 10_000])
def test_a_marker_this_code_does_not_write_is_refused(tmp_path, content):
    target = tmp_path / "out"
    target.mkdir()
    (target / SUCCESS_MARKER).write_text(content)
    with pytest.raises(ValueError, match=r"^refusing to replace .*out: its _SUCCESS is not a completion marker "
                                         r"this code writes; remove it or pick another x.out_dir$"):
        check_owned_paths("x", {}, {"out_dir": target})


def test_clean_never_replaces_the_raw_corpus_the_demo_corpus_stage_wrote(tmp_path):
    """`clean.out_dir: data/raw/demo`: the demo corpus stage's output, named by its marker, is kept."""
    from stages.demo_corpus import stage as demo_corpus

    demo = demo_corpus.Params(warc_docs=0, out_dir=str(tmp_path / "data" / "raw" / "demo"),
                              labels_path=str(tmp_path / "labels.jsonl"),
                              semantic_labels_path=str(tmp_path / "semantic.jsonl"),
                              metrics_path=str(tmp_path / "m.json"), detail_path=str(tmp_path / "d.json"))
    demo_corpus.write([], demo)  # its writer, without building records (half a minute)
    assert marker_stage(demo.out_dir) == "demo_corpus"
    before = {p.name: p.read_bytes() for p in Path(demo.out_dir).iterdir()}
    params = dataclasses.replace(make_params(tmp_path, corpus(tmp_path), num_workers=1), out_dir=demo.out_dir)
    with pytest.raises(ValueError, match=r"it is the output of stage 'demo_corpus', not of 'clean'; "
                                         r"pick another clean.out_dir$"):
        clean.run(params)
    assert {p.name: p.read_bytes() for p in Path(demo.out_dir).iterdir()} == before


def test_leftovers_of_a_killed_run_are_removed_but_not_a_live_runs(tmp_path):
    target = tmp_path / "out"
    dead_tmp, old = tmp_path / ".out.abc123.tmp", tmp_path / ".out.old"
    for folder in (dead_tmp, old):
        folder.mkdir()
        (folder / "half").write_text("x")
    other = tmp_path / ".outer.x.tmp"  # another output's
    other.mkdir()
    with atomic_dir(target) as live_tmp:  # live: held by this run; a second publisher must leave it alone
        with atomic_dir(target) as second:
            (second / "v").write_text("2")
        assert live_tmp.is_dir()
        (live_tmp / "v").write_text("1")
    assert not dead_tmp.exists() and not old.exists() and other.is_dir()
    assert (target / "v").read_text() == "1"


@pytest.mark.parametrize("overrides, match", [
    ({"work_dir": "{raw}"}, r"'clean.work_dir' .* overlaps input 'clean.input'"),  # deleted the input
    ({"work_dir": "{tmp}"}, r"'clean.work_dir' .* overlaps input 'clean.input'"),  # its parent
    ({"out_dir": "{raw}/out"}, r"'clean.out_dir' .* overlaps input 'clean.input'"),
    ({"work_dir": "{tmp}/out/work"}, r"params 'clean.work_dir' and 'clean.out_dir' overlap"),
    ({"work_dir": "{cwd}"}, r"param 'clean.work_dir' must be a folder of its own"),
    ({"out_dir": "/"}, r"param 'clean.out_dir' must be a folder of its own"),
    ({"out_dir": "{cwd}/data"}, r"param 'clean.out_dir' must be a folder of its own"),
    ({"out_dir": "{tmp}/other"}, r"refusing to replace .*other: .* pick another clean.out_dir$"),
    ({"work_dir": "{tmp}/other"}, r"refusing to replace .*other: .* pick another clean.work_dir$"),
])
def test_clean_refuses_paths_it_does_not_own_before_any_work(tmp_path, overrides, match):
    raw = corpus(tmp_path)
    (tmp_path / "other").mkdir()
    (tmp_path / "other" / "precious").write_text("keep me")
    before = sorted(str(p) for p in tmp_path.rglob("*"))
    paths = {k: v.format(raw=raw, tmp=tmp_path, cwd=Path.cwd()) for k, v in overrides.items()}
    with pytest.raises(ValueError, match=match):
        clean.run(dataclasses.replace(make_params(tmp_path, raw, num_workers=1), **paths))
    assert sorted(str(p) for p in tmp_path.rglob("*")) == before  # nothing made, nothing removed


def test_rerun_replaces_its_own_outputs(tmp_path):
    params = make_params(tmp_path, corpus(tmp_path), num_workers=1)
    first = clean.run(params)
    (Path(params.work_dir)).mkdir()  # an empty work folder, as DVC may make parents
    assert clean.run(params)["num_kept"] == first["num_kept"]


HOLD = textwrap.dedent("""
    import sys, time
    from stages.common.runtime.executor import WorkDir
    WorkDir(sys.argv[1], "fp")
    print("held", flush=True)
    time.sleep(60)
""")


def test_a_second_run_on_the_same_work_folder_is_refused_naming_the_first(tmp_path):
    work = tmp_path / "work"
    holder = subprocess.Popen([sys.executable, "-c", HOLD, str(work)], stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline() == "held\n"
        with pytest.raises(RuntimeError, match=rf"^work folder .*work is in use by pid {holder.pid} on \S+ \(.*-c"):
            WorkDir(work, "fp")
        with pytest.raises(RuntimeError, match=f"pid {holder.pid}"):  # other settings: still not cleared
            WorkDir(work, "other")
    finally:
        holder.kill()
        holder.wait()
    WorkDir(work, "fp")  # the lock went with its holder
    again = WorkDir(work, "fp")  # this process holds it already: no conflict
    again.remove()
    assert not work.exists()
    WorkDir(work, "fp")  # made again after a removal: locked again, by this process


def test_lock_is_taken_again_after_the_folder_is_removed_behind_its_back(tmp_path):
    import shutil

    work = WorkDir(tmp_path / "work", "fp")
    shutil.rmtree(work.path)  # what perplexity does with its work_dir once published
    WorkDir(tmp_path / "work", "fp")
    probe = subprocess.run([sys.executable, "-c", HOLD, str(tmp_path / "work")], capture_output=True, text=True,
                           timeout=60, env={**os.environ, "PYTHONPATH": str(Path.cwd())})
    assert probe.returncode != 0 and f"in use by pid {os.getpid()}" in probe.stderr
