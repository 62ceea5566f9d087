"""The cheap bounds: critical path, spread work, and the work LP (fractional assignment, memory)."""

from __future__ import annotations

import math

import numpy as np
from scipy.optimize import linprog

from ..graph import longest_paths
from ..problem import Problem
from ._lp import _items, _limit, _Sparse, _unit


def _cheapest_move(problem: Problem, task: str, scale: float = 1.0) -> float:
    """The least time ``scale`` x the output of ``task`` takes between two different devices (0 on one device):
    what an edge whose ends lie on different devices costs a path at least."""
    graph, platform = problem.graph, problem.platform
    devices = [d.name for d in platform.devices]
    return min((platform.transfer_time(graph.by_id[task], a, c, scale) for a in devices for c in devices if a != c),
               default=0.0)


def _unit_costs(problem: Problem) -> dict[str, dict[str, float]]:
    """Cost of each task on each allowed device, for the objective's batch (kept with the problem: each LP
    bound scales its times by it, and GPT-3 on 26 devices takes 0.8 s to price)."""
    memo = problem.__dict__
    if "unit_costs" in memo:
        return memo["unit_costs"]
    n = problem.batch_size
    kind = problem.objective.kind
    out: dict[str, dict[str, float]] = {}
    for t in problem.graph.tasks:
        out[t.id] = {}
        for d in problem.allowed_devices[t.id]:
            if kind == "batch":
                # any part of b samples costs >= b * (best time per sample over sizes 1..n)
                out[t.id][d] = n * min(problem.time(t.id, d, b) / b for b in range(1, n + 1))
            else:
                out[t.id][d] = problem.time(t.id, d)
    memo["unit_costs"] = out
    return out


def critical_path_bound(problem: Problem) -> float:
    graph = problem.graph
    n = problem.batch_size
    cost = {}
    for t in graph.tasks:
        if problem.objective.kind == "batch":
            # a sample's path visits one part per task; a part of b >= 1 samples
            cost[t.id] = min(problem.time(t.id, d, b) for d in problem.allowed_devices[t.id] for b in range(1, n + 1))
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

    Not a bound for call-latency, where host CPU tasks run in parallel (0 then)."""
    if problem.objective.kind == "call-latency":
        return 0.0
    raw = _unit_costs(problem)
    unit = _unit(raw)
    costs = {t: {d: v * unit for d, v in row.items()} for t, row in raw.items()}
    groups = _items(problem)
    devices = [d.name for d in problem.platform.devices]
    gpipe = problem.is_training and problem.objective.kind == "pipeline" and problem.objective.training == "gpipe"
    variables = []  # (item index, device)
    for i, members in enumerate(groups):
        common = set(devices)
        for m in members:
            common &= set(costs[m])
        for d in devices:
            if d in common:
                variables.append((i, d))
    nx = len(variables)
    n_t = 2 if gpipe else 1  # T (or T_forward, T_backward)
    n_rows_dev = len(devices) * n_t
    a_ub = _Sparse()
    b_ub = np.zeros(n_rows_dev + len(devices))
    a_eq = _Sparse()
    dev_index = {d: k for k, d in enumerate(devices)}
    graph = problem.graph
    for j, (i, d) in enumerate(variables):
        a_eq.add(i, j, 1.0)
        k = dev_index[d]
        for m in groups[i]:
            phase = 1 if (gpipe and graph.by_id[m].phase == "backward") else 0
            a_ub.add(k * n_t + phase, j, costs[m][d])
        a_ub.add(n_rows_dev + k, j, sum(graph.by_id[m].memory_bytes for m in groups[i]))
    for k in range(len(devices)):
        for p in range(n_t):
            a_ub.add(k * n_t + p, nx + p, -1.0)
        cap = problem.platform.devices[k].memory_bytes
        b_ub[n_rows_dev + k] = cap if math.isfinite(cap) else 1e300
    c = np.zeros(nx + n_t)
    c[nx:] = 1.0
    res = linprog(c, A_ub=a_ub.matrix(len(b_ub), nx + n_t), b_ub=b_ub,
                  A_eq=a_eq.matrix(len(groups), nx + n_t), b_eq=np.ones(len(groups)),
                  bounds=[(0, None)] * (nx + n_t), method="highs", options=_limit(time_limit))
    if res.status != 0:
        return 0.0
    # the LP optimum is a valid bound only up to solver tolerance: shave a relative 1e-6
    return float(res.fun) / unit * (1 - 1e-6)
