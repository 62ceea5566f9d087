"""The chain program: a topological order cut into runs, one per device, the servers' order searched."""

import random
from itertools import permutations, product

import pytest
from conftest import two_servers

import diviml
from diviml import Device, Link, Objective, Platform, Problem, Task, TaskGraph
from diviml.generators import layered_dag
from diviml.simulate import pipeline_loads
from diviml.solvers.engines.plans import Stopwatch
from diviml.solvers.pipeline.chain import split_chain
from diviml.solvers.pipeline.layers import split_layers
from diviml.validate import contiguity_violations, validate

GB = 1e9


def _layers(count: int) -> TaskGraph:
    """``count`` layers of two 4 GB tasks in a chain, 1 s each on a GPU and 4 s on the CPU."""
    ids = [f"l{k}_{half}" for k in range(count) for half in (0, 1)]
    tasks = [Task(t, {"gpu": 1.0, "cpu": 4.0}, memory_bytes=4 * GB, module=f"blocks.{t[1:].split('_')[0]}.op")
             for t in ids]
    return TaskGraph.create(tasks, list(zip(ids, ids[1:])))


def _gpus_and_a_cpu(gpu_memory: float) -> Platform:
    link = Link(16 * GB, 0.0)
    return Platform((Device("g0", "gpu", gpu_memory, link=link), Device("g1", "gpu", gpu_memory, link=link),
                     Device("cpu", "cpu", 1e12, is_host=True)))


def test_it_cuts_inside_a_layer_where_whole_layers_leave_memory_idle():
    # six layers of 8 GB on two 12 GB GPUs and a roomy CPU four times slower: whole layers give each GPU one
    # layer (2 s) and the CPU four (32 s); cut between tasks, each GPU holds three tasks and the CPU six (24 s)
    problem = Problem(_layers(6), _gpus_and_a_cpu(12 * GB), Objective("pipeline"))
    chain = split_chain(problem, Stopwatch(10))
    assert chain.objective == pytest.approx(24.0, rel=1e-3)
    assert split_layers(problem, Stopwatch(10)).objective == pytest.approx(32.0)
    assert validate(chain, problem).ok
    assert diviml.solve(problem, "ip", time_limit=10).objective <= chain.objective


def _best_contiguous_chain(problem: Problem) -> float:
    """Every split of the chain into consecutive runs over every order of the devices."""
    order, names = problem.graph.topological_order, [d.name for d in problem.platform.devices]
    best = float("inf")
    for devices in permutations(names):
        for cuts in product(range(len(order) + 1), repeat=len(names) - 1):
            if list(cuts) != sorted(cuts):
                continue
            bounds = [0, *cuts, len(order)]
            placement = {order[k]: devices[r] for r in range(len(names)) for k in range(bounds[r], bounds[r + 1])}
            if any(d not in problem.allowed_devices[t] for t, d in placement.items()):
                continue
            held = {n: sum(problem.graph.by_id[t].memory_bytes for t, d in placement.items() if d == n) for n in names}
            if all(held[n] <= problem.platform.by_name[n].memory_bytes for n in names):
                best = min(best, pipeline_loads(problem, placement).objective)
    return best


@pytest.mark.parametrize("seed", range(8))
def test_on_one_server_without_transfers_it_finds_the_best_split_of_a_chain(seed):
    # odd seeds bar some tasks from the GPUs: a run stops before a task its device may not run
    rng = random.Random(seed)
    ids = [f"t{i}" for i in range(rng.randint(5, 8))]
    tasks = [Task(t, {"gpu": rng.uniform(0.5, 2), "cpu": rng.uniform(2, 6)}, memory_bytes=rng.choice([0, 2, 4]) * GB,
                  allowed_types=frozenset({"cpu"}) if seed % 2 and rng.random() < 0.3 else None)
             for t in ids]
    platform = _gpus_and_a_cpu(rng.choice([6, 8, 40]) * GB)
    problem = Problem(TaskGraph.create(tasks, list(zip(ids, ids[1:]))), platform, Objective("pipeline"))
    plan = split_chain(problem, Stopwatch(10))
    assert plan.objective == pytest.approx(_best_contiguous_chain(problem), rel=2e-4)


@pytest.mark.parametrize("seed", range(4))
def test_over_two_servers_its_plan_is_valid_contiguous_and_charged_as_the_simulator_charges(seed):
    problem = Problem(layered_dag(40, seed=seed, device_types=("cpu", "a100")), two_servers(),
                      Objective("pipeline", contiguous=True))
    plan = split_chain(problem, Stopwatch(10))
    placement = {a.task: a.device for a in plan.assignments}
    assert validate(plan, problem).ok and not contiguity_violations(problem, placement)
    assert plan.objective == pytest.approx(pipeline_loads(problem, placement).objective)


def test_it_leaves_latency_training_and_colocated_tasks_to_the_others():
    graph = _layers(2)
    assert split_chain(Problem(graph, _gpus_and_a_cpu(40 * GB), Objective("latency")), Stopwatch(1)) is None
    tied = TaskGraph.create([Task(t.id, dict(t.time), colocation="pair" if t.id.startswith("l0") else None)
                             for t in graph.tasks], graph.edges)
    assert split_chain(Problem(tied, _gpus_and_a_cpu(40 * GB), Objective("pipeline")), Stopwatch(1)) is None
    training = TaskGraph.create([Task("f", {"gpu": 1.0, "cpu": 2.0}), Task("b", {"gpu": 1.0, "cpu": 2.0}, phase="backward")],
                                [("f", "b")])
    assert split_chain(Problem(training, _gpus_and_a_cpu(40 * GB), Objective("pipeline")), Stopwatch(1)) is None
