"""A graph's segments between series points, as the memory segments bound prices them (:mod:`._segments`).

A series point is a task that every other task of nonzero time or memory precedes or follows; a segment is a
run of such tasks between two series points, each with its time per kind of device, its memory, and the
least transfer from its predecessors in the segment and from the previous series point, per pair of kinds
(tasks of no time and no memory in between are passed through: a move between two kinds costs at least the
cheapest of the tensors on the way, per pair of kinds). The kinds are the segment's own
(:func:`segment_kinds`): a kind of several accelerators is its one device and its others, so that a tensor
between two of its devices is not free.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from ..problem import Problem

MAX_SEGMENT = 48  # tasks in one segment's MILP; a graph with a larger segment is not bounded this way
MAX_TASKS = 20_000  # ancestor sets as bitsets take tasks^2 / 8 bytes: 50 MB here

Costs = tuple[tuple[tuple[str, str], float], ...]  # ((kind from, kind to), least time) for kinds that differ
OTHERS = "+"  # a kind of several devices is two in a segment: one device (its name) and the others (name + OTHERS)


def base_kind(kind: str) -> str:
    """The kind of device a segment's kind stands for: ``kind`` without :data:`OTHERS`."""
    return kind[:-len(OTHERS)] if kind.endswith(OTHERS) else kind


def segment_kinds(problem: Problem, kinds: dict[str, list[str]]) -> dict[str, int]:
    """The kinds a segment's tasks run on, with their devices: each kind of one device as it is; a kind of
    several as one of its devices (its name) and the others (name + :data:`OTHERS`). Within a segment, any
    plan's devices map onto them: the device of the series point entering it (or any one) is the one, so a
    tensor between the one and the others pays a transfer between two devices of the kind, and parallel
    branches cannot spread over a kind's devices for free. A kind of host CPUs stays whole (a relaxation, so
    still a bound) where the accelerators hold every task's memory: each split kind adds segment MILPs, and
    there the CPUs are too slow to matter (GPT-3's prefill over six-servers: the same bound, 20 s to converge
    against 14 s); where the CPUs must take weights, how many run side by side decides the latency (over
    a100-ib-2x8: 48.64 -> 48.89 s, and the plan built from it 56.80 -> 50.76 s)."""
    devices = problem.platform.by_name
    accelerators = sum(d.memory_bytes for d in problem.platform.devices if not d.is_host)
    split_hosts = accelerators < sum(t.memory_bytes for t in problem.graph.tasks)
    out: dict[str, int] = {}
    for k, names in kinds.items():
        if len(names) > 1 and (split_hosts or not all(devices[d].is_host for d in names)):
            out[k], out[k + OTHERS] = 1, len(names) - 1
        else:
            out[k] = len(names)
    return out


@dataclass(frozen=True)
class Item:
    """A task of a segment: time per allowed kind, memory, predecessors inside the segment with the least
    transfer per pair of kinds, and the least transfer from the previous series point (() if not fed by it)."""
    times: tuple[tuple[str, float], ...]
    memory: float
    preds: tuple[tuple[int, Costs], ...]
    entry: Costs


Segment = tuple[Item, ...]  # in topological order; the last one is the series point closing it (if any)


def segments_of(problem: Problem, kinds: dict[str, list[str]], slots: dict[str, int],
                unit: float) -> tuple[list[Segment], list[list[str]], bool] | None:
    """The graph's segments in order (times scaled by ``unit``, per segment kind of ``slots``, those of
    :func:`segment_kinds` for ``kinds``: kind -> device names), their tasks, and whether the last one ends at a
    series point; None where a segment holds more than ``MAX_SEGMENT`` tasks."""
    order, weighted, series = series_points(problem)
    runs = windows_of(weighted, series)
    if not runs or any(len(run) > MAX_SEGMENT for run in runs):
        return None
    moves, stops = _Moves(problem, kinds, slots), set(weighted)
    segments, previous = [], None
    for run in runs:
        segments.append(_segment(problem, run, previous, stops, moves, unit))
        previous = run[-1]
    return segments, runs, runs[-1][-1] in series


def windows_of(weighted: list[str], series: set[str]) -> list[list[str]]:
    """The weighted tasks (topological order) in runs, each ending at a series point (the last maybe not)."""
    runs: list[list[str]] = [[]]
    for t in weighted:
        runs[-1].append(t)
        if t in series:
            runs.append([])
    return [run for run in runs if run]


def series_points(problem: Problem) -> tuple[list[str], list[str], set[str]]:
    """The tasks in a topological order, those of them with time or memory (weighted), and the series points
    among those."""
    graph = problem.graph
    order = list(graph.topological_order)
    position = {t: i for i, t in enumerate(order)}
    weighted = [t for t in order if graph.by_id[t].memory_bytes > 0
                or any(problem.time(t, d) > 0 for d in problem.allowed_devices[t])]
    return order, weighted, _series_points(problem, order, position, weighted)


def _series_points(problem: Problem, order: list[str], position: dict[str, int], weighted: list[str]) -> set[str]:
    """The weighted tasks that every other weighted task precedes or follows (ancestor sets as bitsets)."""
    graph = problem.graph
    ancestors: dict[str, int] = {}
    for t in order:
        bits = 0
        for u in graph.predecessors[t]:
            bits |= ancestors[u] | (1 << position[u])
        ancestors[t] = bits
    descendants: dict[str, int] = {}
    for t in reversed(order):
        bits = 0
        for v in graph.successors[t]:
            bits |= descendants[v] | (1 << position[v])
        descendants[t] = bits
    mask = sum(1 << position[t] for t in weighted)
    series, before = set(), 0
    for t in weighted:
        own = 1 << position[t]
        if ancestors[t] & mask == before and descendants[t] & mask == mask & ~before & ~own:
            series.add(t)
        before |= own
    return series


class _Moves:
    """The least time a task's output takes from a device of one kind to one of another: ``raw`` per pair of
    devices (memoised by what a transfer's time depends on: the output's size and any given time), and
    ``closed`` per pair of segment kinds (:func:`segment_kinds`) that differ, any route through third devices
    counted, as a chain of tasks may take it. Routes are closed over devices, not kinds: a GPU's tensor reaches
    another server's GPU through a host CPU only by paying the network (closed over kinds, the CPU of one server
    would pass it to another's for free). Between a kind's one device and its others, the least route between
    two of its devices."""

    def __init__(self, problem: Problem, kinds: dict[str, list[str]], slots: dict[str, int]):
        self.problem = problem
        self.devices = [d for names in kinds.values() for d in names]
        self.kinds = list(kinds)
        self.kind_of = {d: k for k, names in kinds.items() for d in names}
        position = {d: i for i, d in enumerate(self.devices)}
        self.blocks = {k: np.array([position[d] for d in names]) for k, names in kinds.items()}
        self.slots = list(slots)
        self.pairs = [(a, b) for a in self.slots for b in self.slots if a != b]
        self.memo: dict[tuple, tuple[float, ...]] = {}
        self.closed_memo: dict[tuple[tuple[float, ...], float], Costs] = {}

    def raw(self, task: str) -> tuple[float, ...]:
        t = self.problem.graph.by_id[task]
        key = (t.output_bytes, t.transfer_time)
        if key not in self.memo:
            transfer = self.problem.platform.transfer_time
            self.memo[key] = tuple(transfer(t, x, y) for x in self.devices for y in self.devices)
        return self.memo[key]

    def closed(self, least_raw: tuple[float, ...], unit: float) -> Costs:
        key = (least_raw, unit)
        if key not in self.closed_memo:
            n = len(self.devices)
            least = np.array(least_raw).reshape(n, n)
            for via in range(n):  # Floyd-Warshall over devices
                least = np.minimum(least, least[:, via:via + 1] + least[via:via + 1, :])
            between = {(a, b): float(least[np.ix_(self.blocks[a], self.blocks[b])].min())
                       for a in self.kinds for b in self.kinds if a != b}
            for k, block in self.blocks.items():  # two devices of one kind
                if len(block) > 1:
                    inner = least[np.ix_(block, block)] + np.diag(np.full(len(block), np.inf))
                    between[k, k] = float(inner.min())
            costs = ((pair, between[base_kind(pair[0]), base_kind(pair[1])]) for pair in self.pairs)
            self.closed_memo[key] = tuple((pair, c * unit) for pair, c in costs if c > 0)
        return self.closed_memo[key]


def _least(a: tuple[float, ...], b: tuple[float, ...]) -> tuple[float, ...]:
    return tuple(map(min, a, b))


def _reach(problem: Problem, source: str, weighted: set[str], moves: _Moves) -> dict[str, tuple[float, ...]]:
    """The weighted tasks ``source`` feeds directly or through tasks of no time and no memory, each with the
    least raw transfer per pair of kinds among the outputs on the way (a move between them costs at least
    that: any route through the tensors on the way moves one of them)."""
    graph = problem.graph
    found: dict[str, tuple[float, ...]] = {}
    carried = {source: moves.raw(source)}
    stack = [source]
    while stack:
        t = stack.pop()
        for v in graph.successors[t]:
            if v in weighted:
                found[v] = _least(found[v], carried[t]) if v in found else carried[t]
                continue
            least = _least(carried[t], moves.raw(v))
            if v in carried:
                least = _least(least, carried[v])
                if least == carried[v]:
                    continue  # nothing cheaper this way
            carried[v] = least
            stack.append(v)
    return found


def _segment(problem: Problem, run: list[str], previous: str | None, weighted: set[str], moves: _Moves,
             unit: float) -> Segment:
    """The tasks of ``run`` as items: times per kind (scaled), memory, transfers from earlier ones and from
    the series point ``previous``."""
    graph = problem.graph
    local = {t: i for i, t in enumerate(run)}
    feeds = {u: _reach(problem, u, weighted, moves) for u in run + ([previous] if previous else [])}
    items = []
    for t in run:
        times: dict[str, float] = {}
        for d in problem.allowed_devices[t]:
            k = moves.kind_of[d]
            times[k] = min(times.get(k, math.inf), problem.time(t, d) * unit)
            if k + OTHERS in moves.slots:
                times[k + OTHERS] = times[k]
        preds = tuple((local[u], moves.closed(feeds[u][t], unit)) for u in run if t in feeds[u])
        entry = moves.closed(feeds[previous][t], unit) if previous and t in feeds[previous] else ()
        items.append(Item(tuple(sorted(times.items())), graph.by_id[t].memory_bytes, preds, entry))
    return tuple(items)
