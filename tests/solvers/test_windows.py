"""Windows of a graph solved exactly bound the latency of the whole: never above the optimum, above the LP
bounds where the graph's branches compete for the fast devices, and what `exact` reports when it is larger."""

import pytest

import diviml
from diviml import Objective, Problem
from diviml.bounds import WINDOWS, lower_bound
from diviml.generators import random_dag
from diviml.graph import longest_paths
from diviml.solvers.engines.cpsat import solve_jobs
from diviml.solvers.engines.jobs import JobGraph
from diviml.solvers.engines.windows import window_bound


@pytest.mark.parametrize("seed,ccr", [(0, (0.2, 0.4)), (0, (0.8, 1.2)), (2, (0.8, 1.2)), (3, (0.2, 0.4))])
def test_the_windows_bound_is_at_most_the_proven_optimum_and_beats_the_lp_bounds(seed, ccr):
    problem = Problem(random_dag(28, seed=seed, ccr=ccr), diviml.preset("paper-server"), Objective("latency"))
    best = diviml.solve(problem, "exact", time_limit=30, window_share=0.0)
    assert best.status == "optimal"
    found = window_bound(problem, upper=best.objective, time_limit=20)
    assert lower_bound(problem) < found <= best.objective * (1 + 1e-9)


def test_a_windows_head_and_delivery_are_the_time_its_outside_neighbours_need_on_each_device():
    problem = Problem(random_dag(6, seed=1), diviml.preset("paper-server"), Objective("latency"))
    last = problem.graph.topological_order[-1]
    devices = problem.allowed_devices[last]
    # on the device where it runs fastest the task waits longer for its inputs and its consumers
    fastest = min(devices, key=lambda d: problem.time(last, d))
    window = JobGraph(problem, (1,), tasks=(last,), release={((last, 0), d): 2.0 + 3.0 * (d == fastest) for d in devices},
                      delivery={((last, 0), d): 1.0 + 4.0 * (d == fastest) for d in devices})
    out = solve_jobs(window, upper=20.0, time_limit=5)
    expected = min(2.0 + 3.0 * (d == fastest) + problem.time(last, d) + 1.0 + 4.0 * (d == fastest) for d in devices)
    assert out.status == "optimal" and out.bound == pytest.approx(expected, rel=1e-5)


def test_heads_and_deliveries_count_the_transfers_a_device_change_costs():
    from diviml.bounds._energetic import earliest_starts, least_deliveries
    problem = Problem(random_dag(12, seed=3, ccr=(0.8, 1.2)), diviml.preset("paper-server"), Objective("latency"))
    best = diviml.solve(problem, "exact", time_limit=20, window_share=0.0)
    start, delivery = earliest_starts(problem), least_deliveries(problem)
    for plan in (best, diviml.solve(problem, "heft", time_limit=10)):  # any schedule honours both, task by task
        for a in plan.assignments:
            assert a.start >= start[a.task, a.device] * (1 - 1e-9)
            assert a.start + problem.time(a.task, a.device) + delivery[a.task, a.device] <= plan.objective * (1 + 1e-9)
    # with transfers this heavy, some head is later than the longest path of fastest times alone
    fastest = {t: min(problem.time(t, d) for d in problem.allowed_devices[t]) for t in problem.graph.topological_order}
    before = longest_paths(problem.graph.topological_order, problem.graph.predecessors.__getitem__, fastest.__getitem__)
    assert any(start[t, d] > before[t] - fastest[t] + 1e-12 for t, d in start)
def test_exact_names_the_windows_when_they_prove_more_than_its_model():
    # nearly all of the time on the windows (opt-in since the energetic cuts): the whole model, left half a
    # second, proves no more than they did, and they prove more than the energetic LP on this graph
    problem = Problem(random_dag(40, seed=1, ccr=(0.8, 1.2)), diviml.preset("paper-server"), Objective("latency"))
    plan = diviml.solve(problem, "exact", time_limit=8, window_share=0.95, workers=1)
    assert plan.bound_source == WINDOWS and lower_bound(problem) < plan.bound <= plan.objective
    assert "bound_source" not in plan.stats


def test_the_window_share_is_a_fraction_of_the_time():
    problem = Problem(random_dag(8, seed=1), diviml.preset("paper-server"), Objective("latency"))
    with pytest.raises(diviml.errors.InputError, match="window-share must be a share"):
        diviml.solve(problem, "exact", time_limit=5, window_share=1.5)

