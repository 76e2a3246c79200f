"""Workspaces: the folder every `refinery` command works on (dvc.yaml and params.yaml, in git and DVC
repositories), and `refinery init`, which makes one for your own data from the pipeline Refinery ships
(flows/template/: dvc.yaml.in and params.yaml.in, links to the checkout's dvc.yaml and params.yaml, copies
in a wheel; not named dvc.yaml, which DVC would collect as a second pipeline of this repository).

What `init` writes, nothing of it over an existing file (a folder that holds dvc.yaml or params.yaml is
refused):
- dvc.yaml: the shipped pipeline without the `demo_corpus` stage and the curriculum study's dep. The
  stages' code is the installed `refinery` package (`python -m stages.<name>` imports it), not files of
  the workspace, so the code deps (`stages/...`) are left out: DVC can only hash what is inside the
  repository, and a path into one machine's virtualenv would make every clone stale. After upgrading
  refinery, `dvc repro --force`.
  The plots' templates are copied to .dvc/plots/, where DVC finds a template by its name.
- params.yaml: the shipped file edited line by line, so every comment stays: no `demo_corpus:` section,
  `clean.input: corpus`, `clean.sources: []` with a commented example, `semantic_embed.labels_path:
  labels/labels.jsonl`, `report.curriculum_path: ""` (no curriculum study).
- corpus/README.md (clean reads no .md file), labels/README.md (the labels' format, and how many the
  semantic head needs), .gitignore; then `git init` (unless inside a work tree), `dvc init`, analytics off.
"""
from __future__ import annotations

import importlib.metadata
import logging
import math
import re
import subprocess
from pathlib import Path
from typing import Any

from flows.commands import command_env, dvc, run
from flows.config import ROOT
from stages.common.runtime.params import parse_yaml

TEMPLATE_DIR = Path(__file__).resolve().parent / "template"
PLOT_TEMPLATES = ROOT / "stages" / "plots"  # package data of `stages`, beside `flows` in a checkout or a wheel
WORKSPACE_FILES = ("dvc.yaml", "params.yaml")
DEMO_STAGE = "demo_corpus"
CORPUS_DIR = "corpus"
LABELS_PATH = "labels/labels.jsonl"
# dvc.yaml deps that are the pipeline's own code, not data of the workspace
CODE_DEP_RE = re.compile(r"^\s+- (?:stages/\S+|requirements\.lock)\s*(?:#.*)?$")
CURRICULUM_DEP = "${report.curriculum_path}"  # the shipped study: a workspace of your own data has none
COMMENT_COLUMN = 29  # where params.yaml's comments start
SPLIT_CONFIDENCE = 0.95  # labels README: the count at which the hash split leaves enough training examples

DVC_YAML_HEADER = """\
# Made by `refinery init` (refinery {version}) from the pipeline it ships, for your own data: `clean` reads
# clean.input, `semantic_embed` your labels (params.yaml). The stages' code is the installed refinery package,
# not files of this workspace, so no stage lists it as a dependency: after upgrading refinery, run
# `dvc repro --force` to rebuild with the new code. The plots' templates are in .dvc/plots/.
"""

SOURCES_BLOCK = """\
  sources: []                # one entry per kind of file under `input`; [] = every file as one source with the
                             # format/text_field/id_field/keep_fields below. Example:
  #  - name: crawl            # the docs' and quarantine's `source` column; the funnel is counted per source
  #    path: "*.warc.gz"      # file, folder or glob, relative to `input`
  #  - name: export
  #    path: "*.parquet"
  #    text_field: content    # unset keys take the values of clean.format/text_field/id_field/keep_fields
  #    keep_fields: [url, date]
  #    rename: {crawl_date: date}   # fields renamed before the keys above are looked up
  #  - name: articles
  #    path: "*.csv"
"""

GITIGNORE = """\
# written by the pipeline and tracked by DVC (dvc.lock), not by git; metrics/ is tracked by git
/data/
/models/
/reports/
# your inputs, tracked by DVC (`dvc add`): git tracks their .dvc files
/corpus/
/labels/labels.jsonl
# Python
__pycache__/
*.pyc
.venv/
"""

CORPUS_README = """\
# corpus/

Your raw text: every file here is an input of the `clean` stage (`clean.input: corpus` in params.yaml).
Formats, by extension: JSON Lines (`.jsonl`, `.ndjson`, `.json`, each optionally `.gz` or `.zst`), Parquet
(`.parquet`), plain text (`.txt`, `.txt.gz`, `.txt.zst`: one document per file), web archives (`.warc`,
`.warc.gz`; WET: `.wet`, `.warc.wet.gz`), CSV/TSV with a header row (`.csv`, `.tsv`, optionally `.gz`) and
Hugging Face `datasets` folders (`save_to_disk` output). `clean` reads no other file, this one included.

Files of one kind are one source; for several kinds (a crawl and a database export, say), give each an
entry in `clean.sources` (params.yaml has an example) with its own format and fields.

Then `dvc add corpus` and commit `corpus.dvc`: DVC tracks the folder, and reruns the pipeline when it changes.
"""

LABELS_README = """\
# labels/

`labels.jsonl` (`semantic_embed.labels_path` in params.yaml) teaches the semantic filter what to drop. It
is JSON Lines, one example per line, and JSON has no comments, so its format is described here:

    {{"text": "Flash sale: 50% off, today only!", "label": "drop", "category": "ad", "lang": "en", "id": "ad-1"}}
    {{"text": "The river rises in the hills and ...", "label": "keep", "lang": "en", "id": "prose-1"}}

- `text` (required): the example, as such text appears in your documents.
- `label` (required): `keep` or `drop`.
- `category`: for `drop`, the kind of text, e.g. `ad` or `boilerplate`; documents dropped as one get the
  reason `semantic:<category>`.
- `lang`: ISO 639-1 code; detected when absent.
- `id`: a stable id; a hash of it puts the example in training or validation (default `label-<line
  number>`, which moves when lines are inserted above it).

**How many.** Write keep and drop examples in every language you keep (`clean.languages`: {languages}).
A language gets a head of its own when it has at least {minimum} keep and {minimum} drop *training*
examples (`semantic_head.min_labels_per_class`). {fraction:.0%} of the examples are held out for validation
(`semantic_head.val_fraction`), so that takes at least {average} of each class per language ({minimum} /
{train_share:g}); the split is by a hash of the id, not exact, so write {safe} or more: then at least {minimum}
land in training {odds}. A few hundred per language and class make the validation scores, and the
thresholds chosen on them, worth trusting. A language with fewer is scored by the pooled head, trained
on every language's examples, which needs as many keep and drop training examples in all (or the
`semantic_head` stage stops with an error).

Then `dvc add labels/labels.jsonl` and commit `labels/labels.jsonl.dvc`.
"""

NEXT_STEPS = """\
Made a Refinery workspace in {root}: dvc.yaml, params.yaml, corpus/, labels/README.md, .gitignore; git and DVC
initialised. Next:{cd}
  1. Put your files in corpus/ (corpus/README.md: the formats), then `dvc add corpus`.
  2. Describe them in params.yaml: clean.sources (one entry per kind of file; [] reads every file alike with
     clean.format, text_field, id_field and keep_fields) and clean.languages.
  3. Write labels/labels.jsonl (labels/README.md: the format, and how many examples), then
     `dvc add labels/labels.jsonl`.
  4. `refinery check`: params.yaml and the inputs it names, one line per mistake, nothing run.
  5. `dvc repro` (or `refinery demo`: check, repro, summary); commit dvc.lock, metrics/ and the .dvc files.
Model size and hardware (train.preset, processes, tokenizer.vocab_size): Refinery's README, "Your own data".
"""

log = logging.getLogger("refinery.init")


class WorkspaceError(Exception):
    """The folder cannot become a workspace; the message is one line."""


def not_a_workspace(root: Path, need_params: bool = True) -> str | None:
    """Why `root` is not a workspace (one line), or None when it is one."""
    missing = [name for name in WORKSPACE_FILES
               if (need_params or name != "params.yaml") and not (root / name).is_file()]
    if not missing:
        return None
    return (f"{root} is not a Refinery workspace (no {' / '.join(missing)}): run `refinery init` there, or pass "
            f"--root")


# ---- the pipeline files, edited as text so that their comments stay ----

def _indent(line: str) -> int:
    return len(line) - len(line.lstrip(" "))


def _remove_block(lines: list[str], header: str, indent: int) -> list[str]:
    """`lines` without the mapping key `header` at `indent` and everything under it (its more indented and
    blank lines), up to the next line at that indent or less."""
    key = re.compile(rf" {{{indent}}}{re.escape(header)}:\s*(#.*)?")
    start = next((i for i, line in enumerate(lines) if key.fullmatch(line)), None)
    if start is None:
        return lines
    end = next((j for j in range(start + 1, len(lines)) if lines[j].strip() and _indent(lines[j]) <= indent),
               len(lines))
    return lines[:start] + lines[end:]


def _section(lines: list[str], section: str) -> tuple[int, int]:
    """The line range of a top-level section of params.yaml (its key line first)."""
    start = next(i for i, line in enumerate(lines) if line.startswith(f"{section}:"))
    end = next((j for j in range(start + 1, len(lines)) if lines[j].strip() and _indent(lines[j]) == 0), len(lines))
    return start, end


def _key_line(lines: list[str], section: str, key: str) -> int | None:
    start, end = _section(lines, section)
    return next((i for i in range(start + 1, end) if lines[i].startswith(f"  {key}:")), None)


def _set_value(lines: list[str], section: str, key: str, value: str) -> list[str]:
    """`section.key` (a plain scalar on its own line) set to `value`, its comment kept."""
    i = _key_line(lines, section, key)
    if i is None:
        raise KeyError(f"params.yaml has no {section}.{key}")
    match = re.fullmatch(rf"(  {key}:)[^#]*?(\s+#.*)?", lines[i])
    text = f"{match.group(1)} {value}"
    if match.group(2):
        text = (text.ljust(COMMENT_COLUMN) if len(text) < COMMENT_COLUMN else text + "  ") + match.group(2).lstrip()
    return lines[:i] + [text] + lines[i + 1:]


def _put_sources(lines: list[str]) -> list[str]:
    """clean.sources as SOURCES_BLOCK: in place of the shipped key and its comment lines, or after
    clean.input's lines when params.yaml has none."""
    i = _key_line(lines, "clean", "sources")
    if i is None:
        i = _key_line(lines, "clean", "input") + 1
        while i < len(lines) and _indent(lines[i]) > 2:
            i += 1
        end = i
    else:
        end = i + 1
        while end < len(lines) and (_indent(lines[end]) > 2 or lines[end].startswith("  #")):
            end += 1
    return lines[:i] + SOURCES_BLOCK.splitlines() + lines[end:]


def own_data_dvc_yaml(shipped: str, version: str) -> str:
    """The shipped dvc.yaml for a workspace of your own data (see the module docstring)."""
    lines = _remove_block(shipped.splitlines(), DEMO_STAGE, indent=2)
    text = "\n".join(line for line in lines
                     if not CODE_DEP_RE.match(line) and line.split("#")[0].strip() != f"- {CURRICULUM_DEP}") + "\n"
    text = re.sub(r"(template: )stages/plots/", r"\1", text).replace("stages/plots/", ".dvc/plots/")
    return DVC_YAML_HEADER.format(version=version) + text


def own_data_params(shipped: str) -> str:
    """The shipped params.yaml for a workspace of your own data (see the module docstring)."""
    lines = _remove_block(shipped.splitlines(), DEMO_STAGE, indent=0)
    lines = _set_value(lines, "clean", "input", CORPUS_DIR)
    lines = _put_sources(lines)
    lines = _set_value(lines, "semantic_embed", "labels_path", LABELS_PATH)
    lines = _set_value(lines, "report", "curriculum_path", '""')
    return "\n".join(lines) + "\n"


def plot_templates(dvc_yaml: str) -> list[str]:
    """The template files a dvc.yaml's plots name."""
    return sorted({t for plot in parse_yaml(dvc_yaml, "dvc.yaml").get("plots") or [] for spec in plot.values()
                   if isinstance(spec, dict) and (t := spec.get("template"))})


def _at_least(successes: int, trials: int, p: float) -> float:
    """P(Binomial(trials, p) >= successes)."""
    return sum(math.comb(trials, k) * p ** k * (1 - p) ** (trials - k) for k in range(successes, trials + 1))


def labels_readme(params: dict[str, Any]) -> str:
    """labels/README.md, its counts from params.yaml's semantic_head section."""
    minimum, fraction = params["semantic_head"]["min_labels_per_class"], params["semantic_head"]["val_fraction"]
    train_share = 1 - fraction
    safe = next(n for n in range(minimum, 100 * minimum) if _at_least(minimum, n, train_share) >= SPLIT_CONFIDENCE)
    return LABELS_README.format(
        languages=", ".join(params["clean"]["languages"]), minimum=minimum, fraction=fraction,
        train_share=train_share, average=math.ceil(minimum / train_share), safe=safe,
        odds=f"{round(SPLIT_CONFIDENCE * 20)} times out of 20")


# ---- refinery init ----

def _git_toplevel(folder: Path) -> Path | None:
    proc = subprocess.run(["git", "rev-parse", "--show-toplevel"], cwd=folder, env=command_env(), capture_output=True,
                          text=True, stdin=subprocess.DEVNULL)
    return Path(proc.stdout.strip()).resolve() if proc.returncode == 0 else None


def _write_new(path: Path, text: str) -> None:
    """Write a file that must not exist yet."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "x", encoding="utf-8") as f:
        f.write(text)


def _gitignore(path: Path) -> None:
    """GITIGNORE, or its entries the file lacks appended to it."""
    if not path.exists():
        _write_new(path, GITIGNORE)
        return
    have = set(path.read_text(encoding="utf-8").splitlines())
    missing = [line for line in GITIGNORE.splitlines() if line and not line.startswith("#") and line not in have]
    if missing:
        text = path.read_text(encoding="utf-8")
        path.write_text(text + ("" if text.endswith("\n") or not text else "\n") + "# refinery\n"
                        + "\n".join(missing) + "\n", encoding="utf-8")


def init_workspace(root: Path) -> None:
    """Make `root` (created if missing) a workspace for your own data; WorkspaceError when it holds one
    already, CommandFailed when git or DVC fails."""
    if root.exists() and not root.is_dir():
        raise WorkspaceError(f"{root} is not a folder")
    taken = [name for name in WORKSPACE_FILES if (root / name).exists()]
    if taken:
        raise WorkspaceError(f"{root} already holds {' and '.join(taken)}: `refinery init` never overwrites a "
                             "workspace (use an empty folder, or edit the files)")
    shipped_params = (TEMPLATE_DIR / "params.yaml.in").read_text(encoding="utf-8")
    dvc_yaml = own_data_dvc_yaml((TEMPLATE_DIR / "dvc.yaml.in").read_text(encoding="utf-8"),
                                 importlib.metadata.version("refinery"))
    params = own_data_params(shipped_params)
    root.mkdir(parents=True, exist_ok=True)

    toplevel = _git_toplevel(root)
    if toplevel is None:
        run(["git", "init", "--quiet"], root, log, quiet=True)
    if not (root / ".dvc").is_dir():
        run(dvc("init", "--quiet", *(["--subdir"] if toplevel not in (None, root) else [])), root, log, quiet=True)
    run(dvc("config", "core.analytics", "false"), root, log, quiet=True)
    for name in plot_templates(dvc_yaml):
        target = root / ".dvc" / "plots" / name
        if not target.exists():
            _write_new(target, (PLOT_TEMPLATES / name).read_text(encoding="utf-8"))

    if not (root / CORPUS_DIR).exists():  # a folder of yours is left as it is
        _write_new(root / CORPUS_DIR / "README.md", CORPUS_README)
    if not (root / "labels" / "README.md").exists():
        _write_new(root / "labels" / "README.md", labels_readme(parse_yaml(params, "params.yaml")))
    _gitignore(root / ".gitignore")
    _write_new(root / "params.yaml", params)
    _write_new(root / "dvc.yaml", dvc_yaml)  # last: a run that fails before here can be repeated


def next_steps(root: Path, cwd: Path) -> str:
    return NEXT_STEPS.format(root=root, cd="" if root == cwd else f"\n  cd {root}")
