"""The memory whole tasks can fill: a group of devices' capacity, less what no set of whole tasks can use.

The bounds that pool a kind's memory (the memory path LP, the memory segments bound, the work and hop work
LPs) let its devices hold any share of a task, so their summed bytes fill to the byte. A plan puts whole tasks
on each device, and the bytes left over on each are lost. GPT-3 FP32 over 8 H100 (80 GB each) in tasks of
0.604 and 2.416 GB: each H100 holds 132 x 0.604 GB = 79.73 GB and the 19 MB of layer norms and 400 MB of
small tensors fill only part of what is left, so the 8 hold at most 638.47 GB of weights, not 640: 0.2 layers
fewer, which the prefill pays on the CPU (the memory segments bound 44.57 s -> 45.52 s against a plan of
45.69 s).

So each group's capacity is the most memory a placement of whole items (co-location groups together, each
where it may run) fits within its devices' capacities, as the validator tolerates them: a multiple knapsack
over the items' distinct sizes (a count per size and device), solved by HiGHS. Its dual bound is an upper
bound on what any plan holds there, so the pooled rows stay relaxations however early it stops. It is
tried only where first fit, the largest items first, leaves some item out and over :data:`CLOSE` of the
memory empty: it could lift nothing more there.
"""

from __future__ import annotations

import math
from collections import Counter
from typing import Iterable

import numpy as np
from scipy.optimize import Bounds, LinearConstraint, milp
from scipy.sparse import lil_matrix

from ..native import native_output_discarded
from ..problem import Problem
from ._lp import _items, _tolerated

__all__ = ["packable_memory"]

LIMIT_S = 0.5  # per group of devices, at most (GPT-3 over six-servers: 0.05 s for each kind of GPU)
MAX_COLUMNS = 20_000  # distinct sizes x devices: beyond, the knapsack is not tried (the summed capacity stands)
CLOSE = 1e-3  # first fit within this share of the capacity: the knapsack is not tried (a random DAG's 3,000
# distinct sizes on one V100: 1.2 s of HiGHS for nothing; GPT-3 over 8 H100s leaves 0.25% unfilled by first fit)
GAP = 1e-6  # the knapsack stops this close to its best packing (only its dual bound is used: it stays valid)
MARGIN = 1e-6  # of the largest capacity, per device: HiGHS's tolerances, so the bound is never cut below a plan


def packable_memory(problem: Problem, devices: Iterable[str], time_limit: float | None = None) -> float:
    """The most bytes whole items can occupy on ``devices`` together (their tolerated capacities summed where
    memory does not bind, or the knapsack cannot be solved in ``time_limit``, at most :data:`LIMIT_S`; inf
    where one is unbounded). Kept with the problem per group of devices of the same types and memory (a task's
    allowed devices depend on nothing else).

    >>> from diviml import Device, Objective, Platform, Problem, Task, TaskGraph
    >>> tasks = [Task(name, {"gpu": 1.0, "cpu": 9.0}, memory_bytes=6e9) for name in "abc"]
    >>> platform = Platform((Device("g0", "gpu", 10e9), Device("g1", "gpu", 10e9), Device("c", "cpu")))
    >>> problem = Problem(TaskGraph.create(tasks, []), platform, Objective("latency"))
    >>> round(packable_memory(problem, ["g0", "g1"]) / 1e9, 3)  # two 6 GB tasks, not 20 GB
    12.0
    """
    names = tuple(sorted(devices))
    by_name = problem.platform.by_name
    key = tuple(sorted((by_name[d].type, by_name[d].memory_bytes) for d in names))  # what a task's devices hang on
    memo = problem.__dict__.setdefault("packable_memory", {})
    if key in memo:
        return memo[key]
    limit = LIMIT_S if time_limit is None else min(time_limit, LIMIT_S)
    value, final = _packable(problem, names, limit)
    if final or limit >= LIMIT_S:  # not cut short by a caller's time: a later call would find no more
        memo[key] = value
    return value


def _packable(problem: Problem, names: tuple[str, ...], time_limit: float) -> tuple[float, bool]:
    """(:func:`packable_memory`, whether more time would not change it)."""
    capacity = [_tolerated(problem.platform.by_name[d].memory_bytes) for d in names]
    total = math.fsum(capacity)
    if not math.isfinite(total):
        return math.inf, True
    sizes = _sizes(problem, names)
    filled, everything = _first_fit(sizes, capacity)
    if everything:
        return total, True  # every item fits at once: the pooled row cannot bind
    if filled >= total * (1 - CLOSE):
        return total, True  # first fit leaves next to nothing: the knapsack could not lift a bound by more
    columns = [(k, j) for k, (_, where) in enumerate(sizes) for j in where]
    if not columns or len(columns) > MAX_COLUMNS:
        return total, True
    if time_limit <= 0:
        return total, False
    unit = max(capacity)
    keys = list(sizes)
    rows = lil_matrix((len(names) + len(keys), len(columns)))
    value = np.zeros(len(columns))
    for c, (k, j) in enumerate(columns):
        value[c] = keys[k][0] / unit
        rows[j, c] = value[c]  # device j holds at most its capacity
        rows[len(names) + k, c] = 1.0  # a size is placed at most as often as items have it
    high = np.array([cap / unit for cap in capacity] + [float(sizes[key]) for key in keys])
    with native_output_discarded():  # HiGHS prints a line now and then as it mends a presolved solution
        result = milp(-value, constraints=LinearConstraint(rows.tocsr(), -np.inf, high),
                      integrality=np.ones(len(columns)), bounds=Bounds(0, np.inf),
                      options={"time_limit": time_limit, "mip_rel_gap": GAP})
    dual = getattr(result, "mip_dual_bound", None)
    if dual is None or not math.isfinite(dual):
        return total, result.status == 0
    return min(total, (-dual + MARGIN * len(names)) * unit), result.status == 0


def _sizes(problem: Problem, names: tuple[str, ...]) -> Counter:
    """Items with memory counted by (bytes, indices of the devices in ``names`` they may run on)."""
    graph = problem.graph
    sizes: Counter = Counter()
    for members in _items(problem):
        size = math.fsum(graph.by_id[m].memory_bytes for m in members)
        where = tuple(j for j, d in enumerate(names) if all(d in problem.allowed_devices[m] for m in members))
        if size > 0 and where:
            sizes[(size, where)] += 1
    return sizes


def _first_fit(sizes: Counter, capacity: list[float]) -> tuple[float, bool]:
    """(bytes placed, whether every item was) by first fit, the largest items first, over the devices."""
    free = list(capacity)
    everything = True
    for (size, where), n in sorted(sizes.items(), key=lambda item: -item[0][0]):
        for _ in range(n):
            j = next((j for j in where if free[j] >= size), None)
            if j is None:
                everything = False
                break  # no device has room for another item of this size
            free[j] -= size
    return math.fsum(capacity) - math.fsum(free), everything
