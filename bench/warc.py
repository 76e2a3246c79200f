"""Benchmark `clean` on a WARC crawl against the same pages as JSON lines, and FastWARC against warcio.

    python -m bench.warc [--pages 2000] [--rounds 3]

1. Pages: `--pages` HTML pages from the demo corpus generator (seeded; Sphinx/DocBook documentation pages
   and article pages in ten languages), plus the raw HTML pages of ../shared/devset if present. The same
   pages are written twice: as a gzipped WARC (a request and an HTTP 200 text/html response per page,
   one gzip member per record, as crawlers write them) and as gzipped JSON lines {"id", "text", "url"}.
2. `clean` (params.yaml settings, all cores) on each, interleaved for `--rounds` rounds: documents/s
   side by side, and the WARC/JSONL ratio of the medians. Both runs must keep the same documents.
3. Readers: FastWARC (what `clean` uses) and warcio read every test file (those
   bench/_warc_files.py writes, the demo crawl) and the bench crawl; both must give the same records (type,
   WARC headers, block bytes), and records/s on the bench crawl are compared.

Results: bench/results/warc.json and warc.md.
"""
from __future__ import annotations

import argparse
import dataclasses
import gzip
import json
import statistics
import sys
import tempfile
import time
from datetime import timedelta
from pathlib import Path
from typing import Any

from bench import _provenance
from bench._warc_files import write_warc, write_wet
from stages import clean
from stages.common.runtime.params import load_section
from stages.common.runtime.parquet import read_table
from stages.common.text.readers import warc_blocks

ROOT = Path(__file__).resolve().parents[1]
DEVSET = ROOT.parent / "shared" / "devset" / "devset.jsonl"
TARGET_RATIO = 0.8  # WARC docs/s at least this share of JSONL docs/s
# clean and its readers, the demo corpus generator that writes the pages and the test files the readers read
MEASURES = ("stages/clean.py", "stages/common/text", "stages/common/runtime", "stages/demo_corpus",
            "bench/_warc_files.py", "params.yaml")


def pages(num_pages: int, seed: int) -> list[tuple[str, str]]:
    """(url, html) of the generator's HTML pages, then the devset's raw HTML pages if present."""
    from stages.demo_corpus import Builder
    builder = Builder(seed)
    builder.id_numbers, builder.real_share = list(range(num_pages)), 0.5  # what build() would set
    out = []
    for _ in range(num_pages):
        doc = builder.content("html")
        out.append((doc.url, doc.text))
    if DEVSET.is_file():
        rows = [json.loads(line) for line in DEVSET.open(encoding="utf-8")]
        out += [(f"https://devset.example/{r['id']}", r["text"]) for r in rows if r["kind"] == "html"]
    else:
        print(f"no devset at {DEVSET}: generator pages only", file=sys.stderr)
    return out


def write_inputs(docs: list[tuple[str, str]], folder: Path, seed: int) -> tuple[Path, Path]:
    from stages.demo_corpus.warc import _START, _http, _record, record_id
    (folder / "warc").mkdir(parents=True)
    (folder / "jsonl").mkdir()
    parts = []
    for n, (url, html) in enumerate(docs, start=1):
        date = _START + timedelta(seconds=n)
        parts.append(_record("request", record_id(seed, 2 * n - 1), date, b"GET / HTTP/1.1\r\n\r\n", url,
                             "application/http; msgtype=request"))
        parts.append(_record("response", record_id(seed, 2 * n), date,
                             _http("200 OK", "text/html; charset=utf-8", html.encode()), url,
                             "application/http; msgtype=response"))
    warc = folder / "warc" / "crawl.warc.gz"
    warc.write_bytes(b"".join(parts))
    jsonl = folder / "jsonl" / "pages.jsonl.gz"
    lines = "".join(json.dumps({"id": f"page-{n}", "text": html, "url": url}, ensure_ascii=False) + "\n"
                    for n, (url, html) in enumerate(docs, start=1))
    jsonl.write_bytes(gzip.compress(lines.encode(), mtime=0))
    return warc.parent, jsonl.parent


def run_clean(params: clean.Params, input_dir: Path, tmp: Path) -> tuple[dict, list[str]]:
    out = tmp / f"out-{input_dir.name}"
    p = dataclasses.replace(params, input=str(input_dir), out_dir=str(out), metrics_path=str(tmp / "m.json"),
                            detail_path=str(tmp / "d.json"), reasons_plot_path=str(tmp / "r.csv"),
                            work_dir=str(tmp / "work"))
    metrics = clean.run(p)
    texts = sorted(read_table(out / "docs", ["text"]).column("text").to_pylist())
    return metrics, texts


def fastwarc_records(path: Path) -> list[tuple]:
    with open(path, "rb") as f:
        return [(r.record_type, sorted(r.headers.items()), r.block) for r in warc_blocks(f, str(path))]


def warcio_records(path: Path) -> list[tuple]:
    from warcio.archiveiterator import ArchiveIterator
    out = []
    with open(path, "rb") as f:
        for r in ArchiveIterator(f, no_record_parse=True):
            headers = sorted((k.lower(), v) for k, v in r.rec_headers.headers)
            out.append((r.rec_type, headers, r.raw_stream.read()))
    return out


def records_per_s(read, path: Path, repeats: int) -> float:
    best = float("inf")
    for _ in range(repeats):
        t0 = time.perf_counter()
        n = len(read(path))
        best = min(best, time.perf_counter() - t0)
    return n / best


def test_files(folder: Path) -> list[Path]:
    files = [folder / "fixture.warc.gz", folder / "fixture.warc", folder / "fixture.warc.wet.gz"]
    write_warc(files[0])
    write_warc(files[1], gzipped=False)
    write_wet(files[2], {"https://a.example/1": "First page.", "https://a.example/2": "Zweite Seite."})
    demo = ROOT / "data" / "raw" / "demo" / "crawl-00000.warc.gz"
    return files + ([demo] if demo.is_file() else [])


def markdown(results: dict[str, Any]) -> list[str]:
    c, r = results["clean"], results["readers"]
    lines = ["# clean on WARC vs JSONL, FastWARC vs warcio", "", *_provenance.header(results),
             f"{c['pages']} HTML pages ({c['warc_mb']:.1f} MB as WARC.gz, {c['jsonl_mb']:.1f} MB as JSONL.gz), "
             f"{c['num_kept']} kept by both.", "",
             "| input | docs/s per round | median |", "| --- | --- | --- |"]
    for name in ("jsonl", "warc"):
        lines.append(f"| {name} | {', '.join(f'{x:.0f}' for x in c['docs_per_s'][name])} | "
                     f"{c['median_docs_per_s'][name]:.0f} |")
    lines += ["", f"**WARC / JSONL: {c['warc_over_jsonl']:.2f}x** (target: at least {c['target_ratio']}x)", "",
              "## readers", "",
              f"FastWARC {r['records_per_s']['fastwarc']:.0f} records/s, warcio {r['records_per_s']['warcio']:.0f} "
              f"records/s on the bench crawl ({r['records']} records): FastWARC {r['fastwarc_over_warcio']:.1f}x.",
              "Same records (type, headers, block bytes) from both on every file: "
              + ", ".join(f"{name} {'yes' if same else 'NO'}" for name, same in r["files"].items()), ""]
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pages", type=int, default=2000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--seed", type=int, default=5)
    parser.add_argument("--params", default=str(ROOT / "params.yaml"))
    args = parser.parse_args()
    params = load_section("clean", clean.Params, args.params)
    results: dict[str, Any] = _provenance.stamp("warc", MEASURES)
    with tempfile.TemporaryDirectory() as tmp_name:
        tmp = Path(tmp_name)
        docs = pages(args.pages, args.seed)
        warc_dir, jsonl_dir = write_inputs(docs, tmp, args.seed)
        rates: dict[str, list[float]] = {"jsonl": [], "warc": []}
        kept: dict[str, list[str]] = {}
        for _ in range(args.rounds):
            for name, folder in (("jsonl", jsonl_dir), ("warc", warc_dir)):
                metrics, kept[name] = run_clean(params, folder, tmp)
                assert metrics["num_read"] == len(docs), (name, metrics["num_read"])
                rates[name].append(metrics["docs_per_s"])
        assert kept["warc"] == kept["jsonl"], "the WARC and JSONL runs kept different documents"
        medians = {name: statistics.median(r) for name, r in rates.items()}
        results["clean"] = {
            "pages": len(docs), "rounds": args.rounds, "num_kept": len(kept["warc"]),
            "warc_mb": (warc_dir / "crawl.warc.gz").stat().st_size / 1e6,
            "jsonl_mb": (jsonl_dir / "pages.jsonl.gz").stat().st_size / 1e6,
            "docs_per_s": rates, "median_docs_per_s": medians,
            "warc_over_jsonl": medians["warc"] / medians["jsonl"], "target_ratio": TARGET_RATIO}
        files = test_files(tmp) + [warc_dir / "crawl.warc.gz"]
        identical = {}
        for path in files:
            identical[path.name] = fastwarc_records(path) == warcio_records(path)
        crawl = warc_dir / "crawl.warc.gz"
        fast, slow = records_per_s(fastwarc_records, crawl, 5), records_per_s(warcio_records, crawl, 5)
        results["readers"] = {"files": identical, "all_identical": all(identical.values()),
                              "records_per_s": {"fastwarc": fast, "warcio": slow}, "fastwarc_over_warcio": fast / slow,
                              "records": len(fastwarc_records(crawl))}
    _provenance.write(results, markdown)
    print("\n".join(markdown(results)))


if __name__ == "__main__":
    main()
