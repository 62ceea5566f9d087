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


def fastest(problem: Problem, watch: Stopwatch | None = None) -> tuple[float, str, int] | None:
    """(objective, device, devices tried) of the candidate that runs the whole graph fastest, trying them in
    the platform's order until ``watch`` (if any) expires; None where no device can run it all."""
    n = problem.batch_size
    scored = []
    for d in candidates(problem):
        scored.append((evaluate(problem, {t.id: [(d, n)] for t in problem.graph.tasks})[0], problem.platform.index[d], d))
        if watch is not None and watch.expired:
            break
    if not scored:
        return None
    value, _, best = min(scored)
    return value, best, len(scored)


def on(problem: Problem, device: str) -> dict[str, list[tuple[str, int]]]:
    """The parts that run every task whole on ``device``."""
    return {t.id: [(device, problem.batch_size)] for t in problem.graph.tasks}


def solve(problem: Problem, *, time_limit: float = 60.0, seed: int = 0):
    watch = Stopwatch(time_limit)
    found = fastest(problem, watch)
    if found is None:
        raise InfeasibleError("no single device can run every task and hold the whole graph: "
                              "use a solver that splits the graph (e.g. heft, greedy)")
    _, best, tried = found
    return make_plan(problem, on(problem, best), solver=NAME, status="feasible", watch=watch,
                     notes=[f"all tasks on {best}"], stats={"devices_tried": tried})
