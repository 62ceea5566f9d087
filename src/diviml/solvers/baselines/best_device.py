"""Baseline: the whole graph on the one device that runs it fastest (and can hold it)."""

from __future__ import annotations

from ...errors import InfeasibleError
from ...problem import Problem
from ..engines.plans import Stopwatch, evaluate, make_plan

NAME = "best-device"


def candidates(problem: Problem) -> list[str]:
    """Devices that can run every task and hold the whole graph's memory."""
    need = sum(t.memory_bytes for t in problem.graph.tasks)
    return [d.name for d in problem.platform.devices
            if d.memory_bytes >= need and all(d.name in problem.allowed_devices[t.id] for t in problem.graph.tasks)]


def solve(problem: Problem, *, time_limit: float = 60.0, seed: int = 0):
    watch = Stopwatch(time_limit)
    devices = candidates(problem)
    if not devices:
        raise InfeasibleError("no single device can run every task and hold the whole graph: "
                              "use a solver that splits the graph (e.g. heft, greedy)")
    n = problem.batch_size
    scored = []
    for d in devices:
        parts = {t.id: [(d, n)] for t in problem.graph.tasks}
        scored.append((evaluate(problem, parts)[0], problem.platform.index[d], d))
        if watch.expired:
            break
    value, _, best = min(scored)
    parts = {t.id: [(best, n)] for t in problem.graph.tasks}
    return make_plan(problem, parts, solver=NAME, status="feasible", watch=watch,
                     notes=[f"all tasks on {best}"], stats={"devices_tried": len(scored)})
