"""The `refinery` command (flows/cli.py) and the check every flow runs first (flows/check.py).

`python -m flows.cli` is what the `refinery` console script runs (pyproject.toml); the pipelines here are
cheap commands, so the check imports no stage (the stages' own sections: tests/common/runtime/test_check.py).
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from flows import cli
from flows.check import check_workspace
from tests.conftest import ROOT
from tests.flows.conftest import TWO_STAGE_FILES, TWO_STAGE_PARAMS, TWO_STAGES, make_repo

COMMANDS = ["init", "check", "demo", "status", "summary", "compare", "serve", "generate"]


def refinery(*args: str, cwd: Path = ROOT) -> subprocess.CompletedProcess:
    """The command as installed: it imports the checkout's packages from any folder."""
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.run([sys.executable, "-m", "flows.cli", *args], cwd=cwd, env=env, capture_output=True,
                          text=True, timeout=300)


def test_help_lists_every_command():
    proc = refinery("--help")
    assert proc.returncode == 0 and proc.stdout.startswith("usage: refinery ")
    assert all(f"    {name} " in proc.stdout for name in COMMANDS), proc.stdout


def undocumented_options(help_text: str) -> list[str]:
    """Options in argparse's help without a description (alone on their line, no text below)."""
    lines = [line.strip() for line in help_text.split("options:")[1].splitlines()] + [""]
    return [line for line, after in zip(lines, lines[1:])
            if line.startswith("-") and "  " not in line and (not after or after.startswith("-"))]


@pytest.mark.parametrize("name", COMMANDS)
def test_every_command_has_help(name, capfd):
    with pytest.raises(SystemExit) as e:
        cli.main([name, "--help"])
    out = capfd.readouterr().out
    assert e.value.code == 0 and out.startswith("usage: "), out
    assert undocumented_options(out) == [], out


def test_an_unknown_command_is_a_usage_error():
    proc = refinery("trian")
    assert proc.returncode == 2 and "invalid choice: 'trian'" in proc.stderr


@pytest.mark.parametrize("args", [["summary"], ["status"], ["demo"], ["compare"], ["check"], ["check", "--params", "params.yaml"]])
def test_outside_a_workspace_a_command_says_so_in_one_line(args, tmp_path: Path):
    proc = refinery(*args, cwd=tmp_path)
    missing = "dvc.yaml" if "--params" in args else "dvc.yaml / params.yaml"
    assert (proc.returncode, proc.stdout) == (2, "")
    assert proc.stderr == (f"error: {tmp_path.resolve()} is not a Refinery workspace (no {missing}): run `refinery "
                           "init` there, or pass --root\n")
    elsewhere = refinery(args[0], "--root", str(tmp_path / "none"))
    assert elsewhere.returncode == 2 and elsewhere.stderr.startswith(f"error: {tmp_path / 'none'} is not a Refinery ")


@pytest.fixture
def tiny_repo(tmp_path: Path) -> Path:
    """The flows' two-stage pipeline as a git + DVC repository (not a flows workspace: no server needed)."""
    return make_repo(tmp_path / "repo", TWO_STAGES, TWO_STAGE_PARAMS, TWO_STAGE_FILES)


def break_params(repo: Path) -> None:
    params = yaml.safe_load((repo / "params.yaml").read_text())
    params["cuont"] = {"n": 1}
    (repo / "params.yaml").write_text(yaml.safe_dump(params, sort_keys=False))


BROKEN = ("unknown section 'cuont' in {params} (did you mean 'count'? the stages read: count, measure)")


@pytest.mark.integration
def test_demo_checks_first_then_reproduces_and_summarises(tiny_repo: Path):
    break_params(tiny_repo)
    proc = refinery("demo", cwd=tiny_repo)
    assert (proc.returncode, proc.stderr) == (2, f"error: {BROKEN.format(params=tiny_repo / 'params.yaml')}\n")
    assert not (tiny_repo / "out").exists() and not (tiny_repo / "dvc.lock").exists()  # DVC never started

    subprocess.run(["git", "checkout", "params.yaml"], cwd=tiny_repo, check=True)
    status = refinery("status", "--root", str(tiny_repo))
    assert status.returncode == 0 and status.stdout.startswith("`dvc repro` would run 2 of 2 stages:\n  count: ")

    proc = refinery("demo", "--root", str(tiny_repo), cwd=ROOT)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith(f"{tiny_repo / 'params.yaml'}: OK (0 stage sections")
    assert json.loads((tiny_repo / "metrics" / "measure.json").read_text()) == {"length": 18}

    status = refinery("status", cwd=tiny_repo)
    assert (status.returncode, status.stdout) == (0, "up to date: `dvc repro` would run none of the 2 stages\n")
    (tiny_repo / "raw" / "b.txt").write_text("more\n")
    status = refinery("status", cwd=tiny_repo)
    assert status.stdout == ("`dvc repro` would run 2 of 2 stages:\n  count: changed deps: raw (modified)\n"
                             "  measure: after count\n"), status.stdout


def test_check_command_and_check_workspace_report_the_same_mistakes(tmp_path: Path):
    for rel, text in TWO_STAGE_FILES.items():
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_text(text)
    (tmp_path / "dvc.yaml").write_text(TWO_STAGES)
    (tmp_path / "params.yaml").write_text(yaml.safe_dump(TWO_STAGE_PARAMS))
    proc = refinery("check", "--root", str(tmp_path))
    assert proc.returncode == 0 and proc.stdout.startswith(f"{tmp_path / 'params.yaml'}: OK"), proc.stderr
    check_workspace(tmp_path)

    break_params(tmp_path)
    (tmp_path / "raw" / "a.txt").unlink()
    (tmp_path / "raw").rmdir()
    expected = [BROKEN.format(params=tmp_path / "params.yaml"),
                "dvc.yaml: stage 'count' depends on raw: it does not exist and no stage makes it"]
    proc = refinery("check", "--params", str(tmp_path / "params.yaml"))  # the workspace: the file's folder
    assert proc.returncode == 2 and proc.stderr.splitlines() == [f"error: {line}" for line in expected]
    with pytest.raises(ValueError) as e:
        check_workspace(tmp_path)
    assert str(e.value).splitlines() == expected


def test_describe_dvc_status_entries():
    assert cli._changes([{"changed deps": {"params.yaml": {"count.n": "modified"}, "raw": "modified"}},
                         {"changed outs": {"out/count.txt": "deleted"}}, "changed command"]) == (
        "changed deps: params.yaml (count.n modified), raw (modified); changed outs: out/count.txt (deleted); "
        "changed command")


@pytest.mark.integration
@pytest.mark.usefixtures("prefect_server")
def test_the_pipeline_flow_fails_on_a_params_mistake_before_any_stage(two_stage_repo: Path):
    from flows.pipeline import pipeline
    from tests.flows.conftest import flow_run_id, task_runs

    break_params(two_stage_repo)
    state = pipeline(return_state=True)
    assert state.is_failed() and BROKEN.format(params=two_stage_repo / "params.yaml") in state.message, state.message
    assert task_runs(flow_run_id(state)) == []  # not even `dvc status`
    assert not (two_stage_repo / "out").exists()
