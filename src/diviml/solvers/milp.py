"""The paper's MILP for latency and batch scheduling, solver-agnostic (HiGHS by default, Gurobi if licensed).

Over a job graph (see :mod:`.jobs`): binaries ``x[j,d]`` (job j on device d), start times ``s[j]``, ends
``e[j] = s[j] + sum_d p[j,d] x[j,d]``; precedence with communication ``s[v] >= e[u] + c[u,a,b] (x[u,a] +
x[v,b] - 1)`` for every device pair a != b; disjunctive order binaries only for job pairs the DAG leaves
unordered and that share a device, with big-M = the best heuristic makespan (tight); memory; co-location;
symmetry breaking for identical devices; makespan ``C >= e[j]`` for sinks and ``C <= UB``. Warm-started
from the best baseline's schedule (HEFT's where that is not one part per task). Start times from the engine
are not trusted: the plan is re-timed by the simulator from the assignment and the order of the starts.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field

import networkx as nx

from ..bounds import MILP
from ..plan import Plan
from ..problem import Problem
from .engines.jobs import JobGraph
from .engines.linear import LinearModel, solve_linear
from .engines.outcome import Outcome
from .engines.symmetry import base, ordered_pairs
from .search import exact_search, start_hint

NAME = "milp"
SCALE = 1000.0


class BuildTimeout(Exception):
    """The model was not built by its deadline (its disjunctions grow with the square of the jobs)."""


def build(jobs: JobGraph, upper: float, symmetry: str = "tasks", deadline: float = math.inf):
    """(model, variable maps) of the MILP; ``upper`` is a known makespan (big-M and C's upper bound). Raises
    BuildTimeout where building runs past ``deadline`` (``time.perf_counter()``)."""
    # times are scaled so the known makespan is SCALE: seconds-sized coefficients (1e-6..1e-3) sit at
    # the level of the engines' tolerances and HiGHS then declares wrong optima (measured)
    f = _Formulation(jobs, LinearModel(), SCALE / max(upper, 1e-300), SCALE * (1 + 1e-9), deadline)
    # the model in phases: variables, one device per job and the makespan, precedence with transfers,
    # order on a shared device, memory, co-location, symmetry
    f.x = {(j, d): f.m.binary() for j in jobs.jobs for d in jobs.devices(j)}
    f.s = {j: f.m.var(0.0, f.big) for j in jobs.jobs}
    f.c = f.m.var(0.0, f.big, cost=1.0)
    f.assignment()
    f.precedence()
    order = f.disjunctions()
    f.memory()
    f.colocation()
    if symmetry != "none":
        f.symmetry(symmetry)
    return f.m, {"x": f.x, "s": f.s, "c": f.c, "order": order, "unit": f.unit}


@dataclass
class _Formulation:
    """The MILP of a job graph as it is built: x[j, d] job j on device d, s[j] its start, c the makespan (all
    in units where the known makespan is SCALE); e[j] = s[j] + sum_d duration(j, d) x[j, d]."""
    jobs: JobGraph
    m: LinearModel
    unit: float
    big: float
    deadline: float = math.inf
    x: dict = field(default_factory=dict)
    s: dict = field(default_factory=dict)
    c: int = -1
    ends: dict = field(default_factory=dict)

    def duration(self, j, d) -> float:
        return self.jobs.duration(j, d) * self.unit

    def end(self, j) -> list:
        """Terms of e[j] (computed once a job: precedence and order rows repeat them for every device pair)."""
        if j not in self.ends:
            self.ends[j] = [(self.s[j], 1.0)] + [(self.x[j, d], self.duration(j, d)) for d in self.jobs.devices(j)]
        return self.ends[j]

    def check_deadline(self, rows: str) -> None:
        if time.perf_counter() > self.deadline:
            raise BuildTimeout(f"the MILP's {rows} ({len(self.jobs.jobs):,} jobs on {len(self.jobs.problem.platform.devices)} "
                               "devices) took longer to build than the time it had; a longer --time-limit builds them")

    def assignment(self) -> None:
        """One device per job; the makespan after every sink; every job ends within the horizon."""
        for j in self.jobs.jobs:
            self.m.row([(self.x[j, d], 1.0) for d in self.jobs.devices(j)], 1.0, 1.0)
            if not self.jobs.succs(j):
                self.m.row([(self.c, 1.0)] + [(i, -w) for i, w in self.end(j)], 0.0)
            self.m.row([(i, w) for i, w in self.end(j)], upper=self.big)

    def precedence(self) -> None:
        """A consumer starts after its producer ends, plus the transfer where their devices differ."""
        jobs = self.jobs
        for v in jobs.jobs:
            self.check_deadline("precedence rows")
            for u in jobs.preds(v):
                self.m.row([(self.s[v], 1.0)] + [(i, -w) for i, w in self.end(u)], 0.0)
                for a in jobs.devices(u):
                    for b in jobs.devices(v):
                        comm = jobs.transfer(u, a, b) * self.unit if a != b else 0.0
                        if comm > 0:  # s[v] - e[u] - comm x[u,a] - comm x[v,b] >= -comm
                            self.m.row([(self.s[v], 1.0)] + [(i, -w) for i, w in self.end(u)]
                                       + [(self.x[u, a], -comm), (self.x[v, b], -comm)], -comm)

    def disjunctions(self) -> dict:
        """o[i, j] = 1: i before j on a device both are on (pairs not ordered by the graph); big-M rows."""
        jobs, m, big, s, x = self.jobs, self.m, self.big, self.s, self.x
        dag = nx.DiGraph()
        dag.add_nodes_from(jobs.jobs)
        dag.add_edges_from((u, v) for v in jobs.jobs for u in jobs.preds(v))
        closure = {j: nx.descendants(dag, j) for j in jobs.jobs}
        order = {}
        for a_i, i in enumerate(jobs.jobs):
            self.check_deadline("order rows")
            for j in jobs.jobs[a_i + 1:]:
                common = set(jobs.devices(i)) & set(jobs.devices(j))
                if j in closure[i] or i in closure[j] or not common:
                    continue
                o = order[i, j] = m.binary()
                for d in common:
                    # o = 1: i before j on d -> s[j] >= e[i] - M(1 - o) - M(2 - x_i - x_j)
                    m.row([(s[j], 1.0)] + [(k, -w) for k, w in self.end(i)]
                          + [(o, -big), (x[i, d], -big), (x[j, d], -big)], -3 * big)
                    # o = 0: j before i -> s[i] >= e[j] - M o - M(2 - x_i - x_j)
                    m.row([(s[i], 1.0)] + [(k, -w) for k, w in self.end(j)]
                          + [(o, big), (x[i, d], -big), (x[j, d], -big)], -2 * big)
        return order

    def memory(self) -> None:
        """z: a task resident on a device (any of its jobs there); the resident weights fit, in shares of the
        device's memory (coefficients in bytes beside times of 10^3 are what led Gurobi to a wrong optimum of
        the pipeline IP)."""
        for dev, capacity, tasks in self.jobs.memory_limits():
            share = 1.0 / capacity if capacity > 0 else 1.0  # per byte
            terms = []
            for task, nbytes in tasks:
                z = self.m.binary()
                for l in range(len(self.jobs.sizes)):
                    self.m.row([(z, 1.0), (self.x[(task, l), dev], -1.0)], 0.0)
                terms.append((z, nbytes * share))
            self.m.row(terms, upper=capacity * share)

    def colocation(self) -> None:
        for a, b, devices in self.jobs.colocated():
            for d in devices:
                self.m.row([(self.x[k], sgn) for k, sgn in (((a, d), 1.0), ((b, d), -1.0)) if k in self.x], 0.0, 0.0)

    def symmetry(self, criterion: str) -> None:
        """Identical devices, and identical servers, in order of their jobs (``tasks``) or busy time (``busy``)."""
        jobs, x = self.jobs, self.x

        def w(j, d):
            return 1.0 if base(criterion) == "tasks" else self.duration(j, d)
        for first, second in ordered_pairs(jobs.problem, criterion):
            self.m.row([(x[j, d], w(j, d)) for d in first for j in jobs.jobs if (j, d) in x]
                       + [(x[j, d], -w(j, d)) for d in second for j in jobs.jobs if (j, d) in x], 0.0)


def hint_vector(m: LinearModel, maps, jobs: JobGraph, symmetry: str, plan: Plan | None = None) -> list[float] | None:
    """:func:`.search.start_hint`'s schedule as values of every variable (memory indicators completed from the
    assignment)."""
    hint = start_hint(jobs, symmetry, plan)
    if hint is None:
        return None
    dev, start = hint
    makespan = max(start[j] + jobs.duration(j, dev[j]) for j in jobs.jobs)
    values = [0.0] * m.num_vars
    for (j, d), i in maps["x"].items():
        values[i] = 1.0 if dev[j] == d else 0.0
    for j, i in maps["s"].items():
        values[i] = start[j] * maps["unit"]
    values[maps["c"]] = makespan * maps["unit"]
    for (a, b), i in maps["order"].items():
        values[i] = 1.0 if start[a] <= start[b] else 0.0
    # memory indicators z: rows z - x >= 0 are the only rows where z appears with one x
    for idx, coef, lo, hi in m.rows:
        if len(idx) == 2 and coef == [1.0, -1.0] and lo == 0.0 and values[idx[1]] == 1.0:
            values[idx[0]] = 1.0
    return values


def solve_jobs(jobs: JobGraph, *, upper: float, time_limit: float, seed: int = 0, engine: str = "auto",
               symmetry: str = "tasks", threads: int | None = None, start: Plan | None = None) -> Outcome:
    began = time.perf_counter()
    try:
        m, maps = build(jobs, upper, symmetry, deadline=began + time_limit)
    except BuildTimeout as exc:
        return Outcome(None, None, "unknown", 0.0, None, {"note": str(exc)})
    result = solve_linear(m, time_limit=max(time_limit - (time.perf_counter() - began), 0.01), seed=seed,
                          hint=hint_vector(m, maps, jobs, symmetry, start), engine=engine, threads=threads)
    stats = {"milp_variables": float(m.num_vars), "milp_rows": float(len(m.rows))}
    if result.status == "infeasible":
        return Outcome(None, None, "infeasible", float("inf"), None, stats)
    bound = max(result.bound, 0.0) / maps["unit"]
    if result.values is None:
        return Outcome(None, None, "unknown", bound, None, stats)
    v = result.values
    device_of = {j: max(jobs.devices(j), key=lambda d: v[maps["x"][j, d]]) for j in jobs.jobs}
    start = {j: v[i] / maps["unit"] for j, i in maps["s"].items()}
    return Outcome(device_of, start, result.status, bound, result.objective / maps["unit"],
                   {**stats, "milp_engine": result.engine, **({"note": result.note} if result.note else {})})


def solve(problem: Problem, *, time_limit: float = 60.0, seed: int = 0, engine: str = "auto",
          symmetry: str = "tasks", workers: int | None = None, progress=None) -> Plan:
    def run(jobs: JobGraph, upper: float, budget: float, start: Plan | None) -> Outcome:
        if progress:
            progress(f"  milp: {len(jobs.jobs)} jobs, engine {engine}, {budget:.1f} s")
        return solve_jobs(jobs, upper=upper, time_limit=budget, seed=seed, engine=engine, symmetry=symmetry,
                          threads=workers, start=start)
    return exact_search(problem, NAME, run, time_limit=time_limit, symmetry=symmetry, seed=seed, progress=progress,
                        engine_bound=MILP)
