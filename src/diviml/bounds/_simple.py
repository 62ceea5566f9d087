"""The cheap bounds: critical path, spread work, and the work LP (fractional assignment, memory)."""

from __future__ import annotations

import math
from collections import Counter
from time import perf_counter

import numpy as np
from scipy.optimize import linprog

from ..graph import longest_paths
from ..problem import Problem
from ._lp import _items, _limit, _Sparse, _unit
from ._packing import packable_memory


def _cheapest_move(problem: Problem, task: str, scale: float = 1.0) -> float:
    """The least time ``scale`` x the output of ``task`` takes between two different devices (0 on one device):
    what an edge whose ends lie on different devices costs a path at least."""
    graph, platform = problem.graph, problem.platform
    devices = [d.name for d in platform.devices]
    return min((platform.transfer_time(graph.by_id[task], a, c, scale) for a in devices for c in devices if a != c),
               default=0.0)


def one_per_type(problem: Problem, task: str) -> dict[str, str]:
    """Device type -> one device of that type ``task`` may run on: times are per type, so asking one of
    each is asking all (six-servers: 26 devices, 4 types)."""
    by_name = problem.platform.by_name
    return {by_name[d].type: d for d in problem.allowed_devices[task]}


def _unit_costs(problem: Problem) -> dict[str, dict[str, float]]:
    """Cost of each task on each allowed device, for the objective's batch (kept with the problem: each LP
    bound scales its times by it, and GPT-3 on 26 devices takes 0.8 s to price)."""
    memo = problem.__dict__
    if "unit_costs" in memo:
        return memo["unit_costs"]
    n = problem.batch_size
    kind = problem.objective.kind
    by_name = problem.platform.by_name
    out: dict[str, dict[str, float]] = {}
    for t in problem.graph.tasks:
        # batch: any part of b samples costs >= b * (best time per sample over sizes 1..n)
        priced = {dt: n * min(problem.time(t.id, d, b) / b for b in problem.pricing_sizes(t.id, d)) if kind == "batch"
                  else problem.time(t.id, d) for dt, d in one_per_type(problem, t.id).items()}
        out[t.id] = {d: priced[by_name[d].type] for d in problem.allowed_devices[t.id]}
    memo["unit_costs"] = out
    return out


def critical_path_bound(problem: Problem) -> float:
    graph = problem.graph
    cost = {}
    for t in graph.tasks:
        if problem.objective.kind == "batch":
            # a sample's path visits one part per task; a part of b >= 1 samples
            cost[t.id] = min(problem.time(t.id, d, b) for d in one_per_type(problem, t.id).values()
                             for b in problem.pricing_sizes(t.id, d))
        else:
            cost[t.id] = min(problem.time(t.id, d) for d in problem.allowed_devices[t.id])
    if problem.objective.kind == "pipeline":
        return max(cost.values(), default=0.0)
    # latency, batch and call-latency: the longest path (host CPUs run in parallel, so no work bound
    # for call-latency beyond it)
    longest = longest_paths(graph.topological_order, graph.predecessors.__getitem__, cost.__getitem__)
    return max(longest.values(), default=0.0)


def spread_bound(problem: Problem) -> float:
    """Each task's cheapest cost (:func:`_unit_costs`) spread evenly over the devices: what the work LP
    relaxes further (no memory, no allowed devices per share); 0 for call-latency, as there."""
    if problem.objective.kind == "call-latency":
        return 0.0
    return sum(min(row.values(), default=0.0) for row in _unit_costs(problem).values()) / len(
        problem.platform.devices)


def work_bound(problem: Problem, time_limit: float | None = None) -> float:
    """min T: tasks fractionally spread over allowed devices, each device's work <= T, memory respected.

    Tasks (co-location groups contracted) alike in memory and in cost on every device are one column per
    device with their count as its total: the same LP (spreading a class's share evenly over its tasks
    changes no row), GPT-3's 5,289 tasks 15 classes (on two DGX A100 the task-level LP took 9 s). Devices
    alike in memory and in every class's cost are likewise one column per class, their rows summed
    (:func:`alike_devices`): averaging a solution over the permutations of such devices is a solution of
    the same value, so the LP has an optimum that shares their load evenly, which the summed rows allow
    (a random DAG of 3,000 tasks over six-servers: 26 devices are 4 kinds, 1.15 s of HiGHS became 0.2 s).
    Not a bound for call-latency, where host CPU tasks run in parallel (0 then)."""
    if problem.objective.kind == "call-latency":
        return 0.0
    stop = None if time_limit is None else perf_counter() + time_limit
    unit = _unit(_unit_costs(problem))
    n_t = 2 if _gpipe(problem) else 1  # T (or T_forward, T_backward)
    count = work_classes(problem)
    classes = list(count)
    kinds = alike_devices(problem)
    variables = [(i, g) for i, (_, costs) in enumerate(classes) for g, members in enumerate(kinds)
                 if costs[members[0]] is not None]
    nx = len(variables)
    n_rows_dev = len(kinds) * n_t
    a_ub = _Sparse()
    b_ub = np.zeros(n_rows_dev + len(kinds))
    a_eq = _Sparse()
    for j, (i, g) in enumerate(variables):
        memory, costs = classes[i]
        a_eq.add(i, j, 1.0)
        for phase in range(n_t):
            a_ub.add(g * n_t + phase, j, costs[kinds[g][0]][phase] * unit)
        a_ub.add(n_rows_dev + g, j, memory)
    for g, members in enumerate(kinds):
        for p in range(n_t):
            a_ub.add(g * n_t + p, nx + p, -float(len(members)))
        cap = packable_memory(problem, [problem.platform.devices[j].name for j in members],
                              None if stop is None else max(0.0, stop - perf_counter()))
        b_ub[n_rows_dev + g] = cap if math.isfinite(cap) else 1e300
    c = np.zeros(nx + n_t)
    c[nx:] = 1.0
    res = linprog(c, A_ub=a_ub.matrix(len(b_ub), nx + n_t), b_ub=b_ub,
                  A_eq=a_eq.matrix(len(classes), nx + n_t), b_eq=np.array([count[key] for key in classes], dtype=float),
                  bounds=[(0, None)] * (nx + n_t), method="highs",
                  options=_limit(None if stop is None else max(0.0, stop - perf_counter())))
    if res.status != 0:
        return 0.0
    # the LP optimum is a valid bound only up to solver tolerance: shave a relative 1e-6
    return float(res.fun) / unit * (1 - 1e-6)


def alike_devices(problem: Problem) -> tuple[tuple[int, ...], ...]:
    """Indices of the platform's devices grouped by (memory, cost of every :func:`work_classes` class there):
    devices the work LP cannot tell apart, in the order of their first member."""
    groups: dict[tuple, list[int]] = {}
    classes = list(work_classes(problem))
    for k, device in enumerate(problem.platform.devices):
        key = (device.memory_bytes, tuple(costs[k] for _, costs in classes))
        groups.setdefault(key, []).append(k)
    return tuple(tuple(members) for members in groups.values())


def work_classes(problem: Problem) -> Counter:
    """Items (co-location groups contracted) counted by (memory, per device: cost per phase, None where a
    member may not run there), costs as :func:`_unit_costs` gives them; phases are forward and backward for
    GPipe's two maxima, else one. Kept with the problem (the work LP and the work MILP both read it)."""
    memo = problem.__dict__
    if "work_classes" not in memo:
        memo["work_classes"] = Counter(work_class_of(problem).values())
    return memo["work_classes"]


def work_class_of(problem: Problem) -> dict[tuple[str, ...], tuple]:
    """Each item's class in :func:`work_classes` (kept with the problem)."""
    memo = problem.__dict__
    if "work_class_of" in memo:
        return memo["work_class_of"]
    graph, raw = problem.graph, _unit_costs(problem)
    phases = 2 if _gpipe(problem) else 1
    out = {}
    for members in _items(problem):
        costs: list[tuple[float, ...] | None] = []
        for d in problem.platform.devices:
            if all(d.name in raw[m] for m in members):
                per_phase = [0.0] * phases
                for m in members:
                    per_phase[1 if phases == 2 and graph.by_id[m].phase == "backward" else 0] += raw[m][d.name]
                costs.append(tuple(per_phase))
            else:
                costs.append(None)
        out[members] = (sum(graph.by_id[m].memory_bytes for m in members), tuple(costs))
    memo["work_class_of"] = out
    return out


def _gpipe(problem: Problem) -> bool:
    """GPipe's objective: the largest forward load plus the largest backward one."""
    return problem.is_training and problem.objective.kind == "pipeline" and problem.objective.training == "gpipe"
