"""Pipelines of a repeated layer relieved a few copies at a time: CP-SAT places two copies again beside the
held ones, on the simulator's loads, never worse, within memory."""

import itertools

import pytest

from diviml import Device, Link, Objective, Platform, Problem, Task, TaskGraph
from diviml.simulate import pipeline_loads
from diviml.solvers.engines.plans import Stopwatch
from diviml.solvers.pipeline.copy_lns import relieve_copies
from diviml.solvers.pipeline.improve import relieved
from diviml.solvers.pipeline.patterns import repeated_layer
from diviml.validate import validate

GB = 1e9


def _layers(n: int, tensor: float = 1e6) -> TaskGraph:
    """n numbered blocks of an attention task (0.5 GB) and a feed-forward one (2 GB) joined by a residual
    add, an embedding before and a head after."""
    tasks = [Task("embed", {"gpu": 0.01, "cpu": 0.05}, output_bytes=tensor)]
    edges, last = [], "embed"
    for k in range(n):
        att, ff, add = f"attn{k}", f"ff{k}", f"add{k}"
        tasks += [Task(att, {"gpu": 1.0, "cpu": 3.0}, memory_bytes=0.5 * GB, output_bytes=tensor, module=f"blocks.{k}.attn"),
                  Task(ff, {"gpu": 2.0, "cpu": 8.0}, memory_bytes=2 * GB, output_bytes=tensor, module=f"blocks.{k}.mlp"),
                  Task(add, {"gpu": 0.0, "cpu": 0.0}, output_bytes=tensor, module=f"blocks.{k}")]
        edges += [(last, att), (att, ff), (ff, add), (last, add)]
        last = add
    tasks.append(Task("head", {"gpu": 0.01, "cpu": 0.05}, output_bytes=tensor))
    edges.append((last, "head"))
    return TaskGraph.create(tasks, edges)


def _platform(small_memory: float = 40 * GB) -> Platform:
    link = Link(16 * GB, 0.0)
    return Platform((Device("cpu", "cpu", 1e12, is_host=True), Device("g0", "gpu", 40 * GB, link=link),
                     Device("g1", "gpu", small_memory, link=link)))


def _all_on(problem: Problem, device: str) -> dict[str, str]:
    """Every block's task on ``device``, the embedding and the head on the CPU (the search holds them)."""
    return {t.id: "cpu" if t.id in ("embed", "head") else device for t in problem.graph.tasks}


def _best_whole(problem: Problem) -> float:
    """The least largest load over every placement of the blocks' groups (attention, feed-forward with its add)
    by brute force, the embedding and head on the CPU."""
    layer = repeated_layer(problem)
    devices = [d.name for d in problem.platform.devices]
    best = float("inf")
    for choice in itertools.product(devices, repeat=2 * len(layer.copies)):
        placement = {"embed": "cpu", "head": "cpu"}
        for k, copy in enumerate(layer.copies):
            placement[f"attn{k}"] = choice[2 * k]
            placement[f"ff{k}"] = placement[f"add{k}"] = choice[2 * k + 1]
        if validate_memory(problem, placement):
            best = min(best, pipeline_loads(problem, placement).objective)
    return best


def validate_memory(problem: Problem, placement: dict[str, str]) -> bool:
    held: dict[str, float] = {}
    for t, d in placement.items():
        held[d] = held.get(d, 0.0) + problem.graph.by_id[t].memory_bytes
    return all(b <= problem.platform.by_name[d].memory_bytes for d, b in held.items())


def test_copies_piled_on_one_gpu_are_spread_to_the_balance_brute_force_finds():
    problem = Problem(_layers(4), _platform(), Objective("pipeline"))
    start = _all_on(problem, "g0")
    placement, steps = relieve_copies(problem, repeated_layer(problem), start, Stopwatch(20))
    assert steps > 0
    assert pipeline_loads(problem, placement).objective == pytest.approx(_best_whole(problem), rel=1e-6)


def test_a_device_short_of_memory_is_never_filled_past_it():
    # g1 holds 2.6 GB: one feed-forward and no more, or attentions; the loads would rather put more there
    problem = Problem(_layers(4), _platform(small_memory=2.6 * GB), Objective("pipeline"))
    placement, _ = relieve_copies(problem, repeated_layer(problem), _all_on(problem, "g0"), Stopwatch(20))
    assert validate_memory(problem, placement)
    assert pipeline_loads(problem, placement).objective == pytest.approx(_best_whole(problem), rel=1e-6)


def test_the_loads_never_rise_and_the_search_stops_where_nothing_helps():
    problem = Problem(_layers(4), _platform(), Objective("pipeline"))
    layer = repeated_layer(problem)
    balanced, _ = relieve_copies(problem, layer, _all_on(problem, "g0"), Stopwatch(20))
    watch = Stopwatch(30)
    again, steps = relieve_copies(problem, layer, balanced, watch)
    assert steps == 0 and again == balanced
    assert watch.elapsed < 25  # it stalls and returns, not waiting out the limit


def test_relieved_keeps_the_plans_solver_status_and_bound_and_says_what_it_did():
    from diviml.solvers.engines.plans import make_plan
    problem = Problem(_layers(4), _platform(), Objective("pipeline"))
    start = make_plan(problem, placement=_all_on(problem, "g0"), solver="ip", status="timeout", watch=Stopwatch(1))
    plan = relieved(problem, start, Stopwatch(20))
    assert plan.solver == "ip" and plan.status == "timeout" and plan.bound == start.bound
    assert plan.objective < start.objective and validate(plan, problem).ok
    assert any(note.startswith("relieved:") for note in plan.notes)


def test_a_short_limit_is_kept():
    problem = Problem(_layers(6), _platform(), Objective("pipeline"))
    watch = Stopwatch(0.5)
    placement, _ = relieve_copies(problem, repeated_layer(problem), _all_on(problem, "g0"), watch)
    assert watch.elapsed < 1.5
    assert pipeline_loads(problem, placement).objective <= pipeline_loads(problem, _all_on(problem, "g0")).objective
