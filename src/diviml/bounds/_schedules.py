"""Latency: each segment between series points scheduled on its own, exactly, and the windows summed.

A series point precedes or follows every task of time or memory, so the tasks between two consecutive series
points run after the first finishes and before the second starts: a plan's makespan is the sum of the windows
between consecutive series points' finishes. Each window holds a schedule of its segment alone, its inputs
there at the start on every device and nothing else running, so the least makespan of that problem, or any
lower bound of it (the exact solver's proven bound where it stops short), bounds the window. A segment that
recurs (a model's layers) is solved once.

The memory segments bound prices a window by its longest path and its work per kind of device; this one also
sees the order in which parallel branches share a device and the transfers between them: Llama 2 70B's
prefill over six-servers 4.614 -> 4.98 s, where the plans are 4.998-5.049 s. It leaves memory to the plans
(each segment has the platform to itself), so where memory spreads a model over slow devices (GPT-3 in FP32)
the memory segments bound stays the larger, and this one is not tried: one device per segment already
schedules the whole graph within the best bound known.
"""

from __future__ import annotations

from time import perf_counter

from ..errors import InfeasibleError
from ..problem import Objective, Problem
from ._hops import _segments, _signature
from ._series import MAX_TASKS
from ._simple import critical_path_bound

__all__ = ["segment_schedules_bound"]

WHOLE = 120  # tasks: a graph of at most this many is the exact solver's whole (and a segment's largest size here)
UNLIMITED_SHARE_S = 10.0  # seconds per segment's solve where the bound is given no time limit


def segment_schedules_bound(problem: Problem, time_limit: float | None = None, floor: float = 0.0,
                            smallest: int = WHOLE + 1) -> float:
    """The sum over the segments of their exact latency bounds, or 0 where it does not apply (objectives
    other than latency, graphs of fewer than ``smallest`` tasks, which the exact solver takes whole, no series
    point) or cannot reach ``floor``.

    Segments are solved largest first, each with an even share of the time left; one left unsolved (the time
    ran out, or it has more than :data:`WHOLE` tasks) counts its critical path. No time: no bound; no limit:
    :data:`UNLIMITED_SHARE_S` a segment."""
    graph = problem.graph
    if (problem.objective.kind != "latency" or not smallest <= len(graph) <= MAX_TASKS
            or (time_limit is not None and time_limit <= 0)):
        return 0.0
    stop = None if time_limit is None else perf_counter() + time_limit
    segments = _segments(problem, {t: t for t in graph.topological_order}) or []
    if len(segments) < 2:
        return 0.0
    counted: dict[tuple, tuple[list[str], int]] = {}
    for seg in segments:
        key = _signature(problem, seg, {t: t for t in seg})
        counted[key] = (seg, counted[key][1] + 1) if key in counted else (seg, 1)
    if sum(count * _one_device(problem, tasks) for tasks, count in counted.values()) <= floor:
        return 0.0  # every segment on one device meets the best bound known: none can lift it
    subs = [(_alone(problem, tasks, n), count) for n, (tasks, count) in enumerate(counted.values())]
    values = [count * critical_path_bound(sub) for sub, count in subs]
    todo = sorted((i for i, (sub, _) in enumerate(subs) if _worth_solving(sub)), key=lambda i: -values[i])
    from ..solvers import solve  # the exact solver is this bound's subroutine (the solvers import the bounds)
    for k, i in enumerate(todo):
        left = None if stop is None else stop - perf_counter()
        if left is not None and left <= 0:
            break
        sub, count = subs[i]
        share = UNLIMITED_SHARE_S if left is None else left / (len(todo) - k)
        try:
            values[i] = max(values[i], count * solve(sub, "exact", time_limit=share).bound)
        except InfeasibleError:  # the whole problem is then infeasible too: its solver says so, in its words
            continue
    return sum(values)


def _one_device(problem: Problem, tasks: list[str]) -> float:
    """A makespan the segment alone can reach, memory aside: all of it on the one device that runs it fastest
    (inf where no device may run all of it)."""
    devices = [d.name for d in problem.platform.devices]
    return min((sum(problem.time(t, d) for t in tasks) for d in devices
                if all(d in problem.allowed_devices[t] for t in tasks)), default=float("inf"))


def _alone(problem: Problem, tasks: list[str], n: int) -> Problem:
    """The latency problem of a segment on its own: its tasks and the edges between them, on the platform."""
    return Problem(problem.graph.subgraph(tasks, f"{problem.graph.name} segment {n}"), problem.platform,
                   Objective("latency"))


def _worth_solving(sub: Problem) -> bool:
    """Whether an exact solve can say more than the critical path: two tasks or more take time, and the
    segment is small enough to solve whole."""
    timed = [t for t in sub.graph.topological_order if any(sub.time(t, d) > 0 for d in sub.allowed_devices[t])]
    return 1 < len(timed) and len(sub.graph) <= WHOLE
