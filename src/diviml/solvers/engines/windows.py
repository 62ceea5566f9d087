"""Lower bounds from windows of a graph solved exactly: where no series point cuts a graph into pieces.

A window is a run of consecutive tasks in topological order. Everything outside it is folded into two
numbers per task and device: its *head*, the earliest it can start there, and its *delivery*, the least time
from its end there to a sink, both with devices never busy and each neighbour on the device that suits it
best, transfers counted. Any schedule of the graph, cut down to the window, is a schedule of the window that
starts no task before its head and ends none later than the makespan less its delivery, so the window's
optimum (with devices shared, transfers and memory inside it) is at most the graph's. CP-SAT proves windows
of 16-24 tasks in about a second where the whole model of 40-64 tasks stays near the LP bound: on randomly
wired DAGs on a CPU and two GPUs the windows cut the gap from 14.9% to 6.1% and from 17.5% to 11.5% on two
of eight instances at 30 s, and left the others as they were (``benchmarks/random_bounds.py``)."""

from __future__ import annotations

import time

from ...bounds import earliest_starts, least_deliveries
from ...problem import Problem
from .cpsat import solve_jobs
from .jobs import JobGraph

WIDTHS = (16, 24, 32)  # window sizes tried in turn
FOCUS = 2  # a window may take up to 1/FOCUS of what is left to its width (the most promising come first)
# (windows of 20-30 tasks are proven in 0.1-4 s each on the 2-core development machine, the whole graph of
# 40-64 is not within minutes)


def windows(order: tuple[str, ...], width: int, stride: int) -> list[tuple[str, ...]]:
    """Runs of ``width`` consecutive tasks of ``order``, ``stride`` apart, the last one ending with the order.

    >>> windows(tuple("abcdefg"), width=4, stride=2)
    [('a', 'b', 'c', 'd'), ('c', 'd', 'e', 'f'), ('d', 'e', 'f', 'g')]
    """
    if len(order) <= width:
        return [order]
    starts = list(range(0, len(order) - width, stride)) + [len(order) - width]
    return [order[s:s + width] for s in dict.fromkeys(starts)]


def window_bound(problem: Problem, *, upper: float, time_limit: float, seed: int = 0, workers: int | None = None,
                 progress=None) -> float:
    """The largest bound CP-SAT proves on the latency of :func:`windows` of ``problem``'s graph, a quarter of a
    window apart, of each width of :data:`WIDTHS` smaller than the graph in turn, narrow first, while the time
    lasts (the narrow ones are proven fast; the wider ones come in order of promise, see :data:`FOCUS`; one
    cut short still gives the bound it proved). ``upper``, a known makespan, sets CP-SAT's time scale. 0 for
    other objectives (a batch's parts are not one job each)."""
    if problem.objective.kind != "latency":
        return 0.0
    began = time.perf_counter()
    graph = problem.graph
    start, delivery = earliest_starts(problem), least_deliveries(problem)
    best = 0.0
    found: dict[tuple[str, ...], float] = {}  # each window solved -> the bound proved on it
    widths = [w for w in WIDTHS if w < len(graph)]
    for k, width in enumerate(widths):
        # wider windows in order of promise (the best bound of a narrower one inside), the first ones given
        # most of the time: the bound is the largest window's, not their sum
        runs = sorted(windows(graph.topological_order, width, max(1, width // 4)),
                      key=lambda run: -max((b for w, b in found.items() if set(w) <= set(run)), default=0.0))
        ends = time.perf_counter() + (began + time_limit - time.perf_counter()) / (len(widths) - k)  # this width's share
        proven = 0
        for i, run in enumerate(runs):
            left = ends - time.perf_counter()
            if left <= 0.05:
                break
            on = [(t, d) for t in run for d in problem.allowed_devices[t]]
            jobs = JobGraph(problem, (problem.batch_size,), tasks=run, release={((t, 0), d): start[t, d] for t, d in on},
                            delivery={((t, 0), d): delivery[t, d] for t, d in on})
            out = solve_jobs(jobs, upper=upper, time_limit=left / min(len(runs) - i, FOCUS), seed=seed, workers=workers)
            found[run] = out.bound
            best, proven = max(best, out.bound), proven + (out.status == "optimal")
        if progress:
            progress(f"  windows of {width} tasks: {proven} of {len(runs)} proven, bound {best:.6g} at "
                     f"{time.perf_counter() - began:.1f} s")
    return best
