"""Batch plans improved task by task: how each task is cut into parts and where they run, timed by the simulator's
rules compiled (:mod:`._parts_timing`, 17-23 million parts a second here, 100x the simulator itself).

The exact solvers' batch plans cut every task the same way (sub-batches shared by all tasks), and each cut is a
launch on a GPU: a task whose two parts run on one device pays two where one part of both would do, and a task
that would gain from running whole beside tasks cut in two cannot. From a plan, each task in turn tries, in
place of its parts:

- its parts with neighbours on one device joined (one part, one launch);
- the whole batch on each device it may run on;
- the parts of a producer or a consumer (the same devices and sizes: rows pass straight through);

and a kick, a few random tasks at a time, also one part on another device or a whole task cut in two halves on
two devices. A change is kept where the makespan falls, each device running its parts in the order
the current schedule ran them (the moved task's where its first part started). Descents from the plan's own
order, from list scheduling's, and from each other plan it is given (the solve's baseline: googlenet's join plan
of split polishes to 2.989 ms, its data-parallel baseline to 2.830), then kicks from the best plan (the plan
itself where the descents found nothing better), each followed by a descent (iterated local search). Memory
(a device holds the memory of every task it runs a part of) and allowed devices are kept by every change; tasks
in co-location groups stay as they are. The search ends where :data:`STALL_ROUNDS` kicks in a row find nothing
better or its work (parts timed, :data:`STEPS_PER_SECOND` per second it is given) is spent, so that on this
machine its plan is the same for the same seed; where the clock ends it first (a slower or loaded machine), it
may differ.

At a batch of 8 on paper-server, given 12 s (seeds 0 and 1): exact's 5/3 plan of googlenet 3.161 -> 2.823 and
2.850 ms, of inception_v3 7.392 -> 6.797 and 6.744 ms (in 7.7-11 s: 200 kicks found nothing better); with the
simulator itself timing the changes, 18 s took them to 3.108 and 7.049 ms. See the README's design section.
Batch only.
"""

from __future__ import annotations

import random
from dataclasses import replace
from typing import Callable, Sequence

import numpy as np

from ...plan import Plan
from ...problem import Problem
from ..engines.plans import Stopwatch, make_plan
from ._parts_timing import PartsTiming, compile_in_background, compiled_within

__all__ = ["after_engine", "improve", "prepare"]

# of a batch solve's time limit: kept by exact and milp for this search after their engines (inception_v3 at a
# batch of 8 on paper-server, exact at 60 s: gap 36.8% -> 34.1%, the other zoo models within 0.5 point); split
# runs it for as long in the time its joins leave (where they end early; they stop at their deadline otherwise)
SHARE = 0.2
KICK = (2, 4)  # tasks changed at random between descents, at least and at most
STALL_ROUNDS = 200  # kicks in a row that find nothing better end the search before its work is spent
# the search's work (parts timed) per second it is given: a little under what this 2-core machine times
# (googlenet's and inception_v3's 200-500 parts: 17-23 million a second, Python's part of the search included),
# so that the work, not the clock, ends it here and the same seed gives the same plan
STEPS_PER_SECOND = 1.5e7

Parts = dict[str, list[tuple[str, int]]]


def prepare(problem: Problem, time_limit: float) -> float:
    """The time of a solve limited to ``time_limit`` to keep for the polish (:data:`SHARE` of it, where
    ``problem`` is batched; else 0), its compiled timing made ready in the background where it is more than 0
    (:func:`._parts_timing.compile_in_background`): a solve that will polish its plan calls this first."""
    if problem.objective.kind != "batch":
        return 0.0
    compile_in_background()
    return time_limit * SHARE


def improve(problem: Problem, plan: Plan, watch: Stopwatch, *, seed: int = 0, seconds: float | None = None,
            others: Sequence[Plan | None] = ()) -> Plan:
    """``plan`` (a batch plan) with its tasks' parts changed while the makespan falls, within ``watch``; its work
    is set by ``seconds`` (default: the time left on ``watch``), not by the clock. ``others`` (plans of the same
    problem, such as a baseline's) are searched from too: the best found is returned where it beats ``plan``. The
    plan itself where nothing helps or the objective is not batch."""
    if problem.objective.kind != "batch" or not plan.assignments or not compiled_within(watch.left):
        return plan  # (the first solve after an install may not see the kernels compiled in its time)
    search = _Search(problem, plan, (watch.left if seconds is None else seconds) * STEPS_PER_SECOND, seed)
    best = search.run(watch, [p for p in others if p is not None and p.assignments and p.parts != plan.parts])
    if best is None:
        return plan
    parts, order = best
    better = make_plan(problem, parts, order=order, solver=plan.solver, status=plan.status, watch=watch,
                       bound=plan.bound, bound_source=plan.bound_source, notes=plan.notes, stats=plan.stats)
    if better.objective >= plan.objective:
        return plan
    note = (f"parts polished: {plan.objective:.6g} -> {better.objective:.6g} by changing how "
            f"{search.changed()} task(s) are cut into parts or where they run")
    return replace(better, notes=(*plan.notes, note), solve_time_s=plan.solve_time_s)


def after_engine(problem: Problem, best: Plan, notes: list[str], bound: float, watch: Stopwatch, seed: int,
                 seconds: float, progress=None, baseline: Plan | None = None) -> tuple[Plan, list[str]]:
    """An exact engine's best batch plan and its ``notes`` after :func:`improve` (from it and from ``baseline``)
    in ``seconds`` of work, unless ``seconds`` is 0 (latency: none kept for it) or the plan meets ``bound``;
    ``progress`` hears where it started and ended."""
    if seconds <= 0 or best.objective <= bound * (1 + 1e-9):
        return best, notes
    if progress:
        progress(f"  parts polish from {best.objective:.6g} at {watch.elapsed:.1f} s")
    best = improve(problem, replace(best, notes=tuple(notes)), watch, seed=seed, seconds=seconds, others=(baseline,))
    if progress:
        progress(f"  parts polish: {best.objective:.6g} at {watch.elapsed:.1f} s")
    return best, list(best.notes)


class _Search:
    """The state of the search over arrays (:class:`._parts_timing.PartsTiming`: tasks by topological position,
    devices by index): each task's parts, each part's start in the schedule they make, each device's memory in
    use, and the work done."""

    def __init__(self, problem: Problem, plan: Plan, budget: float, seed: int):
        self.problem = problem
        self.budget, self.steps = budget, 0
        self.rng = random.Random(seed)
        self.timing = timing = PartsTiming(problem)
        graph, n, n_tasks = problem.graph, problem.batch_size, len(timing.tasks)
        column = {d: k for k, d in enumerate(timing.devices)}
        self.allowed = [[column[d] for d in problem.allowed_devices[t]] for t in timing.tasks]
        self.neighbours = [[timing.index[u] for u in (*graph.predecessors[t], *graph.successors[t])]
                           for t in timing.tasks]
        self.fixed = {timing.index[m] for members in problem.colocation_groups.values() for m in members}
        self.memory = [graph.by_id[t].memory_bytes for t in timing.tasks]
        self.capacity = [d.memory_bytes for d in problem.platform.devices]
        self.parts: list[list[tuple[int, int]]] = [[] for _ in range(n_tasks)]
        self.count = np.zeros(n_tasks, dtype=np.int64)
        self.device = np.zeros((n_tasks, n), dtype=np.int64)
        self.size = np.zeros((n_tasks, n), dtype=np.int64)
        self.column = column
        self.plan_parts, plan_starts = self._load(plan)
        self._restore(self.plan_parts)
        self.makespan, self.starts = self._time(plan_starts, listed=False)  # the first descent's start
        self.origin = (self.plan_parts, self.starts.copy())  # the kicks' start until a better plan is found
        self.best_value = self.makespan
        self.best: tuple[list, np.ndarray] | None = None  # parts, starts

    def _load(self, plan: Plan) -> tuple[list[list[tuple[int, int]]], np.ndarray]:
        """``plan``'s parts (device indices) by task position, and each part's start."""
        index = self.timing.index
        parts: list[list[tuple[int, int]]] = [[] for _ in index]
        for t, ps in plan.parts.items():
            parts[index[t]] = [(self.column[d], b) for d, b in ps]
        starts = np.zeros(self.size.shape)
        seen: dict[str, int] = {}
        for a in plan.assignments:
            k = seen[a.task] = seen.get(a.task, -1) + 1
            starts[index[a.task], k] = a.start or 0.0
        return parts, starts

    def changed(self) -> int:
        """Tasks whose parts in the best plan differ from the plan's."""
        return 0 if self.best is None else sum(a != b for a, b in zip(self.best[0], self.plan_parts))

    def run(self, watch: Stopwatch, others: Sequence[Plan] = ()) -> tuple[Parts, dict] | None:
        """The best parts found and each device's order of them, or None where none beats the plan: a descent
        from the plan's own order and from each of ``others``', one from list scheduling's order of the plan (an
        equal share of the work each: they often end in different places), then kicks from the best (from the
        plan, where the descents found nothing better)."""
        start_value = self.best_value
        firsts = [(self.plan_parts, None), *(self._load(other) for other in others)]
        for i, (first_parts, first_starts) in enumerate(firsts):
            if i:
                self._restore(first_parts)
                self.makespan, self.starts = self._time(first_starts, listed=False)
            self._descend(watch, self.budget * (i + 1) / (len(firsts) + 1))
            self._keep()
        self._restore(self.plan_parts)
        self.makespan, self.starts = self._time(None)
        self._descend(watch, self.budget)
        self._keep()
        stalled = 0
        while not self._spent(watch) and stalled < STALL_ROUNDS:
            from_parts, from_starts = self.best or self.origin
            self._restore(from_parts)
            self.makespan, self.starts = self._time(from_starts)
            self._kick()
            self._descend(watch, self.budget)
            stalled = 0 if self._keep() else stalled + 1
        if self.best is None or self.best_value >= start_value:
            return None
        best_parts, best_starts = self.best
        timing = self.timing
        parts = {t: [(timing.devices[d], b) for d, b in best_parts[i]] for i, t in enumerate(timing.tasks)}
        return parts, _order(self.problem, parts, lambda t, k: best_starts[timing.index[t], k], timing.index)

    def _restore(self, parts: list[list[tuple[int, int]]]) -> None:
        for t, p in enumerate(parts):
            self._set(t, p)
        self._count_memory()

    def _set(self, t: int, parts: list[tuple[int, int]]) -> None:
        self.parts[t] = list(parts)
        self.count[t] = len(parts)
        for k, (d, b) in enumerate(parts):
            self.device[t, k], self.size[t, k] = d, b
        self.timing.need(t, self.device[t], self.size[t], len(parts))

    def _count_memory(self) -> None:
        self.used = [0.0] * len(self.capacity)
        for t, parts in enumerate(self.parts):
            for d in {d for d, _ in parts}:
                self.used[d] += self.memory[t]

    def _keep(self) -> bool:
        """Whether the current schedule beats the best, made the best where it does."""
        if self.makespan < self.best_value * (1 - 1e-9):
            self.best_value = self.makespan
            self.best = ([list(p) for p in self.parts], self.starts.copy())
            return True
        return False

    def _spent(self, watch: Stopwatch) -> bool:
        return self.steps >= self.budget or watch.expired

    def _descend(self, watch: Stopwatch, until: float) -> None:
        """First-improvement passes over the tasks in topological order until a pass changes nothing or the
        work reaches ``until``."""
        moved = True
        while moved and not self._spent(watch) and self.steps < until:
            moved = False
            for t in range(len(self.count)):
                if self._spent(watch) or self.steps >= until:
                    return
                if t not in self.fixed and self._try(t, self._candidates(t, kick=False)):
                    moved = True

    def _try(self, task: int, candidates: list[list[tuple[int, int]]]) -> bool:
        """The first of ``candidates`` (parts of ``task``) that shortens the schedule, kept; whether one did."""
        old = self.parts[task]
        key = self.starts.copy()
        key[task, :] = self.starts[task, :len(old)].min()  # the moved task's parts where its first part started
        for parts in candidates:
            self._set(task, parts)
            makespan, starts = self._time(key, listed=False)
            if makespan < self.makespan * (1 - 1e-9):
                self._hold(task, old, parts)
                self.makespan, self.starts = makespan, starts
                return True
        self._set(task, old)
        return False

    def _hold(self, task: int, old: list[tuple[int, int]], new: list[tuple[int, int]]) -> None:
        """The memory in use after ``task``'s parts went from ``old`` to ``new``."""
        for d in {d for d, _ in old}:
            self.used[d] -= self.memory[task]
        for d in {d for d, _ in new}:
            self.used[d] += self.memory[task]

    def _kick(self) -> None:
        """A few random tasks each take a random candidate, whatever it costs; the schedule is retimed (a kicked
        task's parts where its parts of the same index started, new ones where its first did)."""
        movable = [t for t in range(len(self.count)) if t not in self.fixed]
        if not movable:
            return
        key = self.starts.copy()
        for t in self.rng.sample(movable, min(len(movable), self.rng.randint(*KICK))):
            options = self._candidates(t)
            if options:
                old, new = self.parts[t], self.rng.choice(options)
                key[t, len(old):] = self.starts[t, :len(old)].min()
                self._set(t, new)
                self._hold(t, old, new)
        self.makespan, self.starts = self._time(key)

    def _candidates(self, task: int, kick: bool = True) -> list[list[tuple[int, int]]]:
        """Other ways to cut ``task`` and place its parts (see the module), each within memory, neighbouring parts
        on one device joined, none twice; a descent tries the few that join parts or follow a neighbour, a kick
        also moves one part or cuts a whole task in two."""
        n, own, allowed = self.problem.batch_size, self.parts[task], self.allowed[task]
        options: list[list[tuple[int, int]]] = [own]
        options += [[(d, n)] for d in allowed]
        options += [self.parts[u] for u in self.neighbours[task]]
        if kick and len(own) > 1:
            options += [own[:k] + [(d, b)] + own[k + 1:] for k, (_, b) in enumerate(own) for d in allowed]
        if kick and len(own) == 1 and n > 1:  # cut in two, the larger part first, on two devices
            options += [[(d, n - n // 2), (e, n // 2)] for d in allowed for e in allowed if d != e]
        out, seen = [], {tuple(own)}
        whole = self.timing.tasks[task] in self.problem.whole_batch
        for option in options:
            joined = _joined(option)
            if whole and len(joined) > 1:  # a task that mixes samples runs on the whole batch
                continue
            if tuple(joined) not in seen and all(d in allowed for d, _ in joined) and self._fits(task, joined):
                seen.add(tuple(joined))
                out.append(joined)
        return out

    def _fits(self, task: int, parts: list[tuple[int, int]]) -> bool:
        """Whether every device that would newly hold ``task`` has room for its memory."""
        need = self.memory[task]
        if need <= 0:
            return True
        held = {d for d, _ in self.parts[task]}
        return all(self.used[d] + need <= self.capacity[d] for d in {d for d, _ in parts} - held)

    def _time(self, key: np.ndarray | None, listed: bool = True) -> tuple[float, np.ndarray]:
        """The makespan of the current parts with each device's parts ordered by ``key`` (ties by topological
        order) or by list scheduling (``listed``, no ``key``, or where that order contradicts the graph),
        whichever is shorter, and each part's start."""
        timing, found = self.timing, None
        parts = int(self.count.sum())
        if key is not None:
            makespan = timing.run(self.count, self.device, self.size, key)
            self.steps += parts
            if makespan >= 0:
                found = makespan, timing.starts.copy()
            else:  # an order that contradicts the graph (list scheduling's never does)
                listed = True
        if listed or found is None:
            makespan = timing.run(self.count, self.device, self.size, timing.list_keys(self.count, self.device, self.size))
            self.steps += parts
            if found is None or makespan < found[0]:
                found = makespan, timing.starts.copy()
        return found


def _order(problem: Problem, parts: Parts, key: Callable[[str, int], float], topo: dict[str, int]) -> dict:
    """Each device's (task, part index) by ``key``, ties by topological position and part index."""
    order: dict[str, list] = {d.name: [] for d in problem.platform.devices}
    for t, ps in parts.items():
        for k, (d, _) in enumerate(ps):
            order[d].append((key(t, k), topo[t], k, t))
    return {d: [(t, k) for _, _, k, t in sorted(seq)] for d, seq in order.items()}


def _joined(parts: list[tuple[int, int]]) -> list[tuple[int, int]]:
    """``parts`` with neighbouring parts on one device made one."""
    out: list[tuple[int, int]] = []
    for d, b in parts:
        if out and out[-1][0] == d:
            out[-1] = (d, out[-1][1] + b)
        else:
            out.append((d, b))
    return out
