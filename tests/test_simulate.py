import pytest
from conftest import graph, receiving, two_device_platform

from diviml import Objective, Problem, ValidationError
from diviml.simulate import latency, pipeline_loads, schedule


def _diamond(kind="latency", **obj):
    g = graph({"a": ({"x": 2, "y": 3}, 1), "b": ({"x": 3, "y": 2}, 2), "c": ({"x": 4, "y": 4}, 1),
               "d": ({"x": 2, "y": 3}, 0)}, [("a", "b"), ("a", "c"), ("b", "d"), ("c", "d")])
    return Problem(g, two_device_platform(), Objective(kind, **obj))


def test_latency_waits_for_inputs_and_transfers():
    p = _diamond()
    s = latency(p, {"a": "P1", "b": "P2", "c": "P1", "d": "P1"})
    start = {j.task: j.start for j in s.jobs}
    assert start == {"a": 0, "c": 2, "b": 3, "d": 7}  # b waits for a's 1-byte transfer; d for b's 2 bytes
    assert s.makespan == 9


def test_a_given_device_order_is_followed():
    p = _diamond()
    s = latency(p, {t: "P1" for t in "abcd"}, order={"P1": ["a", "c", "b", "d"], "P2": []})
    assert [j.task for j in sorted(s.jobs, key=lambda j: j.start)] == ["a", "c", "b", "d"]
    assert s.makespan == 11


def test_an_order_against_the_dependencies_is_an_error():
    p = _diamond()
    with pytest.raises(ValidationError, match="contradicts"):
        latency(p, {t: "P1" for t in "abcd"}, order={"P1": ["b", "a", "c", "d"], "P2": []})


def test_batch_parts_pass_rows_through_and_only_wait_for_overlapping_rows():
    g = graph({"a": ({"x": 1, "y": 1}, 4), "b": ({"x": 1, "y": 1}, 0)}, [("a", "b")])
    p = Problem(g, two_device_platform(), Objective("batch", batch_size=2))
    s = schedule(p, {"a": [("P1", 1), ("P2", 1)], "b": [("P1", 1), ("P2", 1)]})
    # the graph has no batch table: one sample costs 1, and each half stays on its device
    assert s.makespan == 2
    crossed = schedule(p, {"a": [("P1", 1), ("P2", 1)], "b": [("P2", 1), ("P1", 1)]})
    assert crossed.makespan == 1 + 4 + 1  # each sample of a (4 bytes, the graph is per sample) crosses


def test_a_part_waits_for_exactly_the_producer_parts_whose_rows_it_reads():
    g = graph({"a": ({"x": 1, "y": 1}, 0), "b": ({"x": 1, "y": 1}, 0)}, [("a", "b")])
    p = Problem(g, two_device_platform(), Objective("batch", batch_size=8))
    # a sample costs 1: a's rows 0-2 run on P1 over [0, 3], rows 3-7 on P2 over [0, 5]; b's rows 0-1, 2-5
    # and 6-7 then run on P1 in turn
    s = schedule(p, {"a": [("P1", 3), ("P2", 5)], "b": [("P1", 2), ("P1", 4), ("P1", 2)]},
                 order={"P1": [("a", 0), ("b", 0), ("b", 1), ("b", 2)], "P2": [("a", 1)]})
    start = {(j.task, j.offset): j.start for j in s.jobs}
    assert start[("b", 0)] == 3  # rows 0-1 read a's first part only: not held up by the second (ends at 5)
    assert start[("b", 2)] == 5  # rows 2-5 read both parts
    assert start[("b", 6)] == 9  # rows 6-7 read the second part, done long before: P1 was busy
    assert s.makespan == 11


def test_pipeline_load_counts_compute_and_each_devices_own_transfers():
    p = _diamond("pipeline")
    loads = pipeline_loads(p, {"a": "P1", "b": "P2", "c": "P1", "d": "P1"})
    # a peer-link transfer counts on both ends: a->b (1) and b->d (2)
    assert loads.total == {"P1": 2 + 4 + 2 + 1 + 2, "P2": 2 + 1 + 2}
    assert loads.objective == 11


def _host_and_accelerators():
    import math

    from diviml import Device, Link, Platform
    link = Link(1.0, 0.0)
    return Platform((Device("cpu", "cpu", math.inf, "s", True, None), Device("A", "x", math.inf, "s", False, link),
                     Device("B", "x", math.inf, "s", False, link)), "host+2")


def test_a_convex_node_set_runs_as_one_call_even_when_a_greedy_order_would_split_it():
    from diviml.simulate import call_blocks, call_latency
    # a2 needs a1 (on A) and b1 (on B): run b1 first, then A's {a1, a2} as one call
    g = graph({"a1": ({"x": 1.0}, 0.0), "b1": ({"x": 1.0}, 0.0), "a2": ({"x": 1.0}, 0.0)},
              [("a1", "a2"), ("b1", "a2")])
    p = Problem(g, _host_and_accelerators(), Objective("call-latency", max_calls=1))
    placement = {"a1": "A", "b1": "B", "a2": "A"}
    assert call_blocks(p, placement) == {"A": [["a1", "a2"]], "B": [["b1"]]}
    assert call_latency(p, placement).makespan == pytest.approx(3.0)


def test_calls_that_would_wait_on_each_other_in_a_cycle_stay_apart():
    from diviml.simulate import call_blocks
    # a1 -> b1 -> a2: A's set is not convex, so it needs two calls around B's
    g = graph({"a1": ({"x": 1.0}, 0.0), "b1": ({"x": 1.0}, 0.0), "a2": ({"x": 1.0}, 0.0)},
              [("a1", "b1"), ("b1", "a2")])
    p = Problem(g, _host_and_accelerators(), Objective("call-latency", max_calls=2))
    assert call_blocks(p, {"a1": "A", "b1": "B", "a2": "A"}) == {"A": [["a1"], ["a2"]], "B": [["b1"]]}


def test_on_a_receiver_platform_the_receiving_device_spends_the_transfer_before_the_job():
    p = receiving(_diamond())
    s = latency(p, {"a": "P1", "b": "P2", "c": "P1", "d": "P1"})
    job = {j.task: j for j in s.jobs}
    # b starts as a ends (2) and spends a's 1-byte transfer before its 2 s: [2, 5]; d starts as b ends and
    # spends b's 2 bytes before its 2 s: [6, 10] (P1 free from 6, after c)
    assert (job["b"].start, job["b"].receive, job["b"].finish) == (2, 1, 5)
    assert (job["d"].start, job["d"].receive, job["d"].finish) == (6, 2, 10)
    assert job["c"].receive == 0 and s.makespan == 10  # overlapped, 9: P2 and P1 computed while values moved


def test_a_device_receives_a_value_once_however_many_of_its_jobs_read_it():
    g = graph({"a": ({"x": 1, "y": 1}, 3), "b": ({"x": 1, "y": 1}, 0), "c": ({"x": 1, "y": 1}, 0)},
              [("a", "b"), ("a", "c")])
    p = receiving(Problem(g, two_device_platform(), Objective("latency")))
    s = latency(p, {"a": "P1", "b": "P2", "c": "P2"}, order={"P1": ["a"], "P2": ["c", "b"]})
    job = {j.task: j for j in s.jobs}
    assert job["c"].receive == 3 and job["b"].receive == 0  # the first reader on P2 pays, in P2's order
    assert s.makespan == 1 + 3 + 1 + 1


def test_a_receiver_schedule_is_never_shorter_than_the_overlapped_one():
    import random

    from diviml.generators import layered_dag
    from diviml.platform import preset
    for seed in range(20):
        rng = random.Random(seed)
        problem = Problem(layered_dag(8, seed=seed), preset("paper-server"), Objective("latency"))
        placement = {t.id: rng.choice(sorted(problem.allowed_devices[t.id])) for t in problem.graph.tasks}
        overlapped = latency(problem, placement)
        order = {d: [j.task for j in sorted(overlapped.jobs, key=lambda j: j.start) if j.device == d]
                 for d in problem.platform.by_name}
        assert latency(receiving(problem), placement, order).makespan >= overlapped.makespan * (1 - 1e-12)


def test_batch_parts_receive_only_the_rows_they_read_once_per_device():
    g = graph({"a": ({"x": 1, "y": 1}, 1), "b": ({"x": 1, "y": 1}, 0), "c": ({"x": 1, "y": 1}, 0)},
              [("a", "b"), ("a", "c")])
    p = receiving(Problem(g, two_device_platform(), Objective("batch", batch_size=8)))
    # a all on P1 (8 s; a byte a sample); b's two halves and c's first half on P2
    s = schedule(p, {"a": [("P1", 8)], "b": [("P2", 4), ("P2", 4)], "c": [("P2", 4), ("P1", 4)]},
                 order={"P1": [("a", 0), ("c", 1)], "P2": [("b", 0), ("b", 1), ("c", 0)]})
    got = {(j.task, j.offset): j.receive for j in s.jobs}
    assert got == {("a", 0): 0, ("b", 0): 4, ("b", 4): 4, ("c", 0): 0, ("c", 4): 0}  # c's rows 0-3: on P2 already
