"""Job graphs: re-timing a placement and device order as early as possible."""

import pytest
from conftest import graph, two_device_platform

from diviml import Problem
from diviml.solvers.engines.jobs import JobGraph


def problem():
    # a -> c, b -> c; a and b take 2 on P1 (type x) and 3 on P2 (type y); c takes 1; outputs cost 4 to send
    spec = {t: ({"x": 2.0, "y": 3.0}, 4.0) for t in "ab"} | {"c": ({"x": 1.0, "y": 1.0}, 0.0)}
    return Problem(graph(spec, [("a", "c"), ("b", "c")]), two_device_platform())


def test_retime_runs_each_device_in_the_given_order_after_its_producers_outputs_arrive():
    jobs = JobGraph.whole(problem())
    device_of = {("a", 0): "P1", ("b", 0): "P2", ("c", 0): "P1"}
    start, finish = jobs.retime(device_of, {("a", 0): 0.0, ("b", 0): 0.0, ("c", 0): 5.0})
    assert start == {("a", 0): 0.0, ("b", 0): 0.0, ("c", 0): pytest.approx(3.0 + 4.0)}  # b's output sent to P1
    assert finish[("c", 0)] == pytest.approx(8.0)


def test_retime_follows_the_order_key_on_a_device_and_breaks_ties_by_topological_position():
    jobs = JobGraph.whole(problem())
    on_p1 = {("a", 0): "P1", ("b", 0): "P1", ("c", 0): "P1"}
    start, _ = jobs.retime(on_p1, {("a", 0): 7.0, ("b", 0): 1.0, ("c", 0): 9.0})
    assert (start[("b", 0)], start[("a", 0)], start[("c", 0)]) == (0.0, 2.0, 4.0)
    start, _ = jobs.retime(on_p1, {("a", 0): 0.0, ("b", 0): 0.0, ("c", 0): 0.0})
    assert (start[("a", 0)], start[("b", 0)]) == (0.0, 2.0)


def test_retime_starts_a_sub_problem_job_no_earlier_than_its_release_on_its_device():
    jobs = JobGraph(problem(), (1,), ("a",), release={(("a", 0), "P1"): 5.0})
    start, finish = jobs.retime({("a", 0): "P1"}, {("a", 0): 0.0})
    assert (start[("a", 0)], finish[("a", 0)]) == (5.0, 7.0)
    start, _ = jobs.retime({("a", 0): "P2"}, {("a", 0): 0.0})
    assert start[("a", 0)] == 0.0


def test_an_order_key_never_puts_a_job_before_its_producer():
    # a solver's start times may put c a rounding error before a producer that takes no time (the MILP's
    # tolerance): the device order taken from them still runs a before c, else the simulator finds a deadlock
    jobs = JobGraph.whole(problem())
    key = {("a", 0): 1.0, ("b", 0): 0.0, ("c", 0): 1.0 - 1e-9}
    assert jobs.by_key(key) == [("b", 0), ("a", 0), ("c", 0)]
    on_p1 = {j: "P1" for j in jobs.jobs}
    assert jobs.order(on_p1, key)["P1"] == [("b", 0), ("a", 0), ("c", 0)]
    start, _ = jobs.retime(on_p1, key)
    assert start[("c", 0)] == pytest.approx(4.0)
