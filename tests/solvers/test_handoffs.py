"""Hand-offs (a device's ``handoff``, paid at each end of a crossing) as every solver sees them: a plan deals a
model out to two workers of one process only where the overlap it gains is more than the crossings cost."""

import pytest
from conftest import free_workers
from test_exact import brute_force_latency

import diviml
from diviml import Objective, Problem, Task, TaskGraph, preset

HANDOFF = preset("cpu-workers-2").devices[0].handoff


def branches(seconds: float, length: int = 2) -> TaskGraph:
    """A source, two parallel branches of ``length`` tasks of ``seconds`` each, and a sink."""
    tasks = [Task("in", {"host": seconds}), Task("out", {"host": seconds})]
    edges = []
    for b in "ab":
        names = [f"{b}{i}" for i in range(length)]
        tasks += [Task(n, {"host": seconds}, output_bytes=1e4) for n in names]
        edges += [("in", names[0]), *zip(names, names[1:]), (names[-1], "out")]
    return TaskGraph.create(tasks, edges, name="branches")


@pytest.mark.parametrize("solver", ["exact", "milp", "split", "heft", "list-search"])
def test_microsecond_branches_stay_on_one_worker_where_crossings_cost_more_than_they_overlap(solver):
    # one worker: 6 x 10 us; the branches side by side: 40 us of work on the path and a crossing (75 us)
    problem = Problem(branches(10e-6), preset("cpu-workers-2"), Objective("latency"))
    plan = diviml.solve(problem, solver, time_limit=5, seed=1)
    assert len({a.device for a in plan.assignments}) == 1
    assert plan.objective == pytest.approx(6 * 10e-6)
    free = diviml.solve(Problem(branches(10e-6), free_workers(), Objective("latency")), solver, time_limit=5,
                        seed=1)
    assert free.objective == pytest.approx(4 * 10e-6)  # crossings free: the branches side by side


@pytest.mark.parametrize("solver", ["exact", "milp", "split", "heft"])
def test_millisecond_branches_are_dealt_out_and_the_crossings_charged(solver):
    problem = Problem(branches(1e-3), preset("cpu-workers-2"), Objective("latency"))
    plan = diviml.solve(problem, solver, time_limit=5, seed=1)
    assert len({a.device for a in plan.assignments}) == 2
    # a branch on the other worker, the sink beside either: every path crosses once, paying both ends
    assert plan.objective == pytest.approx(4e-3 + 2 * HANDOFF)


def test_the_exact_optimum_with_hand_offs_is_the_brute_force_optimum():
    for seconds in (10e-6, 40e-6, 80e-6, 1e-3):  # around where dealing out starts to pay
        problem = Problem(branches(seconds), preset("cpu-workers-2"), Objective("latency"))
        plan = diviml.solve(problem, "exact", time_limit=10, seed=1)
        assert plan.status == "optimal"
        assert plan.objective == pytest.approx(brute_force_latency(problem), rel=1e-6)


@pytest.mark.parametrize("solver", ["dp", "ip"])
def test_a_pipeline_charges_each_worker_its_hand_offs_as_load(solver):
    # a chain of four 30 us tasks: one worker 120 us; cut in two, each worker 60 us and one hand-off
    chain = TaskGraph.create([Task(f"t{i}", {"host": 30e-6}, output_bytes=1e4) for i in range(4)],
                             [(f"t{i}", f"t{i + 1}") for i in range(3)], name="chain")
    plan = diviml.solve(Problem(chain, preset("cpu-workers-2"), Objective("pipeline")), solver, time_limit=5)
    assert plan.objective == pytest.approx(60e-6 + HANDOFF)
    assert diviml.validate(plan, Problem(chain, preset("cpu-workers-2"), Objective("pipeline"))).ok
