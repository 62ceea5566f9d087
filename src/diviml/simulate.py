"""The simulator: the single place where what a placement costs is computed.

- :func:`schedule` runs jobs (a task, or a sub-batch of a task, on one device) as early as their inputs
  and their device allow, in a given per-device order or, without one, in list-scheduling order
  (largest bottom level first). ``latency`` and ``batch`` objectives are its makespan.
- :func:`pipeline_loads` gives each device's steady-state load per sample; the ``pipeline`` objective
  is the largest (or, for GPipe training, largest forward + largest backward).

Batch splits: a task's parts cover consecutive sample ranges in the order listed; a part needs, from
each producer part, only the rows it overlaps, so identically split tasks pass rows straight through.

Transfers (:mod:`diviml.platform`): on an ``overlapped`` platform a job starts once each input has arrived
(its producer's finish plus the transfer); on a ``receiver`` platform it starts once each producer has
finished and its device is free, and spends the transfers of the inputs its device does not hold yet
(``Job.receive``) before computing: a device receives the same rows of a producer's part once, for the
first of its jobs that reads them.
"""

from __future__ import annotations

from bisect import bisect_right
from dataclasses import dataclass
from typing import Iterable, Mapping, Sequence

import networkx as nx

from .errors import ValidationError
from .graph import Task, longest_paths
from .platform import Platform
from .problem import Problem


@dataclass(frozen=True)
class Job:
    task: str
    device: str
    batch: int
    offset: int = 0  # first sample of this part
    start: float = 0.0
    finish: float = 0.0
    received: tuple[tuple[str, str, float], ...] = ()  # ('receiver' transfers) (producer, its device, seconds)

    @property
    def receive(self) -> float:
        """Of [start, finish), the time spent receiving inputs before computing."""
        return sum(seconds for _, _, seconds in self.received)


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


def _overlapping(parts: Sequence[tuple[str, int]], offsets: Sequence[int], lo: int, hi: int):
    """(index, device, rows shared) of the parts that overlap rows [lo, hi) (offsets ascend: a bisection finds
    the first, so a part of many reads only its own rows' producers, not every part of them)."""
    k = max(bisect_right(offsets, lo) - 1, 0)
    while k < len(parts) and offsets[k] < hi:
        dev, b = parts[k]
        overlap = min(hi, offsets[k] + b) - max(lo, offsets[k])
        if overlap > 0:
            yield k, dev, overlap
        k += 1


def _ready_time(problem: Problem, task: str, device: str, lo: int, hi: int, parts: Parts,
                offsets: Mapping[str, Sequence[int]], finish: Mapping[tuple[str, int], float],
                held: set) -> tuple[float, list[tuple[str, str, float]]]:
    """When the job of rows [lo, hi) of ``task`` on ``device`` may start, and what it receives first: overlapped
    transfers delay it (nothing to receive); on a 'receiver' platform it waits for its producers and receives
    the rows its device does not hold yet (``held``: what the device received, updated)."""
    graph = problem.graph
    receiving = problem.platform.transfers == "receiver"
    ready, received = 0.0, []
    for u in graph.predecessors[task]:
        for k, dev, overlap in _overlapping(parts[u], offsets[u], lo, hi):
            hop = problem.transfer(u, dev, device, overlap / graph.batch_size)
            if not receiving:
                ready = max(ready, finish[(u, k)] + hop)
                continue
            ready = max(ready, finish[(u, k)])
            rows = (u, k, device, max(lo, offsets[u][k]), overlap)
            if hop > 0 and rows not in held:
                held.add(rows)
                received.append((u, dev, hop))
    return ready, received


def _inputs(graph, parts: Parts, offsets: Mapping[str, Sequence[int]], task: str, lo: int,
            hi: int) -> list[tuple[str, int]]:
    """(producer, part index) pairs whose rows overlap rows [lo, hi) of ``task``."""
    return [(u, k) for u in graph.predecessors[task] for k, _, _ in _overlapping(parts[u], offsets[u], lo, hi)]


def bottom_levels(problem: Problem, device_of: Mapping[str, str]) -> dict[str, float]:
    """Longest path from each task to a sink, with the given devices' times and transfers."""
    graph, platform = problem.graph, problem.platform
    return longest_paths(reversed(graph.topological_order), graph.successors.__getitem__,
                         lambda t: problem.time(t, device_of[t]),
                         edge=lambda s, t: platform.transfer_time(graph.by_id[t], device_of[t], device_of[s]))


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
    offsets = {t: _offsets(p) for t, p in parts.items()}
    finish: dict[tuple[str, int], float] = {}
    jobs: list[Job] = []
    free = {d: 0.0 for d in order}
    held: set = set()  # rows of producer parts each device has received ('receiver' transfers)
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
                off = offsets[task][k]
                if any(key not in finish for key in _inputs(graph, parts, offsets, task, off, off + b)):
                    break
                if device != dev:
                    raise ValidationError(f"part {k} of task {task!r} is placed on {device!r} but ordered on {dev!r}")
                ready, received = _ready_time(problem, task, dev, off, off + b, parts, offsets, finish, held)
                start = max(free[dev], ready)
                end = start + sum(seconds for _, _, seconds in received) + problem.time(task, dev, b)
                finish[(task, k)] = end
                free[dev] = end
                jobs.append(Job(task, dev, b, off, start, end, tuple(received)))
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


def tensor_charges(platform: Platform, task: Task, home: str, readers: Iterable[str]) -> list[tuple[str, float]]:
    """What ``task``'s output, made on ``home`` and read on the devices ``readers``, costs each device, as
    :func:`pipeline_loads` counts it: (device, seconds) pairs, a device more than once where it pays twice."""
    out: list[tuple[str, float]] = []
    staged_out = False
    for c in sorted(set(readers) - {home}):
        peer = platform.peer_links.get(frozenset((home, c)))
        if peer is not None:
            t = peer.time(task.output_bytes)
            out += [(home, t), (c, t)]
            continue
        staged_out = True
        out.append((c, platform.hop_time(task, platform.by_name[c])))
        if platform.by_name[home].server != platform.by_name[c].server:
            out.append((c, platform.network.time(task.output_bytes)))
    if staged_out:
        out.append((home, platform.hop_time(task, platform.by_name[home])))
    return out


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
        away = {placement[v] for v in graph.successors[task.id]} - {a}
        if away:  # most tensors stay on their device
            for device, cost in tensor_charges(platform, task, a, away):
                phase[device] += cost
    fwd, bwd = load["forward"], load["backward"]
    if problem.is_training and problem.objective.training == "gpipe":
        objective = max(fwd.values()) + max(bwd.values())
    else:
        objective = max(fwd[d] + bwd[d] for d in fwd)
    return Loads(fwd, bwd, objective)


@dataclass(frozen=True)
class Call:
    device: str
    tasks: tuple[str, ...]
    start: float
    finish: float


@dataclass(frozen=True)
class CallSchedule:
    calls: tuple[Call, ...]  # accelerator calls and single host-CPU tasks
    makespan: float


def call_blocks(problem: Problem, placement: Mapping[str, str]) -> dict[str, list[list[str]]]:
    """Each non-host device's tasks cut into calls: maximal runs of a topological order that keeps a
    device's tasks together where the graph allows (ties go to the device of the previous task)."""
    graph = problem.graph
    indegree = {t: len(graph.predecessors[t]) for t in graph.topological_order}
    position = {t: i for i, t in enumerate(graph.topological_order)}
    ready = sorted((t for t, k in indegree.items() if k == 0), key=position.get)
    order, last = [], None
    while ready:
        same = [t for t in ready if placement[t] == last]
        t = same[0] if same else ready[0]
        ready.remove(t)
        order.append(t)
        last = placement[t]
        for v in graph.successors[t]:
            indegree[v] -= 1
            if indegree[v] == 0:
                ready.append(v)
        ready.sort(key=position.get)
    blocks: dict[str, list[list[str]]] = {}
    previous = None
    for t in order:
        d = placement[t]
        if problem.platform.by_name[d].is_host:
            previous = d
            continue
        if previous == d:
            blocks[d][-1].append(t)
        else:
            blocks.setdefault(d, []).append([t])
        previous = d
    return _merge_calls(problem, placement, blocks)


def _merge_calls(problem: Problem, placement: Mapping[str, str],
                 blocks: dict[str, list[list[str]]]) -> dict[str, list[list[str]]]:
    """Fewer calls: join calls of one device (all of them first, then two at a time) wherever the calls of
    every device can still run in some order. A device whose node set is convex thus makes one call.
    Each device's calls come back in an order the graph allows; each call's tasks in topological order."""
    graph = problem.graph
    position = {t: i for i, t in enumerate(graph.topological_order)}
    blocks = {d: [list(b) for b in bs] for d, bs in blocks.items()}

    def order_of(candidate) -> list[tuple[str, int]] | None:
        """A topological order of the calls (host tasks as single units), or None if they form a cycle."""
        unit = {t: (placement[t], -1 - position[t]) for t in graph.topological_order}
        for d, bs in candidate.items():
            for k, b in enumerate(bs):
                for t in b:
                    unit[t] = (d, k)
        quotient = nx.DiGraph()
        quotient.add_nodes_from(set(unit.values()))
        quotient.add_edges_from((unit[u], unit[v]) for u, v in graph.edges if unit[u] != unit[v])
        return list(nx.topological_sort(quotient)) if nx.is_directed_acyclic_graph(quotient) else None

    def attempt(d: str, merged: list[list[str]]) -> bool:
        candidate = {**blocks, d: merged}
        order = order_of(candidate)
        if order is None:
            return False
        rank = {u: i for i, u in enumerate(order)}
        blocks[d] = [sorted(merged[k], key=position.get) for k in sorted(range(len(merged)), key=lambda k: rank[d, k])]
        return True

    for d in list(blocks):
        if len(blocks[d]) > 1 and not attempt(d, [[t for b in blocks[d] for t in b]]):
            joined = True
            while joined:
                joined = False
                bs = blocks[d]
                for i in range(len(bs)):
                    for j in range(i + 1, len(bs)):
                        rest = [b for k, b in enumerate(bs) if k not in (i, j)]
                        if attempt(d, rest + [bs[i] + bs[j]]):
                            joined = True
                            break
                    if joined:
                        break
    return blocks


def _call_duration(problem: Problem, device: str, tasks: tuple[str, ...], producers: set[str]) -> float:
    """An accelerator call's length: its outside inputs hopped in (each producer once), its compute, and its
    outputs that leave it hopped out (each producer once)."""
    graph, platform = problem.graph, problem.platform
    dev, inside = platform.by_name[device], set(tasks)
    hops_in = sum(platform.hop_time(graph.by_id[u], dev) for u in producers)
    leaving = [t for t in tasks if any(v not in inside for v in graph.successors[t])]
    hops_out = sum(platform.hop_time(graph.by_id[t], dev) for t in leaving)
    return hops_in + sum(problem.time(t, device) for t in tasks) + hops_out


def call_latency(problem: Problem, placement: Mapping[str, str]) -> CallSchedule:
    """Makespan under the NeurIPS 2020 latency model (see :class:`diviml.problem.Objective`).

    A call starts when the previous call on its accelerator has ended and every outside input is in host
    memory; it lasts the hops in of its outside inputs (each producer once), its compute and the hops out
    of its outputs that leave it (each producer once). A host task starts when its inputs are in host memory.
    """
    graph, platform = problem.graph, problem.platform
    blocks = call_blocks(problem, placement)
    for d, bs in blocks.items():
        if len(bs) > problem.objective.max_calls:
            raise ValidationError(f"device {d!r} needs {len(bs)} calls, more than the {problem.objective.max_calls} "
                                  "allowed: give it a contiguous node set or allow more calls")
    # the units that run: each accelerator call, each host task on its own
    units = [(d, tuple(b)) for d, bs in blocks.items() for b in bs]
    units += [(placement[t], (t,)) for t in graph.topological_order if platform.by_name[placement[t]].is_host]
    unit_of = {t: k for k, (_, tasks) in enumerate(units) for t in tasks}
    finish: dict[int, float] = {}
    calls: list[Call] = []
    device_free: dict[str, float] = {}
    next_call = {d: 0 for d in blocks}
    remaining = list(range(len(units)))
    while remaining:
        progressed = False
        for k in list(remaining):
            d, tasks = units[k]
            host = platform.by_name[d].is_host
            if not host and blocks[d].index(list(tasks)) != next_call[d]:
                continue
            inside = set(tasks)
            producers = {u for t in tasks for u in graph.predecessors[t] if u not in inside}
            if any(unit_of[u] not in finish for u in producers):
                continue
            ready = max((finish[unit_of[u]] for u in producers), default=0.0)
            if host:
                start, duration = ready, problem.time(tasks[0], d)
            else:
                start, duration = max(ready, device_free.get(d, 0.0)), _call_duration(problem, d, tasks, producers)
                device_free[d] = start + duration
                next_call[d] += 1
            finish[k] = start + duration
            calls.append(Call(d, tasks, start, start + duration))
            remaining.remove(k)
            progressed = True
        if not progressed:
            raise ValidationError("the accelerator calls depend on each other in a cycle: give each accelerator "
                                  "node sets whose calls can run in order")
    return CallSchedule(tuple(calls), max((c.finish for c in calls), default=0.0))
