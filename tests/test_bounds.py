from itertools import product

import pytest
from conftest import graph, two_device_platform

import diviml
from diviml import Objective, Problem
from diviml.bounds import critical_path_bound, lower_bound, work_bound
from diviml.generators import layered_dag
from diviml.simulate import pipeline_loads


def test_critical_path_uses_each_tasks_fastest_device_and_free_transfers():
    g = graph({"a": ({"x": 2, "y": 3}, 100), "b": ({"x": 3, "y": 1}, 0)}, [("a", "b")])
    assert critical_path_bound(Problem(g, two_device_platform(), Objective())) == 3


def test_work_bound_is_the_balanced_fractional_load():
    g = graph({x: ({"x": 1, "y": 1}, 0) for x in "abcd"}, [])
    assert work_bound(Problem(g, two_device_platform(), Objective())) == pytest.approx(2.0, rel=1e-5)


@pytest.mark.parametrize("seed", range(4))
def test_the_bound_never_exceeds_the_exhaustive_pipeline_optimum(seed):
    g = layered_dag(7, seed=seed)
    p = Problem(g, diviml.preset("paper-server"), Objective("pipeline"))
    devices = [d.name for d in p.platform.devices]
    best = min(pipeline_loads(p, dict(zip(g.topological_order, combo))).objective
               for combo in product(devices, repeat=len(g)))
    assert lower_bound(p) <= best + 1e-12


@pytest.mark.parametrize("kind", ["latency", "batch", "pipeline"])
def test_every_baseline_plan_carries_a_bound_no_larger_than_its_value(kind):
    p = Problem(layered_dag(30, seed=3), diviml.preset("paper-server"), Objective(kind))
    for solver in ("best-device", "greedy") + (("heft",) if kind != "pipeline" else ()):
        plan = diviml.solve(p, solver, time_limit=10)
        assert 0 < plan.bound <= plan.objective
        assert plan.gap == pytest.approx((plan.objective - plan.bound) / plan.objective)


def test_an_lp_bound_that_gets_no_time_is_dropped_and_the_cheap_bound_stands():
    from diviml.bounds import path_work_bound
    from diviml.generators import benchmark_platform
    graph = layered_dag(200, seed=1)

    def problem():
        return Problem(graph, benchmark_platform(2), Objective("latency"))

    assert work_bound(problem(), time_limit=0.0) == 0.0 and path_work_bound(problem(), time_limit=0.0) == 0.0
    hurried, patient = lower_bound(problem(), time_limit=0.0), lower_bound(problem())
    assert hurried == critical_path_bound(problem()) > 0
    assert patient >= hurried and patient == max(critical_path_bound(problem()), path_work_bound(problem()),
                                                 work_bound(problem()))
