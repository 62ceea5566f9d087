"""Pictures of a run: a pipeline plan's stream drawn as one run, each piece coloured by its request, and kept
light however long the stream."""

import json
import re

from diviml.reports import measured
from diviml.runtime import PieceReport, RunReport
from diviml.runtime._execute import PieceRun


def stream_report(requests: int, pieces: int) -> RunReport:
    """A two-device stream: device a's pieces of request r, then device b's, one slot behind."""
    runs, reports = [], []
    for device, offset in (("a", 0.0), ("b", 1.0)):
        for i in range(pieces):
            reports.append(PieceReport(device, i, 2, f"{device}{i}", offset + i / pieces, 1 / pieces, None, None))
            runs += [PieceRun(device, i, r + offset + i / pieces, r + offset + (i + 1) / pieces, r)
                     for r in range(requests)]
    return RunReport("m", 1, "pipeline", 1, {"a": "rank 0: cpu", "b": "rank 0: cpu"}, 2 * pieces, 1.0, 1.0, 1.0, 1.0,
                     1.0, True, 0.0, 0.1, 3, 1, tuple(reports), requests=requests,
                     stream=tuple(sorted(runs, key=lambda r: r.start)))


def test_a_streams_page_draws_each_piece_coloured_by_its_request():
    page = measured.render_gantt(stream_report(requests=10, pieces=3), "s.html")
    assert "per request in a stream of 10" in page and "drawn" not in page
    bars = re.findall(r'<rect [^>]*fill="(#[0-9a-f]{6})"', page)
    assert len(bars) == 2 * 3 * 10
    assert set(bars) == set(measured.REQUEST_COLOURS)  # 10 requests: every colour, repeating
    trace = measured.chrome_trace(stream_report(requests=10, pieces=3))
    stream = [e for e in trace["traceEvents"] if e.get("pid") == 3 and e["ph"] == "X"]
    assert len(stream) == 60 and {e["args"]["request"] for e in stream} == set(range(10))
    json.dumps(trace)


def test_a_long_streams_page_draws_its_first_requests_only_and_says_so():
    report = stream_report(requests=500, pieces=20)  # 20,000 pieces run
    page = measured.render_gantt(report, "s.html")
    drawn = measured.MAX_BARS // 40
    assert len(re.findall(r"<rect ", page)) == 40 * drawn <= measured.MAX_BARS
    assert f"its first {drawn} drawn" in page
    assert measured.render_gantt(report, "s.png")[:4] == b"\x89PNG"
