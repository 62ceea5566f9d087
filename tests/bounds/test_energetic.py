"""The energetic bound: the path-work LPs with each device's work counted in the windows between its tasks'
heads and tails. At most the optimum (exact's proof on small latency graphs, brute force on small batches),
and it sees what neither a path nor a total sees alone: work that must happen between a head and a tail."""

import random

import pytest
from conftest import graph, two_device_platform
from test_batch import brute_force_optimum, random_batch_problem

import diviml
from diviml import Device, Link, Objective, Platform, Problem, Task, TaskGraph
from diviml.bounds import (
    critical_path_bound,
    energetic_bound,
    energetic_cuts,
    lower_bound,
    lower_bound_source,
    path_work_bound,
    work_bound,
)
from diviml.bounds._energetic import earliest_starts, least_deliveries
from diviml.generators import random_dag
from diviml.graph import longest_paths


def test_work_squeezed_between_a_head_and_a_tail_lifts_the_bound_to_the_optimum():
    # a (2 s) feeds four 1 s tasks that feed z (2 s), on two identical devices, transfers free: the path is 5 s
    # and the work 4 s a device, but the four middle tasks (2 s a device) run after a and before z: 6 s
    spec = {"a": ({"x": 2, "y": 2}, 0.0), "z": ({"x": 2, "y": 2}, 0.0)}
    spec.update({m: ({"x": 1, "y": 1}, 0.0) for m in "bcde"})
    g = graph(spec, [("a", m) for m in "bcde"] + [(m, "z") for m in "bcde"])
    p = Problem(g, two_device_platform(), Objective())
    assert critical_path_bound(p) == 5 and work_bound(p) == pytest.approx(4, rel=1e-5)
    assert path_work_bound(p) < 5.9
    assert energetic_bound(p) == pytest.approx(6.0, rel=1e-5)
    assert lower_bound(p) == pytest.approx(6.0, rel=1e-5) and lower_bound_source(p) == "energetic LP"
    plan = diviml.solve(p, "exact", time_limit=10)
    assert plan.objective == pytest.approx(6.0) and plan.status == "optimal"


def _random_latency_problem(seed: int) -> Problem:
    """5-9 tasks, randomly wired, on two or three devices of random speeds over a host link; some tasks take
    no time, some may not run on a device, some outputs are large."""
    rng = random.Random(seed)
    base = random_dag(rng.randint(5, 9), seed=seed, device_types=("x", "y", "z"), ccr=(0.0, 2.0))
    kinds = ["x", "y", "z"][:rng.randint(2, 3)]
    tasks = []
    for t in base.tasks:
        times = {k: rng.choice([0.0, rng.uniform(0.5, 4.0)]) if rng.random() < 0.2 else rng.uniform(0.5, 4.0)
                 for k in kinds}
        if rng.random() < 0.2:
            times.pop(rng.choice(kinds[1:]))  # barred from a device
        tasks.append(Task(t.id, times, output_bytes=rng.choice([0.0, 0.5, 3.0])))
    link = Link(1.0, rng.choice([0.0, 0.3]))
    devices = (Device("host", "x", float("inf"), "s", True),) + tuple(
        Device(f"d{k}", k, float("inf"), "s", False, link) for k in kinds[1:])
    return Problem(TaskGraph.create(tasks, base.edges), Platform(devices, "small"), Objective())


@pytest.mark.parametrize("seed", range(16))
def test_the_latency_bound_never_exceeds_the_proven_optimum(seed):
    problem = _random_latency_problem(seed)
    best = diviml.solve(problem, "exact", time_limit=20, decompose=False)
    assert best.status == "optimal"
    assert energetic_bound(problem) <= best.objective * (1 + 1e-9)
    assert energetic_bound(problem, floor=best.objective) <= best.objective * (1 + 1e-9)  # the floor a proof gives


@pytest.mark.parametrize("seed", range(16))
def test_the_batch_bound_never_exceeds_the_brute_force_optimum(seed):
    problem = random_batch_problem(seed)
    best = brute_force_optimum(problem)
    assert energetic_bound(problem) <= best * (1 + 1e-9)
    assert energetic_bound(problem, floor=best) <= best * (1 + 1e-9)


def test_on_a_randomly_wired_dag_it_is_at_least_the_path_work_lp_and_below_every_plan():
    p = Problem(random_dag(40, seed=140, ccr=(0.2, 0.4)), diviml.preset("paper-server"), Objective())
    bound = energetic_bound(p, time_limit=30)
    assert bound > path_work_bound(p) * 1.05  # 11% on this graph
    assert bound <= min(diviml.solve(p, s, time_limit=10).objective for s in ("heft", "exact"))


def test_a_bound_that_gets_no_time_is_dropped():
    p = Problem(random_dag(40, seed=140), diviml.preset("paper-server"), Objective())
    assert energetic_bound(p, time_limit=0.0) == 0.0
    assert energetic_bound(Problem(p.graph, p.platform, Objective("pipeline"))) == 0.0


@pytest.mark.parametrize("seed", range(6))
def test_every_plan_meets_the_cuts_behind_the_bound(seed):
    # each cut says: the time a device spends inside a window (between a head and the makespan less a tail,
    # or before a task's start, or after its end), over the tasks it runs there, fits in the window
    problem = _random_latency_problem(seed)
    assert energetic_bound(problem) > 0
    for solver in ("heft", "exact", "greedy"):
        plan = diviml.solve(problem, solver, time_limit=10)
        on = {(a.task, a.device) for a in plan.assignments}
        times = {("makespan", ""): plan.objective, ("zero", ""): 0.0}
        for a in plan.assignments:
            times["start", a.task], times["end", a.task] = a.start, a.start + problem.time(a.task, a.device)
        for cut in energetic_cuts(problem):
            spent = sum(seconds for job, seconds in cut.terms.items() if job in on)
            assert spent + cut.offset <= times[cut.later] - times[cut.earlier] + 1e-9


def test_the_cuts_are_the_rows_that_hold_the_bound_up():
    p = Problem(random_dag(40, seed=140, ccr=(0.2, 0.4)), diviml.preset("paper-server"), Objective())
    assert energetic_cuts(p) == ()  # none before the bound ran
    bound = energetic_bound(p)
    assert 0 < len(energetic_cuts(p)) < 100
    assert all(0 <= cut.offset < bound and cut.terms for cut in energetic_cuts(p))


def test_heads_and_deliveries_count_the_transfers_a_device_change_costs():
    problem = Problem(random_dag(12, seed=3, ccr=(0.8, 1.2)), diviml.preset("paper-server"), Objective("latency"))
    best = diviml.solve(problem, "exact", time_limit=20)
    start, delivery = earliest_starts(problem), least_deliveries(problem)
    for plan in (best, diviml.solve(problem, "heft", time_limit=10)):  # any schedule honours both, task by task
        for a in plan.assignments:
            assert a.start >= start[a.task, a.device] * (1 - 1e-9)
            assert a.start + problem.time(a.task, a.device) + delivery[a.task, a.device] <= plan.objective * (1 + 1e-9)
    # with transfers this heavy, some head is later than the longest path of fastest times alone
    fastest = {t: min(problem.time(t, d) for d in problem.allowed_devices[t]) for t in problem.graph.topological_order}
    before = longest_paths(problem.graph.topological_order, problem.graph.predecessors.__getitem__, fastest.__getitem__)
    assert any(start[t, d] > before[t] - fastest[t] + 1e-12 for t, d in start)
