"""Pipeline splits from the work MILP's counts: each device runs its count of each class of alike tasks."""

import random

import pytest

import diviml
from diviml import Device, Link, Objective, Platform, Problem, Task, TaskGraph
from diviml.bounds import integer_work_bound, integer_work_counts
from diviml.generators import layered_dag
from diviml.solvers.engines.plans import Stopwatch
from diviml.solvers.pipeline.counts import split_counts
from diviml.validate import validate

GB = 1e9


def _weights_and_a_host(seed: int) -> Problem:
    """Independent tasks of a few shapes (weights of 1-6 GB), two 8 GB GPUs and a roomy host CPU 5-20 times
    slower: without tensors between tasks, the best split is a knapsack."""
    rng = random.Random(seed)
    shapes = [(rng.uniform(0.5, 2.0), rng.choice([1, 2, 3, 6]) * GB, rng.uniform(5, 20)) for _ in range(3)]
    tasks = [Task(f"t{k}", {"gpu": gpu, "cpu": gpu * slower}, memory_bytes=memory)
             for k, (gpu, memory, slower) in enumerate(rng.choice(shapes) for _ in range(12))]
    link = Link(16 * GB, 0.0)
    platform = Platform((Device("g0", "gpu", 8 * GB, link=link), Device("g1", "gpu", 8 * GB, link=link),
                         Device("cpu", "cpu", 1e12, is_host=True)))
    return Problem(TaskGraph.create(tasks, []), platform, Objective("pipeline"))


@pytest.mark.parametrize("seed", range(6))
def test_without_tensors_between_tasks_the_counts_split_meets_the_work_milps_bound(seed):
    problem = _weights_and_a_host(seed)
    bound = integer_work_bound(problem, time_limit=30)
    plan = split_counts(problem, Stopwatch(10))
    assert validate(plan, problem).ok
    assert plan.objective == pytest.approx(bound, rel=1e-5)
    assert diviml.solve(problem, "ip", time_limit=30, engine="highs").objective == pytest.approx(bound, rel=1e-5)


@pytest.mark.parametrize("seed", range(4))
def test_on_graphs_with_tensors_it_gives_valid_splits_that_the_hops_make_slower(seed):
    graph = layered_dag(30, seed=seed)
    platform = diviml.preset("paper-server")
    problem = Problem(graph, platform, Objective("pipeline"))
    bound = integer_work_bound(problem, time_limit=30)
    plan = split_counts(problem, Stopwatch(10))
    assert validate(plan, problem).ok and plan.objective >= bound * (1 - 1e-9)


def test_it_needs_the_work_milp_solved_and_a_non_contiguous_pipeline():
    problem = _weights_and_a_host(0)
    assert integer_work_counts(problem) is None and split_counts(problem, Stopwatch(10)) is None
    contiguous = Problem(problem.graph, problem.platform, Objective("pipeline", contiguous=True))
    integer_work_bound(contiguous, time_limit=30)
    assert integer_work_counts(contiguous) is not None and split_counts(contiguous, Stopwatch(10)) is None


def test_a_view_goes_with_its_producer_not_where_the_counts_would_deal_it():
    # six weighted tasks, each read by a view of no time and no memory: the counts may put the views anywhere
    # (they cost nothing there), but away from their producers every one of them would pay two hops
    weighted = [Task(f"t{k}", {"gpu": 1.0, "cpu": 8.0}, memory_bytes=3 * GB, output_bytes=1 * GB) for k in range(6)]
    views = [Task(f"v{k}", {"gpu": 0.0, "cpu": 0.0}, output_bytes=1 * GB) for k in range(6)]
    link = Link(1 * GB, 0.0)
    platform = Platform((Device("g0", "gpu", 8 * GB, link=link), Device("g1", "gpu", 8 * GB, link=link),
                         Device("cpu", "cpu", 1e12, is_host=True)))
    problem = Problem(TaskGraph.create(weighted + views, [(f"t{k}", f"v{k}") for k in range(6)]), platform,
                      Objective("pipeline"))
    integer_work_bound(problem, time_limit=30)
    plan = split_counts(problem, Stopwatch(10))
    assert all(plan.placement[f"v{k}"] == plan.placement[f"t{k}"] for k in range(6))
    assert validate(plan, problem).ok
