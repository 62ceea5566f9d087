"""What every solver does with its answer: simulate it, bound it, validate it, wrap it in a Plan."""

from __future__ import annotations

import time
from typing import Callable, Iterable, Mapping, Sequence

from ...bounds import lower_bound, lower_bound_source
from ...errors import DivimlError
from ...plan import Assignment, Plan
from ...problem import Problem
from ...simulate import Parts, call_latency, parts_from_placement, pipeline_loads, schedule
from ...validate import check
from .jobs import JobGraph

# the validator's time per part of a plan (50,000 tasks: about 1 s), kept out of the bound's time in make_plan:
# a batch streamed one sample at a time has 64 parts per task (a 1.5 s streamed solve validated 8,192 parts in
# 0.1 s after a bound given all the time left)
VALIDATE_S_PER_PART = 2e-5
MAKE_PLAN_S_PER_TASK = 1e-4  # make_plan with no time left: the cheap bounds, simulation, validation (GPT-3 over
# six-servers, 5,286 tasks: 0.46 s), kept back by a search that runs until its time is up


def better_bound(*bounds: tuple[float | None, str]) -> tuple[float, str]:
    """The largest of ``(value, source)`` pairs (None values skipped; on a tie the first)."""
    known = [(v, s) for v, s in bounds if v is not None]
    return max(known, key=lambda b: b[0]) if known else (0.0, "")


def best_of(attempts: Iterable[Callable[[], Plan | None]]) -> Plan | None:
    """The plan of least objective among ``attempts`` run in turn (a solve that finds no plan, raising or
    returning None, is skipped), or None: how a solver warm-starts from baselines."""
    return min(plans_of(attempts), key=lambda p: p.objective, default=None)


def plans_of(attempts: Iterable[Callable[[], Plan | None]]) -> list[Plan]:
    """The plans of ``attempts`` run in turn, those that find none (raising or returning None) left out."""
    plans = []
    for attempt in attempts:
        try:
            plan = attempt()
        except DivimlError:
            continue
        if plan is not None:
            plans.append(plan)
    return plans


class Stopwatch:
    def __init__(self, limit: float):
        self.t0 = time.perf_counter()
        self.limit = limit

    @property
    def elapsed(self) -> float:
        return time.perf_counter() - self.t0

    @property
    def left(self) -> float:
        return max(0.0, self.limit - self.elapsed)

    @property
    def expired(self) -> bool:
        return self.elapsed >= self.limit


def evaluate(problem: Problem, parts: Parts, order: Mapping[str, Sequence[tuple[str, int]]] | None = None
             ) -> tuple[float, tuple[Assignment, ...]]:
    """Objective and assignments (with start times where the objective has them) of a decision."""
    if problem.objective.kind in ("pipeline", "call-latency"):
        placement = {t: p[0][0] for t, p in parts.items()}
        if problem.objective.kind == "pipeline":
            value = pipeline_loads(problem, placement).objective
        else:
            value = call_latency(problem, placement).makespan
        return value, tuple(Assignment(t, placement[t]) for t in problem.graph.topological_order)
    sched = schedule(problem, parts, order)
    batch = problem.objective.kind == "batch"
    first: dict[str, int] = {}
    for k, job in enumerate(sched.jobs):
        first.setdefault(job.task, k)
    # tasks listed in the order the simulator ran them (each task's parts in sample order), so that a reader
    # ordering a device's jobs by start time keeps the simulator's order where starts tie (a task that takes
    # no time runs before one that takes time and starts with it)
    return sched.makespan, tuple(Assignment(j.task, j.device, j.start, j.batch if batch else None)
                                 for j in sorted(sched.jobs, key=lambda j: (first[j.task], j.offset)))


def make_plan(problem: Problem, parts: Parts | None = None, *, placement: Mapping[str, str] | None = None,
              order=None, solver: str, status: str, watch: Stopwatch, bound: float | None = None,
              bound_source: str = "", notes: Sequence[str] = (), stats: Mapping[str, float | str] | None = None) -> Plan:
    """Simulate the decision, attach the best known bound (the solver's own ``bound``, named by
    ``bound_source``, or the generic one, whichever is larger), validate, and return the Plan."""
    if parts is None:
        parts = parts_from_placement(problem, placement)
    value, assignments = evaluate(problem, parts, order)
    if bound is not None and bound >= value:
        best_bound, source = bound, bound_source  # proven optimal: the generic bounds cannot add anything
    else:
        # what is left of the limit, less the validation after it (nothing left: the cheap bounds)
        generic = lower_bound(problem, max(0.0, watch.left - VALIDATE_S_PER_PART * len(assignments)))
        best_bound, source = better_bound((bound, bound_source), (generic, lower_bound_source(problem)))
    plan = Plan(problem.objective.kind, assignments, value, min(best_bound, value), status, solver,
                watch.elapsed, problem.graph.time_unit, problem.batch_size, tuple(notes), dict(stats or {}),
                source)
    check(plan, problem)
    return plan


def plan_from_jobs(jobs: JobGraph, device_of, start, *, solver: str, status: str, watch: Stopwatch, **kw):
    """A validated Plan from job devices and start times (the simulator recomputes the times)."""
    return make_plan(jobs.problem, jobs.parts(device_of), order=jobs.order(device_of, start), solver=solver,
                     status=status, watch=watch, **kw)
