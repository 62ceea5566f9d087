"""Pipelines: a plan's loads lowered after it is made, by the polish's moves (:mod:`.polish`) and, for a model
of repeated layers, by placing a few copies again at a time (:mod:`.copy_lns`). Each keeps the plan's solver,
status and bound, and returns the plan itself where it finds nothing better."""

from __future__ import annotations

from ...bounds import known_lower_bound
from ...plan import Plan
from ...problem import Problem
from ...simulate import pipeline_loads
from ..engines.plans import Stopwatch, make_plan
from .copy_lns import relieve_copies
from .patterns import repeated_layer
from .polish import polish

__all__ = ["polished", "relieved"]


def polished(problem: Problem, plan: Plan, watch: Stopwatch) -> Plan:
    """``plan`` with its slowest devices relieved by :func:`.polish.polish` where that lowers its load (a
    plan of the same solver and status), else ``plan``."""
    found = polish(problem, plan.placement, watch)
    if found is None or found[1] == 0:
        return plan
    value = pipeline_loads(problem, found[0]).objective  # the loads alone first: make_plan validates too
    if value >= plan.objective:
        return plan
    moves = f"{found[1]} move{'s' if found[1] != 1 else ''}"
    return _replaced(problem, plan, found[0], watch, f"polished: {moves} off the slowest devices took the largest "
                     f"load from {plan.objective:.6g} to {value:.6g}")


def relieved(problem: Problem, plan: Plan, watch: Stopwatch) -> Plan:
    """``plan`` with a few copies of the model's repeated layer at a time placed again by CP-SAT
    (:mod:`.copy_lns`), aiming at the problem's lower bound where one was computed, where that lowers its load
    (a plan of the same solver and status), else ``plan``: where the polish's moves of one class stop (GPT-3
    over six-servers: 1.6801 -> 1.6748 s in 20 s)."""
    objective = problem.objective
    layer = (None if objective.contiguous or (problem.is_training and objective.training == "gpipe")
             or problem.colocation_groups else repeated_layer(problem))
    if layer is None or watch.expired:
        return plan
    placement, steps = relieve_copies(problem, layer, plan.placement, watch, known_lower_bound(problem) or None)
    value = pipeline_loads(problem, placement).objective
    if steps == 0 or value >= plan.objective:
        return plan
    return _replaced(problem, plan, placement, watch, f"relieved: {steps} steps placing two copies of the repeated "
                     f"layer again (CP-SAT) took the largest load from {plan.objective:.6g} to {value:.6g}")


def _replaced(problem: Problem, plan: Plan, placement: dict[str, str], watch: Stopwatch, note: str) -> Plan:
    """``plan`` with ``placement``: its solver, status, bound and stats, its notes and ``note``."""
    return make_plan(problem, placement=placement, solver=plan.solver, status=plan.status, watch=watch,
                     bound=plan.bound, bound_source=plan.bound_source, stats=dict(plan.stats),
                     notes=[*plan.notes, note])
