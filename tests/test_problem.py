"""A problem refuses, when it is built, what no plan can satisfy, saying which tasks and devices."""

import math

import pytest

from diviml import Device, InfeasibleError, InputError, Link, Objective, Platform, Problem, Task, TaskGraph


def _cpu_and_gpu(gpu_memory: float) -> Platform:
    return Platform((Device("cpu", "cpu", math.inf, "s", True),
                     Device("gpu", "gpu", gpu_memory, "s", False, Link(1e9, 0.0))))


def test_tasks_that_may_run_only_on_one_device_must_fit_its_memory_together():
    """Each fits the GPU alone and the graph fits the devices together, but the two GPU-only tasks do not
    (found by fuzzing: the exact solvers said only "no plan satisfies the memory constraints")."""
    gpu_only = frozenset({"gpu"})
    tasks = [Task("a", {"cpu": 1.0, "gpu": 1.0}, memory_bytes=75e6, allowed_types=gpu_only),
             Task("b", {"cpu": 1.0, "gpu": 1.0}, memory_bytes=62e6, allowed_types=gpu_only),
             Task("c", {"cpu": 1.0, "gpu": 1.0}, memory_bytes=90e6)]
    graph = TaskGraph.create(tasks, [("a", "b"), ("b", "c")])
    with pytest.raises(InfeasibleError, match=r"tasks 'a', 'b' \(2 in all\) may run only on gpu and need 1.37e\+08 "
                                              r"bytes, more than the 1e\+08 those devices hold"):
        Problem(graph, _cpu_and_gpu(100e6), Objective())
    assert Problem(graph, _cpu_and_gpu(137e6), Objective()).allowed_devices["c"] == ("cpu", "gpu")


@pytest.mark.parametrize("batch", [0, 4097, 10 ** 9])
def test_a_batch_objective_takes_1_to_4096_requests(batch):
    # a batch of a billion once ran exact far past its time limit (the bounds price every part size)
    with pytest.raises(InputError, match="batch size must be"):
        Objective("batch", batch)


def test_a_graph_whose_own_batch_is_too_large_for_the_batch_objective_is_refused():
    graph = TaskGraph.create([Task("a", {"cpu": 1.0})], [], batch_size=5000)
    with pytest.raises(InputError, match="at most 4096 requests"):
        Problem(graph, _cpu_and_gpu(1e9), Objective("batch"))
    assert Problem(graph, _cpu_and_gpu(1e9), Objective("batch", 4096)).batch_size == 4096
