"""Pipelines from layer patterns: the copies of a repeated layer placed by a few patterns, chosen by column
generation and an integer mix."""

import random

import pytest

import diviml
from diviml import Device, Link, Objective, Platform, Problem, Task, TaskGraph
from diviml.simulate import pipeline_loads
from diviml.solvers.engines.plans import Stopwatch
from diviml.solvers.pipeline.ip import warm_start
from diviml.solvers.pipeline.patterns import repeated_layer, split_patterns
from diviml.validate import validate

GB = 1e9


def _blocks(n: int, attention: dict, feed_forward: dict, *, head: bool = True, tensor: float = 1e6) -> TaskGraph:
    """n numbered blocks, each an attention task (little memory) and a feed-forward one (much), joined by a
    residual add; an embedding before them and a head after (outside every block)."""
    tasks = [Task("embed", {"gpu": 0.01, "cpu": 0.1}, memory_bytes=0.1 * GB, output_bytes=tensor)]
    edges, last = [], "embed"
    for k in range(n):
        att, ff, add = f"attn{k}", f"ff{k}", f"add{k}"
        tasks += [Task(att, dict(attention["time"]), memory_bytes=attention["memory"], output_bytes=tensor,
                       module=f"blocks.{k}.attn"),
                  Task(ff, dict(feed_forward["time"]), memory_bytes=feed_forward["memory"], output_bytes=tensor,
                       module=f"blocks.{k}.mlp"),
                  Task(add, {"gpu": 0.0, "cpu": 0.0}, output_bytes=tensor, module=f"blocks.{k}")]
        edges += [(last, att), (att, ff), (ff, add), (last, add)]
        last = add
    if head:
        tasks.append(Task("head", {"gpu": 0.01, "cpu": 0.1}, memory_bytes=0.1 * GB, output_bytes=tensor))
        edges.append((last, "head"))
    return TaskGraph.create(tasks, edges)


def _big_and_small() -> Platform:
    """A host CPU, a GPU of 40 GB and one of 5 GB, alike in speed, on PCIe."""
    link = Link(16 * GB, 0.0)
    return Platform((Device("cpu", "cpu", 1e12, is_host=True), Device("big", "gpu", 40 * GB, link=link),
                     Device("small", "gpu", 5 * GB, link=link)))


def _start(problem: Problem):
    return diviml.solve(problem, "greedy", time_limit=10)


def test_a_small_gpu_takes_the_attention_of_every_layer_where_whole_layers_would_leave_it_one():
    # a layer is 4.5 GB: whole layers put one on the small GPU and seven on the big one (load 14); its
    # attention alone is 0.5 GB, so the small GPU can run all eight while the big one runs the feed-forwards
    graph = _blocks(8, {"time": {"gpu": 1.0, "cpu": 50.0}, "memory": 0.5 * GB},
                    {"time": {"gpu": 1.0, "cpu": 50.0}, "memory": 4 * GB})
    problem = Problem(graph, _big_and_small(), Objective("pipeline"))
    plan = split_patterns(problem, Stopwatch(20), _start(problem))
    assert validate(plan, problem).ok
    assert plan.objective == pytest.approx(pipeline_loads(problem, plan.placement).objective)
    assert plan.objective < 8.2  # eight layers' work on each GPU, and the hops of 1 MB tensors
    assert all(plan.placement[f"attn{k}"] == "small" and plan.placement[f"ff{k}"] == "big" for k in range(8))


@pytest.mark.parametrize("seed", range(3))
def test_the_pipeline_ips_start_is_at_least_as_good(seed):
    # GPT-3's IP over six-servers (486,000 columns) never gets past its start: the start must hold the patterns
    rng = random.Random(seed)
    graph = _blocks(8, {"time": {"gpu": 1.0, "cpu": 50.0}, "memory": rng.uniform(0.2, 1) * GB},
                    {"time": {"gpu": rng.uniform(0.5, 2), "cpu": 50.0}, "memory": rng.uniform(2, 4) * GB},
                    tensor=rng.choice([1e6, 1e9]))
    problem = Problem(graph, _big_and_small(), Objective("pipeline"))
    start = warm_start(problem, Stopwatch(30))
    patterns = split_patterns(problem, Stopwatch(10), _start(problem))
    assert start.objective <= patterns.objective * 1.02  # CP-SAT on two workers may pick another optimal mix


def _servers(seed: int) -> Platform:
    """Two servers of a host CPU and two GPUs each, GPU memory and speed drawn per server, on a network."""
    rng = random.Random(seed)
    devices = []
    for s in ("s0", "s1"):
        devices += [{"name": f"{s}cpu", "type": "cpu", "server": s, "host": True},
                    {"name": f"{s}gpu", "type": f"gpu-{s}", "server": s, "count": 2,
                     "memory": rng.choice([6, 10, 20]) * GB, "link": {"bandwidth": 16e9, "latency": 1e-5}}]
    return Platform.from_dict({"devices": devices, "network": {"bandwidth": 12.5e9, "latency": 1e-5}})


@pytest.mark.parametrize("seed", range(5))
def test_on_random_layers_over_two_servers_its_splits_are_valid_and_no_worse_than_the_ip_keeps(seed):
    rng = random.Random(seed)

    def times():
        t = rng.uniform(0.5, 2.0)
        return {"gpu-s0": t, "gpu-s1": t * rng.uniform(0.5, 2.0), "cpu": t * rng.uniform(10, 40)}

    graph = _blocks(rng.randint(4, 10), {"time": times(), "memory": rng.uniform(0.2, 2) * GB},
                    {"time": times(), "memory": rng.uniform(1, 5) * GB}, tensor=rng.choice([1e6, 1e8, 1e9]))
    problem = Problem(graph, _servers(seed), Objective("pipeline"))
    start = _start(problem)
    plan = split_patterns(problem, Stopwatch(10), start)
    assert plan is not None and validate(plan, problem).ok
    assert plan.objective == pytest.approx(pipeline_loads(problem, plan.placement).objective)
    assert diviml.solve(problem, "ip", time_limit=20, engine="highs").objective <= min(plan.objective, start.objective) * (1 + 1e-9)


def test_the_repeated_layer_leaves_out_the_tasks_outside_every_block_and_a_block_unlike_the_others():
    attention = {"time": {"gpu": 1.0, "cpu": 50.0}, "memory": 0.5 * GB}
    graph = _blocks(6, attention, {"time": {"gpu": 1.0, "cpu": 50.0}, "memory": 4 * GB})
    tasks = [t if t.id != "ff5" else Task("ff5", {"gpu": 3.0, "cpu": 50.0}, memory_bytes=4 * GB, output_bytes=1e6,
                                          module="blocks.5.mlp") for t in graph.tasks]
    odd = TaskGraph.create(tasks, list(graph.edges))
    layer = repeated_layer(Problem(odd, _big_and_small(), Objective("pipeline")))
    assert [copy[0] for copy in layer.copies] == [f"attn{k}" for k in range(5)]  # block 5 differs
    assert all("embed" not in copy and "head" not in copy for copy in layer.copies)


def test_it_does_not_apply_to_contiguous_splits_few_layers_or_graphs_without_blocks():
    attention = {"time": {"gpu": 1.0, "cpu": 50.0}, "memory": 0.5 * GB}
    feed_forward = {"time": {"gpu": 1.0, "cpu": 50.0}, "memory": 4 * GB}
    problem = Problem(_blocks(8, attention, feed_forward), _big_and_small(), Objective("pipeline"))
    start = _start(problem)
    contiguous = Problem(problem.graph, problem.platform, Objective("pipeline", contiguous=True))
    assert split_patterns(contiguous, Stopwatch(10), start) is None
    few = Problem(_blocks(3, attention, feed_forward), _big_and_small(), Objective("pipeline"))
    assert split_patterns(few, Stopwatch(10), _start(few)) is None
    flat = Problem(TaskGraph.create([Task(t.id, dict(t.time), memory_bytes=t.memory_bytes) for t in problem.graph.tasks],
                                    list(problem.graph.edges)), problem.platform, Objective("pipeline"))
    assert split_patterns(flat, Stopwatch(10), _start(flat)) is None
    assert split_patterns(problem, Stopwatch(10), None) is None


def test_light_tasks_outside_the_blocks_go_to_the_host_cpu_and_heavy_ones_stay_where_the_start_put_them():
    attention = {"time": {"gpu": 1.0, "cpu": 50.0}, "memory": 0.5 * GB}
    feed_forward = {"time": {"gpu": 1.0, "cpu": 50.0}, "memory": 4 * GB}
    problem = Problem(_blocks(8, attention, feed_forward), _big_and_small(), Objective("pipeline"))
    plan = split_patterns(problem, Stopwatch(10), _start(problem))
    assert plan.placement["embed"] == plan.placement["head"] == "cpu"  # 0.1 s each beside a load of 8
    graph = _blocks(8, attention, feed_forward)
    heavy = TaskGraph.create([t if t.id != "head" else Task("head", {"gpu": 0.5, "cpu": 20.0}, memory_bytes=0.1 * GB)
                              for t in graph.tasks], list(graph.edges))
    problem = Problem(heavy, _big_and_small(), Objective("pipeline"))
    start = _start(problem)
    assert start.placement["head"] != "cpu"
    plan = split_patterns(problem, Stopwatch(10), start)
    assert plan.placement["head"] == start.placement["head"] and validate(plan, problem).ok
