"""The segment schedules bound: the segments between series points each scheduled alone, exactly, and summed.
At most the optimum (exact's proof, on random layered DAGs with and without binding memory, on one server and
on several), as large as the optimum where every segment's best schedule starts and ends on one device, above
the LP bounds where parallel branches must share a device, a floor it cannot lift makes it stand aside, and a
segment that fits no packing leaves the refusal to the problem's solver."""

import math
import random

import pytest
from test_segments import _random_problem, _random_servers_problem

import diviml
from diviml import Device, Link, Objective, Platform, Problem, Task, TaskGraph
from diviml.bounds import critical_path_bound, lower_bound, lower_bound_source, path_work_bound
from diviml.bounds import segment_schedules_bound as bound


def _two_gpus() -> Platform:
    """Two alike GPUs of one server and its host CPU (three times slower), PCIe links of 1 byte/s."""
    link = Link(1.0, 0.0)
    return Platform((Device("cpu", "cpu", math.inf, "s", True), Device("g0", "gpu", math.inf, "s", False, link),
                     Device("g1", "gpu", math.inf, "s", False, link)), "two gpus")


def _blocks(count: int, branches: int = 3) -> TaskGraph:
    """``count`` blocks in a chain, each a fork into ``branches`` equal branches of one task (time 1 on a
    GPU, 3 on the CPU, an output of 0.1 bytes) and a join (time 0.5); the fork of the first block is the
    source."""
    tasks, edges, tail = [Task("in", {"gpu": 0.5, "cpu": 1.5}, output_bytes=0.1)], [], "in"
    for b in range(count):
        join = f"join{b}"
        for k in range(branches):
            tasks.append(Task(f"b{b}_{k}", {"gpu": 1.0, "cpu": 3.0}, output_bytes=0.1))
            edges += [(tail, f"b{b}_{k}"), (f"b{b}_{k}", join)]
        tasks.append(Task(join, {"gpu": 0.5, "cpu": 1.5}, output_bytes=0.1))
        tail = join
    return TaskGraph.create(tasks, edges, name=f"{count} blocks")


def test_three_branches_on_two_gpus_take_two_turns_in_every_block():
    # each block: a branch on the other GPU (0.1 there and back), two in turn on the first, the join after
    p = Problem(_blocks(3), _two_gpus(), Objective())
    best = diviml.solve(p, "exact", time_limit=20, decompose=False)
    assert best.status == "optimal"
    value = bound(p, smallest=1)
    assert value == pytest.approx(best.objective, rel=1e-6)
    assert value == pytest.approx(0.5 + 3 * (2.0 + 0.5), rel=1e-6)
    assert value > path_work_bound(p) * 1.05  # the LP lets the three branches share two GPUs evenly


@pytest.mark.parametrize("seed", range(12))
def test_it_never_exceeds_the_proven_optimum(seed):
    p = _random_problem(seed)  # memory binding on the fast device or not, transfers costly or free
    best = diviml.solve(p, "exact", time_limit=20)
    assert best.status == "optimal"
    assert bound(p, smallest=1) <= best.objective * (1 + 1e-9)


@pytest.mark.parametrize("seed", range(8))
def test_on_several_servers_it_never_exceeds_the_proven_optimum(seed):
    p = _random_servers_problem(seed)
    best = diviml.solve(p, "exact", time_limit=30)
    assert best.status == "optimal"
    assert bound(p, smallest=1) <= best.objective * (1 + 1e-9)


def test_a_model_of_many_repeated_blocks_gets_it_from_lower_bound_and_the_plans_meet_it():
    p = Problem(_blocks(40), _two_gpus(), Objective())  # 161 tasks: past what exact takes whole
    assert len(p.graph) > 120
    assert lower_bound(p, 30) == pytest.approx(0.5 + 40 * 2.5, rel=1e-6)
    assert lower_bound_source(p) == "segment schedules"
    plan = diviml.solve(p, "split", time_limit=30)
    assert plan.bound_source == "segment schedules"
    assert plan.objective == pytest.approx(plan.bound, rel=1e-6)
    assert plan.status == "optimal"
    assert plan.stats["module_solves"] < 100  # proven by the bound: not walked again with more time (207 solves)


def test_no_time_means_no_bound_and_little_time_counts_critical_paths():
    p = Problem(_blocks(3), _two_gpus(), Objective())
    assert bound(p, time_limit=0.0, smallest=1) == 0.0
    assert critical_path_bound(p) <= bound(p, time_limit=1e-9, smallest=1) <= critical_path_bound(p) * (1 + 1e-9)


def test_it_stands_aside_where_it_cannot_lift_the_floor_or_does_not_apply():
    p = Problem(_blocks(3), _two_gpus(), Objective())
    one_gpu_each = 0.5 + 3 * (3.0 + 0.5)  # every segment on one GPU: what the bound can reach at most
    assert bound(p, floor=one_gpu_each, smallest=1) == 0.0
    assert bound(p) == 0.0  # 11 tasks: the exact solver's whole graph
    assert bound(Problem(_blocks(3), _two_gpus(), Objective("pipeline")), smallest=1) == 0.0
    rng = random.Random(0)
    wired = TaskGraph.create([Task(t, {"gpu": rng.uniform(1, 2), "cpu": 3.0}) for t in "abcd"],
                             [("a", "c"), ("b", "d"), ("a", "d")])  # two sources: no series point
    assert bound(Problem(wired, _two_gpus(), Objective()), smallest=1) == 0.0


def test_an_infeasible_problem_is_left_to_its_solver_to_refuse():
    # three branches of 6 bytes between a fork and a join, two devices of 10 bytes: no packing fits
    tasks = [Task(t, {"cpu": 1.0}, memory_bytes=6.0 if t in "abc" else 0.0) for t in "sabcj"]
    g = TaskGraph.create(tasks, [("s", t) for t in "abc"] + [(t, "j") for t in "abc"])
    two = Platform((Device("c0", "cpu", 10.0, "s", True), Device("c1", "cpu", 10.0, "s", True)), "two")
    p = Problem(g, two, Objective())
    assert bound(p, smallest=1) == pytest.approx(critical_path_bound(p))
    with pytest.raises(diviml.InfeasibleError):
        diviml.solve(p, "exact", time_limit=5)
