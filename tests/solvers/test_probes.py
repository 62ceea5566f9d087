"""Probing cutoffs bounds a latency model from below: every makespan CP-SAT proves no schedule meets is a
bound, never above the optimum; a probe that finds a schedule is a better plan; and exact says which bound it
reports."""

from dataclasses import replace

import pytest

import diviml
from diviml import Objective, Problem
from diviml.bounds import CUTOFFS, lower_bound
from diviml.generators import random_dag
from diviml.solvers.baselines import heft
from diviml.solvers.engines.cpsat import solve_jobs
from diviml.solvers.engines.jobs import JobGraph
from diviml.solvers.engines.probes import probe
from diviml.validate import validate


def _problem(n: int, seed: int, ccr=(0.8, 1.2)) -> Problem:
    return Problem(random_dag(n, seed=seed, ccr=ccr), diviml.preset("paper-server"), Objective("latency"))


def _first_schedule(problem: Problem):
    """The job graph, HEFT's makespan (the time scale) and CP-SAT's first schedule, with no bound."""
    jobs = JobGraph.whole(problem)
    device_of, start, _ = heft.heft_schedule(jobs)
    upper = max(start[j] + jobs.duration(j, device_of[j]) for j in jobs.jobs)
    first = solve_jobs(jobs, upper=upper, time_limit=10, workers=1, first_only=True)
    return jobs, upper, replace(first, status="timeout", bound=0.0)


@pytest.mark.parametrize("workers", [1, 2])  # two: both subsolvers of the portfolio; one: the LP at level 1
@pytest.mark.parametrize("seed", range(4))
def test_probing_from_a_first_schedule_and_no_bound_proves_the_optimum(seed, workers):
    problem = _problem(12, seed)
    jobs, upper, first = _first_schedule(problem)
    optimum = solve_jobs(jobs, upper=upper, time_limit=30)
    assert optimum.status == "optimal"
    out = probe(jobs, first, upper=upper, time_limit=30, workers=workers)
    assert out.status == "optimal"
    assert out.objective == pytest.approx(optimum.objective, rel=1e-6)
    assert out.bound <= optimum.objective * (1 + 1e-9) and out.bound == pytest.approx(optimum.objective, rel=1e-5)
    assert out.stats["probes"] >= 1 and out.stats["bound_source"] == CUTOFFS


@pytest.mark.parametrize("seed", range(4))
def test_a_probe_cut_short_leaves_a_bound_at_most_the_optimum_and_the_schedule_it_had(seed):
    problem = _problem(14, seed, ccr=(0.2, 0.4))
    jobs, upper, first = _first_schedule(problem)
    optimum = solve_jobs(jobs, upper=upper, time_limit=30)
    assert optimum.status == "optimal"
    for limit in (0.0, 0.2, 1.0):
        out = probe(jobs, first, upper=upper, time_limit=limit)
        assert out.bound <= optimum.objective * (1 + 1e-9)
        assert optimum.objective * (1 - 1e-9) <= out.objective <= first.objective


def test_exact_reports_the_cutoffs_where_they_prove_more_than_minimising():
    # a randomly wired DAG of 48 tasks whose model CP-SAT does not prove in a few seconds: the cutoffs lift
    # the bound above the energetic LP's, and the plan stays valid and above it
    problem = _problem(48, 148, ccr=(0.2, 0.4))
    plan = diviml.solve(problem, "exact", time_limit=8)
    assert validate(plan, problem).ok
    assert plan.bound_source == CUTOFFS and plan.stats["probes"] >= 1
    assert lower_bound(problem) < plan.bound <= plan.objective
