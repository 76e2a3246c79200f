"""The report stage on this workspace's outputs: what it adds to `dvc repro` (the wall time of its command in
a fresh process, as DVC runs it), the size of the page, and the screenshots the README shows.

    python -m bench.report                       # params.yaml's report section: after a finished `dvc repro`
    python -m bench.report --params other.yaml   # another report section (e.g. absolute paths elsewhere)
    python -m bench.report --no-screenshots

The page is built in a temporary folder, so the workspace's reports/index.html stays as DVC made it. The
screenshots come from headless Chromium (Debian's `chromium`): the top of the page, and the funnel and
compression sections alone (`index.html#view-<section>`), cropped below their content.
Results: bench/results/report.json and report.md; screenshots: docs/img/report-{top,funnel,compression}.png.
"""
from __future__ import annotations

import argparse
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import yaml

from bench import _provenance
from stages.common.report import browser
from stages.common.runtime.params import read_params

ROOT = Path(__file__).resolve().parents[1]
IMAGES = ROOT / "docs" / "img"
# The report stage, and every stage whose outputs the page shows (their size and number decide its cost)
MEASURES = ("stages", "params.yaml")
# name -> (address suffix, window height, crop below the content)
SHOTS = {"report-top": ("", 1000, False), "report-funnel": ("#view-funnel", 1600, True),
         "report-compression": ("#view-compression", 1600, True)}


def time_command(params_file: Path, runs: int) -> tuple[list[float], list[float]]:
    """Wall and CPU (user + system) seconds of `python -m stages.report` (the stage's dvc.yaml command), each
    run a fresh process: on a shared machine the CPU time is the steadier figure."""
    wall, cpu = [], []
    for _ in range(runs):
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        start = time.perf_counter()
        subprocess.run([sys.executable, "-m", "stages.report", "--params", str(params_file)], cwd=ROOT, check=True,
                       capture_output=True)
        wall.append(round(time.perf_counter() - start, 3))
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        cpu.append(round(after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime, 3))
    return wall, cpu


def screenshots(page: Path, out_dir: Path, scratch: Path) -> dict[str, list[int]]:
    """Render each shot with Chromium, crop it, write it as PNG; returns each image's (width, height)."""
    out_dir.mkdir(parents=True, exist_ok=True)
    sizes = {}
    for name, (suffix, height, crop) in SHOTS.items():
        shot = scratch / f"{name}.png"
        browser.render(page.as_uri() + suffix, shot, width=1280, height=height)
        pixels = browser.read_png(shot)
        if crop:
            pixels = pixels[:browser.content_height(pixels)]
        browser.write_png(out_dir / f"{name}.png", pixels)
        sizes[name] = [int(pixels.shape[1]), int(pixels.shape[0])]
    return sizes


def markdown(results: dict[str, Any]) -> list[str]:
    t = results["command_seconds"]
    lines = ["# report benchmark", "", *_provenance.header(results),
             f"- `python -m stages.report` (the stage's command, a fresh process each run): "
             f"**{t['median']:.2f} s** wall, median of {len(t['runs'])} runs (first {t['runs'][0]:.2f} s, best "
             f"{min(t['runs']):.2f} s); **{results['cpu_seconds']['median']:.2f} s** of CPU (user + system): what "
             "the stage adds to `dvc repro` besides DVC's own bookkeeping",
             f"- page: **{results['page_bytes'] / 1024:.0f} KiB** ({results['page_bytes']:,} bytes), "
             f"{results['num_svg']} inline SVG charts, no external reference",
             f"- inputs: {results['inputs']}"]
    if results.get("screenshots"):
        lines += ["", "Screenshots (headless Chromium, 1280 px wide):", ""]
        lines += [f"- `docs/img/{name}.png`: {w} x {h}" for name, (w, h) in results["screenshots"].items()]
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--params", default=str(ROOT / "params.yaml"), help="params file with a `report` section")
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--no-screenshots", action="store_true")
    parser.add_argument("--images", default=str(IMAGES), help="folder the screenshots are written to")
    args = parser.parse_args()
    section = read_params(args.params)["report"]
    stamp = _provenance.stamp("report", MEASURES)
    with tempfile.TemporaryDirectory(prefix="bench-report-") as tmp:
        scratch = Path(tmp)
        page = scratch / "index.html"
        params_file = scratch / "params.yaml"
        section = {**section, "out_path": str(page), "funnel_path": str(scratch / "funnel.csv")}
        params_file.write_text(yaml.safe_dump({"report": section}, allow_unicode=True))
        runs, cpu = time_command(params_file, args.runs)
        text = page.read_text(encoding="utf-8")
        results = {
            **stamp,
            "command_seconds": {"runs": runs, "median": statistics.median(runs)},
            "cpu_seconds": {"runs": cpu, "median": statistics.median(cpu)},
            "page_bytes": len(text.encode()), "num_svg": text.count("<svg"),
            "inputs": {k: v for k, v in section.items() if k.endswith(("_dir", "_path"))},
        }
        if not args.no_screenshots:
            results["screenshots"] = screenshots(page, Path(args.images), scratch)
    _provenance.write(results, markdown)
    print("\n".join(markdown(results)))


if __name__ == "__main__":
    main()
