"""Baseline: HEFT (Topcuoglu, Hariri and Wu, 2002), memory-aware and co-location-aware.

Tasks in decreasing upward rank (mean time over allowed devices plus mean transfer over distinct device
pairs), each to the device of earliest finish time, inserted into the earliest idle gap that fits.
For the ``batch`` objective every task runs the whole batch on one device (no data parallelism).
"""

from __future__ import annotations

import bisect
from itertools import permutations
from statistics import fmean

from ..errors import InfeasibleError
from ..problem import Problem
from ._common import Stopwatch, make_plan

NAME = "heft"


def upward_ranks(problem: Problem) -> dict[str, float]:
    graph, platform = problem.graph, problem.platform
    n = problem.batch_size
    scale = n / graph.batch_size
    pairs = list(permutations(platform.devices, 2))
    rank: dict[str, float] = {}
    for t in reversed(graph.topological_order):
        task = graph.by_id[t]
        mean_time = fmean(problem.time(t, d, n) for d in problem.allowed_devices[t])
        mean_comm = fmean(platform.transfer_time(task, a.name, c.name, scale) for a, c in pairs) if pairs else 0.0
        rank[t] = mean_time + max((mean_comm + rank[s] for s in graph.successors[t]), default=0.0)
    return rank


def heft_schedule(problem: Problem, rank: dict[str, float] | None = None
                  ) -> tuple[dict[str, str], dict[str, float], float]:
    """(placement, start times, makespan) of HEFT."""
    graph, platform = problem.graph, problem.platform
    n = problem.batch_size
    scale = n / graph.batch_size
    rank = upward_ranks(problem) if rank is None else rank
    topo = {t: i for i, t in enumerate(graph.topological_order)}
    busy: dict[str, list[tuple[float, float]]] = {d.name: [] for d in platform.devices}  # sorted (start, end)
    memory_left = {d.name: d.memory_bytes for d in platform.devices}
    group_device: dict[str, str] = {}
    group_memory = {g: sum(graph.by_id[m].memory_bytes for m in ms) for g, ms in problem.colocation_groups.items()}
    placement: dict[str, str] = {}
    start: dict[str, float] = {}
    finish: dict[str, float] = {}
    for t in sorted(graph.tasks, key=lambda x: (-rank[x.id], topo[x.id])):
        group = t.colocation if t.colocation in problem.colocation_groups else None
        if group in group_device:
            options = [group_device[group]]
        else:
            need = group_memory[group] if group else t.memory_bytes
            options = [d for d in problem.allowed_devices[t.id] if memory_left[d] >= need
                       and (group is None or all(d in problem.allowed_devices[m] for m in problem.colocation_groups[group]))]
        if not options:
            raise InfeasibleError(f"heft could not place task {t.id!r} within the devices' memory: try the "
                                  "'greedy' solver or raise the memory limit")
        best = None
        for d in options:
            ready = max((finish[u] + platform.transfer_time(graph.by_id[u], placement[u], d, scale)
                         for u in graph.predecessors[t.id]), default=0.0)
            duration = problem.time(t.id, d, n)
            est = _earliest_gap(busy[d], ready, duration)
            eft = est + duration
            if best is None or eft < best[0] - 1e-12:
                best = (eft, est, d)
        eft, est, d = best
        placement[t.id], start[t.id], finish[t.id] = d, est, eft
        bisect.insort(busy[d], (est, eft))
        if group is None:
            memory_left[d] -= t.memory_bytes
        elif group not in group_device:
            group_device[group] = d
            memory_left[d] -= group_memory[group]
    return placement, start, max(finish.values(), default=0.0)


def _earliest_gap(slots: list[tuple[float, float]], ready: float, duration: float) -> float:
    """Earliest start >= ready where [start, start+duration) fits between busy slots."""
    prev_end = 0.0
    for s, e in slots:
        begin = max(prev_end, ready)
        if begin + duration <= s:
            return begin
        prev_end = max(prev_end, e)
    return max(prev_end, ready)


def solve(problem: Problem, *, time_limit: float = 60.0, seed: int = 0):
    watch = Stopwatch(time_limit)
    placement, start, makespan = heft_schedule(problem)
    topo = {t: i for i, t in enumerate(problem.graph.topological_order)}
    order: dict[str, list[tuple[str, int]]] = {d.name: [] for d in problem.platform.devices}
    for t in sorted(start, key=lambda t: (start[t], topo[t])):
        order[placement[t]].append((t, 0))
    plan = make_plan(problem, placement=placement, order=order, solver=NAME, status="feasible", watch=watch,
                     stats={"heft_makespan": makespan})
    return plan
