"""Job graphs: re-timing a placement and device order as early as possible; the batch splits searched."""

import itertools
import random
from dataclasses import replace

import pytest
from conftest import graph, two_device_platform

import diviml
from diviml import Objective, Problem, Task, TaskGraph
from diviml.generators import layered_dag
from diviml.solvers.engines.jobs import JobGraph, balanced_shares, batch_splits, serial_time


def problem():
    # a -> c, b -> c; a and b take 2 on P1 (type x) and 3 on P2 (type y); c takes 1; outputs cost 4 to send
    spec = {t: ({"x": 2.0, "y": 3.0}, 4.0) for t in "ab"} | {"c": ({"x": 1.0, "y": 1.0}, 0.0)}
    return Problem(graph(spec, [("a", "c"), ("b", "c")]), two_device_platform())


def test_retime_runs_each_device_in_the_given_order_after_its_producers_outputs_arrive():
    jobs = JobGraph.whole(problem())
    device_of = {("a", 0): "P1", ("b", 0): "P2", ("c", 0): "P1"}
    start, finish = jobs.retime(device_of, {("a", 0): 0.0, ("b", 0): 0.0, ("c", 0): 5.0})
    assert start == {("a", 0): 0.0, ("b", 0): 0.0, ("c", 0): pytest.approx(3.0 + 4.0)}  # b's output sent to P1
    assert finish[("c", 0)] == pytest.approx(8.0)


def test_retime_follows_the_order_key_on_a_device_and_breaks_ties_by_topological_position():
    jobs = JobGraph.whole(problem())
    on_p1 = {("a", 0): "P1", ("b", 0): "P1", ("c", 0): "P1"}
    start, _ = jobs.retime(on_p1, {("a", 0): 7.0, ("b", 0): 1.0, ("c", 0): 9.0})
    assert (start[("b", 0)], start[("a", 0)], start[("c", 0)]) == (0.0, 2.0, 4.0)
    start, _ = jobs.retime(on_p1, {("a", 0): 0.0, ("b", 0): 0.0, ("c", 0): 0.0})
    assert (start[("a", 0)], start[("b", 0)]) == (0.0, 2.0)


def test_retime_runs_a_job_that_takes_no_time_before_one_that_starts_with_it():
    # a -> b, a -> v (v takes no time, its output feeds c on P2): all three start at 2 on P1 in the solver's
    # schedule; b first (its topological place) would hold v, and c, until b ends
    spec = {"a": ({"x": 2.0, "y": 2.0}, 0.0), "b": ({"x": 5.0, "y": 5.0}, 0.0), "v": ({"x": 0.0, "y": 0.0}, 0.0),
            "c": ({"x": 1.0, "y": 1.0}, 0.0)}
    jobs = JobGraph.whole(Problem(graph(spec, [("a", "b"), ("a", "v"), ("v", "c")]), two_device_platform()))
    device_of = {("a", 0): "P1", ("b", 0): "P1", ("v", 0): "P1", ("c", 0): "P2"}
    start, finish = jobs.retime(device_of, {("a", 0): 0.0, ("b", 0): 2.0, ("v", 0): 2.0, ("c", 0): 2.0})
    assert (start[("v", 0)], start[("b", 0)], start[("c", 0)]) == (2.0, 2.0, 2.0)
    assert max(finish.values()) == 7.0


def test_retime_starts_a_sub_problem_job_no_earlier_than_its_release_on_its_device():
    jobs = JobGraph(problem(), (1,), ("a",), release={(("a", 0), "P1"): 5.0})
    start, finish = jobs.retime({("a", 0): "P1"}, {("a", 0): 0.0})
    assert (start[("a", 0)], finish[("a", 0)]) == (5.0, 7.0)
    start, _ = jobs.retime({("a", 0): "P2"}, {("a", 0): 0.0})
    assert start[("a", 0)] == 0.0


def test_an_order_key_never_puts_a_job_before_its_producer():
    # a solver's start times may put c a rounding error before a producer that takes no time (the MILP's
    # tolerance): the device order taken from them still runs a before c, else the simulator finds a deadlock
    jobs = JobGraph.whole(problem())
    key = {("a", 0): 1.0, ("b", 0): 0.0, ("c", 0): 1.0 - 1e-9}
    assert jobs.by_key(key) == [("b", 0), ("a", 0), ("c", 0)]
    on_p1 = {j: "P1" for j in jobs.jobs}
    assert jobs.order(on_p1, key)["P1"] == [("b", 0), ("a", 0), ("c", 0)]
    start, _ = jobs.retime(on_p1, key)
    assert start[("c", 0)] == pytest.approx(4.0)


def _tabled(n: int, seed: int):
    """A layered DAG on paper-server whose tasks have batch tables at a few sizes (launch-bound or not)."""
    rng = random.Random(seed)
    dag = layered_dag(12, seed=seed)
    tasks = [replace(t, time_by_batch={k: {b: v * max(1.0, b / rng.choice([1, 4, 16])) for b in rng.sample([2, 4, 8, 32], 2)}
                                       for k, v in t.time.items()}) for t in dag.tasks]
    return Problem(TaskGraph.create(tasks, dag.edges), diviml.preset("paper-server"), Objective("batch", batch_size=n))


@pytest.mark.parametrize("seed", range(4))
def test_a_devices_serial_time_is_the_sum_of_its_task_times_at_every_batch_size(seed):
    p = _tabled(40, seed)
    for device in ("a100", "v100", "cpu"):
        at = serial_time(p, device)
        for b in range(1, 41):
            assert at(b) == pytest.approx(sum(p.time(t, device, b) for t in p.graph.topological_order), rel=1e-12)


@pytest.mark.parametrize("seed", range(30))
def test_balanced_shares_give_the_least_largest_time_of_any_shares(seed):
    rng = random.Random(seed)
    count, n = rng.randint(2, 3), rng.randint(3, 12)
    steps = [[rng.choice([0.0, rng.uniform(0, 5)]) for _ in range(n)] for _ in range(count)]  # nondecreasing
    serial = [lambda b, s=s, launch=launch: launch + sum(s[:b]) for s, launch in zip(steps, (10, 13, 7))]
    shares = balanced_shares(serial, n)
    assert sum(shares) == n and min(shares) >= 1

    def largest(split):
        return max(f(b) for f, b in zip(serial, split))
    every = [s for s in itertools.product(range(1, n + 1), repeat=count) if sum(s) == n]
    assert largest(shares) == pytest.approx(min(map(largest, every)))


def test_launch_bound_gpus_share_a_batch_by_their_time_on_it_not_by_their_speed_at_the_whole_batch():
    """Kernels that cost nearly the same at any batch: the A100 takes more than its speed ratio (about 1.05,
    so 4/4) gives it, as many as keep it no slower than the V100 on the rest."""
    tasks = [Task(f"t{i}", {"cpu": 50.0, "v100": 10.5, "a100": 10.0},
                  time_by_batch={"cpu": {8: 400.0}, "v100": {8: 11.3}, "a100": {8: 10.8}}) for i in range(10)]
    p = Problem(TaskGraph.create(tasks, [(f"t{i}", f"t{i + 1}") for i in range(9)]), diviml.preset("paper-server"),
                Objective("batch", batch_size=8))
    a100, v100 = serial_time(p, "a100"), serial_time(p, "v100")
    best = min(range(1, 8), key=lambda a: max(a100(a), v100(8 - a)))
    assert (best, 8 - best) in batch_splits(p) and best >= 6
