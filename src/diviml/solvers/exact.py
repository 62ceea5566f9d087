"""Exact latency and batch scheduling with OR-Tools CP-SAT (the default exact engine): the model is in
:mod:`.cpsat`, shared with MILP-SPLIT's module solves.

Batch objective: the batch is split the same way for every task into L near-equal sub-batches
(L = 1 .. number of devices, each solved in turn with its share of the time), so each sub-batch flows
through the graph as its own copy (see :mod:`.jobs`); the best is kept. The bound is the problem's general
lower bound, since splits outside that family are not searched.
"""

from __future__ import annotations

from ..plan import Plan
from ..problem import Problem
from .cpsat import solve_jobs
from .jobs import JobGraph
from .search import Outcome, exact_search

NAME = "exact"


def solve(problem: Problem, *, time_limit: float = 60.0, seed: int = 0, workers: int | None = None,
          symmetry: str = "tasks", resolution: int = 10_000_000, progress=None, on_incumbent=None) -> Plan:
    """``on_incumbent(value)`` is called with the objective of every solution CP-SAT finds (time scale
    units, rounded down: within about 1e-6 of the plan's value), e.g. to time how soon a quality is reached."""
    def engine(jobs: JobGraph, upper: float, budget: float) -> Outcome:
        return solve_jobs(jobs, upper=upper, time_limit=budget, seed=seed, workers=workers, symmetry=symmetry,
                          resolution=resolution, progress=progress, on_incumbent=on_incumbent)
    return exact_search(problem, NAME, engine, time_limit=time_limit, symmetry=symmetry)
