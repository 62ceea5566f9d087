"""Batch plans improved task by task: how each task is cut into parts and where they run, timed by the simulator.

The exact solvers' batch plans cut every task the same way (sub-batches shared by all tasks), and each cut is a
launch on a GPU: a task whose two parts run on one device pays two where one part of both would do, and a task
that would gain from running whole beside tasks cut in two cannot. From a plan, each task in turn tries, in
place of its parts:

- its parts with neighbours on one device joined (one part, one launch);
- the whole batch on each device it may run on;
- the parts of a producer or a consumer (the same devices and sizes: rows pass straight through);

and a kick, a few random tasks at a time, also one part on another device or a whole task cut in two halves on
two devices. A change is kept where the simulator's makespan falls, each device running its parts in the order
the current schedule ran them (the moved task's where its first part started). Two descents, one from the plan's
own order and one from list scheduling's (they end in different places), then kicks from the best plan, each
followed by a descent (iterated local search). Memory (a device holds the memory of every task it runs a part
of) and allowed devices are kept by every change; tasks in co-location groups stay as they are. The search ends
where :data:`STALL_ROUNDS` kicks in a row find nothing better or its work (parts timed,
:data:`STEPS_PER_SECOND` per second it is given) is spent, so that on this machine its plan is the same for
the same seed; where the clock ends it first (a slower or loaded machine), it may differ.

At a batch of 8 on paper-server, given 18 s: exact's 5/3 plan of googlenet 3.161 -> 3.108 ms, of inception_v3
7.392 -> 7.049 ms (still improving when the work was spent); see the README's design section. Batch only.
"""

from __future__ import annotations

import random
from dataclasses import replace
from typing import Callable

from ...errors import ValidationError
from ...plan import Plan
from ...problem import Problem
from ...simulate import Schedule, schedule
from ..engines.plans import Stopwatch, make_plan

__all__ = ["after_engine", "improve"]

# of a batch solve's time limit: kept by exact and milp for this search after their engines (inception_v3 at a
# batch of 8 on paper-server, exact at 60 s: gap 36.8% -> 34.1%, the other zoo models within 0.5 point); split
# runs it for as long in the time its joins leave (where they end early; they stop at their deadline otherwise)
SHARE = 0.2
KICK = (2, 4)  # tasks changed at random between descents, at least and at most
STALL_ROUNDS = 20  # kicks in a row that find nothing better end the search before its work is spent
# the search's work (parts timed) per second it is given: what this 2-core machine times (googlenet's and
# inception_v3's 200-500 parts: about 150,000 a second). Less would leave the search further from done (it was
# still improving inception_v3 after 18 s), so a loaded machine's clock may end it first
STEPS_PER_SECOND = 1.5e5

Parts = dict[str, list[tuple[str, int]]]


def improve(problem: Problem, plan: Plan, watch: Stopwatch, *, seed: int = 0, seconds: float | None = None) -> Plan:
    """``plan`` (a batch plan) with its tasks' parts changed while the makespan falls, within ``watch``; its work
    is set by ``seconds`` (default: the time left on ``watch``), not by the clock. The plan itself where nothing
    helps or the objective is not batch."""
    if problem.objective.kind != "batch" or not plan.assignments or watch.expired:
        return plan
    search = _Search(problem, plan, (watch.left if seconds is None else seconds) * STEPS_PER_SECOND, seed)
    best = search.run(watch)
    if best is None:
        return plan
    parts, order = best
    better = make_plan(problem, parts, order=order, solver=plan.solver, status=plan.status, watch=watch,
                       bound=plan.bound, bound_source=plan.bound_source, notes=plan.notes, stats=plan.stats)
    if better.objective >= plan.objective:
        return plan
    note = (f"parts polished: {plan.objective:.6g} -> {better.objective:.6g} by changing how "
            f"{search.changed} task(s) are cut into parts or where they run")
    return replace(better, notes=(*plan.notes, note), solve_time_s=plan.solve_time_s)


def after_engine(problem: Problem, best: Plan, notes: list[str], bound: float, watch: Stopwatch, seed: int,
                 seconds: float, progress=None) -> tuple[Plan, list[str]]:
    """An exact engine's best batch plan and its ``notes`` after :func:`improve` in ``seconds`` of work, unless
    ``seconds`` is 0 (latency: none kept for it) or the plan meets ``bound``; ``progress`` hears where it started
    and ended."""
    if seconds <= 0 or best.objective <= bound * (1 + 1e-9):
        return best, notes
    if progress:
        progress(f"  parts polish from {best.objective:.6g} at {watch.elapsed:.1f} s")
    best = improve(problem, replace(best, notes=tuple(notes)), watch, seed=seed, seconds=seconds)
    if progress:
        progress(f"  parts polish: {best.objective:.6g} at {watch.elapsed:.1f} s")
    return best, list(best.notes)


class _Search:
    """The state of the search: each task's parts, the schedule they make (with each part's start, by task and
    part index), and the work done."""

    def __init__(self, problem: Problem, plan: Plan, budget: float, seed: int):
        self.problem = problem
        self.budget, self.steps = budget, 0
        self.rng = random.Random(seed)
        self.topo = {t: i for i, t in enumerate(problem.graph.topological_order)}
        self.fixed = {m for members in problem.colocation_groups.values() for m in members}
        self.plan_parts: Parts = {t: list(p) for t, p in plan.parts.items()}
        self.plan_starts: dict[tuple[str, int], float] = {}
        seen: dict[str, int] = {}
        for a in plan.assignments:
            k = seen[a.task] = seen.get(a.task, -1) + 1
            self.plan_starts[a.task, k] = a.start or 0.0
        self.parts = {t: list(p) for t, p in self.plan_parts.items()}
        self.current = self._time(lambda t, k: self.plan_starts[t, k], listed=False)  # the first descent's start
        self.best_value = self.current[0].makespan
        self.best: tuple[Parts, dict] | None = None
        self.changed = 0

    def run(self, watch: Stopwatch) -> tuple[Parts, dict] | None:
        """The best parts found and each device's order of them, or None where none beats the plan: a descent
        from the plan's own order, one from list scheduling's (half the work each: the two often end in
        different places), then kicks from the best."""
        start_value = self.best_value
        self._descend(watch, self.budget * 0.5)
        self._keep()
        self.parts = {t: list(p) for t, p in self.plan_parts.items()}
        self.current = self._time(None)
        self._descend(watch, self.budget)
        self._keep()
        stalled = 0
        while not self._spent(watch) and stalled < STALL_ROUNDS and self.best is not None:
            self.parts, best_starts = {t: list(p) for t, p in self.best[0].items()}, self.best[1]
            self.current = self._time(lambda t, k: best_starts[t, k])
            self._kick()
            self._descend(watch, self.budget)
            stalled = 0 if self._keep() else stalled + 1
        if self.best is None or self.best_value >= start_value:
            return None
        parts, starts = self.best
        return parts, _order(self.problem, parts, lambda t, k: starts[t, k], self.topo)

    def _keep(self) -> bool:
        """Whether the current schedule beats the best, made the best where it does."""
        if self.current[0].makespan < self.best_value * (1 - 1e-9):
            self.best_value = self.current[0].makespan
            self.best = ({t: list(p) for t, p in self.parts.items()}, self.current[1])
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
            for t in self.problem.graph.topological_order:
                if self._spent(watch) or self.steps >= until:
                    return
                if t not in self.fixed and self._try(t, self._candidates(t, kick=False)):
                    moved = True

    def _try(self, task: str, candidates: list[list[tuple[str, int]]]) -> bool:
        """The first of ``candidates`` (parts of ``task``) that shortens the schedule, kept; whether one did."""
        old, (sched, starts) = self.parts[task], self.current
        first = min(starts[task, k] for k in range(len(old)))
        for parts in candidates:
            self.parts[task] = parts
            found = self._time(lambda t, k: first if t == task else starts[t, k], listed=False)
            if found[0].makespan < sched.makespan * (1 - 1e-9):
                self.current, self.changed = found, self.changed + 1
                return True
        self.parts[task] = old
        return False

    def _kick(self) -> None:
        """A few random tasks each take a random candidate, whatever it costs; the schedule is retimed."""
        movable = [t for t in self.problem.graph.topological_order if t not in self.fixed]
        if not movable:
            return
        starts = self.current[1]
        firsts = {t: min(starts[t, k] for k in range(len(self.parts[t]))) for t in self.parts}
        for t in self.rng.sample(movable, min(len(movable), self.rng.randint(*KICK))):
            options = self._candidates(t)
            if options:
                self.parts[t] = self.rng.choice(options)
        self.current = self._time(lambda t, k: starts.get((t, k), firsts[t]))

    def _candidates(self, task: str, kick: bool = True) -> list[list[tuple[str, int]]]:
        """Other ways to cut ``task`` and place its parts (see the module), each within memory, neighbouring parts
        on one device joined, none twice; a descent tries the few that join parts or follow a neighbour, a kick
        also moves one part or cuts a whole task in two."""
        problem, n = self.problem, self.problem.batch_size
        own = self.parts[task]
        allowed = problem.allowed_devices[task]
        options: list[list[tuple[str, int]]] = [own]
        options += [[(d, n)] for d in allowed]
        graph = problem.graph
        options += [self.parts[u] for u in (*graph.predecessors[task], *graph.successors[task])]
        if kick and len(own) > 1:
            options += [own[:k] + [(d, b)] + own[k + 1:] for k, (_, b) in enumerate(own) for d in allowed]
        if kick and len(own) == 1 and n > 1:  # cut in two, the larger part first, on two devices
            options += [[(d, n - n // 2), (e, n // 2)] for d in allowed for e in allowed if d != e]
        out, seen = [], {tuple(own)}
        for option in options:
            joined = _joined(option)
            if tuple(joined) not in seen and all(d in allowed for d, _ in joined) and self._fits(task, joined):
                seen.add(tuple(joined))
                out.append(joined)
        return out

    def _fits(self, task: str, parts: list[tuple[str, int]]) -> bool:
        """Whether every device that would newly hold ``task`` has room for its memory."""
        nbytes = self.problem.graph.by_id[task].memory_bytes
        if nbytes <= 0:
            return True
        held = {d for d, _ in self.parts[task]}
        for d in {d for d, _ in parts} - held:
            used = sum(self.problem.graph.by_id[t].memory_bytes for t, p in self.parts.items()
                       if any(e == d for e, _ in p))
            if used + nbytes > self.problem.platform.by_name[d].memory_bytes:
                return False
        return True

    def _time(self, key: Callable[[str, int], float] | None, listed: bool = True) -> tuple[Schedule, dict]:
        """The schedule of the current parts with each device's parts ordered by ``key`` (ties by topological
        order) or by list scheduling (``listed``, no ``key``, or where that order contradicts the graph),
        whichever is shorter, and each part's start."""
        found = None
        if key is not None:
            try:
                found = schedule(self.problem, self.parts, _order(self.problem, self.parts, key, self.topo))
                self.steps += len(found.jobs)
            except ValidationError:  # an order that contradicts the graph (list scheduling's never does)
                listed = True
        if listed or found is None:
            by_list = schedule(self.problem, self.parts, None)
            self.steps += len(by_list.jobs)
            found = by_list if found is None or by_list.makespan < found.makespan else found
        return found, _starts(found, self.parts)


def _order(problem: Problem, parts: Parts, key: Callable[[str, int], float], topo: dict[str, int]) -> dict:
    """Each device's (task, part index) by ``key``, ties by topological position and part index."""
    order: dict[str, list] = {d.name: [] for d in problem.platform.devices}
    for t, ps in parts.items():
        for k, (d, _) in enumerate(ps):
            order[d].append((key(t, k), topo[t], k, t))
    return {d: [(t, k) for _, _, k, t in sorted(seq)] for d, seq in order.items()}


def _starts(sched: Schedule, parts: Parts) -> dict[tuple[str, int], float]:
    """(task, part index) -> its start in ``sched`` (a part is known by its first sample)."""
    index = {}
    for t, ps in parts.items():
        offset = 0
        for k, (_, b) in enumerate(ps):
            index[t, offset] = k
            offset += b
    return {(j.task, index[j.task, j.offset]): j.start for j in sched.jobs}


def _joined(parts: list[tuple[str, int]]) -> list[tuple[str, int]]:
    """``parts`` with neighbouring parts on one device made one."""
    out: list[tuple[str, int]] = []
    for d, b in parts:
        if out and out[-1][0] == d:
            out[-1] = (d, out[-1][1] + b)
        else:
            out.append((d, b))
    return out
