"""The simulator: the single place where what a placement costs is computed.

- :func:`schedule` runs jobs (a task, or a sub-batch of a task, on one device) as early as their inputs
  and their device allow, in a given per-device order or, without one, in list-scheduling order
  (largest bottom level first). ``latency`` and ``batch`` objectives are its makespan.
- :func:`pipeline_loads` gives each device's steady-state load per sample; the ``pipeline`` objective
  is the largest (or, for GPipe training, largest forward + largest backward).

Batch splits: a task's parts cover consecutive sample ranges in the order listed; a part needs, from
each producer part, only the rows it overlaps, so identically split tasks pass rows straight through.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Mapping, Sequence

from .errors import ValidationError
from .problem import Problem


@dataclass(frozen=True)
class Job:
    task: str
    device: str
    batch: int
    offset: int = 0  # first sample of this part
    start: float = 0.0
    finish: float = 0.0


@dataclass(frozen=True)
class Schedule:
    jobs: tuple[Job, ...]
    makespan: float


Parts = Mapping[str, Sequence[tuple[str, int]]]  # task -> [(device, samples), ...]


def parts_from_placement(problem: Problem, placement: Mapping[str, str]) -> dict[str, list[tuple[str, int]]]:
    return {t: [(d, problem.batch_size)] for t, d in placement.items()}


def _offsets(parts: Sequence[tuple[str, int]]) -> list[int]:
    out, acc = [], 0
    for _, b in parts:
        out.append(acc)
        acc += b
    return out


def _ready_time(problem: Problem, task: str, device: str, lo: int, hi: int, parts: Parts,
                finish: Mapping[tuple[str, int], float]) -> float:
    """When rows [lo, hi) of every input of ``task`` are on ``device``."""
    graph, platform = problem.graph, problem.platform
    ready = 0.0
    for u in graph.predecessors[task]:
        ut = graph.by_id[u]
        for k, ((dev, b), off) in enumerate(zip(parts[u], _offsets(parts[u]))):
            overlap = min(hi, off + b) - max(lo, off)
            if overlap <= 0:
                continue
            scale = overlap / graph.batch_size
            ready = max(ready, finish[(u, k)] + platform.transfer_time(ut, dev, device, scale))
    return ready


def _inputs(graph, parts: Parts, task: str, lo: int, hi: int) -> list[tuple[str, int]]:
    """(producer, part index) pairs whose rows overlap rows [lo, hi) of ``task``."""
    out = []
    for u in graph.predecessors[task]:
        for k, ((_, b), off) in enumerate(zip(parts[u], _offsets(parts[u]))):
            if min(hi, off + b) > max(lo, off):
                out.append((u, k))
    return out


def bottom_levels(problem: Problem, device_of: Mapping[str, str]) -> dict[str, float]:
    """Longest path from each task to a sink, with the given devices' times and transfers."""
    graph, platform = problem.graph, problem.platform
    level: dict[str, float] = {}
    for t in reversed(graph.topological_order):
        best = 0.0
        for s in graph.successors[t]:
            best = max(best, platform.transfer_time(graph.by_id[t], device_of[t], device_of[s]) + level[s])
        level[t] = problem.time(t, device_of[t]) + best
    return level


def schedule(problem: Problem, parts: Parts, order: Mapping[str, Sequence[tuple[str, int]]] | None = None) -> Schedule:
    """Run every part as early as possible; ``order`` maps device -> [(task, part index), ...]."""
    graph = problem.graph
    missing = [t.id for t in graph.tasks if not parts.get(t.id)]
    if missing:
        raise ValidationError(f"tasks without a device: {missing[:5]}: every task needs one")
    for t in graph.tasks:
        if any(b < 1 for _, b in parts[t.id]):
            raise ValidationError(f"task {t.id!r} has a part with fewer than one sample")
        total = sum(b for _, b in parts[t.id])
        if total != problem.batch_size:
            raise ValidationError(f"task {t.id!r} covers {total} samples, not the batch of {problem.batch_size}")
    if order is None:
        order = list_order(problem, parts)
    finish: dict[tuple[str, int], float] = {}
    jobs: list[Job] = []
    free = {d: 0.0 for d in order}
    heads = {d: 0 for d in order}
    remaining = sum(len(v) for v in order.values())
    listed = sorted(key for seq in order.values() for key in seq)
    expected = sorted((t, k) for t, p in parts.items() for k in range(len(p)))
    if listed != expected:
        raise ValidationError("the device order does not list every task part exactly once")
    while remaining:
        progressed = False
        for dev, seq in order.items():
            while heads[dev] < len(seq):
                task, k = seq[heads[dev]]
                device, b = parts[task][k]
                off = _offsets(parts[task])[k]
                if any(key not in finish for key in _inputs(graph, parts, task, off, off + b)):
                    break
                if device != dev:
                    raise ValidationError(f"part {k} of task {task!r} is placed on {device!r} but ordered on {dev!r}")
                start = max(free[dev], _ready_time(problem, task, dev, off, off + b, parts, finish))
                end = start + problem.time(task, dev, b)
                finish[(task, k)] = end
                free[dev] = end
                jobs.append(Job(task, dev, b, off, start, end))
                heads[dev] += 1
                remaining -= 1
                progressed = True
        if not progressed:
            stuck = {d: seq[heads[d]] for d, seq in order.items() if heads[d] < len(seq)}
            raise ValidationError(f"the device order contradicts the graph's dependencies (deadlock at {stuck}): "
                                  "order each device's tasks consistently with the DAG")
    return Schedule(tuple(jobs), max((j.finish for j in jobs), default=0.0))


def list_order(problem: Problem, parts: Parts) -> dict[str, list[tuple[str, int]]]:
    """Per-device order: tasks by decreasing bottom level (ties: topological position)."""
    device_of = {t: max(p, key=lambda db: db[1])[0] for t, p in parts.items()}
    level = bottom_levels(problem, device_of)
    topo = {t: i for i, t in enumerate(problem.graph.topological_order)}
    order: dict[str, list[tuple[str, int]]] = {d.name: [] for d in problem.platform.devices}
    for t in sorted(problem.graph.topological_order, key=lambda t: (-level[t], topo[t])):
        for k, (dev, _) in enumerate(parts[t]):
            order[dev].append((t, k))
    return order


def latency(problem: Problem, placement: Mapping[str, str],
            order: Mapping[str, Sequence[str]] | None = None) -> Schedule:
    """Makespan schedule of one request with one device per task (``order``: device -> task ids)."""
    parts = parts_from_placement(problem, placement)
    job_order = None if order is None else {d: [(t, 0) for t in seq] for d, seq in order.items()}
    return schedule(problem, parts, job_order)


@dataclass(frozen=True)
class Loads:
    forward: Mapping[str, float]
    backward: Mapping[str, float]
    objective: float

    @property
    def total(self) -> dict[str, float]:
        return {d: self.forward[d] + self.backward[d] for d in self.forward}


def pipeline_loads(problem: Problem, placement: Mapping[str, str]) -> Loads:
    """Per-device load per sample: compute plus the device's own transfer hops.

    A producer's output leaves its device once when it goes through host memory (however many devices
    consume it) and enters each consuming device once; a peer-link transfer counts on both ends; the
    network between servers counts on the receiver. Hops are charged to the producer's phase.
    """
    graph, platform = problem.graph, problem.platform
    load = {"forward": {d.name: 0.0 for d in platform.devices}, "backward": {d.name: 0.0 for d in platform.devices}}
    for task in graph.tasks:
        a = placement[task.id]
        phase = load[task.phase]
        phase[a] += problem.time(task.id, a)
        staged_out = False
        for c in sorted({placement[v] for v in graph.successors[task.id]} - {a}):
            peer = platform.peer_links.get(frozenset((a, c)))
            if peer is not None:
                t = peer.time(task.output_bytes)
                phase[a] += t
                phase[c] += t
                continue
            staged_out = True
            phase[c] += platform.hop_time(task, platform.by_name[c])
            if platform.by_name[a].server != platform.by_name[c].server:
                phase[c] += platform.network.time(task.output_bytes)
        if staged_out:
            phase[a] += platform.hop_time(task, platform.by_name[a])
    fwd, bwd = load["forward"], load["backward"]
    if problem.is_training and problem.objective.training == "gpipe":
        objective = max(fwd.values()) + max(bwd.values())
    else:
        objective = max(fwd[d] + bwd[d] for d in fwd)
    return Loads(fwd, bwd, objective)
