"""A problem refuses, when it is built, what no plan can satisfy, saying which tasks and devices."""

import math
import random

import networkx as nx
import pytest

import diviml
from diviml import Device, InfeasibleError, InputError, Link, Objective, Platform, Problem, Task, TaskGraph
from diviml.bounds import lower_bound
from diviml.problem import whole_tasks
from diviml.simulate import list_order, parts_from_placement, schedule
from diviml.validate import placement_violations


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


def _random_batch_problem(seed: int) -> Problem:
    """A random DAG of 3-8 tasks with batch tables, its own batch 1 or 2, on paper-server or two NVLinked H100s
    over a host, for a batch of 2-6 requests."""
    rng = random.Random(seed)
    platform = diviml.preset(rng.choice(["paper-server", "h100-nvlink-8"]))
    types = sorted({d.type for d in platform.devices})
    base, n = rng.choice([1, 2]), rng.randint(2, 6)
    tasks = []
    for i in range(rng.randint(3, 8)):
        times = {k: rng.uniform(1e-4, 5e-3) * (5 if k == "cpu" else 1) for k in types}
        tables = {k: {b: t * rng.uniform(0.6, 1.0) * b / base for b in rng.sample(range(1, 9), 2) if b != base}
                  for k, t in times.items()}
        tasks.append(Task(f"t{i}", times, time_by_batch=tables, memory_bytes=rng.choice([0.0, 3e10]),
                          output_bytes=rng.choice([0.0, rng.uniform(1e3, 5e7)])))
    edges = {(f"t{u}", f"t{v}") for v in range(1, len(tasks)) for u in rng.sample(range(v), min(v, 2))}
    return Problem(TaskGraph.create(tasks, sorted(edges), batch_size=base), platform, Objective("batch", n))


@pytest.mark.parametrize("seed", range(12))
def test_a_batch_plan_of_whole_tasks_is_a_plan_of_its_whole_task_problem_and_takes_as_long(seed):
    problem = _random_batch_problem(seed)
    whole = whole_tasks(problem)
    assert whole.objective.kind == "latency" and whole.allowed_devices == problem.allowed_devices
    rng = random.Random(seed)
    for _ in range(20):
        placement = {t.id: rng.choice(problem.allowed_devices[t.id]) for t in problem.graph.tasks}
        parts = parts_from_placement(problem, placement)
        # each device's tasks in one order for both (a random topological order, or the whole problem's list order)
        dag = nx.DiGraph(problem.graph.edges)
        dag.add_nodes_from(problem.graph.by_id)
        rank = {t: rng.random() for t in dag}
        topological = list(nx.lexicographical_topological_sort(dag, key=rank.__getitem__))
        for order in ({d.name: [(t, 0) for t in topological if placement[t] == d.name]
                       for d in problem.platform.devices}, list_order(whole, parts)):
            batch = schedule(problem, parts, order).makespan
            assert schedule(whole, parts_from_placement(whole, placement), order).makespan == pytest.approx(batch, rel=1e-12)
        assert placement_violations(whole, placement) == placement_violations(problem, placement)


def test_the_whole_task_optimum_is_a_batch_plan_so_at_least_the_batch_bound():
    problem = _random_batch_problem(5)
    best = diviml.solve(whole_tasks(problem), "exact", time_limit=10)
    assert best.status == "optimal" and lower_bound(problem) <= best.objective * (1 + 1e-9)
    # the same placement in the same order, run as a batch plan, holds memory and takes the whole-task optimum
    order = {d.name: best.device_order.get(d.name, []) for d in problem.platform.devices}
    assert not placement_violations(problem, best.placement)
    assert schedule(problem, parts_from_placement(problem, best.placement), order).makespan == pytest.approx(
        best.objective, rel=1e-9)


def test_only_a_batch_problem_has_a_whole_task_problem():
    problem = _random_batch_problem(0)
    with pytest.raises(InputError, match="takes a batch problem"):
        whole_tasks(Problem(problem.graph, problem.platform, Objective("latency")))
