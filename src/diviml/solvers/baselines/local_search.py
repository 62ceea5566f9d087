"""Baseline: local search for pipeline splits (random restarts, best single move), as in NeurIPS 2020.

From a random feasible placement of the co-location classes, repeatedly apply the single move (one class
to another device) that lowers the max-load most, until none does; restart from a new random placement
until the time runs out; keep the best. Non-contiguous splits. Seeded and deterministic for a seed.
"""

from __future__ import annotations

import math

import numpy as np

from ...errors import InfeasibleError
from ...problem import Problem
from ..engines.plans import Stopwatch, make_plan
from ..pipeline.common import Contracted
from ..pipeline.evaluate import ClassEvaluator

NAME = "local-search"


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


def descend(ev: ClassEvaluator, dev: np.ndarray, watch: Stopwatch) -> tuple[np.ndarray, float]:
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
                if v < best[0] - 1e-12:
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
    watch = Stopwatch(time_limit)
    ev = ClassEvaluator(problem, Contracted(problem))
    rng = np.random.default_rng(seed)
    best: tuple[float, np.ndarray] | None = None
    restarts = 0
    while not watch.expired or best is None:
        start = _random_start(ev, rng)
        restarts += 1
        if start is None:
            if restarts > 100 and best is None:
                raise InfeasibleError("local search found no random placement within the memory limits")
            continue
        dev, value = descend(ev, start, watch)
        if best is None or value < best[0]:
            best = (value, dev.copy())
            if progress:
                progress(f"  local search: {value:.6g} after {restarts} restarts ({watch.elapsed:.1f} s)")
    return make_plan(problem, placement=ev.placement(best[1]), solver=NAME, status="feasible", watch=watch,
                     stats={"restarts": float(restarts)})
