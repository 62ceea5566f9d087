"""What runs in a pool worker: a module solve (HEFT or a guide for a start, then CP-SAT), the baselines beside the join."""

from __future__ import annotations

import time

from ...bounds import lower_bound, lower_bound_source
from ...errors import InfeasibleError
from ...plan import Plan
from ...problem import Problem
from ..baselines import heft
from ..engines import cpsat
from ..engines.jobs import JobGraph
from ..engines.plans import Stopwatch
from ..search import baseline_plan, bound_share_beside
from ._messages import MIN_BUDGET, SMALL_MODULE, Answer, Request
from ._partial import critical_path

_PROBLEM: Problem | None = None  # the problem a pool worker solves modules of


def init_worker(problem: Problem | None) -> Problem | None:
    """Make ``problem`` the one this process solves modules of; the one it replaces (a pool opened inside
    another's solve, in the same process, gives it back when it closes)."""
    global _PROBLEM
    previous, _PROBLEM = _PROBLEM, problem
    return previous


def baselines_and_bound(time_limit: float, submitted: float) -> tuple[Plan | None, float, str]:
    """The baseline plan (:func:`.search.baseline_plan`) and the problem's lower bound with its source, in a
    pool worker, ``time_limit`` counted from ``submitted`` (:func:`time.time`): the worker's start takes its
    share too (GPT-3 over six-servers: 0.8 s, which the answer came late by)."""
    time_limit = max(0.0, time_limit - (time.time() - submitted))
    # beside the join, in a process of its own, the lower bound's LPs may have most of the time
    plan = baseline_plan(_PROBLEM, Stopwatch(time_limit), bound_share_beside(_PROBLEM, time_limit))
    return plan, lower_bound(_PROBLEM), lower_bound_source(_PROBLEM)


def solve_module(request: Request) -> Answer:
    """HEFT for a first schedule and the time scale, then CP-SAT on the module; the first schedule when
    CP-SAT has none. With a cutoff, the cutoff sets the time scale and HEFT is not run: only a schedule
    meeting it counts. The guide, re-timed, replaces HEFT's schedule where it is better (or meets the cutoff):
    CP-SAT's time on a module goes mostly to finding its optimum, and HEFT's was 17-42% above it on
    inception_v3's blocks, an earlier block's optimum re-timed 1-11%."""
    if time.time() >= request.deadline:  # the join's time is up: it goes on with the answers it has (solves
        return Answer(None, None, "timeout")  # queued behind the deadline ran 26 devices at a batch of 4,096 0.7 s over)
    jobs = JobGraph(_PROBLEM, request.sizes, request.tasks, request.release, request.only, request.capacity)
    if any(not jobs.devices(j) for j in jobs.jobs):
        return Answer(None, None, "infeasible")
    device_of = start = None
    if request.cutoff is not None:
        if request.cutoff <= 0:
            return Answer(None, None, "cutoff")
        upper = request.cutoff
    else:
        try:
            device_of, start, upper = heft.heft_schedule(jobs)
        except InfeasibleError:
            upper = max(request.release.values(), default=0.0) + sum(
                max(jobs.duration(j, d) + max(jobs.transfer(j, d, e) for e in _PROBLEM.platform.by_name)
                    for d in jobs.devices(j)) for j in jobs.jobs)
    budget = request.budget
    if request.cutoff is not None and request.tails and budget >= MIN_BUDGET:
        late, used = solve_late(jobs, request)
        if late is not None:
            return late
        budget -= used
    wall = request.deadline - time.time()
    guided = guided_schedule(jobs, request.guide)
    use_guide = guided is not None and guided[2] < upper  # better than HEFT's, or meets the cutoff
    if use_guide:
        device_of, start, makespan = guided
        upper = makespan if request.cutoff is None else upper
    if budget >= MIN_BUDGET and wall > 0:
        out = cpsat.solve_jobs(jobs, upper=max(upper, 1e-12), time_limit=wall, work_limit=budget,
                               seed=request.seed, workers=1, symmetry="none", small=len(jobs.jobs) <= SMALL_MODULE,
                               cutoff=request.cutoff, hint=None if device_of is None else (device_of, start))
        if out.device_of is not None:
            return Answer(out.device_of, out.start, out.status, out.bound, use_guide)
        if out.status == "infeasible" and request.cutoff is not None:
            return Answer(None, None, "cutoff", request.cutoff)
        if out.status == "infeasible":
            return Answer(None, None, "infeasible")
    if device_of is None:
        return Answer(None, None, "timeout" if request.cutoff is not None else "infeasible")
    return Answer(device_of, start, "heft", guided=use_guide)


def solve_late(jobs: JobGraph, request: Request) -> tuple[Answer | None, float]:
    """A "late" answer where no schedule of the module meets the request's cutoff with each job read later
    ending at least its tail before it, None where one does (or no proof came in time); and the work used.

    The state's estimate is the latest of its jobs' ends plus their tails, so only such a schedule can
    improve on the state: a makespan cutoff alone let through 107 of densenet121's 108 solves whose optimum
    then did not improve. The makespan solve runs unchanged where the test passes, so the plans do too."""
    deadlines = {j: request.cutoff - tail for j, tail in request.tails.items()}
    out = cpsat.solve_jobs(jobs, upper=request.cutoff, time_limit=max(request.deadline - time.time(), 0.0),
                           work_limit=request.budget, seed=request.seed, workers=1, symmetry="none",
                           small=len(jobs.jobs) <= SMALL_MODULE, cutoff=request.cutoff, deadlines=deadlines,
                           first_only=True)
    if out.status != "infeasible":
        return None, out.stats["work"]
    bound = critical_path(_PROBLEM, request.tasks, request.sizes, request.release)
    return Answer(None, None, "late", bound), out.stats["work"]


def guided_schedule(jobs: JobGraph, guide: tuple[dict, dict] | None) -> tuple[dict, dict, float] | None:
    """The guide's schedule (devices and order key by position) re-timed on ``jobs`` as early as possible:
    (device, start, makespan), or None without a guide or where it breaks a pin, co-location or memory."""
    if guide is None:
        return None
    tasks = jobs.task_ids
    device_of = {(tasks[i], l): d for (i, l), d in guide[0].items()}
    if any(device_of[j] not in jobs.devices(j) for j in jobs.jobs):
        return None
    if any(device_of[a] != device_of[b] for a, b, _ in jobs.colocated()):
        return None
    for device, capacity, resident in jobs.memory_limits():
        if sum(b for t, b in resident if any(device_of[(t, l)] == device for l in range(len(jobs.sizes)))) > capacity:
            return None
    start, finish = jobs.retime(device_of, {(tasks[i], l): v for (i, l), v in guide[1].items()})
    return device_of, start, max(finish.values(), default=0.0)
