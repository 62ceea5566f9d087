"""The priced segments baseline: the memory segments bound's placements, spliced and packed by HEFT, make a
valid plan that puts memory where it costs least time, which HEFT's earliest-finish greed does not."""

import sys
from pathlib import Path

import pytest
from conftest import graph

import diviml
from diviml import Device, Link, Objective, Platform, Problem
from diviml.bounds import Relaxation, lower_bound, memory_segments_relaxation
from diviml.solvers.baselines.priced_segments import _fillable, _fit, _refilled, priced_segments_plan
from diviml.solvers.engines.plans import Stopwatch
from diviml.validate import validate

sys.path.insert(0, str(Path(__file__).parents[1] / "bounds"))
from test_segments import _platform, _random_problem  # noqa: E402


def test_memory_goes_to_the_tasks_that_are_slow_without_the_fast_device():
    # a chain alternating light tasks (1 s fast, 1.2 s slow) and heavy ones (1 s fast, 10 s slow), 10 bytes
    # each; the fast device holds four. HEFT fills it with the first four and leaves two heavy tasks to the
    # slow device (26.4 s); the bound's placement gives it the four heavy ones (8.87 s with the transfers)
    spec = {f"t{i}": ({"x": 1.2 if i % 2 == 0 else 10.0, "y": 1.0}, 1.0) for i in range(8)}
    g = graph(spec, [(f"t{i}", f"t{i + 1}") for i in range(7)], **{t: {"memory_bytes": 10.0} for t in spec})
    p = Problem(g, _platform(40.0, bandwidth=100.0), Objective())
    assert diviml.solve(p, "heft", time_limit=10).objective == pytest.approx(26.41)
    lower_bound(p)
    plan = priced_segments_plan(p, Stopwatch(10))
    assert plan is not None and plan.objective == pytest.approx(8.87) and validate(plan, p).ok
    assert {a.task for a in plan.assignments if a.device == "fast"} == {"t1", "t3", "t5", "t7"}


def test_a_task_moved_off_a_full_kind_pays_the_transfers_it_makes():
    # a -> n -> b, all placed on the fast device, 0.05 bytes over its memory; every transfer takes 5 s. The
    # norm n (0.1 bytes) runs faster on the slow device (0.5 s against 1 s), but moving it there sends a's
    # output out and n's back (10 s, 12.5 s in all); moving a (10 bytes, 3 s there against 1 s) costs one
    # transfer (10 s in all). Priced by time alone, n went first (GPT-3's layer norms crossed servers so)
    spec = {"a": ({"x": 3, "y": 1}, 1.0), "n": ({"x": 0.5, "y": 1}, 1.0), "b": ({"x": 3, "y": 1}, 1.0)}
    g = graph(spec, [("a", "n"), ("n", "b")], a={"memory_bytes": 10.0}, n={"memory_bytes": 0.1},
              b={"memory_bytes": 10.0})
    p = Problem(g, _platform(20.05, bandwidth=0.2), Objective())
    moved = _fit(p, {"a": "y", "n": "y", "b": "y"}, {"x": ("slow",), "y": ("fast",)}, {"x": 1e12, "y": 20.05})
    assert moved == {"a": "x", "n": "y", "b": "y"}


def test_a_kind_holds_what_whole_tasks_can_fill_of_its_memory_not_its_summed_bytes():
    # three 6-byte tasks in a chain (1 s on a fast device, 10 s on the slow one) and two fast devices of 10 bytes:
    # 20 bytes pooled, but each holds one task. Held to its summed bytes, the fast kind kept all three (18 of 20
    # bytes: within every margin down to 90%) and HEFT could not pack them; held to the 12 bytes whole tasks can
    # fill, one moves to the slow device (GPT-3's prefill over six-servers: the A100s hold 319.56 of 320 GB)
    spec = {t: ({"x": 10.0, "y": 1.0}, 1.0) for t in "abc"}
    g = graph(spec, [("a", "b"), ("b", "c")], **{t: {"memory_bytes": 6.0} for t in spec})
    link = Link(1e12, 0.0)
    platform = Platform((Device("slow", "x", 1e12, "s0", True), Device("fast0", "y", 10.0, "s0", False, link),
                         Device("fast1", "y", 10.0, "s0", False, link)), "test")
    p = Problem(g, platform, Objective())
    kinds = {"x": ("slow",), "y": ("fast0", "fast1")}
    fillable = _fillable(p, kinds, Stopwatch(10))
    assert fillable == {"x": 1e12, "y": pytest.approx(12.0, rel=1e-5)}  # 12 bytes and a hair of solver tolerance
    assert sorted(_fit(p, {t: "y" for t in "abc"}, kinds, fillable).values()) == ["x", "y", "y"]
    lower_bound(p)
    plan = priced_segments_plan(p, Stopwatch(10))
    assert plan is not None and validate(plan, p).ok and plan.objective == pytest.approx(12.0)


def test_memory_a_device_has_left_takes_the_tasks_that_save_most_there():
    # the fast device holds a (10 bytes) and has 15 bytes left; b (10 bytes, 3 s slow / 1 s fast) and c (10
    # bytes, 5 s / 1 s) wait on the slow one: c saves more per byte and moves; b no longer fits and stays
    spec = {"a": ({"x": 3, "y": 1}, 1.0), "b": ({"x": 3, "y": 1}, 1.0), "c": ({"x": 5, "y": 1}, 1.0)}
    g = graph(spec, [("a", "b"), ("b", "c")], **{t: {"memory_bytes": 10.0} for t in spec})
    p = Problem(g, _platform(25.0), Objective())
    assert _refilled(p, {"a": "fast", "b": "slow", "c": "slow"}) == ({"a": "fast", "b": "slow", "c": "fast"}, 1)
    assert _refilled(p, {"a": "fast", "b": "fast", "c": "slow"}) == ({"a": "fast", "b": "fast", "c": "slow"}, 0)
    grouped = Problem(graph(spec, [("a", "b"), ("b", "c")], **{t: {"memory_bytes": 10.0, "colocation": "g"}
                                                               for t in "bc"}, a={"memory_bytes": 10.0}),
                      _platform(25.0), Objective())
    assert _refilled(grouped, {"a": "fast", "b": "slow", "c": "slow"})[1] == 0  # c keeps with b


def test_nothing_without_the_bounds_placements():
    g = graph({t: ({"x": 3, "y": 1}, 0.0) for t in "ab"}, [("a", "b")], a={"memory_bytes": 10.0})
    roomy = Problem(g, _platform(100.0), Objective())
    lower_bound(roomy)  # memory does not bind: the bound does not run
    assert memory_segments_relaxation(roomy) is None and priced_segments_plan(roomy, Stopwatch(10)) is None
    assert priced_segments_plan(Problem(g, _platform(5.0), Objective()), Stopwatch(10)) is None  # not yet bounded


@pytest.mark.parametrize("seed", range(8))
def test_its_plans_are_valid_and_no_better_than_the_bound(seed):
    p = _random_problem(seed)
    bound = lower_bound(p)
    plan = priced_segments_plan(p, Stopwatch(10))
    if plan is not None:
        assert validate(plan, p).ok and plan.objective >= bound * (1 - 1e-9)


@pytest.mark.parametrize("seed", [1, 4, 5, 10])
def test_it_keeps_the_best_plan_of_the_bounds_last_mixes(seed):
    # a later mix of the bound's master is not always the better plan (GPT-3 over six-servers: the last gives
    # 25.44 s, the one before 24.98 s; seeds 4 and 10 here: an earlier mix's plan is 2-3% better), so each is
    # tried and the best kept
    p = _random_problem(seed)
    lower_bound(p)
    relaxation = memory_segments_relaxation(p)
    assert relaxation is not None and len(relaxation.mixes) >= 2
    plan = priced_segments_plan(p, Stopwatch(10))
    assert plan is not None
    for mix in relaxation.mixes:
        p.__dict__["memory_segments"] = Relaxation((mix,), relaxation.kinds)
        alone = priced_segments_plan(p, Stopwatch(10))
        assert alone is None or plan.objective <= alone.objective * (1 + 1e-9)
