"""The memory segments bound: latency where memory keeps whole tasks off their fastest devices and moving a
tensor between two kinds of device costs at least its cheapest transfer.

A *series point* is a task that every other task of nonzero time or memory precedes or follows (a
transformer's residual adds, a CNN's block outputs). Between two series points lies a *segment*: its tasks run
within the window from the previous series point's finish to its own, so a plan's makespan is at least the sum
of the windows, each at least the segment's longest path and its work on each kind of device spread over
that kind's devices. A kind is a device type on one group of alike servers (its devices pool their memory;
:func:`._lp.server_kinds`), so that a series point on a host CPU is on the CPU of some server, not on every
server at once. Within a segment, a kind of several accelerators is two: the device of the series point
entering it (or any one) and the others (:func:`._series.segment_kinds`), so that parallel branches spread over
a kind's devices pay a transfer between two of them. With whole tasks on these kinds and transfers priced
between kinds at their cheapest route over devices (a tensor between two servers' GPUs pays the network,
through a host CPU or not), the bound is the least such sum whose placement holds every kind's memory. Relaxing memory with prices ``pi`` per byte and kind
(Lagrange) splits it into a dynamic program over the segments (:mod:`._series` finds them), the state being
the kind that runs the series point; each segment's cheapest placement for a given entry and exit kind is a
small MILP (HiGHS; the pair of kinds at each edge in its exact LP hull) or, where it has few placements, the
best of them all, and identical segments (a model's repeated layers) are priced once. The prices come from a
master LP over the placements found so far (column generation), drawn halfway towards the prices of the best
bound so far (smoothing: GPT-3's prefill over six-servers reaches 23.37 s in 8.6 s, against 22.65 s without),
and every set of prices gives a valid bound, so the best one found before the deadline is kept.

Against the memory path LP (fractional tasks, free transfers) it gains where parallel branches let fractions
of many tasks hide their slow share, where memory pushes layers across servers, and where a kind has few
devices: GPT-3's prefill 21.13 s -> 23.54 s on six-servers (22.35 s with one kind per device type, routes
closed over kinds and a kind's devices free to share a segment; 23.29 s without the last), 42.77 -> 48.89 s on
a100-ib-2x8, 36.03 -> 44.57 s on h100-nvlink-8 (16, 2 and 0.8 s on the 2-core machine). The price of the
finer kinds is time: 36 or more segment MILPs a walk on six-servers where there were 16; GPT-3's decoding step
there converges in 48 s (8 s before) for no better bound (3.76 s), so a 30 s solve stops short of it.
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass
from time import perf_counter

import numpy as np
from scipy.optimize import Bounds, LinearConstraint, linprog, milp
from scipy.sparse import csr_matrix

from ..native import native_output_discarded
from ..problem import Problem
from ._lp import _unit, server_kinds
from ._packing import packable_memory
from ._series import MAX_TASKS, Segment, base_kind, segment_kinds, segments_of
from ._simple import _unit_costs

__all__ = ["Relaxation", "memory_segments_bound", "memory_segments_relaxation", "same_mix"]

PRICE_LIMIT_S = 5.0  # at most, per segment MILP (its dual bound counts when it is cut short)
CONVERGED = 1e-4  # the master's value within this share of the best bound: the prices are good enough
SMOOTHING = 0.5  # the next prices: this share of the best bound's, the rest the master's (Wentges smoothing)
MIXES_KEPT = 4  # the last masters' distinct mixes kept for the plan built from them (a later one is not always better)
ENUMERATED = 256  # a segment with at most this many placements is priced by trying them all (a MILP: 10 ms)
MILPS_A_WALK = 8  # segment MILPs a walk solves before a walk of placed steps may stand in for its column

Column = tuple[float, dict[str, float], list[tuple[str, ...]]]  # summed windows, memory per kind, kinds per segment


@dataclass(frozen=True)
class Relaxation:
    """What the bound's last master LPs found, the last first: each a mix of whole placements, each a weight and
    a kind of device per task of the segments, whose weighted memory fits every kind's; and each kind's
    devices."""
    mixes: tuple[tuple[tuple[float, dict[str, str]], ...], ...]
    kinds: dict[str, tuple[str, ...]]


def memory_segments_bound(problem: Problem, time_limit: float | None = None) -> float:
    """The bound described above (seconds), 0 where it does not apply (not latency, memory not binding, a
    segment too large) or does not finish a first pass within ``time_limit``. The placements it mixed are
    kept with the problem (:func:`memory_segments_relaxation`)."""
    if problem.objective.kind != "latency":
        return 0.0
    stop = math.inf if time_limit is None else perf_counter() + time_limit
    devices_of = server_kinds(problem)
    kinds = sorted(devices_of)
    capacity = _capacities(problem, devices_of, stop)
    total = sum(t.memory_bytes for t in problem.graph.tasks)
    if all(c >= total for c in capacity.values()) or len(problem.graph) > MAX_TASKS:
        return 0.0  # memory keeps nothing off its fastest kind (no price to pay), or too large a graph
    unit = _unit(_unit_costs(problem))
    counts = segment_kinds(problem, devices_of)  # the kinds' devices, one and the others apart
    chain = segments_of(problem, {k: devices_of[k] for k in kinds}, counts, unit)
    if chain is None:
        return 0.0
    segments, runs, closed = chain
    shapes: dict[Segment, int] = {}
    index = [shapes.setdefault(s, len(shapes)) for s in segments]  # a model's repeated layers: one shape
    best = -math.inf
    prices = {k: 0.0 for k in kinds}
    columns = [_column(segments, choice, counts) for choice in _uniform_choices(segments, kinds)]
    master = _master([c for c in columns if c is not None], capacity, kinds)
    if master is not None:  # the first prices from every task on one kind (prices of 0 prove the critical path)
        prices = master[1]
    centre: dict[str, float] | None = None  # the prices of the best bound so far
    masters = [master] if master is not None else []
    cap: float = MILPS_A_WALK
    while perf_counter() < stop:
        walk = _walk(segments, index, closed, counts, prices, stop, cap)
        if walk is None or not math.isfinite(walk[0]):
            break  # out of time, or no kind can run some series point (the solvers will say so)
        value, choices, stood_in = walk
        here = value - sum(prices[k] * capacity[k] for k in kinds if math.isfinite(capacity[k]))
        if here > best:
            best, centre = here, prices
        columns.append(_column(segments, choices, counts))
        before = master[0] if master is not None else math.inf
        master = _master([c for c in columns if c is not None], capacity, kinds)
        if master is not None:
            masters.append(master)
        if master is None or master[0] - best <= CONVERGED * abs(master[0]):
            break
        moved = not math.isfinite(before) or master[0] < before - CONVERGED * abs(before)
        cap = MILPS_A_WALK if moved or not stood_in else math.inf  # a stand-in that added nothing: price it all
        share = SMOOTHING if moved and centre is not None else 0.0  # a walk that added nothing: the master's own
        prices = {k: share * (centre or {}).get(k, 0.0) + (1 - share) * master[1][k] for k in kinds}
    if masters:
        mixes: list = []
        for m in masters[::-1]:  # a master that changed nothing repeats the mix before it: kept once
            if len(mixes) == MIXES_KEPT:
                break
            mix = tuple((weight, {t: k for run, kinds_of in zip(runs, column[2]) for t, k in zip(run, kinds_of)})
                        for weight, column in m[2] if weight > 1e-9)
            if not any(same_mix(mix, kept) for kept in mixes):
                mixes.append(mix)
        problem.__dict__["memory_segments"] = Relaxation(tuple(mixes), {k: tuple(devices_of[k]) for k in kinds})
    return max(0.0, best) / unit * (1 - 1e-6) if best > -math.inf else 0.0


def same_mix(a: tuple[tuple[float, dict[str, str]], ...], b: tuple[tuple[float, dict[str, str]], ...]) -> bool:
    """Whether two mixes hold the same placements at the same weights, to 1e-6 (two masters' LPs may give one mix
    with weights a few ulps apart: GPT-3's decoding step over six-servers)."""
    return len(a) == len(b) and all(abs(wa - wb) <= 1e-6 and ka == kb for (wa, ka), (wb, kb) in zip(a, b))


def memory_segments_relaxation(problem: Problem) -> Relaxation | None:
    """The mix of placements :func:`memory_segments_bound` last found for ``problem`` (None: none)."""
    return problem.__dict__.get("memory_segments")


def _capacities(problem: Problem, devices_of: dict[str, list[str]], stop: float) -> dict[str, float]:
    """Each kind's pooled memory, as much as whole tasks can fill of it (:func:`._packing.packable_memory`)."""
    return {k: packable_memory(problem, names, max(0.0, stop - perf_counter())) for k, names in devices_of.items()}


def _enumerable(segment: Segment) -> bool:
    return math.prod(len(item.times) for item in segment) <= ENUMERATED


def _price(segment: Segment, prices: dict[str, float], entry: str | None, exit_: str | None, counts: dict[str, int],
           stop: float, relaxed: bool = False) -> tuple[float, tuple[str, ...] | None]:
    """The least longest path plus priced memory over whole-task placements of ``segment`` whose series point
    runs on ``exit_`` (None: any), entered from a series point on ``entry``: a lower bound on it (the MILP's
    dual bound) and the placement found (None if none). ``relaxed``: the MILP's LP relaxation instead, a
    lower bound on the MILP's (about 10 ms against 100-600 ms on GPT-3's layer), without a placement."""
    if _enumerable(segment):
        return _enumerate(segment, prices, entry, exit_, counts)
    col: dict = {}
    for i, item in enumerate(segment):
        for k, _ in item.times:
            col["x", i, k] = len(col)
        col["e", i] = len(col)
        for u, _ in item.preds:
            for a, _ in segment[u].times:
                for b, _ in item.times:
                    col["y", u, i, a, b] = len(col)
    col["C"] = len(col)
    cost, upper = np.zeros(len(col)), np.full(len(col), np.inf)
    integral = np.zeros(len(col))
    cost[col["C"]] = 1.0
    for i, item in enumerate(segment):
        for k, _ in item.times:
            j = col["x", i, k]
            cost[j], upper[j], integral[j] = prices.get(base_kind(k), 0.0) * item.memory, 1.0, 1
            if exit_ is not None and i == len(segment) - 1 and base_kind(k) != exit_:
                upper[j] = 0.0
    rows = _path_rows(segment, col, entry)
    for k, n in counts.items():  # the segment's work on a kind, spread over its devices, fits in its window
        rows.append(({**{col["x", i, k]: p / n for i, item in enumerate(segment) for kk, p in item.times if kk == k},
                      col["C"]: -1.0}, -np.inf, 0.0))
    for i, item in enumerate(segment):
        rows.append(({col["x", i, k]: 1.0 for k, _ in item.times}, 1.0, 1.0))
    entries = [(r, j, v) for r, (row, _, _) in enumerate(rows) for j, v in row.items()]
    r_, j_, v_ = zip(*entries)
    a = csr_matrix((v_, (r_, j_)), shape=(len(rows), len(col)))
    # HiGHS prints "HighsMipSolverData::transformNewIntegerFeasibleSolution tmpSolver.run();" when it mends a
    # presolved solution, which says nothing to a user (GPT-3's decoding step over six-servers: once a solve)
    with native_output_discarded():
        res = milp(cost, constraints=LinearConstraint(a, [low for _, low, _ in rows],
                                                      [high for _, _, high in rows]),
                   integrality=np.zeros(len(col)) if relaxed else integral, bounds=Bounds(np.zeros(len(col)), upper),
                   options={"time_limit": max(0.01, min(PRICE_LIMIT_S, stop - perf_counter())), "mip_rel_gap": 0.0,
                            "presolve": False})
    if res.status == 2:  # infeasible: the series point cannot run on exit_
        return math.inf, None
    if relaxed:
        return (max(0.0, res.fun) if res.status == 0 else 0.0), None
    dual = getattr(res, "mip_dual_bound", None)
    value = dual if dual is not None and math.isfinite(dual) else (res.fun if res.status == 0 else 0.0)
    if res.x is None:
        return max(0.0, value), None
    choice = tuple(max(item.times, key=lambda kt: res.x[col["x", i, kt[0]]])[0] for i, item in enumerate(segment))
    return min(value, res.fun), choice


def _path_rows(segment: Segment, col: dict, entry: str | None) -> list[tuple[dict, float, float]]:
    """Rows ``low <= row . x <= high``: each task finishes its own time after the entry series point's
    transfer, and after its predecessors' finish plus the transfer between their kinds, and before C. The
    pair of kinds of a predecessor u and its reader i is ``y[u,i,a,b]``, whose sums over b and over a are
    ``x[u,a]`` and ``x[i,b]`` (the product's exact hull in the LP, where big-M rows per pair are weak)."""
    rows: list[tuple[dict, float, float]] = []
    for i, item in enumerate(segment):
        own = {col["x", i, k]: p for k, p in item.times}
        entered = dict(item.entry).items() if entry is not None else ()
        rows.append(({**own, **{col["x", i, b]: own[col["x", i, b]] + c for (a, b), c in entered
                                if a == entry and ("x", i, b) in col}, col["e", i]: -1.0}, -np.inf, 0.0))
        for u, costs in item.preds:
            pair = dict(costs)
            kinds_u, kinds_i = [a for a, _ in segment[u].times], [b for b, _ in item.times]
            rows.append(({**own, col["e", i]: -1.0, col["e", u]: 1.0,
                          **{col["y", u, i, a, b]: pair.get((a, b), 0.0) for a in kinds_u for b in kinds_i
                             if pair.get((a, b), 0.0) > 0}}, -np.inf, 0.0))
            for a in kinds_u:
                rows.append(({**{col["y", u, i, a, b]: 1.0 for b in kinds_i}, col["x", u, a]: -1.0}, 0.0, 0.0))
            for b in kinds_i:
                rows.append(({**{col["y", u, i, a, b]: 1.0 for a in kinds_u}, col["x", i, b]: -1.0}, 0.0, 0.0))
        rows.append(({col["e", i]: 1.0, col["C"]: -1.0}, -np.inf, 0.0))
    return rows


def _enumerate(segment: Segment, prices: dict[str, float], entry: str | None, exit_: str | None,
               counts: dict[str, int]) -> tuple[float, tuple[str, ...] | None]:
    """:func:`_price` by trying every placement."""
    options = [[k for k, _ in item.times] for item in segment]
    if exit_ is not None:
        options[-1] = [k for k in options[-1] if base_kind(k) == exit_]
    best: tuple[float, tuple[str, ...] | None] = (math.inf, None)
    for choice in itertools.product(*options):
        value = _longest(segment, choice, entry, counts)
        value += sum(prices.get(base_kind(k), 0.0) * item.memory for item, k in zip(segment, choice))
        if value < best[0]:
            best = (value, choice)
    return best


def _walk(segments: list[Segment], index: list[int], closed: bool, counts: dict[str, int], prices: dict[str, float],
          stop: float, cap: float = math.inf) -> tuple[float, list[tuple[str, ...] | None], bool] | None:
    """The least sum of the segments' priced paths, the state being the kind of the last series point, and the
    placement per segment that reaches it; None if the deadline passes first. Identical segments, and entry
    kinds a segment does not see, are priced once: first by the LP relaxation of their MILP, then by the MILP
    only where the cheapest walk goes, until every step of the cheapest walk is MILP-priced. Any other walk
    costs at least its relaxed price, so that walk is the least, as if every MILP had been solved (GPT-3's
    prefill over six-servers: 36 MILPs of its layer a walk, 0.1-0.6 s each, became 36 LPs of 7 ms and 1-8
    MILPs; the bound's 8 walks to 23.54 s took 38 s and now 16 s). After ``cap`` MILPs the cheapest walk of
    MILP-placed steps, where there is one, *stands in* for it as the column (the third value says so), and
    the walk's value stays the cheapest over the prices known (LP where no MILP was solved): still a bound
    for these prices. The caller prices a walk in full after a stand-in that added nothing. Where the
    pairs of entry and exit kinds all cost about the same, the cheapest walk otherwise moves to each in turn
    (GPT-3's decoding step over six-servers: a walk of 36 MILPs of about 1 s each, all within 1% of one
    another; the bound reached 3.7046 s in 5 s and no further in the 11 s it had in a 60 s solve, and now
    3.7334 s, its mixes making a plan of 3.90 s, not 3.98 s)."""
    exact: dict = {}
    relaxed: dict = {}

    def price(n: int, key: tuple) -> float | None:
        if key in exact:
            return exact[key][0]
        if key not in relaxed:
            if perf_counter() > stop:
                return None
            found = _price(segments[n], prices, key[1], key[2], counts, stop, relaxed=True)
            (exact if _enumerable(segments[n]) else relaxed)[key] = found
        return (exact[key] if key in exact else relaxed[key])[0]

    def placed(n: int, key: tuple) -> float:  # a step's price where its MILP found a placement
        return exact[key][0] if key in exact and exact[key][1] is not None else math.inf

    solved = 0
    while True:
        cheapest = _cheapest(segments, index, closed, counts, price)
        if cheapest is None:
            return None
        value, steps = cheapest
        loose = {key: n for n, key in steps if key not in exact}
        if not loose:
            return value, [exact[key][1] for _, key in steps], False
        if solved >= cap:
            found = _cheapest(segments, index, closed, counts, placed)
            if found is not None and math.isfinite(found[0]):
                return value, [exact[key][1] for _, key in found[1]], True
        for key, n in loose.items():
            if perf_counter() > stop:
                return None
            exact[key] = _price(segments[n], prices, key[1], key[2], counts, stop)
            solved += 1


def _cheapest(segments: list[Segment], index: list[int], closed: bool, counts: dict[str, int],
              price) -> tuple[float, list[tuple[int, tuple]]] | None:
    """The dynamic program of :func:`_walk` over ``price(n, key)`` (None: out of time): the least sum and the
    (segment, key) of each of its steps."""
    best: dict[str | None, float] = {None: 0.0}
    came: list[dict[str | None, tuple]] = []  # per segment: exit kind -> the key that reached it best
    for n, segment in enumerate(segments):
        sees_entry = any(item.entry for item in segment)
        exits: list[str | None] = [k for k in counts if base_kind(k) == k] if closed or n < len(segments) - 1 else [None]
        following: dict[str | None, float] = {}
        came.append({})
        for exit_ in exits:
            for entry, value in best.items():
                key = (index[n], entry if sees_entry else None, exit_)
                priced = price(n, key)
                if priced is None:
                    return None
                if exit_ not in following or value + priced < following[exit_]:
                    following[exit_], came[n][exit_] = value + priced, (entry, key)
        best = following
    state = min(best, key=best.__getitem__)
    value, steps = best[state], []
    for n in range(len(segments) - 1, -1, -1):
        state, key = came[n][state]
        steps.append((n, key))
    return value, steps[::-1]


def _longest(segment: Segment, choice: tuple[str, ...], entry: str | None, counts: dict[str, int]) -> float:
    """The segment's longest path under ``choice``, transfers between kinds included, or its work on a kind
    spread over that kind's devices where that is longer."""
    finish: list[float] = []
    for i, item in enumerate(segment):
        k = choice[i]
        start = dict(item.entry).get((entry, k), 0.0) if entry is not None else 0.0
        for u, costs in item.preds:
            start = max(start, finish[u] + dict(costs).get((choice[u], k), 0.0))
        finish.append(start + dict(item.times)[k])
    work: dict[str, float] = {}
    for item, k in zip(segment, choice):
        work[k] = work.get(k, 0.0) + dict(item.times)[k] / counts[k]
    return max(max(finish, default=0.0), max(work.values(), default=0.0))


def _column(segments: list[Segment], choices: list[tuple[str, ...] | None], counts: dict[str, int]) -> Column | None:
    """A placement of every segment as the master's column: its summed windows, memory per kind, and kinds."""
    total, memory, kinds = 0.0, {}, []  # type: tuple[float, dict[str, float], list[tuple[str, ...]]]
    entry = None
    for segment, choice in zip(segments, choices):
        if choice is None:
            return None
        total += _longest(segment, choice, entry, counts)
        for item, k in zip(segment, choice):
            memory[base_kind(k)] = memory.get(base_kind(k), 0.0) + item.memory
        entry = base_kind(choice[-1])
        kinds.append(tuple(map(base_kind, choice)))
    return total, memory, kinds


def _uniform_choices(segments: list[Segment], kinds: list[str]) -> list[list[tuple[str, ...] | None]]:
    """Per kind, every task on it (on its fastest kind where it may not run there): the master's first columns,
    one of which holds memory where the platform can."""
    out: list[list[tuple[str, ...] | None]] = []
    for k in kinds:
        out.append([tuple(k if k in dict(item.times) else min(item.times, key=lambda kt: kt[1])[0] for item in s)
                    for s in segments])
    return out


def _master(columns: list[Column], capacity: dict[str, float],
            kinds: list[str]) -> tuple[float, dict[str, float], list[tuple[float, Column]]] | None:
    """The least mix of the columns (placements) within every kind's memory, the memory prices it implies
    (its duals), and each column's weight; None where no mix fits."""
    finite = [k for k in kinds if math.isfinite(capacity[k])]
    if not columns or not finite:
        return None
    a_ub = np.array([[column[1].get(k, 0.0) / capacity[k] for column in columns] for k in finite])  # rows of 1
    res = linprog(np.array([column[0] for column in columns]), A_ub=a_ub, b_ub=np.ones(len(finite)),
                  A_eq=np.ones((1, len(columns))), b_eq=np.ones(1), bounds=[(0, None)] * len(columns), method="highs")
    if res.status != 0:
        return None
    prices = {k: 0.0 for k in kinds}
    for r, k in enumerate(finite):
        prices[k] = max(0.0, -float(res.ineqlin.marginals[r])) / capacity[k]
    return float(res.fun), prices, list(zip(map(float, res.x), columns))
