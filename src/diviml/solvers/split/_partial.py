"""Operations on a partial schedule: releases, hoisting constants, pins, extending by an answer, dominance."""

from __future__ import annotations

import bisect
from dataclasses import replace

from ...errors import InfeasibleError
from ...graph import longest_paths
from ...problem import Problem
from ..engines.jobs import JobGraph, JobKey, earliest_gap
from ..engines.modules import Chain
from ._messages import Answer, Partial


def takes_time(problem: Problem, task: str) -> bool:
    return any(problem.time(task, d) > 0 for d in problem.allowed_devices[task])


def releases(problem: Problem, jobs: list[JobKey], sizes, partial: Partial, members: set | None = None) -> dict:
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


def hoist(problem: Problem, partial: Partial, module, sizes, first: frozenset, look: "Lookahead", index: int,
           memory_binds: bool) -> tuple[Partial, tuple[str, ...]]:
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
    origin = min(releases(problem, [(t, l) for t in first for l in range(len(sizes))], sizes, partial,
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
            best = _earliest_reach(problem, t, b, inputs, busy, origin)
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
    hoisted = {t for t, _ in placed}
    return _with_placed(partial, placed, look, index), tuple(t for t in module.tasks if t not in hoisted)


def _earliest_reach(problem: Problem, task: str, batch: int, inputs: list, busy: dict, origin: float) -> tuple | None:
    """(reach, device, start, finish) of ``task`` on ``batch`` samples in the earliest idle gap of the device
    from which its output reaches every device earliest, its ``inputs`` ((producer, (device, finish))) read;
    None where no device's output arrives by ``origin``."""
    graph, platform = problem.graph, problem.platform
    best = None
    for d in problem.allowed_devices[task]:
        ready = max([0.0] + [f + problem.transfer(u, e, d, batch / graph.batch_size) for u, (e, f) in inputs])
        length = problem.time(task, d, batch)
        ready = earliest_gap(busy[d], ready, length)
        reach = ready + length + max(problem.transfer(task, d, e, batch / graph.batch_size) for e in platform.by_name)
        if reach <= origin and (best is None or reach < best[0]):
            best = (reach, d, ready, ready + length)
    return best


def _with_placed(partial: Partial, placed: dict, look: "Lookahead", index: int) -> Partial:
    """The partial with the ``placed`` jobs (job -> (device, start, finish)) added."""
    new = replace(partial, device_of=dict(partial.device_of), start=dict(partial.start),
                  finish=dict(partial.finish), free=dict(partial.free))
    for j, (d, s0, f0) in placed.items():
        new.device_of[j], new.start[j], new.finish[j] = d, s0, f0
        new.free[d] = max(new.free.get(d, 0.0), f0)
        new.makespan = max(new.makespan, f0)
    new.open = partial.open | frozenset(j for j in placed if look.last_module[j[0]] > index)
    return new


def pins(problem: Problem, module_tasks, sizes, partial: Partial, exit_task: str, exit_devices) -> dict:
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


def advance(problem: Problem, partial: Partial, tasks: tuple[str, ...], sizes, release_abs: dict,
             answer: Answer, memory_binds: bool, look: "Lookahead", index: int) -> Partial:
    """The partial schedule extended by a module's answer, re-timed as early as possible in real units
    (``release_abs``: each job's earliest start on each device, after the partial's work there)."""
    graph = problem.graph
    module = JobGraph(problem, sizes, tasks, release_abs)
    start, finish = module.retime(answer.device_of, answer.order_key)
    new = Partial({**partial.device_of, **answer.device_of}, {**partial.start, **start},
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


class Lookahead:
    """The fastest path after each job through the modules after a given one (every task on its fastest
    device, transfers free): what ranks partial schedules with different tensors still open."""

    def __init__(self, problem: Problem, chain: Chain, sizes: tuple[int, ...]):
        graph = problem.graph
        self.graph, self.module_of, self.constants = graph, chain.module_of, chain.constants
        self.bottom: dict[JobKey, float] = longest_paths(
            [(t, l) for t in reversed(graph.topological_order) for l in range(len(sizes))],
            lambda j: [(s, j[1]) for s in graph.successors[j[0]]],
            lambda j: min(problem.time(j[0], d, sizes[j[1]]) for d in problem.allowed_devices[j[0]]))
        self.last_module = {t: max((chain.module_of[s] for s in graph.successors[t]), default=-1)
                            for t in graph.topological_order}

    def after(self, job: JobKey, index: int) -> float:
        t, l = job
        return max((self.bottom[s, l] for s in self.graph.successors[t] if self.module_of[s] > index), default=0.0)


def critical_path(problem: Problem, tasks, sizes, release: dict) -> float:
    """A lower bound on a module's end after its origin: the longest path through ``tasks`` from their
    releases, each job on its fastest device, transfers free (for a solve skipped, the DP on bounds)."""
    members, allowed = set(tasks), problem.allowed_devices
    ready = longest_paths(
        [(t, l) for t in tasks for l in range(len(sizes))],
        lambda j: [(u, j[1]) for u in problem.graph.predecessors[j[0]] if u in members],
        lambda j: min(problem.time(j[0], d, sizes[j[1]]) for d in allowed[j[0]]),
        release=lambda j: min(release.get((j, d), 0.0) for d in allowed[j[0]]))
    return max(ready.values(), default=0.0)


def origin_terms(problem: Problem, tasks: tuple[str, ...], sizes, constants: frozenset) -> tuple[frozenset, float]:
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


def dominates(problem: Problem, sizes, q: Partial, p: Partial, bounds: bool, memory_binds: bool) -> bool:
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

    def arrival(partial: Partial, job, device: str, finish: float) -> float:
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
