import math
import re

from stages.common.report import svg


def test_ticks_are_round_and_cover_the_range():
    assert svg.nice_ticks(0, 9.3) == [0, 2, 4, 6, 8, 10]
    assert svg.nice_ticks(0.0001, 0.001)[-1] >= 0.001
    assert svg.log_ticks(20, 5000) == [100, 1000]
    assert svg.log_ticks(20, 80) == [20, 50]
    assert [svg.fmt(v) for v in (0, 0.002, 12.5, 999, 1500, 2_500_000)] == ["0", "0.002", "12.5", "999", "1.5k", "2.5M"]


def test_a_line_chart_draws_every_series_with_a_legend():
    out = svg.line_chart([svg.Series("a", [0, 1, 2], [1.0, 2.0, float("nan")]),
                          svg.Series("b", [0, 1, 2], [3.0, 2.0, 1.0], dashed=True)], "t", "step", "value")
    assert out.startswith("<svg") and out.count("<polyline") == 2 and "stroke-dasharray" in out
    assert ">a</text>" in out and ">b</text>" in out and "<title>t</title>" in out
    assert "nan" not in out.lower()


def test_log_scale_places_decades_evenly():
    out = svg.line_chart([svg.Series("p", [0, 1, 2], [10.0, 100.0, 1000.0])], "t", "step", "ppl", log_y=True)
    ys = [float(y) for y in re.findall(r"[\d.]+,([\d.]+)", re.search(r'points="([^"]+)"', out).group(1))]
    assert math.isclose(ys[0] - ys[1], ys[1] - ys[2], rel_tol=1e-3)


def test_no_data_and_labels_are_escaped():
    assert "no data" in svg.line_chart([svg.Series("x", [], [])], "empty <chart>", "x", "y")
    bars = svg.stacked_bars([("a<b", {"en": 2, "zh": 1}), ("read", {"total": 5})], ["en", "zh"],
                            {"en": "#111", "zh": "#222"}, "funnel")
    assert "a&lt;b" in bars and "<b" not in bars.replace("<svg", "")
    assert bars.count("<rect") == 2 + 3  # legend swatches, two segments, one grey total
    hist = svg.histogram([(0, 1, 3, "easy"), (1, 2, 5, "hard")], svg.TIER_COLORS, [(1.0, "cut")], "h", "x", "y")
    assert hist.count('stroke-dasharray="4 3"') == 1 and ">cut</text>" in hist


def test_addresses_in_labels_are_defanged():
    assert svg.esc("see https://x.org/<a>") == "see https[:]//x.org/&lt;a&gt;"
