"""`refinery`: the project's command (`pip install .` puts it on PATH; `python -m flows.cli` in a checkout).

    refinery init       a workspace for your own data: dvc.yaml, params.yaml, corpus/, labels/, git and DVC
    refinery check      params.yaml, the inputs it names and a first look at the data, running nothing
    refinery demo       check, reproduce the pipeline (`dvc repro`), print the run summary
    refinery status     which stages `dvc repro` would run, and why
    refinery serve      the Prefect server with the `pipeline` and `retrain` deployments
    refinery generate   sample text from the exported model
    refinery summary    the run summary of the last pipeline run (stale figures marked)
    refinery compare    runs side by side: headline figures and their change against a baseline

Every command but `init` works on a workspace (a folder with dvc.yaml and params.yaml): the current
folder, or `--root`; elsewhere it says so in one line (exit status 2). Nothing here imports torch: what
needs it runs as a `python -m ...` command, an argument list (never a shell string), as dvc.yaml runs the
stages.
"""
from __future__ import annotations

import argparse
import json
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from flows.check import check_command, stage_env
from flows.commands import CommandFailed, dvc
from flows.workspace import WorkspaceError, init_workspace, next_steps, not_a_workspace

PROG = "refinery"


def _workspace(args: argparse.Namespace) -> Path:
    return (args.root or Path.cwd()).resolve()


def _refused(root: Path, need_params: bool = True) -> bool:
    """Say so, in one line, when `root` is not a workspace."""
    problem = not_a_workspace(root, need_params)
    if problem:
        print(f"error: {problem}", file=sys.stderr)
    return problem is not None


def _call(args: list[str], cwd: Path | None = None) -> int:
    """Run a command with this terminal as its output; its exit status."""
    return subprocess.run(args, cwd=cwd, env=stage_env(), check=False).returncode


def check(args: argparse.Namespace) -> int:
    params = args.params.resolve() if args.params else None
    root = args.root.resolve() if args.root else params.parent if params else Path.cwd().resolve()
    if _refused(root, need_params=params is None):
        return 2
    return _call(check_command(root, params, args.params_only), cwd=root)


def init(args: argparse.Namespace) -> int:
    root = (args.dir or Path.cwd()).resolve()
    try:
        init_workspace(root)
    except WorkspaceError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    except CommandFailed as e:  # git or DVC: their own last lines say why
        print(f"error: {e}", file=sys.stderr)
        return e.returncode
    print(next_steps(root, Path.cwd().resolve()), end="")
    return 0


def demo(args: argparse.Namespace) -> int:
    root = _workspace(args)
    if _refused(root):
        return 2
    status = _call(check_command(root), cwd=root)
    if status:
        return status
    if not (root / ".dvc").is_dir():
        print(f"error: {root} is not a DVC repository: run `git init && dvc init` there first (`make demo` does "
              "both)", file=sys.stderr)
        return 2
    status = _call(dvc("repro", *(["--force"] if args.force else [])), cwd=root)
    if status:
        return status
    from flows.summary import print_summary

    print()
    print_summary(root, check_stale=False)  # just reproduced: nothing is stale
    return 0


def _changes(entries: list[Any]) -> str:
    """`dvc status --json` entries of one stage in words: `changed deps: data/raw/demo (modified), ...`."""
    words = []
    for entry in entries:
        if not isinstance(entry, dict):
            words.append(str(entry))  # "always changed", "changed command"
            continue
        for kind, paths in entry.items():
            items = [f"{path} ({', '.join(f'{k} {v}' for k, v in change.items())})" if isinstance(change, dict)
                     else f"{path} ({change})" for path, change in paths.items()]
            words.append(f"{kind}: {', '.join(items)}")
    return "; ".join(words)


def status(args: argparse.Namespace) -> int:
    from flows.graph import stages_in_order, stale_stages, status_json

    root = _workspace(args)
    if _refused(root):
        return 2
    proc = subprocess.run(dvc("status", "--json"), cwd=root, env=stage_env(), capture_output=True, text=True,
                          check=False)
    if proc.returncode:
        sys.stderr.write(proc.stdout + proc.stderr)
        return proc.returncode
    report = status_json(proc.stdout.splitlines())
    changed = json.loads(report) or {}
    stages = stages_in_order(root)
    stale = stale_stages(stages, report)
    if not stale:
        print(f"up to date: `dvc repro` would run none of the {len(stages)} stages")
        return 0
    print(f"`dvc repro` would run {len(stale)} of {len(stages)} stages:")
    for stage in stages:
        if stage.name in changed:
            print(f"  {stage.name}: {_changes(changed[stage.name])}")
        elif stage.name in stale:
            print(f"  {stage.name}: after {', '.join(n for n in stage.needs if n in stale)}")
    return 0


def summary(args: argparse.Namespace) -> int:
    from flows.summary import print_summary

    root = _workspace(args)
    if _refused(root):
        return 2
    print_summary(root)
    return 0


def compare(args: argparse.Namespace) -> int:
    from flows.compare import compare as compare_runs

    root = _workspace(args)
    if _refused(root):
        return 2
    try:
        lines = compare_runs(root, args.runs, args.baseline)
    except ValueError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    print("\n".join(lines))
    return 0


def serve(argv: list[str]) -> int:
    from flows.serve import main

    # The workspace is the current folder, as for every command (a --workspace given later wins).
    main(["--workspace", str(Path.cwd()), *argv], prog=f"{PROG} serve")
    return 0


def generate(argv: list[str]) -> int:
    return _call([sys.executable, "-m", "stages.export", "generate", *argv])


# Commands whose own parser takes every argument after their name (their --help is theirs).
DELEGATED: dict[str, Callable[[list[str]], int]] = {"serve": serve, "generate": generate}


def parser() -> argparse.ArgumentParser:
    top = argparse.ArgumentParser(
        prog=PROG, description="Raw multilingual text to a trained, pruned, INT8 language model: the DVC pipeline "
                               "and its Prefect flows. Run in a workspace (dvc.yaml + params.yaml) or pass --root.",
        epilog=f"`{PROG} <command> --help` describes each command.")
    commands = top.add_subparsers(dest="command", metavar="<command>", required=True)

    def add(name: str, run: Callable[[argparse.Namespace], int] | None, summary: str,
            description: str, root: bool = True) -> argparse.ArgumentParser:
        sub = commands.add_parser(name, help=summary, description=f"{summary}. {description}",
                                  prog=f"{PROG} {name}", add_help=run is not None)
        sub.set_defaults(run=run)
        if run is not None and root:
            sub.add_argument("--root", type=Path, help="the workspace (default: the current folder)")
        return sub

    sub = add("init", init, "Make a workspace for your own data",
              "dvc.yaml and params.yaml as Refinery ships them, without the demo corpus (clean reads corpus/, the "
              "semantic filter learns from labels/labels.jsonl), corpus/ and labels/ with a README each, .gitignore; "
              "then git and DVC are initialised. Refuses a folder that holds dvc.yaml or params.yaml: nothing is "
              "overwritten. Prints the next steps.", root=False)
    sub.add_argument("dir", nargs="?", type=Path, metavar="DIR",
                     help="the folder to make the workspace in, created if missing (default: the current folder)")

    sub = add("check", check, "Check params.yaml and the inputs it names, running nothing",
              "Every stage's section (unknown keys, types, ranges, cross-field rules such as the parallel layout) "
              "and every input no stage makes (e.g. clean.input); then the data: the first records of each source "
              "through clean's checks, the labels against what the semantic filter needs, the tokens each tier would "
              "get against what training needs. Exit status 0 when the pipeline can start, 2 with one line per "
              "mistake.")
    sub.add_argument("--params", type=Path, help="the params file to check (default: <root>/params.yaml); without "
                                                 "--root, the workspace is its folder")
    sub.add_argument("--params-only", action="store_true", help="the params and that the inputs exist; no data read")
    sub = add("demo", demo, "Check, reproduce the pipeline, print the run summary",
              f"`{PROG} check`, then `dvc repro` (only the stages whose inputs, code or params changed), then the "
              "run summary. As params.yaml ships, on the bundled demo corpus.")
    sub.add_argument("--force", action="store_true", help="rerun every stage (`dvc repro --force`)")
    add("status", status, "Which stages `dvc repro` would run, and why",
        "`dvc status` in words: changed inputs, params or code, and the stages after them.")
    add("summary", summary, "Print the run summary of the last pipeline run",
        "Read from metrics/; figures of stages that `dvc repro` would rerun are marked stale.")
    sub = add("compare", compare, "Compare runs: the workspace, experiments, git revisions",
              "One row per run with the headline figures (documents kept, validation perplexity, training speed, the "
              "INT8 model's size, speed and perplexity ratio) and each one's change against the baseline.")
    sub.add_argument("runs", nargs="*", metavar="RUN", help="experiment names (`dvc exp show`) or git revisions "
                                                             "(default: the workspace, HEAD and HEAD's experiments)")
    sub.add_argument("--baseline", metavar="RUN", help="the run the others are compared with (default: HEAD)")
    add("serve", None, "Start the Prefect server and serve the flows",
        "The UI on http://127.0.0.1:4200, the `pipeline` and the scheduled `retrain` deployments, until Ctrl-C. "
        f"`{PROG} serve --help` for its options.")
    add("generate", None, "Sample text from the exported model",
        f"The INT8 ONNX model by default (python -m stages.export generate). `{PROG} generate --help` for its "
        "options.")
    return top


def main(argv: list[str] | None = None) -> None:
    argv = sys.argv[1:] if argv is None else argv
    if argv and argv[0] in DELEGATED:
        sys.exit(DELEGATED[argv[0]](argv[1:]))
    args = parser().parse_args(argv)
    sys.exit(args.run(args))


if __name__ == "__main__":
    main()
