"""The CP-SAT model of a job graph: the engine of `exact` (whole graphs) and `split` (modules).

Model: one optional interval per (job, allowed device) sharing the job's start and end; exactly one device
per job; NoOverlap per device; for every edge, the consumer starts after the producer ends plus the transfer
between the two devices chosen (enforced on the pair of assignment literals); memory per device;
co-location; symmetry breaking for identical devices; makespan minimised; a first schedule (HEFT's) as a hint.

Time scale: times become integers in ticks of ``tick = UB / resolution`` where UB is the best baseline
makespan (``resolution`` = 10^7 by default). Durations and transfers are rounded *down*, so the integer
model is a relaxation: its bound times the tick is a valid bound on the real optimum. The plan it finds is
re-timed by the simulator in real units; the difference (at most about 2 ticks per job on the critical
path) is reported as ``rounding_gap`` and shows in the plan's gap. "optimal" means CP-SAT proved the
integer model optimal.
"""

from __future__ import annotations

import math
import os
import time
from dataclasses import dataclass
from typing import Sequence

from ortools.sat.python import cp_model

from ...bounds import Cut
from ...graph import longest_paths
from .jobs import JobGraph
from .outcome import Outcome
from .symmetry import base, ordered_pairs

# CP-SAT's deterministic time (a count of its work) per second of one core of the reference machine (the
# 2-core development machine): its median over MILP-SPLIT's module solves (one worker, no presolve) was
# 0.12, 0.16, 0.14 and 0.11 on inception_v3, densenet121, gpt2-small and randwire-ws-s0; the mean of those.
# ``work_limit`` converts at this rate.
WORK_PER_SECOND = 0.13
DEVICE_PATHS = 500_000  # edges x device pairs up to which heads and tails are taken per device (0.3 s to sum)


def seconds_for(model: cp_model.CpModel, left: float) -> float:
    """What CP-SAT may be given of ``left`` seconds so that it ends within them: on a large model it runs past
    its limit (loading and presolve: 6.4 s of a 5 s limit on the 512,743 variables of call-exact's model of
    GPT-3 over six-servers, 10.3 s of 10 s; 74,012 variables: on time), so 3 microseconds per variable are
    kept back."""
    return max(left - 3e-6 * len(model.Proto().variables), 0.01)


def solve_jobs(jobs: JobGraph, *, upper: float, time_limit: float, seed: int = 0, workers: int | None = None,
               symmetry: str = "tasks", resolution: int = 10_000_000, small: bool = False,
               cutoff: float | None = None, deadlines: dict | None = None, first_only: bool = False,
               work_limit: float | None = None, progress=None, hint: tuple[dict, dict] | None = None,
               on_incumbent=None, floor: float = 0.0, cuts: Sequence[Cut] = (),
               portfolio: Sequence[str] = ()) -> Outcome:
    """CP-SAT on a job graph; ``upper`` (a known makespan) fixes the time scale; ``hint``: a first schedule
    (device and start per job: the best baseline's or HEFT's, :func:`..search.start_hint`, respecting
    ``symmetry``).

    ``cutoff``: only schedules whose makespan is at most the cutoff count; "infeasible" then proves that
    none exists (times round down, so no schedule meeting the cutoff in real units is cut off).
    ``deadlines`` (job -> latest end) likewise. ``first_only``: stop at the first schedule (status
    "timeout"): a feasibility test. ``work_limit``: a second limit, in seconds of one core of the reference
    machine counted by CP-SAT's deterministic time (:data:`WORK_PER_SECOND`): one worker then ends at the
    same point, with the same answer, however loaded the machine is (``time_limit`` still caps the wall
    time); the work used is ``stats["work"]``, in the same unit. ``floor``: a lower bound on the makespan
    proven elsewhere (the problem's, or a cutoff :mod:`.probes` proved out), so that the model's bound starts there; ``cuts``: rows
    every latency schedule meets (:func:`...bounds.energetic_cuts`, on the whole batch's jobs), added so that
    CP-SAT's relaxation starts near the LP's.
    ``portfolio``: CP-SAT's subsolvers by name (:data:`.probes.PORTFOLIO`), one a worker on the whole model, its
    LP at level 1 unless the subsolver sets its own, where the workers are at most as many; else CP-SAT chooses.
    Whole graphs gain from linearization level 2 (stronger bounds). ``small`` (MILP-SPLIT's modules of
    10-30 jobs) turns linearization and presolve off: measured 5-14x faster there, optima unchanged."""
    began = time.perf_counter()  # building the model counts against the limit too (20,000 tasks: seconds)
    tick = max(upper, 1e-300) / resolution

    def ticks(x: float) -> int:  # beyond twice the horizon, a time only forbids (all times zero: UB = 0)
        scaled = x / tick
        return int(math.floor(scaled + 1e-9)) if scaled < 2 * resolution else 2 * resolution

    # the model in phases: variables and devices, precedence with transfers, memory, co-location and
    # symmetry, the makespan with its redundant cuts, then the first schedule as a hint
    m = _Model()
    v = _variables(m, jobs, ticks, resolution, began + time_limit)
    if v is None or not _precedence(m, jobs, v, ticks, began + time_limit):
        return Outcome(None, None, "unknown", 0.0, None, {"tick": tick, "work": 0.0, "note": (
            f"the CP-SAT model ({len(jobs.jobs):,} jobs on {len(jobs.problem.platform.devices)} devices) took "
            "longer to build than the time it had; a longer --time-limit builds it")})
    _memory(m, jobs, v.x)
    _colocation(m, jobs, v.x)
    _symmetry(m, jobs, v.x, symmetry, ticks)
    makespan = _makespan(m, jobs, v, ticks, resolution, cutoff, deadlines, on_devices=not small)
    if floor > 0:
        m.add(makespan >= ticks(floor))  # rounded down like every time here: no schedule is cut off
    _cuts(m, v, makespan, ticks, cuts)
    if hint is not None:
        _hint(m, jobs, v, ticks, hint)
    solver = _solver(seconds_for(m, time_limit - (time.perf_counter() - began)), seed=seed, workers=workers,
                     small=small, first_only=first_only, work_limit=work_limit, portfolio=portfolio)
    callback = Progress(progress, tick, on_incumbent) if (progress or on_incumbent) else None
    code = solver.solve(m, callback) if callback else solver.solve(m)
    return _outcome(jobs, solver, code, v, tick, makespan)


def _solver(seconds: float, *, seed: int, workers: int | None, small: bool, first_only: bool,
            work_limit: float | None, portfolio: Sequence[str]) -> cp_model.CpSolver:
    """CP-SAT with :func:`solve_jobs`'s parameters: ``workers`` (default one a core), the LP's level and
    presolve by the model's size, and the ``portfolio``'s full-model workers where it has enough."""
    solver = cp_model.CpSolver()
    solver.parameters.max_time_in_seconds = seconds
    solver.parameters.random_seed = seed
    count = workers or max(os.cpu_count() or 1, 1)
    solver.parameters.num_workers = count
    solver.parameters.linearization_level = 0 if small else 2
    solver.parameters.cp_model_presolve = not small
    solver.parameters.stop_after_first_solution = first_only
    if count <= len(portfolio):  # a worker per subsolver, each on the whole model
        solver.parameters.linearization_level = 1  # the level of "default_lp"; "no_lp" sets its own
        if count > 1:  # one worker runs these parameters as they are (CP-SAT's "main", as measured)
            solver.parameters.subsolvers.extend(portfolio[:count])
            solver.parameters.num_full_subsolvers = count
    if work_limit is not None:
        solver.parameters.max_deterministic_time = max(work_limit, 0.0) * WORK_PER_SECOND
    return solver


@dataclass(frozen=True)
class _Vars:
    """The model's variables: start[j], end[j] per job; x[j, d] job j on device d; its duration there in
    ticks; the optional intervals of each device."""
    start: dict
    end: dict
    x: dict
    duration: dict
    per_device: dict


def _variables(m: cp_model.CpModel, jobs: JobGraph, ticks, horizon: int, deadline: float) -> _Vars | None:
    """A job's start and end, one optional fixed-size interval per allowed device at its start (the end follows
    the device chosen), exactly one device, no overlap on a device, and no start before a job's release on the
    device chosen. None where building runs past ``deadline`` (``time.perf_counter()``: 3,000 jobs on 26
    devices took 1.8 s)."""
    start, end, x = {}, {}, {}
    duration = {(j, d): ticks(jobs.duration(j, d)) for j in jobs.jobs for d in jobs.devices(j)}
    per_device: dict[str, list] = {d.name: [] for d in jobs.problem.platform.devices}
    for j in jobs.jobs:
        if time.perf_counter() > deadline:
            return None
        name = f"{j[0]},{j[1]}"
        start[j] = m.new_int_var(0, horizon, f"start[{name}]")
        end[j] = m.new_int_var(0, horizon, f"end[{name}]")
        for d in jobs.devices(j):
            lit = x[j, d] = m.new_bool_var(f"x[{name},{d}]")
            # a fixed-size interval per device and the end tied to it under the device's literal: optional
            # intervals of different sizes sharing one end variable let CP-SAT 9.10-9.15 prove a feasible model
            # infeasible (tests/solvers/test_cpsat.py has the four-job case fuzzing found)
            per_device[d].append(m.new_optional_fixed_size_interval_var(start[j], duration[j, d], lit,
                                                                        f"on[{name},{d}]"))
            m.add(end[j] == start[j] + duration[j, d]).only_enforce_if(lit)
            if jobs.released(j, d) > 0:
                m.add(start[j] >= ticks(jobs.released(j, d))).only_enforce_if(lit)
        m.add_exactly_one(x[j, d] for d in jobs.devices(j))
    for ivs in per_device.values():
        if len(ivs) > 1:
            m.add_no_overlap(ivs)
    return _Vars(start, end, x, duration, per_device)


def _precedence(m: cp_model.CpModel, jobs: JobGraph, v: _Vars, ticks, deadline: float) -> bool:
    """A consumer starts after its producer ends, plus the transfer between the devices chosen (linear in the
    producer's assignment, 0 when both are on one device), enforced on the consumer's device literal. False
    where building runs past ``deadline`` (``time.perf_counter()``): pairs of devices grow with their square."""
    for job in jobs.jobs:
        if time.perf_counter() > deadline:
            return False
        for u in jobs.preds(job):
            m.add(v.start[job] >= v.end[u])
            for c in jobs.devices(job):
                comm = [(ticks(jobs.transfer(u, a, c)), v.x[u, a]) for a in jobs.devices(u) if a != c]
                comm = [(w, lit) for w, lit in comm if w > 0]
                if comm:
                    m.add(v.start[job] >= v.end[u] + sum(w * lit for w, lit in comm)).only_enforce_if(v.x[job, c])
    return True


def _makespan(m: cp_model.CpModel, jobs: JobGraph, v: _Vars, ticks, horizon: int, cutoff: float | None,
              deadlines: dict | None, on_devices: bool = True):
    """The makespan, minimised, with redundant but strengthening cuts: every job starts after its fastest
    path from a source and ends at least its fastest remaining path before the makespan, and each device's
    work fits below it; ``on_devices``: on whole models, the same paths where a job runs on each device, with
    the transfers that costs (MILP-SPLIT's modules, solved hundreds of times, keep the model they were
    measured with); the cutoff and deadlines where given."""
    makespan = m.new_int_var(0, horizon, "makespan")
    head, tail = _heads_and_tails(jobs, ticks, v.duration)
    for j in jobs.jobs:
        m.add(v.start[j] >= head[j])
        m.add(makespan >= v.end[j] + tail[j])
    for (j, d), (at, before_end) in (_heads_and_tails_on_devices(jobs, ticks, v.duration) if on_devices else {}).items():
        if at > head[j]:
            m.add(v.start[j] >= at).only_enforce_if(v.x[j, d])
        if before_end > tail[j]:
            m.add(makespan >= v.end[j] + before_end).only_enforce_if(v.x[j, d])
    for d in v.per_device:
        work = [(v.duration[j, d], v.x[j, d]) for j in jobs.jobs if (j, d) in v.x]
        if work:
            m.add(sum(w * lit for w, lit in work) <= makespan)
    if cutoff is not None:
        m.add(makespan <= ticks(cutoff))
    for j, latest in (deadlines or {}).items():
        m.add(v.end[j] <= ticks(latest))
    m.minimize(makespan)
    return makespan


def _cuts(m: cp_model.CpModel, v: _Vars, makespan, ticks, cuts: Sequence[Cut]) -> None:
    """Each cut on sub-batch 0 of its tasks, in ticks: coefficients rounded down and the offset less a tick, for
    the times of a schedule in ticks (rounded down) may lie a tick below its own."""
    def time_of(name: tuple[str, str]):
        kind, task = name
        return {"makespan": makespan, "start": v.start.get((task, 0)), "end": v.end.get((task, 0)), "zero": 0}[kind]

    for cut in cuts:
        terms = [(ticks(seconds), v.x[(t, 0), d]) for (t, d), seconds in cut.terms.items() if ((t, 0), d) in v.x]
        later, earlier = time_of(cut.later), time_of(cut.earlier)
        if later is not None and earlier is not None:
            m.add(sum(w * lit for w, lit in terms if w > 0) + max(0, ticks(cut.offset) - 1) <= later - earlier)


def _hint(m: cp_model.CpModel, jobs: JobGraph, v: _Vars, ticks, hint: tuple[dict, dict]) -> None:
    """A first schedule (device and start per job) as CP-SAT's hint."""
    hint_dev, hint_start = hint
    for j in jobs.jobs:
        s = ticks(hint_start[j])
        m.add_hint(v.start[j], s)
        m.add_hint(v.end[j], s + v.duration[j, hint_dev[j]])
        for d in jobs.devices(j):
            m.add_hint(v.x[j, d], d == hint_dev[j])


def _outcome(jobs: JobGraph, solver: cp_model.CpSolver, code, v: _Vars, tick: float, makespan) -> Outcome:
    """What CP-SAT found, in real time units: devices and starts, status, bound and statistics."""
    found = code in (cp_model.OPTIMAL, cp_model.FEASIBLE)
    bound = max(solver.best_objective_bound, 0) * tick if found else 0.0
    stats = {"tick": tick, "cp_sat_branches": float(solver.num_branches),
             "work": solver.deterministic_time / WORK_PER_SECOND}
    if code == cp_model.INFEASIBLE:
        return Outcome(None, None, "infeasible", math.inf, None, stats)
    if not found:
        return Outcome(None, None, "unknown", 0.0, None, stats)
    device_of = {j: next(d for d in jobs.devices(j) if solver.value(v.x[j, d])) for j in jobs.jobs}
    starts = {j: float(solver.value(v.start[j])) for j in jobs.jobs}
    status = "optimal" if code == cp_model.OPTIMAL else "timeout"
    return Outcome(device_of, starts, status, bound, solver.objective_value * tick, stats)


class _Model(cp_model.CpModel):
    """A CpModel without the camelCase aliases of its methods that ortools adds to every instance (about
    1 ms a model; MILP-SPLIT builds hundreds of small ones)."""

    def _add_pre_pep8_methods(self) -> None:
        pass


def _heads_and_tails(jobs: JobGraph, ticks, duration: dict) -> tuple[dict, dict]:
    """Longest paths before / after each job with every job on its fastest device and free transfers."""
    fastest = {j: min(duration[j, d] for d in jobs.devices(j)) for j in jobs.jobs}
    end = longest_paths(jobs.jobs, jobs.preds, fastest.__getitem__,
                        release=lambda j: min(ticks(jobs.released(j, d)) for d in jobs.devices(j)))
    from_end = longest_paths(reversed(jobs.jobs), jobs.succs, fastest.__getitem__)
    return {j: end[j] - fastest[j] for j in jobs.jobs}, {j: from_end[j] - fastest[j] for j in jobs.jobs}


def _heads_and_tails_on_devices(jobs: JobGraph, ticks, duration: dict) -> dict:
    """(job, device) -> (its head, its tail) where the job runs on that device: the earliest it can start
    there (each producer on whichever device lets it arrive first, its transfer to this device paid when it
    runs elsewhere, as the precedence rows charge it) and the least time from its end to the makespan (each
    consumer likewise). The model's own propagation sees only the fastest paths, transfers free, until the
    producers' devices are fixed; these let a cutoff rule a device out at once (:mod:`.probes`). Empty on
    models whose edges times device pairs exceed :data:`DEVICE_PATHS` (the sums take seconds there)."""
    pairs = sum(len(jobs.preds(j)) * len(jobs.devices(j)) ** 2 for j in jobs.jobs)
    if pairs > DEVICE_PATHS:
        return {}
    move: dict = {}

    def hop(u, a, c) -> int:
        if a == c:
            return 0
        if (u, a, c) not in move:
            move[u, a, c] = ticks(jobs.transfer(u, a, c))
        return move[u, a, c]

    head: dict = {}
    for j in jobs.jobs:
        for d in jobs.devices(j):
            head[j, d] = max([ticks(jobs.released(j, d))] + [min(head[u, a] + duration[u, a] + hop(u, a, d)
                                                                 for a in jobs.devices(u)) for u in jobs.preds(j)])
    tail: dict = {}
    for j in reversed(jobs.jobs):
        for d in jobs.devices(j):
            tail[j, d] = max([0] + [min(hop(j, d, c) + duration[w, c] + tail[w, c] for c in jobs.devices(w))
                                    for w in jobs.succs(j)])
    return {key: (head[key], tail[key]) for key in head}


def _memory(m, jobs: JobGraph, x) -> None:
    for dev, capacity, tasks in jobs.memory_limits():
        terms = []
        for task, nbytes in tasks:
            lits = [x[(task, l), dev] for l in range(len(jobs.sizes)) if ((task, l), dev) in x]
            if not lits:  # every job of the task is pinned elsewhere
                continue
            if len(lits) == 1:
                resident = lits[0]
            else:
                resident = m.new_bool_var("")
                m.add_max_equality(resident, lits)
            terms.append((int(math.ceil(nbytes)), resident))
        if terms:
            m.add(sum(w * lit for w, lit in terms) <= int(math.floor(capacity)))


def _colocation(m, jobs: JobGraph, x) -> None:
    for a, b, devices in jobs.colocated():
        for d in devices:
            la, lb = x.get((a, d)), x.get((b, d))
            if la is None or lb is None:
                m.add((la if la is not None else lb) == 0)
            else:
                m.add(la == lb)


def _symmetry(m, jobs: JobGraph, x, criterion: str, ticks) -> None:
    def weight(j, d):
        return 1 if base(criterion) == "tasks" else ticks(jobs.duration(j, d))
    for first, second in ordered_pairs(jobs.problem, criterion):  # identical devices (and servers)
        lhs = sum(weight(j, d) * x[j, d] for d in first for j in jobs.jobs if (j, d) in x)
        rhs = sum(weight(j, d) * x[j, d] for d in second for j in jobs.jobs if (j, d) in x)
        m.add(lhs >= rhs)


class Progress(cp_model.CpSolverSolutionCallback):
    """Reports CP-SAT incumbents and bounds in real time units (ticks x tick)."""

    def __init__(self, report, tick: float, on_incumbent=None):
        super().__init__()
        self.report, self.tick, self.on_incumbent = report, tick, on_incumbent

    def on_solution_callback(self):  # every incumbent to on_incumbent, at most one line a second to report
        if self.on_incumbent:
            self.on_incumbent(self.objective_value * self.tick)
        now = self.wall_time
        if not self.report or now < getattr(self, "_next", 0.0):
            return
        self._next = now + 1.0
        self.report(f"  cp-sat: incumbent {self.objective_value * self.tick:.6g}, bound "
                    f"{self.best_objective_bound * self.tick:.6g} at {self.wall_time:.1f} s of this solve")
