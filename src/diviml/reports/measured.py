"""Pictures of a run: each device's pieces as measured (median start and duration over the timed runs)
beside the plan's prediction of the same pieces; a Chrome trace (chrome://tracing, Perfetto) of both. A
pipeline plan's run is a stream of requests: its picture is one stream (the timed run nearest the median),
each piece coloured by its request, so it shows the devices working on different requests at once."""

from __future__ import annotations

import html
import io
from pathlib import Path

from .gantt import check_format

MEASURED, PREDICTED = "#1f77b4", "#aaaaaa"
MAX_BARS = 6000  # a stream's picture draws its first requests up to this many pieces: a page stays light
REQUEST_COLOURS = ("#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#17becf")


def chrome_trace(report) -> dict:
    """Trace Event Format: process 1 = measured, process 2 = predicted, process 3 = a pipeline plan's stream
    (one timed run, each piece named with its request); a thread per device."""
    events = [{"name": "process_name", "ph": "M", "pid": 1, "args": {"name": f"measured ({report.model})"}},
              {"name": "process_name", "ph": "M", "pid": 2, "args": {"name": "predicted by the plan"}}]
    devices = sorted({p.device for p in report.piece_reports})
    pids: tuple[int, ...] = (1, 2)
    if report.stream:
        events.append({"name": "process_name", "ph": "M", "pid": 3,
                       "args": {"name": f"a stream of {report.requests} requests (one timed run)"}})
        pids = (1, 2, 3)
        events += [{"name": f"request {r.request}: {r.device}#{r.index}", "ph": "X", "pid": 3,
                    "tid": devices.index(r.device), "ts": r.start * 1e6, "dur": (r.finish - r.start) * 1e6,
                    "args": {"request": r.request}} for r in report.stream if r.device in devices]
    for pid in pids:
        events += [{"name": "thread_name", "ph": "M", "pid": pid, "tid": i, "args": {"name": d}}
                   for i, d in enumerate(devices)]
    for p in report.piece_reports:
        tid = devices.index(p.device)
        name = f"{p.device}#{p.index}: {p.tasks} tasks from {p.first_task}"
        events.append({"name": name, "ph": "X", "pid": 1, "tid": tid, "ts": p.measured_start_s * 1e6,
                       "dur": p.measured_s * 1e6})
        if p.predicted_s is not None:
            events.append({"name": name, "ph": "X", "pid": 2, "tid": tid, "ts": p.predicted_start_s * 1e6,
                           "dur": p.predicted_s * 1e6})
    return {"traceEvents": events, "displayTimeUnit": "ms",
            "otherData": {"measured_s": report.measured_s, "predicted_s": report.predicted_s}}


def _rows(report):
    """(label, bars) per row, a bar (piece, start, duration, colour): predicted rows above measured rows per
    device; for a stream, each device's pieces in one run, coloured by request."""
    devices = sorted({p.device for p in report.piece_reports})
    if report.stream:
        pieces = {(p.device, p.index): p for p in report.piece_reports}
        drawn = _drawn_requests(report)
        return [(f"{d} stream", [(_StreamPiece(pieces[r.device, r.index], r.request), r.start, r.finish - r.start,
                                  REQUEST_COLOURS[r.request % len(REQUEST_COLOURS)])
                                 for r in report.stream if r.device == d and (r.device, r.index) in pieces
                                 and r.request < drawn])
                for d in devices]
    rows = []
    for d in devices:
        if any(p.predicted_s is not None for p in report.piece_reports):
            rows.append((f"{d} predicted", [(p, p.predicted_start_s, p.predicted_s, PREDICTED)
                                            for p in report.piece_reports
                                            if p.device == d and p.predicted_s is not None]))
        rows.append((f"{d} measured", [(p, p.measured_start_s, p.measured_s, MEASURED)
                                       for p in report.piece_reports if p.device == d]))
    return rows


def _drawn_requests(report) -> int:
    """How many of a stream's first requests are drawn: all, or as many as keep the bars to MAX_BARS."""
    per_request = max(1, len(report.stream) // max(1, report.requests))
    return min(report.requests, max(1, MAX_BARS // per_request))


class _StreamPiece:
    """A piece of a stream as a bar's tooltip names it: the piece and its request."""

    def __init__(self, piece, request: int):
        self.device, self.tasks, self.first_task = piece.device, piece.tasks, piece.first_task
        self.index = f"{piece.index} (request {request})"


def _title(report) -> str:
    per = load = ""
    if report.stream:
        drawn = _drawn_requests(report)
        per = f" per request in a stream of {report.requests}" + (
            f" (its first {drawn} drawn)" if drawn < report.requests else "")
        load = " (largest device load)"
    return (f"{report.model} batch {report.batch_size}: measured {report.measured_s * 1e3:.4g} ms{per}, predicted "
            f"{report.predicted_s * 1e3:.4g} ms{load} (ratio {report.ratio:.3f}), outputs "
            f"{'match' if report.outputs_match else 'DIFFER'}")


def render_gantt(report, path: str | Path) -> str | bytes:
    """The picture in the format ``path`` names (.png, .svg or .html)."""
    check_format(path)
    suffix = Path(path).suffix.lower()
    return _page(report) if suffix == ".html" else _matplotlib(report, suffix[1:])


def _matplotlib(report, fmt: str) -> bytes:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    rows = _rows(report)
    fig, ax = plt.subplots(figsize=(12, 1 + 0.5 * len(rows)))
    for y, (_, bars) in enumerate(rows):
        ax.broken_barh([(s * 1e3, max(d * 1e3, 1e-6)) for _, s, d, _ in bars], (y - 0.4, 0.8),
                       facecolors=[c for *_, c in bars], edgecolor="white", linewidth=0.3)
    ax.set_yticks(range(len(rows)), [label for label, _ in rows])
    ax.invert_yaxis()
    ax.set_xlabel("time since the stream started (ms)" if report.stream else "time since the request started (ms)")
    ax.set_title(_title(report), fontsize=9)
    fig.tight_layout()
    buffer = io.BytesIO()
    fig.savefig(buffer, format=fmt)
    plt.close(fig)
    return buffer.getvalue()


def _page(report) -> str:
    """A self-contained page: inline SVG, a tooltip per piece, no network."""
    rows = _rows(report)
    end = max([report.measured_s, report.predicted_s] + [s + d for _, bars in rows for _, s, d, _ in bars])
    width, left, row_h = 1100, 160, 26
    scale = (width - left - 10) / end if end > 0 else 1.0
    parts = []
    for y, (label, bars) in enumerate(rows):
        top = 10 + y * row_h
        parts.append(f'<text x="4" y="{top + 16}" font-size="12">{html.escape(label)}</text>')
        for p, s, d, colour in bars:
            tip = (f"{p.device}#{p.index}: {p.tasks} tasks from {p.first_task}; start {s * 1e3:.4g} ms, "
                   f"{d * 1e3:.4g} ms")
            parts.append(f'<rect x="{left + s * scale:.2f}" y="{top}" width="{max(d * scale, 0.5):.2f}" '
                         f'height="{row_h - 6}" fill="{colour}" stroke="white" stroke-width="0.3">'
                         f'<title>{html.escape(tip)}</title></rect>')
    height = 30 + len(rows) * row_h
    axis = "".join(f'<text x="{left + x * scale:.1f}" y="{height - 4}" font-size="10">{x * 1e3:.3g} ms</text>'
                   for x in [end * k / 5 for k in range(6)])
    facts = "".join(f"<tr><th>{k}</th><td>{html.escape(str(v))}</td></tr>" for k, v in (
        ("predicted", f"{report.predicted_s * 1e3:.4g} ms"), ("measured (median)", f"{report.measured_s * 1e3:.4g} ms"),
        ("measured range", f"{report.measured_min_s * 1e3:.4g}-{report.measured_max_s * 1e3:.4g} ms"),
        ("ratio", f"{report.ratio:.3f}"), ("outputs match", report.outputs_match),
        ("unsplit module here", f"{report.eager_s * 1e3:.4g} ms"), ("pieces", report.pieces),
        ("ranks", report.world_size), ("timed runs", report.repeats)))
    return (f"<!DOCTYPE html><html lang=\"en\"><head><meta charset=\"utf-8\"><title>{html.escape(_title(report))}"
            "</title><style>body{font-family:sans-serif;margin:16px} th{text-align:left;padding-right:12px}"
            "</style></head><body>"
            f"<h1 style=\"font-size:16px\">{html.escape(_title(report))}</h1>"
            + ("<p>One timed run of the stream, each piece coloured by its request (colours repeat every "
               f"{len(REQUEST_COLOURS)}): each device works on its own request while the others work on theirs.</p>"
               if report.stream else
               "<p>Grey: the plan's prediction of each piece; blue: the median measured start and duration.</p>")
            +
            f"<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{width}\" height=\"{height}\">{''.join(parts)}"
            f"{axis}</svg><table>{facts}</table></body></html>")
