"""Baseline: PipeDream-style partitioning of the linearised graph (Narayanan et al., SOSP 2019).

The co-location classes are put in one topological order and the chain is cut into consecutive stages,
optimally by dynamic programming over (prefix, devices of each class used). A segment of a topological
order is convex, so the split is contiguous; it ignores the graph's branching, which is what the exact
DP and IP improve on. A segment's load is kept up to date as the segment grows by one class (its compute,
and the hops of the tensors that enter or leave it), so the loads of all segments take the time of the
graph's edges per segment end, not of the whole graph per segment. Where the DP does not finish in the
time, the plan is the greedy contiguous fill's, with status ``timeout``.
"""

from __future__ import annotations

import math

import numpy as np

from ...errors import InfeasibleError
from ...problem import Problem
from ..engines.plans import Stopwatch, make_plan
from ..pipeline.common import Contracted, DeviceClass, device_classes
from ..pipeline.evaluate import ClassEvaluator

NAME = "pipedream"


class _OutOfTime(Exception):
    pass


def solve(problem: Problem, *, time_limit: float = 60.0, seed: int = 0):
    watch = Stopwatch(time_limit)
    ev = ClassEvaluator(problem, Contracted(problem))
    ev.require_placeable()
    dclasses = device_classes(problem)
    try:  # a fifth of the time kept for the fallback (the greedy fill of GPT-3: about a second)
        dev = _chain_split(ev, dclasses, Stopwatch(0.8 * watch.left))
    except _OutOfTime:
        from ..pipeline.dp import _greedy_contiguous
        fallback = _greedy_contiguous(problem, Stopwatch(max(watch.left, 0.5)))
        if fallback is None:
            raise InfeasibleError("the chain DP ran out of time and the greedy contiguous fill found no split "
                                  "within memory: raise the time limit or use --solver ip") from None
        return make_plan(problem, fallback[2], solver=NAME, status="timeout", watch=watch, notes=[
            f"the chain DP ran out of time ({ev.contracted.num_classes} classes): this is the greedy contiguous "
            "plan; raise the time limit"])
    if dev is None:
        raise InfeasibleError("no chain split fits the memory limits and device restrictions")
    return make_plan(problem, placement=ev.placement(dev), solver=NAME, status="feasible", watch=watch)


def _chain_split(ev: ClassEvaluator, dclasses: list[DeviceClass], watch: Stopwatch) -> np.ndarray | None:
    """Device index per class of the best split of the topological order into consecutive segments, at most
    as many per device class as it has devices; None where none fits."""
    order = ev.contracted.topological_order
    n = len(order)
    counts = [len(dc.devices) for dc in dclasses]
    states = list(np.ndindex(*[c + 1 for c in counts]))
    state_index = {s: k for k, s in enumerate(states)}
    best = np.full((n + 1, len(states)), math.inf)
    best[0, :] = 0.0
    arg = np.zeros((n + 1, len(states), 2), dtype=np.int64)  # (segment start, device class)
    probe = [ev.devices.index(dc.devices[0]) for dc in dclasses]
    segments = _SegmentLoads(ev)
    for j in range(1, n + 1):
        column = np.array([segments.ending_at(order, j, p) for p in probe]).T  # (start, device class)
        for k, s in enumerate(states):
            for d in range(len(dclasses)):
                if s[d] == 0:
                    continue
                prev = state_index[tuple(s[x] - (x == d) for x in range(len(s)))]
                values = np.maximum(best[:j, prev], column[:, d])
                i = int(np.argmin(values))
                if values[i] < best[j, k]:
                    best[j, k], arg[j, k] = values[i], (i, d)
        if watch.expired:
            raise _OutOfTime
    top = state_index[tuple(counts)]
    if not math.isfinite(best[n, top]):
        return None
    dev = np.zeros(len(ev.size), dtype=np.int64)
    used = [0] * len(dclasses)
    j, k = n, top
    while j > 0:
        i, d = (int(x) for x in arg[j, k])
        device = ev.devices.index(dclasses[d].devices[used[d]])
        used[d] += 1
        for c in order[i:j]:
            dev[c] = device
        j, k = i, state_index[tuple(x - (y == d) for y, x in enumerate(states[k]))]
    return dev


class _SegmentLoads:
    """Loads of segments ``order[i:j]`` on one device, as :meth:`ClassEvaluator.loads` gives them with every
    other class elsewhere: compute, plus each producer's hop out where a consumer lies outside, plus each
    outside producer's hop in where a consumer lies inside; inf past the device's memory or where it may not
    run a class."""

    def __init__(self, ev: ClassEvaluator) -> None:
        self.ev = ev
        producers = ev.contracted.producers
        self.producer_class = [pc for _, pc, _ in producers]
        self.consumers = [len(cs) for _, _, cs in producers]
        self.produced: list[list[int]] = [[] for _ in range(len(ev.size))]
        self.consumed: list[list[int]] = [[] for _ in range(len(ev.size))]
        for k, (_, pc, cs) in enumerate(producers):
            self.produced[pc].append(k)
            for c in cs:
                self.consumed[c].append(k)
        self.hop = ev._edges[3]

    def ending_at(self, order: list[int], j: int, device: int) -> list[float]:
        """Loads of ``order[i:j]`` for i = 0 .. j-1, grown from the end one class at a time."""
        ev, hop = self.ev, self.hop[:, device]
        inside = np.zeros(len(ev.size), dtype=bool)
        count_in = np.zeros(len(self.consumers), dtype=np.int64)  # a producer's consumer classes inside
        compute = hops = held = 0.0
        capacity = ev.capacity[device]
        out = [math.inf] * j
        for i in range(j - 1, -1, -1):
            c = order[i]
            compute += ev.time[c, device]
            held += ev.size[c]
            if not math.isfinite(compute) or held > capacity:
                break  # every longer segment holds this one too
            inside[c] = True
            for k in self.produced[c]:
                if count_in[k] > 0:
                    hops -= hop[k]  # its tensor no longer enters
                if self.consumers[k] > count_in[k]:
                    hops += hop[k]  # it leaves
            for k in self.consumed[c]:
                count_in[k] += 1
                if inside[self.producer_class[k]]:
                    if count_in[k] == self.consumers[k]:
                        hops -= hop[k]  # its last outside consumer came in
                elif count_in[k] == 1:
                    hops += hop[k]  # it now enters
            out[i] = compute + hops
        return out
