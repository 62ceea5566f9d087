"""The work MILP: the work LP with whole tasks, never above the optimum, above the LP where a task cannot be
split to fill a device's memory."""

import random
from itertools import product

import pytest

import diviml
from diviml import Device, Link, Objective, Platform, Problem, Task, TaskGraph
from diviml.bounds import integer_work_bound, lower_bound, lower_bound_source, work_bound
from diviml.simulate import pipeline_loads

GB = 1e9


def _two_small_and_one_roomy() -> Platform:
    link = Link(16 * GB, 0.0)
    return Platform((Device("a", "gpu", 16 * GB, link=link), Device("b", "gpu", 16 * GB, link=link),
                     Device("c", "big", 100 * GB, is_host=True)))


def test_whole_tasks_cannot_fill_a_device_to_the_byte():
    # ten identical 5 GB tasks of 1 s (2 s on the roomy device c): a and b hold three each, so c runs four, 8 s.
    # Fractional tasks would fill a and b with 3.2 each and leave c 3.6 of them (7.2); the work LP now holds a
    # and b to the 15 GB whole tasks can fill of them (bounds._packing), and the MILP says the same
    tasks = [Task(f"t{i}", {"gpu": 1.0, "big": 2.0}, memory_bytes=5 * GB) for i in range(10)]
    p = Problem(TaskGraph.create(tasks, []), _two_small_and_one_roomy(), Objective("pipeline"))
    assert work_bound(p) == pytest.approx(8.0, rel=1e-5)
    assert integer_work_bound(p) == pytest.approx(8.0, rel=1e-5)
    assert lower_bound(p) == pytest.approx(8.0, rel=1e-5)
    assert diviml.solve(p, "ip", time_limit=20).objective == pytest.approx(8.0)


def test_whole_tasks_cannot_balance_the_loads_to_the_second():
    # five tasks of 1 s on the two gpus (the roomy device takes 10 s each): one gpu runs three, 3 s; the LP 2.5
    tasks = [Task(f"t{i}", {"gpu": 1.0, "big": 10.0}) for i in range(5)]
    p = Problem(TaskGraph.create(tasks, []), _two_small_and_one_roomy(), Objective("pipeline"))
    assert work_bound(p) < 2.6
    assert integer_work_bound(p) == pytest.approx(3.0, rel=1e-5)
    assert lower_bound(p) == pytest.approx(3.0, rel=1e-5) and lower_bound_source(p) == "work MILP"


def test_it_says_nothing_for_batches_calls_or_no_time():
    tasks = [Task(f"t{i}", {"gpu": 1.0, "big": 2.0}, memory_bytes=5 * GB) for i in range(4)]
    g = TaskGraph.create(tasks, [])
    assert integer_work_bound(Problem(g, _two_small_and_one_roomy(), Objective("batch"))) == 0.0
    assert integer_work_bound(Problem(g, _two_small_and_one_roomy(), Objective("call-latency"))) == 0.0
    assert integer_work_bound(Problem(g, _two_small_and_one_roomy(), Objective("pipeline")), time_limit=0.0) == 0.0


def _random_problem(seed: int, objective: str) -> Problem:
    """5-7 tasks, some of them alike, a random DAG over them, on a slow host that holds every weight and one or
    two fast devices (one or two servers) that hold 30-80% of them each."""
    rng = random.Random(seed)
    kinds = [(rng.uniform(1, 4), rng.uniform(1, 3), rng.choice([0.0, 1.0, 2.0, 3.0])) for _ in range(3)]
    tasks = []
    for i in range(rng.randint(5, 7)):
        fast, slower, memory = rng.choice(kinds)
        tasks.append(Task(f"t{i}", {"x": fast, "y": fast * slower}, output_bytes=rng.uniform(0, 2),
                          memory_bytes=memory * GB))
    edges = [(f"t{i}", f"t{j}") for i in range(len(tasks)) for j in range(i + 1, len(tasks)) if rng.random() < 0.3]
    total = sum(t.memory_bytes for t in tasks) or GB
    link = Link(rng.choice([1.0, 4.0]), 0.0)
    devices = [Device("x0", "x", total * rng.uniform(0.3, 0.8), "s0", link=link),
               Device("y0", "y", total, "s0", is_host=True)]
    if rng.random() < 0.5:
        devices.append(Device("x1", "x", total * rng.uniform(0.3, 0.8), "s1", is_host=True))
    platform = Platform(tuple(devices), network=Link(2.0, 0.0) if len(devices) == 3 else None)
    return Problem(TaskGraph.create(tasks, edges), platform, Objective(objective))


def _pipeline_optimum(p: Problem) -> float:
    names, ids = [d.name for d in p.platform.devices], [t.id for t in p.graph.tasks]
    best = float("inf")
    for combo in product(names, repeat=len(ids)):
        placement = dict(zip(ids, combo))
        held = {d.name: 0.0 for d in p.platform.devices}
        for t, d in placement.items():
            held[d] += p.graph.by_id[t].memory_bytes
        if all(held[d.name] <= d.memory_bytes for d in p.platform.devices):
            best = min(best, pipeline_loads(p, placement).objective)
    return best


@pytest.mark.parametrize("seed", range(24))
def test_it_never_exceeds_the_brute_force_pipeline_optimum_and_never_falls_below_the_lp(seed):
    p = _random_problem(seed, "pipeline")
    optimum = _pipeline_optimum(p)
    assert integer_work_bound(p) <= optimum * (1 + 1e-9)
    assert integer_work_bound(p) >= work_bound(p) * (1 - 1e-5)


@pytest.mark.parametrize("seed", range(8))
def test_it_never_exceeds_the_proven_latency_optimum(seed):
    p = _random_problem(seed, "latency")
    best = diviml.solve(p, "exact", time_limit=20)
    assert best.status == "optimal"
    assert integer_work_bound(p) <= best.objective * (1 + 1e-9)
