"""Calibration from runs: what the hardware did, written back for a second solve.

Two things are read off a run's per-piece timeline (every timed run, medians):

- a piece's *cost*: its measured duration plus its *lead*, the runtime's own time between the previous piece
  on its device and its start when it did not wait for another device (argument lookup, bookkeeping). Each
  task's time on its device's type (and that type's batch-table row) is multiplied by its piece's cost /
  predicted duration: the pieces' sums then equal what was measured, and the split of a piece's time among its
  tasks keeps the profile's proportions (:func:`calibrated_graph`);
- a *hand-off*: when a piece waited for a value from another device, the time from the producing piece's end
  to its own start (the event's wake-up, the copy or the torch.distributed send/recv). Per pair of devices
  these give a link, ``latency + bytes / bandwidth`` (:func:`fitted_links`), written into the platform as peer
  links (:func:`calibrated_platform`), so that the second solve charges what a hand-off costs.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass, replace

from ..graph import TaskGraph
from ..platform import Link, Platform

# a hand-off whose size did not visibly matter (shared memory: a reference, no copy) gets this bandwidth
NO_COPY_BANDWIDTH = 1e15  # bytes / s
# sizes must span this many bytes, and this factor, before a bandwidth is fitted from them
FIT_SPAN_BYTES = 1 << 20
FIT_SPAN_FACTOR = 8.0


@dataclass(frozen=True)
class Handoff:
    """One cross-device input of a piece that waited for it: median seconds from producer end to piece start."""
    src: str
    dst: str
    piece: int  # the receiving piece's index on ``dst``
    bytes: int
    seconds: float


def piece_waits(program, runs, nbytes) -> tuple[dict, tuple[Handoff, ...]]:
    """Per piece ``(device, index)`` its median lead (s), and the hand-offs, from ``runs`` (one list of
    :class:`~diviml.runtime._execute.PieceRun` per timed run, on one clock); ``nbytes(value)`` is a value's
    size."""
    made_by: dict[str, tuple[str, int]] = {}
    for device, pieces in program.pieces.items():
        for p in pieces:
            for v in p.outputs:
                made_by[v] = (device, p.index)
    leads: dict[tuple[str, int], list[float]] = {}
    waits: dict[tuple[str, str, int], list[float]] = {}
    sizes: dict[tuple[str, str, int], int] = {}
    for timings in runs:
        at = {(r.device, r.index): r for r in timings}
        for device, pieces in program.pieces.items():
            for p in pieces:
                me = at.get((device, p.index))
                if me is None:
                    continue
                before = at.get((device, p.index - 1))
                own = before.finish if before is not None else 0.0
                remote: dict[str, float] = {}  # source device -> when its last input for this piece was done
                size: dict[str, int] = {}
                for v in p.inputs:
                    src = made_by.get(v)
                    if src is None or src[0] == device or src not in at:
                        continue
                    remote[src[0]] = max(remote.get(src[0], 0.0), at[src].finish)
                    size[src[0]] = size.get(src[0], 0) + nbytes(v)
                gate_device = max(remote, key=remote.get) if remote else None
                if gate_device is not None and remote[gate_device] > own:
                    key = (gate_device, device, p.index)
                    waits.setdefault(key, []).append(me.start - remote[gate_device])
                    sizes[key] = size[gate_device]
                else:
                    leads.setdefault((device, p.index), []).append(max(0.0, me.start - own))
    lead = {k: statistics.median(v) for k, v in leads.items()}
    handoffs = tuple(Handoff(src, dst, i, sizes[src, dst, i], statistics.median(v))
                     for (src, dst, i), v in sorted(waits.items()))
    return lead, handoffs


def fitted_links(handoffs, platform: Platform) -> dict[frozenset, tuple[Link, int]]:
    """Per unordered device pair with hand-offs: the link they fit and how many there were. A bandwidth is
    fitted (least squares) only where sizes span enough to show one; else the pair keeps the bandwidth the
    platform gives it (:data:`NO_COPY_BANDWIDTH` where it charged nothing) and the latency is the median
    hand-off less that bandwidth's share."""
    by_pair: dict[frozenset, list[Handoff]] = {}
    for h in handoffs:
        by_pair.setdefault(frozenset((h.src, h.dst)), []).append(h)
    out = {}
    for pair, hs in by_pair.items():
        sizes = [h.bytes for h in hs]
        link = None
        if len(hs) >= 4 and max(sizes) - min(sizes) >= FIT_SPAN_BYTES and max(sizes) >= FIT_SPAN_FACTOR * max(1, min(sizes)):
            mx, my = statistics.fmean(sizes), statistics.fmean(h.seconds for h in hs)
            sxx = sum((x - mx) ** 2 for x in sizes)
            slope = sum((x - mx) * (h.seconds - my) for x, h in zip(sizes, hs)) / sxx
            if slope > 0:
                link = Link(bandwidth=1.0 / slope, latency=max(0.0, my - slope * mx))
        if link is None:
            bandwidth = _bandwidth(platform, *sorted(pair))
            latency = statistics.median(h.seconds - h.bytes / bandwidth for h in hs)
            link = Link(bandwidth=bandwidth, latency=max(0.0, latency))
        out[pair] = (link, len(hs))
    return out


def _bandwidth(platform: Platform, a: str, b: str) -> float:
    """The bandwidth the platform's transfer model gives bytes between ``a`` and ``b`` (the slowest hop)."""
    peer = platform.peer_links.get(frozenset((a, b)))
    if peer is not None:
        return peer.bandwidth
    da, db = platform.by_name[a], platform.by_name[b]
    hops = [d.link.bandwidth for d in (da, db) if not d.is_host and d.link is not None]
    if da.server != db.server and platform.network is not None:
        hops.append(platform.network.bandwidth)
    return min(hops) if hops else NO_COPY_BANDWIDTH


def calibrated_platform(report, platform: Platform) -> Platform:
    """``platform`` with a peer link for every device pair the run measured hand-offs between."""
    links = dict(platform.peer_links)
    sources = dict(platform.sources)
    for pair, (link, n) in sorted(fitted_links(report.handoffs, platform).items(), key=lambda kv: sorted(kv[0])):
        links[pair] = link
        a, b = sorted(pair)
        sources[f"peer {a}-{b}"] = (f"measured by 'diviml run {report.model}': {n} hand-offs, latency "
                                    f"{link.latency * 1e6:.1f} us, bandwidth {link.bandwidth:.3g} B/s")
    return replace(platform, name=f"{platform.name} (calibrated by a run)", peer_links=links, sources=sources)


def calibrated_graph(report, plan, problem) -> TaskGraph:
    """``problem``'s graph with each task's time scaled by its piece's measured cost / predicted duration."""
    factor: dict[str, float] = {}  # task -> measured / predicted of its piece
    pieces = {(p.device, p.index): p for p in report.piece_reports}
    order = plan.device_order or {}
    for device, tasks in order.items():
        runs = sorted((p for (d, _), p in pieces.items() if d == device), key=lambda p: p.index)
        position = {t: k for k, (t, _) in enumerate(tasks)}
        for p in runs:
            if not p.predicted_s or p.predicted_s <= 0 or p.first_task not in position:
                continue
            first = position[p.first_task]
            for t, _ in tasks[first:first + p.tasks]:
                factor[t] = (p.measured_s + p.lead_s) / p.predicted_s
    data = problem.graph.to_dict()
    placement = plan.placement
    for task in data["tasks"]:
        k = factor.get(task["id"])
        if k is None:
            continue
        dtype = problem.platform.by_name[placement[task["id"]]].type
        if dtype in task["time"]:
            task["time"][dtype] *= k
        row = task.get("time_by_batch", {}).get(dtype)
        if row:
            task["time_by_batch"][dtype] = {b: v * k for b, v in row.items()}
    data["name"] = f"{problem.graph.name} (calibrated by a run)"
    return TaskGraph.from_dict(data)
