"""How the data stages behave as the corpus grows: time, throughput, memory and scratch disk per size.

    python -m bench.scale                              # 24k to 1.5M records; all stages up to 384k
    python -m bench.scale --sizes 2000 4000 --full-upto 2000 --out /tmp/scale_smoke   # a quick check
    python bench/scale.py ...                          # the same

For each size the demo corpus generator (`python -m stages.demo_corpus`, params.yaml's `demo_corpus` section with
`num_docs` set) writes a corpus into `<cache-dir>/<size>/corpus/`, kept between runs under a key of the generator's
params and the digest of its code and data (its deps in dvc.yaml): a changed generator builds it again. Then
`clean` runs on every size, and semantic_embed, semantic_head, semantic_filter, tokenizer and perplexity on sizes
up to `--full-upto`, each as its own process with the command of dvc.yaml and a params file that is params.yaml
with every data/, models/ and metrics/ path moved into `<cache-dir>/<size>/run/` (the generator's outputs point at
the cached corpus; `clean.num_workers` from `--workers`). semantic_embed reads the smallest size's semantic labels
at every size: the generator writes labels in proportion to the corpus, a user's labels file does not grow with it.
A sampler thread records each process's peak resident memory and the peak size of the stage's work_dir. Needs
psutil (`pip install -e '.[test]'`). Results: `<out>.json` and `<out>.md`, rewritten after every stage run, so a
long run that stops keeps what it measured.
"""
from __future__ import annotations

import argparse
import hashlib
import json
import os
import shutil
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psutil
import yaml

if not __package__:  # run as a file (python bench/scale.py): the checkout, not bench/, is where bench imports from
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from bench import _provenance  # noqa: E402 (after the path above)
from stages.common.runtime.digest import file_digest  # noqa: E402
from stages.common.runtime.params import read_params  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]

DEFAULT_SIZES = (24000, 96000, 192000, 384000, 1500000)
FULL_STAGES = ("clean", "semantic_embed", "semantic_head", "semantic_filter", "tokenizer", "perplexity")
GENERATOR = "demo_corpus"
RUN_FOLDERS = ("data", "models", "metrics")  # params.yaml paths under these move into the run folder
SAMPLE_INTERVAL_S = 0.2
BASE_SIZE, MEMORY_SIZE = 24000, 192000  # the ratios compare 192k (memory) and the largest size (throughput) to 24k
MB = 1e6
# Every data stage and the corpus generator, each run with the command of dvc.yaml: bench/_provenance.py's
# default and dvc.yaml
MEASURES = ("stages", "flows", "params.yaml", "dvc.yaml")


# ---- measuring one process tree -----------------------------------------------------------------------
def tree_size(path: str | Path) -> int:
    """Bytes in the files under `path` (apparent sizes, links not followed); 0 when it does not exist.
    The stage writes, renames and deletes files while this walks, so a vanished entry counts as nothing."""
    try:
        entries = list(os.scandir(path))
    except (FileNotFoundError, NotADirectoryError):
        return 0
    total = 0
    for entry in entries:
        try:
            if entry.is_dir(follow_symlinks=False):
                total += tree_size(entry.path)
            else:
                total += entry.stat(follow_symlinks=False).st_size
        except FileNotFoundError:
            continue
    return total


def status_bytes(pid: int, *fields: str) -> list[int]:
    """Fields of /proc/<pid>/status that are sizes in kB, in bytes (0 for one missing, e.g. once a zombie):
    VmHWM, the peak RSS so far; RssAnon, the current private memory (heap, stacks), which excludes the
    file-backed pages of memory-mapped files that RSS counts too."""
    found = dict.fromkeys(fields, 0)
    with open(f"/proc/{pid}/status", encoding="ascii") as f:
        for line in f:
            name, _, value = line.partition(":")
            if name in found:
                found[name] = int(value.split()[0]) * 1024
    return [found[name] for name in fields]


@dataclass
class Seen:
    """One process of the tree: its peak RSS and CPU seconds as last read."""
    peak: int
    cpu_s: float
    anon: int  # the largest RssAnon sampled (no kernel high-water mark exists for it)
    depth: int  # 0: the driver, 1: its child, ...
    command: str


@dataclass
class Peaks:
    processes: dict[tuple[int, float], Seen] = field(default_factory=dict)  # (pid, start time) -> what was seen
    tree: int = 0  # bytes: the largest sum of RSS over the tree at one sample
    work: int = 0  # bytes: the largest size of the work folder
    max_descendants: int = 0  # the most processes below the driver at one sample
    num_samples: int = 0


class Sampler(threading.Thread):
    """Every `interval` s: the RSS, peak RSS and CPU time of the process `pid` (the driver) and of each of
    its descendants (the workers), the sum of their RSS, and the size of `work_dir`, keeping the maximum of
    each. The peak is the kernel's high-water mark, so a spike between two samples counts too; what a
    process does after its last sample (at most `interval` s) is missed."""

    def __init__(self, pid: int, work_dir: str | None, interval: float) -> None:
        super().__init__(daemon=True)
        self.driver, self.work_dir, self.interval = psutil.Process(pid), work_dir, interval
        self.peaks, self.stop = Peaks(), threading.Event()

    def run(self) -> None:
        while not self.stop.is_set():
            self.sample()
            self.stop.wait(self.interval)

    def sample(self) -> None:
        p = self.peaks
        try:
            children = self.driver.children(recursive=True)
        except psutil.NoSuchProcess:  # the driver has just ended
            children = []
        total = 0
        for proc in [self.driver, *children]:
            try:  # a process may end between the listing and these reads
                rss, cpu = proc.memory_info().rss, proc.cpu_times()
                hwm, anon = status_bytes(proc.pid, "VmHWM", "RssAnon")
                key = (proc.pid, proc.create_time())
                seen = p.processes.get(key) or Seen(0, 0.0, 0, self.depth(proc), " ".join(proc.cmdline())[:160])
            except (psutil.NoSuchProcess, FileNotFoundError):
                continue
            seen.peak, seen.cpu_s, seen.anon = max(seen.peak, rss, hwm), cpu.user + cpu.system, max(seen.anon, anon)
            p.processes[key] = seen
            total += rss
        p.tree = max(p.tree, total)
        p.max_descendants = max(p.max_descendants, len(children))
        if self.work_dir:
            p.work = max(p.work, tree_size(self.work_dir))
        p.num_samples += 1

    def depth(self, proc: psutil.Process) -> int:
        return 0 if proc.pid == self.driver.pid else 1 + [a.pid for a in proc.parents()].index(self.driver.pid)


def run_measured(command: list[str], log_path: Path, work_dir: str | None) -> dict[str, Any]:
    """Run `command` (cwd: the checkout, output to `log_path`) under a Sampler; its figures and wall time."""
    load_before = os.getloadavg()[0]
    with open(log_path, "wb") as log:
        start = time.perf_counter()
        proc = subprocess.Popen(command, cwd=ROOT, stdout=log, stderr=subprocess.STDOUT)
        sampler = Sampler(proc.pid, work_dir, SAMPLE_INTERVAL_S)
        sampler.start()
        # wait4, not Popen.wait: its rusage covers the driver to its end (and the descendants it reaped)
        _, status, usage = os.wait4(proc.pid, 0)
        wall = time.perf_counter() - start
        proc.returncode = os.waitstatus_to_exitcode(status)
        sampler.stop.set()
        sampler.join()
    p = sampler.peaks
    driver = max((s for s in p.processes.values() if s.depth == 0), key=lambda s: s.peak, default=Seen(0, 0.0, 0, 0, ""))
    worker = max((s for s in p.processes.values() if s.depth > 0), key=lambda s: s.peak, default=None)
    # Both are lower bounds of the tree's CPU time: the samples miss each process's last moments, wait4 the
    # descendants the driver did not reap itself (a forkserver's workers)
    cpu_s = max(sum(s.cpu_s for s in p.processes.values()), usage.ru_utime + usage.ru_stime)
    return {"returncode": proc.returncode, "wall_s": round(wall, 2), "cpu_s": round(cpu_s, 1),
            "driver_peak_mb": round(driver.peak / MB, 1),
            "worker_peak_mb": round(worker.peak / MB, 1) if worker else None,
            "max_process_peak_mb": round(max(driver.peak, worker.peak if worker else 0) / MB, 1),
            "driver_anon_peak_mb": round(driver.anon / MB, 1),
            "max_worker_anon_peak_mb": round(max((s.anon for s in p.processes.values() if s.depth > 0),
                                                 default=0) / MB, 1) if worker else None,
            "worker_peak_depth": worker.depth if worker else None,
            "worker_peak_command": worker.command if worker else None,
            "tree_peak_mb": round(p.tree / MB, 1),
            "work_peak_mb": round(p.work / MB, 1) if work_dir else None,
            "num_processes_seen": len(p.processes), "max_descendants": p.max_descendants,
            "num_samples": p.num_samples, "load_before": round(load_before, 2),
            "load_after": round(os.getloadavg()[0], 2)}


def log_tail(path: Path, lines: int = 25) -> str:
    return "\n".join(path.read_text(encoding="utf-8", errors="replace").splitlines()[-lines:])


# ---- params files -------------------------------------------------------------------------------------
def relocate(value: Any, run_dir: Path, moved: dict[str, str]) -> Any:
    """`value` with each path the generator writes replaced by `moved`, and each other data/, models/ or
    metrics/ path put under `run_dir`; mappings and lists item by item."""
    if isinstance(value, dict):
        return {k: relocate(v, run_dir, moved) for k, v in value.items()}
    if isinstance(value, list):
        return [relocate(v, run_dir, moved) for v in value]
    if isinstance(value, str) and value in moved:
        return moved[value]
    if isinstance(value, str) and value.split("/", 1)[0] in RUN_FOLDERS and "/" in value:
        return str(run_dir / value)
    return value


def generator_paths(corpus_dir: Path) -> dict[str, str]:
    return {"out_dir": str(corpus_dir / "raw"), "labels_path": str(corpus_dir / "labels.jsonl"),
            "semantic_labels_path": str(corpus_dir / "semantic_labels.jsonl"),
            "metrics_path": str(corpus_dir / "metrics.json"), "detail_path": str(corpus_dir / "detail.json")}


def generator_key(section: dict[str, Any], num_docs: int) -> dict[str, Any]:
    """What the corpus depends on: the generator's params (paths aside) and the digest of every file of
    its dvc.yaml deps (code, word lists and templates, requirements.lock)."""
    settings = {k: v for k, v in section.items() if not k.endswith(("_dir", "_path"))} | {"num_docs": num_docs}
    deps = yaml.safe_load((ROOT / "dvc.yaml").read_text(encoding="utf-8"))["stages"][GENERATOR]["deps"]
    files = sorted(f for dep in deps for f in ([ROOT / dep] if (ROOT / dep).is_file() else (ROOT / dep).rglob("*"))
                   if f.is_file() and "__pycache__" not in f.parts)
    h = hashlib.blake2b(digest_size=16)
    for f in files:
        h.update(f"{f.relative_to(ROOT).as_posix()} {file_digest(f)}\n".encode())
    return {"params": settings, "code": h.hexdigest()}


def corpus(params: dict[str, Any], size_dir: Path, num_docs: int) -> dict[str, Any]:
    """The cached corpus of `num_docs` records under size_dir/corpus, built first when it is missing or its
    key differs; its figures (and, when built now, the generator's measurements; on failure, its status)."""
    final, key = size_dir / "corpus", generator_key(params[GENERATOR], num_docs)
    key_path = final / "key.json"  # written last: its presence marks a complete corpus
    info: dict[str, Any] = {"cached": True}
    if not key_path.is_file() or json.loads(key_path.read_text()) != key:
        tmp = size_dir / "corpus.tmp"
        shutil.rmtree(tmp, ignore_errors=True)
        tmp.mkdir(parents=True)
        section = {**params[GENERATOR], "num_docs": num_docs, **generator_paths(tmp)}
        (tmp / "params.yaml").write_text(yaml.safe_dump({GENERATOR: section}, sort_keys=False))
        print(f"[scale] generating {num_docs:,} records into {final}", flush=True)
        measured = run_measured([sys.executable, "-m", f"stages.{GENERATOR}", "--params", str(tmp / "params.yaml")],
                                tmp / "generate.log", None)
        if measured["returncode"]:
            tail = log_tail(tmp / "generate.log")
            print(f"[scale] the generator failed (log {tmp / 'generate.log'}):\n{tail}", file=sys.stderr, flush=True)
            return {"records": num_docs, "failed": measured["returncode"], "log_tail": tail, **measured}
        (tmp / "key.json").write_text(json.dumps(key, sort_keys=True))
        shutil.rmtree(final, ignore_errors=True)
        tmp.rename(final)
        info = {"cached": False, **{k: measured[k] for k in ("wall_s", "cpu_s", "max_process_peak_mb")}}
    detail = json.loads((final / "detail.json").read_text())
    return {"records": detail["records"], "mb": round(detail["bytes_uncompressed"] / MB, 1),
            "mb_gzip": round(detail["bytes_compressed"] / MB, 1), "path": str(final), **info}


def docs_in(detail: dict[str, Any]) -> int:
    """Documents the stage read: num_read (clean, semantic_filter), num_docs (semantic_embed, tokenizer,
    perplexity), or its labelled examples (semantic_head)."""
    if "num_read" in detail:
        return detail["num_read"]
    if "num_docs" in detail:
        return detail["num_docs"]
    return detail["num_train"] + detail["num_validation"]


def run_size(params: dict[str, Any], num_docs: int, args: argparse.Namespace, results: dict[str, Any]) -> bool:
    """Every stage of this size (clean; the rest up to --full-upto), appended to results["runs"]; False
    once one fails (the later ones need its outputs)."""
    size_dir = args.cache_dir / str(num_docs)
    results["corpus"][str(num_docs)] = info = corpus(params, size_dir, num_docs)
    if "failed" in info:
        write_results(results, args.out)
        return False
    run_dir = size_dir / "run"
    shutil.rmtree(run_dir, ignore_errors=True)  # a stopped run's folders would be refused by the stages
    (run_dir / "logs").mkdir(parents=True)
    moved = {params[GENERATOR][k]: v for k, v in generator_paths(Path(info["path"])).items()}
    # a user's labels do not grow with the corpus, the generator's do: every size reads the smallest size's
    labels_corpus = args.cache_dir / str(min(args.sizes)) / "corpus"
    moved[params[GENERATOR]["semantic_labels_path"]] = generator_paths(labels_corpus)["semantic_labels_path"]
    stages = FULL_STAGES if num_docs <= args.full_upto else FULL_STAGES[:1]
    sections = {s: relocate(params[s], run_dir, moved) for s in stages}
    sections["clean"]["num_workers"] = args.workers
    params_path = run_dir / "params.yaml"
    params_path.write_text(yaml.safe_dump(sections, sort_keys=False, allow_unicode=True))
    ok = True
    for stage in stages:
        section = sections[stage]
        print(f"[scale] {num_docs:,} records: {stage}", flush=True)
        log_path = run_dir / "logs" / f"{stage}.log"
        row = {"stage": stage, "records": num_docs,
               **run_measured([sys.executable, "-m", f"stages.{stage}", "--params", str(params_path)], log_path,
                              section.get("work_dir"))}
        if row["returncode"]:
            row["log_tail"] = log_tail(log_path)
            print(f"[scale] {stage} failed (status {row['returncode']}, log {log_path}):\n{row['log_tail']}",
                  file=sys.stderr, flush=True)
            ok = False
        else:
            detail = json.loads(Path(section["detail_path"]).read_text())
            row["docs_in"] = docs_in(detail)
            row["seconds"] = round(detail["seconds"], 2)
            row["docs_per_s"] = round(row["docs_in"] / detail["seconds"], 1)
            row["kept"] = detail.get("num_kept")
            if stage == "clean":  # the dedup phases: keys, partitions, pairs and their wall time
                row["dedup"] = {k: v for k, v in detail.items() if k.startswith("dedup.") or k == "seconds.dedup"}
            row["out_mb"] = round(tree_size(section["out_dir"]) / MB, 1)
        results["runs"].append(row)
        write_results(results, args.out)
        if not ok:
            break
    if ok and not args.keep:
        shutil.rmtree(run_dir)
    return ok


# ---- results ------------------------------------------------------------------------------------------
def ratios(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """Clean's peak memory at 192k over 24k, each stage's docs/s at its largest size over 24k, and the
    largest process at the largest size. Sizes not run: the nearest there are (smallest for 24k, largest
    for 192k), named in the result."""
    done = [r for r in runs if r["returncode"] == 0]
    out: dict[str, Any] = {}
    clean = {r["records"]: r for r in done if r["stage"] == "clean"}
    if clean:
        base = BASE_SIZE if BASE_SIZE in clean else min(clean)
        mid = MEMORY_SIZE if MEMORY_SIZE in clean else max(clean)
        out["clean_peak_memory"] = {"sizes": [mid, base], **{
            key: round(clean[mid][key] / clean[base][key], 3) if clean[mid][key] and clean[base][key] else None
            for key in ("driver_peak_mb", "worker_peak_mb", "tree_peak_mb", "max_process_peak_mb")}}
    out["throughput"] = {}
    for stage in FULL_STAGES:
        rows = {r["records"]: r for r in done if r["stage"] == stage}
        base = BASE_SIZE if BASE_SIZE in rows else min(rows, default=None)
        top = max(rows, default=None)
        if top != base:
            out["throughput"][stage] = {"sizes": [top, base],
                                        "ratio": round(rows[top]["docs_per_s"] / rows[base]["docs_per_s"], 3)}
    # every stage's peak at its largest size over its smallest: RSS, and private memory only
    out["stage_peak_memory"] = {}
    for stage in FULL_STAGES:
        rows = {r["records"]: r for r in done if r["stage"] == stage}
        if len(rows) > 1:
            lo, hi = rows[min(rows)], rows[max(rows)]
            anon = [max(x.get("driver_anon_peak_mb") or 0, x.get("max_worker_anon_peak_mb") or 0) for x in (hi, lo)]
            out["stage_peak_memory"][stage] = {
                "sizes": [max(rows), min(rows)],
                "max_process_peak_mb": round(hi["max_process_peak_mb"] / lo["max_process_peak_mb"], 3),
                "max_process_anon_peak_mb": round(anon[0] / anon[1], 3) if all(anon) else None}
    largest = max((r["records"] for r in runs), default=None)
    at_largest = [r for r in runs if r["records"] == largest]
    if at_largest:
        top = max(at_largest, key=lambda r: r["max_process_peak_mb"])
        out["max_process_peak_at_largest"] = {"records": largest, "stage": top["stage"],
                                              "mb": top["max_process_peak_mb"]}
    return out


def fmt(value: Any, digits: int = 0) -> str:
    return "-" if value is None else f"{value:,.{digits}f}" if isinstance(value, (int, float)) else str(value)


def fmt_mb(value: float | None) -> str:
    return fmt(value, 1 if value is not None and value < 100 else 0)


def markdown(r: dict[str, Any]) -> list[str]:
    s = r["settings"]
    lines = ["# Data stages as the corpus grows (bench/scale.py)", "", *_provenance.header(r),
             "Other jobs on the machine inflate wall times; CPU s is not inflated.", "",
             "## What is measured", "",
             "Each stage runs as its own process, `python -m stages.<stage> --params <run>/params.yaml`: params.yaml "
             "with its data/, models/ and metrics/ paths moved into a run folder per size and the corpus generator's "
             f"outputs pointing at the cached corpus; clean.num_workers = {s['workers']} (0 = all cores), every other "
             f"setting as in params.yaml. Clean runs on every size, the stages through perplexity on sizes up to "
             f"{s['full_upto']:,}. semantic_embed reads the semantic labels of the smallest size "
             f"({min(s['sizes']):,} records) at every size: the generator writes labels in proportion to the "
             "corpus, a user's labels file does not grow with it. Sizes ran in this order: "
             f"{', '.join(f'{n:,}' for n in s['sizes'])} (each row's load shows what else the machine was doing).",
             "",
             f"- A sampler thread reads, every {s['sample_interval_s']} s, the memory of the stage's process "
             "(**driver**) and of every process below it, recursively (**workers**: the process pool's forkserver "
             "and its workers). A process's peak is its kernel high-water mark (VmHWM: the largest RSS it has had, "
             "so a spike between two samples counts), as last read before it ended. *driver peak* is the driver's, "
             "*largest worker peak* the highest of any one worker (- where the stage starts none), *tree peak* "
             "the largest sum of current RSS over the tree at one sample (forked workers share pages, so the sum "
             "overstates what the tree holds). *anon peak* is the largest private memory (RssAnon) sampled, for "
             "the driver / the largest of any worker: RSS and its peak also count the file-backed pages of "
             "memory-mapped files (token shards, Parquet columns), which the kernel can drop under pressure; "
             "RssAnon cannot be dropped. It is sampled, so a spike shorter than the interval can be missed.",
             "- *work-folder peak* is the largest sum of file sizes under the stage's work_dir seen by the same "
             "sampler (clean, semantic_filter and perplexity have one; the stage removes it once it succeeds). "
             "*out MB* is the size of the stage's out_dir after it.",
             "- *wall s* is the process's whole run (interpreter start, imports); *CPU s* the user + system time of "
             "every process of the tree; *docs/s* the stage's own figure from its detail metrics, documents read / "
             "seconds (semantic_head: labelled examples). Small sizes carry each stage's fixed costs (start-up, "
             "loading the encoder, the reference LM's training steps), so docs/s rising with size is expected "
             "there. *kept* is num_kept where the stage drops documents.", ""]
    lines += ["## Corpus", "",
              "| records | MB (uncompressed) | MB (gzip) | generated now: wall s | generator peak MB |",
              "| --- | --- | --- | --- | --- |"]
    for n, c in sorted(r["corpus"].items(), key=lambda item: int(item[0])):
        if "failed" in c:
            lines.append(f"| {int(n):,} | generator failed (status {c['failed']}) | - | {fmt(c['wall_s'], 1)} | "
                         f"{fmt_mb(c['max_process_peak_mb'])} |")
            continue
        lines.append(f"| {int(n):,} | {fmt(c['mb'], 1)} | {fmt(c['mb_gzip'], 1)} | "
                     f"{'cached' if c['cached'] else fmt(c['wall_s'], 1)} | "
                     f"{'-' if c['cached'] else fmt_mb(c['max_process_peak_mb'])} |")
    ra = r["ratios"]
    lines += ["", "## Ratios", ""]
    if "clean_peak_memory" in ra:
        c = ra["clean_peak_memory"]
        lines.append(f"- clean peak memory at {c['sizes'][0]:,} / at {c['sizes'][1]:,} records: driver "
                     f"**{fmt(c['driver_peak_mb'], 2)}x**, largest worker **{fmt(c['worker_peak_mb'], 2)}x**, "
                     f"largest process {fmt(c['max_process_peak_mb'], 2)}x, tree {fmt(c['tree_peak_mb'], 2)}x")
    for stage, t in ra["throughput"].items():
        lines.append(f"- {stage} throughput (docs/s) at {t['sizes'][0]:,} / at {t['sizes'][1]:,} records: "
                     f"**{fmt(t['ratio'], 2)}x**")
    for stage, m in ra.get("stage_peak_memory", {}).items():
        lines.append(f"- {stage} peak of its largest process at {m['sizes'][0]:,} / at {m['sizes'][1]:,} records: "
                     f"RSS **{fmt(m['max_process_peak_mb'], 2)}x**, private memory (RssAnon) "
                     f"**{fmt(m['max_process_anon_peak_mb'], 2)}x**")
    if "max_process_peak_at_largest" in ra:
        p = ra["max_process_peak_at_largest"]
        lines.append(f"- largest peak of any one process at {p['records']:,} records: **{fmt_mb(p['mb'])} MB** "
                     f"({p['stage']})")
    for stage in FULL_STAGES:
        rows = sorted((x for x in r["runs"] if x["stage"] == stage), key=lambda x: x["records"])
        if not rows:
            continue
        lines += ["", f"## {stage}", "",
                  "| records | wall s | CPU s | docs/s | driver peak MB | largest worker peak MB | "
                  "anon peak MB (driver / worker) | tree peak MB | work-folder peak MB | out MB | kept | "
                  "load before/after |",
                  "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
        for x in rows:
            speed = f"failed (status {x['returncode']})" if x["returncode"] else fmt(x["docs_per_s"])
            lines.append(f"| {x['records']:,} | {fmt(x['wall_s'], 1)} | {fmt(x['cpu_s'], 1)} | {speed} | "
                         f"{fmt_mb(x['driver_peak_mb'])} | {fmt_mb(x['worker_peak_mb'])} | "
                         f"{fmt_mb(x.get('driver_anon_peak_mb'))} / {fmt_mb(x.get('max_worker_anon_peak_mb'))} | "
                         f"{fmt_mb(x['tree_peak_mb'])} | "
                         f"{fmt_mb(x['work_peak_mb'])} | {fmt_mb(x.get('out_mb'))} | {fmt(x.get('kept'))} | "
                         f"{x['load_before']}/{x['load_after']} |")
    dedup = sorted((x for x in r["runs"] if x["stage"] == "clean" and x.get("dedup")), key=lambda x: x["records"])
    if dedup:
        lines += ["", "### clean: the dedup phases", "",
                  "Keys written by the workers (one per candidate and LSH band, plus the exact key), hash-range "
                  "partitions that find the colliding pairs, the pairs found, and the wall time from the last "
                  "shard decided to the groups settled (pairs and connected components; the keys are written "
                  "while the shards are decided).", "",
                  "| records | keys | partitions | pairs | dedup wall s | share of the stage's seconds |",
                  "| --- | --- | --- | --- | --- | --- |"]
        for x in dedup:
            d = x["dedup"]
            share = d.get("seconds.dedup", 0) / x["seconds"] if x.get("seconds") else None
            lines.append(f"| {x['records']:,} | {fmt(d.get('dedup.num_keys'))} | {fmt(d.get('dedup.num_partitions'))} | "
                         f"{fmt(d.get('dedup.num_pairs'))} | {fmt(d.get('seconds.dedup'), 1)} | "
                         f"{'-' if share is None else f'{share:.1%}'} |")
    return lines + [""]


def write_results(results: dict[str, Any], out: Path) -> None:
    results["ratios"] = ratios(results["runs"])
    _provenance.write(results, markdown, out=out)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=list(DEFAULT_SIZES),
                        help="corpus sizes (records), run in the order given")
    parser.add_argument("--full-upto", type=int, default=384000,
                        help="run the stages after clean (through perplexity) on sizes up to this")
    parser.add_argument("--cache-dir", type=Path, default=ROOT / "data" / "bench_cache" / "scale",
                        help="<size>/corpus: the cached corpora; <size>/run: the stages' folders")
    parser.add_argument("--out", type=Path, default=ROOT / "bench" / "results" / "scale",
                        help="results prefix: <out>.json and <out>.md")
    parser.add_argument("--keep", action="store_true", help="keep each size's run folder")
    parser.add_argument("--workers", type=int, default=0, help="clean.num_workers (0 = all cores)")
    parser.add_argument("--params", type=Path, default=ROOT / "params.yaml")
    args = parser.parse_args()
    args.cache_dir, args.out = args.cache_dir.resolve(), args.out.resolve()
    params = read_params(args.params)
    results: dict[str, Any] = {
        **_provenance.stamp("scale", MEASURES),
        "settings": {"sizes": list(dict.fromkeys(args.sizes)), "full_upto": args.full_upto, "workers": args.workers,
                     "sample_interval_s": SAMPLE_INTERVAL_S, "cache_dir": str(args.cache_dir)},
        "corpus": {}, "runs": []}
    started = time.perf_counter()
    failed = [n for n in dict.fromkeys(args.sizes) if not run_size(params, n, args, results)]  # in the order given
    results["wall_s"] = round(time.perf_counter() - started, 1)
    write_results(results, args.out)
    print("\n".join(markdown(results)))
    if failed:
        sys.exit(f"bench.scale: a stage failed at {', '.join(map(str, failed))} records (see {args.out}.md)")


if __name__ == "__main__":
    main()
