"""Energetic reasoning: the path-work LPs (latency and batch) with each device's work counted in windows of time.

A task cannot start on a device before its ancestors have run and sent it their outputs (its head ``r`` there,
:func:`earliest_starts`) and must end a chain of its descendants (its tail ``q``, :func:`least_deliveries`)
before the makespan ``C``. So whatever a device runs of the tasks whose head there is at least ``a`` and
whose tail at least ``b`` runs inside ``[a, C - b]``, one job at a time: ``sum p[t,d] x[t,d] <= C - a - b``
(batch: every part of such a task, at its size's time). A job that may lie partly outside
the window still runs its mandatory part inside it: the least overlap of the window with the job shifted
fully left (``[r, r + p]``) or fully right (``[C - q - p, C - q]``). That overlap grows with ``C``, so taken
at a makespan ``L`` no plan beats it is a valid coefficient; the LP's answer becomes the next ``L``.

On randomly wired DAGs of 32-64 tasks on a CPU and two GPUs (no series point) the rows lift the path-work LP
by 1-13% in about a second (``benchmarks/random_bounds.py``): the simple bounds see a path or a total, not
the total that must fit between a path's two ends. On the zoo's batches of 8 they add about 1%: there a
part of one sample on a GPU is short beside the makespan, so the heads and tails are too.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from time import perf_counter
from typing import Callable, Mapping

import numpy as np

from ..problem import Problem
from ._batch import batch_path_work_lp, batch_path_work_seconds, size_ranges
from ._latency import path_work_lp, path_work_seconds
from ._lp import _KeyedLP, _least_makespan

ROUNDS = 3  # LP solves at most, each with the last one's makespan in the mandatory parts
NONZEROS = 300_000  # the window rows' budget: thresholds are thinned to stay below it
# the chain rows' budget: 300,000 took resnet50's bound (177 tasks on paper-server) from 0.6 to 1.0 s for 0.01%;
# on randomly wired DAGs of 48-64 tasks it gave 0-0.5% more
CHAIN_NONZEROS = 100_000
LEAST_THRESHOLDS = 4  # fewer heads (or tails) than this in the budget: the bound is not tried
RISE = 1e-3  # a round that lifts the bound by less than this share ends the rounds

Jobs = dict[str, list[tuple[tuple, list[tuple[float, int]]]]]  # device -> [(column, [(duration, samples)])]
CHAIN_TASKS = 2_000  # the chain rows need every task's ancestors and descendants: not tried on more tasks


@dataclass(frozen=True)
class Cut:
    """A row every latency schedule meets: ``sum seconds x[task, device] + offset <= later - earlier`` over the
    terms ``{(task, device): seconds}``, where ``x`` is 1 if the task runs on the device and ``later`` and
    ``earlier`` are times of the schedule: ``("makespan", "")``, ``("start", task)``, ``("end", task)`` or
    ``("zero", "")``."""
    terms: Mapping[tuple[str, str], float]
    offset: float
    later: tuple[str, str] = ("makespan", "")
    earlier: tuple[str, str] = ("zero", "")


def earliest_starts(problem: Problem, duration: Callable[[str, str], float] | None = None,
                    scale: float = 1.0) -> dict[tuple[str, str], float]:
    """(task, device) -> the earliest the task can start there: each producer at its earliest on the device
    that gets its output here soonest (its transfer of ``scale`` x its output counted, free on the same device),
    devices never busy. ``duration(task, device)``: a job's least time (default: the task's time there)."""
    graph, duration = problem.graph, duration or problem.time
    start: dict[tuple[str, str], float] = {}
    for t in graph.topological_order:
        for d in problem.allowed_devices[t]:
            start[t, d] = max((min(start[u, a] + duration(u, a) + problem.transfer(u, a, d, scale)
                                   for a in problem.allowed_devices[u]) for u in graph.predecessors[t]), default=0.0)
    return start


def least_deliveries(problem: Problem, duration: Callable[[str, str], float] | None = None,
                     scale: float = 1.0) -> dict[tuple[str, str], float]:
    """(task, device) -> the least time between the task's end there and the makespan: each consumer on the
    device that finishes the rest soonest, its input's transfer counted (the mirror of :func:`earliest_starts`)."""
    graph, duration = problem.graph, duration or problem.time
    after: dict[tuple[str, str], float] = {}
    for t in reversed(graph.topological_order):
        for d in problem.allowed_devices[t]:
            after[t, d] = max((min(problem.transfer(t, d, b, scale) + duration(v, b) + after[v, b]
                                   for b in problem.allowed_devices[v]) for v in graph.successors[t]), default=0.0)
    return after


def thresholds(values, count: int) -> list[float]:
    """At most ``count`` of the distinct ``values``, spread evenly over their sorted order (the least kept).

    >>> thresholds([0, 3, 1, 3, 2], 3)
    [0, 2, 3]
    >>> thresholds([0, 3, 1, 3, 2], 1)
    [0]
    """
    distinct = sorted(set(values))
    if count < 2:
        return distinct[:max(count, 0)]
    if len(distinct) <= count:
        return distinct
    return [distinct[round(i * (len(distinct) - 1) / (count - 1))] for i in range(count)]


def energetic_bound(problem: Problem, time_limit: float | None = None, floor: float = 0.0) -> float:
    """The path-work LP (latency) or the batch path-work LP (batch) with every device's energetic rows for the
    windows between its tasks' heads and tails (see the module); ``floor``: a makespan no plan beats (seconds),
    where the first round takes the jobs' mandatory parts. 0 for other objectives, where the thresholds
    the budget allows are too few, or where the time runs out first."""
    kind = problem.objective.kind
    if kind not in ("latency", "batch"):
        return 0.0
    graph, devices = problem.graph, problem.platform.devices
    if time_limit is not None and (path_work_seconds(len(graph.edges), len(graph), len(devices)) if kind == "latency"
                                   else batch_path_work_seconds(problem)) > time_limit:
        return 0.0  # its LP alone would not finish in the time
    stop = None if time_limit is None else perf_counter() + time_limit
    jobs = _latency_jobs(problem) if kind == "latency" else _batch_jobs(problem)
    count = int(math.sqrt(NONZEROS / max(1, len(jobs) * max(map(len, jobs.values())))))
    if count < LEAST_THRESHOLDS:
        return 0.0
    least = _least_part(problem)
    scale = 1.0 if kind == "latency" else 1.0 / graph.batch_size  # a part holds one sample at least
    head, tail = earliest_starts(problem, least, scale), least_deliveries(problem, least, scale)
    floor = max(floor, max((min(head[t, d] + least(t, d) + tail[t, d] for d in problem.allowed_devices[t])
                            for t in graph.topological_order), default=0.0))
    best, cuts, chain = 0.0, [], None
    for _ in range(ROUNDS):
        built = (path_work_lp if kind == "latency" else batch_path_work_lp)(problem, stop)
        if built is None or not _energetic_rows(built, jobs, head, tail, max(floor, best), count, stop):
            break
        lp, unit = built
        if chain is None:  # the same rows in every round: built once
            chain = _chain_rows(problem, head, tail, unit, stop) if kind == "latency" else []
        if chain is None:
            break
        for row, rhs, cut in chain:
            lp.ub(row, rhs, cut)
        value = _least_makespan(built, stop)
        if value is None:
            break
        rose = value > best * (1 + RISE)
        if value > best:
            best, cuts = value, lp.binding
        if not rose:
            break
    problem.__dict__["energetic_cuts"] = tuple(cuts)
    return best


def energetic_cuts(problem: Problem) -> tuple[Cut, ...]:
    """The energetic rows that held :func:`energetic_bound`'s last answer up (latency; none before it ran),
    for an exact model to take as cuts."""
    return problem.__dict__.get("energetic_cuts", ())


def _least_part(problem: Problem) -> Callable[[str, str], float]:
    """(task, device) -> the least time a job of the task takes there: the task's time (latency), its
    quickest part of any size (batch)."""
    if problem.objective.kind != "batch":
        return problem.time
    return lambda t, d: min(problem.time(t, d, b) for b in problem.pricing_sizes(t, d))


def _latency_jobs(problem: Problem) -> Jobs:
    """Each task's share on each device as one job of its time there."""
    jobs: Jobs = {d.name: [] for d in problem.platform.devices}
    for t in problem.graph.topological_order:
        for d in problem.allowed_devices[t]:
            jobs[d].append((("x", t, d), [(problem.time(t, d), 1)]))
    return jobs


def _batch_jobs(problem: Problem) -> Jobs:
    """Each task's samples on each device in parts of each size range, as parts of those sizes."""
    n = problem.batch_size
    jobs: Jobs = {d.name: [] for d in problem.platform.devices}
    for t in problem.graph.topological_order:
        for d in problem.allowed_devices[t]:
            for r, (lo, hi) in enumerate(size_ranges(n)):
                sizes = problem.pricing_sizes(t, d, lo, hi)  # a part's least time per sample lies at one of them
                jobs[d].append((("u", t, d, r), [(problem.time(t, d, b), b) for b in sizes]))
    return jobs


def _energetic_rows(built: tuple[_KeyedLP, float], jobs: Jobs, head: dict, tail: dict, makespan: float,
                    count: int, stop: float | None) -> bool:
    """``sum (mandatory part per unit of column) x column - C <= -(a + b)`` for each device and each window
    ``[a, C - b]`` with ``a + b <= makespan`` (so that it is not empty in any plan; times in seconds, the LP's
    in its unit); False where the time ran out while building."""
    lp, unit = built
    for device, entries in jobs.items():
        if not entries:
            continue
        r = np.array([head[key[1], device] for key, _ in entries])
        q = np.array([tail[key[1], device] for key, _ in entries])
        duration, size = _parts_table(entries)
        ends = np.array(thresholds(q, count))
        for a in thresholds(r, count):
            if stop is not None and perf_counter() > stop:
                return False
            b = ends[a + ends <= makespan][:, None, None]  # each window's distance from the end, on axis 0
            left = np.minimum(r[:, None] + duration, makespan - b) - np.maximum(r, a)[:, None]
            right = np.minimum(makespan - q, makespan - b[:, :, 0])[:, :, None] \
                - np.maximum(makespan - q[:, None] - duration, a)
            per_sample = np.where(np.isfinite(size), np.maximum(0.0, np.minimum(left, right)) / size, np.inf)
            inside = per_sample.min(axis=2)  # per sample, the least size's (padding is no size: never the least)
            for k in range(len(b)):
                row, named = {}, {}
                for i in np.flatnonzero(inside[k] > 0):
                    key = entries[i][0]
                    row[key], named[key[1], device] = inside[k, i] * unit, float(inside[k, i])
                if row:
                    offset = a + float(b[k, 0, 0])
                    tag = Cut(named, offset) if entries[0][0][0] == "x" else None  # a batch's parts: not one job each
                    lp.ub({**row, ("C",): -1.0}, -offset * unit, tag)
    return True


def _parts_table(entries) -> tuple[np.ndarray, np.ndarray]:
    """Each entry's parts as rows of durations and sizes, padded with parts of no size (infinite), which the
    rows leave out."""
    width = max(len(parts) for _, parts in entries)
    duration, size = np.zeros((len(entries), width)), np.full((len(entries), width), np.inf)
    for i, (_, parts) in enumerate(entries):
        for k, (f, b) in enumerate(parts):
            duration[i, k], size[i, k] = f, b
    return duration, size


def _chain_rows(problem: Problem, head: dict, tail: dict, unit: float, stop: float | None) -> list | None:
    """Latency: the ancestors of a task v that a device runs, of heads there at least ``a``, all run inside
    ``[a, start of v]``: ``a + sum p[u,d] x[u,d] <= e[v] - p[v]`` (``a`` at most v's own head, so that the
    window is not empty in any plan); the descendants likewise inside ``[end of v, C - b]``. As many
    thresholds per task and device as :data:`CHAIN_NONZEROS` allows (none past :data:`CHAIN_TASKS` tasks).
    Each row as ``({column: coefficient}, rhs, its cut)`` in the LP's time ``unit``; None where the time ran
    out while building."""
    graph = problem.graph
    if len(graph) > CHAIN_TASKS:
        return []
    before, after = _relatives(graph.topological_order, graph.predecessors), \
        _relatives(tuple(reversed(graph.topological_order)), graph.successors)
    devices = [d.name for d in problem.platform.devices]
    count = CHAIN_NONZEROS // max(1, len(devices) * sum(len(before[t]) + len(after[t]) for t in before))
    if count < 1:
        return []
    rows: list = []
    for v in graph.topological_order:
        if stop is not None and perf_counter() > stop:
            return None
        own = {("x", v, d): problem.time(v, d) * unit for d in problem.allowed_devices[v]}
        first = min(head[v, d] for d in problem.allowed_devices[v])
        last = min(tail[v, d] for d in problem.allowed_devices[v])
        for d in devices:
            up = [u for u in before[v] if d in problem.allowed_devices[u]]
            for a in thresholds((head[u, d] for u in up if head[u, d] <= first), count):
                terms = {(u, d): problem.time(u, d) for u in up if head[u, d] >= a}
                row: dict[tuple, float] = {("x", *job): s * unit for job, s in terms.items()}
                rows.append(({**row, **own, ("e", v): -1.0}, -a * unit, Cut(terms, a, later=("start", v))))
            down = [w for w in after[v] if d in problem.allowed_devices[w]]
            for b in thresholds((tail[w, d] for w in down if tail[w, d] <= last), count):
                terms = {(w, d): problem.time(w, d) for w in down if tail[w, d] >= b}
                row = {("x", *job): s * unit for job, s in terms.items()}
                rows.append(({**row, ("e", v): 1.0, ("C",): -1.0}, -b * unit, Cut(terms, b, earlier=("end", v))))
    return rows


def _relatives(order: tuple[str, ...], parents: Mapping[str, tuple[str, ...]]) -> dict[str, list[str]]:
    """Each task's ancestors (``parents``: predecessors, ``order`` topological) or descendants (successors,
    the reverse order), as bit sets while they are built."""
    index = {t: i for i, t in enumerate(order)}
    bits: dict[str, int] = {}
    for t in order:
        b = 0
        for u in parents[t]:
            b |= bits[u] | (1 << index[u])
        bits[t] = b
    return {t: [order[i] for i in range(b.bit_length()) if b >> i & 1] for t, b in bits.items()}
