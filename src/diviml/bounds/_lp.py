"""The LP plumbing the bounds share: sparse rows by name, HiGHS through scipy, the scale and time limit."""

from __future__ import annotations

from collections import Counter
from time import perf_counter

import numpy as np
from scipy.optimize import linprog
from scipy.sparse import csr_matrix

from ..interchangeable import device_kind
from ..problem import Problem
from ..validate import ABS_TOL, REL_TOL


def server_kinds(problem: Problem) -> dict[str, list[str]]:
    """Device names by kind: a device type on one group of alike servers (the same kinds of device in the
    same numbers), or the type alone where all servers are alike. Any plan maps onto the kinds, so the LP stays
    a relaxation however they are drawn; kinds on different servers let it charge the network (a host CPU on
    every server would otherwise carry tensors between servers for free). Coarser than
    :func:`diviml.interchangeable.server_kind`, which symmetry breaking uses (peer links and device order
    count there): a relaxation may pool servers that a plan cannot swap."""
    platform = problem.platform
    on: dict[str, list] = {}
    for d in platform.devices:
        on.setdefault(d.server, []).append(d)
    seen: dict[frozenset, str] = {}
    group = {server: seen.setdefault(frozenset(Counter(device_kind(d) for d in devices).items()), server)
             for server, devices in on.items()}
    several = len(seen) > 1
    kinds: dict[str, list[str]] = {}
    for d in platform.devices:
        kinds.setdefault(f"{d.type}@{group[d.server]}" if several else d.type, []).append(d.name)
    return kinds


def _tolerated(capacity: float, devices: int = 1) -> float:
    """The memory the validator lets ``devices`` devices of ``capacity`` bytes in all hold (its tolerance):
    what a bound's memory row allows, so that no plan it accepts is cut off."""
    return capacity * (1 + 2 * REL_TOL) + ABS_TOL * devices


class _Sparse:
    """Coefficients collected as (row, column, value) triples; repeated entries add up."""

    def __init__(self) -> None:
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


class _KeyedLP:
    """An LP built by named columns (``col``), rows ``sum a x <= rhs`` (``ub``, rhs 0 unless given) and ``sum a x = 1`` (``eq``)
    given as {column key: coefficient}, all columns >= 0, solved by HiGHS (:func:`scipy.optimize.linprog`)."""

    def __init__(self) -> None:
        self.index: dict = {}
        self.rows_ub: list[dict] = []
        self.rhs_ub: list[float] = []
        self.rows_eq: list[dict] = []
        self.tags: dict[int, object] = {}  # row of rows_ub -> what the caller named it
        self.binding: list = []  # after minimise: the tags of the rows whose dual price is not zero

    def col(self, key) -> int:
        self.index[key] = len(self.index)
        return self.index[key]

    def has(self, key) -> bool:
        return key in self.index

    def ub(self, row: dict, rhs: float = 0.0, tag=None) -> None:
        if tag is not None:
            self.tags[len(self.rows_ub)] = tag
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
        if res.status != 0:
            return None
        prices = res.ineqlin.marginals
        self.binding = [tag for i, tag in self.tags.items() if abs(prices[i]) > 1e-9]
        return float(res.fun)


def _least_makespan(built: tuple[_KeyedLP, float] | None, stop: float | None) -> float | None:
    """The least ``C`` of an LP built in time units of ``unit`` (``built``: the LP and its unit, None where
    building it ran out of time), in seconds and a hair below (HiGHS's tolerance), by ``stop`` (a
    :func:`time.perf_counter` time); None where it was not built or not proven."""
    if built is None:
        return None
    lp, unit = built
    value = lp.minimise(("C",), None if stop is None else stop - perf_counter())
    return value / unit * (1 - 1e-6) if value is not None else None


def _limit(time_limit: float | None) -> dict:
    """HiGHS options for an LP that must end within ``time_limit`` seconds (an LP cut short bounds nothing:
    its caller then returns 0, and the cheaper bounds stand)."""
    return {} if time_limit is None else {"time_limit": max(0.0, float(time_limit))}
