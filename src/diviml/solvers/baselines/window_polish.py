"""Latency plans improved window by window between series points, each window timed on its own.

A series point is a task that every other task of time or memory precedes or follows (a transformer's residual
adds and layer norms, :func:`diviml.bounds.series_points`); the weighted tasks up to one form a *window*,
which no later window's tasks can start before. So a plan's makespan is its windows' durations summed, and a
window can be re-placed looking at it and the few windows ahead alone: a few dozen tasks to time, not the
graph's thousands (where :mod:`.list_search` times the whole graph for every move: GPT-3's prefill gains 0.04%
in 30 s). Tasks of no time and no memory (views, permutes) follow the task they read, so a move takes them
along, unless they may not run on every device that task may or a co-location group holds them.

In order, each window's tasks (its series point included) move one at a time to another device, a run of them
on one device (joined by edges, taking along the tasks of the windows ahead that it reaches) moves as one to a
device near them, or two of them swap devices (weights of equal size trade places within memory). A change is
kept where the time at which the windows ahead end falls: the windows up to the next that holds weights, whose
devices memory fixed, all list-scheduled from where the windows before them ended (GPT-3's attention products
sit in windows of their own between the projections: moved to the device of the output projection's weights,
they save a transfer there, two windows on; 24.98 -> 24.59 s over six-servers, where one window ahead and single
moves gave 24.94 s). The simulator then times the whole plan, and the better of it and the given plan is kept.
Memory, allowed devices and co-location groups (whose tasks stay put) are respected by every move. A window of
more than :data:`MAX_WINDOW` tasks is left as it is.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from itertools import islice

from ...bounds import series_points, windows_of
from ...plan import Plan
from ...problem import Problem
from ..engines.jobs import JobGraph
from ..engines.plans import Stopwatch, make_plan

__all__ = ["polish"]

PASSES = 3  # descents over a window, at most
# tasks: a larger window is left as it is (its swaps are cubic in its size: a randomly wired network is one window
# of hundreds of tasks, where the polish took its whole share of the time; list search and CP-SAT serve it)
MAX_WINDOW = 48


def polish(problem: Problem, plan: Plan, watch: Stopwatch) -> Plan:
    """``plan`` (latency, one part per task) improved as the module describes while ``watch`` has time; ``plan``
    itself where that is not better, or where the graph has fewer than two windows."""
    if problem.objective.kind != "latency" or any(a.batch not in (None, problem.batch_size)
                                                  for a in plan.assignments):
        return plan
    order, weighted, series = series_points(problem)
    windows = windows_of(weighted, series)
    if len(windows) < 2:
        return plan
    state = _State(problem, plan, order, weighted)
    moves = 0
    for n, window in enumerate(windows):  # past the time, the rest are only timed: the order needs their times
        if not watch.expired and len(window) <= MAX_WINDOW:
            moves += state.descend(window, state.ahead(windows, n + 1), watch)
        state.settle(window)
    if not moves:
        return plan
    better = make_plan(problem, placement=state.device, order=state.order(), solver=plan.solver,
                       status=plan.status, watch=watch, bound=plan.bound, bound_source=plan.bound_source,
                       notes=plan.notes)
    if better.objective >= plan.objective * (1 - 1e-12):
        return plan
    return replace(better, stats=plan.stats, notes=better.notes + (
        f"windows between series points polished ({moves} moves): {plan.objective:.6g} -> {better.objective:.6g}",))


def _better(a: tuple[float, float], b: tuple[float, float]) -> bool:
    """Whether ``a`` (the next series point's end, the windows' last end) beats ``b``, beyond rounding."""
    if a[0] < b[0] * (1 - 1e-12):
        return True
    return a[0] <= b[0] * (1 + 1e-12) and a[1] < b[1] * (1 - 1e-12)


class _State:
    """Devices, memory and the times fixed so far: each task's end, each device's free time (absolute)."""

    def __init__(self, problem: Problem, plan: Plan, order: list[str], weighted: list[str]):
        graph = problem.graph
        self.problem = problem
        self.position = {t: i for i, t in enumerate(order)}
        self.device = {a.task: a.device for a in plan.assignments}
        heavy = set(weighted)
        self.followers: dict[str, list[str]] = {t: [] for t in order}  # weightless tasks that go where t goes
        grouped = {m for members in problem.colocation_groups.values() for m in members}
        allowed = problem.allowed_devices
        anchor: dict[str, str] = {}
        for t in order:  # a weightless task reads one tensor: it follows the weighted task behind it, where it
            preds = graph.predecessors[t]  # may run wherever that task may and no co-location group holds it
            if t not in heavy and t not in grouped and len(preds) == 1:
                behind = anchor.get(preds[0], preds[0])
                if set(allowed[behind]) <= set(allowed[t]):
                    anchor[t] = behind
                    self.followers[behind].append(t)
        self.anchor = anchor
        self.movable = {t for t in weighted if t not in grouped}
        self.memory = {t.id: t.memory_bytes for t in graph.tasks}
        self.capacity = {d.name: d.memory_bytes for d in problem.platform.devices}
        self.used = {d: 0.0 for d in self.capacity}
        for t, d in self.device.items():
            self.used[d] += self.memory[t]
        self.end: dict[str, float] = {}  # tasks of settled windows (and weightless ones outside any)
        self.free = {d: 0.0 for d in self.capacity}
        for t in order:  # what no window holds keeps its device: timed from its producers as it comes
            if t not in heavy and t not in anchor:
                self.end[t] = 0.0

    def ahead(self, windows: list[list[str]], first: int) -> list[str]:
        """The tasks of ``windows`` from ``first`` on, up to the first window that holds weights (whose devices
        memory fixed), at most :data:`MAX_WINDOW` tasks after the first window: a move pays off there (attention's
        products moved to the device of the output projection's weights save a transfer at that projection, two
        windows on)."""
        out: list[str] = []
        for window in islice(windows, first, None):  # no copy of the windows left per window
            if out and len(out) + len(window) > MAX_WINDOW:
                break
            out += window
            if any(self.memory[t] > 0 for t in window):
                break
        return out

    def members(self, window: list[str]) -> list[str]:
        """The window's tasks and their followers, in topological order."""
        tasks = [f for t in window for f in [t, *self.followers[t]]]
        return sorted(tasks, key=self.position.__getitem__)

    def timed(self, tasks: list[str]) -> dict[str, float]:
        """End of each of ``tasks`` (topological order) list-scheduled after what is settled."""
        problem, device, end = self.problem, self.device, self.end
        free = dict(self.free)
        local: dict[str, float] = {}
        for t in tasks:
            d = device[t]
            ready = free[d]
            for u in problem.graph.predecessors[t]:
                finish = local[u] if u in local else end.get(u, 0.0)
                if device[u] != d:
                    finish += problem.transfer(u, device[u], d)
                ready = max(ready, finish)
            local[t] = free[d] = ready + problem.time(t, d)
        return local

    def value(self, tasks: list[str], last: str) -> tuple[float, float]:
        local = self.timed(tasks)
        return local[last], max(local.values())

    def descend(self, window: list[str], following: list[str], watch: Stopwatch) -> int:
        """Changes of the window's tasks kept while the end of the windows ahead (``following``) falls; how
        many."""
        tasks = self.members(window + following)
        last = (following or window)[-1]
        movable = [t for t in window if t in self.movable]
        later = [t for t in following if t in self.movable]
        best, kept = self.value(tasks, last), 0
        for _ in range(PASSES):
            found = False
            for change in self._changes(movable, later, tasks):  # lazily: each sees the devices the last kept one left
                if watch.expired:
                    return kept
                value = self._kept(change, tasks, last, best)
                if value is not None:
                    best, kept, found = value, kept + 1, True
            if not found:
                break
        return kept

    def _changes(self, movable: list[str], later: list[str], tasks: list[str]):
        """Each task to another device it may use and that holds it, each run of tasks (:meth:`_runs`) to a device
        that the windows' tasks or their producers use, then two tasks holding weights swapping devices (a move
        does the rest), where memory allows."""
        allowed = self.problem.allowed_devices
        for t in movable:
            for d in allowed[t]:
                if d != self.device[t] and self._fits({t: d}):
                    yield {t: d}
        graph = self.problem.graph
        near = {self.device[u] for t in tasks for u in [t, *graph.predecessors[t]]}
        for group in self._runs(movable, later):
            for d in allowed[group[0]]:
                if d in near and d != self.device[group[0]] and all(d in allowed[t] for t in group) and self._fits(
                        dict.fromkeys(group, d)):
                    yield dict.fromkeys(group, d)
        heavy = [t for t in movable if self.memory[t] > 0]
        for i, a in enumerate(heavy):
            for b in heavy[i + 1:]:
                da, db = self.device[a], self.device[b]
                if da != db and db in allowed[a] and da in allowed[b] and self._fits({a: db, b: da}):
                    yield {a: db, b: da}

    def _runs(self, movable: list[str], later: list[str]) -> list[list[str]]:
        """The movable tasks of the window and of the windows ahead (``later``) in runs of more than one that
        hold a task of the window: tasks on one device joined by edges (through the tasks that follow them),
        which a single move would part (attention's matrix products and softmax pass tensors
        of 1.6 GB between them: moved one at a time, each move sends one over the network)."""
        graph, device = self.problem.graph, self.device
        root = {t: t for t in movable + later}

        def find(t: str) -> str:
            while root[t] != t:
                root[t] = root[root[t]]
                t = root[t]
            return t

        for t in root:
            for f in [t, *self.followers[t]]:
                for v in graph.successors[f]:
                    w = self.anchor.get(v, v)
                    if w in root and device[w] == device[t]:
                        root[find(w)] = find(t)
        runs: dict[str, list[str]] = {}
        for t in root:
            runs.setdefault(find(t), []).append(t)
        inside = set(movable)
        return [run for run in runs.values() if len(run) > 1 and not inside.isdisjoint(run)]

    def _fits(self, change: Mapping[str, str]) -> bool:
        """Whether every device ``change`` adds to holds its memory (one already over it may only shed)."""
        added: dict[str, float] = {}
        for t, d in change.items():
            added[self.device[t]] = added.get(self.device[t], 0.0) - self.memory[t]
            added[d] = added.get(d, 0.0) + self.memory[t]
        return all(more <= 0 or self.used[d] + more <= self.capacity[d] for d, more in added.items())

    def _kept(self, change: Mapping[str, str], tasks: list[str], last: str,
              best: tuple[float, float]) -> tuple[float, float] | None:
        """Make ``change`` and keep it where the windows end sooner than ``best`` (their new value); undo it and
        give None otherwise."""
        before = self._move(change)
        value = self.value(tasks, last)
        if _better(value, best):
            return value
        self._move(before)
        return None

    def _move(self, change: Mapping[str, str]) -> dict[str, str]:
        """Put each task (and its followers) on its device; the devices they had."""
        before = {t: self.device[t] for t in change}
        for t, d in change.items():
            self.used[self.device[t]] -= self.memory[t]
            self.used[d] += self.memory[t]
            for f in [t, *self.followers[t]]:
                self.device[f] = d
        return before

    def settle(self, window: list[str]) -> None:
        """Fix the window's times: its tasks' ends and its devices' free times."""
        local = self.timed(self.members(window))
        self.end.update(local)
        for t, e in local.items():
            self.free[self.device[t]] = max(self.free[self.device[t]], e)

    def order(self) -> dict[str, list[tuple[str, int]]]:
        """Each device's tasks in the order of their settled times (:meth:`JobGraph.order`)."""
        jobs = JobGraph.whole(self.problem)
        device_of = {(t, 0): d for t, d in self.device.items()}
        start = {(t, 0): self.end.get(t, 0.0) - self.problem.time(t, d) for t, d in self.device.items()}
        return jobs.order(device_of, start)
