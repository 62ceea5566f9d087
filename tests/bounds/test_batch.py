"""The batch path-work bound: at most the true optimum of the batch objective (every cut of every task into
parts on devices, every device order), and stronger than the simple bounds where a GPU's batch table is flat."""

import math
import random
from dataclasses import replace
from itertools import permutations, product

import pytest
from conftest import graph

import diviml
from diviml import Device, Link, Objective, Platform, Problem, Task, TaskGraph
from diviml.bounds import batch_path_work_bound, critical_path_bound, energetic_bound, lower_bound, work_bound
from diviml.errors import ValidationError
from diviml.generators import layered_dag
from diviml.simulate import schedule


def _cuts(problem: Problem, task: str):
    """Every way to cut ``task``'s batch into consecutive parts, each on an allowed device."""
    def compositions(n):
        if n == 0:
            yield ()
        for b in range(1, n + 1):
            for rest in compositions(n - b):
                yield (b,) + rest
    for sizes in compositions(problem.batch_size):
        for devices in product(problem.allowed_devices[task], repeat=len(sizes)):
            yield list(zip(devices, sizes))


def brute_force_optimum(problem: Problem) -> float:
    """The least makespan over every cut of every task and every order of each device's parts."""
    tasks = problem.graph.topological_order
    names = [d.name for d in problem.platform.devices]
    best = math.inf
    for combo in product(*(list(_cuts(problem, t)) for t in tasks)):
        parts = dict(zip(tasks, combo))
        held = {d: sum(problem.graph.by_id[t].memory_bytes for t in tasks if any(p == d for p, _ in parts[t]))
                for d in names}
        if any(held[d.name] > d.memory_bytes for d in problem.platform.devices):
            continue
        per_device = [[(t, k) for t in tasks for k, (d, _) in enumerate(parts[t]) if d == name] for name in names]
        for orders in product(*(permutations(seq) for seq in per_device)):
            try:
                makespan = schedule(problem, parts, dict(zip(names, map(list, orders)))).makespan
            except ValidationError:  # an order against the dependencies
                continue
            best = min(best, makespan)
    return best


def _gpu_like(rng: random.Random, batch: int) -> dict[int, float]:
    """A batch table that starts flat (launch-bound) and then grows: f(b) = max(launch, b * per_sample)."""
    launch, per_sample = rng.uniform(1, 3), rng.uniform(0.2, 1.5)
    return {b: max(launch, b * per_sample) for b in range(1, batch + 1)}


def random_batch_problem(seed: int) -> Problem:
    """A CPU-like device and one or two GPU-like ones; 2 tasks and a batch of 1-3, or 3 tasks and a batch of
    1-2 (what exhaustive search can afford); random edges, transfers and, sometimes, a GPU short of memory."""
    rng = random.Random(seed)
    ids = [f"t{i}" for i in range(rng.randint(2, 3))]
    batch = rng.randint(1, 3 if len(ids) == 2 else 2)
    gpus = ["y", "z"][:rng.randint(1, 2)]
    tasks = []
    for t in ids:
        cpu = rng.uniform(0.5, 3)
        tables = {"x": {b: cpu * b for b in range(1, batch + 1)}, **{k: _gpu_like(rng, batch) for k in gpus}}
        tasks.append(Task(t, {k: table[1] for k, table in tables.items()}, output_bytes=rng.choice([0.0, 0.5, 2.0]),
                          time_by_batch=tables, memory_bytes=rng.choice([0.0, 1.0, 2.0])))
    edges = [(a, b) for i, a in enumerate(ids) for b in ids[i + 1:] if rng.random() < 0.7]
    link = Link(1.0, rng.choice([0.0, 0.2]))
    devices = [Device("cpu", "x", math.inf, "s", True)]
    devices += [Device(f"gpu-{k}", k, rng.choice([math.inf, 2.0]), "s", False, link) for k in gpus]
    return Problem(TaskGraph.create(tasks, edges), Platform(tuple(devices), "small"),
                   Objective("batch", batch_size=batch))


@pytest.mark.parametrize("seed", range(24))
def test_the_batch_bound_never_exceeds_the_brute_force_optimum(seed):
    problem = random_batch_problem(seed)
    best = brute_force_optimum(problem)
    assert batch_path_work_bound(problem) <= best * (1 + 1e-9)
    assert lower_bound(problem) <= best * (1 + 1e-9)


@pytest.mark.parametrize("seed", range(4))
def test_the_batch_bound_is_at_most_every_plan_on_ten_task_graphs(seed):
    problem = Problem(layered_dag(10, seed=seed), diviml.preset("paper-server"), Objective("batch", batch_size=4))
    best = min(diviml.solve(problem, solver, time_limit=10).objective for solver in ("heft", "exact", "best-device"))
    assert 0 < batch_path_work_bound(problem) <= best


def test_the_batch_bound_sees_that_small_parts_shorten_the_path_but_add_work():
    # two chained tasks on two identical GPUs whose part of b samples takes 1 + b/4 s, a batch of 4: the
    # simple bounds take the path at parts of one sample (2 x 1.25 s) and the work at the rate of parts of
    # four (8 x 0.5 s over two devices); no plan has both. Halves on each GPU (3 s) are optimal, and the
    # batch bound proves it
    table = {b: 1 + b / 4 for b in range(1, 5)}
    g = graph({t: ({"y": 1.25}, 0.0) for t in "ab"}, [("a", "b")], **{t: {"time_by_batch": {"y": table}} for t in "ab"})
    platform = Platform((Device("g1", "y", math.inf, "s", True), Device("g2", "y", math.inf, "s", False, Link(1e12))))
    p = Problem(g, platform, Objective("batch", batch_size=4))
    assert critical_path_bound(p) == pytest.approx(2.5) and work_bound(p) == pytest.approx(2.0, rel=1e-5)
    assert batch_path_work_bound(p) == pytest.approx(3.0, rel=1e-5)
    plan = diviml.solve(p, "exact", time_limit=10)
    assert plan.objective == pytest.approx(3.0) and plan.status == "optimal"
    assert plan.bound_source == "batch path-work LP" or plan.bound == pytest.approx(3.0, rel=1e-5)


def test_the_batch_lp_is_not_tried_when_its_measured_cost_exceeds_its_share():
    from diviml.bounds._batch import batch_path_work_seconds
    p = Problem(layered_dag(60, seed=2), diviml.preset("paper-server"), Objective("batch", batch_size=8))
    needs = batch_path_work_seconds(p)
    assert batch_path_work_bound(p, time_limit=needs / 2) == 0.0  # dropped without being tried
    assert batch_path_work_bound(p, time_limit=needs * 1000 + 5) > critical_path_bound(p)
    # a model of 5,000 tasks on 9 devices (GPT-3's prefill over h100-nvlink-8) would outlast a minute's solve
    big = Problem(layered_dag(5000, seed=0), diviml.preset("h100-nvlink-8"), Objective("batch", batch_size=8))
    assert batch_path_work_seconds(big) > 60


def test_one_requests_latency_bounds_a_batch_where_memory_spreads_the_model():
    from diviml.bounds._batch import one_request_bounds
    lifted = 0
    for seed in range(40):  # those of the small problems where a GPU is short of memory
        problem = random_batch_problem(seed)
        path, segments = one_request_bounds(problem)
        if max(path, segments) > 0:
            assert max(path, segments) <= brute_force_optimum(problem) * (1 + 1e-9)
            lifted += max(path, segments) > batch_path_work_bound(problem)
    assert lifted >= 1
    # not where a larger part is faster per task than one sample (the sample's path could not be priced at 1)
    gpus = Platform((Device("g0", "fast", 1.0, link=Link(1.0, 0.0)), Device("g1", "slow", 1.0, link=Link(1.0, 0.0))))

    def two_layers(at_two: float) -> Problem:  # each device holds one of the two tasks: one runs on the slow one
        tasks = [Task(t, {"fast": 2.0, "slow": 4.0}, time_by_batch={"fast": {1: 2.0, 2: at_two},
                                                                    "slow": {1: 4.0, 2: 2 * at_two}},
                      memory_bytes=1.0) for t in "ab"]
        return Problem(TaskGraph.create(tasks, [("a", "b")]), gpus, Objective("batch", batch_size=2))
    assert max(one_request_bounds(two_layers(3.0))) > 0 and one_request_bounds(two_layers(1.0)) == (0, 0)


class _PricedAtEverySize(Problem):
    """The same problem with every part size priced one by one, as the bounds are defined."""

    def pricing_sizes(self, task_id, device, lo=1, hi=None):
        return tuple(range(lo, (self.batch_size if hi is None else hi) + 1))


@pytest.mark.parametrize("seed", range(6))
def test_batch_bounds_at_a_few_part_sizes_equal_those_at_every_size(seed):
    """A batch of 40 (part sizes 17-32 and 33-40 priced as ranges) whose tables have a few sizes each:
    pricing the sizes where a table bends gives every bound that pricing all 40 sizes gives."""
    rng = random.Random(seed)
    dag = layered_dag(8, seed=seed)
    tasks = []
    for t in dag.tasks:
        tables = {k: {b: v * rng.uniform(0.6, 1.0) * max(1.0, b / rng.choice([4, 8, 16]))
                      for b in rng.sample([2, 4, 8, 16, 24, 32, 64], 3)} for k, v in t.time.items()}
        tasks.append(replace(t, time_by_batch=tables))
    problem = Problem(TaskGraph.create(tasks, dag.edges), diviml.preset("paper-server"),
                      Objective("batch", batch_size=40))
    every = _PricedAtEverySize(problem.graph, problem.platform, problem.objective)
    for bound in (critical_path_bound, work_bound, batch_path_work_bound, energetic_bound):
        assert bound(problem) == pytest.approx(bound(every), rel=1e-9), bound.__name__
