"""A small solver-neutral mixed-integer linear model, solved by HiGHS (default) or Gurobi.

Formulations (the paper's MILP, the NeurIPS 2020 IP) build a :class:`LinearModel`; :func:`solve_linear`
hands it to an engine with a time limit, a seed and an optional warm start, and returns status,
values, objective and the engine's bound. ``engine="auto"`` takes Gurobi when ``gurobipy`` imports and its
licence accepts the model, else HiGHS. Hitting the free Gurobi licence's size limit is said in one line
(:attr:`LinearResult.note`) and HiGHS solves instead.

HiGHS is used through ``highspy`` 1.12 (pinned: highspy 1.15 fails to import beside ortools 9.15), in a child
process killed at the deadline for large models (:mod:`.highs`).
"""

from __future__ import annotations

import functools
import math
import time
from dataclasses import dataclass, field
from typing import Sequence

from ...errors import InputError
from ...native import native_stdout_to_stderr
from .highs import solve_highs

ENGINES = ("auto", "highs", "gurobi")


@dataclass
class LinearModel:
    lower: list[float] = field(default_factory=list)
    upper: list[float] = field(default_factory=list)
    cost: list[float] = field(default_factory=list)
    integer: list[bool] = field(default_factory=list)
    rows: list[tuple[list[int], list[float], float, float]] = field(default_factory=list)

    def var(self, lower: float = 0.0, upper: float = math.inf, cost: float = 0.0, integer: bool = False) -> int:
        self.lower.append(lower)
        self.upper.append(upper)
        self.cost.append(cost)
        self.integer.append(integer)
        return len(self.lower) - 1

    def binary(self, cost: float = 0.0) -> int:
        return self.var(0.0, 1.0, cost, True)

    def row(self, terms: Sequence[tuple[int, float]], lower: float = -math.inf, upper: float = math.inf) -> None:
        merged: dict[int, float] = {}
        for i, c in terms:
            merged[i] = merged.get(i, 0.0) + c
        idx = [i for i, c in merged.items() if c != 0.0]
        self.rows.append((idx, [merged[i] for i in idx], lower, upper))

    @property
    def num_vars(self) -> int:
        return len(self.lower)


@dataclass(frozen=True)
class LinearResult:
    status: str  # optimal | timeout | infeasible | unknown
    values: list[float] | None
    objective: float | None
    bound: float
    engine: str
    note: str = ""


def solve_linear(model: LinearModel, *, time_limit: float, seed: int = 0, hint: Sequence[float] | None = None,
                 engine: str = "auto", threads: int | None = None, rel_gap: float = 1e-7) -> LinearResult:
    if engine not in ENGINES:
        raise InputError(f"unknown MILP engine {engine!r}: choose {', '.join(ENGINES)}")
    note = ""
    started = time.perf_counter()
    if engine in ("auto", "gurobi"):
        result = _gurobi(model, time_limit, seed, hint, threads, rel_gap)
        if isinstance(result, LinearResult):
            return result
        note = result
        if engine == "gurobi" and note.startswith("gurobipy is not installed"):
            raise InputError(note)
    out = solve_highs(model, time_limit - (time.perf_counter() - started), seed, hint, threads, rel_gap)
    return LinearResult(out.status, out.values, out.objective, out.bound, out.engine,
                        note if engine == "gurobi" or "size" in note else "")


@functools.cache
def _gurobi_size_limit() -> int | None:
    """The most variables or rows this Gurobi licence solves (2,000 for the size-limited one pip installs),
    found once by solving a model just above it; None when unlimited or not installed. Building a large model
    only to hear it refused took minutes (GPT-3's pipeline IP: 400,000 variables)."""
    try:
        import gurobipy as gp
        env = gp.Env(empty=True)
        env.setParam("OutputFlag", 0)
        env.start()
        probe = gp.Model(env=env)
        probe.addVars(SIZE_LIMITED + 1)
        probe.optimize()
    except ImportError:
        return None
    except Exception as exc:  # noqa: BLE001 - gurobipy's errors, licence ones included
        return SIZE_LIMITED if getattr(exc, "errno", None) == 10010 else None
    return None


SIZE_LIMITED = 2000  # Gurobi's size-limited licence: at most 2,000 variables and 2,000 constraints


def _gurobi(model: LinearModel, time_limit, seed, hint, threads, rel_gap) -> LinearResult | str:
    """A result, or a one-line reason why Gurobi could not solve (then HiGHS does)."""
    try:
        import gurobipy as gp
    except ImportError:
        return "gurobipy is not installed: pip install gurobipy (and a licence), or use engine highs"
    limit = _gurobi_size_limit()
    if limit is not None and max(model.num_vars, len(model.rows)) > limit:
        return (f"Gurobi's licence is size-limited and this model has {model.num_vars} variables and "
                f"{len(model.rows)} rows: solved with HiGHS instead")
    try:
        env = gp.Env(empty=True)
        env.setParam("OutputFlag", 0)
        env.start()
        m = gp.Model(env=env)
        m.Params.TimeLimit = max(time_limit, 0.01)
        m.Params.Seed = seed % 2_000_000_000
        m.Params.MIPGap = rel_gap
        if threads:
            m.Params.Threads = threads
        vtype = [gp.GRB.INTEGER if i else gp.GRB.CONTINUOUS for i in model.integer]
        xs = m.addVars(model.num_vars, lb=[v if math.isfinite(v) else -gp.GRB.INFINITY for v in model.lower],
                       ub=[v if math.isfinite(v) else gp.GRB.INFINITY for v in model.upper], vtype=vtype)
        m.setObjective(gp.quicksum(c * xs[i] for i, c in enumerate(model.cost) if c))
        for idx, coef, lo, hi in model.rows:
            expr = gp.LinExpr(coef, [xs[i] for i in idx])
            if lo == hi:
                m.addLConstr(expr, gp.GRB.EQUAL, lo)
            else:
                if math.isfinite(lo):
                    m.addLConstr(expr, gp.GRB.GREATER_EQUAL, lo)
                if math.isfinite(hi):
                    m.addLConstr(expr, gp.GRB.LESS_EQUAL, hi)
        if hint is not None:
            for i, v in enumerate(hint):
                xs[i].Start = v
        with native_stdout_to_stderr():
            m.optimize()
    except gp.GurobiError as exc:
        if getattr(exc, "errno", None) == 10010:
            return (f"Gurobi's licence is size-limited and this model has {model.num_vars} variables and "
                    f"{len(model.rows)} rows: solved with HiGHS instead")
        return f"Gurobi failed ({exc}): solved with HiGHS instead"
    has = m.SolCount > 0
    values = [xs[i].X for i in range(model.num_vars)] if has else None
    objective = m.ObjVal if has else None
    if m.Status == gp.GRB.OPTIMAL:
        return LinearResult("optimal", values, objective, m.ObjBound if any(model.integer) else objective, "gurobi")
    if m.Status in (gp.GRB.INFEASIBLE, gp.GRB.INF_OR_UNBD):
        return LinearResult("infeasible", None, None, math.inf, "gurobi")
    bound = m.ObjBound if any(model.integer) else -math.inf
    return LinearResult("timeout" if has else "unknown", values, objective, bound, "gurobi")
