"""The compiled timing of the parts polish is the simulator's: the same makespan and starts for any parts and any
device order (or the same refusal of an order that contradicts the graph), and list scheduling's order."""

import random

import numpy as np
import pytest

import diviml
from diviml import Objective, Problem
from diviml.errors import ValidationError
from diviml.generators import random_dag
from diviml.simulate import schedule
from diviml.solvers.baselines._parts_timing import PartsTiming, compiled_within


def _random_case(seed: int):
    """A random DAG on paper-server or two servers, a random batch, and random parts of every task."""
    rng = random.Random(seed)
    n = rng.randint(1, 8)
    platform = diviml.preset("paper-server" if seed % 2 else "six-servers")
    problem = Problem(random_dag(rng.randint(3, 16), seed=seed, ccr=(0.3, 1.0)), platform,
                      Objective("batch", batch_size=n))
    parts = {}
    for t in problem.graph.topological_order:
        left, ps = n, []
        while left:
            b = rng.randint(1, left)
            ps.append((rng.choice(problem.allowed_devices[t]), b))
            left -= b
        parts[t] = ps
    return rng, problem, parts


def _arrays(timing: PartsTiming, parts, n: int):
    count = np.zeros(len(timing.tasks), dtype=np.int64)
    device = np.zeros((len(timing.tasks), n), dtype=np.int64)
    size = np.zeros((len(timing.tasks), n), dtype=np.int64)
    for t, ps in parts.items():
        i = timing.index[t]
        count[i] = len(ps)
        for k, (d, b) in enumerate(ps):
            device[i, k], size[i, k] = timing.devices.index(d), b
        timing.need(i, device[i], size[i], len(ps))
    return count, device, size


@pytest.mark.parametrize("seed", range(40))
def test_any_order_times_as_the_simulator_times_it(seed):
    rng, problem, parts = _random_case(seed)
    timing = PartsTiming(problem)
    count, device, size = _arrays(timing, parts, problem.batch_size)
    key = np.array([[rng.random() for _ in range(problem.batch_size)] for _ in timing.tasks])
    order = {d: [] for d in timing.devices}
    ranked = sorted(((key[timing.index[t], k], timing.index[t], k, t) for t, ps in parts.items()
                     for k in range(len(ps))))
    for _, _, k, t in ranked:
        order[parts[t][k][0]].append((t, k))
    got = timing.run(count, device, size, key)
    try:
        expected = schedule(problem, parts, order)
    except ValidationError:  # the order contradicts the graph: refused by both
        assert got == -1.0
        return
    assert got == pytest.approx(expected.makespan, rel=1e-12)
    for job in expected.jobs:
        k = [i for i, off in enumerate(np.cumsum([0] + [b for _, b in parts[job.task]])) if off == job.offset][0]
        assert timing.starts[timing.index[job.task], k] == pytest.approx(job.start, rel=1e-12, abs=1e-15)


@pytest.mark.parametrize("seed", range(20))
def test_list_keys_order_each_device_as_list_scheduling_does(seed):
    _, problem, parts = _random_case(seed)
    timing = PartsTiming(problem)
    count, device, size = _arrays(timing, parts, problem.batch_size)
    got = timing.run(count, device, size, timing.list_keys(count, device, size))
    assert got == pytest.approx(schedule(problem, parts, None).makespan, rel=1e-12)


def test_the_kernels_are_ready_once_compiled():
    assert compiled_within(120.0)
