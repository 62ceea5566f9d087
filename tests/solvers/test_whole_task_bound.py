"""A batch plan says where it stands against the plans that run every task on the whole batch at once: the
whole batch is one of the splits exact and split search, and its model's bound bounds those plans
(:func:`diviml.problem.whole_tasks`: they are the plans of a latency problem), whatever the batch bound leaves
open to plans that cut tasks into parts."""

from dataclasses import replace

import pytest
from test_cross_check import random_problem

import diviml
from diviml import Objective, Plan, Problem
from diviml.generators import layered_dag
from diviml.problem import whole_tasks
from diviml.solvers.search import whole_task_note


def _whole_optimum(problem: Problem) -> float:
    plan = diviml.solve(whole_tasks(problem), "exact", time_limit=60)
    assert plan.status == "optimal"
    return plan.objective


def _check(problem: Problem, plan: Plan) -> bool:
    """The plan's whole-task bound (where it has one) is at most the whole-task optimum, and equal to it where
    its note calls it proven; whether it had one."""
    if "whole_task_bound" not in plan.stats:
        return False
    optimum = _whole_optimum(problem)
    assert plan.stats["whole_task_bound"] <= optimum * (1 + 1e-6)
    if any("proven" in note for note in plan.notes):
        assert plan.stats["whole_task_bound"] == pytest.approx(optimum, rel=1e-5)
    return True


def test_exacts_bound_of_whole_task_plans_is_at_most_their_optimum():
    reported = 0
    for seed in range(12):
        p = random_problem(seed, "batch", tasks=(4, 8))
        if p.platform.transfers == "receiver":  # exact proves optima of the overlapped model (4 of the 12)
            assert "proven" not in " ".join(diviml.solve(p, "exact", time_limit=4).notes)
            p = Problem(p.graph, replace(p.platform, transfers="overlapped"), p.objective)
        reported += _check(p, diviml.solve(p, "exact", time_limit=4))
    assert reported >= 4  # the others were proven optimal (no note then) or never searched the whole batch


@pytest.mark.parametrize("seed", range(3))
def test_splits_dp_bound_of_whole_task_plans_is_at_most_their_optimum(seed):
    # cut at series points into modules of 10 tasks: the join's DP on the whole batch's module bounds
    p = Problem(layered_dag(40, seed=seed), diviml.preset("paper-server"), Objective("batch", batch_size=4))
    plan = diviml.solve(p, "split", time_limit=20, module_size=10)
    assert plan.status == "optimal" or _check(p, plan)


def test_the_note_says_whether_the_plan_is_the_best_of_whole_tasks_or_beats_them():
    whole = Plan("batch", (diviml.plan.Assignment("a", "gpu"),), objective=3.1, bound=1.9, status="timeout",
                 solver="split", batch_size=8)
    assert whole_task_note(whole, 3.1, True, 1.9) == (
        "optimal among the plans that run every task on the whole batch at once (their optimum, 3.1 s, proven); a "
        "plan that cuts tasks into parts is bounded at 1.9 s here, 38.71% under it")
    assert "(none under 3.1 s)" in whole_task_note(whole, 3.1, False, 1.9)
    parts = (diviml.plan.Assignment("a", "gpu", batch=5), diviml.plan.Assignment("a", "cpu", batch=3))
    split = Plan("batch", parts, objective=3.0, bound=1.9, status="timeout", solver="split", batch_size=8)
    assert whole_task_note(split, 3.1, True, 1.9) == (
        "3.23% faster than any plan that runs every task on the whole batch at once (those take at least 3.1 s)")
    assert whole_task_note(split, 3.0, False, 1.9).startswith("at least as fast as any plan that runs every task")
    assert whole_task_note(whole, 2.9, False, 1.9) == (
        "the plans that run every task on the whole batch at once take at least 2.9 s (6.45% under this plan)")
