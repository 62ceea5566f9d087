"""The work bound with whole tasks: the work LP's assignment made integer, identical tasks counted together.

The work LP lets a 2.4 GB weight matrix be split across devices to fill each one's memory to the byte; a plan
cannot. Tasks (co-location groups contracted) with the same memory and the same time on every device are one
class, so GPT-3's 5,289 tasks are 15 classes and the integer program has a count per class and device:

    n[k, d] integer in 0..|k|,  sum_d n[k, d] = |k|,
    sum_k p[k, d] n[k, d] <= T   (GPipe: per phase, T_f + T_b),   sum_k m_k n[k, d] <= memory of d,

minimise T; loads of identical devices ordered (any plan permutes onto that). HiGHS's dual bound at its time
limit is a bound; transfers are left out, so it holds for latency (a device's work is within the makespan)
and the pipeline's loads (which add hops), not for batches (a task is shared out there) or calls.
"""

from __future__ import annotations

import math
from collections import Counter

import numpy as np
from scipy.optimize import Bounds, LinearConstraint, milp
from scipy.sparse import lil_matrix

from ..native import native_output_discarded
from ..problem import Problem
from ._lp import _items, _tolerated, _unit
from ._simple import _gpipe, _unit_costs, work_classes

__all__ = ["integer_work_bound", "integer_work_counts", "may_lift"]

MAX_COLUMNS = 20_000  # class-device counts: beyond, the MILP is not worth its time (the LP stands)
# branch-and-bound nodes: most of the lift is the root's (GPT-3 on six servers: 1.5802 s at the root, 1.5809 at
# 1,000 nodes, 1.5860 proven in 10 s; bert24's layers 4.6%, 4.7%, 7.1%), and a node costs up to 10 ms
NODE_LIMIT = 50
FEW_PER_DEVICE = 8  # tasks per device: below, whole tasks can unbalance the loads


def integer_work_bound(problem: Problem, time_limit: float | None = None) -> float:
    """min T over whole-task assignments, each device's work <= T and memory held, 0 where the objective
    shares tasks out (batch) or runs host tasks side by side (call-latency), or where the program is too
    large or HiGHS proves nothing in ``time_limit``.

    >>> from diviml import Device, Objective, Platform, Problem, Task, TaskGraph
    >>> tasks = [Task(name, {"gpu": 2.0}, memory_bytes=6e9) for name in "abc"]
    >>> gpus = Platform((Device("g0", "gpu", 16e9), Device("g1", "gpu", 16e9)))
    >>> integer_work_bound(Problem(TaskGraph.create(tasks, []), gpus, Objective("pipeline"))) > 3.99
    True
    """
    if problem.objective.kind not in ("latency", "pipeline") or (time_limit is not None and time_limit <= 0):
        return 0.0
    n_t = 2 if _gpipe(problem) else 1
    devices = problem.platform.devices
    count = work_classes(problem)
    columns = [(k, j) for k, (_, times) in enumerate(count) for j in range(len(devices)) if times[j] is not None]
    if len(columns) > MAX_COLUMNS:
        return 0.0
    unit = _unit(_unit_costs(problem))
    return _solve(problem, count, columns, n_t, unit, time_limit)


def integer_work_counts(problem: Problem) -> dict[tuple, tuple[int, ...]] | None:
    """The best whole-task assignment the last work MILP solved for ``problem`` found: per class of
    :func:`~._simple.work_classes`, how many of its items each device runs (platform order); None where none
    was solved or it found none. The pipeline solvers make a split of it (:mod:`diviml.solvers.pipeline.counts`)."""
    return problem.__dict__.get("work_counts")


def may_lift(problem: Problem, work_lp: float, best: float) -> bool:
    """Whether the work MILP is worth its time beside a best bound of ``best`` (a rule of thumb for the time,
    never for the bound): whole tasks lift the work LP by about the largest task's time, so not where that
    cannot reach ``best``; and only where a device has few tasks to balance its load with, memory can keep a
    task off a device (a knapsack the LP fills to the byte) or tasks are alike (a model of repeated layers:
    a small program). The Tarnawski et al. layer graphs: bert24's 32 layers on 7 devices lifted 4.6%, resnet50's
    177 none."""
    largest = max((max(row.values(), default=0.0) for row in _unit_costs(problem).values()), default=0.0)
    if work_lp <= 0 or work_lp + largest <= best:
        return False
    items = _items(problem)
    weights = sum(t.memory_bytes for t in problem.graph.tasks)
    return (len(items) <= FEW_PER_DEVICE * len(problem.platform.devices)
            or any(d.memory_bytes < weights for d in problem.platform.devices)
            or len(work_classes(problem)) * 2 <= len(items))


def _solve(problem: Problem, count: Counter, columns: list[tuple[int, int]], n_t: int, unit: float,
           time_limit: float | None) -> float:
    """Build the counts' MILP (rows: one per class, a load row per device and phase, a memory row per
    device, a load order row per pair of identical neighbours) and return its dual bound, shaved for the
    solver's tolerance."""
    classes = list(count)
    devices = problem.platform.devices
    n_x = len(columns)
    index = {col: i for i, col in enumerate(columns)}
    load_row = {(j, p): len(classes) + j * n_t + p for j in range(len(devices)) for p in range(n_t)}
    memory_row = {j: len(classes) + len(devices) * n_t + j for j in range(len(devices))}
    twins = [(j, j + 1) for j in range(len(devices) - 1) if _identical(devices[j], devices[j + 1], classes, j)]
    n_rows = len(classes) + len(devices) * (n_t + 1) + len(twins)
    a = lil_matrix((n_rows, n_x + n_t))
    low, high = np.full(n_rows, -np.inf), np.zeros(n_rows)
    scale = max((key[0] for key in classes), default=0.0) or 1.0
    for (k, j), i in index.items():
        memory, times = classes[k]
        a[k, i] = 1.0
        for p in range(n_t):
            a[load_row[j, p], i] = times[j][p] * unit
        a[memory_row[j], i] = memory / scale
    for k, key in enumerate(classes):
        low[k] = high[k] = count[key]
    for (j, p), r in load_row.items():
        a[r, n_x + p] = -1.0
    for j, d in enumerate(devices):
        high[memory_row[j]] = _tolerated(d.memory_bytes) / scale if math.isfinite(d.memory_bytes) else np.inf
    for t, (j, j2) in enumerate(twins):  # the first of two identical devices carries the larger load
        r = len(classes) + len(devices) * (n_t + 1) + t
        for k in range(len(classes)):
            if (k, j) in index:
                a[r, index[k, j]] = -sum(classes[k][1][j]) * unit
                a[r, index[k, j2]] = sum(classes[k][1][j2]) * unit
    upper = np.array([count[classes[k]] for k, _ in columns] + [np.inf] * n_t, dtype=float)
    cost = np.concatenate([np.zeros(n_x), np.ones(n_t)])
    integrality = np.concatenate([np.ones(n_x), np.zeros(n_t)])
    # presolve off: with it, HiGHS 1.12 once proved a (warm-started) pipeline IP "optimal" above its optimum
    options: dict[str, float | bool] = {"disp": False, "presolve": False, "node_limit": NODE_LIMIT}
    if time_limit is not None:
        options["time_limit"] = max(float(time_limit), 0.0)
    with native_output_discarded():  # HiGHS's MILP prints a line now and then as it mends a presolved solution
        res = milp(cost, constraints=LinearConstraint(a.tocsr(), low, high), integrality=integrality,
                   bounds=Bounds(np.zeros(n_x + n_t), upper), options=options)
    if res.x is not None:
        counts = {key: [0] * len(devices) for key in classes}
        for (k, j), i in index.items():
            counts[classes[k]][j] = int(round(res.x[i]))
        problem.__dict__["work_counts"] = {key: tuple(n) for key, n in counts.items()}
    bound = getattr(res, "mip_dual_bound", None)  # proven at the limit too
    if bound is None or not np.isfinite(bound):
        return 0.0
    return max(float(bound), 0.0) / unit * (1 - 1e-6)


def _identical(a, b, classes: list[tuple], j: int) -> bool:
    """Two devices the program cannot tell apart: same memory, same times for every class."""
    return a.memory_bytes == b.memory_bytes and all(key[1][j] == key[1][j + 1] for key in classes)
