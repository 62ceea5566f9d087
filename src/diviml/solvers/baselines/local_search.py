"""Baseline: local search for pipeline splits (random restarts, best single move), as in NeurIPS 2020.

From a random feasible placement of the co-location classes, repeatedly apply the single move (one class
to another device) that lowers the max-load most, until none does; restart from a new random placement
until the time runs out; keep the best. Non-contiguous splits, unless the objective asks for contiguous
ones: then a start is a topological order of the classes cut into runs over the devices (a run of a
topological order is convex), and a move counts only where the split stays contiguous. Seeded and
deterministic for a seed.
"""

from __future__ import annotations

import math

import numpy as np

from ...errors import InfeasibleError
from ...problem import Problem
from ...validate import contiguity_violations
from ..engines.plans import MAKE_PLAN_S_PER_TASK, Stopwatch, make_plan
from ..pipeline.common import Contracted
from ..pipeline.evaluate import ClassEvaluator

NAME = "local-search"
TRIES = 100  # random starts that fail memory (or contiguity) before the search gives up


def _random_start(ev: ClassEvaluator, rng: np.random.Generator) -> np.ndarray | None:
    n_dev = len(ev.devices)
    used = np.zeros(n_dev)
    dev = np.zeros(len(ev.size), dtype=np.int64)
    for c in rng.permutation(len(ev.size)):
        options = [j for j in range(n_dev) if math.isfinite(ev.time[c, j]) and used[j] + ev.size[c] <= ev.capacity[j]]
        if not options:
            return None
        j = options[rng.integers(len(options))]
        dev[c] = j
        used[j] += ev.size[c]
    return dev


def _random_runs(ev: ClassEvaluator, rng: np.random.Generator) -> np.ndarray | None:
    """The classes in topological order cut into runs, one per device of a random order, each run ending at a random
    share of the work, or earlier where the next class would not fit the device's memory or may not run
    there; None where the devices run out first."""
    devices = list(rng.permutation(len(ev.devices)))
    work = ev.fastest
    share = rng.random(len(devices)) + 1e-9
    target = np.cumsum(share / share.sum()) * work.sum()
    dev = np.full(len(ev.size), -1, dtype=np.int64)
    run, done, held = 0, 0.0, 0.0
    for c in ev.contracted.topological_order:
        while run < len(devices) and (not math.isfinite(ev.time[c, devices[run]])
                                      or held + ev.size[c] > ev.capacity[devices[run]]
                                      or (done > target[run] and held > 0)):
            run, held = run + 1, 0.0
        if run == len(devices):
            return None
        dev[c] = devices[run]
        held += ev.size[c]
        done += work[c]
    if not math.isfinite(ev.value(dev)) or contiguity_violations(ev.problem, ev.placement(dev)):
        return None
    return dev


def descend(ev: ClassEvaluator, dev: np.ndarray, watch: Stopwatch, contiguous: bool = False) -> tuple[np.ndarray, float]:
    value = ev.value(dev)
    n_dev = len(ev.devices)
    while not watch.expired:
        best = (value, -1, -1)
        for c in range(len(dev)):
            old = dev[c]
            for j in range(n_dev):
                if j == old or not math.isfinite(ev.time[c, j]):
                    continue
                dev[c] = j
                v = ev.value(dev)
                if v < best[0] - 1e-12 and not (contiguous and contiguity_violations(ev.problem, ev.placement(dev))):
                    best = (v, c, j)
            dev[c] = old
            if watch.expired:
                break
        if best[1] < 0:
            break
        value, c, j = best
        dev[c] = j
    return dev, value


def solve(problem: Problem, *, time_limit: float = 60.0, seed: int = 0, progress=None):
    total = Stopwatch(time_limit)
    watch = Stopwatch(max(time_limit - MAKE_PLAN_S_PER_TASK * len(problem.graph), 0.0))  # the plan is made after
    contiguous = problem.objective.contiguous
    ev = ClassEvaluator(problem, Contracted(problem, fuse_cycles=contiguous))
    ev.require_placeable()
    start_at = _random_runs if contiguous else _random_start
    rng = np.random.default_rng(seed)
    best: tuple[float, np.ndarray] | None = None
    restarts = 0
    while not watch.expired or best is None:
        start = start_at(ev, rng)
        restarts += 1
        if start is None:
            if restarts > TRIES and best is None:
                raise InfeasibleError("local search found no random placement within the memory limits"
                                      + (" that is contiguous: use dp or ip" if contiguous else ""))
            continue
        dev, value = descend(ev, start, watch, contiguous)
        if best is None or value < best[0]:
            best = (value, dev.copy())
            if progress:
                progress(f"  local search: {value:.6g} after {restarts} restarts ({watch.elapsed:.1f} s)")
    return make_plan(problem, placement=ev.placement(best[1]), solver=NAME, status="feasible", watch=total,
                     stats={"restarts": float(restarts)})
