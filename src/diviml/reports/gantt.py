"""Gantt charts of plans: PNG/SVG through matplotlib, a self-contained interactive HTML page, and a Chrome
trace (Trace Event Format: chrome://tracing, Perfetto's UI) of the same timeline.

A latency or batch plan shows each device's timeline, the transfers between devices and the critical path
(outlined); bars are coloured by sub-batch where the plan splits the batch, else by the model's module, with
a legend, and labelled with their operator where the bar is wide enough. A pipeline plan (no start times)
shows each device's load per sample, split into compute and transfers.
"""

from __future__ import annotations

import html
import json
from pathlib import Path

from ..errors import InputError
from ..files import write_text_atomic
from ..plan import Plan, format_gap
from ..problem import Problem
from ..simulate import pipeline_loads
from .timeline import (
    LEGEND_MAX,
    MAX_TRANSFER_LINES,
    PLOT_PIXELS,
    SUMMARY,
    TRANSFER,
    Bar,
    Row,
    Summary,
    bars_and_transfers,
    colour_key,
    colouring,
    device_rows,
    summarised,
)

FORMATS = (".png", ".svg", ".html", ".json")

def check_format(path: str | Path) -> None:
    if Path(path).suffix.lower() not in FORMATS:
        raise InputError(f"cannot draw {path}: give a file ending in {', '.join(FORMATS)}")


def chrome_trace(plan: Plan, problem: Problem) -> dict:
    """The plan's timeline in the Trace Event Format: a process per server, a thread per device and one per
    link direction carrying transfers, times in microseconds (a graph whose unit is not seconds or
    milliseconds is written as if it were microseconds, and says so in ``otherData``)."""
    scale = {"s": 1e6, "ms": 1e3, "us": 1.0}.get(plan.time_unit)
    if plan.objective_kind == "pipeline":
        raise InputError("a pipeline plan has no timeline to trace: draw it with --gantt instead")
    bars, transfers = bars_and_transfers(plan, problem)
    servers = sorted({d.server for d in problem.platform.devices})
    server_of = {d.name: d.server for d in problem.platform.devices}
    threads = [d.name for d in problem.platform.devices]
    threads += sorted({f"{t.src} -> {t.dst}" for t in transfers})
    tid = {name: i for i, name in enumerate(threads)}
    events = [{"name": "process_name", "ph": "M", "pid": servers.index(s), "args": {"name": s}} for s in servers]
    for name in threads:
        server = server_of[name.split(" -> ")[0]]
        events.append({"name": "thread_name", "ph": "M", "pid": servers.index(server), "tid": tid[name],
                       "args": {"name": name if " -> " not in name else f"transfers {name}"}})
    unit = scale or 1.0
    for b in bars:
        events.append({"name": b.task, "cat": "critical" if b.critical else "task", "ph": "X",
                       "pid": servers.index(server_of[b.device]), "tid": tid[b.device], "ts": b.start * unit,
                       "dur": (b.finish - b.start) * unit,
                       "args": {"batch": b.batch, "part": b.part + 1, "module": b.module, "critical": b.critical}})
    for t in transfers:
        lane = f"{t.src} -> {t.dst}"
        events.append({"name": t.task, "cat": "transfer", "ph": "X", "pid": servers.index(server_of[t.src]),
                       "tid": tid[lane], "ts": t.start * unit, "dur": (t.finish - t.start) * unit})
    other = {"title": _title(plan, problem), **{k: v for k, v in plan.summary().items() if k != "stats"}}
    if scale is None:
        other["time_unit"] = f"the graph's unit {plan.time_unit!r}, written as microseconds"
    return {"traceEvents": events, "displayTimeUnit": "ms", "otherData": other}


def _cell(value) -> str:
    """A summary value as a person reads it: numbers to 6 digits, lists joined, mappings one per line."""
    if isinstance(value, float):
        return f"{value:.6g}"
    if isinstance(value, (list, tuple)):
        return ", ".join(_cell(v) for v in value) if all(not isinstance(v, str) or len(v) < 40 for v in value) \
            else "\n".join(_cell(v) for v in value)
    if isinstance(value, dict):
        return "\n".join(f"{k}: {_cell(v)}" for k, v in value.items())
    return str(value)


def render(plan: Plan, problem: Problem, path: str | Path) -> str | bytes:
    """The picture of ``plan`` in the format ``path`` names (.png, .svg, .html, or .json: a Chrome trace)."""
    check_format(path)
    suffix = Path(path).suffix.lower()
    if suffix == ".json":
        return json.dumps(chrome_trace(plan, problem))
    return html_page(plan, problem) if suffix == ".html" else _matplotlib_bytes(plan, problem, suffix[1:])


def save(plan: Plan, problem: Problem, path: str | Path) -> None:
    """Draw ``plan`` to ``path``; writes the whole file or nothing."""
    write_text_atomic(path, render(plan, problem, path))


def _title(plan: Plan, problem: Problem) -> str:
    unit = plan.time_unit
    return (f"{problem.graph.name} on {problem.platform.name}: {plan.objective_kind} {plan.objective:.4g} {unit} "
            f"({plan.solver}, {plan.status}, gap {format_gap(plan.gap)}"
            + (f" to the {plan.bound_source} bound)" if plan.bound_source else ")"))


def _matplotlib_bytes(plan: Plan, problem: Problem, fmt: str) -> bytes:
    import io

    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = device_rows(plan, problem)
    devices = [r.device for r in rows]
    legend_rows = LEGEND_MAX + 4 if plan.objective_kind != "pipeline" else 0
    fig, ax = plt.subplots(figsize=(12, max(1.0 + 0.6 * len(devices), 0.9 + 0.16 * legend_rows)))
    if plan.objective_kind == "pipeline":
        _draw_loads(ax, plan, problem, devices)
    else:
        _draw_timeline(ax, plan, problem, devices)
    _label_rows(ax, rows, any(t.memory_bytes > 0 for t in problem.graph.tasks))
    ax.set_ylim(len(rows) - 0.5, -0.5)  # the first device on top
    ax.set_title(_title(plan, problem), fontsize=9)
    fig.tight_layout()
    buf = io.BytesIO()
    fig.savefig(buf, format=fmt, dpi=120)
    plt.close(fig)
    return buf.getvalue()


def _label_rows(ax, rows: list[Row], memory: bool) -> None:
    """Each row named by its device and type (and, where the model holds weights, the memory it holds), the
    servers of a cluster ruled off and named."""
    ax.set_yticks(range(len(rows)), [f"{r.label}  {r.memory}" if memory else r.label for r in rows],
                  fontsize=8 if len(rows) > 12 else 10)
    if len({r.server for r in rows}) < 2:
        return
    for i, r in enumerate(rows):
        if i == 0 or r.server != rows[i - 1].server:
            if i:
                ax.axhline(i - 0.5, color="#888888", linewidth=0.8, zorder=1)
            ax.text(0.995, i - 0.45, f"server {r.server}", transform=ax.get_yaxis_transform(), ha="right",
                    va="top", fontsize=7, color="#555555", zorder=5)


def _draw_loads(ax, plan: Plan, problem: Problem, devices: list[str]) -> None:
    """A pipeline plan: each device's load per sample, compute and transfers, and the max load."""
    loads = pipeline_loads(problem, plan.placement)
    compute = {d: 0.0 for d in devices}
    for t, d in plan.placement.items():
        compute[d] += problem.time(t, d)
    total = loads.total
    y = range(len(devices))
    ax.barh(y, [compute[d] for d in devices], color="#4c78a8", label="compute")
    ax.barh(y, [total[d] - compute[d] for d in devices], left=[compute[d] for d in devices],
            color="#f58518", label="transfers")
    ax.axvline(plan.objective, color="#d62728", linestyle="--", label="max load")
    ax.set_xlabel(f"load per sample ({plan.time_unit})")
    ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize=8)


def _draw_timeline(ax, plan: Plan, problem: Problem, devices: list[str]) -> None:
    """A latency or batch plan: each device's bars (sub-pixel ones merged), the critical path outlined,
    labels where they fit, the transfers as lines, and a legend."""
    bars, transfers = bars_and_transfers(plan, problem)
    row = {d: i for i, d in enumerate(devices)}
    by, colours = colouring(bars)
    end = max((b.finish for b in bars), default=1.0) or 1.0
    drawn = summarised(bars, end, PLOT_PIXELS)
    for critical in (False, True):  # one collection per device and kind: fast at 50,000 bars
        for d in devices:
            mine = [b for b in drawn if b.device == d and isinstance(b, Bar) and b.critical == critical]
            if mine:  # the critical path is outlined, so the colours stay readable
                ax.broken_barh([(b.start, b.finish - b.start) for b in mine], (row[d] - 0.3, 0.6),
                               facecolors=[colours[colour_key(b, by)] for b in mine],
                               edgecolors="black" if critical else "white", linewidths=1.2 if critical else 0.3,
                               zorder=3 if critical else 2)
    for d in devices:
        merged = [b for b in drawn if b.device == d and isinstance(b, Summary)]
        if merged:
            ax.broken_barh([(b.start, b.finish - b.start) for b in merged], (row[d] - 0.3, 0.6),
                           facecolors=SUMMARY, edgecolors=["black" if b.critical else "none" for b in merged],
                           linewidths=1.2, zorder=2)
    for b in drawn:
        if isinstance(b, Bar) and (b.finish - b.start) / end * 12 * 72 > 5.5 * len(b.task):  # 6 pt text fits
            ax.text((b.start + b.finish) / 2, row[b.device], b.task, ha="center", va="center", fontsize=6,
                    clip_on=True, zorder=4)
    shown = [tr for tr in transfers if tr.finish - tr.start >= end / PLOT_PIXELS] \
        if len(transfers) > MAX_TRANSFER_LINES else transfers
    if shown:
        from matplotlib.collections import LineCollection
        ax.add_collection(LineCollection(
            [[(tr.start, row[tr.src] + 0.3 * (1 if row[tr.dst] > row[tr.src] else -1)),
              (tr.finish, row[tr.dst] - 0.3 * (1 if row[tr.dst] > row[tr.src] else -1))] for tr in shown],
            colors=TRANSFER, linewidths=0.6, alpha=0.7))
    ax.legend(handles=_legend(colours, by, drawn, len(transfers) - len(shown)), loc="upper left",
              bbox_to_anchor=(1.01, 1.0), fontsize=7, title=f"colour: {by}" if by else None, title_fontsize=7)
    ax.set_xlabel(f"time ({plan.time_unit})")


def _legend(colours: dict, by: str, drawn: list, hidden_transfers: int) -> list:
    """The legend's entries: the first colours, the critical path, transfers, merged bars and hidden transfers."""
    from matplotlib.lines import Line2D
    from matplotlib.patches import Patch
    named = list(colours.items())
    handles = [Patch(color=c, label=k) for k, c in named[:LEGEND_MAX]]
    if len(named) > LEGEND_MAX:
        handles.append(Patch(color="white", label=f"... {len(named) - LEGEND_MAX} more {by}s"))
    handles += [Patch(facecolor="white", edgecolor="black", linewidth=1.2, label="critical path"),
                Line2D([], [], color=TRANSFER, label="transfer")]
    if any(isinstance(b, Summary) for b in drawn):
        handles.append(Patch(color=SUMMARY, label="bars under a pixel, merged"))
    if hidden_transfers:
        handles.append(Line2D([], [], color="white", label=f"{hidden_transfers} short transfers not drawn"))
    return handles


def html_page(plan: Plan, problem: Problem) -> str:
    """A self-contained page (inline SVG, CSS and JS): hover for details, toggle transfers, zoom."""
    rows = device_rows(plan, problem)
    devices = [r.device for r in rows]
    memory = any(t.memory_bytes > 0 for t in problem.graph.tasks)
    labels = [{"label": r.label, "server": r.server, "memory": r.memory if memory else ""} for r in rows]
    if plan.objective_kind == "pipeline":
        loads = pipeline_loads(problem, plan.placement)
        items = []
        for t, d in plan.placement.items():
            items.append({"device": d, "task": t, "value": problem.time(t, d)})
        data = {"kind": "pipeline", "devices": devices, "loads": loads.total, "tasks": items,
                "objective": plan.objective}
    else:
        bars, transfers = bars_and_transfers(plan, problem)
        by, colours = colouring(bars)
        data = {"kind": "timeline", "devices": devices, "colour_by": by, "legend": colours,
                "bars": [{"device": b.device, "task": b.task, "start": b.start, "finish": b.finish,
                          "batch": b.batch, "critical": b.critical, "part": b.part + 1, "module": b.module,
                          "colour": colours[colour_key(b, by)]} for b in sorted(bars, key=lambda b: b.start)],
                "transfers": [tr.__dict__ for tr in transfers], "objective": plan.objective}
    summary = plan.summary()
    rows = "".join(f"<tr><th>{html.escape(str(k))}</th><td>{html.escape(_cell(v))}</td></tr>"
                   for k, v in summary.items())
    return _PAGE.replace("__TITLE__", html.escape(_title(plan, problem))).replace("__ROWS__", rows).replace(
        "__DATA__", json.dumps({**data, "rows": labels, "unit": plan.time_unit}).replace("<", "\\u003c"))  # no "</script>" or "<!--"


_PAGE = """<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><title>__TITLE__</title>
<style>
body{font-family:system-ui,sans-serif;margin:1.5em;color:#222}
#chart{border:1px solid #ccc;overflow-x:auto}
#tip{position:fixed;background:#fff;border:1px solid #888;padding:4px 8px;font-size:12px;pointer-events:none;display:none}
table{border-collapse:collapse;font-size:13px;margin-top:1em}th,td{border:1px solid #ddd;padding:2px 8px;text-align:left}
.task{fill:#4c78a8}.critical{stroke:#000;stroke-width:1.5}.transfer{stroke:#f58518;stroke-width:1;opacity:.7}.comm{fill:#f58518}
label{margin-right:1em;font-size:13px}td{white-space:pre-wrap}
#legend span{display:inline-block;margin-right:1em;font-size:12px}#legend i{display:inline-block;width:12px;height:12px;margin-right:4px;vertical-align:middle;border:1px solid #fff}
</style></head><body>
<h2>__TITLE__</h2>
<div><label><input type="checkbox" id="showTransfers" checked> transfers</label>
<label>zoom <input type="range" id="zoom" min="1" max="20" value="1"></label><span id="hidden"></span></div>
<div id="legend"></div><div id="chart"></div><div id="tip"></div>
<table>__ROWS__</table>
<script>
const data = __DATA__, unit = esc(data.unit);
// every name from an input file (devices, task ids, modules) is text, never markup
function esc(s){ return String(s).replace(/[&<>"']/g, c => ({'&':'&amp;','<':'&lt;','>':'&gt;','"':'&quot;',"'":'&#39;'})[c]); }
const chart = document.getElementById('chart'), tip = document.getElementById('tip');
function draw(){
  const zoom = +document.getElementById('zoom').value, showT = document.getElementById('showTransfers').checked;
  const left = 170, rowH = 34, W = Math.max(900, chart.clientWidth - 20) * zoom, H = rowH * data.devices.length + 40;
  const row = Object.fromEntries(data.devices.map((d, i) => [d, i]));
  let end = data.objective || 1, parts = [];
  if (data.kind === 'pipeline') end = Math.max(end, ...Object.values(data.loads));
  const x = t => left + (W - left - 10) * t / end;
  parts.push(`<svg xmlns="http://www.w3.org/2000/svg" width="${W}" height="${H}">`);
  data.rows.forEach((r, i) => {
    parts.push(`<text x="4" y="${i*rowH+(r.memory ? 17 : 22)}" font-size="12">${esc(r.label)}</text>`);
    if (r.memory) parts.push(`<text x="4" y="${i*rowH+30}" font-size="10" fill="#555">${esc(r.memory)}</text>`);
    if (new Set(data.rows.map(q => q.server)).size > 1 && (i === 0 || r.server !== data.rows[i-1].server)) {
      if (i) parts.push(`<line x1="0" x2="${W}" y1="${i*rowH+2}" y2="${i*rowH+2}" stroke="#888"/>`);
      parts.push(`<text x="${W-6}" y="${i*rowH+13}" font-size="10" fill="#555" text-anchor="end">server ${esc(r.server)}</text>`);
    } });
  if (data.kind === 'pipeline') {
    const acc = {};
    data.tasks.forEach(t => { const s = acc[t.device] || 0; acc[t.device] = s + t.value;
      parts.push(`<rect class="task" x="${x(s)}" y="${row[t.device]*rowH+8}" width="${Math.max(x(s+t.value)-x(s),0.5)}" height="20" stroke="#fff" stroke-width=".3" data-tip="${esc(t.task)}: ${t.value.toPrecision(4)} ${unit}"/>`); });
    data.devices.forEach(d => { const c = acc[d] || 0, l = data.loads[d];
      if (l > c) parts.push(`<rect class="comm" x="${x(c)}" y="${row[d]*rowH+8}" width="${x(l)-x(c)}" height="20" data-tip="${esc(d)} transfers: ${(l-c).toPrecision(4)} ${unit}"/>`); });
    parts.push(`<line x1="${x(data.objective)}" x2="${x(data.objective)}" y1="0" y2="${H-30}" stroke="#d62728" stroke-dasharray="4"/>`);
  } else {
    // a bar under a pixel joins its neighbours on the device that are too into one grey summary bar, so a
    // plan of 50,000 tasks draws a few thousand shapes; zoom in to see them apart
    const px = end / (W - left - 10), open = {};
    const flush = d => { const r = open[d]; if (!r) return; delete open[d];
      if (r.bars.length === 1) return bar(r.bars[0]);
      const x0 = x(r.start), y = row[d]*rowH+8, busy = r.bars.reduce((a, b) => a + b.finish - b.start, 0);
      parts.push(`<rect class="summary${r.bars.some(b => b.critical) ? ' critical' : ''}" style="fill:#9e9e9e" x="${x0}" y="${y}" width="${Math.max(x(r.finish)-x0, 0.5)}" height="20" data-tip="${r.bars.length} tasks on ${esc(d)} (${esc(r.bars[0].task)} to ${esc(r.bars[r.bars.length-1].task)}): ${r.start.toPrecision(5)} to ${r.finish.toPrecision(5)} ${unit}, busy ${busy.toPrecision(4)} ${unit}; zoom in to see them"/>`); };
    const bar = b => { const x0 = x(b.start), w = Math.max(x(b.finish)-x0, 0.5), y = row[b.device]*rowH+8;
      const tipText = `${esc(b.task)} on ${esc(b.device)}${b.module ? ' ('+esc(b.module)+')' : ''}: ${b.start.toPrecision(5)} to ${b.finish.toPrecision(5)} ${unit}, batch ${b.batch}${b.part > 1 || data.colour_by === 'sub-batch' ? ', part '+b.part : ''}${b.critical ? ', critical path' : ''}`;
      parts.push(`<rect class="task${b.critical ? ' critical' : ''}" style="fill:${b.colour}" x="${x0}" y="${y}" width="${w}" height="20" data-tip="${tipText}"/>`);
      if (w > 6.5 * String(b.task).length + 4) parts.push(`<text x="${x0 + w/2}" y="${y+14}" font-size="11" text-anchor="middle" pointer-events="none">${esc(b.task)}</text>`); };
    data.bars.forEach(b => { const narrow = b.finish - b.start < px, r = open[b.device];
      if (narrow && r && b.start - r.finish < px) { r.bars.push(b); r.finish = Math.max(r.finish, b.finish); return; }
      flush(b.device);
      if (narrow) open[b.device] = {start: b.start, finish: b.finish, bars: [b]}; else bar(b); });
    Object.keys(open).forEach(flush);
    let shown = data.transfers, hidden = 0;
    if (shown.length > 2000) { shown = shown.filter(t => t.finish - t.start >= px); hidden = data.transfers.length - shown.length; }
    if (showT) shown.forEach(t => { const down = row[t.dst] > row[t.src];
      parts.push(`<line class="transfer" x1="${x(t.start)}" y1="${row[t.src]*rowH+(down ? 28 : 8)}" x2="${x(t.finish)}" y2="${row[t.dst]*rowH+(down ? 8 : 28)}"><title>${esc(t.task)}: ${esc(t.src)} to ${esc(t.dst)}</title></line>`); });
    document.getElementById('hidden').textContent = hidden ? `${hidden} transfers under a pixel not drawn at this zoom` : '';
  }
  for (let k = 0; k <= 10; k++) { const t = end * k / 10;
    parts.push(`<text x="${x(t)}" y="${H-8}" font-size="10" text-anchor="middle">${t.toPrecision(3)}</text>`); }
  parts.push('</svg>');
  chart.innerHTML = parts.join('');
}
chart.addEventListener('mousemove', e => { const t = e.target.getAttribute && e.target.getAttribute('data-tip');
  if (t) { tip.textContent = t; tip.style.display = 'block'; tip.style.left = (e.clientX + 12) + 'px'; tip.style.top = (e.clientY + 12) + 'px'; }
  else tip.style.display = 'none'; });
document.getElementById('zoom').oninput = draw; document.getElementById('showTransfers').onchange = draw;
if (data.kind === 'timeline') document.getElementById('legend').innerHTML =
  (data.colour_by ? `<span>colour: ${esc(data.colour_by)}</span>` : '') +
  Object.entries(data.legend).slice(0, 12).map(([k, c]) => `<span><i style="background:${esc(c)}"></i>${esc(k)}</span>`).join('') +
  (Object.keys(data.legend).length > 12 ? `<span>... ${Object.keys(data.legend).length - 12} more</span>` : '') +
  '<span><i style="background:#fff;border:1.5px solid #000"></i>critical path</span><span><i style="background:#f58518"></i>transfer</span>' +
  '<span><i style="background:#9e9e9e"></i>tasks under a pixel, merged (zoom in)</span>';
draw();
</script></body></html>
"""
