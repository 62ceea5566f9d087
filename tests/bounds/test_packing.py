"""The memory whole tasks can fill on a group of devices: never less than a placement holds, and what lets the
pooled memory rows of the bounds see that whole tasks leave bytes over."""

import random
from itertools import product

import pytest

import diviml
from diviml import Device, Link, Objective, Platform, Problem, Task, TaskGraph
from diviml.bounds import memory_path_bound, memory_segments_bound, work_bound
from diviml.bounds._packing import packable_memory

GB = 1e9


def _gpus_and_a_cpu(*capacities: float) -> Platform:
    link = Link(16 * GB, 0.0)
    gpus = tuple(Device(f"g{i}", "gpu", c * GB, link=link) for i, c in enumerate(capacities))
    return Platform((*gpus, Device("cpu", "cpu", is_host=True)))


def _most_held(problem: Problem, devices: list[str]) -> float:
    """Brute force: the most bytes any placement of whole tasks holds on ``devices`` within their memory."""
    tasks = [t for t in problem.graph.tasks if t.memory_bytes > 0]
    best = 0.0
    for choice in product([None, *devices], repeat=len(tasks)):
        held = {d: 0.0 for d in devices}
        for t, d in zip(tasks, choice):
            if d is not None:
                held[d] += t.memory_bytes
        if all(held[d] <= problem.platform.by_name[d].memory_bytes and (
                all(t.memory_bytes <= problem.platform.by_name[d].memory_bytes for t, c in zip(tasks, choice) if c == d))
               for d in devices):
            best = max(best, sum(held.values()))
    return best


def test_two_six_gigabyte_tasks_fill_two_ten_gigabyte_gpus_to_twelve():
    tasks = [Task(name, {"gpu": 1.0, "cpu": 9.0}, memory_bytes=6 * GB) for name in "abc"]
    p = Problem(TaskGraph.create(tasks, []), _gpus_and_a_cpu(10, 10), Objective("latency"))
    assert packable_memory(p, ["g0", "g1"]) == pytest.approx(12 * GB, rel=1e-5)


def test_small_tasks_fill_the_bytes_left_over_once_not_on_every_device():
    # 6 GB tasks leave 4 GB on each 10 GB gpu; two 1 GB tasks fill part of it, once: 7 + 7, not 8 + 8
    tasks = [Task(f"w{i}", {"gpu": 1.0, "cpu": 9.0}, memory_bytes=6 * GB) for i in range(4)]
    tasks += [Task(f"s{i}", {"gpu": 1.0, "cpu": 9.0}, memory_bytes=1 * GB) for i in range(2)]
    p = Problem(TaskGraph.create(tasks, []), _gpus_and_a_cpu(10, 10), Objective("latency"))
    assert packable_memory(p, ["g0", "g1"]) == pytest.approx(14 * GB, rel=1e-5)
    assert packable_memory(p, ["g0"]) == pytest.approx(8 * GB, rel=1e-5)


def test_where_every_task_fits_the_devices_hold_their_whole_memory():
    tasks = [Task(name, {"gpu": 1.0, "cpu": 9.0}, memory_bytes=3 * GB) for name in "abc"]
    p = Problem(TaskGraph.create(tasks, []), _gpus_and_a_cpu(10, 10), Objective("latency"))
    assert packable_memory(p, ["g0", "g1"]) >= 20 * GB


@pytest.mark.parametrize("seed", range(20))
def test_it_is_never_below_what_a_placement_holds_and_is_that_where_memory_binds(seed):
    rng = random.Random(seed)
    sizes = [rng.choice([1, 2, 3, 5, 7, 8]) * GB for _ in range(rng.randint(2, 7))]
    tasks = [Task(f"t{i}", {"gpu": 1.0, "cpu": 5.0}, memory_bytes=s) for i, s in enumerate(sizes)]
    capacities = [rng.choice([4, 6, 9, 10, 16]) for _ in range(rng.randint(1, 3))]
    p = Problem(TaskGraph.create(tasks, []), _gpus_and_a_cpu(*capacities), Objective("latency"))
    devices = [f"g{i}" for i in range(len(capacities))]
    held = _most_held(p, devices)
    value = packable_memory(p, devices)
    assert value >= held
    placeable = sum(s for s in sizes if s <= max(capacities) * GB)
    if held < placeable:  # memory binds: the knapsack is exact on a problem this small
        assert value == pytest.approx(held, rel=1e-5)


def test_the_memory_path_bound_sends_the_task_no_gpu_has_room_for_to_the_cpu():
    # a chain of three 6 GB tasks, 1 s on a gpu and 9 s on the cpu: two 10 GB gpus pool 20 GB, but whole tasks
    # fill 12 GB of them, so one task runs on the cpu: 1 + 1 + 9 = 11 s (the pooled 20 GB said 3 s)
    tasks = [Task(name, {"gpu": 1.0, "cpu": 9.0}, memory_bytes=6 * GB) for name in "abc"]
    p = Problem(TaskGraph.create(tasks, [("a", "b"), ("b", "c")]), _gpus_and_a_cpu(10, 10), Objective("latency"))
    best = diviml.solve(p, "exact", time_limit=10)
    assert best.status == "optimal" and best.objective == pytest.approx(11.0, rel=1e-3)
    assert memory_path_bound(p) == pytest.approx(11.0, rel=1e-5)
    assert memory_segments_bound(p) <= best.objective * (1 + 1e-9)
    assert best.bound == pytest.approx(best.objective, rel=1e-5)


def test_the_work_lp_holds_each_gpu_to_the_tasks_it_can_fill():
    tasks = [Task(f"t{i}", {"gpu": 1.0, "cpu": 2.0}, memory_bytes=5 * GB) for i in range(10)]
    p = Problem(TaskGraph.create(tasks, []), _gpus_and_a_cpu(16, 16), Objective("pipeline"))
    assert work_bound(p) == pytest.approx(8.0, rel=1e-5)  # 3 + 3 on the gpus, 4 x 2 s on the cpu


def test_without_time_it_says_the_summed_memory_and_does_not_keep_that_for_a_later_call():
    tasks = [Task(name, {"gpu": 1.0, "cpu": 9.0}, memory_bytes=6 * GB) for name in "abc"]
    p = Problem(TaskGraph.create(tasks, []), _gpus_and_a_cpu(10, 10), Objective("latency"))
    assert packable_memory(p, ["g0", "g1"], time_limit=0.0) >= 20 * GB
    assert packable_memory(p, ["g0", "g1"]) == pytest.approx(12 * GB, rel=1e-5)
