"""Hand-offs (a device's ``handoff``, paid at each end of a crossing) as every solver sees them: a plan deals a
model out to two workers of one process only where the overlap it gains is more than the crossings cost, whether
the crossings delay their consumers (transfers overlapped) or the receiving worker spends them (the preset's
transfers: receiver)."""

from dataclasses import replace

import pytest
from conftest import brute_force_latency, free_workers

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
    # a branch on the other worker, the sink beside either: every path crosses once, paying both ends
    overlapped = Problem(branches(1e-3), replace(preset("cpu-workers-2"), transfers="overlapped"), Objective("latency"))
    plan = diviml.solve(overlapped, solver, time_limit=5, seed=1)
    assert len({a.device for a in plan.assignments}) == 2
    assert plan.objective == pytest.approx(4e-3 + 2 * HANDOFF)
    # as the preset runs them, the sink's worker spends both crossings itself: the branch's and the sink's
    problem = Problem(branches(1e-3), preset("cpu-workers-2"), Objective("latency"))
    plan = diviml.solve(problem, solver, time_limit=5, seed=1)
    assert len({a.device for a in plan.assignments}) == 2
    assert plan.objective == pytest.approx(4e-3 + 4 * HANDOFF)


def test_the_exact_optimum_with_hand_offs_is_the_brute_force_optimum():
    for seconds in (10e-6, 40e-6, 80e-6, 1e-3):  # around where dealing out starts to pay
        for transfers in ("overlapped", "receiver"):
            platform = replace(preset("cpu-workers-2"), transfers=transfers)
            problem = Problem(branches(seconds), platform, Objective("latency"))
            plan = diviml.solve(problem, "exact", time_limit=10, seed=1)
            optimum = brute_force_latency(problem)
            assert plan.bound <= optimum * (1 + 1e-9)
            assert plan.objective == pytest.approx(optimum, rel=1e-6)
            assert plan.status == "optimal" or transfers == "receiver"  # there its model is the overlapped one


@pytest.mark.parametrize("solver", ["dp", "ip"])
def test_a_pipeline_charges_each_worker_its_hand_offs_as_load(solver):
    # a chain of four 30 us tasks: one worker 120 us; cut in two, each worker 60 us and one hand-off
    chain = TaskGraph.create([Task(f"t{i}", {"host": 30e-6}, output_bytes=1e4) for i in range(4)],
                             [(f"t{i}", f"t{i + 1}") for i in range(3)], name="chain")
    plan = diviml.solve(Problem(chain, preset("cpu-workers-2"), Objective("pipeline")), solver, time_limit=5)
    assert plan.objective == pytest.approx(60e-6 + HANDOFF)
    assert diviml.validate(plan, Problem(chain, preset("cpu-workers-2"), Objective("pipeline"))).ok


@pytest.mark.parametrize("solver", ["exact", "split", "milp"])
def test_where_the_receiver_spends_the_crossings_a_spread_that_only_the_delays_favour_is_left_for_one_worker(solver):
    # 50 us tasks: side by side 4 x 50 us, and per path one crossing: 275 us as delays, under one worker's 300;
    # but the sink's worker spends both crossings itself (350 us), so one worker is the faster plan as it runs
    overlapped = Problem(branches(50e-6), replace(preset("cpu-workers-2"), transfers="overlapped"),
                         Objective("latency"))
    spread = diviml.solve(overlapped, solver, time_limit=5, seed=1)
    assert len({a.device for a in spread.assignments}) == 2 and spread.objective == pytest.approx(275e-6)
    problem = Problem(branches(50e-6), preset("cpu-workers-2"), Objective("latency"))
    plan = diviml.solve(problem, solver, time_limit=5, seed=1)
    assert len({a.device for a in plan.assignments}) == 1 and plan.objective == pytest.approx(300e-6)
    assert diviml.validate(plan, problem).ok and plan.bound <= 300e-6


def test_solve_keeps_the_best_single_worker_where_the_plan_found_is_slower_as_the_receiver_spends_crossings():
    from diviml.solvers import one_device_if_faster
    from diviml.solvers.engines.plans import Stopwatch, make_plan
    problem = Problem(branches(50e-6), preset("cpu-workers-2"), Objective("latency"))
    placement = {"in": "worker0", "a0": "worker0", "a1": "worker0", "b0": "worker1", "b1": "worker1", "out": "worker1"}
    spread = make_plan(problem, placement=placement, solver="hand", status="feasible", watch=Stopwatch(1))
    assert spread.objective == pytest.approx(350e-6)
    kept = one_device_if_faster(problem, spread)
    assert {a.device for a in kept.assignments} == {"worker0"} and kept.objective == pytest.approx(300e-6)
    assert kept.solver == "hand" and "kept every task on worker0" in kept.notes[-1]
    assert diviml.validate(kept, problem).ok
    # where the transfers are delays, or the plan is faster, the plan stands
    slow = Problem(branches(1e-3), preset("cpu-workers-2"), Objective("latency"))
    plan = make_plan(slow, placement=placement, solver="hand", status="feasible", watch=Stopwatch(1))
    assert one_device_if_faster(slow, plan) is plan  # 4.15 ms spread, 6 ms on one worker
    over = Problem(branches(50e-6), replace(preset("cpu-workers-2"), transfers="overlapped"), Objective("latency"))
    plan = make_plan(over, placement=placement, solver="hand", status="feasible", watch=Stopwatch(1))
    assert one_device_if_faster(over, plan) is plan
