"""Baseline: memory-aware topological fill.

Walk the tasks in a topological order and fill devices one after another, fastest device first, until a
device's load (compute plus the transfer hops into and out of it so far) would pass a target share of the
balanced load (or its memory is full), then move on. Several target shares and two orders (breadth-first
and depth-first) are tried; the best plan under the problem's objective is kept. The result is a
contiguous split (a pipeline), a sensible start for pipelined throughput and a plain yardstick for latency.
"""

from __future__ import annotations

import math

from ...bounds import spread_bound, work_bound
from ...errors import InfeasibleError, ValidationError
from ...problem import Problem
from ...validate import contiguity_violations
from ..auto import PIPELINE
from ..engines.plans import Stopwatch, evaluate, make_plan
from . import best_device

NAME = "greedy"
TARGET_FACTORS = (1.0, 1.05, 1.15, 1.3, 1.6, 2.0, 3.0, math.inf)  # inf: one device, memory permitting
# seconds past its limit that the fill goes on while no target share has fitted: a fill takes milliseconds on
# hundreds of tasks (0.1-0.2 s on GPT-3), and without one the caller may have no plan at all (found by
# fuzzing: under load, split at 0.2 s called a problem infeasible that a fill at 3 x the load placed)
GRACE_S = 1.0


def fastest_first(problem: Problem) -> list[str]:
    """Device names by their total time over the tasks they may run, fastest first."""
    n = problem.batch_size
    speed = {d.name: sum(problem.time(t.id, d.name, n) for t in problem.graph.tasks
                         if d.name in problem.allowed_devices[t.id]) for d in problem.platform.devices}
    return sorted(speed, key=lambda d: (speed[d], problem.platform.index[d]))


def fill(problem: Problem, target: float, order: list[str], devices: list[str]) -> dict[str, str] | None:
    """Place the tasks in ``order``, filling the ``devices`` one after another until a device's load
    (compute plus the transfer hops its tasks cause so far) would pass ``target``."""
    graph, platform = problem.graph, problem.platform
    n = problem.batch_size
    load = {d: 0.0 for d in devices}
    memory_left = {d: platform.by_name[d].memory_bytes for d in devices}
    entered: dict[str, set[str]] = {d: set() for d in devices}  # producers whose output enters d
    left: dict[str, set[str]] = {d: set() for d in devices}  # producers on d whose output leaves d
    groups = problem.colocation_groups
    placement: dict[str, str] = {}

    def hop(u: str, d: str) -> float:
        return platform.hop_time(graph.by_id[u], platform.by_name[d])

    def inputs(members, d: str) -> set[str]:
        return {u for m in members for u in graph.predecessors[m]
                if u in placement and placement[u] != d and u not in entered[d]}

    current = 0
    for t in order:
        if t in placement:
            continue
        task = graph.by_id[t]
        members = groups.get(task.colocation, (t,)) if task.colocation else (t,)
        need = sum(graph.by_id[m].memory_bytes for m in members)

        def fits(d: str) -> bool:
            return memory_left[d] >= need and all(d in problem.allowed_devices[m] for m in members)

        def cost(d: str) -> float:
            return sum(problem.time(m, d, n) for m in members) + sum(hop(u, d) for u in inputs(members, d))

        while (current < len(devices) - 1 and load[devices[current]] > 0
               and (not fits(devices[current]) or load[devices[current]] + cost(devices[current]) > target)):
            here, there = devices[current], devices[current + 1]
            if fits(here) and fits(there) and load[there] + cost(there) >= load[here] + cost(here):
                break  # the next device would end up busier than this one: stay
            current += 1
        choice = devices[current] if fits(devices[current]) else None
        if choice is None:
            usable = [d for d in devices if fits(d)]
            if not usable:
                return None
            choice = min(usable, key=lambda d: (load[d] + cost(d), platform.index[d]))
        load[choice] += cost(choice)
        for u in inputs(members, choice):
            entered[choice].add(u)
            source = placement[u]
            if u not in left[source]:
                left[source].add(u)
                load[source] += hop(u, source)
        for m in members:
            placement[m] = choice
        memory_left[choice] -= need
    return placement


def depth_first_order(problem: Problem) -> list[str]:
    """A topological order that finishes a branch before starting the next (the last task made ready
    goes first), so that a fill keeps branches together instead of cutting across them."""
    graph = problem.graph
    rank = {t: i for i, t in enumerate(graph.topological_order)}
    missing = {t: len(graph.predecessors[t]) for t in rank}
    stack = sorted((t for t, k in missing.items() if k == 0), key=rank.get, reverse=True)
    order = []
    while stack:
        t = stack.pop()
        order.append(t)
        ready = []
        for v in graph.successors[t]:
            missing[v] -= 1
            if missing[v] == 0:
                ready.append(v)
        stack.extend(sorted(ready, key=rank.get, reverse=True))
    return order


def best_fill(problem: Problem, watch: Stopwatch, base: float | None = None):
    """(value, target factor, parts) of the best fill over the target shares of ``base`` (a lower bound on
    the load), the best one then narrowed down by bisection against the largest worse share below it; None
    when none fits, or none had fitted :data:`GRACE_S` past the time (past it, the shares are tried only until
    one fits)."""
    if not base:  # the work LP in a fifth of the time left, else each task's cheapest cost spread evenly
        base = max(work_bound(problem, max(watch.left / 5, 0.05)) or spread_bound(problem), 1e-12)
    best = None
    orders = (problem.graph.topological_order, depth_first_order(problem))
    devices = fastest_first(problem)
    tried: dict[tuple[int, float], float] = {}
    for k, factor in ((k, f) for k in range(len(orders)) for f in TARGET_FACTORS):
        found = _try_fill(problem, base, factor, orders[k], devices)
        tried[k, factor] = found[0] if found else math.inf
        if found is not None and (best is None or found[0] < best[0]):
            best = (*found, k)
        if watch.expired and (best is not None or _past_grace(watch)):
            return best[:3] if best else None
    for found in _single_devices(problem):  # the fill may start on a device that cannot run it all
        if best is None or found[0] < best[0]:
            best = (*found, 0)
    if best is None or not math.isfinite(best[1]):
        return best[:3] if best else None
    k = best[3]
    # on GPT-3's pipeline over six servers: 1.849 s at 1.15 x the LP's load, 12.8 s at 1.1 (memory left
    # the last device the rest); the bisection between them finds 1.783
    lo = max((f for (kk, f), v in tried.items() if kk == k and f < best[1] and v > best[0]), default=None)
    hi = best[1]
    if lo is None:
        return best[:3]
    for _ in range(BISECTIONS):
        mid = (lo + hi) / 2
        found = _try_fill(problem, base, mid, orders[k], devices)
        if found is not None and found[0] <= best[0]:
            best, hi = (*found, k), mid
        else:
            lo = mid
        if watch.expired:
            break
    return best[:3]


BISECTIONS = 8


def _past_grace(watch: Stopwatch) -> bool:
    return watch.elapsed > watch.limit + GRACE_S


def _try_fill(problem: Problem, base: float, factor: float, order: list[str], devices: list[str]):
    """(value, factor, parts) of one fill, or None when it does not fit (memory, contiguity, calls)."""
    placement = fill(problem, base * factor, order, devices)
    if placement is None or (problem.objective.kind == "pipeline" and problem.objective.contiguous
                             and contiguity_violations(problem, placement)):
        return None
    parts = {t: [(d, problem.batch_size)] for t, d in placement.items()}
    try:
        return evaluate(problem, parts)[0], factor, parts
    except ValidationError:  # call-latency: an accelerator's share needs more calls than allowed
        return None


def _single_devices(problem: Problem):
    """(value, inf, parts) of the whole graph on each device that may run every task and hold it all: the
    fills start on the fastest device in total, which may be one that cannot (a call-latency plan then needs
    more calls than allowed, where one device alone needs one)."""
    for d in best_device.candidates(problem):
        parts = {t.id: [(d, problem.batch_size)] for t in problem.graph.tasks}
        try:
            yield evaluate(problem, parts)[0], math.inf, parts
        except ValidationError:
            continue


def solve(problem: Problem, *, time_limit: float = 60.0, seed: int = 0):
    return fill_plan(problem, Stopwatch(time_limit))


def fill_plan(problem: Problem, watch: Stopwatch, base: float | None = None):
    """The best fill as a plan; ``base``: a lower bound on the balanced load the caller already knows
    (the work LP takes seconds at GPT-3's size, more than a share of a short limit)."""
    best = best_fill(problem, watch, base)
    if best is None:
        calls = (" with at most the allowed calls per accelerator (allow more with --calls)"
                 if problem.objective.kind == "call-latency" else "")
        kind = problem.objective.kind
        contiguous = " in contiguous stages" if kind == "pipeline" and problem.objective.contiguous else ""
        exact = PIPELINE.get(kind, "exact or split")
        if _past_grace(watch):
            raise InfeasibleError(f"greedy's fill found no placement{contiguous} within the devices' memory{calls} "
                                  f"before its time ran out ({watch.limit:g} s and {GRACE_S:g} s of grace): raise "
                                  "the time limit")
        raise InfeasibleError(f"greedy's fill found no placement{contiguous} within the devices' memory{calls}: "
                              f"try {exact} (an exact search packs memory) or raise the memory limit")
    value, factor, parts = best
    return make_plan(problem, parts, solver=NAME, status="feasible", watch=watch,
                     notes=[f"fill target {factor:g} x the balanced load"])
