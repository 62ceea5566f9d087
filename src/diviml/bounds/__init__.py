"""Lower bounds on the optimum, independent of any solver.

- critical path: every task on its fastest allowed device, transfers free;
- work / capacity: the LP relaxation of the assignment (fractional tasks, per-device load <= T, memory),
  solved with HiGHS through scipy. Co-location groups are contracted into one item first;
- work MILP: the work LP with whole tasks (identical tasks counted together), HiGHS's dual bound;
- hop work LP (pipeline): the work LP over kinds of device, a task away from its neighbours paying the hops
  of the tensors between them, over parts of the graph cut at series points (identical parts solved once);
- path-work: an LP that couples the two (a path's tasks on a device also load it);
- memory path: a path's time where memory keeps its tasks off their fastest devices (an LP over the devices'
  memory);
- memory segments: the same with whole tasks and transfers between kinds of device, over the segments
  between series points (column generation, a MILP per distinct segment);
- segment schedules (latency): the segments between series points each scheduled alone by the exact solver,
  their bounds summed (a repeated segment solved once);
- batch path-work: for the batch objective, an LP that prices each part at its batched time on the mean
  sample's path and on its device's work together; and, where the graph is one request, the memory path LP
  and the memory segments bound of that request's latency (every sample's path is such a schedule);
- energetic: the path-work LP (latency) or the batch one with each device's work counted in the windows
  between its tasks' heads and tails (the work that must run after a chain of ancestors and before a chain of
  descendants).
Where these pool the memory of several devices, they hold it to what whole tasks can fill of it
(``_packing``: a multiple knapsack over the tasks' sizes), not to the summed bytes.
The bound of a problem is the largest; a plan says which in ``bound_source``. Each bound lives in the module
of its kind (``_simple``, ``_latency``, ``_segments``, ``_batch``, ``_energetic``, ...) and is named here.
"""

from __future__ import annotations

from time import perf_counter

from ..problem import Problem
from ._batch import batch_path_work_bound, one_request_bounds
from ._energetic import Cut, energetic_bound, energetic_cuts
from ._hops import hop_work_bound
from ._integer import integer_work_bound, integer_work_counts, may_lift
from ._latency import memory_path_bound, path_work_bound, path_work_seconds
from ._packing import packable_memory
from ._schedules import segment_schedules_bound
from ._segments import Relaxation, memory_segments_bound, memory_segments_relaxation
from ._series import series_points, windows_of
from ._simple import critical_path_bound, spread_bound, work_bound

__all__ = ["BOUND_SOURCES", "CUTOFFS", "Cut", "Relaxation", "batch_path_work_bound", "critical_path_bound", "energetic_bound", "energetic_cuts", "hop_work_bound", "integer_work_bound", "integer_work_counts", "known_lower_bound", "lower_bound", "lower_bound_source",
           "memory_path_bound", "memory_segments_bound", "memory_segments_relaxation", "packable_memory", "path_work_bound", "path_work_seconds", "segment_schedules_bound", "serial_upper_bound", "series_points", "share_lower_bound",
           "spread_bound", "windows_of", "work_bound"]

# what proved a plan's bound (Plan.bound_source): the bounds here, and the solvers' own
CRITICAL_PATH = "critical path"
WORK_LP = "work LP"
WORK_MILP = "work MILP"
HOP_WORK_LP = "hop work LP"
PATH_WORK_LP = "path-work LP"
MEMORY_PATH_LP = "memory path LP"
MEMORY_SEGMENTS = "memory segments"
SEGMENT_SCHEDULES = "segment schedules"
BATCH_PATH_WORK_LP = "batch path-work LP"
ENERGETIC_LP = "energetic LP"
CP_SAT = "CP-SAT"  # exact and call-exact: the model's proven bound
CUTOFFS = "CP-SAT cutoffs"  # exact: the largest makespan CP-SAT proved no schedule meets
MILP = "MILP"  # milp: the MILP's dual bound
MODULE_DP = "module DP"  # split and exact by pieces: the join's dynamic program over the modules' bounds
IP = "IP"  # the pipeline IP's dual bound
EXACT_DP = "DP (exact)"  # the pipeline DP's contiguous optimum
BOUND_SOURCES = (CRITICAL_PATH, WORK_LP, WORK_MILP, HOP_WORK_LP, PATH_WORK_LP, MEMORY_PATH_LP, MEMORY_SEGMENTS, SEGMENT_SCHEDULES,
                 BATCH_PATH_WORK_LP, ENERGETIC_LP, CP_SAT, CUTOFFS, MILP, MODULE_DP, IP, EXACT_DP)


def lower_bound(problem: Problem, time_limit: float | None = None) -> float:
    """The best of the bounds above, computed once per problem: every plan a solver makes asks for it
    (:func:`lower_bound_source` names the one that gave it).

    The LPs share ``time_limit`` seconds (None: no limit); one that does not finish in its share is
    dropped, never waited on (on 20,000 tasks the coupled LP alone ran for minutes). The memory segments
    bound, the hop work LP and the work MILP take at most half of what is left: any of its prices gives a bound, and the baseline plans
    (layers over servers: exact solves of one layer) need time after it. (Problems are
    immutable; the value is kept where the problem keeps its cached properties.)"""
    memo = problem.__dict__
    if "lower_bound" not in memo:
        start = perf_counter()
        left = (lambda: None) if time_limit is None else (lambda: time_limit - (perf_counter() - start))
        found = {CRITICAL_PATH: critical_path_bound(problem)}

        def given(seconds: float | None, bound, *args, unstarted=0.0, **kwargs):  # with no time left a bound is
            if seconds is not None and seconds <= 0:  # not started: its LP alone takes seconds on 10,000 tasks
                return unstarted
            return bound(problem, seconds, *args, **kwargs)
        found[WORK_LP] = given(left(), work_bound)
        found[HOP_WORK_LP] = given(_half(left()), hop_work_bound)
        found[MEMORY_PATH_LP] = given(left(), memory_path_bound)
        found[MEMORY_SEGMENTS] = given(_half(left()), memory_segments_bound)  # the plans need the rest
        found[SEGMENT_SCHEDULES] = given(_half(left()), segment_schedules_bound, floor=max(found.values()))
        found[PATH_WORK_LP] = given(left(), path_work_bound, floor=max(found.values()))
        found[BATCH_PATH_WORK_LP] = given(left(), batch_path_work_bound)
        path, segments = given(_half(left()), one_request_bounds, unstarted=(0.0, 0.0))  # batch: one request's latency bounds it
        found[MEMORY_PATH_LP], found[MEMORY_SEGMENTS] = max(found[MEMORY_PATH_LP], path), max(found[MEMORY_SEGMENTS], segments)
        found[ENERGETIC_LP] = given(_half(left()), energetic_bound, floor=max(found.values()))
        # whole tasks lift the work LP by about a task's time: tried where that can make it the largest
        found[WORK_MILP] = (given(_half(left()), integer_work_bound)
                            if may_lift(problem, found[WORK_LP], max(found.values())) else 0.0)
        source = max(found, key=found.__getitem__)  # on a tie the cheaper one, listed first
        memo["lower_bound"], memo["lower_bound_source"] = found[source], source
    return memo["lower_bound"]


def _half(seconds: float | None) -> float | None:
    return None if seconds is None else seconds / 2


def known_lower_bound(problem: Problem) -> float | None:
    """:func:`lower_bound` of ``problem`` where it was computed already, else None (never computes it: a search
    aiming at the bound must not start a bound of its own without a limit)."""
    return problem.__dict__.get("lower_bound")


def lower_bound_source(problem: Problem) -> str:
    """Which bound :func:`lower_bound` took for ``problem`` ("" before it was computed)."""
    return problem.__dict__.get("lower_bound_source", "")


def share_lower_bound(problem: Problem, value: float, source: str = "") -> None:
    """Record :func:`lower_bound` of ``problem`` computed elsewhere (in another process, on a copy of it), so
    that it is not computed again here."""
    if "lower_bound" not in problem.__dict__:
        problem.__dict__["lower_bound"], problem.__dict__["lower_bound_source"] = value, source


def serial_upper_bound(problem: Problem) -> float:
    """A makespan every feasible plan can reach: tasks one after another, each at its slowest, paying its worst
    transfer (call-latency: its output hopped in and out of host memory). The one serial bound of diviml:
    where no baseline plan is at hand, it scales the exact models' time."""
    graph, platform = problem.graph, problem.platform
    if problem.objective.kind == "call-latency":
        hops = [d for d in platform.devices if not d.is_host]
        return sum(max((problem.time(t.id, d) for d in problem.allowed_devices[t.id]), default=0.0)
                   + 2 * max((platform.hop_time(t, d) for d in hops), default=0.0) for t in graph.tasks)
    n = problem.batch_size
    total = 0.0
    for t in graph.tasks:
        total += max(problem.time(t.id, d, n) for d in problem.allowed_devices[t.id])
        total += max((platform.transfer_time(t, a.name, b.name, n / graph.batch_size)
                      for a in platform.devices for b in platform.devices), default=0.0)
    return total
