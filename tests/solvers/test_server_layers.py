"""Layers over servers: each layer spread over one server's devices by an exact schedule, servers in runs."""

import math

import pytest

from diviml import Device, Link, Objective, Platform, Problem, Task, TaskGraph
from diviml.solvers.engines.plans import Stopwatch
from diviml.solvers.pipeline.layers import split_layers
from diviml.solvers.server_layers import server_layer_plan
from diviml.validate import validate


def attention_like(layers: int = 12) -> TaskGraph:
    """Layers of a norm, three parallel projections (as a transformer's query, key and value), a join and an
    MLP; the projections and the MLP hold the weights."""
    tasks = [Task("embed", {"gpu": 0.1, "cpu": 0.5}, memory_bytes=1.0, output_bytes=0.05)]
    edges = []
    last = "embed"
    for i in range(layers):
        m = f"blocks.{i}"
        tasks += [Task(f"{m}.norm", {"gpu": 0.1, "cpu": 1.0}, output_bytes=0.05, module=f"{m}.norm")]
        tasks += [Task(f"{m}.{p}", {"gpu": 1.0, "cpu": 20.0}, memory_bytes=1.0, output_bytes=0.05,
                       module=f"{m}.{p}") for p in "qkv"]
        tasks += [Task(f"{m}.attn", {"gpu": 0.2, "cpu": 2.0}, output_bytes=0.05, module=f"{m}.attn"),
                  Task(f"{m}.mlp", {"gpu": 2.0, "cpu": 40.0}, memory_bytes=4.0, output_bytes=0.05, module=f"{m}.mlp")]
        edges += [(last, f"{m}.norm")] + [(f"{m}.norm", f"{m}.{p}") for p in "qkv"]
        edges += [(f"{m}.{p}", f"{m}.attn") for p in "qkv"] + [(f"{m}.attn", f"{m}.mlp")]
        last = f"{m}.mlp"
    return TaskGraph.create(tasks, edges)


def servers(count: int = 2, gpus: int = 2, memory: float = 26.0) -> Platform:
    link = Link(10.0, 0.0)
    devices = []
    for s in range(count):
        devices.append(Device(f"s{s}cpu", "cpu", math.inf, f"s{s}", True))
        devices += [Device(f"s{s}gpu{g}", "gpu", memory, f"s{s}", False, link) for g in range(gpus)]
    return Platform(tuple(devices), "servers", network=Link(5.0, 0.0))


def held(plan, problem) -> dict[str, float]:
    out: dict[str, float] = {}
    for a in plan.assignments:
        out[a.device] = out.get(a.device, 0.0) + problem.graph.by_id[a.task].memory_bytes
    return out


def test_each_layer_runs_its_parallel_branches_side_by_side_and_beats_whole_layers_per_device():
    problem = Problem(attention_like(), servers(), Objective("latency"))
    plan = server_layer_plan(problem, Stopwatch(20))
    assert plan is not None and validate(plan, problem).ok
    layer = {a.device for a in plan.assignments if a.task.startswith("blocks.5.")}
    assert len(layer) >= 2 and len({problem.platform.by_name[d].server for d in layer}) == 1
    whole = split_layers(problem, Stopwatch(20))
    assert plan.objective < whole.objective * 0.95


def test_the_weights_spread_evenly_over_a_servers_identical_devices_where_they_need_them_all():
    problem = Problem(attention_like(16), servers(count=1, gpus=4, memory=30.0), Objective("latency"))
    plan = server_layer_plan(problem, Stopwatch(20))
    assert plan is not None and validate(plan, problem).ok
    gpus = [v for d, v in held(plan, problem).items() if "gpu" in d]
    assert len(gpus) == 4 and max(gpus) - min(gpus) <= 7.0  # at most one layer's weights apart


def test_layers_the_accelerators_cannot_hold_go_to_a_host():
    problem = Problem(attention_like(12), servers(count=1, gpus=2, memory=30.0), Objective("latency"))
    plan = server_layer_plan(problem, Stopwatch(20))
    assert plan is not None and validate(plan, problem).ok
    assert held(plan, problem).get("s0cpu", 0.0) >= 85.0 - 60.0


@pytest.mark.parametrize("platform", [servers(count=2, gpus=1), None])
def test_no_plan_without_a_server_of_two_accelerators_or_layers(platform):
    graph = attention_like(12) if platform is not None else attention_like(3)
    problem = Problem(graph, platform or servers(), Objective("latency"))
    assert server_layer_plan(problem, Stopwatch(5)) is None


def test_a_servers_devices_hand_the_chain_of_layers_on_once_a_block_not_once_a_layer():
    """The weights spread as evenly as layer by layer, but each device runs its layers' chain in one block:
    an activation moved between two GPUs every layer costs a transfer a layer."""
    problem = Problem(attention_like(16), servers(count=1, gpus=2, memory=60.0), Objective("latency"))
    plan = server_layer_plan(problem, Stopwatch(20))
    assert plan is not None and validate(plan, problem).ok
    device_of = plan.placement
    chain = [device_of[f"blocks.{i}.mlp"] for i in range(16)]
    assert sum(a != b for a, b in zip(chain, chain[1:])) <= 1
    gpus = [v for d, v in held(plan, problem).items() if "gpu" in d]
    assert len(gpus) == 2 and max(gpus) - min(gpus) <= 7.0


def test_layers_that_one_device_holds_stay_on_it():
    """Ten layers' weights (71) fit one GPU of four: shifting them over the others would only hand the chain
    on (the key and value projections still run beside it, on two others)."""
    problem = Problem(attention_like(10), servers(count=1, gpus=4, memory=80.0), Objective("latency"))
    plan = server_layer_plan(problem, Stopwatch(20))
    assert plan is not None and validate(plan, problem).ok
    device_of = plan.placement
    assert len({device_of[f"blocks.{i}.mlp"] for i in range(10)}) == 1
