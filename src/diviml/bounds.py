"""Lower bounds on the optimum, independent of any solver.

- critical path: every task on its fastest allowed device, transfers free;
- work / capacity: the LP relaxation of the assignment (fractional tasks, per-device load <= T, memory),
  solved with HiGHS through scipy. Co-location groups are contracted into one item first;
- path-work: an LP that couples the two (a path's tasks on a device also load it);
- memory path: a path's time where memory keeps its tasks off their fastest devices (an LP over the devices'
  memory).
The bound of a problem is the largest; a plan says which in ``bound_source``.
"""

from __future__ import annotations

import math
from time import perf_counter

import numpy as np
from scipy.optimize import linprog
from scipy.sparse import csr_matrix

from .graph import longest_paths
from .problem import Problem
from .validate import ABS_TOL, REL_TOL

# what proved a plan's bound (Plan.bound_source): the three bounds here, and the solvers' own
CRITICAL_PATH = "critical path"
WORK_LP = "work LP"
PATH_WORK_LP = "path-work LP"
MEMORY_PATH_LP = "memory path LP"
CP_SAT = "CP-SAT"  # exact and call-exact: the model's proven bound
MILP = "MILP"  # milp: the MILP's dual bound
MODULE_DP = "module DP"  # split and exact by pieces: the join's dynamic program over the modules' bounds
IP = "IP"  # the pipeline IP's dual bound
EXACT_DP = "DP (exact)"  # the pipeline DP's contiguous optimum
BOUND_SOURCES = (CRITICAL_PATH, WORK_LP, PATH_WORK_LP, MEMORY_PATH_LP, CP_SAT, MILP, MODULE_DP, IP, EXACT_DP)


def _unit_costs(problem: Problem) -> dict[str, dict[str, float]]:
    """Cost of each task on each allowed device, for the objective's batch."""
    n = problem.batch_size
    kind = problem.objective.kind
    out = {}
    for t in problem.graph.tasks:
        out[t.id] = {}
        for d in problem.allowed_devices[t.id]:
            if kind == "batch":
                # any part of b samples costs >= b * (best time per sample over sizes 1..n)
                out[t.id][d] = n * min(problem.time(t.id, d, b) / b for b in range(1, n + 1))
            else:
                out[t.id][d] = problem.time(t.id, d)
    return out


def critical_path_bound(problem: Problem) -> float:
    graph = problem.graph
    n = problem.batch_size
    cost = {}
    for t in graph.tasks:
        if problem.objective.kind == "batch":
            # a sample's path visits one part per task; a part of b >= 1 samples
            cost[t.id] = min(problem.time(t.id, d, b) for d in problem.allowed_devices[t.id] for b in range(1, n + 1))
        else:
            cost[t.id] = min(problem.time(t.id, d) for d in problem.allowed_devices[t.id])
    if problem.objective.kind == "pipeline":
        return max(cost.values(), default=0.0)
    # latency, batch and call-latency: the longest path (host CPUs run in parallel, so no work bound
    # for call-latency beyond it)
    longest = longest_paths(graph.topological_order, graph.predecessors.__getitem__, cost.__getitem__)
    return max(longest.values(), default=0.0)


def spread_bound(problem: Problem) -> float:
    """Each task's cheapest cost (:func:`_unit_costs`) spread evenly over the devices: what the work LP
    relaxes further (no memory, no allowed devices per share); 0 for call-latency, as there."""
    if problem.objective.kind == "call-latency":
        return 0.0
    return sum(min(row.values(), default=0.0) for row in _unit_costs(problem).values()) / len(
        problem.platform.devices)


def work_bound(problem: Problem, time_limit: float | None = None) -> float:
    """min T: tasks fractionally spread over allowed devices, each device's work <= T, memory respected.

    Not a bound for call-latency, where host CPU tasks run in parallel (0 then)."""
    if problem.objective.kind == "call-latency":
        return 0.0
    raw = _unit_costs(problem)
    unit = _unit(raw)
    costs = {t: {d: v * unit for d, v in row.items()} for t, row in raw.items()}
    groups = _items(problem)
    devices = [d.name for d in problem.platform.devices]
    gpipe = problem.is_training and problem.objective.kind == "pipeline" and problem.objective.training == "gpipe"
    variables = []  # (item index, device)
    for i, members in enumerate(groups):
        common = set(devices)
        for m in members:
            common &= set(costs[m])
        for d in devices:
            if d in common:
                variables.append((i, d))
    nx = len(variables)
    n_t = 2 if gpipe else 1  # T (or T_forward, T_backward)
    n_rows_dev = len(devices) * n_t
    a_ub = _Sparse()
    b_ub = np.zeros(n_rows_dev + len(devices))
    a_eq = _Sparse()
    dev_index = {d: k for k, d in enumerate(devices)}
    graph = problem.graph
    for j, (i, d) in enumerate(variables):
        a_eq.add(i, j, 1.0)
        k = dev_index[d]
        for m in groups[i]:
            phase = 1 if (gpipe and graph.by_id[m].phase == "backward") else 0
            a_ub.add(k * n_t + phase, j, costs[m][d])
        a_ub.add(n_rows_dev + k, j, sum(graph.by_id[m].memory_bytes for m in groups[i]))
    for k in range(len(devices)):
        for p in range(n_t):
            a_ub.add(k * n_t + p, nx + p, -1.0)
        cap = problem.platform.devices[k].memory_bytes
        b_ub[n_rows_dev + k] = cap if math.isfinite(cap) else 1e300
    c = np.zeros(nx + n_t)
    c[nx:] = 1.0
    res = linprog(c, A_ub=a_ub.matrix(len(b_ub), nx + n_t), b_ub=b_ub,
                  A_eq=a_eq.matrix(len(groups), nx + n_t), b_eq=np.ones(len(groups)),
                  bounds=[(0, None)] * (nx + n_t), method="highs", options=_limit(time_limit))
    if res.status != 0:
        return 0.0
    # the LP optimum is a valid bound only up to solver tolerance: shave a relative 1e-6
    return float(res.fun) / unit * (1 - 1e-6)


class _Sparse:
    """Coefficients collected as (row, column, value) triples; repeated entries add up."""

    def __init__(self):
        self.rows: list[int] = []
        self.cols: list[int] = []
        self.vals: list[float] = []

    def add(self, row: int, col: int, value: float) -> None:
        self.rows.append(row)
        self.cols.append(col)
        self.vals.append(value)

    def matrix(self, n_rows: int, n_cols: int) -> csr_matrix:
        return csr_matrix((self.vals, (self.rows, self.cols)), shape=(n_rows, n_cols))


def _unit(costs: dict[str, dict[str, float]]) -> float:
    """Scale that brings the total of the fastest times to 1000, away from the LP solver's tolerances."""
    total = sum(min(row.values()) for row in costs.values() if row)
    return 1000.0 / total if total > 0 else 1.0


def _items(problem: Problem) -> list[tuple[str, ...]]:
    """Tasks with co-location groups contracted (one item per group)."""
    grouped = {m for members in problem.colocation_groups.values() for m in members}
    items = [members for members in problem.colocation_groups.values()]
    items += [(t.id,) for t in problem.graph.tasks if t.id not in grouped]
    return items


def memory_path_bound(problem: Problem, time_limit: float | None = None) -> float:
    """Latency where memory decides where the long paths run: the longest path under a fractional placement
    that holds every device's memory. LP: ``x[t,k]`` the share of task t on devices of kind k, finish
    potentials ``e[v] >= e[u] + sum_k p[v,k] x[v,k]`` on every edge, ``C >= e[v]``, and per kind
    ``sum_t m_t x[t,k] <=`` the kind's memory and ``sum_t p[t,k] x[t,k] <= C x`` its number of devices. Devices of one type are one kind holding their summed memory (a
    relaxation: any plan maps onto it with the same times), so GPT-3 on 26 devices is an LP over 4 kinds.
    Transfers are free and devices run in parallel, so this is the critical path whenever the weights fit
    where they run fastest (0 then, and for other objectives)."""
    if problem.objective.kind != "latency":
        return 0.0
    graph, platform = problem.graph, problem.platform
    kinds: dict[str, float] = {}
    for d in platform.devices:
        kinds[d.type] = kinds.get(d.type, 0.0) + d.memory_bytes
    total = sum(t.memory_bytes for t in graph.tasks)
    if all(capacity >= total for capacity in kinds.values()):
        return 0.0  # memory keeps nothing off its fastest kind: the critical path says as much
    stop = None if time_limit is None else perf_counter() + time_limit
    kind_of = {d.name: d.type for d in platform.devices}
    allowed = {t.id: sorted({kind_of[d] for d in problem.allowed_devices[t.id]}) for t in graph.tasks}
    unit = _unit(_unit_costs(problem))
    scale = max((t.memory_bytes for t in graph.tasks), default=0.0) or 1.0
    lp = _KeyedLP()
    for t in graph.topological_order:
        for k in allowed[t]:
            lp.col(("x", t, k))
        lp.col(("e", t))
    lp.col(("C",))

    # sum_k p[t,k] x[t,k], per task: times are by type, so any allowed device of the kind gives them
    own_time = {t: {("x", t, kind_of[d]): problem.time(t, d) * unit for d in problem.allowed_devices[t]}
                for t in graph.topological_order}
    for t in graph.topological_order:
        lp.eq({("x", t, k): 1.0 for k in allowed[t]})
        if not graph.predecessors[t]:
            lp.ub({("e", t): -1.0, **own_time[t]})
        if not graph.successors[t]:
            lp.ub({("e", t): 1.0, ("C",): -1.0})
    for n, (u, v) in enumerate(graph.edges):
        if stop is not None and n % 2000 == 0 and perf_counter() > stop:
            return 0.0  # building the LP alone outlasts its share: drop it
        lp.ub({("e", u): 1.0, ("e", v): -1.0, **own_time[v]})
    count = {k: sum(d.type == k for d in platform.devices) for k in kinds}
    for k in kinds:  # a kind's devices are busy at most C each
        work = {key: v for t in graph.topological_order for key, v in own_time[t].items() if key[2] == k}
        lp.ub({**work, ("C",): -float(count[k])})
    # what the validator lets a device hold (its tolerance), so that no plan it accepts is cut off
    for k, capacity in kinds.items():
        if math.isfinite(capacity):
            held = {("x", t.id, k): t.memory_bytes / scale for t in graph.tasks
                    if t.memory_bytes > 0 and lp.has(("x", t.id, k))}
            lp.ub(held, (capacity * (1 + 2 * REL_TOL) + ABS_TOL * len(platform.devices)) / scale)
    value = lp.minimise(("C",), None if stop is None else stop - perf_counter())
    return value / unit * (1 - 1e-6) if value is not None else 0.0


def path_work_bound(problem: Problem, time_limit: float | None = None) -> float:
    """LP coupling paths and work (latency): fractional assignment x, finish potentials e and makespan C with

    ``e[v] >= e[u] + c_min(u) * delta[u,v] + sum_d p[v,d] x[v,d]`` on every edge, ``C >= e[v]``, and each
    device's work ``sum_v p[v,d] x[v,d] <= C``; ``delta[u,v] >= x[u,d] - x[v,d]`` is the share of the edge that
    crosses devices and ``c_min(u)`` the cheapest transfer of u's output between two different devices.
    A job cannot sit on its fastest device for the path and be spread out for the work at once, so this is
    at least as strong as both simple bounds. Memory and co-location are left out (a relaxation).
    """
    if problem.objective.kind != "latency":
        return 0.0
    graph, platform = problem.graph, problem.platform
    if time_limit is not None and path_work_seconds(len(graph.edges), len(graph), len(platform.devices)) > time_limit:
        return 0.0  # it would not finish in its share: dropped without being tried
    stop = None if time_limit is None else perf_counter() + time_limit
    devices = [d.name for d in platform.devices]
    tasks = list(graph.topological_order)
    unit = _unit(_unit_costs(problem))
    lp = _KeyedLP()
    for t in tasks:  # columns in this order: x per task and device, e per task, delta per edge, C
        for d in problem.allowed_devices[t]:
            lp.col(("x", t, d))
        lp.col(("e", t))
    for u, v in graph.edges:
        lp.col(("delta", u, v))
    lp.col(("C",))

    def own_time(t: str) -> dict:  # sum_d p[t,d] x[t,d]
        return {("x", t, d): problem.time(t, d) * unit for d in problem.allowed_devices[t]}

    for t in tasks:
        lp.eq({("x", t, d): 1.0 for d in problem.allowed_devices[t]})
        lp.ub({("e", t): -1.0, **own_time(t)})  # e[t] >= own time (sources)
        lp.ub({("e", t): 1.0, ("C",): -1.0})  # C >= e[t]
    for k, (u, v) in enumerate(graph.edges):
        if stop is not None and k % 1000 == 0 and perf_counter() > stop:
            return 0.0  # building the LP alone outlasts its share: drop it
        ut = graph.by_id[u]
        c_min = min((platform.transfer_time(ut, a, c) for a in devices for c in devices if a != c), default=0.0) * unit
        lp.ub({("e", u): 1.0, ("e", v): -1.0, ("delta", u, v): c_min, **own_time(v)})
        for d in devices:  # delta >= x[u,d] - x[v,d]
            row = {("delta", u, v): -1.0}
            if lp.has(("x", u, d)):
                row["x", u, d] = 1.0
            if lp.has(("x", v, d)):
                row["x", v, d] = row.get(("x", v, d), 0.0) - 1.0
            lp.ub(row)
    for d in devices:  # each device's work fits below C
        lp.ub({("C",): -1.0, **{("x", t, d): problem.time(t, d) * unit for t in tasks if lp.has(("x", t, d))}})
    value = lp.minimise(("C",), None if stop is None else stop - perf_counter())
    return value / unit * (1 - 1e-6) if value is not None else 0.0


def path_work_seconds(edges: int, tasks: int, devices: int) -> float:
    """The time the path-work LP takes to build and solve, at worst, from its nonzeros (3 per edge and
    device, 2 per task and device): 3.6 s at 51,000 nonzeros, growing as their 1.3th power. Measured on the
    2-core development machine on layered DAGs of 100-3,000 tasks on 3, 9 and 26 devices (3,000 tasks on 26
    devices: 445,000 nonzeros, 57 s); GPT-3 on six servers (860,000) would take minutes."""
    return 3.6 * ((3 * edges + 2 * tasks) * devices / 51_318) ** 1.3


class _KeyedLP:
    """An LP built by named columns (``col``), rows ``sum a x <= rhs`` (``ub``, rhs 0 unless given) and ``sum a x = 1`` (``eq``)
    given as {column key: coefficient}, all columns >= 0, solved by HiGHS (:func:`scipy.optimize.linprog`)."""

    def __init__(self):
        self.index: dict = {}
        self.rows_ub: list[dict] = []
        self.rhs_ub: list[float] = []
        self.rows_eq: list[dict] = []

    def col(self, key) -> int:
        self.index[key] = len(self.index)
        return self.index[key]

    def has(self, key) -> bool:
        return key in self.index

    def ub(self, row: dict, rhs: float = 0.0) -> None:
        self.rows_ub.append({self.index[k]: v for k, v in row.items()})
        self.rhs_ub.append(rhs)

    def eq(self, row: dict) -> None:
        self.rows_eq.append({self.index[k]: v for k, v in row.items()})

    def minimise(self, key, time_limit: float | None) -> float | None:
        """The least value of column ``key``, or None when HiGHS did not prove it (limit, failure)."""
        n = len(self.index)
        a_ub, a_eq = _Sparse(), _Sparse()
        for i, r in enumerate(self.rows_ub):
            for j, v in r.items():
                a_ub.add(i, j, v)
        for i, r in enumerate(self.rows_eq):
            for j, v in r.items():
                a_eq.add(i, j, v)
        c = np.zeros(n)
        c[self.index[key]] = 1.0
        res = linprog(c, A_ub=a_ub.matrix(len(self.rows_ub), n), b_ub=np.array(self.rhs_ub, dtype=float),
                      A_eq=a_eq.matrix(len(self.rows_eq), n), b_eq=np.ones(len(self.rows_eq)),
                      bounds=[(0, None)] * n, method="highs", options=_limit(time_limit))
        return float(res.fun) if res.status == 0 else None


def _limit(time_limit: float | None) -> dict:
    """HiGHS options for an LP that must end within ``time_limit`` seconds (an LP cut short bounds nothing:
    its caller then returns 0, and the cheaper bounds stand)."""
    return {} if time_limit is None else {"time_limit": max(0.0, float(time_limit))}


def lower_bound(problem: Problem, time_limit: float | None = None) -> float:
    """The best of the bounds above, computed once per problem: every plan a solver makes asks for it
    (:func:`lower_bound_source` names the one that gave it).

    The LPs share ``time_limit`` seconds (None: no limit); one that does not finish in its share is
    dropped, never waited on (on 20,000 tasks the coupled LP alone ran for minutes). (Problems are
    immutable; the value is kept where the problem keeps its cached properties.)"""
    memo = problem.__dict__
    if "lower_bound" not in memo:
        start = perf_counter()
        left = (lambda: None) if time_limit is None else (lambda: time_limit - (perf_counter() - start))
        found = {CRITICAL_PATH: critical_path_bound(problem)}
        found[WORK_LP] = work_bound(problem, left())
        found[MEMORY_PATH_LP] = memory_path_bound(problem, left())
        found[PATH_WORK_LP] = path_work_bound(problem, left())
        source = max(found, key=found.get)  # on a tie the cheaper one, listed first
        memo["lower_bound"], memo["lower_bound_source"] = found[source], source
    return memo["lower_bound"]


def lower_bound_source(problem: Problem) -> str:
    """Which bound :func:`lower_bound` took for ``problem`` ("" before it was computed)."""
    return problem.__dict__.get("lower_bound_source", "")


def share_lower_bound(problem: Problem, value: float, source: str = "") -> None:
    """Record :func:`lower_bound` of ``problem`` computed elsewhere (in another process, on a copy of it), so
    that it is not computed again here."""
    if "lower_bound" not in problem.__dict__:
        problem.__dict__["lower_bound"], problem.__dict__["lower_bound_source"] = value, source


def serial_upper_bound(problem: Problem) -> float:
    """A makespan every feasible plan can reach: tasks one after another, each at its slowest, paying its worst
    transfer (call-latency: its output hopped in and out of host memory). The one serial bound of diviml:
    where no baseline plan is at hand, it scales the exact models' time."""
    graph, platform = problem.graph, problem.platform
    if problem.objective.kind == "call-latency":
        hops = [d for d in platform.devices if not d.is_host]
        return sum(max((problem.time(t.id, d) for d in problem.allowed_devices[t.id]), default=0.0)
                   + 2 * max((platform.hop_time(t, d) for d in hops), default=0.0) for t in graph.tasks)
    n = problem.batch_size
    total = 0.0
    for t in graph.tasks:
        total += max(problem.time(t.id, d, n) for d in problem.allowed_devices[t.id])
        total += max((platform.transfer_time(t, a.name, b.name, n / graph.batch_size)
                      for a in platform.devices for b in platform.devices), default=0.0)
    return total
