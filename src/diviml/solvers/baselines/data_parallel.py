"""Baseline: data parallelism with unequal shares, the batch split over devices in proportion to what they do.

Every device that can run and hold the whole graph gets a share ``n_d`` of the batch (shares sum to the
batch, some may be 0) and runs every task on its rows; a device's rows flow through the graph without leaving
it. All integer shares are tried when there are at most ``MAX_COMPOSITIONS`` of them (8 samples over 3
devices: 45), else a descent from the speed-proportional shares moving one sample at a time between two
devices, each share simulated while the time allows it and the chosen plan's own simulation after it. A fast
and a slow GPU then split 5/3 rather than 4/4, which equal sub-batches cannot express. A task that mixes the
samples of its batch runs whole on the device of the largest share, the others' rows gathered there.
"""

from __future__ import annotations

import itertools
import math
import time

from ...errors import InfeasibleError, InputError
from ...problem import Problem
from ..engines.jobs import proportional, speeds
from ..engines.plans import Stopwatch, evaluate, make_plan
from . import best_device

NAME = "data-parallel"
MAX_COMPOSITIONS = 2000


def _compositions(n: int, k: int):
    for cuts in itertools.combinations(range(n + k - 1), k - 1):
        edges = (-1, *cuts, n + k - 1)
        yield tuple(b - a - 1 for a, b in zip(edges, edges[1:]))


def solve(problem: Problem, *, time_limit: float = 60.0, seed: int = 0):
    if problem.objective.kind != "batch":
        raise InputError("data-parallel splits a batch: use --objective batch")
    watch = Stopwatch(time_limit)
    devices = best_device.candidates(problem)
    if not devices:
        raise InfeasibleError("no device can run every task and hold the whole graph, which data parallelism "
                              "needs on every device it uses: use heft, split or exact")
    n = problem.batch_size
    tried: dict[tuple[int, ...], float] = {}
    cost = 0.0  # the most seconds one simulation has taken

    def parts(shares: tuple[int, ...]) -> dict:
        split = [(d, s) for d, s in zip(devices, shares) if s > 0]
        whole = [(max(split, key=lambda p: p[1])[0], n)]  # a task that mixes samples: on the largest share's device
        return {t.id: whole if t.id in problem.whole_batch else split for t in problem.graph.tasks}

    def value(shares: tuple[int, ...]) -> float:
        nonlocal cost
        if shares not in tried:
            began = time.perf_counter()
            tried[shares] = evaluate(problem, parts(shares))[0]
            cost = max(cost, time.perf_counter() - began)
        return tried[shares]

    def affordable() -> bool:  # another simulation, and the chosen plan's (simulated and validated) after it
        return watch.left > 3 * cost

    best = proportional(n, speeds(problem, devices))
    value(best)
    for k in range(len(devices)):  # the whole batch on one device
        alone = tuple(n if i == k else 0 for i in range(len(devices)))
        if not affordable():
            break
        best = min(best, alone, key=value)
    if math.comb(n + len(devices) - 1, len(devices) - 1) <= MAX_COMPOSITIONS:
        for shares in _compositions(n, len(devices)):
            if not affordable():
                break
            if value(shares) < value(best):
                best = shares
    else:
        improved = True
        while improved and affordable():
            improved = False
            for a, b in itertools.permutations(range(len(devices)), 2):
                if not affordable():
                    break
                if best[a] == 0:
                    continue
                moved = tuple(s - (i == a) + (i == b) for i, s in enumerate(best))
                if value(moved) < value(best):
                    best, improved = moved, True
    share_text = ", ".join(f"{d} {s}" for d, s in zip(devices, best) if s > 0)
    return make_plan(problem, parts(best), solver=NAME, status="feasible", watch=watch,
                     notes=[f"shares of the batch of {n}: {share_text} ({len(tried)} splits tried)"],
                     stats={"splits_tried": float(len(tried))})
