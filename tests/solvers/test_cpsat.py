"""The CP-SAT model of a job graph (the engine of exact and split)."""

import pytest

import diviml
from diviml import Problem
from diviml.generators import layered_dag
from diviml.solvers import heft
from diviml.solvers.cpsat import solve_jobs
from diviml.solvers.jobs import JobGraph


def _jobs_and_optimum(seed: int):
    p = Problem(layered_dag(12, seed=seed), diviml.preset("paper-server"))
    jobs = JobGraph.whole(p)
    device_of, start, _ = heft.heft_schedule(jobs)
    upper = max(start[j] + jobs.duration(j, device_of[j]) for j in jobs.jobs)
    best = solve_jobs(jobs, upper=upper, time_limit=30, workers=1)
    assert best.status == "optimal"
    return jobs, upper, best


@pytest.mark.parametrize("seed", range(3))
def test_a_cutoff_below_the_optimum_is_proven_out_of_reach(seed):
    jobs, upper, best = _jobs_and_optimum(seed)
    out = solve_jobs(jobs, upper=upper, time_limit=30, workers=1, cutoff=best.objective * 0.98)
    assert out.status == "infeasible" and out.device_of is None


@pytest.mark.parametrize("seed", range(3))
def test_a_cutoff_at_or_above_the_optimum_keeps_the_optimum(seed):
    jobs, upper, best = _jobs_and_optimum(seed)
    out = solve_jobs(jobs, upper=upper, time_limit=30, workers=1, cutoff=best.objective * 1.0001)
    assert out.status == "optimal" and out.objective == pytest.approx(best.objective)
