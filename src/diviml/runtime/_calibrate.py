"""Calibration from runs: what the hardware did, written back for a second solve.

Two things are read off a run's per-piece timeline (every timed run, medians):

- a piece's *cost*: its measured duration plus its *lead*, the runtime's own time between the previous piece
  on its device and its start when it did not wait for another device (argument lookup, bookkeeping). Each
  task's time on its device's type (and that type's batch-table row) is multiplied by its piece's cost /
  predicted duration: the pieces' sums then equal what was measured, and the split of a piece's time among its
  tasks keeps the profile's proportions (:func:`calibrated_graph`). Where the piece's process also drove
  other devices of the plan, only a factor below 1 is taken: workers of one process share its interpreter and
  cores, and a piece slowed beside them measured running side by side, which a plan keeping the tasks on one
  device would not pay (on a lent H100 every piece of googlenet's CPU + GPU plan ran 2-4x its profile, and
  the H100 alone then ran at its profile's time). That slowdown is left to the hand-offs' latency below;
- a *hand-off*: where a piece read values from another device, the time from when it could have started
  (its device free, those values made) to its start: the event's wake-up, the copy or the torch.distributed
  receive; and where the piece before it sent values to another device, the time between the two (the send).
  Per pair of devices these give a link, ``latency + bytes / bandwidth`` (:func:`fitted_links`), written into
  the platform as peer links (:func:`calibrated_platform`), so that the second solve charges what crossing
  devices costs, and not the tasks next to the crossing.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass, replace

from ..errors import InputError
from ..graph import TaskGraph
from ..platform import Link, Platform

STREAM_NOT_CALIBRATED = ("calibration reads one request's timeline, and a pipeline plan's run is a stream of them: "
                         "calibrate from a latency plan's run of the same model and schedule the pipeline on that")
# a hand-off whose size did not visibly matter (shared memory: a reference, no copy) gets this bandwidth
NO_COPY_BANDWIDTH = 1e15  # bytes / s
# sizes must span this many bytes, and this factor, before a bandwidth is fitted from them
FIT_SPAN_BYTES = 1 << 20
FIT_SPAN_FACTOR = 8.0


@dataclass(frozen=True)
class Handoff:
    """What crossing devices added before one piece started, median seconds over the timed runs.

    ``receive``: the piece read values from ``src``; the seconds from when it could have started (its
    device free, the values made) to its start: the wake-up, copy or torch.distributed receive.
    ``send``: the piece before it on ``src`` sent values to ``dst``; the seconds from that piece's end to
    this one's start, the sender's side of the hand-off."""
    src: str
    dst: str
    piece: int  # the delayed piece's index on its device (``dst`` for a receive, ``src`` for a send)
    bytes: int
    seconds: float
    kind: str = "receive"


def piece_waits(program, runs, nbytes) -> tuple[dict, tuple[Handoff, ...]]:
    """Per piece ``(device, index)`` its median lead (s), and the hand-offs, from ``runs`` (one list of
    :class:`~diviml.runtime._execute.PieceRun` per timed run, on one clock); ``nbytes(value)`` is a value's
    size. A piece's time before its start counts as a hand-off where it received or its predecessor sent
    across devices, else as its lead."""
    made_by: dict[str, tuple[str, int]] = {}
    for device, pieces in program.pieces.items():
        for p in pieces:
            for v in p.outputs:
                made_by[v] = (device, p.index)
    sent_to: dict[tuple[str, int], dict[str, int]] = {}  # piece -> other device -> bytes it sends there
    for device, pieces in program.pieces.items():
        for p in pieces:
            for v in p.inputs:
                src = made_by.get(v)
                if src is not None and src[0] != device:
                    sent_to.setdefault(src, {}).setdefault(device, 0)
                    sent_to[src][device] += nbytes(v)
    leads: dict[tuple[str, int], list[float]] = {}
    waits: dict[tuple[str, str, int, str], list[float]] = {}
    sizes: dict[tuple[str, str, int, str], int] = {}
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
                ready = max([own, *remote.values()])
                delay = max(0.0, me.start - ready)
                if remote:
                    gate = max(remote, key=remote.get)
                    key = (gate, device, p.index, "receive")
                elif before is not None and sent_to.get((device, before.index)):
                    dst, sent = max(sent_to[device, before.index].items(), key=lambda kv: kv[1])
                    key = (device, dst, p.index, "send")
                else:
                    leads.setdefault((device, p.index), []).append(delay)
                    continue
                waits.setdefault(key, []).append(delay)
                sizes[key] = size[gate] if remote else sent
    lead = {k: statistics.median(v) for k, v in leads.items()}
    handoffs = tuple(Handoff(src, dst, i, sizes[src, dst, i, kind], statistics.median(v), kind)
                     for (src, dst, i, kind), v in sorted(waits.items()))
    return lead, handoffs


def fitted_links(handoffs, platform: Platform) -> dict[frozenset, tuple[Link, int]]:
    """Per unordered device pair with hand-offs: the link they fit and how many there were. The receives
    give ``latency + bytes / bandwidth``; a bandwidth is fitted (least squares) only where their sizes span
    enough to show one, else the pair keeps the bandwidth the platform gives it (:data:`NO_COPY_BANDWIDTH`
    where it charged nothing) and the latency is the median receive less that bandwidth's share. The median
    send is added to the latency: the model charges a hand-off as one delay, so both sides' costs go there."""
    by_pair: dict[frozenset, list[Handoff]] = {}
    for h in handoffs:
        by_pair.setdefault(frozenset((h.src, h.dst)), []).append(h)
    out = {}
    for pair, both in by_pair.items():
        hs = [h for h in both if h.kind == "receive"]
        sends = [h.seconds for h in both if h.kind == "send"]
        sizes = [h.bytes for h in hs]
        link = None
        spread = len(hs) >= 4 and max(sizes) - min(sizes) >= FIT_SPAN_BYTES
        if spread and max(sizes) >= FIT_SPAN_FACTOR * max(1, min(sizes)):
            slope, intercept = statistics.linear_regression(sizes, [h.seconds for h in hs])
            if slope > 0:
                link = Link(bandwidth=1.0 / slope, latency=max(0.0, intercept))
        if link is None:
            bandwidth = _bandwidth(platform, *sorted(pair))
            latency = statistics.median(h.seconds - h.bytes / bandwidth for h in hs) if hs else 0.0
            link = Link(bandwidth=bandwidth, latency=max(0.0, latency))
        if sends:
            link = Link(link.bandwidth, link.latency + statistics.median(sends))
        out[pair] = (link, len(both))
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


def calibrated_platform(report, platform: Platform, *, plan=None, problem=None) -> Platform:
    """``platform`` with a peer link for every device pair the run measured hand-offs between.

    Given the run's ``plan`` and its ``problem`` on the calibrated graph, the links' latencies are then
    scaled up, where needed, until the plan re-timed on them takes what the run measured: a hand-off here
    can occupy both devices (a gloo send and receive on a busy host), which the model, charging a hand-off as
    a delay only, can show only as a longer one. Both figures are in the platform's sources."""
    _refuse_stream(report)
    fitted = fitted_links(report.handoffs, platform)
    scale = 1.0
    if fitted and plan is not None and problem is not None and plan.device_order:
        scale = _latency_scale(fitted, platform, plan, problem, report.measured_s)
    links = dict(platform.peer_links)
    sources = dict(platform.sources)
    for pair, (link, n) in sorted(fitted.items(), key=lambda kv: sorted(kv[0])):
        links[pair] = Link(link.bandwidth, link.latency * scale)
        a, b = sorted(pair)
        sources[f"peer {a}-{b}"] = (
            f"measured by 'diviml run {report.model}': {n} hand-offs, latency {link.latency * 1e6:.1f} us, "
            f"bandwidth {link.bandwidth:.3g} B/s" + (
                f"; latency x {scale:.3g} so that the run's plan re-timed takes the {report.measured_s * 1e3:.4g} ms "
                "measured (hand-offs that occupy the devices on both sides, shown as delays)" if scale > 1 else ""))
    return replace(platform, name=f"{platform.name} (calibrated by a run)", peer_links=links, sources=sources)


def _latency_scale(fitted, platform: Platform, plan, problem, measured: float, max_scale: float = 1e4) -> float:
    """The factor (>= 1) on the fitted links' latencies at which ``plan`` re-timed takes ``measured`` seconds
    (bisection: the makespan does not fall as latencies grow)."""
    from ..problem import Problem
    from ..simulate import schedule

    def makespan(k: float) -> float:
        links = {**platform.peer_links, **{pair: Link(l.bandwidth, l.latency * k) for pair, (l, _) in fitted.items()}}
        timed = Problem(problem.graph, replace(platform, peer_links=links), problem.objective)
        return schedule(timed, plan.parts, plan.device_order).makespan

    if makespan(1.0) >= measured:
        return 1.0
    if makespan(max_scale) <= measured:
        return max_scale
    low, high = 1.0, max_scale
    while high - low > 1e-3 * low:
        mid = (low * high) ** 0.5
        low, high = (mid, high) if makespan(mid) < measured else (low, mid)
    return high


def calibrated_graph(report, plan, problem) -> TaskGraph:
    """``problem``'s graph with each task's time scaled by its piece's measured cost / predicted duration; on
    a device whose process drove other devices of the plan too, by at most 1 (see the module's docstring)."""
    _refuse_stream(report)
    factor: dict[str, float] = {}  # task -> measured / predicted of its piece
    pieces = {(p.device, p.index): p for p in report.piece_reports}
    beside = side_by_side(report.devices)
    order = plan.device_order or {}
    for device, tasks in order.items():
        runs = sorted((p for (d, _), p in pieces.items() if d == device), key=lambda p: p.index)
        position = {t: k for k, (t, _) in enumerate(tasks)}
        for p in runs:
            if not p.predicted_s or p.predicted_s <= 0 or p.first_task not in position:
                continue
            first = position[p.first_task]
            k = (p.measured_s + p.lead_s) / p.predicted_s
            for t, _ in tasks[first:first + p.tasks]:
                factor[t] = min(k, 1.0) if device in beside else k
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


def _refuse_stream(report) -> None:
    if report.requests > 1:
        raise InputError(STREAM_NOT_CALIBRATED)


def side_by_side(devices: dict[str, str]) -> set[str]:
    """The plan devices run by a process that runs another plan device too, from a report's ``devices``
    (plan device -> "rank R: torch device")."""
    rank = {d: where.split(":", 1)[0] for d, where in devices.items()}
    return {d for d, r in rank.items() if sum(other == r for other in rank.values()) > 1}
