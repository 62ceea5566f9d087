"""The hop work LP: a pipeline bound that charges a kind of device the hops of the tensors it takes in and
sends out, never above the optimum, above the work LP where a light task sits between heavy tensors."""

import random
from itertools import product

import pytest

from diviml import Device, Link, Objective, Platform, Problem, Task, TaskGraph
from diviml.bounds import hop_work_bound, work_bound
from diviml.simulate import pipeline_loads

GB = 1e9


def _optimum(p: Problem) -> float:
    names, ids = [d.name for d in p.platform.devices], [t.id for t in p.graph.tasks]
    best = float("inf")
    for combo in product(names, repeat=len(ids)):
        placement = dict(zip(ids, combo))
        if any(d not in p.allowed_devices[t] for t, d in placement.items()):
            continue
        held = {n: 0.0 for n in names}
        for t, d in placement.items():
            held[d] += p.graph.by_id[t].memory_bytes
        if all(held[d.name] <= d.memory_bytes for d in p.platform.devices):
            best = min(best, pipeline_loads(p, placement).objective)
    return best


def test_a_light_task_between_heavy_tensors_stays_with_its_neighbours():
    # a -> b -> c, a and c on the GPU only, b 1 s on the GPU or the CPU: the work LP sends b to the CPU
    # (T = 2), but its tensors in and out cost the GPU 3 s each way: b stays, T = 3
    gpu = frozenset({"gpu"})
    tasks = [Task("a", {"gpu": 1.0}, output_bytes=3.0, memory_bytes=10 * GB, allowed_types=gpu),
             Task("b", {"gpu": 1.0, "cpu": 1.0}, output_bytes=3.0),
             Task("c", {"gpu": 1.0}, memory_bytes=10 * GB, allowed_types=gpu)]
    platform = Platform((Device("gpu", "gpu", 20 * GB, link=Link(1.0, 0.0)), Device("cpu", "cpu", 1e12, is_host=True)))
    p = Problem(TaskGraph.create(tasks, [("a", "b"), ("b", "c")]), platform, Objective("pipeline"))
    assert work_bound(p) == pytest.approx(2.0, rel=1e-5)
    assert hop_work_bound(p) == pytest.approx(3.0, rel=1e-5) == _optimum(p)


def _random_problem(seed: int) -> Problem:
    """2-3 identical blocks in a chain (a weighted task, a view, a light task; joined at a series point), on a
    roomy host, a GPU that holds part of the weights and, half the time, a second server or a peer-linked GPU."""
    rng = random.Random(seed)
    heavy, light, size = rng.uniform(1, 3), rng.uniform(0.2, 1), rng.uniform(0.5, 3)
    tasks, edges, previous = [], [], None
    for i in range(rng.choice([2, 3])):
        block = [Task(f"w{i}", {"gpu": heavy, "cpu": 4 * heavy}, output_bytes=size, memory_bytes=4 * GB),
                 Task(f"v{i}", {"gpu": 0.0, "cpu": 0.0}, output_bytes=size * rng.choice([0.5, 1.0])),
                 Task(f"l{i}", {"gpu": light, "cpu": 2 * light}, output_bytes=size)]
        edges += [(f"w{i}", f"v{i}"), (f"v{i}", f"l{i}")] + ([(previous, f"w{i}")] if previous else [])
        tasks += block
        previous = f"l{i}"
    link = Link(rng.choice([1.0, 4.0]), 0.0)
    devices = [Device("cpu", "cpu", 1e12, "s0", is_host=True), Device("g0", "gpu", 8 * GB, "s0", link=link)]
    extra = rng.choice(["none", "server", "peer"])
    peers = {}
    if extra == "server":
        devices.append(Device("far", "cpu", 1e12, "s1", is_host=True))
    elif extra == "peer":
        devices.append(Device("g1", "gpu", 8 * GB, "s0", link=link))
        peers = {frozenset(("g0", "g1")): Link(8.0, 0.0)}
    platform = Platform(tuple(devices), peer_links=peers, network=Link(2.0, 0.0) if extra == "server" else None)
    return Problem(TaskGraph.create(tasks, edges), platform, Objective("pipeline"))


@pytest.mark.parametrize("seed", range(16))
def test_it_never_exceeds_the_brute_force_optimum(seed):
    p = _random_problem(seed)
    assert hop_work_bound(p) <= _optimum(p) * (1 + 1e-9)


def test_it_says_nothing_for_other_objectives_or_without_time():
    p = _random_problem(0)
    assert hop_work_bound(Problem(p.graph, p.platform, Objective("latency"))) == 0.0
    assert hop_work_bound(p, time_limit=0.0) == 0.0


def _two_gpu_types_on_two_servers(network: float) -> Platform:
    """Server s0: a host and a GPU of type a; s1: a host and a GPU of type b; hops near free, the network
    ``network`` bytes per second."""
    link = Link(1e9, 0.0)
    return Platform((Device("cpu0", "cpu", 1e12, "s0", is_host=True), Device("ga", "a", 1e12, "s0", link=link),
                     Device("cpu1", "cpu", 1e12, "s1", is_host=True), Device("gb", "b", 1e12, "s1", link=link)),
                    network=Link(network, 0.0))


def test_a_task_between_tensors_that_must_cross_the_network_stays_with_its_neighbours():
    # a -> b -> c, a and c on GPU a only; b takes 2 s there, 0.1 s on GPU b, the other server: there its
    # tensors cross the network (3 s each way), so GPU a would pay 2 + 3 s. b stays: T = 4, which the LP
    # without the network rows misses (it sends b away for about 2 s)
    only_a = frozenset({"a"})
    tasks = [Task("a", {"a": 1.0}, output_bytes=3.0, allowed_types=only_a),
             Task("b", {"a": 2.0, "b": 0.1}, output_bytes=3.0, allowed_types=frozenset({"a", "b"})),
             Task("c", {"a": 1.0}, allowed_types=only_a)]
    p = Problem(TaskGraph.create(tasks, [("a", "b"), ("b", "c")]), _two_gpu_types_on_two_servers(1.0),
                Objective("pipeline"))
    assert hop_work_bound(p) == pytest.approx(4.0, rel=1e-5) == _optimum(p)


def _over_two_servers(rng: random.Random, tasks: list[Task], edges: list[tuple[str, str]]) -> Problem:
    """The graph's pipeline over two servers, each a host and a GPU (types a and b; a holds 4 GB)."""
    link = Link(rng.choice([1.0, 4.0]), 0.0)
    devices = (Device("cpu0", "cpu", 1e12, "s0", is_host=True), Device("ga", "a", 4 * GB, "s0", link=link),
               Device("cpu1", "cpu", 1e12, "s1", is_host=True), Device("gb", "b", 1e12, "s1", link=link))
    platform = Platform(devices, network=Link(rng.choice([0.5, 2.0]), 0.0))
    return Problem(TaskGraph.create(tasks, edges), platform, Objective("pipeline"))


def _far_problem(seed: int) -> Problem:
    """Two blocks in a chain (a weighted task, a view, a light task) over two servers of different GPU types,
    memory on GPU a for one block's weights."""
    rng = random.Random(seed)
    tasks, edges, previous = [], [], None
    for i in range(2):
        heavy, light, size = rng.uniform(1, 3), rng.uniform(0.2, 1), rng.uniform(0.5, 3)
        tasks += [Task(f"w{i}", {"a": heavy, "b": heavy * rng.uniform(0.3, 2), "cpu": 4 * heavy},
                       output_bytes=size, memory_bytes=4 * GB),
                  Task(f"v{i}", {"a": 0.0, "b": 0.0, "cpu": 0.0}, output_bytes=size * rng.choice([0.5, 1.0])),
                  Task(f"l{i}", {"a": light, "b": light * rng.uniform(0.3, 2), "cpu": 2 * light}, output_bytes=size)]
        edges += [(f"w{i}", f"v{i}"), (f"v{i}", f"l{i}")] + ([(previous, f"w{i}")] if previous else [])
        previous = f"l{i}"
    return _over_two_servers(rng, tasks, edges)


@pytest.mark.parametrize("seed", range(12))
def test_with_the_network_between_kinds_it_never_exceeds_the_brute_force_optimum(seed):
    p = _far_problem(seed)
    assert hop_work_bound(p) <= _optimum(p) * (1 + 1e-9)


def test_each_device_of_a_kind_pays_a_tensor_in_and_one_out():
    # a -> b -> c -> d, 1 s each, on either of two identical GPUs only, tensors of 0.5 s a hop: the GPUs split
    # the chain 2/2 and each pays one hop, T = 2.5; pooled as one kind without its hops inside, the LP said 2
    tasks = [Task(name, {"gpu": 1.0}, output_bytes=0.5, allowed_types=frozenset({"gpu"})) for name in "abcd"]
    link = Link(1.0, 0.0)
    platform = Platform((Device("cpu", "cpu", 1e12, is_host=True), Device("g0", "gpu", 1e12, link=link),
                         Device("g1", "gpu", 1e12, link=link)))
    p = Problem(TaskGraph.create(tasks, [("a", "b"), ("b", "c"), ("c", "d")]), platform, Objective("pipeline"))
    assert hop_work_bound(p) == pytest.approx(2.5, rel=1e-5) == _optimum(p)


def _identical_gpus_problem(seed: int) -> Problem:
    """A chain of 5-6 tasks with a side branch, tensors of mixed sizes (some tiny), over a host and 2-3 identical
    GPUs, peer-linked half the time."""
    rng = random.Random(seed)
    n = rng.choice([5, 6])
    names = [f"t{i}" for i in range(n)]
    tasks = [Task(name, {"gpu": rng.uniform(0.2, 2.0), "cpu": rng.uniform(1.0, 8.0)},
                  output_bytes=rng.choice([0.01, 0.5, 1.0, 2.0]), memory_bytes=rng.choice([0.0, 2 * GB]))
             for name in names]
    edges = [(a, b) for a, b in zip(names, names[1:])] + [(names[0], names[2])]
    link = Link(rng.choice([1.0, 4.0]), 0.0)
    gpus = [Device(f"g{i}", "gpu", 4 * GB, link=link) for i in range(rng.choice([2, 3]))]
    peers = {frozenset(("g0", "g1")): Link(8.0, 0.0)} if rng.random() < 0.5 else {}
    platform = Platform((Device("cpu", "cpu", 1e12, is_host=True), *gpus), peer_links=peers)
    return Problem(TaskGraph.create(tasks, edges), platform, Objective("pipeline"))


@pytest.mark.parametrize("seed", range(16))
def test_with_identical_gpus_it_never_exceeds_the_brute_force_optimum(seed):
    p = _identical_gpus_problem(seed)
    assert hop_work_bound(p) <= _optimum(p) * (1 + 1e-9)


def test_the_tensors_from_one_copy_of_a_part_to_the_next_are_charged(monkeypatch):
    # a0 b0 a1 b1 a2 b2: a on the GPU only, b 1 s on the GPU or the CPU, tensors of 0.4 s a hop. Cut into three
    # copies of (a, b), the LP saw b's tensor into the next copy's a as free: b on the CPU cost the GPU one hop
    # a block, T = 4.2. Over the copies, b away from a costs two hops but at the ends: T = 5, the optimum
    from diviml.bounds import _hops
    monkeypatch.setattr(_hops, "MAX_PART_TASKS", 2)
    tasks, edges = [], []
    for i in range(3):
        tasks += [Task(f"a{i}", {"gpu": 1.0}, output_bytes=0.4, allowed_types=frozenset({"gpu"})),
                  Task(f"b{i}", {"gpu": 1.0, "cpu": 1.0}, output_bytes=0.4)]
        edges += [(f"a{i}", f"b{i}")] + ([(f"b{i - 1}", f"a{i}")] if i else [])
    platform = Platform((Device("gpu", "gpu", 1e12, link=Link(1.0, 0.0)), Device("cpu", "cpu", 1e12, is_host=True)))
    p = Problem(TaskGraph.create(tasks, edges), platform, Objective("pipeline"))
    assert hop_work_bound(p) == pytest.approx(5.0, rel=1e-5) == _optimum(p)


def _repeated_far_problem(seed: int) -> Problem:
    """Three identical blocks in a chain (a weighted task, a light one) over two servers of different GPU
    types, memory on GPU a for one block's weights."""
    rng = random.Random(seed)
    heavy, light, size = rng.uniform(1, 3), rng.uniform(0.2, 1), rng.uniform(0.5, 3)
    on_b = (rng.uniform(0.3, 2), rng.uniform(0.3, 2))
    tasks, edges, previous = [], [], None
    for i in range(3):
        tasks += [Task(f"w{i}", {"a": heavy, "b": heavy * on_b[0], "cpu": 4 * heavy}, output_bytes=size,
                       memory_bytes=4 * GB),
                  Task(f"l{i}", {"a": light, "b": light * on_b[1], "cpu": 2 * light}, output_bytes=size)]
        edges += [(f"w{i}", f"l{i}")] + ([(previous, f"w{i}")] if previous else [])
        previous = f"l{i}"
    return _over_two_servers(rng, tasks, edges)


@pytest.mark.parametrize("seed", range(12))
@pytest.mark.parametrize("part_tasks", [2, 4])
def test_cut_into_copies_of_a_part_it_never_exceeds_the_brute_force_optimum(seed, part_tasks, monkeypatch):
    from diviml.bounds import _hops
    monkeypatch.setattr(_hops, "MAX_PART_TASKS", part_tasks)
    for p in (_random_problem(seed), _repeated_far_problem(seed)):
        assert hop_work_bound(p) <= _optimum(p) * (1 + 1e-9)
