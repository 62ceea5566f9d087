"""Unequal shares of a batch: a fast and a slow GPU split it by speed, which equal sub-batches cannot do."""

import pytest

import diviml
from diviml import Objective, Problem, preset
from diviml.frontends.pytorch import profile_zoo
from diviml.solvers.engines.jobs import batch_splits
from diviml.solvers.engines.plans import evaluate
from diviml.validate import validate


@pytest.fixture(scope="module")
def resnet50_batch8():
    graph = profile_zoo("resnet50", batches=(1, 8), device=None)  # roofline times: V100 and A100 of paper-server
    return Problem(graph, preset("paper-server"), Objective("batch", 8))


def shares_value(problem, shares):
    devices = [d.name for d in problem.platform.devices]
    parts = {t.id: [(d, s) for d, s in zip(devices, shares) if s] for t in problem.graph.tasks}
    return evaluate(problem, parts)[0]


def test_resnet50_at_batch_8_splits_5_on_the_a100_and_3_on_the_v100(resnet50_batch8):
    p = resnet50_batch8
    plan = diviml.solve(p, "data-parallel", time_limit=30)
    assert validate(plan, p).ok
    assert sorted(plan.parts[p.graph.topological_order[-1]]) == [("a100", 5), ("v100", 3)]
    every = [(0, a, 8 - a) for a in range(9)]  # the best of all two-GPU shares (cpu, v100, a100)
    assert plan.objective == pytest.approx(min(shares_value(p, s) for s in every), rel=1e-12)
    assert plan.objective < shares_value(p, (0, 4, 4)) * 0.95  # equal halves are clearly worse


def test_the_exact_search_tries_the_balanced_split_and_never_returns_worse(resnet50_batch8):
    p = resnet50_batch8
    assert (5, 3) in batch_splits(p)
    exact = diviml.solve(p, "exact", time_limit=10)
    assert validate(exact, p).ok
    assert exact.objective <= diviml.solve(p, "data-parallel", time_limit=30).objective * (1 + 1e-9)


def test_data_parallel_refuses_other_objectives(resnet50_batch8):
    from dataclasses import replace
    with pytest.raises(diviml.InputError, match="does not handle objective 'latency'"):
        diviml.solve(replace(resnet50_batch8, objective=Objective("latency")), "data-parallel", time_limit=5)


def test_a_task_that_must_run_on_the_whole_batch_gathers_the_shares_on_the_largest_ones_device():
    from dataclasses import replace

    from diviml import TaskGraph
    from diviml.generators import layered_dag
    graph = layered_dag(14, seed=3)
    middle = graph.topological_order[7]
    graph = TaskGraph.create([replace(t, whole_batch=t.id == middle) for t in graph.tasks], graph.edges)
    problem = Problem(graph, preset("paper-server"), Objective("batch", 8))
    plan = diviml.solve(problem, "data-parallel", time_limit=10)
    shares = {d: b for d, b in plan.parts[graph.topological_order[0]]}
    assert len(shares) >= 2 and validate(plan, problem).ok  # the others split over the devices
    assert plan.parts[middle] == [(max(shares, key=shares.get), 8)]
    assert batch_splits(problem) == [(8,)]  # the job-graph solvers keep every task whole around it
