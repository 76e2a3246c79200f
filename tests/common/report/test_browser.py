"""The PNG reader and writer the browser checks and screenshot crops use (no imaging library here)."""
import struct
import zlib

import numpy as np
import pytest

from stages.common.report import browser


def paeth(a: int, b: int, c: int) -> int:
    p = a + b - c
    pa, pb, pc = abs(p - a), abs(p - b), abs(p - c)
    return a if pa <= pb and pa <= pc else b if pb <= pc else c


def encode(pixels: np.ndarray, filters: list[int]) -> bytes:
    """A reference PNG encoder using the given filter type per row (what other encoders may choose)."""
    height, width, channels = pixels.shape
    rows = pixels.reshape(height, -1).astype(int)
    out = b""
    for y, kind in enumerate(filters):
        cur, prev = rows[y], rows[y - 1] if y else np.zeros_like(rows[0])
        left = np.concatenate([np.zeros(channels, int), cur[:-channels]])
        up_left = np.concatenate([np.zeros(channels, int), prev[:-channels]])
        predictor = {0: 0 * cur, 1: left, 2: prev, 3: (left + prev) // 2,
                     4: np.array([paeth(a, b, c) for a, b, c in zip(left, prev, up_left)])}[kind]
        out += bytes([kind]) + ((cur - predictor) % 256).astype(np.uint8).tobytes()

    def chunk(kind: bytes, body: bytes) -> bytes:
        return struct.pack(">I", len(body)) + kind + body + struct.pack(">I", zlib.crc32(kind + body))

    header = struct.pack(">IIBBBBB", width, height, 8, {3: 2, 4: 6}[channels], 0, 0, 0)
    return browser.PNG_SIGNATURE + chunk(b"IHDR", header) + chunk(b"IDAT", zlib.compress(out)) + chunk(b"IEND", b"")


@pytest.mark.parametrize("channels", [3, 4])
def test_every_png_filter_decodes_to_the_pixels(tmp_path, channels):
    pixels = np.random.default_rng(0).integers(0, 256, (5, 7, channels), dtype=np.uint8)
    path = tmp_path / "x.png"
    path.write_bytes(encode(pixels, [0, 1, 2, 3, 4]))
    np.testing.assert_array_equal(browser.read_png(path), pixels)
    browser.write_png(tmp_path / "y.png", pixels)
    np.testing.assert_array_equal(browser.read_png(tmp_path / "y.png"), pixels)


def test_content_height_trims_the_background_below_the_content():
    pixels = np.full((100, 10, 3), 255, np.uint8)
    pixels[40, 3] = 0
    assert browser.content_height(pixels, margin=5) == 46
    assert browser.content_height(np.full((10, 4, 3), 255, np.uint8), margin=5) == 5


def test_a_file_that_is_not_a_png_is_refused(tmp_path):
    (tmp_path / "x.png").write_bytes(b"GIF89a")
    with pytest.raises(ValueError, match="not a PNG file"):
        browser.read_png(tmp_path / "x.png")
