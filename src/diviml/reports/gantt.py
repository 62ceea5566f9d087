"""Gantt charts of plans: PNG/SVG through matplotlib, and a self-contained interactive HTML page.

A latency or batch plan shows each device's timeline, the transfers between devices and the critical path;
a pipeline plan (no start times) shows each device's load per sample, split into compute and transfers.
"""

from __future__ import annotations

import html
import json
from dataclasses import dataclass
from pathlib import Path

from ..errors import InputError
from ..graph import write_text_atomic
from ..plan import Plan
from ..problem import Problem
from ..simulate import pipeline_loads

FORMATS = (".png", ".svg", ".html")
TOL = 1e-9


@dataclass(frozen=True)
class Bar:
    device: str
    task: str
    start: float
    finish: float
    batch: int
    critical: bool


@dataclass(frozen=True)
class Transfer:
    task: str
    src: str
    dst: str
    start: float
    finish: float


def check_format(path: str | Path) -> None:
    if Path(path).suffix.lower() not in FORMATS:
        raise InputError(f"cannot draw {path}: give a file ending in {', '.join(FORMATS)}")


def bars_and_transfers(plan: Plan, problem: Problem) -> tuple[list[Bar], list[Transfer]]:
    graph, platform = problem.graph, problem.platform
    if plan.objective_kind == "call-latency":  # one bar per accelerator call or host task
        from ..simulate import call_latency
        calls = call_latency(problem, plan.placement).calls
        last = max(calls, key=lambda c: c.finish) if calls else None
        return [Bar(c.device, c.tasks[0] if len(c.tasks) == 1 else f"{len(c.tasks)} tasks from {c.tasks[0]}",
                    c.start, c.finish, plan.batch_size, c is last) for c in calls], []
    jobs = []
    for a in plan.assignments:
        b = a.batch or plan.batch_size
        jobs.append((a.task, a.device, a.start, a.start + problem.time(a.task, a.device, b), b))
    critical = critical_path(plan, problem, jobs)
    bars = [Bar(d, t, s, f, b, (t, d) in critical) for t, d, s, f, b in jobs]
    transfers = []
    by_task: dict[str, list] = {}
    for j in jobs:
        by_task.setdefault(j[0], []).append(j)
    for u in graph.topological_order:
        for _, src, _, fin, b in by_task[u]:
            dsts = {d for v in graph.successors[u] for _, d, _, _, _ in by_task[v]} - {src}
            for dst in sorted(dsts):
                dt = platform.transfer_time(graph.by_id[u], src, dst, b / graph.batch_size)
                if dt > 0:
                    transfers.append(Transfer(u, src, dst, fin, fin + dt))
    return bars, transfers


def critical_path(plan: Plan, problem: Problem, jobs) -> set[tuple[str, str]]:
    """(task, device) pairs on a chain of jobs each started exactly when its binding input or device freed."""
    graph, platform = problem.graph, problem.platform
    if not jobs:
        return set()
    by_task: dict[str, list] = {}
    per_device: dict[str, list] = {}
    for j in jobs:
        by_task.setdefault(j[0], []).append(j)
        per_device.setdefault(j[1], []).append(j)
    current = max(jobs, key=lambda j: j[3])
    path = set()
    while True:
        task, dev, start, _, b = current
        path.add((task, dev))
        if start <= TOL:
            break
        nxt = None
        for u in graph.predecessors[task]:
            for j in by_task[u]:
                arrival = j[3] + platform.transfer_time(graph.by_id[u], j[1], dev, b / graph.batch_size)
                if abs(arrival - start) <= 1e-9 * max(1.0, start):
                    nxt = j
        if nxt is None:
            for j in per_device[dev]:
                if j is not current and abs(j[3] - start) <= 1e-9 * max(1.0, start):
                    nxt = j
        if nxt is None:
            break
        current = nxt
    return path


def render(plan: Plan, problem: Problem, path: str | Path) -> str | bytes:
    """The picture of ``plan`` in the format ``path`` names (.png, .svg or .html)."""
    check_format(path)
    suffix = Path(path).suffix.lower()
    return html_page(plan, problem) if suffix == ".html" else _matplotlib_bytes(plan, problem, suffix[1:])


def save(plan: Plan, problem: Problem, path: str | Path) -> None:
    """Draw ``plan`` to ``path``; writes the whole file or nothing."""
    write_text_atomic(path, render(plan, problem, path))


def _title(plan: Plan, problem: Problem) -> str:
    unit = plan.time_unit
    return (f"{problem.graph.name} on {problem.platform.name}: {plan.objective_kind} {plan.objective:.4g} {unit} "
            f"({plan.solver}, {plan.status}, gap {100 * plan.gap:.1f}%)")


def _matplotlib_bytes(plan: Plan, problem: Problem, fmt: str) -> bytes:
    import io

    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    devices = [d.name for d in problem.platform.devices]
    fig, ax = plt.subplots(figsize=(12, 1.0 + 0.6 * len(devices)))
    if plan.objective_kind == "pipeline":
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
    else:
        bars, transfers = bars_and_transfers(plan, problem)
        row = {d: i for i, d in enumerate(devices)}
        for b in bars:
            ax.barh(row[b.device], b.finish - b.start, left=b.start, height=0.6,
                    color="#d62728" if b.critical else "#4c78a8", edgecolor="white", linewidth=0.3)
        for tr in transfers:
            sign = 1 if row[tr.dst] > row[tr.src] else -1
            ax.plot([tr.start, tr.finish], [row[tr.src] + 0.3 * sign, row[tr.dst] - 0.3 * sign], color="#f58518",
                    linewidth=0.6, alpha=0.7)
        from matplotlib.patches import Patch
        from matplotlib.lines import Line2D
        ax.legend(handles=[Patch(color="#4c78a8", label="task"), Patch(color="#d62728", label="critical path"),
                           Line2D([], [], color="#f58518", label="transfer")], loc="upper right", fontsize=8)
        ax.set_xlabel(f"time ({plan.time_unit})")
    ax.set_yticks(range(len(devices)), devices)
    ax.invert_yaxis()
    ax.set_title(_title(plan, problem), fontsize=9)
    if plan.objective_kind == "pipeline":
        ax.legend(loc="upper right", fontsize=8)
    fig.tight_layout()
    buf = io.BytesIO()
    fig.savefig(buf, format=fmt, dpi=120)
    plt.close(fig)
    return buf.getvalue()


def html_page(plan: Plan, problem: Problem) -> str:
    """A self-contained page (inline SVG, CSS and JS): hover for details, toggle transfers, zoom."""
    devices = [d.name for d in problem.platform.devices]
    if plan.objective_kind == "pipeline":
        loads = pipeline_loads(problem, plan.placement)
        items = []
        for t, d in plan.placement.items():
            items.append({"device": d, "task": t, "value": problem.time(t, d)})
        data = {"kind": "pipeline", "devices": devices, "loads": loads.total, "tasks": items,
                "objective": plan.objective}
    else:
        bars, transfers = bars_and_transfers(plan, problem)
        data = {"kind": "timeline", "devices": devices,
                "bars": [{"device": b.device, "task": b.task, "start": b.start, "finish": b.finish,
                          "batch": b.batch, "critical": b.critical,
                          "module": getattr(problem.graph.by_id.get(b.task), "module", None) or ""} for b in bars],
                "transfers": [tr.__dict__ for tr in transfers], "objective": plan.objective}
    summary = plan.summary()
    rows = "".join(f"<tr><th>{html.escape(str(k))}</th><td>{html.escape(str(v))}</td></tr>" for k, v in summary.items())
    return _PAGE.replace("__TITLE__", html.escape(_title(plan, problem))).replace("__ROWS__", rows).replace(
        "__DATA__", json.dumps({**data, "unit": plan.time_unit}).replace("<", "\\u003c"))  # no "</script>" or "<!--"


_PAGE = """<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><title>__TITLE__</title>
<style>
body{font-family:system-ui,sans-serif;margin:1.5em;color:#222}
#chart{border:1px solid #ccc;overflow-x:auto}
#tip{position:fixed;background:#fff;border:1px solid #888;padding:4px 8px;font-size:12px;pointer-events:none;display:none}
table{border-collapse:collapse;font-size:13px;margin-top:1em}th,td{border:1px solid #ddd;padding:2px 8px;text-align:left}
.task{fill:#4c78a8}.critical{fill:#d62728}.transfer{stroke:#f58518;stroke-width:1;opacity:.7}.comm{fill:#f58518}
label{margin-right:1em;font-size:13px}
</style></head><body>
<h2>__TITLE__</h2>
<div><label><input type="checkbox" id="showTransfers" checked> transfers</label>
<label>zoom <input type="range" id="zoom" min="1" max="20" value="1"></label></div>
<div id="chart"></div><div id="tip"></div>
<table>__ROWS__</table>
<script>
const data = __DATA__, unit = esc(data.unit);
// every name from an input file (devices, task ids, modules) is text, never markup
function esc(s){ return String(s).replace(/[&<>"']/g, c => ({'&':'&amp;','<':'&lt;','>':'&gt;','"':'&quot;',"'":'&#39;'})[c]); }
const chart = document.getElementById('chart'), tip = document.getElementById('tip');
function draw(){
  const zoom = +document.getElementById('zoom').value, showT = document.getElementById('showTransfers').checked;
  const left = 90, rowH = 34, W = Math.max(900, chart.clientWidth - 20) * zoom, H = rowH * data.devices.length + 40;
  const row = Object.fromEntries(data.devices.map((d, i) => [d, i]));
  let end = data.objective || 1, parts = [];
  if (data.kind === 'pipeline') end = Math.max(end, ...Object.values(data.loads));
  const x = t => left + (W - left - 10) * t / end;
  parts.push(`<svg xmlns="http://www.w3.org/2000/svg" width="${W}" height="${H}">`);
  data.devices.forEach((d, i) => parts.push(`<text x="4" y="${i*rowH+22}" font-size="12">${esc(d)}</text>`));
  if (data.kind === 'pipeline') {
    const acc = {};
    data.tasks.forEach(t => { const s = acc[t.device] || 0; acc[t.device] = s + t.value;
      parts.push(`<rect class="task" x="${x(s)}" y="${row[t.device]*rowH+8}" width="${Math.max(x(s+t.value)-x(s),0.5)}" height="20" stroke="#fff" stroke-width=".3" data-tip="${esc(t.task)}: ${t.value.toPrecision(4)} ${unit}"/>`); });
    data.devices.forEach(d => { const c = acc[d] || 0, l = data.loads[d];
      if (l > c) parts.push(`<rect class="comm" x="${x(c)}" y="${row[d]*rowH+8}" width="${x(l)-x(c)}" height="20" data-tip="${esc(d)} transfers: ${(l-c).toPrecision(4)} ${unit}"/>`); });
    parts.push(`<line x1="${x(data.objective)}" x2="${x(data.objective)}" y1="0" y2="${H-30}" stroke="#d62728" stroke-dasharray="4"/>`);
  } else {
    data.bars.forEach(b => parts.push(`<rect class="${b.critical ? 'critical' : 'task'}" x="${x(b.start)}" y="${row[b.device]*rowH+8}" width="${Math.max(x(b.finish)-x(b.start),0.5)}" height="20" stroke="#fff" stroke-width=".3" data-tip="${esc(b.task)} on ${esc(b.device)}${b.module ? ' ('+esc(b.module)+')' : ''}: ${b.start.toPrecision(5)} to ${b.finish.toPrecision(5)} ${unit}, batch ${b.batch}${b.critical ? ', critical path' : ''}"/>`));
    if (showT) data.transfers.forEach(t => { const down = row[t.dst] > row[t.src];
      parts.push(`<line class="transfer" x1="${x(t.start)}" y1="${row[t.src]*rowH+(down ? 28 : 8)}" x2="${x(t.finish)}" y2="${row[t.dst]*rowH+(down ? 8 : 28)}"><title>${esc(t.task)}: ${esc(t.src)} to ${esc(t.dst)}</title></line>`); });
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
draw();
</script></body></html>
"""
