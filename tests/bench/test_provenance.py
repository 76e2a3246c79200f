"""Every benchmark stamps its results with bench/_provenance.py and writes them with its `write`; bench/_stale.py
tells results older than the code they measure from current ones."""
from __future__ import annotations

import ast
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SCRIPTS = sorted((ROOT / "bench").glob("[a-z]*.py"))


def results_writes(tree: ast.Module) -> list[int]:
    """Lines that call `.write_text(` on a results path: one built from `RESULTS`, from a "results" folder name
    or from `args.out`, directly or through a name assigned from one, or a function parameter passed one."""
    def tainted(node: ast.AST, names: set[str]) -> bool:
        return any(isinstance(n, ast.Name) and n.id in names | {"RESULTS"}
                   or isinstance(n, ast.Constant) and isinstance(n.value, str) and "results" in n.value
                   or isinstance(n, ast.Attribute) and n.attr == "out" and isinstance(n.value, ast.Name)
                   and n.value.id == "args" for n in ast.walk(node))

    functions = {f.name: f for f in ast.walk(tree) if isinstance(f, (ast.FunctionDef, ast.AsyncFunctionDef))}
    names: set[str] = set()
    while True:  # names and parameters that hold a results path, to a fixed point
        found = set(names)
        for node in ast.walk(tree):
            if isinstance(node, ast.Assign) and tainted(node.value, found):
                found |= {t.id for t in node.targets if isinstance(t, ast.Name)}
            elif (isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in functions):
                params = functions[node.func.id].args.args
                found |= {p.arg for p, a in zip(params, node.args) if tainted(a, found)}
                found |= {k.arg for k in node.keywords if k.arg and tainted(k.value, found)}
        if found == names:
            break
        names = found
    return [node.lineno for node in ast.walk(tree) if isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute) and node.func.attr == "write_text"
            and tainted(node.func.value, names)]


def provenance_calls(tree: ast.Module, function: str) -> list[ast.Call]:
    """Calls of bench._provenance's `function`, as `_provenance.<function>(` (with `from bench import
    _provenance`) or `<function>(` (with `from bench._provenance import <function>`)."""
    module = any(isinstance(n, ast.ImportFrom) and n.module == "bench" and any(a.name == "_provenance" for a in n.names)
                 for n in ast.walk(tree))
    direct = any(isinstance(n, ast.ImportFrom) and n.module == "bench._provenance"
                 and any(a.name == function and not a.asname for a in n.names) for n in ast.walk(tree))
    return [n for n in ast.walk(tree) if isinstance(n, ast.Call) and (
        module and isinstance(n.func, ast.Attribute) and n.func.attr == function
        and isinstance(n.func.value, ast.Name) and n.func.value.id == "_provenance"
        or direct and isinstance(n.func, ast.Name) and n.func.id == function)]


def test_the_results_write_check_tells_results_paths_from_scratch_files():
    """The old ways the scripts wrote their results are caught; a params file in a temporary folder is not."""
    old = '''
RESULTS = ROOT / "bench" / "results"
def write_results(results, out):
    out.with_name(out.name + ".json").write_text(text)
def main():
    out = ROOT / "bench" / "results"
    (out / "clean.json").write_text(text)
    (RESULTS / "train.md").write_text(text)
    write_results(results, args.out)
    (tmp / "params.yaml").write_text(text)
    marker.write_text(text)
'''
    assert results_writes(ast.parse(old)) == [4, 7, 8]


@pytest.mark.parametrize("script", SCRIPTS, ids=lambda p: p.stem)
def test_every_benchmark_names_what_it_measures_and_writes_through_provenance(script):
    tree = ast.parse(script.read_text(encoding="utf-8"))
    measures = [n for n in tree.body if isinstance(n, ast.Assign)
                and any(isinstance(t, ast.Name) and t.id == "MEASURES" for t in n.targets)]
    assert len(measures) == 1, f"{script.name}: no module-level MEASURES"
    paths = ast.literal_eval(measures[0].value)
    assert isinstance(paths, tuple) and paths and all(isinstance(p, str) for p in paths), script.name
    assert not [p for p in paths if not (ROOT / p).exists()], f"{script.name}: MEASURES names missing paths"
    # stamped under its own name (bench._stale matches results to scripts by it) with its MEASURES
    stamps = provenance_calls(tree, "stamp")
    assert stamps and all(ast.literal_eval(c.args[0]) == script.stem and isinstance(c.args[1], ast.Name)
                          and c.args[1].id == "MEASURES" for c in stamps), f"{script.name}: stamp({script.stem!r}, MEASURES)"
    assert provenance_calls(tree, "write"), f"{script.name}: never calls bench._provenance.write"
    assert not results_writes(tree), f"{script.name}: writes results with write_text at {results_writes(tree)}"


def git(repo: Path, *argv: str) -> str:
    env = {**os.environ, "GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@example.com", "GIT_COMMITTER_NAME": "t",
           "GIT_COMMITTER_EMAIL": "t@example.com"}
    return subprocess.run(["git", "-c", "commit.gpgsign=false", *argv], cwd=repo, env=env, check=True,
                          capture_output=True, text=True).stdout.strip()


def stale(repo: Path) -> tuple[int, dict[str, str]]:
    """`python -m bench._stale --strict` in `repo` (its bench/ first on the path, this checkout's stages after):
    the exit status and each results file's row."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(repo), str(ROOT)])}
    proc = subprocess.run([sys.executable, "-m", "bench._stale", "--strict"], cwd=repo, env=env, capture_output=True,
                          text=True, timeout=60)
    assert not proc.stderr, proc.stderr
    rows = {line.split("|")[1].strip(): line for line in proc.stdout.splitlines() if line.startswith("| bench/results/")}
    return proc.returncode, rows


def commit_change(repo: Path, path: str, text: str) -> str:
    (repo / path).write_text(text)
    git(repo, "commit", "-qam", f"change {path}")
    return git(repo, "rev-parse", "--short", "HEAD")


def test_stale_follows_the_commits_to_the_measured_code(tmp_path):
    repo = tmp_path / "repo"
    for name in ("__init__.py", "_provenance.py", "_stale.py"):
        (repo / "bench").mkdir(parents=True, exist_ok=True)
        shutil.copy(ROOT / "bench" / name, repo / "bench" / name)
    (repo / "bench" / "toy.py").write_text('MEASURES = ("src",)\n')
    for path in ("src/a.py", "other/b.py"):
        (repo / path).parent.mkdir()
        (repo / path).write_text("x = 1\n")
    git(repo, "init", "-q")
    git(repo, "add", "-A")
    git(repo, "commit", "-qm", "C1")
    results = repo / "bench" / "results"
    results.mkdir()
    (results / "toy.json").write_text(json.dumps({"bench": "toy", "commit": git(repo, "rev-parse", "--short", "HEAD")}))

    status, rows = stale(repo)
    assert status == 0 and "**current**" in rows["bench/results/toy.json"]
    commit_change(repo, "other/b.py", "x = 2\n")  # not what toy measures
    status, rows = stale(repo)
    assert status == 0 and "**current**" in rows["bench/results/toy.json"]
    commit_change(repo, "src/a.py", "x = 2\n")
    status, rows = stale(repo)
    assert status == 1 and "**stale**" in rows["bench/results/toy.json"] and "1 later commits changed" in rows[
        "bench/results/toy.json"]

    (results / "toy.json").write_text(json.dumps({"bench": "toy"}))  # written without a commit
    status, rows = stale(repo)
    assert status == 1 and "**unknown**" in rows["bench/results/toy.json"]
    assert "records no commit" in rows["bench/results/toy.json"]


def test_rerun_runs_the_recorded_command_of_each_stale_file(tmp_path):
    """`--rerun` reruns a stale results file's own command, arguments included, once, and lists it current after."""
    repo = tmp_path / "repo"
    (repo / "bench" / "results").mkdir(parents=True)
    for name in ("__init__.py", "_provenance.py", "_stale.py"):
        shutil.copy(ROOT / "bench" / name, repo / "bench" / name)
    # a benchmark that records its arguments and how often it ran
    (repo / "bench" / "toy.py").write_text(
        'import json, sys\nfrom bench import _provenance\nMEASURES = ("src",)\n'
        'out = _provenance.ROOT / "bench" / "results" / "toy.json"\n'
        'runs = json.loads(out.read_text()).get("runs", 0) if out.exists() else 0\n'
        'out.write_text(json.dumps({**_provenance.stamp("toy", MEASURES), "runs": runs + 1, "argv": sys.argv[1:]}))\n')
    (repo / "src").mkdir()
    (repo / "src" / "a.py").write_text("x = 1\n")
    git(repo, "init", "-q")
    git(repo, "add", "-A")
    git(repo, "commit", "-qm", "C1")
    old = git(repo, "rev-parse", "--short", "HEAD")
    command = "python -m bench.toy --size 'two words'"
    toy = repo / "bench" / "results" / "toy.json"
    toy.write_text(json.dumps({"bench": "toy", "commit": old, "command": command}))
    commit_change(repo, "src/a.py", "x = 2\n")
    env = {**os.environ, "PYTHONPATH": str(repo)}

    def run(*flags):
        return subprocess.run([sys.executable, "-m", "bench._stale", *flags], cwd=repo, env=env, capture_output=True,
                              text=True, timeout=120)

    dry = run("--rerun", "--dry-run")
    assert dry.returncode == 0 and f"[1/1] {command}" in dry.stdout and "**stale**" in dry.stdout
    assert "runs" not in json.loads(toy.read_text())  # nothing ran
    proc = run("--rerun", "--strict")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    data = json.loads(toy.read_text())
    assert data["runs"] == 1 and data["argv"] == ["--size", "two words"] and data["command"] == command
    assert data["commit"] != old and "**current**" in proc.stdout and "[1/1] done" in proc.stdout

    toy.write_text(json.dumps({"bench": "toy", "command": "rm -rf src"}))
    proc = run("--rerun")  # a command that is not a benchmark is never run
    assert proc.returncode == 1 and "rerun it by hand" in proc.stdout and (repo / "src" / "a.py").exists()
