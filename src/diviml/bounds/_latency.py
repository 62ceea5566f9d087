"""Latency bounds that couple a path with where its tasks can run: the memory path LP and the path-work LP."""

from __future__ import annotations

import math
from collections import Counter
from time import perf_counter

from ..problem import Problem
from ._lp import _KeyedLP, _least_makespan, _unit
from ._packing import packable_memory
from ._simple import _cheapest_move, _unit_costs

LIFT_WORTH = 1e-3  # the path-work LP is not built where it can lift the best bound by less than this share


def memory_path_bound(problem: Problem, time_limit: float | None = None) -> float:
    """Latency where memory decides where the long paths run: the longest path under a fractional placement
    that holds every device's memory. LP: ``x[t,k]`` the share of task t on devices of kind k, finish
    potentials ``e[v] >= e[u] + sum_k p[v,k] x[v,k]`` on every edge, ``C >= e[v]``, and per kind
    ``sum_t m_t x[t,k] <=`` what whole tasks can fill of the kind's memory (:mod:`._packing`) and
    ``sum_t p[t,k] x[t,k] <= C x`` its number of devices. Devices of one type are one kind holding their
    memory together (a relaxation: any plan maps onto it with the same times), so GPT-3 on 26 devices is an LP
    over 4 kinds.
    Transfers are free and devices run in parallel, so this is the critical path whenever the weights fit
    where they run fastest (0 then, and for other objectives)."""
    if problem.objective.kind != "latency":
        return 0.0
    graph, platform = problem.graph, problem.platform
    stop = None if time_limit is None else perf_counter() + time_limit
    kinds = {k: packable_memory(problem, [d.name for d in platform.devices if d.type == k],
                                None if stop is None else max(0.0, stop - perf_counter()))
             for k in sorted({d.type for d in platform.devices})}  # what whole tasks can fill of each kind's memory
    total = sum(t.memory_bytes for t in graph.tasks)
    if all(capacity >= total for capacity in kinds.values()):
        return 0.0  # memory keeps nothing off its fastest kind: the critical path says as much
    kind_of = {d.name: d.type for d in platform.devices}
    allowed = {t.id: sorted({kind_of[d] for d in problem.allowed_devices[t.id]}) for t in graph.tasks}
    unit = _unit(_unit_costs(problem))
    scale = max((t.memory_bytes for t in graph.tasks), default=0.0) or 1.0
    lp = _KeyedLP()
    for t in graph.topological_order:
        for k in allowed[t]:
            lp.col(("x", t, k))
        lp.col(("e", t))
    lp.col(("C",))

    # sum_k p[t,k] x[t,k], per task: times are by type, so any allowed device of the kind gives them
    own_time = {t: {("x", t, kind_of[d]): problem.time(t, d) * unit for d in problem.allowed_devices[t]}
                for t in graph.topological_order}
    for t in graph.topological_order:
        lp.eq({("x", t, k): 1.0 for k in allowed[t]})
        if not graph.predecessors[t]:
            lp.ub({("e", t): -1.0, **own_time[t]})
        if not graph.successors[t]:
            lp.ub({("e", t): 1.0, ("C",): -1.0})
    for n, (u, v) in enumerate(graph.edges):
        if stop is not None and n % 2000 == 0 and perf_counter() > stop:
            return 0.0  # building the LP alone outlasts its share: drop it
        lp.ub({("e", u): 1.0, ("e", v): -1.0, **own_time[v]})
    count = {k: sum(d.type == k for d in platform.devices) for k in kinds}
    for k in kinds:  # a kind's devices are busy at most C each
        work = {key: v for t in graph.topological_order for key, v in own_time[t].items() if key[2] == k}
        lp.ub({**work, ("C",): -float(count[k])})
    for k, capacity in kinds.items():  # with what the validator lets a device hold beyond its memory
        if math.isfinite(capacity):
            held = {("x", t.id, k): t.memory_bytes / scale for t in graph.tasks
                    if t.memory_bytes > 0 and lp.has(("x", t.id, k))}
            lp.ub(held, capacity / scale)
    return _least_makespan((lp, unit), stop) or 0.0


def path_work_bound(problem: Problem, time_limit: float | None = None, floor: float = 0.0) -> float:
    """LP coupling paths and work (latency): fractional assignment x, finish potentials e and makespan C with

    ``e[v] >= e[u] + c_min(u) * delta[u,v] + sum_d p[v,d] x[v,d]`` on every edge, ``C >= e[v]``, and each
    device's work ``sum_v p[v,d] x[v,d] <= C``; ``delta[u,v] >= x[u,d] - x[v,d]`` is the share of the edge that
    crosses devices and ``c_min(u)`` the cheapest transfer of u's output between two different devices.
    A job cannot sit on its fastest device for the path and be spread out for the work at once, so this is
    at least as strong as both simple bounds. Memory and co-location are left out (a relaxation).

    0 where it cannot lift ``floor`` (a bound known already) by more than :data:`LIFT_WORTH` of it:
    :func:`spread_point_value` is the value of one of its feasible points, so the LP's least makespan is at
    most that. On a chain of layers over identical fastest devices (GPT-3 over h100-nvlink-8) that point is the
    critical path, and the LP, which HiGHS did not solve in minutes there, is not built (Llama 2 70B there:
    the LP lifts the critical path by 0.016% in 18 s of a 60 s solve; the point allows 0.03%).
    """
    if problem.objective.kind != "latency":
        return 0.0
    graph, platform = problem.graph, problem.platform
    if time_limit is not None and path_work_seconds(len(graph.edges), len(graph), len(platform.devices)) > time_limit:
        return 0.0  # it would not finish in its share: dropped without being tried
    if floor > 0 and spread_point_value(problem) <= floor * (1 + LIFT_WORTH):
        return 0.0  # it cannot lift the bound, or by too little for its time
    stop = None if time_limit is None else perf_counter() + time_limit
    return _least_makespan(path_work_lp(problem, stop), stop) or 0.0  # not built or not proven in its share: dropped


def spread_point_value(problem: Problem) -> float:
    """The makespan of the path-work LP at one of its feasible points (seconds): every task spread evenly over
    the devices where it runs fastest (a task as fast everywhere, such as a view, over the devices most tasks
    run fastest on), the edges' crossing shares and the devices' work as the LP counts them. The LP's least
    makespan is at most this."""
    graph = problem.graph
    fastest: dict[str, frozenset[str]] = {}
    least: dict[str, float] = {}
    for t in graph.topological_order:
        times = {d: problem.time(t, d) for d in problem.allowed_devices[t]}
        least[t] = min(times.values())
        fastest[t] = frozenset(d for d, x in times.items() if x <= least[t])
    timed = Counter(fastest[t] for t in graph.topological_order if least[t] > 0)
    main = max(timed, key=timed.__getitem__) if timed else frozenset()
    spread = {t: main if main and main <= f else f for t, f in fastest.items()}
    share = {t: dict.fromkeys(devices, 1.0 / len(devices)) for t, devices in spread.items()}
    work: dict[str, float] = {}
    finish: dict[str, float] = {}
    for v in graph.topological_order:
        for d, x in share[v].items():
            work[d] = work.get(d, 0.0) + least[v] * x
        ready = 0.0
        for u in graph.predecessors[v]:
            crossing = sum(max(0.0, x - share[v].get(d, 0.0)) for d, x in share[u].items())
            ready = max(ready, finish[u] + (_cheapest_move(problem, u) * crossing if crossing > 1e-12 else 0.0))
        finish[v] = ready + least[v]
    return max(max(finish.values(), default=0.0), max(work.values(), default=0.0))


def path_work_lp(problem: Problem, stop: float | None) -> tuple[_KeyedLP, float] | None:
    """The path-work LP of :func:`path_work_bound` and its time unit (times in the LP are seconds x unit);
    None where building it passes ``stop`` (a :func:`time.perf_counter` time)."""
    graph, platform = problem.graph, problem.platform
    devices = [d.name for d in platform.devices]
    tasks = list(graph.topological_order)
    unit = _unit(_unit_costs(problem))
    lp = _KeyedLP()
    for t in tasks:  # columns in this order: x per task and device, e per task, delta per edge, C
        for d in problem.allowed_devices[t]:
            lp.col(("x", t, d))
        lp.col(("e", t))
    for u, v in graph.edges:
        lp.col(("delta", u, v))
    lp.col(("C",))

    def own_time(t: str) -> dict:  # sum_d p[t,d] x[t,d]
        return {("x", t, d): problem.time(t, d) * unit for d in problem.allowed_devices[t]}

    for t in tasks:
        lp.eq({("x", t, d): 1.0 for d in problem.allowed_devices[t]})
        lp.ub({("e", t): -1.0, **own_time(t)})  # e[t] >= own time (sources)
        lp.ub({("e", t): 1.0, ("C",): -1.0})  # C >= e[t]
    for k, (u, v) in enumerate(graph.edges):
        if stop is not None and k % 1000 == 0 and perf_counter() > stop:
            return None
        c_min = _cheapest_move(problem, u) * unit
        lp.ub({("e", u): 1.0, ("e", v): -1.0, ("delta", u, v): c_min, **own_time(v)})
        for d in devices:  # delta >= x[u,d] - x[v,d]
            row = {("delta", u, v): -1.0}
            if lp.has(("x", u, d)):
                row["x", u, d] = 1.0
            if lp.has(("x", v, d)):
                row["x", v, d] = row.get(("x", v, d), 0.0) - 1.0
            lp.ub(row)
    for d in devices:  # each device's work fits below C
        lp.ub({("C",): -1.0, **{("x", t, d): problem.time(t, d) * unit for t in tasks if lp.has(("x", t, d))}})
    return lp, unit


def path_work_seconds(edges: int, tasks: int, devices: int) -> float:
    """The time the path-work LP takes to build and solve, at worst, from its nonzeros (3 per edge and
    device, 2 per task and device): 3.6 s at 51,000 nonzeros, growing as their 1.3th power. Measured on the
    2-core development machine on layered DAGs of 100-3,000 tasks on 3, 9 and 26 devices (3,000 tasks on 26
    devices: 445,000 nonzeros, 57 s); GPT-3 on six servers (860,000) would take minutes."""
    return 3.6 * ((3 * edges + 2 * tasks) * devices / 51_318) ** 1.3
