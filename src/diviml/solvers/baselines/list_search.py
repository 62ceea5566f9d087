"""Latency plans improved by iterated local search over devices, each candidate timed by list scheduling.

A plan's devices fix its makespan once each device's order of tasks is fixed: every task starts as early as
its device's previous task and its producers' outputs (sent where they must be) allow, as the simulator runs
it. From a plan (HEFT's, or the best baseline's), a task on the critical path (the chain of producers and
device predecessors that sets the makespan) moves to another device, alone or with its producers and
consumers on its device (a move that takes one task of a chain away pays two transfers; the chain moved
together pays none), and the move is kept where the makespan falls; each device's order is then taken from
the new start times. Where no such move helps, a few random tasks (each with some of its neighbours) move at
random and the descent starts again from there (iterated local search), the best plan kept. Memory,
co-location groups (moved whole) and allowed devices are respected by every move. The search ends where 200
kicks in a row find nothing better, or its work (tasks timed, :data:`STEPS_PER_SECOND` per second it is
given) is spent, whichever comes first: the same plan for the same seed however loaded the machine is.

On randomly wired networks, where CP-SAT given a minute on the whole graph does not leave HEFT's plan, this
lowers it (randwire-ws-small-s0 on paper-server, latency: 3.731 -> 3.539 ms at a 30 s limit, 8 s of work; see
benchmarks/results/list_search.md). Latency only: a task runs as one part.
"""

from __future__ import annotations

import math
import random
from dataclasses import replace

from ...errors import InfeasibleError, InputError
from ...plan import Plan
from ...problem import Problem
from ..engines.jobs import JobGraph
from ..engines.plans import Stopwatch, plan_from_jobs
from . import heft

__all__ = ["improve", "solve"]

NAME = "list-search"
KICK = (2, 8)  # tasks moved at random between descents, at least and at most
NEIGHBOUR_KICK = 0.5  # the chance that a kicked task takes each of its neighbours along
STALL_ROUNDS = 200  # kicks in a row that find nothing better end the search before its work is spent
# the search's work (tasks timed) per second it is given: about a third of what this 2-core machine times (2.6-4.5
# million a second), so that the work, the same on any machine, ends it before the clock does on a machine up to
# three times as loaded, and its plan does not depend on the load (split's plans must not)
STEPS_PER_SECOND = 1e6


class _Timing:
    """The list scheduling of one job graph over arrays: task i's duration on device k (infinite where it may not
    run there), the transfer of its output from device a to b, its producers; devices and tasks by index
    (thousands of schedules a second on a graph of 1,000 tasks, where :meth:`JobGraph.retime` takes
    milliseconds each)."""

    def __init__(self, jobs: JobGraph, steps: float):
        problem = jobs.problem
        self.budget = steps  # tasks to time at most
        self.steps = 0  # tasks timed so far: the search's work, the same on any machine for the same moves
        self.devices = [d.name for d in problem.platform.devices]
        self.keys = list(jobs.jobs)
        index = {j: i for i, j in enumerate(self.keys)}
        self.preds = [[index[u] for u in jobs.preds(j)] for j in self.keys]
        self.succs: list[list[int]] = [[] for _ in self.keys]
        for i, ps in enumerate(self.preds):
            for u in ps:
                self.succs[u].append(i)
        allowed = [set(jobs.devices(j)) for j in self.keys]
        self.duration = [[jobs.duration(j, d) if d in allowed[i] else math.inf for d in self.devices]
                         for i, j in enumerate(self.keys)]
        self.allowed = [[k for k, d in enumerate(self.devices) if d in allowed[i]] for i in range(len(self.keys))]
        by_size: dict[tuple, list[list[float]]] = {}
        self.transfer = []
        for j in self.keys:
            task = problem.graph.by_id[j[0]]
            key = (task.output_bytes, task.transfer_time, jobs.sizes[j[1]])
            if key not in by_size:  # by route, not by pair: 3,000 sizes over six-servers' 650 pairs took 7 s
                by_size[key] = problem.platform.transfer_matrix(task, jobs.sizes[j[1]] / problem.graph.batch_size)
            self.transfer.append(by_size[key])

    def run(self, order: list[int], device: list[int]) -> tuple[float, list[float], list[int]]:
        """(makespan, start per task, what held each task back: a producer's index, or -1 for its device)
        with each device running its tasks in ``order`` (a topological order) as early as possible."""
        self.steps += len(order)
        free = [0.0] * len(self.devices)
        start = [0.0] * len(device)
        held_by = [-1] * len(device)
        makespan = 0.0
        duration, transfer, preds = self.duration, self.transfer, self.preds
        for i in order:
            k = device[i]
            s, by = free[k], -1
            for u in preds[i]:
                ready = start[u] + duration[u][device[u]] + transfer[u][device[u]][k]
                if ready > s:
                    s, by = ready, u
            start[i], held_by[i] = s, by
            free[k] = end = s + duration[i][k]
            if end > makespan:
                makespan = end
        return makespan, start, held_by

    def order_of(self, start: list[float], device: list[int]) -> list[int]:
        """Tasks by start, then end, then topological position: a topological order (a producer ends no
        later than its consumer starts; ties of zero time keep the graph's order)."""
        return sorted(range(len(start)), key=lambda i: (start[i], start[i] + self.duration[i][device[i]], i))

    def critical(self, order: list[int], device: list[int], start: list[float], held_by: list[int]) -> list[int]:
        """The tasks of a chain that sets the makespan: from the last to end, back through what held each."""
        previous_on = [-1] * len(device)
        last: dict[int, int] = {}
        for i in order:
            previous_on[i] = last.get(device[i], -1)
            last[device[i]] = i
        i = max(range(len(device)), key=lambda t: start[t] + self.duration[t][device[t]])
        chain = []
        while i >= 0:
            chain.append(i)
            i = previous_on[i] if held_by[i] < 0 else held_by[i]
        return chain


class _Placement:
    """Devices per task with their memory kept: moves of whole units (a task, or a co-location group) to
    devices that may run them and have the memory."""

    def __init__(self, problem: Problem, timing: _Timing, device: list[int]):
        keys = timing.keys
        self.timing = timing
        self.memory = [problem.graph.by_id[t].memory_bytes for t, _ in keys]
        self.capacity = [d.memory_bytes for d in problem.platform.devices]
        index = {t: i for i, (t, _) in enumerate(keys)}
        self.unit = [[i] for i in range(len(keys))]
        for members in problem.colocation_groups.values():
            unit = [index[m] for m in members]
            for i in unit:
                self.unit[i] = unit
        self.reset(device)

    def reset(self, device: list[int]) -> None:
        """Start again from ``device`` (a copy is kept)."""
        self.device = list(device)
        self.used = [0.0] * len(self.capacity)
        for i, k in enumerate(self.device):
            self.used[k] += self.memory[i]

    def can_take(self, tasks: list[int], k: int) -> bool:
        """Whether device k may run every one of ``tasks`` and has the memory for those not on it yet."""
        if any(math.isinf(self.timing.duration[i][k]) for i in tasks):
            return False
        need = sum(self.memory[i] for i in tasks if self.device[i] != k)
        return need <= 0 or self.used[k] + need <= self.capacity[k]

    def move(self, tasks: list[int], k: int) -> list[int]:
        """Move ``tasks`` to device k; the devices they had (for :meth:`undo`)."""
        before = [self.device[i] for i in tasks]
        for i in tasks:
            self.used[self.device[i]] -= self.memory[i]
            self.device[i] = k
            self.used[k] += self.memory[i]
        return before

    def undo(self, tasks: list[int], before: list[int]) -> None:
        for i, k in zip(tasks, before):
            self.used[self.device[i]] -= self.memory[i]
            self.device[i] = k
            self.used[k] += self.memory[i]

    def grown(self, tasks: list[int]) -> list[int]:
        """``tasks`` with every member of their co-location groups, each once."""
        return list(dict.fromkeys(m for i in tasks for m in self.unit[i]))


def improve(problem: Problem, plan: Plan, watch: Stopwatch, *, seed: int = 0, seconds: float | None = None) -> Plan:
    """``plan`` (a latency plan) improved as the module describes within ``watch``'s time and the work of
    ``seconds`` (:data:`STEPS_PER_SECOND`; default: the watch's limit); ``plan`` itself where nothing better is
    found."""
    if problem.objective.kind != "latency":
        raise InputError(f"{NAME} improves latency plans, not {problem.objective.kind!r} ones")
    jobs = JobGraph.whole(problem)
    timing = _Timing(jobs, STEPS_PER_SECOND * (watch.limit if seconds is None else seconds))
    placement = plan.placement
    column = {d: k for k, d in enumerate(timing.devices)}
    starts = {a.task: a.start or 0.0 for a in plan.assignments}
    device = [column[placement[t]] for t, _ in timing.keys]
    order = timing.order_of([starts[t] for t, _ in timing.keys], device)
    found = _search(problem, timing, device, order, watch, random.Random(seed))
    if found[0] >= plan.objective * (1 - 1e-9):
        return plan
    makespan, device, start, moves = found
    device_of = {j: timing.devices[device[i]] for i, j in enumerate(timing.keys)}
    better = plan_from_jobs(jobs, device_of, dict(zip(timing.keys, start)), solver=plan.solver, status=plan.status,
                            watch=watch, notes=[*plan.notes, f"improved by list search ({moves} moves): "
                                                f"{plan.objective:.6g} -> {makespan:.6g}"])
    return better if better.objective < plan.objective else plan


def _search(problem: Problem, timing: _Timing, device: list[int], order: list[int], watch: Stopwatch,
            rng: random.Random) -> tuple[float, list[int], list[float], int]:
    """The iterated local search from ``device``: (makespan, devices, starts, moves kept) of the best found.
    A kicked placement is timed first in the best plan's order (a topological order whatever the devices),
    then in the order of its own start times (:meth:`_Timing.order_of` is topological only for starts
    timed on the devices it is given)."""
    places = _Placement(problem, timing, device)
    value, start, held_by = timing.run(order, places.device)
    value, order, start, held_by, moves = _descend(timing, places, order, value, start, held_by, watch, rng)
    best, best_order, stalled = (value, list(places.device), start, moves), order, 0
    while not _spent(timing, watch) and stalled < STALL_ROUNDS:
        places.reset(best[1])
        _kick(timing, places, rng)
        start = timing.run(best_order, places.device)[1]
        order = timing.order_of(start, places.device)
        value, start, held_by = timing.run(order, places.device)
        value, order, start, held_by, more = _descend(timing, places, order, value, start, held_by, watch, rng)
        if value < best[0] * (1 - 1e-12):
            best, best_order, stalled = (value, list(places.device), start, best[3] + more), order, 0
        else:
            stalled += 1
    return best


def _descend(timing: _Timing, places: _Placement, order: list[int], value: float, start: list[float],
             held_by: list[int], watch: Stopwatch, rng: random.Random):
    """First-improvement descent over moves of critical tasks (alone, or with their neighbours on their
    device) to another device; (makespan, order, starts, held_by, moves kept) where none helps."""
    moves = 0
    while not _spent(timing, watch):
        chain = timing.critical(order, places.device, start, held_by)
        rng.shuffle(chain)
        for i in chain:
            found = _better_move(timing, places, i, order, value, watch)
            if found is not None:
                value, start, held_by = found
                order = timing.order_of(start, places.device)
                moves += 1
                break
        else:
            break
    return value, order, start, held_by, moves


def _better_move(timing: _Timing, places: _Placement, i: int, order: list[int], value: float, watch: Stopwatch):
    """The first move of task i (alone, then with its neighbours on its device) that lowers the makespan,
    made; its (makespan, starts, held_by), or None (nothing moved)."""
    here = places.device[i]
    alone = places.grown([i])
    together = places.grown([i] + [j for j in timing.preds[i] + timing.succs[i] if places.device[j] == here])
    for tasks in ([alone, together] if len(together) > len(alone) else [alone]):
        for k in range(len(timing.devices)):
            if _spent(timing, watch):
                return None
            if k == here or not places.can_take(tasks, k):
                continue
            before = places.move(tasks, k)
            found = timing.run(order, places.device)
            if found[0] < value * (1 - 1e-12):
                return found
            places.undo(tasks, before)
    return None


def _spent(timing: _Timing, watch: Stopwatch) -> bool:
    return timing.steps >= timing.budget or watch.expired


def _kick(timing: _Timing, places: _Placement, rng: random.Random) -> None:
    """Move a few random tasks (each with some of its neighbours) to random devices that can take them."""
    for _ in range(rng.randint(*KICK)):
        i = rng.randrange(len(timing.keys))
        k = rng.choice(timing.allowed[i])
        tasks = places.grown([i] + [j for j in timing.preds[i] + timing.succs[i] if rng.random() < NEIGHBOUR_KICK])
        if places.can_take(tasks, k):
            places.move(tasks, k)


def solve(problem: Problem, *, time_limit: float = 60.0, seed: int = 0) -> Plan:
    """HEFT's plan improved by the list search in the rest of ``time_limit``."""
    watch = Stopwatch(time_limit)
    if problem.objective.kind != "latency":
        raise InputError(f"{NAME} handles the latency objective only")
    try:
        start = heft.solve(problem, time_limit=time_limit)
    except InfeasibleError as e:
        raise InfeasibleError(f"{NAME} starts from HEFT's plan, and HEFT found none: {e}") from None
    plan = improve(problem, start, watch, seed=seed)
    return replace(plan, solver=NAME, solve_time_s=watch.elapsed)
