"""call-exact: the optimal placement under the NeurIPS 2020 latency model (accelerator calls, parallel host)."""

import itertools
import math
import random

import pytest

import diviml
from diviml import Device, Link, Objective, Platform, Task, TaskGraph, ValidationError
from diviml.frontends import neurips2020
from diviml.simulate import call_latency


def _random_scenario(seed: int, n: int = 7, accelerators: int = 2) -> dict:
    rng = random.Random(seed)
    nodes = [{"id": i, "cpuLatency": rng.uniform(5, 40), "fpgaLatency": rng.uniform(0.5, 8), "size": 1,
              "supportedOnFpga": int(rng.random() > 0.15), "isBackwardNode": 0} for i in range(n)]
    cost = {i: rng.uniform(0.2, 6) for i in range(n)}
    edges = {(i, i + 1) for i in range(n - 1)} | {tuple(sorted(rng.sample(range(n), 2))) for _ in range(n // 2)}
    return {"maxFPGAs": accelerators, "maxCPUs": 1, "maxSizePerFPGA": 100, "nodes": nodes,
            "edges": [{"sourceId": u, "destId": v, "cost": cost[u]} for u, v in sorted(edges)]}


def _problem(graph, platform, calls=1):
    return diviml.Problem(graph, platform, Objective("call-latency", max_calls=calls))


def _brute_force(problem) -> float:
    """The best makespan over every placement the simulator accepts that fits every device's memory."""
    tasks = problem.graph.topological_order
    best = math.inf
    for choice in itertools.product(*(problem.allowed_devices[t] for t in tasks)):
        held: dict[str, float] = {}
        for t, d in zip(tasks, choice):
            held[d] = held.get(d, 0.0) + problem.graph.by_id[t].memory_bytes
        if any(b > problem.platform.by_name[d].memory_bytes for d, b in held.items()):
            continue
        try:
            best = min(best, call_latency(problem, dict(zip(tasks, choice))).makespan)
        except ValidationError:  # needs more calls than allowed
            pass
    return best


@pytest.mark.parametrize("seed", range(6))
def test_on_small_scenarios_it_finds_the_best_placement_the_simulator_accepts(seed):
    data = _random_scenario(seed)
    problem = _problem(neurips2020.graph_from_scenario(data), neurips2020.platform_from_scenario(data))
    plan = diviml.solve(problem, "call-exact", time_limit=30)
    best = _brute_force(problem)
    assert plan.status == "optimal"
    assert plan.objective == pytest.approx(best, rel=1e-5)
    assert plan.bound <= best * (1 + 1e-9) and plan.gap <= 1e-4
    assert diviml.validate(plan, problem).ok


@pytest.mark.parametrize("seed", range(4))
def test_unlike_accelerators_behind_unlike_links_are_placed_optimally_too(seed):
    """A host, a fast accelerator behind a slow link and a slower one behind a fast link (no symmetry)."""
    rng = random.Random(seed)
    names = [f"t{i}" for i in range(7)]
    tasks = [Task(id=t, time={"cpu": rng.uniform(5, 30), "fast": rng.uniform(0.5, 3), "near": rng.uniform(2, 8)},
                  output_bytes=rng.uniform(0.5, 3)) for t in names]
    edges = {(names[i], names[i + 1]) for i in range(6)} | {(names[i], names[j]) for i, j in
                                                             (sorted(rng.sample(range(7), 2)) for _ in range(3))}
    platform = Platform((Device("host", "cpu", is_host=True), Device("fast", "fast", link=Link(0.5)),
                         Device("near", "near", link=Link(4.0))))
    problem = _problem(TaskGraph.create(tasks, sorted(edges)), platform)
    plan = diviml.solve(problem, "call-exact", time_limit=30)
    assert plan.status == "optimal" and plan.objective == pytest.approx(_brute_force(problem), rel=1e-5)


def test_more_calls_per_accelerator_never_hurt_and_cpu_only_nodes_split_the_calls():
    data = _random_scenario(11, n=8, accelerators=1)
    for node in data["nodes"]:
        node["supportedOnFpga"] = int(node["id"] != 4)  # a CPU-only node in the middle of the chain
    graph, platform = neurips2020.graph_from_scenario(data), neurips2020.platform_from_scenario(data)
    one = diviml.solve(_problem(graph, platform, 1), "call-exact", time_limit=30)
    two = diviml.solve(_problem(graph, platform, 2), "call-exact", time_limit=30)
    assert one.status == "optimal" and two.objective <= one.objective * (1 + 1e-9)
    assert two.objective == pytest.approx(_brute_force(_problem(graph, platform, 2)), rel=1e-5)


def test_on_the_published_latency_scenario_it_beats_the_baselines_and_proves_it(data_dir):
    problem = diviml.load_problem(data_dir / "latency-inputs/LayerGraphs/bert24_inference.json",
                                  objective=Objective("call-latency"))
    plan = diviml.solve(problem, "call-exact", time_limit=60)
    assert plan.status == "optimal" and plan.gap <= 1e-4
    for baseline in ("greedy", "best-device"):
        assert plan.objective <= diviml.solve(problem, baseline, time_limit=10).objective * (1 + 1e-9)


def test_the_host_holds_no_more_than_its_memory():
    # tasks that take no time, 9 GB of weights: the host holds 5 GB and the accelerator 6, and ``a`` runs only
    # on the accelerator. The model once counted memory on accelerators only: its placement (all but ``a`` on
    # the host) was refused by the validator, and with no baseline fitting either, no plan came back at all
    spec = {"a": (2.5, 2, ("acc",)), "b": (0.0, 2, None), "c": (1.0, 2, None), "d": (1.3, 1, None), "e": (2.0, 2, None)}
    tasks = [Task(t, {"cpu": 0.0, "acc": 0.0}, output_bytes=out, memory_bytes=gb * 1e9,
                  allowed_types=frozenset(only) if only else None) for t, (out, gb, only) in spec.items()]
    edges = [("a", "b"), ("a", "c"), ("a", "d"), ("b", "c"), ("c", "d"), ("d", "e")]
    platform = Platform((Device("cpu", "cpu", 5e9, is_host=True), Device("acc", "acc", 6e9, link=Link(1.0, 0.0))))
    problem = _problem(TaskGraph.create(tasks, edges), platform)
    plan = diviml.solve(problem, "call-exact", time_limit=20)
    assert diviml.validate(plan, problem).ok and plan.status == "optimal"
    assert plan.objective == pytest.approx(_brute_force(problem), rel=1e-5)


def test_tasks_go_to_a_slower_host_when_the_fastest_one_is_full():
    # the fast host holds one task's weights; the others must run on the slow host or on the accelerator. The
    # model once ran every host task on its fastest host and, with no baseline fitting, refused the problem
    tasks = [Task(f"t{i}", {"fast": 1.0, "slow": 2.0, "acc": 5.0}, output_bytes=1.0, memory_bytes=2e9)
             for i in range(5)]
    edges = [("t0", "t1"), ("t0", "t2"), ("t0", "t3"), ("t1", "t4"), ("t2", "t4"), ("t3", "t4")]
    platform = Platform((Device("fast", "fast", 3e9, is_host=True), Device("slow", "slow", 1e12, is_host=True),
                         Device("acc", "acc", 3e9, link=Link(1.0, 0.0))))
    problem = _problem(TaskGraph.create(tasks, edges), platform)
    plan = diviml.solve(problem, "call-exact", time_limit=20)
    assert diviml.validate(plan, problem).ok and plan.status == "optimal"
    assert plan.objective == pytest.approx(_brute_force(problem), rel=1e-5)
    assert sorted(plan.placement.values()).count("fast") == 1


@pytest.mark.parametrize("seed", range(6))
def test_on_several_hosts_of_unlike_speed_and_memory_it_finds_the_best_placement(seed):
    """Hosts of tight memory, and (odd seeds) a slow one of ample memory, which stands in for the others where
    it is as fast."""
    rng = random.Random(seed)
    devices = ("c0", "c1", "g0")
    tasks = [Task(f"t{i}", {"c0": rng.uniform(2, 10), "c1": rng.uniform(2, 10), "g0": rng.uniform(0.5, 3)},
                  output_bytes=rng.uniform(0.2, 2), memory_bytes=rng.uniform(0.5, 2) * 1e9) for i in range(6)]
    edges = {(f"t{i}", f"t{i + 1}") for i in range(5)} | {
        tuple(f"t{k}" for k in sorted(rng.sample(range(6), 2))) for _ in range(3)}
    memory = {d: rng.uniform(2, 5) * 1e9 for d in devices} | ({"c1": 1e12} if seed % 2 else {})
    platform = Platform((Device("c0", "c0", memory["c0"], is_host=True),
                         Device("c1", "c1", memory["c1"], is_host=True),
                         Device("g0", "g0", memory["g0"], link=Link(rng.uniform(0.5, 2), 0.0))))
    problem = _problem(TaskGraph.create(tasks, sorted(edges)), platform)
    best = _brute_force(problem)
    if not math.isfinite(best):
        with pytest.raises(diviml.InfeasibleError):
            diviml.solve(problem, "call-exact", time_limit=20)
        return
    plan = diviml.solve(problem, "call-exact", time_limit=20)
    assert diviml.validate(plan, problem).ok and plan.status == "optimal"
    assert plan.objective == pytest.approx(best, rel=1e-5) and plan.bound <= best * (1 + 1e-9)
