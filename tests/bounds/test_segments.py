"""The memory segments bound: at most the proven optimum, and above the memory path LP where whole tasks and
transfers between kinds of device decide the latency."""

import math
import random

import pytest
from conftest import graph

import diviml
from diviml import Device, Link, Objective, Platform, Problem, Task, TaskGraph
from diviml.bounds import critical_path_bound, lower_bound, memory_path_bound, memory_segments_bound
from diviml.generators import layered_dag


def _platform(fast_memory: float, bandwidth: float = 1e12, servers: int = 1) -> Platform:
    """A slow device of plenty of memory (type x) and a fast one of little (type y), and, with ``servers`` = 2,
    a second fast one on another server."""
    link = Link(bandwidth, 0.0)
    devices = [Device("slow", "x", 1e12, "s0", True), Device("fast", "y", fast_memory, "s0", False, link)]
    if servers == 2:
        devices.append(Device("far", "y", fast_memory, "s1", True, link))
    return Platform(tuple(devices), "test", network=Link(bandwidth, 0.0) if servers == 2 else None)


def test_a_branch_moved_to_the_slow_device_pays_its_transfers_there_and_back():
    # a -> view -> b -> d and a -> c -> d; b and c need 10 bytes each, the fast device holds 10, a transfer
    # takes 1 s. Fractional tasks with free transfers put half of b and of c on the slow device (1 + 2 + 1 = 4).
    # Whole tasks: both on the fast device (4, over its memory), or one or both on the slow one with a transfer
    # each way (1 + 1 + 3 + 1 + 1 = 7); half of the first and half of the others: 5.5. The best plan takes 7
    times = {"a": ({"x": 3, "y": 1}, 1.0), "view": ({"x": 0, "y": 0}, 1.0), "b": ({"x": 3, "y": 1}, 1.0),
             "c": ({"x": 3, "y": 1}, 1.0), "d": ({"x": 3, "y": 1}, 0.0)}
    g = graph(times, [("a", "view"), ("view", "b"), ("a", "c"), ("b", "d"), ("c", "d")],
              b={"memory_bytes": 10.0}, c={"memory_bytes": 10.0})
    p = Problem(g, _platform(10.0, bandwidth=1.0), Objective())
    assert memory_path_bound(p) == pytest.approx(4, rel=1e-5)
    assert memory_segments_bound(p) == pytest.approx(5.5, rel=1e-5)
    plan = diviml.solve(p, "exact", time_limit=10)
    assert plan.objective == pytest.approx(7) and plan.status == "optimal"


def test_a_layer_on_one_device_pays_its_work_there():
    # 12 layers of two parallel halves (10 bytes each) and a join, between series points; one fast device
    # holds 6 layers' halves, one slow device the rest. Fractional halves with free transfers: every layer half
    # on each device, 12 x 3 = 36. Whole tasks: a layer on the fast device takes 3 (its work there), one whose
    # halves run on the slow device at least 6 (their work there, or the path through a half and both
    # transfers); mixing the two at equal shares, 12 x 4.5 = 54. No plan found does better than 71
    spec, edges, extra = {"in": ({"x": 0.0, "y": 0.0}, 1.0)}, [], {}
    previous = "in"
    for i in range(12):
        for half in "pq":
            spec[f"{half}{i}"] = ({"x": 3, "y": 1}, 1.0)
            extra[f"{half}{i}"] = {"memory_bytes": 10.0}
            edges.append((previous, f"{half}{i}"))
        spec[f"s{i}"] = ({"x": 3, "y": 1}, 1.0)
        edges += [(f"p{i}", f"s{i}"), (f"q{i}", f"s{i}")]
        previous = f"s{i}"
    p = Problem(graph(spec, edges, **extra), _platform(120.0, bandwidth=1.0), Objective())
    assert memory_path_bound(p) == pytest.approx(36, rel=1e-5)
    assert memory_segments_bound(p) == pytest.approx(54, rel=1e-5)
    plan = diviml.solve(p, "heft", time_limit=20)
    assert plan.objective >= 49 and plan.bound_source == "memory segments"


def test_a_given_transfer_time_is_not_taken_for_a_small_tensors_cost():
    # a (fast device only) -> view -> b (slow device only); the view's output is half the size of a's but is
    # given a transfer time of 100 s, so the cheap move is a's output (1 s), with the view beside b:
    # 1 + 1 + 3 = 5 (a move priced by the smaller tensor alone would say 104)
    times = {"a": ({"x": 3, "y": 1}, 1.0), "view": ({"x": 0, "y": 0}, 0.5), "b": ({"x": 3, "y": 1}, 1.0)}
    g = graph(times, [("a", "view"), ("view", "b")], a={"memory_bytes": 10.0, "allowed_types": frozenset("y")},
              b={"memory_bytes": 10.0, "allowed_types": frozenset("x")}, view={"transfer_time": 100.0})
    p = Problem(g, _platform(10.0, bandwidth=1.0), Objective())
    plan = diviml.solve(p, "exact", time_limit=10)
    assert plan.objective == pytest.approx(5) and plan.status == "optimal"
    assert memory_segments_bound(p) == pytest.approx(5, rel=1e-5)


def test_it_says_nothing_where_memory_does_not_bind_or_the_objective_is_not_latency():
    g = graph({t: ({"x": 3, "y": 1}, 0.0) for t in "ab"}, [("a", "b")], a={"memory_bytes": 10.0})
    assert memory_segments_bound(Problem(g, _platform(100.0), Objective())) == 0.0
    assert memory_segments_bound(Problem(g, _platform(5.0), Objective("pipeline"))) == 0.0
    assert memory_segments_bound(Problem(g, _platform(5.0), Objective())) == pytest.approx(4, rel=1e-5)


def _random_problem(seed: int) -> Problem:
    """A layered DAG of 4-9 tasks, the slow device 2-5 times slower and roomy, the fast one (or two, on
    two servers) holding 20-60% of the weights, transfers costly or free."""
    rng = random.Random(seed)
    g = layered_dag(rng.randint(4, 9), seed=seed, device_types=("x", "y"))
    tasks = [Task(t.id, {"x": rng.uniform(2, 5) * t.time["y"], "y": t.time["y"]}, output_bytes=t.output_bytes,
                  memory_bytes=float(rng.choice([0, 1, 2, 4]))) for t in g.tasks]
    g = TaskGraph.create(tasks, g.edges)
    total = sum(t.memory_bytes for t in g.tasks)
    mean_time = sum(t.time["y"] for t in g.tasks) / len(g)
    mean_bytes = sum(t.output_bytes for t in g.tasks) / len(g) or 1.0
    bandwidth = rng.choice([math.inf, mean_bytes / mean_time, 4 * mean_bytes / mean_time])
    return Problem(g, _platform(max(4.0, total * rng.uniform(0.2, 0.6)), bandwidth if math.isfinite(bandwidth) else 1e15,
                                servers=rng.choice([1, 2])), Objective())


@pytest.mark.parametrize("seed", range(16))
def test_it_never_exceeds_the_proven_optimum(seed):
    p = _random_problem(seed)
    best = diviml.solve(p, "exact", time_limit=20)
    assert best.status == "optimal"
    assert memory_segments_bound(p) <= best.objective * (1 + 1e-9)
    assert lower_bound(p) <= best.objective * (1 + 1e-9)


def test_no_time_means_no_bound():
    g = graph({t: ({"x": 3, "y": 1}, 0.0) for t in "ab"}, [("a", "b")], a={"memory_bytes": 10.0})
    p = Problem(g, _platform(5.0), Objective())
    assert memory_segments_bound(p, time_limit=0.0) == 0.0
    assert memory_segments_bound(p) == pytest.approx(4, rel=1e-5) == critical_path_bound(p)
