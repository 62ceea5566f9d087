import math
import random

import pytest
from conftest import graph

from diviml import InputError, Objective, Platform, Problem, Task, TaskGraph
from diviml.batch_table import pricing_sizes, time_at_batch


def test_json_round_trip_keeps_every_field(tmp_path):
    t = Task(id="a", time={"cpu": 1.0, "gpu": 0.1}, kind="conv", time_by_batch={"gpu": {8: 0.4}}, flops=1e9,
             bytes_accessed=2e6, memory_bytes=5.0, output_bytes=7.0, transfer_time=0.5, colocation="g",
             allowed_types=frozenset({"gpu"}), phase="backward", module="layer1.conv", whole_batch=True)
    g = TaskGraph.create([t, Task(id="b", time={"cpu": 2.0})], [("a", "b")], name="n", batch_size=2)
    g.save(tmp_path / "g.json")
    assert TaskGraph.load(tmp_path / "g.json") == g


def test_a_cycle_is_rejected_and_named():
    with pytest.raises(InputError, match=r"cycle: .*a -> b -> c -> a|cycle: .*b -> c -> a -> b|cycle: .*c -> a -> b -> c"):
        graph({x: ({"cpu": 1}, 0) for x in "abc"}, [("a", "b"), ("b", "c"), ("c", "a")])


@pytest.mark.parametrize("edges, message", [
    ([("a", "zz")], "unknown task 'zz'"),
    ([("a", "a")], "self-loop"),
])
def test_bad_edges_are_rejected(edges, message):
    with pytest.raises(InputError, match=message):
        graph({"a": ({"cpu": 1}, 0)}, edges)


@pytest.mark.parametrize("value", [-1.0, math.nan, math.inf])
def test_negative_nan_or_infinite_costs_are_rejected(value):
    with pytest.raises(InputError, match="negative, infinite, NaN or too large"):
        graph({"a": ({"cpu": value}, 0)}, [])


@pytest.mark.parametrize("where, field", [("task", "memory"), ("task", "colocaton"), ("graph", "edge")])
def test_a_misspelt_field_is_refused_by_name_not_left_out(where, field):
    # a task's "memory" left out would be a task of no memory, which every plan then ignores
    data = TaskGraph.create([Task("a", {"cpu": 1.0}, memory_bytes=5.0)], []).to_dict()
    (data["tasks"][0] if where == "task" else data)[field] = 1
    with pytest.raises(InputError, match=rf"unknown field\(s\) {field}; known: .*memory_bytes|unknown field\(s\) {field}; known: .*edges"):
        TaskGraph.from_dict(data)


def test_duplicate_ids_are_rejected():
    with pytest.raises(InputError, match="duplicate task id 'a'"):
        TaskGraph.create([Task("a", {"cpu": 1}), Task("a", {"cpu": 2})], [])


def test_device_types_the_platform_lacks_are_rejected():
    g = graph({"a": ({"tpu": 1}, 0)}, [])
    with pytest.raises(InputError, match="can run only on \\['tpu'\\].*platform lacks"):
        Problem(g, Platform.load("paper-server"), Objective())


def test_schema_version_is_checked():
    with pytest.raises(InputError, match="unsupported graph schema"):
        TaskGraph.from_dict({"schema": "diviml.graph/99", "tasks": [], "edges": []})


def test_topological_order_is_deterministic_and_valid():
    def build():
        return graph({x: ({"cpu": 1}, 0) for x in "dcba"}, [("a", "b"), ("c", "b"), ("b", "d")])
    order = build().topological_order
    assert order.index("a") < order.index("b") < order.index("d") and order.index("c") < order.index("b")
    assert all(build().topological_order == order for _ in range(5))  # the same graph, the same order


def test_a_subgraph_keeps_the_edges_between_its_tasks_and_reads_their_times_as_the_graph_does():
    tasks = [Task(x, {"gpu": 1.0}, time_by_batch={"gpu": {1: 0.5, 8: 1.0}}) for x in "abc"]
    whole = TaskGraph.create(tasks, [("a", "b"), ("b", "c"), ("a", "c")], time_unit="ms", batch_size=8)
    sub = whole.subgraph(["b", "c"], "tail")
    assert sub.edges == (("b", "c"),) and sub.name == "tail" and sub.time_unit == "ms"
    assert sub.time_at("b", "gpu") == whole.time_at("b", "gpu") == 1.0  # at the graph's batch of 8, not 1


def test_batch_times_come_from_the_table_or_are_interpolated_and_flagged():
    t = Task("a", {"gpu": 1.0}, time_by_batch={"gpu": {4: 2.0, 8: 3.0}})
    assert time_at_batch(t, "gpu", 4, 1) == (2.0, False)
    assert time_at_batch(t, "gpu", 6, 1) == (2.5, True)
    assert time_at_batch(t, "gpu", 2, 1) == pytest.approx((1 + 1 / 3, True))
    assert time_at_batch(t, "gpu", 16, 1) == (6.0, True)


def _layered40() -> dict:
    import json
    from pathlib import Path
    return json.loads((Path(__file__).parent.parent / "examples" / "layered40.json").read_text())


def _with(**changes) -> dict:
    data = _layered40()
    data.update(changes)
    return data


def _first_time(value) -> dict:
    data = _layered40()
    data["tasks"][0]["time"] = {k: value for k in data["tasks"][0]["time"]}
    return data


def _first_whole_batch(value) -> dict:
    data = _layered40()
    data["tasks"][0]["whole_batch"] = value
    return data


def _first_batch_table(size, value) -> dict:
    """The first task with a batch table entry ``size: value`` on each of its device types."""
    data = _layered40()
    data["tasks"][0]["time_by_batch"] = {k: {size: value} for k in data["tasks"][0]["time"]}
    return data


@pytest.mark.parametrize("data, says", [
    (_first_time(10 ** 320), "digits is beyond"),          # an integer no float holds
    (_first_time(1e308), r"beyond 1e\+100"),                # sums of such costs overflow
    (_first_batch_table("8", 1e308), r"beyond 1e\+100"),     # a batch table's times too (an LP bound overflowed)
    (_first_batch_table("8", True), "expected a number"),
    (_first_batch_table("0", 1.0), "batch size must be a whole number >= 1"),
    (_first_batch_table("eight", 1.0), "malformed"),
    (_first_whole_batch("false"), "whole_batch must be true or false"),  # a string is not taken for true
    (_first_whole_batch(1), "whole_batch must be true or false"),
    (_with(tasks=None), "'tasks' and 'edges' lists"),
    (_with(tasks=5), "'tasks' and 'edges' lists"),
    ({"tasks": [], "edges": []}, "no tasks"),
    (_with(batch_size="eight"), "batch_size must be a whole number"),
    (_with(batch_size=None), "batch_size must be a whole number"),
    (_with(batch_size=[1]), "batch_size must be a whole number"),
    (_with(batch_size=float("nan")), "batch_size must be a whole number"),
    (_with(batch_size=0), "between 1 and"),
])
def test_a_malformed_graph_is_one_clear_error_not_a_crash(data, says):
    with pytest.raises(InputError, match=says):
        TaskGraph.from_dict(data)


def test_a_graph_file_nested_too_deeply_is_refused(tmp_path):
    path = tmp_path / "deep.json"
    path.write_text('{"tasks": ' + "[" * 100_000 + "]" * 100_000 + ', "edges": []}')
    with pytest.raises(InputError, match="nested too deeply"):
        TaskGraph.load(path)


@pytest.mark.parametrize("seed", range(40))
def test_a_tasks_least_time_and_time_per_sample_over_a_range_lie_at_its_pricing_sizes(seed):
    """The bounds price a batch of thousands at these few sizes: they must find what every size would."""
    rng = random.Random(seed)
    sizes = rng.sample(range(1, 200), rng.randint(0, 5))
    task = Task("t", {"gpu": rng.uniform(0.1, 5)},
                time_by_batch={"gpu": {b: rng.uniform(0.1, 50) for b in sizes}})  # not monotone: any table
    base = rng.choice([1, 2, 8])
    lo = rng.randint(1, 120)
    hi = rng.randint(lo, 300)
    every = range(lo, hi + 1)
    few = pricing_sizes(task, "gpu", base, lo, hi)
    assert set(few) <= set(every) and {lo, hi} <= set(few)
    time = {b: time_at_batch(task, "gpu", b, base)[0] for b in every}
    assert min(time[b] for b in few) == pytest.approx(min(time.values()), rel=1e-12)
    assert min(time[b] / b for b in few) == pytest.approx(min(time[b] / b for b in every), rel=1e-12)
