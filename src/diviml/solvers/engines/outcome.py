"""What an exact engine (CP-SAT, MILP) answers for a job graph, and the engine's signature."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Callable

from .jobs import JobGraph

if TYPE_CHECKING:
    from ...plan import Plan


@dataclass(frozen=True)
class Outcome:
    device_of: dict | None
    start: dict | None
    status: str  # optimal | timeout | infeasible | unknown
    bound: float  # a valid lower bound (real time units) of this job graph's optimum
    objective: float | None = None  # the engine's own objective value (real units)
    stats: dict | None = None


# (jobs, upper bound on makespan, seconds, the best plan so far: its schedule is the engine's first) -> Outcome
Engine = Callable[[JobGraph, float, float, "Plan | None"], Outcome]
