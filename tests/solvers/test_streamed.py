"""The streamed baseline: a pipeline's placement with the batch run through it a sub-batch at a time."""

import time

import pytest

import diviml
from diviml import Objective, Problem, Task, TaskGraph
from diviml.simulate import latency
from diviml.validate import validate


def _layers(count: int, weights: float) -> TaskGraph:
    """A chain of ``count`` layers of two operators (weights on the first), free transfers."""
    ids = [f"b{i}_{j}" for i in range(count) for j in range(2)]
    tasks = [Task(t, {"cpu": 8.0, "v100": 1.5, "a100": 1.0}, output_bytes=0.0,
                  memory_bytes=weights if t.endswith("_0") else 0.0, module=f"blocks.{t[1:].split('_')[0]}.op")
             for t in ids]
    return TaskGraph.create(tasks, list(zip(ids, ids[1:])))


def test_a_model_spread_over_devices_for_its_memory_streams_its_batch_so_the_devices_overlap():
    graph = _layers(8, 12e9)  # 96 GB: over the A100 (40 GB), the V100 (16 GB) and the CPU
    problem = Problem(graph, diviml.preset("paper-server"), Objective("batch", batch_size=4))
    plan = diviml.solve(problem, "streamed", time_limit=10)
    assert validate(plan, problem).ok and plan.solver == "streamed"
    one = latency(Problem(graph, problem.platform, Objective("latency")), plan.placement).makespan
    assert len(set(plan.placement.values())) >= 2
    assert plan.objective < 0.9 * 4 * one  # the requests one after another would take 4 x one
    assert any("sub-batches" in note for note in plan.notes)


def test_the_exact_batch_plan_starts_from_the_streamed_one_and_is_never_worse():
    problem = Problem(_layers(6, 12e9), diviml.preset("paper-server"), Objective("batch", batch_size=4))
    streamed = diviml.solve(problem, "streamed", time_limit=10)
    assert diviml.solve(problem, "exact", time_limit=5).objective <= streamed.objective * (1 + 1e-9)


def test_a_short_time_limit_ends_the_search_over_sub_batch_counts_coarse_ones_first():
    # 64 layers at a batch of 64: each count of sub-batches is a simulation of up to 8,192 parts, and all 64 counts
    # over two placements take about 10 s here
    problem = Problem(_layers(64, 2e9), diviml.preset("paper-server"), Objective("batch", batch_size=64))
    started = time.perf_counter()
    plan = diviml.solve(problem, "streamed", time_limit=1.5)
    assert time.perf_counter() - started <= 1.5 + 1.0  # the plan itself is made after the search stops
    assert validate(plan, problem).ok
    # the counts 1, the powers of two and the batch size come first, and of these the finer is the better on a
    # chain of free transfers: however far the search got (the machine's speed decides), the plan streams one of
    # them, where counts tried in order 1, 2, 3, ... would end on a count between
    counts = {int(note.split(" in ")[-1].split()[0]) for note in plan.notes if "sub-batches" in note}
    assert counts and counts <= {1, 2, 4, 8, 16, 32, 64}


def test_given_the_time_the_search_reaches_the_finest_stream():
    # on a chain of free transfers the finest stream, one sample at a time, overlaps the devices the most
    problem = Problem(_layers(16, 2e9), diviml.preset("paper-server"), Objective("batch", batch_size=16))
    plan = diviml.solve(problem, "streamed", time_limit=30)  # every count is tried in about 1 s here
    assert validate(plan, problem).ok
    assert any("in 16 sub-batches" in note for note in plan.notes)


def test_streamed_is_for_batches():
    problem = Problem(_layers(2, 1e9), diviml.preset("paper-server"), Objective("latency"))
    with pytest.raises(diviml.InputError, match="handles batch"):
        diviml.solve(problem, "streamed", time_limit=5)
