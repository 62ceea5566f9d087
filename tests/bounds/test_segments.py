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


def _two_servers(gpu_memory: float = 10.0) -> Platform:
    """Two servers, each a host CPU and a GPU of its own type (g1 on A, g2 on B); hops and the network move
    a byte a second."""
    link = Link(1.0, 0.0)
    return Platform((Device("cpuA", "cpu", 100.0, "A", True), Device("gA", "g1", gpu_memory, "A", False, link),
                     Device("cpuB", "cpu", 100.0, "B", True), Device("gB", "g2", gpu_memory, "B", False, link)),
                    "two servers", network=Link(1.0, 0.0))


def _from_one_gpu_to_the_other(between: dict[str, dict[str, float]]) -> Problem:
    """a (A's GPU only, 10 bytes) -> the tasks of ``between`` (times by type) in a chain -> b (B's GPU only, 10
    bytes) on :func:`_two_servers`; a and b take 1 s, every output is a byte."""
    spec = {"a": ({"g1": 1.0, "g2": 1.0, "cpu": 1.0}, 1.0)} | {t: (times, 1.0) for t, times in between.items()}
    spec["b"] = ({"g1": 1.0, "g2": 1.0, "cpu": 1.0}, 1.0)
    chain = list(spec)
    g = graph(spec, list(zip(chain, chain[1:])), a={"memory_bytes": 10.0, "allowed_types": frozenset({"g1"})},
              b={"memory_bytes": 10.0, "allowed_types": frozenset({"g2"})})
    return Problem(g, _two_servers(), Objective())


def test_a_tensor_between_two_servers_gpus_pays_the_network_even_through_a_host_cpu():
    # a runs only on A's GPU, b only on B's, 1 s each; a's 1-byte output takes 1 s per hop and 1 s over the
    # network. Routes closed over device types went GPU -> a host CPU (A's: 1 s) -> a GPU (B's, from B's CPU:
    # 1 s) and left the network out: 4. Closed over devices, every route pays it: 1 + 3 + 1 = 5, the optimum
    p = _from_one_gpu_to_the_other({})
    assert memory_segments_bound(p) == pytest.approx(5, rel=1e-5)
    plan = diviml.solve(p, "exact", time_limit=10)
    assert plan.objective == pytest.approx(5) and plan.status == "optimal"


def test_a_series_point_on_a_host_cpu_does_not_carry_a_tensor_to_the_other_server_for_free():
    # a (A's GPU only) -> s -> b (B's GPU only), s 0.5 s anywhere but 5 s on a GPU. With one kind for both host
    # CPUs, s on "the CPU" was entered from A's GPU (1 s hop to A's CPU) and left for B's GPU (1 s hop from
    # B's CPU): 1 + 1 + 0.5 + 1 + 1 = 4.5. Each server's CPU is a kind of its own, so s on either pays the
    # network on one side: 5.5, the optimum
    p = _from_one_gpu_to_the_other({"s": {"g1": 5.0, "g2": 5.0, "cpu": 0.5}})
    assert memory_segments_bound(p) == pytest.approx(5.5, rel=1e-5)
    plan = diviml.solve(p, "exact", time_limit=10)
    assert plan.objective == pytest.approx(5.5) and plan.status == "optimal"


def test_parallel_branches_on_two_devices_of_a_kind_pay_the_transfers_between_them():
    # s -> (a, b) -> j on a server of two GPUs (1, 2, 2, 1 s) and a host CPU that holds one task; a byte takes
    # 1 s per hop, 2 s from GPU to GPU. One kind of two devices let a and b run side by side for free (4);
    # the kind is one device and the others within a segment, so b beside a pays its tensor there and back
    # (1 + 2 + 2 + 2 + 1 = 8) and one GPU for all is best: 6, the optimum
    times = {t: ({"gpu": p, "cpu": 10.0 * p}, 1.0) for t, p in {"s": 1.0, "a": 2.0, "b": 2.0, "j": 1.0}.items()}
    g = graph(times, [("s", "a"), ("s", "b"), ("a", "j"), ("b", "j")], **{t: {"memory_bytes": 1.0} for t in times})
    link = Link(1.0, 0.0)
    platform = Platform((Device("cpu", "cpu", 1.0, "A", True), Device("g0", "gpu", 100.0, "A", False, link),
                         Device("g1", "gpu", 100.0, "A", False, link)), "two GPUs")
    p = Problem(g, platform, Objective())
    assert memory_segments_bound(p) == pytest.approx(6, rel=1e-5)
    plan = diviml.solve(p, "exact", time_limit=10)
    assert plan.objective == pytest.approx(6) and plan.status == "optimal"


def test_where_the_cpus_must_hold_weights_three_branches_on_two_cpus_take_two_turns():
    # two alike servers of a host CPU and a GPU (1.5 bytes); s -> (a, b, c) -> j, where a, b and c (10 bytes,
    # 4 s each on a CPU) must go to the CPUs and s and j (1 s on a GPU) to the GPUs; transfers take 0.01 s.
    # With the CPUs one kind of two devices, their work (12 s) spread over two was the window: 1 + 6 = 7. Split
    # into the one and the other, one of them runs two branches, 8 s: 1 + 8 = 9 (the optimum is 10.03: a
    # window counts the longest path or a device's work, not both)
    times = {"s": ({"gpu": 1.0, "cpu": 10.0}, 1.0), "j": ({"gpu": 1.0, "cpu": 10.0}, 1.0)}
    times |= {t: ({"gpu": 1.0, "cpu": 4.0}, 1.0) for t in "abc"}
    g = graph(times, [("s", t) for t in "abc"] + [(t, "j") for t in "abc"],
              **{t: {"memory_bytes": 10.0 if t in "abc" else 1.0} for t in times})
    link = Link(100.0, 0.0)
    devices = tuple(device for server in "AB" for device in (
        Device(f"cpu{server}", "cpu", 100.0, server, True), Device(f"g{server}", "gpu", 1.5, server, False, link)))
    p = Problem(g, Platform(devices, "two servers", network=Link(100.0, 0.0)), Objective())
    assert memory_segments_bound(p) == pytest.approx(9, rel=1e-5)
    plan = diviml.solve(p, "exact", time_limit=10)
    assert plan.objective == pytest.approx(10.03) and plan.status == "optimal"


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


def _random_servers_problem(seed: int, tasks: tuple[int, int] = (5, 9)) -> Problem:
    """A layered DAG of 5-9 tasks (``tasks``) on three servers: A and A2 alike (a host CPU and a g1 GPU), B (a host CPU
    and two g2 GPUs); the CPUs 3-6 times slower and roomy, the GPUs holding 20-60% of the weights each, links
    and the network of random speeds."""
    rng = random.Random(seed)
    g = layered_dag(rng.randint(*tasks), seed=seed, device_types=("g1",))
    tasks = []
    for t in g.tasks:
        fast = t.time["g1"]
        tasks.append(Task(t.id, {"g1": fast, "g2": fast * rng.uniform(0.5, 2), "cpu": fast * rng.uniform(3, 6)},
                          output_bytes=t.output_bytes, memory_bytes=float(rng.choice([0, 1, 2, 4]))))
    g = TaskGraph.create(tasks, g.edges)
    total = sum(t.memory_bytes for t in g.tasks) or 1.0
    rate = sum(t.output_bytes for t in g.tasks) / sum(t.time["g1"] for t in g.tasks)
    link, network = Link(rate * rng.uniform(0.5, 4), 0.0), Link(rate * rng.uniform(0.5, 4), 0.0)
    gpu = total * rng.uniform(0.2, 0.6)
    devices = (Device("cpuA", "cpu", 1e9, "A", True), Device("gA", "g1", gpu, "A", False, link),
               Device("cpuA2", "cpu", 1e9, "A2", True), Device("gA2", "g1", gpu, "A2", False, link),
               Device("cpuB", "cpu", 1e9, "B", True), Device("gB0", "g2", gpu, "B", False, link),
               Device("gB1", "g2", gpu, "B", False, link))
    return Problem(g, Platform(devices, "three servers", network=network), Objective())


@pytest.mark.parametrize("seed", range(12))
def test_on_several_servers_it_never_exceeds_the_proven_optimum(seed):
    p = _random_servers_problem(seed)
    best = diviml.solve(p, "exact", time_limit=30)
    assert best.status == "optimal"
    assert memory_segments_bound(p) <= best.objective * (1 + 1e-9)


def test_no_time_means_no_bound():
    g = graph({t: ({"x": 3, "y": 1}, 0.0) for t in "ab"}, [("a", "b")], a={"memory_bytes": 10.0})
    p = Problem(g, _platform(5.0), Objective())
    assert memory_segments_bound(p, time_limit=0.0) == 0.0
    assert memory_segments_bound(p) == pytest.approx(4, rel=1e-5) == critical_path_bound(p)


@pytest.mark.parametrize("seed", [1, 5])
def test_pricing_segments_by_their_lp_first_gives_the_bound_of_pricing_every_one_by_its_milp(seed, monkeypatch):
    # the walk prices a segment's (entry, exit) pairs by the LP relaxation of their MILP and solves the MILP only
    # where the cheapest walk goes; any other walk costs at least its LP price, so the bound is the same
    from diviml.bounds import _segments

    p = _random_servers_problem(seed, tasks=(16, 24))
    lazy = memory_segments_bound(p)
    relaxed_calls = []
    price = _segments._price

    def every_one_by_its_milp(segment, prices, entry, exit_, counts, stop, relaxed=False):
        relaxed_calls.append(relaxed and not _segments._enumerable(segment))
        return price(segment, prices, entry, exit_, counts, stop)

    monkeypatch.setattr(_segments, "_price", every_one_by_its_milp)
    assert memory_segments_bound(Problem(p.graph, p.platform, p.objective)) == pytest.approx(lazy, rel=1e-7)
    assert any(relaxed_calls)  # segments of more than 256 placements: the lazy walk priced them by the LP first


@pytest.mark.parametrize("seed", [7, 8])
def test_a_walk_that_stops_solving_milps_early_still_bounds_and_still_places_every_task(seed, monkeypatch):
    # past MILPS_A_WALK segment MILPs a walk takes its cheapest walk of MILP-placed steps as the master's column
    # and keeps, as its value, the cheapest walk over the prices known (the LP's where no MILP was solved)
    from diviml.bounds import _segments, memory_segments_relaxation

    p = _random_servers_problem(seed, tasks=(16, 40))
    plan = diviml.solve(p, "exact", time_limit=5)
    solved = []
    price = _segments._price

    def counting(segment, prices, entry, exit_, counts, stop, relaxed=False):
        solved.append(not relaxed and not _segments._enumerable(segment))
        return price(segment, prices, entry, exit_, counts, stop, relaxed)

    monkeypatch.setattr(_segments, "_price", counting)
    milps = {}
    for cap in (0, 10 ** 6):
        monkeypatch.setattr(_segments, "MILPS_A_WALK", cap)
        solved.clear()
        fresh = Problem(p.graph, p.platform, p.objective)
        assert 0 < memory_segments_bound(fresh) <= plan.objective * (1 + 1e-9)
        milps[cap] = sum(solved)
        mixes = memory_segments_relaxation(fresh).mixes
        for mix in mixes:
            assert all(set(kinds) == {t.id for t in p.graph.tasks} for _, kinds in mix)
        assert not any(_segments.same_mix(a, b) for i, a in enumerate(mixes) for b in mixes[:i])  # each made a plan once
    assert milps[0] < milps[10 ** 6]


def test_two_mixes_are_the_same_where_their_placements_match_and_weights_agree_to_a_millionth():
    # two masters' LPs gave GPT-3's decoding step one mix with weights a few ulps apart: made a plan once
    from diviml.bounds._segments import same_mix

    a, b = {"t": "gpu", "u": "cpu"}, {"t": "cpu", "u": "cpu"}
    assert same_mix(((0.3, a), (0.7, b)), ((0.3 + 1e-12, dict(a)), (0.7 - 1e-12, dict(b))))
    assert not same_mix(((0.3, a), (0.7, b)), ((0.31, a), (0.69, b)))
    assert not same_mix(((0.3, a), (0.7, b)), ((0.7, b), (0.3, a)))  # spliced in another order: another plan
    assert not same_mix(((0.3, a), (0.7, b)), ((1.0, a),))
