"""Baseline: PipeDream-style partitioning of the linearised graph (Narayanan et al., SOSP 2019).

The co-location classes are put in one topological order and the chain is cut into consecutive stages,
optimally by dynamic programming over (prefix, accelerators used, CPUs used). A segment of a topological
order is convex, so the split is contiguous; it ignores the graph's branching, which is what the exact
DP and IP improve on.
"""

from __future__ import annotations

import math

import networkx as nx
import numpy as np

from ...errors import InfeasibleError
from ...problem import Problem
from ..engines.plans import Stopwatch, make_plan
from ..pipeline.common import Contracted, device_classes
from ..pipeline.evaluate import ClassEvaluator

NAME = "pipedream"


def solve(problem: Problem, *, time_limit: float = 60.0, seed: int = 0):
    watch = Stopwatch(time_limit)
    contracted = Contracted(problem)
    ev = ClassEvaluator(problem, contracted)
    g = nx.DiGraph()
    g.add_nodes_from(range(contracted.num_classes))
    g.add_edges_from(contracted.forward_edges)
    order = list(nx.lexicographical_topological_sort(g))
    n = len(order)
    dclasses = device_classes(problem)
    dev_index = {d: i for i, d in enumerate(ev.devices)}
    probe = [dev_index[dc.devices[0]] for dc in dclasses]
    # load[i][j][d]: segment order[i:j] on device class d
    seg = {}
    for i in range(n):
        for j in range(i + 1, n + 1):
            members = order[i:j]
            for d, p in enumerate(probe):
                seg[i, j, d] = _segment_load(ev, members, p)
        if watch.expired:
            raise InfeasibleError("the chain DP ran out of time: raise the time limit")
    counts = [len(dc.devices) for dc in dclasses]
    states = list(np.ndindex(*[c + 1 for c in counts]))
    best = {(0, s): (0.0, None) for s in states}
    for j in range(1, n + 1):
        for s in states:
            value, arg = math.inf, None
            for i in range(j):
                for d in range(len(dclasses)):
                    if s[d] == 0:
                        continue
                    prev = tuple(s[k] - (k == d) for k in range(len(s)))
                    v = max(best[i, prev][0], seg[i, j, d])
                    if v < value:
                        value, arg = v, (i, prev, d)
            best[j, s] = (value, arg)
    top = tuple(counts)
    if not math.isfinite(best[n, top][0]):
        raise InfeasibleError("no chain split fits the memory limits and device restrictions")
    dev = np.zeros(contracted.num_classes, dtype=np.int64)
    used = [0] * len(dclasses)
    j, s = n, top
    while j > 0:
        i, prev, d = best[j, s][1]
        device = dev_index[dclasses[d].devices[used[d]]]
        used[d] += 1
        for c in order[i:j]:
            dev[c] = device
        j, s = i, prev
    return make_plan(problem, placement=ev.placement(dev), solver=NAME, status="feasible", watch=watch)


def _segment_load(ev: ClassEvaluator, members: list[int], device: int) -> float:
    """Load of a device of that index holding exactly ``members`` (inf if not allowed or over memory)."""
    if ev.size[members].sum() > ev.capacity[device] or not np.isfinite(ev.time[members, device]).all():
        return math.inf
    dev = np.full(len(ev.size), -1, dtype=np.int64)
    dev[members] = device
    # everything else on a virtual "elsewhere" device: evaluate only this device's load
    other = (device + 1) % len(ev.devices)
    full = np.where(dev >= 0, dev, other)
    return float(ev.loads(full)[device])
