"""The parts polish of batch plans: never worse, always valid, joins parts a launch-bound device runs twice,
keeps memory and its time, and gives the same plan for the same seed."""

import math
import time

import pytest

import diviml
from diviml import Device, Link, Objective, Platform, Problem, Task, TaskGraph
from diviml.generators import layered_dag, random_dag
from diviml.solvers.baselines import parts_polish
from diviml.solvers.engines.plans import Stopwatch, make_plan
from diviml.validate import validate


def _launch_bound_chain(n_tasks: int = 6, batch: int = 8, gpu_memory: float = math.inf) -> Problem:
    """A chain of tasks that a GPU runs in about the same time at any part size (a launch), and a CPU in time
    proportional to the samples."""
    gpu_table = {b: 1.0 + 0.02 * b for b in range(1, batch + 1)}
    cpu_table = {b: 2.0 * b for b in range(1, batch + 1)}
    tasks = [Task(f"t{i}", {"gpu": gpu_table[1], "cpu": cpu_table[1]}, output_bytes=1.0, memory_bytes=1.0,
                  time_by_batch={"gpu": gpu_table, "cpu": cpu_table}) for i in range(n_tasks)]
    edges = [(f"t{i}", f"t{i + 1}") for i in range(n_tasks - 1)]
    platform = Platform((Device("cpu", "cpu", math.inf, "s", True),
                         Device("gpu", "gpu", gpu_memory, "s", False, Link(10.0, 0.01))), "small")
    return Problem(TaskGraph.create(tasks, edges), platform, Objective("batch", batch_size=batch))


def _plan(problem: Problem, parts) -> diviml.Plan:
    return make_plan(problem, parts, solver="test", status="feasible", watch=Stopwatch(10.0))


def test_parts_a_launch_bound_device_runs_twice_become_one():
    problem = _launch_bound_chain()
    halves = _plan(problem, {t: [("gpu", 4), ("gpu", 4)] for t in problem.graph.topological_order})
    out = parts_polish.improve(problem, halves, Stopwatch(30.0), seconds=5.0)
    assert validate(out, problem).ok
    assert out.objective < halves.objective * 0.9  # 12 launches of about 1.08 -> 6 of about 1.16
    assert sum(len(p) for p in out.parts.values()) < sum(len(p) for p in halves.parts.values())
    assert any(note.startswith("parts polished") for note in out.notes)


@pytest.mark.parametrize("seed", range(4))
def test_never_worse_and_always_valid_from_heft_and_from_an_exact_split(seed):
    problem = Problem(random_dag(14, seed=seed, ccr=(0.3, 1.0)), diviml.preset("paper-server"),
                      Objective("batch", batch_size=4 + seed))
    for start in (diviml.solve(problem, "heft", time_limit=10),
                  diviml.solve(problem, "data-parallel", time_limit=10)):
        out = parts_polish.improve(problem, start, Stopwatch(30.0), seconds=1.0)
        assert validate(out, problem).ok
        assert out.objective <= start.objective * (1 + 1e-12)


def test_never_worse_and_always_valid_over_servers_whose_devices_a_task_may_not_use():
    # six-servers has H100s, on which a random DAG's tasks have no time: they may not run there
    problem = Problem(random_dag(20, seed=5, ccr=(0.3, 1.0)), diviml.preset("six-servers"),
                      Objective("batch", batch_size=6))
    start = diviml.solve(problem, "heft", time_limit=10)
    out = parts_polish.improve(problem, start, Stopwatch(30.0), seconds=1.0)
    assert validate(out, problem).ok
    assert out.objective <= start.objective * (1 + 1e-12)


def test_kicks_start_from_the_plan_where_no_single_change_helps():
    # no change of one task shortens HEFT's plan of this DAG (the descents find nothing); kicks of a few at once do
    problem = Problem(layered_dag(30, seed=0), diviml.preset("paper-server"), Objective("batch", batch_size=8))
    start = diviml.solve(problem, "heft", time_limit=10)
    out = parts_polish.improve(problem, start, Stopwatch(30.0), seconds=0.2)
    assert validate(out, problem).ok
    assert out.objective < start.objective * 0.97


def test_a_better_start_among_the_others_is_searched_from_too():
    # data parallelism's plan of this DAG is better than HEFT's polished alone, and is polished further
    problem = Problem(layered_dag(30, seed=0), diviml.preset("paper-server"), Objective("batch", batch_size=8))
    start = diviml.solve(problem, "heft", time_limit=10)
    other = diviml.solve(problem, "data-parallel", time_limit=10)
    out = parts_polish.improve(problem, start, Stopwatch(30.0), seconds=0.2, others=(other, None))
    assert validate(out, problem).ok
    assert out.objective < other.objective < start.objective


def test_memory_holds_in_every_change():
    # the GPU holds three of the six tasks: whole tasks cannot all move there however much faster it is
    problem = _launch_bound_chain(gpu_memory=3.0)
    start = _plan(problem, {t: [("cpu", 8)] for t in problem.graph.topological_order})
    out = parts_polish.improve(problem, start, Stopwatch(30.0), seconds=5.0)
    assert validate(out, problem).ok and out.objective < start.objective
    assert sum(any(d == "gpu" for d, _ in p) for p in out.parts.values()) <= 3


def test_the_same_seed_gives_the_same_plan():
    problem = Problem(layered_dag(30, seed=3), diviml.preset("paper-server"), Objective("batch", batch_size=8))
    start = diviml.solve(problem, "heft", time_limit=10)
    a, b = (parts_polish.improve(problem, start, Stopwatch(60.0), seed=1, seconds=0.5) for _ in range(2))
    assert a.assignments == b.assignments and a.objective == b.objective


def test_no_time_or_another_objective_leaves_the_plan_as_it_is():
    problem = _launch_bound_chain()
    halves = _plan(problem, {t: [("gpu", 4), ("gpu", 4)] for t in problem.graph.topological_order})
    assert parts_polish.improve(problem, halves, Stopwatch(0.0)) is halves
    latency = Problem(problem.graph, problem.platform, Objective("latency"))
    plan = diviml.solve(latency, "heft", time_limit=10)
    assert parts_polish.improve(latency, plan, Stopwatch(10.0)) is plan


def test_its_time_holds_on_a_large_graph():
    problem = Problem(layered_dag(400, seed=1), diviml.preset("paper-server"), Objective("batch", batch_size=8))
    start = diviml.solve(problem, "heft", time_limit=30)
    began = time.perf_counter()
    out = parts_polish.improve(problem, start, Stopwatch(1.0))
    assert time.perf_counter() - began < 1.0 + 2.5  # its limit, and the plan made (simulated, validated) after it
    assert validate(out, problem).ok and out.objective <= start.objective
