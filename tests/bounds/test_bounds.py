from itertools import product

import pytest
from conftest import graph, two_device_platform

import diviml
from diviml import Objective, Problem
from diviml.bounds import critical_path_bound, lower_bound, memory_path_bound, work_bound
from diviml.generators import layered_dag, random_dag
from diviml.simulate import pipeline_loads


def test_critical_path_uses_each_tasks_fastest_device_and_free_transfers():
    g = graph({"a": ({"x": 2, "y": 3}, 100), "b": ({"x": 3, "y": 1}, 0)}, [("a", "b")])
    assert critical_path_bound(Problem(g, two_device_platform(), Objective())) == 3


def test_work_bound_is_the_balanced_fractional_load():
    g = graph({x: ({"x": 1, "y": 1}, 0) for x in "abcd"}, [])
    assert work_bound(Problem(g, two_device_platform(), Objective())) == pytest.approx(2.0, rel=1e-5)


@pytest.mark.parametrize("preset, kind", [("six-servers", "batch"), ("six-servers", "latency"),
                                          ("a100-ib-2x8", "pipeline"), ("paper-server", "latency")])
def test_the_work_lp_over_kinds_of_alike_devices_is_the_lp_over_every_device(preset, kind, monkeypatch):
    # alike devices share one column per class: the LP's value must be that of a column per device
    from diviml.bounds import _simple
    platform = diviml.preset(preset)
    graph = random_dag(60, seed=3, device_types=tuple(sorted(platform.device_types)))
    problem = Problem(graph, platform, Objective(kind, 4 if kind == "batch" else 1))
    grouped, kinds = work_bound(problem), _simple.alike_devices(problem)
    monkeypatch.setattr(_simple, "alike_devices", lambda p: tuple((k,) for k in range(len(p.platform.devices))))
    every_device = work_bound(Problem(graph, platform, Objective(kind, 4 if kind == "batch" else 1)))
    assert grouped == pytest.approx(every_device, rel=1e-7) and grouped > 0
    assert preset == "paper-server" or len(kinds) < len(platform.devices)


@pytest.mark.parametrize("seed", range(4))
def test_the_bound_never_exceeds_the_exhaustive_pipeline_optimum(seed):
    g = layered_dag(7, seed=seed)
    p = Problem(g, diviml.preset("paper-server"), Objective("pipeline"))
    devices = [d.name for d in p.platform.devices]
    best = min(pipeline_loads(p, dict(zip(g.topological_order, combo))).objective
               for combo in product(devices, repeat=len(g)))
    assert lower_bound(p) <= best + 1e-12


@pytest.mark.parametrize("kind", ["latency", "batch", "pipeline"])
def test_every_baseline_plan_carries_a_bound_no_larger_than_its_value(kind):
    p = Problem(layered_dag(30, seed=3), diviml.preset("paper-server"), Objective(kind))
    for solver in ("best-device", "greedy") + (("heft",) if kind != "pipeline" else ()):
        plan = diviml.solve(p, solver, time_limit=10)
        assert 0 < plan.bound <= plan.objective
        assert plan.gap == pytest.approx((plan.objective - plan.bound) / plan.objective)


def test_an_lp_bound_that_gets_no_time_is_dropped_and_the_cheap_bound_stands():
    from diviml.bounds import energetic_bound, path_work_bound, segment_schedules_bound
    from diviml.generators import benchmark_platform
    graph = layered_dag(200, seed=1)

    def problem():
        return Problem(graph, benchmark_platform(2), Objective("latency"))

    assert work_bound(problem(), time_limit=0.0) == 0.0 and path_work_bound(problem(), time_limit=0.0) == 0.0
    hurried, patient = lower_bound(problem(), time_limit=0.0), lower_bound(problem())
    assert hurried == critical_path_bound(problem()) > 0
    simple = max(critical_path_bound(problem()), path_work_bound(problem()), work_bound(problem()),
                 memory_path_bound(problem()))
    simple = max(simple, segment_schedules_bound(problem(), floor=simple))
    assert patient >= hurried and patient == max(simple, energetic_bound(problem(), floor=simple))


def _memory_platform(fast_memory: float) -> diviml.Platform:
    """A fast device of little memory and a slow one of plenty, on one host (free transfers)."""
    from diviml import Device, Link, Platform
    return Platform((Device("slow", "x", 1e12, "s", True), Device("fast", "y", fast_memory, "s", False, Link(1e12))))


def test_memory_path_bound_prices_the_layers_that_must_run_on_the_slow_device():
    g = graph({f"l{i}": ({"x": 3, "y": 1}, 0) for i in range(4)}, [(f"l{i}", f"l{i + 1}") for i in range(3)],
              **{f"l{i}": {"memory_bytes": 10.0} for i in range(4)})
    p = Problem(g, _memory_platform(20.0), Objective())  # two of the four layers fit on the fast device
    assert critical_path_bound(p) == 4
    assert memory_path_bound(p) == pytest.approx(2 * 1 + 2 * 3, rel=1e-5)
    assert diviml.solve(p, "exact", time_limit=10).objective == pytest.approx(8)


@pytest.mark.parametrize("seed", range(12))
def test_memory_path_bound_never_exceeds_the_proven_optimum(seed):
    import random
    rng = random.Random(seed)
    g = layered_dag(rng.randint(4, 9), seed=seed, device_types=("x", "y"))
    tasks = [diviml.Task(t.id, {"x": rng.uniform(2, 5) * t.time["y"], "y": t.time["y"]}, output_bytes=t.output_bytes,
                         memory_bytes=float(rng.choice([0, 1, 2, 4]))) for t in g.tasks]  # y faster, x roomier
    g = diviml.TaskGraph.create(tasks, g.edges)
    total = sum(t.memory_bytes for t in g.tasks)
    p = Problem(g, _memory_platform(max(4.0, total * rng.uniform(0.2, 0.6))), Objective())
    best = diviml.solve(p, "exact", time_limit=20)
    assert best.status == "optimal"
    assert memory_path_bound(p) <= best.objective * (1 + 1e-9)


def test_the_path_work_lp_is_not_tried_when_its_measured_cost_exceeds_its_share():
    from diviml.bounds import path_work_bound, path_work_seconds
    p = Problem(layered_dag(60, seed=2), diviml.preset("paper-server"), Objective("latency"))
    needs = path_work_seconds(len(p.graph.edges), len(p.graph), len(p.platform.devices))
    assert path_work_bound(p, time_limit=needs / 2) == 0.0  # dropped without being tried
    assert path_work_bound(p, time_limit=needs * 100) > critical_path_bound(p) * 0.99
    # GPT-3 on six servers (about 6,000 tasks and 7,000 edges on 26 devices) would outlast a minute's solve
    assert path_work_seconds(7000, 6000, 26) > 60


@pytest.mark.parametrize("seed", range(4))
def test_the_spread_point_is_a_feasible_point_of_the_path_work_lp_so_never_below_it(seed):
    from diviml.bounds import path_work_bound
    from diviml.bounds._latency import spread_point_value
    for make in (layered_dag, random_dag):
        p = Problem(make(24, seed=seed), diviml.preset("paper-server"), Objective("latency"))
        assert spread_point_value(p) >= path_work_bound(p) * (1 - 1e-6) > 0


def test_the_path_work_lp_is_skipped_where_its_feasible_point_shows_it_cannot_lift_the_bound():
    from diviml.bounds import path_work_bound
    from diviml.bounds._latency import spread_point_value
    two_gpus = diviml.Platform((diviml.Device("g0", "gpu", link=diviml.Link(16e9, 1e-5)),
                                diviml.Device("g1", "gpu", link=diviml.Link(16e9, 1e-5))))
    chain = diviml.TaskGraph.create([diviml.Task(f"t{i}", {"gpu": 1.0}) for i in range(6)],
                                    [(f"t{i}", f"t{i + 1}") for i in range(5)])
    p = Problem(chain, two_gpus, Objective("latency"))
    assert spread_point_value(p) == pytest.approx(6.0) == critical_path_bound(p)  # a chain spread evenly
    assert path_work_bound(p, floor=critical_path_bound(p)) == 0.0 < path_work_bound(p)
    q = Problem(layered_dag(24, seed=1), diviml.preset("paper-server"), Objective("latency"))
    assert path_work_bound(q, floor=critical_path_bound(q)) == path_work_bound(q)  # where it may lift, it runs


@pytest.mark.parametrize("seed", range(8))
def test_where_the_receiver_spends_transfers_every_bound_stays_below_the_brute_force_optimum(seed):
    # the bounds price the overlapped model, whose schedules are never longer: they hold for the receiver's
    from dataclasses import replace

    from conftest import brute_force_latency
    platform = replace(diviml.preset("paper-server" if seed % 2 else "cpu-workers-2"), transfers="receiver")
    g = layered_dag(5, seed=seed, device_types=tuple(sorted(platform.device_types)))
    if seed % 4 == 0:  # microsecond tasks, where the workers' crossings (75 us) decide
        g = diviml.TaskGraph.create([replace(t, time={k: v * 1e-3 for k, v in t.time.items()}) for t in g.tasks],
                                    g.edges)
    p = Problem(g, platform, Objective("latency"))
    optimum = brute_force_latency(p)
    assert lower_bound(p, 5.0) <= optimum * (1 + 1e-9)
    plan = diviml.solve(p, "exact", time_limit=10)
    assert plan.bound <= optimum * (1 + 1e-9) <= plan.objective * (1 + 2e-9)
