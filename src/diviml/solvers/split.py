"""MILP-SPLIT (DiviML): solve the graph module by module with the exact engine, joined by dynamic programming.

The graph is cut into a chain of modules (:mod:`.modules`). The join walks the chain keeping, for each
device of the current module's *exit* task (per sub-batch for the batch objective), the best partial
schedule that ends there. Each step solves the next module exactly (CP-SAT, :func:`.cpsat.solve_jobs`) for
every (state, exit device) pair, given what the partial schedule fixes: when each outside input arrives on
each device, when each device is free, how much memory it has left, and co-located tasks placed earlier.
The solves of a step are independent and run in a process pool, the best-ranked state's first: the
others' solves then carry a *cutoff* (what their exit state already reached), and most end as soon as
CP-SAT proves they cannot improve on it (:func:`_step`; googlenet 2.9 to 1.3 s, same plan and bound); at a
multi-channel cut a feasibility test with deadlines on the jobs read later goes first (:func:`_late`;
densenet121 2.2 to 1.1 s, same plan).
Each solve is limited by CP-SAT's deterministic time (its work), not the clock, so the answers, the plan
and its bound are the same on every run with the same seed whatever the machine's load; only the run's
time limit is on the clock.
CP-SAT starts from the better of HEFT's schedule and a *guide*: the latest schedule found for a module of
the same structure (tasks, edges, pins; other costs), re-timed. Repeated blocks of other widths (inception's,
densenet's, randwire stages') then start near their optimum (:func:`_guided`; inception_v3 4.9 to 3.6 s).

At a series point the module only sees its one input, so the join is the exact chain DP of the paper:
O(|K|^2 * modules * T), and with exact module solves the latency plan is optimal; the same DP on the
solves' bounds bounds the optimum (with constants, on twin solves without them: :func:`_step`).
A module's constants (weight transposes, masks: no graph input reaches them) are first placed, per state,
in an idle gap of the partial schedule where their outputs reach every device before the module can
start, at no loss (:func:`_hoist`; inception_v3's plan 0.42% shorter, at its bound). At a multi-channel cut
the other crossing tensors come from the partial schedule that the state keeps (a Viterbi heuristic); the
states are ranked by an *estimate* of the whole makespan (open tensors' finish plus the fastest path after
them), which at a series point orders them as their makespan does. Measured on randwire-ws-s0: ranking by
the estimate beat ranking by the partial makespan (0.891 vs 0.906 ms); adding the same tails to the module
solves' objective made plans worse (0.928 ms), so they are not used there.
Memory is a per-state budget: each module gets what its partial schedule left on each device, so the plan
fits; when no state can place a module, the rest is placed ignoring memory and a repair pass moves tasks
off over-full devices (:func:`repair_memory`). The final plan is always simulated and validated.

Batch objective: as in :mod:`.exact`, the batch is split into L near-equal sub-batches (the promising L
in 1 .. K, :func:`.search.promising_splits`), each a
copy of the graph; the state is the exit device of every copy, and the exit options are each single
device for all copies or free. The plan is the best of the join's plans and the baselines (HEFT, best
single device); its bound is the problem's lower bound.
"""

from __future__ import annotations

import bisect
import math
import multiprocessing
import os
import time
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, field, replace

from ..bounds import MODULE_DP, lower_bound, lower_bound_source, share_lower_bound
from ..errors import InfeasibleError, InputError
from ..plan import Plan
from ..problem import Problem
from . import cpsat, heft
from ._common import Stopwatch, better_bound
from .jobs import JobGraph, JobKey
from .modules import Chain, detect
from .search import baseline_plan, bound_share_beside, promising_splits

NAME = "split"
MIN_BUDGET = 0.02  # seconds of work: below this a module solve keeps its first schedule
SMALL_MODULE = 40  # jobs; CP-SAT without presolve and linearization up to this size (see cpsat.solve_jobs)


@dataclass
class _Partial:
    """A schedule of the modules so far, in absolute times."""
    device_of: dict = field(default_factory=dict)
    start: dict = field(default_factory=dict)
    finish: dict = field(default_factory=dict)
    free: dict = field(default_factory=dict)  # device -> when its last job ends
    memory_left: dict = field(default_factory=dict)
    resident: frozenset = frozenset()  # (task, device) whose memory is counted
    makespan: float = 0.0
    estimate: float = 0.0  # makespan of the whole graph at least: open jobs' finish plus the fastest path after
    lower: float = 0.0  # on a chain of series points: a lower bound on the makespan of any plan ending in this state
    open: frozenset = frozenset()  # scheduled jobs with consumers in later modules


@dataclass(frozen=True)
class _Request:
    """One module solve: everything a worker needs besides the problem (which it already holds)."""
    tasks: tuple[str, ...]
    sizes: tuple[int, ...]
    release: dict  # (job, device) -> earliest start, relative to the step's origin
    only: dict
    capacity: dict | None
    # seconds of work on the reference machine (CP-SAT's deterministic time, see cpsat.solve_jobs): a solve
    # ends at the same point with the same answer however loaded the machine is
    budget: float
    deadline: float  # time.time() by which the solve must end whatever its budget (the join's time limit)
    seed: int
    # only a module schedule that ends before the cutoff (after the origin) can improve on the state
    # already reached: a cutoff on the module's makespan, shift-invariant, so repeated modules share it
    cutoff: float | None = None
    # with a cutoff, where the module's jobs read later decide the state's estimate (the exit does not close
    # the module): job -> its fastest path after the module; only a schedule ending each such job that long
    # before the cutoff can improve on the state (see _solve_module)
    tails: dict | None = None
    # a schedule of an earlier module of the same structure (devices and order key by position), which
    # often fits this one nearly as well: a first schedule for CP-SAT beside HEFT's (see _Pool.map)
    guide: tuple[dict, dict] | None = None


@dataclass(frozen=True)
class _Answer:
    device_of: dict | None
    order_key: dict | None  # job -> a start time (any unit) whose order is the device order
    # optimal | timeout | heft (CP-SAT found nothing: the first schedule, HEFT's or the guide's) | infeasible |
    # cutoff (proven to end no earlier than the cutoff) | late (proven to end a job read later too late to
    # improve on the state: its tail past the cutoff)
    status: str
    bound: float = 0.0  # the module ends at least this long after the step's origin
    guided: bool = False  # CP-SAT started from an earlier module's schedule (the request's guide), not HEFT's


_PROBLEM: Problem | None = None  # the problem a pool worker solves modules of


def _init_worker(problem: Problem) -> None:
    global _PROBLEM
    _PROBLEM = problem


def _baselines(time_limit: float) -> tuple[Plan | None, float, str]:
    """The baseline plan (:func:`.search.baseline_plan`) and the problem's lower bound with its source, in a
    pool worker."""
    # beside the join, in a process of its own, the lower bound's LPs may have most of the time
    plan = baseline_plan(_PROBLEM, Stopwatch(time_limit), bound_share_beside(_PROBLEM, time_limit))
    return plan, lower_bound(_PROBLEM), lower_bound_source(_PROBLEM)


class _Baseline:
    """The baseline plan and the problem's lower bound, computed in a process of their own while the join
    runs (with more than one worker). On gpt2-small they take 0.8 s of a 2 s solve (the LP bound 0.5 s),
    and the join leaves part of the cores idle: the main process between steps, steps with fewer solves
    than workers."""

    def __init__(self, problem: Problem, watch: Stopwatch, workers: int):
        self.problem, self.executor = problem, None
        if workers > 1:
            self.executor = ProcessPoolExecutor(1, mp_context=_context(), initializer=_init_worker,
                                                initargs=(problem,))
            self.future = self.executor.submit(_baselines, watch.left)
        else:
            self.plan = baseline_plan(problem, watch)

    def result(self) -> Plan | None:
        """The baseline plan, once it is there; the problem's lower bound is then known here too."""
        if self.executor is not None:
            self.plan, bound, source = self.future.result()
            share_lower_bound(self.problem, bound, source)
            self.close()
        return self.plan

    def close(self) -> None:
        if self.executor is not None:
            self.executor.shutdown(cancel_futures=True)
            self.executor = None


def _context():
    """Fork where the platform allows (workers start in milliseconds and inherit the problem)."""
    return multiprocessing.get_context("fork" if "fork" in multiprocessing.get_all_start_methods() else "spawn")


def _solve_module(request: _Request) -> _Answer:
    """HEFT for a first schedule and the time scale, then CP-SAT on the module; the first schedule when
    CP-SAT has none. With a cutoff, the cutoff sets the time scale and HEFT is not run: only a schedule
    meeting it counts. The guide, re-timed, replaces HEFT's schedule where it is better (or meets the cutoff):
    CP-SAT's time on a module goes mostly to finding its optimum, and HEFT's was 17-42% above it on
    inception_v3's blocks, an earlier block's optimum re-timed 1-11%."""
    jobs = JobGraph(_PROBLEM, request.sizes, request.tasks, request.release, request.only, request.capacity)
    if any(not jobs.devices(j) for j in jobs.jobs):
        return _Answer(None, None, "infeasible")
    device_of = start = None
    if request.cutoff is not None:
        if request.cutoff <= 0:
            return _Answer(None, None, "cutoff")
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
        late, used = _late(jobs, request)
        if late is not None:
            return late
        budget -= used
    wall = request.deadline - time.time()
    guided = _guided(jobs, request.guide)
    use_guide = guided is not None and guided[2] < upper  # better than HEFT's, or meets the cutoff
    if use_guide:
        device_of, start, makespan = guided
        upper = makespan if request.cutoff is None else upper
    if budget >= MIN_BUDGET and wall > 0:
        out = cpsat.solve_jobs(jobs, upper=max(upper, 1e-12), time_limit=wall, work_limit=budget,
                               seed=request.seed, workers=1, symmetry="none", small=len(jobs.jobs) <= SMALL_MODULE,
                               cutoff=request.cutoff, hint=None if device_of is None else (device_of, start))
        if out.device_of is not None:
            return _Answer(out.device_of, out.start, out.status, out.bound, use_guide)
        if out.status == "infeasible" and request.cutoff is not None:
            return _Answer(None, None, "cutoff", request.cutoff)
        if out.status == "infeasible":
            return _Answer(None, None, "infeasible")
    if device_of is None:
        return _Answer(None, None, "timeout" if request.cutoff is not None else "infeasible")
    return _Answer(device_of, start, "heft", guided=use_guide)


def _late(jobs: JobGraph, request: _Request) -> tuple[_Answer | None, float]:
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
    bound = _critical_path(_PROBLEM, request.tasks, request.sizes, request.release)
    return _Answer(None, None, "late", bound), out.stats["work"]


def _guided(jobs: JobGraph, guide: tuple[dict, dict] | None) -> tuple[dict, dict, float] | None:
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


class _Pool:
    """Module solves in worker processes (forked where the platform allows), or in this one.

    Requests are keyed by their *shape* (:func:`_shape`): tasks named by position, with their costs and
    edges. Modules that repeat (a transformer's layers, a ResNet stage's blocks) then share their solves:
    within one batch of requests an identical request is solved once, and a proven answer is reused
    whenever it comes up again. Requests are also keyed by their *structure* (:func:`_structure`): each
    solve is guided by the latest schedule found for its structure."""

    def __init__(self, problem: Problem, workers: int):
        _init_worker(problem)
        self.problem = problem
        self.workers = max(workers, 1)
        self.executor = None
        if workers > 1:
            self.executor = ProcessPoolExecutor(workers, mp_context=_context(), initializer=_init_worker,
                                                initargs=(problem,))
        self.shapes: dict = {}  # (tasks, sizes) -> shape
        self.proven: dict = {}  # request key -> the module's optimum (tasks by position), reused by later requests
        self.floor: dict = {}  # request key -> a makespan cutoff proven out of reach (no shorter schedule exists)
        self.reused = 0  # requests answered without a solve (proven earlier, or the same in one batch)
        self.guides: dict = {}  # structure key -> the latest schedule found for it (by position)

    def map(self, requests: list[_Request]) -> list[_Answer]:
        """The answers to ``requests``. Requests of one key are solved once, with the loosest cutoff (the
        join compares each answer with what its own request's state reached, as it would any other). The
        module's optimum (found without a cutoff, or under a makespan cutoff) answers later requests of its
        key; so does a makespan cutoff proven out of reach, for tighter ones."""
        keys = [self._key(r) for r in requests]
        todo: dict = {}
        for r, k in zip(requests, keys):
            if self._known(r, k) is not None:
                continue
            if k in todo and todo[k].cutoff is not None:
                todo[k] = replace(todo[k], cutoff=None if r.cutoff is None else max(r.cutoff, todo[k].cutoff))
            todo.setdefault(k, r)
        structures = {k: _structure(k) for k in todo}
        todo = {k: replace(r, guide=self.guides.get(structures[k])) for k, r in todo.items()}
        if self.executor is None or len(todo) <= 1:
            answers = map(_solve_module, todo.values())
        else:
            answers = self.executor.map(_solve_module, todo.values())
        fresh = {k: _by_position(a, r.tasks) for (k, r), a in zip(todo.items(), answers)}
        for k, a in fresh.items():
            request = todo[k]
            if a.device_of is not None:
                self.guides[structures[k]] = (a.device_of, a.order_key)
            if a.status == "optimal":
                self.proven[k] = a
            elif a.status == "cutoff":
                self.floor[k] = max(request.cutoff, self.floor.get(k, -math.inf))
        self.reused += len(requests) - len(fresh)
        return [_by_task(fresh[k] if k in fresh else self._known(r, k), r.tasks) for r, k in zip(requests, keys)]

    def _known(self, request: _Request, key: tuple) -> _Answer | None:
        if key in self.proven:
            return self.proven[key]
        if request.cutoff is not None and request.cutoff <= self.floor.get(key, -math.inf):
            return _Answer(None, None, "cutoff", self.floor[key])
        return None

    def _key(self, request: _Request) -> tuple:
        """What a module solve's answer depends on besides its time limit and seed, tasks by position."""
        shape = self.shapes.get((request.tasks, request.sizes))
        if shape is None:
            shape = self.shapes[request.tasks, request.sizes] = _shape(self.problem, request.tasks, request.sizes)
        index = {t: i for i, t in enumerate(request.tasks)}
        capacity = tuple(sorted(request.capacity.items())) if request.capacity is not None else None
        # releases are differences of absolute times: rounded, so that repeated modules' keys meet
        release = tuple(sorted(((index[t], l), d, float(f"{v:.10g}")) for ((t, l), d), v in request.release.items()))
        only = tuple(sorted(((index[t], l), devices) for (t, l), devices in request.only.items()))
        return shape, request.sizes, release, only, capacity

    def close(self) -> None:
        if self.executor is not None:
            self.executor.shutdown(cancel_futures=True)


def _shape(problem: Problem, tasks: tuple[str, ...], sizes: tuple[int, ...]) -> tuple:
    """A module's tasks as its solve sees them, named by position: time on each allowed device at each
    sub-batch size, what sets their transfers and resident memory, co-location group, producers inside."""
    graph = problem.graph
    index = {t: i for i, t in enumerate(tasks)}
    groups = problem.colocation_groups
    rows = []
    for t in tasks:
        task = graph.by_id[t]
        rows.append((tuple((d, tuple(problem.time(t, d, b) for b in sizes)) for d in problem.allowed_devices[t]),
                     task.output_bytes, task.transfer_time, task.memory_bytes,
                     task.colocation if task.colocation in groups else None,
                     tuple(index[u] for u in graph.predecessors[t] if u in index)))
    return tuple(rows)


def _structure(key: tuple) -> tuple:
    """From a request's key (:meth:`_Pool._key`), what a schedule of a module needs to fit another one's:
    the same tasks by position (devices allowed, co-location, producers inside), sub-batches and pins;
    costs, releases and memory left may differ."""
    shape, sizes, _, only, _ = key
    return tuple((tuple(d for d, _ in row[0]), row[4], row[5]) for row in shape), sizes, only


def _takes_time(problem: Problem, task: str) -> bool:
    return any(problem.time(task, d) > 0 for d in problem.allowed_devices[task])


def _by_position(answer: _Answer, tasks: tuple[str, ...]) -> _Answer:
    """The answer with its jobs named (position of the task in the module, sub-batch)."""
    if answer.device_of is None:
        return answer
    index = {t: i for i, t in enumerate(tasks)}
    return replace(answer, device_of={(index[t], l): d for (t, l), d in answer.device_of.items()},
                   order_key={(index[t], l): v for (t, l), v in answer.order_key.items()})


def _by_task(answer: _Answer, tasks: tuple[str, ...]) -> _Answer:
    """The inverse of :func:`_by_position`, for a module with these tasks."""
    if answer.device_of is None:
        return answer
    return replace(answer, device_of={(tasks[i], l): d for (i, l), d in answer.device_of.items()},
                   order_key={(tasks[i], l): v for (i, l), v in answer.order_key.items()})


def _releases(problem: Problem, jobs: list[JobKey], sizes, partial: _Partial, members: set | None = None) -> dict:
    """Absolute earliest start of each (job, device): inputs from outside ``members`` (the jobs' tasks
    unless given) arrived, device free."""
    graph = problem.graph
    members = {t for t, _ in jobs} if members is None else members
    out = {}
    for j in jobs:
        t, l = j
        outside = [(u, l) for u in graph.predecessors[t] if u not in members]
        for d in problem.allowed_devices[t]:
            ready = partial.free.get(d, 0.0)
            for u in outside:
                ready = max(ready, partial.finish[u] + problem.transfer(
                    u[0], partial.device_of[u], d, sizes[l] / graph.batch_size))
            out[j, d] = ready
    return out


def _hoist(problem: Problem, partial: _Partial, module, sizes, first: frozenset, look: "_Lookahead", index: int,
           memory_binds: bool) -> tuple[_Partial, tuple[str, ...]]:
    """The partial with those of the module's constants (no graph input reaches them: weight transposes,
    masks) that fit in an idle gap early enough placed there, and the module's tasks left to solve.

    A constant is placed where its output reaches every device earliest, if that is before any of the
    module's first tasks can start (the *origin*): the module is then solved as if its output were
    everywhere from the start, which is the most it could gain, so this loses nothing. Left in the
    module, it would run on devices busy with the module's own work: inception_v3's last weight transpose
    cost 0.4% of its makespan there, where the monolithic optimum runs it in an idle gap long before.
    (Not where memory binds or tasks are co-located: a constant placed early would hold memory, or pin its
    group, before the join decides.)"""
    graph, platform = problem.graph, problem.platform
    constants = [t for t in module.tasks if t in look.constants]
    if not constants or memory_binds or problem.colocation_groups:
        return partial, module.tasks
    origin = min(_releases(problem, [(t, l) for t in first for l in range(len(sizes))], sizes, partial,
                           set(module.tasks)).values())
    busy = {d.name: [] for d in platform.devices}
    for j, d in partial.device_of.items():
        busy[d].append((partial.start[j], partial.finish[j]))
    for d in busy:
        busy[d].sort()
    placed: dict = {}  # job -> (device, start, finish)
    trial: dict = {}  # the same for the copies of the constant being placed

    def done(job):  # (device, finish) of a job scheduled already, or None
        if job in trial or job in placed:
            d, _, f = trial.get(job) or placed[job]
            return d, f
        return (partial.device_of[job], partial.finish[job]) if job in partial.finish else None

    for t in constants:
        trial.clear()
        for l, b in enumerate(sizes):
            inputs = [(u, done((u, l))) for u in graph.predecessors[t]]
            if any(at is None for _, at in inputs):
                break  # it reads a constant left in the module
            best = None
            for d in problem.allowed_devices[t]:
                ready = max([0.0] + [f + problem.transfer(u, e, d, b / graph.batch_size) for u, (e, f) in inputs])
                length = problem.time(t, d, b)
                ready = heft.earliest_gap(busy[d], ready, length)
                reach = ready + length + max(problem.transfer(t, d, e, b / graph.batch_size) for e in platform.by_name)
                if reach <= origin and (best is None or reach < best[0]):
                    best = (reach, d, ready, ready + length)
            if best is None:
                break
            trial[t, l] = best[1:]
            bisect.insort(busy[best[1]], best[2:])
        if len(trial) == len(sizes):
            placed.update(trial)
        else:
            for d, s0, f0 in trial.values():
                busy[d].remove((s0, f0))
    if not placed:
        return partial, module.tasks
    new = replace(partial, device_of=dict(partial.device_of), start=dict(partial.start),
                  finish=dict(partial.finish), free=dict(partial.free))
    for j, (d, s0, f0) in placed.items():
        new.device_of[j], new.start[j], new.finish[j] = d, s0, f0
        new.free[d] = max(new.free.get(d, 0.0), f0)
        new.makespan = max(new.makespan, f0)
    new.open = partial.open | frozenset(j for j in placed if look.last_module[j[0]] > index)
    hoisted = {t for t, _ in placed}
    return new, tuple(t for t in module.tasks if t not in hoisted)


def _pins(problem: Problem, module_tasks, sizes, partial: _Partial, exit_task: str, exit_devices) -> dict:
    """Devices jobs are pinned to: the exit option, and co-location with tasks placed earlier."""
    only: dict = {}
    groups = problem.colocation_groups
    for t in module_tasks:
        group = problem.graph.by_id[t].colocation
        if group in groups:
            for l in range(len(sizes)):
                placed = [partial.device_of[(m, l)] for m in groups[group] if (m, l) in partial.device_of]
                if placed:
                    only[(t, l)] = (placed[0],)
    if exit_devices is not None:
        for l, d in enumerate(exit_devices):
            if (exit_task, l) in only and d not in only[(exit_task, l)]:
                only[(exit_task, l)] = ()
            else:
                only[(exit_task, l)] = (d,)
    return only


def _advance(problem: Problem, partial: _Partial, tasks: tuple[str, ...], sizes, release_abs: dict,
             answer: _Answer, memory_binds: bool, look: "_Lookahead", index: int) -> _Partial:
    """The partial schedule extended by a module's answer, re-timed as early as possible in real units
    (``release_abs``: each job's earliest start on each device, after the partial's work there)."""
    graph = problem.graph
    module = JobGraph(problem, sizes, tasks, release_abs)
    start, finish = module.retime(answer.device_of, answer.order_key)
    new = _Partial({**partial.device_of, **answer.device_of}, {**partial.start, **start},
                   {**partial.finish, **finish}, dict(partial.free), dict(partial.memory_left), partial.resident,
                   max([partial.makespan, *finish.values()]))
    resident = set(partial.resident)
    for j, d in answer.device_of.items():
        new.free[d] = max(new.free.get(d, 0.0), finish[j])
        if memory_binds and (j[0], d) not in resident:
            resident.add((j[0], d))
            new.memory_left[d] -= graph.by_id[j[0]].memory_bytes
    new.resident = frozenset(resident)
    new.open = frozenset(j for j in partial.open | set(module.jobs) if look.last_module[j[0]] > index)
    new.estimate = max([new.makespan] + [new.finish[j] + look.after(j, index) for j in new.open])
    return new


class _Lookahead:
    """The fastest path after each job through the modules after a given one (every task on its fastest
    device, transfers free): what ranks partial schedules with different tensors still open."""

    def __init__(self, problem: Problem, chain: Chain, sizes: tuple[int, ...]):
        graph = problem.graph
        self.graph, self.module_of, self.constants = graph, chain.module_of, chain.constants
        self.bottom: dict[JobKey, float] = {}
        for t in reversed(graph.topological_order):
            for l, b in enumerate(sizes):
                fastest = min(problem.time(t, d, b) for d in problem.allowed_devices[t])
                self.bottom[t, l] = fastest + max((self.bottom[s, l] for s in graph.successors[t]), default=0.0)
        self.last_module = {t: max((chain.module_of[s] for s in graph.successors[t]), default=-1)
                            for t in graph.topological_order}

    def after(self, job: JobKey, index: int) -> float:
        t, l = job
        return max((self.bottom[s, l] for s in self.graph.successors[t] if self.module_of[s] > index), default=0.0)


@dataclass
class _JoinResult:
    partial: _Partial | None
    solves: int = 0
    optimal_solves: int = 0
    heft_solves: int = 0
    repaired: bool = False
    lower: float = 0.0
    share_bound: bool = False  # some solve ended unproven at a limit below module_time_limit
    dominated: int = 0  # states dropped because another one dominated them
    cut_off: int = 0  # solves ended by their cutoff: proven not to improve on a state already reached
    late: int = 0  # of those, by the deadlines of the jobs read later (see _late)
    guided: int = 0  # solves started from an earlier module's schedule
    twins: int = 0  # solves of modules without their constants, for the DP on bounds
    out_of_time: tuple[int, int] | None = None  # (module it stopped before, modules) when the time ran out


def _exit_options(problem: Problem, exit_task: str, copies: int) -> list[tuple[str, ...] | None]:
    devices = problem.allowed_devices[exit_task]
    uniform = [tuple([d] * copies) for d in devices]
    return uniform if copies == 1 else uniform + [None]


def _join(problem: Problem, chain: Chain, sizes: tuple[int, ...], pool: _Pool, watch: Stopwatch, *,
          memory_binds: bool, module_time_limit: float, seed: int, progress, label: str,
          bounds: bool = False, scale: float = 1.0) -> _JoinResult:
    """The Viterbi walk over the chain for one batch split (``memory_binds``: track memory budgets;
    ``bounds``: the DP on the module solves' bounds bounds the optimum, see :func:`chain_bounds`).

    Each step gets a share of the time left in proportion to its module's size, times ``scale``, spread
    over the solves the pool runs side by side (and never more than the time left)."""
    look = _Lookahead(problem, chain, sizes)
    states: dict = {(): _Partial(memory_left={d.name: d.memory_bytes for d in problem.platform.devices})}
    result = _JoinResult(None)
    n = len(chain.modules)
    remaining = sum(len(m.tasks) for m in chain.modules)
    for i, module in enumerate(chain.modules):
        if watch.expired:  # the rest would run on the pool's round trips alone (50,000 tasks: a minute more)
            result.out_of_time = (i + 1, n)
            return result
        requests = len(states) * len(_exit_options(problem, module.exit, len(sizes)))
        # this step's share of the time (in proportion to its size), spread over the solves run side by side
        share = watch.left * len(module.tasks) / remaining
        remaining -= len(module.tasks)
        parallel = min(pool.workers, requests) / requests
        limit = min(module_time_limit, share * scale * parallel, watch.left * parallel)
        before = result.optimal_solves, result.solves
        # chain bounds hold only where memory cannot bind, so the repair below never runs with them
        new_states = _step(problem, i, module, sizes, states, pool, limit, time.time() + watch.left, seed,
                           memory_binds, look, result, bounds)
        if limit < module_time_limit and result.optimal_solves - before[0] < result.solves - before[1]:
            result.share_bound = True
        if not new_states and memory_binds:
            # no state can hold this module: place the rest ignoring memory, and repair at the end
            memory_binds, result.repaired = False, True
            new_states = _step(problem, i, module, sizes, states, pool, limit, time.time() + watch.left, seed,
                               memory_binds, look, result, bounds)
        if not new_states:
            return result
        states = new_states
        if progress:
            best = min(p.estimate for p in states.values())
            progress(f"  {label}: module {i + 1}/{n} ({len(module.tasks)} tasks), best estimate "
                     f"{best:.6g} at {watch.elapsed:.1f} s")
    result.partial = min(states.values(), key=lambda p: p.makespan)
    result.lower = min(p.lower for p in states.values())
    return result


def _step(problem: Problem, index: int, module, sizes, states: dict, pool: _Pool, limit: float, deadline: float,
          seed: int, memory_binds: bool, look: _Lookahead, result: _JoinResult, bounds: bool) -> dict:
    """Solve ``module`` after every state for every exit option, each solve given ``limit`` seconds of work
    and ending by ``deadline`` (time.time()); the best new partial per exit state that no other dominates.

    The best-ranked state goes first. The others' solves then carry a cutoff on the module's makespan: the
    estimate already reached for their exit state, less their origin (and, where the exit closes the
    module, less the exit's fastest path after it, its *tail*). A schedule that cannot end sooner cannot
    improve on the state reached, and CP-SAT stops as soon as it proves there is none (a bound in hand);
    below the cutoff it finds the same optimum, so the cutoffs never change the plan. One whose partial
    alone already reaches that estimate is not solved. Where other jobs are read later, the solve first
    tests whether any schedule ends each of them its tail before the cutoff (:func:`_late`), and only then
    runs as above: most end there (densenet121: 107 of 108, 2.2 s of CPU down to 0.4 s). Solving with those
    deadlines instead would cut off as many but find other schedules, and steered the Viterbi join
    elsewhere (randwire-ba-s0's plan fell back to HEFT's, 1.3% worse); the test alone changes no plan.

    Where the chain bounds the optimum (``bounds``) and the module keeps constants that :func:`_hoist` could
    not place early, each solve has a twin without them, for the DP on bounds only: the optimum may run a
    constant long before its module, so the module's span there is at least the optimum of the module
    without its constants (their outputs already everywhere), not of the module with them."""
    jobs = [(t, l) for t in module.tasks for l in range(len(sizes))]
    first, _ = _origin_terms(problem, module.tasks, sizes, look.constants)
    new_states: dict = {}
    lowest: dict = {}  # state -> the least lower bound over the ways into it (the DP on bounds)
    ranked_keys = list(states)  # best estimate first (see the end of this function)
    tails = {j: look.after(j, index) for j in jobs if look.last_module[j[0]] > index}
    # where the exit ends the module (every other task feeds it) and alone is read later, the same tail for
    # every copy, the estimate is the exit's end plus that tail
    series_tail = None
    if (set(tails) <= {(module.exit, l) for l in range(len(sizes))} and len(set(tails.values())) <= 1
            and all(problem.graph.successors[t] for t in module.tasks if t != module.exit)):
        series_tail = max(tails.values(), default=0.0)
    for batch in (ranked_keys[:1], ranked_keys[1:]):
        requests, keys, settled, twins = [], [], [], []
        for key in batch:
            partial, tasks = _hoist(problem, states[key], module, sizes, first, look, index, memory_binds)
            # the module without its constants, where its bound solves need them
            unconstant = tuple(t for t in tasks if t not in look.constants)
            if not bounds or not any(_takes_time(problem, t) for t in tasks if t in look.constants):
                unconstant = None
            release_abs = _releases(problem, [(t, l) for t in tasks for l in range(len(sizes))], sizes, partial)
            origin = (min(v for ((t, _), _), v in release_abs.items() if t in first)
                      - _origin_terms(problem, tasks, sizes, look.constants)[1])
            release = {k: v - origin for k, v in release_abs.items() if v - origin > 0}
            capacity = dict(partial.memory_left) if memory_binds else None
            # what the partial alone sets its successors' estimates to: its makespan, its open tensors' tails
            fixed = max([partial.makespan] + [partial.finish[j] + look.after(j, index) for j in partial.open
                                              if look.last_module[j[0]] > index])
            for option in _exit_options(problem, module.exit, len(sizes)):
                reached = new_states[option].estimate if option in new_states else None
                if reached is not None and fixed >= reached:
                    settled.append(((key, partial, tasks, option, release_abs, origin),
                                    _Answer(None, None, "cutoff"),
                                    _critical_path(problem, unconstant or tasks, sizes, release)))
                    continue
                only = _pins(problem, tasks, sizes, partial, module.exit, option)
                # the new partial's estimate is at least its makespan, and at a series exit its makespan
                # plus the exit's tail: a module schedule that cannot end sooner cannot improve on it
                cutoff = None if reached is None else reached - origin - (series_tail or 0.0)
                late = {j: v for j, v in tails.items() if j[0] in tasks}
                requests.append(_Request(tasks, sizes, release, only, capacity, limit, deadline, seed, cutoff,
                                         late if cutoff is not None and series_tail is None else None))
                keys.append((key, partial, tasks, option, release_abs, origin))
                twins.append(None if unconstant is None else _Request(
                    unconstant, sizes, {k: v for k, v in release.items() if k[0][0] not in look.constants},
                    {j: v for j, v in only.items() if j[0] not in look.constants}, None, limit, deadline, seed))
        answers = pool.map(requests + [t for t in twins if t is not None])
        answers, twin_answers = answers[:len(requests)], iter(answers[len(requests):])
        # the DP on bounds reads each twin's bound where there is a twin, the solve's own otherwise
        twin_of = [None if t is None else next(twin_answers) for t in twins]
        bounds_of = [(t or a).bound for a, t in zip(answers, twin_of)]
        twins_solved = sum(t is not None for t in twin_of)
        result.twins += twins_solved
        result.solves += len(answers) + len(settled) + twins_solved
        result.optimal_solves += sum(t is not None and t.status == "optimal" for t in twin_of)
        for (key, partial, tasks, option, release_abs, origin), answer, bound in (
                list(zip(keys, answers, bounds_of)) + settled):
            result.optimal_solves += answer.status in ("optimal", "cutoff", "late")
            result.heft_solves += answer.status == "heft"
            result.cut_off += answer.status in ("cutoff", "late")
            result.late += answer.status == "late"
            result.guided += answer.guided
            lower = partial.lower + (origin - partial.makespan) + bound
            if answer.device_of is None:
                if option in lowest and answer.status != "infeasible":  # its cutoff's bound (or none) counts
                    lowest[option] = min(lower, lowest[option])
                continue
            nxt = _advance(problem, partial, tasks, sizes, release_abs, answer, memory_binds, look, index)
            state = tuple(nxt.device_of[(module.exit, l)] for l in range(len(sizes)))
            lowest[state] = min(lower, lowest.get(state, lower))
            if state not in new_states or nxt.estimate < new_states[state].estimate:
                new_states[state] = nxt
    for state, p in new_states.items():
        p.lower = lowest[state]
    ranked = sorted(new_states.items(), key=lambda kv: kv[1].estimate)
    kept: list = []
    for state, p in ranked:
        if not any(_dominates(problem, sizes, q, p, bounds, memory_binds) for _, q in kept):
            kept.append((state, p))
    result.dominated += len(ranked) - len(kept)
    # one state per exit device is the exact DP for one copy; with several copies keep the best few
    beam = len(problem.platform.devices) + 1
    return dict(kept[:beam])


def _critical_path(problem: Problem, tasks, sizes, release: dict) -> float:
    """A lower bound on a module's end after its origin: the longest path through ``tasks`` from their
    releases, each job on its fastest device, transfers free (for a solve skipped, the DP on bounds)."""
    members = set(tasks)
    ready: dict = {}
    end = 0.0
    for t in tasks:
        for l, b in enumerate(sizes):
            devices = problem.allowed_devices[t]
            start = max([min(release.get(((t, l), d), 0.0) for d in devices)]
                        + [ready[u, l] for u in problem.graph.predecessors[t] if u in members])
            ready[t, l] = start + min(problem.time(t, d, b) for d in devices)
            end = max(end, ready[t, l])
    return end


def _origin_terms(problem: Problem, tasks: tuple[str, ...], sizes, constants: frozenset) -> tuple[frozenset, float]:
    """What a module's solves are timed from: the earliest its *first* non-constant tasks (returned) can
    start, less *ahead* (returned): what its constants (no graph input reaches them) could take with the
    sending of their outputs, so that they may still be ready by then at no loss.

    The earliest release of any job would do as well but ties each solve to absolute times (an idle
    device, or a mask made once for every layer, is ready long before), so repeated modules would share
    no answers."""
    graph, platform = problem.graph, problem.platform
    members = set(tasks) - constants
    first = frozenset(t for t in members if not any(u in members for u in graph.predecessors[t]))
    ahead = sum(max(problem.time(t, d, b) for d in problem.allowed_devices[t])
                + max(problem.transfer(t, d, e, b / graph.batch_size)
                      for d in problem.allowed_devices[t] for e in platform.by_name)
                for t in tasks if t in constants for b in sizes)
    return first, ahead


def _dominates(problem: Problem, sizes, q: _Partial, p: _Partial, bounds: bool, memory_binds: bool) -> bool:
    """Whether every continuation of partial ``p`` can follow ``q`` unchanged and end no later, so that ``p``
    need not be extended (the next module is then solved for fewer states).

    A continuation appends jobs after each device's last one and reads the open tensors: it fits after ``q``
    when each device is free no later there, each open tensor reaches every device no later and (when memory
    binds) each device has no less memory left. Where the DP on bounds is a bound (``bounds``, see
    :func:`chain_bounds`) the only open tensor is the series point's, every device is free once it is
    computed, and ``p``'s finish is replaced by ``p.lower`` (the earliest any plan into ``p``'s state
    computes it), so that the DP on the states kept stays a bound."""
    if problem.colocation_groups or p.open != q.open:
        return False
    graph, platform = problem.graph, problem.platform
    devices = [d.name for d in platform.devices]

    def arrival(partial: _Partial, job, device: str, finish: float) -> float:
        return finish + problem.transfer(job[0], partial.device_of[job], device, sizes[job[1]] / graph.batch_size)

    if bounds and len(p.open) == 1:
        (job,) = p.open
        return all(arrival(q, job, e, q.finish[job]) <= arrival(p, job, e, p.lower) for e in devices)
    if bounds:
        return False
    if any(q.free.get(e, 0.0) > p.free.get(e, 0.0) for e in devices):
        return False
    if memory_binds and any(q.memory_left[e] < p.memory_left[e] for e in devices):
        return False
    return all(arrival(q, j, e, q.finish[j]) <= arrival(p, j, e, p.finish[j]) for j in p.open for e in devices)


def _plan_of(problem: Problem, sizes, res: _JoinResult, bounds: bool, watch: Stopwatch,
             notes: list) -> Plan | None:
    """The join's plan (memory repaired where it had to be), or None with a note saying why there is none."""
    if res.partial is None:
        if res.out_of_time is not None:
            stopped, modules = res.out_of_time
            notes.append(f"the join ran out of time before module {stopped} of {modules} ({len(sizes)} "
                         "sub-batch(es)): no plan from it")
        else:
            notes.append(f"the join found no plan for {len(sizes)} sub-batch(es) within the pins and memory")
        return None
    device_of = res.partial.device_of
    if res.repaired:
        try:
            device_of = repair_memory(problem, device_of)
        except InfeasibleError:
            notes.append(f"the plan for {len(sizes)} sub-batch(es) overflowed memory beyond repair")
            return None
    bound = res.lower if bounds and not res.repaired else None
    return heft.plan_from_jobs(JobGraph(problem, sizes), device_of, res.partial.start, solver=NAME,
                               status="feasible", watch=watch, bound=bound, bound_source=MODULE_DP)


def repair_memory(problem: Problem, device_of: dict[JobKey, str]) -> dict[JobKey, str]:
    """Move tasks (with their co-location group and every sub-batch) off devices whose memory they overflow,
    largest first, each to the allowed device with room where it runs fastest."""
    graph, platform = problem.graph, problem.platform
    device_of = dict(device_of)
    owners = {}
    for t in graph.tasks:
        group = problem.colocation_groups.get(t.colocation, (t.id,)) if t.colocation else (t.id,)
        owners[t.id] = group

    def used() -> dict[str, float]:
        out = {d.name: 0.0 for d in platform.devices}
        for t, d in {(j[0], d) for j, d in device_of.items()}:
            out[d] += graph.by_id[t].memory_bytes
        return out

    load = used()
    for t in sorted(graph.tasks, key=lambda t: -t.memory_bytes):
        if t.memory_bytes <= 0:
            continue
        devices = {d for j, d in device_of.items() if j[0] == t.id}
        if all(load[d] <= platform.by_name[d].memory_bytes for d in devices):
            continue
        members = owners[t.id]
        need = sum(graph.by_id[m].memory_bytes for m in members)
        options = [d for d in problem.allowed_devices[t.id]
                   if all(d in problem.allowed_devices[m] for m in members)
                   and load[d] + need <= platform.by_name[d].memory_bytes]
        if not options:
            raise InfeasibleError("split could not repair the memory of its plan")
        target = min(options, key=lambda d: sum(problem.time(m, d) for m in members))
        for j in list(device_of):
            if j[0] in members:
                device_of[j] = target
        load = used()
    return device_of


def check_options(*, module_size: int = 20, module_time_limit: float = 0.5, **_) -> None:
    if module_size < 1:
        raise InputError(f"module size must be at least 1 task, got {module_size}")
    if not module_time_limit > 0:
        raise InputError(f"module time limit must be positive, got {module_time_limit}")


def separable(problem: Problem, chain: Chain) -> bool:
    """Whether the latency optimum is the chain DP of the modules' optima: the chain bounds the optimum
    (:func:`chain_bounds`) and no constant takes time (one that does may run earlier in the optimum than in
    its consumers' module)."""
    return chain_bounds(problem, chain) and not any(_takes_time(problem, c) for c in chain.constants)


def chain_bounds(problem: Problem, chain: Chain) -> bool:
    """Whether the DP on the module solves' bounds bounds the optimum: the latency objective, every cut a
    series point, no memory limit that can bind, no co-location coupling modules, and every constant (a
    task no graph input reaches, e.g. a weight transpose) in its consumers' module, where the bound solves
    leave it out (:func:`_step`)."""
    if (problem.objective.kind != "latency" or chain.multi_channel_cuts or problem.colocation_groups
            or JobGraph.whole(problem).memory_limits()):
        return False
    module_of = chain.module_of
    return all(module_of[v] == module_of[c] for c in chain.constants for v in problem.graph.successors[c])


def solve(problem: Problem, *, time_limit: float = 60.0, seed: int = 0, workers: int | None = None,
          module_size: int = 20, module_time_limit: float = 0.5, progress=None) -> Plan:
    """MILP-SPLIT: modules of at most ``module_size`` tasks (a group between series points up to twice that
    stays whole: its cuts are exact), each solve given at most ``module_time_limit`` seconds of work
    (CP-SAT's deterministic time, :data:`.cpsat.WORK_PER_SECOND`: the plan does not depend on the machine's
    load; ``time_limit`` is on the clock)."""
    check_options(module_size=module_size, module_time_limit=module_time_limit)
    whole_size = 2 * module_size
    return solve_chain(problem, detect(problem.graph, module_size, whole_size=whole_size), time_limit=time_limit,
                       seed=seed, workers=workers, module_time_limit=module_time_limit, progress=progress,
                       size_note=f"at most {module_size} tasks, whole series groups up to {whole_size}; ")


def solve_chain(problem: Problem, chain: Chain, *, time_limit: float, seed: int = 0, workers: int | None = None,
                module_time_limit: float, progress=None, label: str = NAME, size_note: str = "") -> Plan:
    """Solve each module of ``chain`` for every (state, exit) pair and join them; the best plan of the join
    and the baselines, proven optimal when the chain is :func:`separable` and every module solve is."""
    watch = Stopwatch(time_limit)
    workers = workers or max(os.cpu_count() or 1, 1)
    background = _Baseline(problem, watch, workers)
    splits = promising_splits(problem)
    if progress:
        progress(f"{label}: {len(chain.modules)} modules ({size_note}{len(chain.series_points)} "
                 f"series points, {chain.multi_channel_cuts} multi-channel cuts, widest {chain.widest_cut} "
                 f"tensors), {workers} worker(s)")
    memory_binds = bool(JobGraph.whole(problem).memory_limits())
    # with series cuts only, the DP run on the module solves' bounds (constants left out) bounds the optimum
    bounds = chain_bounds(problem, chain)
    exact_chain = separable(problem, chain)
    chain_bound, proven = None, False
    pool = _Pool(problem, workers)
    baseline = best = None
    stats, notes = {}, []
    solves = optimal = heft_only = passes = dominated = cut_off = late = guided = twins = 0
    try:
        for i, sizes in enumerate(splits):
            share = Stopwatch(watch.left / (len(splits) - i))
            scale = 1.0
            while True:
                res = _join(problem, chain, sizes, pool, share, memory_binds=memory_binds,
                            module_time_limit=module_time_limit, seed=seed, progress=progress, scale=scale,
                            bounds=bounds,
                            label=label + (f" [{len(sizes)} sub-batches]" if len(splits) > 1 else ""))
                passes += 1
                solves, optimal = solves + res.solves, optimal + res.optimal_solves
                heft_only += res.heft_solves
                dominated += res.dominated
                cut_off += res.cut_off
                late += res.late
                guided += res.guided
                twins += res.twins
                if passes == 1:  # the baseline is due: the join's plan is compared with it and needs its bound
                    baseline = best = background.result()
                plan = _plan_of(problem, sizes, res, bounds, watch, notes)
                if plan is not None and bounds:
                    chain_bound = max(chain_bound or 0.0, res.lower)
                    proven = proven or (exact_chain and res.optimal_solves == res.solves)
                if plan is not None and (best is None or plan.objective < best.objective):
                    best = plan
                    stats["join_makespan"] = res.partial.makespan
                    notes = [n for n in notes if not n.startswith(("batch split", "memory repaired"))]
                    if res.repaired:
                        notes.append("memory repaired: a module fitted no state's budget, tasks were moved after")
                    if len(sizes) > 1:
                        notes.append(f"batch split into {len(sizes)} sub-batches "
                                     f"({'/'.join(map(str, sizes))} samples)")
                # a chain of series cuts with unfinished module solves is walked again with 4x their time
                # (a tighter bound, maybe a better plan); proven answers are reused, so the time goes to the rest
                if (proven or plan is None or not bounds or not res.share_bound
                        or share.left < 0.05 * share.limit):
                    break
                scale *= 4
    finally:
        pool.close()
        background.close()
    if best is None and watch.left > 0.1 and label == NAME:
        # the modules' memory budgets are a heuristic cut of the devices' memory: the whole model may still fit
        from . import exact
        try:
            whole = exact.solve(problem, time_limit=watch.left, seed=seed, workers=workers, decompose=False)
        except InfeasibleError:
            whole = None
        if whole is not None:
            return replace(whole, notes=whole.notes + (
                f"{NAME}: neither the join nor a baseline fitted the memory; this is the whole-graph CP-SAT plan",))
    if best is None:
        raise InfeasibleError(f"{label} found no plan within the memory limits and no baseline fits: raise the "
                              "memory limit or the module size")
    if best.solver != NAME:
        notes.append(f"kept the baseline plan ({best.solver}): the join found nothing better")
    if chain_bound is not None:
        stats["chain_bound"] = chain_bound
        freed = " (solved again without their constants, which may run earlier)" if twins else ""
        notes.append("every cut is a series point: the bound is the join's dynamic program on the module bounds"
                     + freed)
    bound, source = better_bound((best.bound, best.bound_source), (min(chain_bound or 0.0, best.objective), MODULE_DP))
    walks = f" in {passes} passes" if passes > len(splits) else ""
    notes.insert(0, f"{len(chain.modules)} modules ({len(chain.series_points)} series points, "
                    f"{chain.multi_channel_cuts} multi-channel cuts, widest {chain.widest_cut} tensors); "
                    f"{solves} module solves{walks} ({pool.reused} answered without solving, {cut_off} ended by their "
                    f"cutoff ({late} by their jobs' deadlines), {guided} started from an earlier module's "
                    f"schedule), {optimal} proven, {heft_only} unsolved (first schedule kept); {dominated} dominated "
                    "states dropped")
    stats.update({"modules": float(len(chain.modules)), "module_solves": float(solves),
                  "module_solves_reused": float(pool.reused),
                  "module_solves_optimal": float(optimal), "module_solves_heft": float(heft_only),
                  "dominated_states": float(dominated), "module_solves_cut_off": float(cut_off),
                  "module_solves_late": float(late),
                  "module_solves_guided": float(guided),
                  "widest_cut": float(chain.widest_cut)})
    if baseline is not None:
        stats["baseline_objective"] = baseline.objective
    # as for exact: "optimal" when the integer models are proven optimal (here every module's, on a chain)
    unfinished = heft_only or optimal < solves
    status = "optimal" if (proven and best.solver == NAME) or best.objective <= bound * (1 + 1e-9) else (
        "timeout" if (bounds and unfinished) or heft_only or watch.expired else "feasible")
    return replace(best, solver=NAME, status=status, bound=bound, bound_source=source, solve_time_s=watch.elapsed,
                   notes=tuple(notes), stats={**best.stats, **stats})
