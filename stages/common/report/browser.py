"""Headless Chromium for the report's tests and bench/report.py (the stages never start a browser): render a
page to a PNG screenshot and its DOM in one launch, and read and write PNG pixels with zlib and numpy (the
environment has no imaging library) to check that a screenshot is not blank and to crop one."""
from __future__ import annotations

import shutil
import struct
import subprocess
import tempfile
import zlib
from pathlib import Path

import numpy as np

BROWSERS = ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable")
PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"
CHANNELS = {2: 3, 6: 4}  # PNG colour type -> channels: RGB, RGBA (8 bits each; what Chromium writes)


def find_browser() -> str | None:
    """The first Chromium-family browser on PATH."""
    return next((path for name in BROWSERS if (path := shutil.which(name))), None)


def render(url: str, screenshot: Path, width: int = 1280, height: int = 2000, browser: str | None = None,
           timeout_s: float = 120.0) -> str:
    """Load `url` in headless Chromium with a `width` x `height` window, save the window as a PNG at
    `screenshot` and return the DOM after load. A throwaway profile, so parallel runs do not collide."""
    browser = browser or find_browser()
    if browser is None:
        raise FileNotFoundError(f"no Chromium-family browser on PATH (looked for {', '.join(BROWSERS)})")
    with tempfile.TemporaryDirectory(prefix="refinery-chromium-") as profile:
        argv = [browser, "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars", "--no-first-run",
                "--disable-extensions", "--disable-background-networking", f"--user-data-dir={profile}",
                f"--window-size={width},{height}", f"--screenshot={screenshot}", "--dump-dom", url]
        done = subprocess.run(argv, capture_output=True, text=True, timeout=timeout_s, check=False)
    if done.returncode or not Path(screenshot).is_file():
        raise RuntimeError(f"{browser} failed on {url} (exit {done.returncode}): {done.stderr.strip()[-500:]}")
    return done.stdout


def _chunks(data: bytes):
    pos = len(PNG_SIGNATURE)
    while pos < len(data):
        length, kind = struct.unpack(">I4s", data[pos:pos + 8])
        yield kind, data[pos + 8:pos + 8 + length]
        pos += 12 + length


def _paeth_row(line: bytes, prev: bytes, bpp: int) -> bytearray:
    out = bytearray(len(line))
    for i, value in enumerate(line):
        a = out[i - bpp] if i >= bpp else 0
        b = prev[i]
        c = prev[i - bpp] if i >= bpp else 0
        p = a + b - c
        pa, pb, pc = abs(p - a), abs(p - b), abs(p - c)
        out[i] = (value + (a if pa <= pb and pa <= pc else b if pb <= pc else c)) & 0xFF
    return out


def _average_row(line: bytes, prev: bytes, bpp: int) -> bytearray:
    out = bytearray(len(line))
    for i, value in enumerate(line):
        out[i] = (value + ((out[i - bpp] if i >= bpp else 0) + prev[i]) // 2) & 0xFF
    return out


def read_png(path: Path) -> np.ndarray:
    """Pixels (height, width, channels) of an 8-bit, non-interlaced RGB or RGBA PNG."""
    data = Path(path).read_bytes()
    if not data.startswith(PNG_SIGNATURE):
        raise ValueError(f"{path}: not a PNG file")
    chunks = list(_chunks(data))
    width, height, depth, color, _, _, interlace = struct.unpack(">IIBBBBB", chunks[0][1])
    if depth != 8 or color not in CHANNELS or interlace:
        raise ValueError(f"{path}: only 8-bit non-interlaced RGB/RGBA PNGs are read (depth {depth}, colour type "
                         f"{color}, interlace {interlace})")
    bpp = CHANNELS[color]
    stride = width * bpp
    raw = np.frombuffer(zlib.decompress(b"".join(d for kind, d in chunks if kind == b"IDAT")), np.uint8)
    raw = raw.reshape(height, stride + 1)
    pixels = np.zeros((height, stride), np.uint8)
    prev = np.zeros(stride, np.uint8)
    for y in range(height):
        kind, line = raw[y, 0], raw[y, 1:]
        if kind == 0:
            row = line
        elif kind == 1:  # Sub: a running sum per channel along the row
            row = (np.cumsum(line.reshape(width, bpp).astype(np.int64), axis=0) & 0xFF).astype(np.uint8).ravel()
        elif kind == 2:  # Up
            row = line + prev
        elif kind == 3:
            row = np.frombuffer(_average_row(line.tobytes(), prev.tobytes(), bpp), np.uint8)
        elif kind == 4:
            row = np.frombuffer(_paeth_row(line.tobytes(), prev.tobytes(), bpp), np.uint8)
        else:
            raise ValueError(f"{path}: row {y} has unknown filter type {kind}")
        pixels[y] = row
        prev = pixels[y]
    return pixels.reshape(height, width, bpp)


def write_png(path: Path, pixels: np.ndarray) -> None:
    """An RGB(A) image as PNG, each row stored as its difference to the row above (compresses screenshots
    of pages well)."""
    height, width, channels = pixels.shape
    color = {3: 2, 4: 6}[channels]
    rows = pixels.reshape(height, width * channels)
    up = np.diff(rows, axis=0, prepend=np.zeros((1, rows.shape[1]), np.uint8))  # uint8 wraps: filter 2
    raw = np.hstack([np.full((height, 1), 2, np.uint8), up]).tobytes()

    def chunk(kind: bytes, body: bytes) -> bytes:
        return struct.pack(">I", len(body)) + kind + body + struct.pack(">I", zlib.crc32(kind + body))

    header = struct.pack(">IIBBBBB", width, height, 8, color, 0, 0, 0)
    Path(path).write_bytes(PNG_SIGNATURE + chunk(b"IHDR", header) + chunk(b"IDAT", zlib.compress(raw, 9))
                           + chunk(b"IEND", b""))


def content_height(pixels: np.ndarray, margin: int = 16) -> int:
    """Rows down to the last one that differs from the bottom row's background, plus `margin`."""
    background = pixels[-1, 0]
    differs = np.any(pixels != background, axis=(1, 2))
    last = int(np.nonzero(differs)[0][-1]) if differs.any() else -1
    return min(len(pixels), last + 1 + margin)
