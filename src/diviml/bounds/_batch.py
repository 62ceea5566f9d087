"""A bound for the batch objective that prices every part at its batched time on the path and on the work.

The simple bounds take a sample's path at parts of one sample and the work at the best rate per sample of
the whole batch; a GPU is far from both at once (a part of 8 takes about as long as a part of 1 where
kernels are launch-bound). Here a plan's choice of part sizes costs it on both sides together.
"""

from __future__ import annotations

import math
from dataclasses import replace
from time import perf_counter

from ..problem import Objective, Problem
from ._batch_rows import strengthen
from ._latency import memory_path_bound
from ._lp import _KeyedLP, _least_makespan, _unit
from ._packing import packable_memory
from ._segments import memory_segments_bound
from ._simple import _cheapest_move, _unit_costs, one_per_type

SINGLE_SIZES = 16  # part sizes priced one by one up to here; above, in ranges that double


def size_ranges(n: int) -> list[tuple[int, int]]:
    """Ranges ``(lo, hi)`` of part sizes that cover 1..n: each size alone up to :data:`SINGLE_SIZES`, then
    ranges that double, so that the LP stays small at large batches.

    >>> size_ranges(3)
    [(1, 1), (2, 2), (3, 3)]
    >>> size_ranges(40)[-3:]
    [(16, 16), (17, 32), (33, 40)]
    """
    out = [(b, b) for b in range(1, min(n, SINGLE_SIZES) + 1)]
    lo = SINGLE_SIZES + 1
    while lo <= n:
        hi = min(n, 2 * (lo - 1))
        out.append((lo, hi))
        lo = hi + 1
    return out


def batch_path_work_bound(problem: Problem, time_limit: float | None = None) -> float:
    """Batch makespan from an LP over how many samples of each task run on each device in parts of which size.

    ``u[t,d,r]``: samples of task t that run on device d in parts whose size lies in range r
    (:func:`size_ranges`), ``sum u[t,.,.] = n``; ``s[t,d] = sum_r u[t,d,r] / n`` is d's share of t. Then

    - every sample's path is at most the makespan, so the mean sample's is too: a sample in a part of b on d
      spends ``f(t,d,b)`` there, hence ``e[v] >= e[u] + sum f_min(v,d,r) u[v,d,r] / n + c_min(u) delta[u,v]``
      on every edge, ``C >= e[t]``, where ``delta[u,v] >= sum_d q[u,v,d]``, ``q >= s[u,d] - s[v,d]`` is
      at most the share of samples whose parts of u and v lie on different devices and ``c_min(u)`` the
      cheapest transfer of one sample of u's output between two devices;
    - each device runs its parts one at a time: ``sum f(t,d,b)/b u[t,d,r] <= C`` at the least rate of the range;
    - a device that holds any share of a task holds all its memory: ``sum_t m_t s[t,d] <=`` its memory.

    One part of the whole batch prices a task at its batched time on the path; many small parts shorten the
    path but add work: a plan cannot have both, which the simple bounds let it. Where every part size is priced
    alone (a batch of at most :data:`SINGLE_SIZES`), the LP is solved again with the rows of :mod:`._batch_rows`
    in half the time left, and the larger value kept. 0 for other objectives.
    """
    if problem.objective.kind != "batch":
        return 0.0
    if time_limit is not None and batch_path_work_seconds(problem) > time_limit:
        return 0.0  # it would not finish in its share: dropped without being tried
    stop = None if time_limit is None else perf_counter() + time_limit
    plain = _least_makespan(batch_path_work_lp(problem, stop), stop) or 0.0  # not built or not proven in its share: dropped
    if not plain:
        return 0.0
    stronger = None if stop is None else perf_counter() + (stop - perf_counter()) / 2  # the rest for the others
    return max(plain, _least_makespan(batch_path_work_lp(problem, stronger, strengthened=True), stronger) or 0.0)


def batch_path_work_seconds(problem: Problem) -> float:
    """The time the LP of :func:`batch_path_work_bound` takes to build and solve, at worst, from its nonzeros
    (about ``tasks (3 D R + 3) + edges (3 D R + 2 D + 4)`` for D devices and R size ranges): 16 s at 351,000,
    growing as their 2.6th power. Measured on the 2-core development machine on layered DAGs of 800 and
    2,000 tasks on paper-server at batch 8 (1.3 and 16 s; zoo graphs of 200-770 tasks took 0.1-0.5 s);
    GPT-3 (5,286 tasks) on 9 devices would take a quarter of an hour, so HEFT's batch plan waited a minute
    for it and then carried the work LP's bound."""
    graph = problem.graph
    d, r = len(problem.platform.devices), len(size_ranges(problem.batch_size))
    nonzeros = len(graph) * (3 * d * r + 3) + len(graph.edges) * (3 * d * r + 2 * d + 4)
    return 16.0 * (nonzeros / 351_064) ** 2.6


def batch_path_work_lp(problem: Problem, stop: float | None, strengthened: bool = False) -> tuple[_KeyedLP, float] | None:
    """The LP of :func:`batch_path_work_bound` and its time unit; None where building it passes ``stop``.
    ``strengthened``: with the rows of :mod:`._batch_rows` (None where they do not apply: a batch over
    :data:`SINGLE_SIZES`)."""
    graph, platform = problem.graph, problem.platform
    n = problem.batch_size
    ranges = size_ranges(n)
    devices = [d.name for d in platform.devices]
    unit = _unit(_unit_costs(problem))
    lp = _KeyedLP()
    path: dict[str, dict] = {}  # task -> its mean sample time, {column: coefficient}
    work: dict[str, dict] = {d: {} for d in devices}
    for t in graph.topological_order:
        path[t] = {}
        for d in problem.allowed_devices[t]:
            for r, (lo, hi) in enumerate(ranges):
                key = ("u", t, d, r)
                lp.col(key)
                sizes = problem.pricing_sizes(t, d, lo, hi)  # where the least time and time per sample lie
                times = [problem.time(t, d, b) * unit for b in sizes]
                path[t][key] = min(times) / n
                work[d][key] = min(f / b for f, b in zip(times, sizes))
        lp.col(("e", t))
    for u, v in graph.edges:
        lp.col(("delta", u, v))
        for d in devices:
            lp.col(("q", u, v, d))
    lp.col(("C",))

    for t in graph.topological_order:
        lp.eq({key: 1.0 / n for key in path[t]})
        lp.ub({("e", t): -1.0, **path[t]})  # e[t] >= its own mean time (sources)
        lp.ub({("e", t): 1.0, ("C",): -1.0})
    share = {t: {d: {("u", t, d, r): 1.0 / n for r in range(len(ranges))} for d in problem.allowed_devices[t]}
             for t in graph.topological_order}  # s[t,d] as {column: coefficient}
    if not _edge_rows(problem, lp, path, share, unit, stop):
        return None
    for d in devices:
        lp.ub({("C",): -1.0, **work[d]})
    _memory_rows(problem, lp, share, stop)
    if strengthened and not strengthen(problem, lp, unit, ranges, path, work, stop):
        return None
    return lp, unit


def _edge_rows(problem: Problem, lp: _KeyedLP, path: dict[str, dict], share: dict[str, dict[str, dict]],
               unit: float, stop: float | None) -> bool:
    """The mean sample's path along each edge, with the share of samples that change device (False: the
    time ran out while building)."""
    graph = problem.graph
    devices = [d.name for d in problem.platform.devices]
    for k, (u, v) in enumerate(graph.edges):
        if stop is not None and k % 1000 == 0 and perf_counter() > stop:
            return False
        c_min = _cheapest_move(problem, u, 1.0 / graph.batch_size) * unit  # one sample of u's output
        lp.ub({("e", u): 1.0, ("e", v): -1.0, ("delta", u, v): c_min, **path[v]})
        lp.ub({("delta", u, v): -1.0, **{("q", u, v, d): 1.0 for d in devices}})
        for d in devices:  # q[u,v,d] >= s[u,d] - s[v,d]
            row = {("q", u, v, d): -1.0}
            for key, x in share[u].get(d, {}).items():
                row[key] = x
            for key, x in share[v].get(d, {}).items():
                row[key] = -x
            lp.ub(row)
    return True


def _memory_rows(problem: Problem, lp: _KeyedLP, share: dict[str, dict[str, dict]], stop: float | None) -> None:
    """``sum_t m_t s[t,d] <=`` what whole tasks can fill of device d's memory (as the validator reads it:
    :func:`._packing.packable_memory`), where it could bind."""
    tasks = problem.graph.tasks
    total = sum(t.memory_bytes for t in tasks)
    scale = max((t.memory_bytes for t in tasks), default=0.0) or 1.0
    for device in problem.platform.devices:
        if not math.isfinite(device.memory_bytes) or device.memory_bytes >= total:
            continue
        capacity = packable_memory(problem, [device.name], None if stop is None else max(0.0, stop - perf_counter()))
        row: dict = {}
        for t in tasks:
            if t.memory_bytes > 0:
                for key, x in share[t.id].get(device.name, {}).items():
                    row[key] = x * t.memory_bytes / scale
        if row:
            lp.ub(row, capacity / scale)


def one_request_bounds(problem: Problem, time_limit: float | None = None) -> tuple[float, float]:
    """Batch objective: the memory path LP and the memory segments bound of one request's latency, which a
    batch's makespan is at least (0 where they do not hold or apply).

    Every sample's parts form a placement of the graph with one device per task, each device holding the
    memory of every task it runs a part of, so the sample's path is a latency schedule within the devices'
    memory; its tasks take at least their time at one sample, and its tensors at least one sample's transfer.
    That holds where the graph's times are for one request (batch size 1) and no task is faster on a larger
    part. These bounds see what the batch LPs do not: memory that spreads a model over many devices (GPT-3's
    BF16 prefill of 8 requests over six-servers: 1.105 s, the critical path, to 1.326 s)."""
    if problem.objective.kind != "batch" or problem.graph.batch_size != 1:
        return 0.0, 0.0
    stop = None if time_limit is None else perf_counter() + time_limit
    one = replace(problem, objective=Objective("latency"))
    path = memory_path_bound(one, time_limit)  # 0 at once where memory keeps nothing off the fastest devices
    segments = memory_segments_bound(one, None if stop is None else max(stop - perf_counter(), 0.0))
    if max(path, segments) > 0 and not _slower_on_larger_parts(problem):  # checked only where it matters
        return 0.0, 0.0
    return path, segments


def _slower_on_larger_parts(problem: Problem) -> bool:
    """Whether every task takes at least its one-sample time on every part size of the batch, on each type of
    device it may run on."""
    return all(problem.time(t, d, b) >= problem.time(t, d, 1)
               for t in problem.graph.topological_order for d in one_per_type(problem, t).values()
               for b in problem.pricing_sizes(t, d, min(2, problem.batch_size)))
