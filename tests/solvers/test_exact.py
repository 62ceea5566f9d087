"""Exact latency/batch scheduling: CP-SAT (`exact`) and the MILP (`milp`) against brute force and each other."""

from dataclasses import replace

import pytest
from conftest import brute_force_latency, graph, two_device_platform

import diviml
from diviml import InfeasibleError, Objective, Problem
from diviml.generators import benchmark_device_types, benchmark_platform, layered_dag
from diviml.solvers.engines.jobs import batch_splits
from diviml.solvers.search import promising_splits
from diviml.validate import validate


@pytest.mark.parametrize("seed", range(5))
def test_exact_proves_the_brute_force_optimum_on_small_graphs(seed):
    p = Problem(layered_dag(5, seed=seed), diviml.preset("paper-server"))
    opt = brute_force_latency(p)
    plan = diviml.solve(p, "exact", time_limit=20)
    assert plan.status == "optimal"
    assert plan.objective == pytest.approx(opt, rel=1e-5)  # integer time scale: 10^7 ticks
    assert plan.bound <= opt * (1 + 1e-12)


@pytest.mark.parametrize("seed", range(3))
def test_cp_sat_and_the_milp_agree_on_proven_optima(seed):
    p = Problem(layered_dag(14, seed=seed), diviml.preset("paper-server"))
    a = diviml.solve(p, "exact", time_limit=30)
    for engine in ("highs", "gurobi"):
        b = diviml.solve(p, "milp", time_limit=60, engine=engine)
        assert a.status == b.status == "optimal", (engine, b.notes)
        assert a.objective == pytest.approx(b.objective, rel=1e-5)
        assert b.bound <= a.objective * (1 + 1e-6) and a.bound <= b.objective * (1 + 1e-6)


@pytest.mark.parametrize("seed", range(3))
def test_solving_piece_by_piece_between_series_points_proves_the_brute_force_optimum(seed):
    p = Problem(layered_dag(6, seed=seed), diviml.preset("paper-server"))
    plan = diviml.solve(p, "exact", time_limit=20, piece_size=2)
    assert plan.notes[0].startswith("decomposed at series points")
    assert plan.status == "optimal"
    opt = brute_force_latency(p)
    assert plan.objective == pytest.approx(opt, rel=1e-5)
    assert plan.bound <= opt * (1 + 1e-12)


@pytest.mark.parametrize("seed", range(3))
def test_the_pieces_and_the_whole_model_prove_the_same_optimum(seed):
    p = Problem(layered_dag(60, seed=seed, device_types=benchmark_device_types(3)), benchmark_platform(3))
    pieces = diviml.solve(p, "exact", time_limit=60)
    whole = diviml.solve(p, "exact", time_limit=60, decompose=False)
    assert pieces.notes[0].startswith("decomposed at series points")
    assert not any(n.startswith("decomposed") for n in whole.notes)
    assert pieces.status == whole.status == "optimal"
    assert pieces.objective == pytest.approx(whole.objective, rel=1e-5)
    assert pieces.bound <= whole.objective * (1 + 1e-6) and whole.bound <= pieces.objective * (1 + 1e-6)
    assert validate(pieces, p).ok


def test_pieces_coupled_by_co_location_are_solved_as_one_model():
    g = layered_dag(40, seed=1, device_types=benchmark_device_types(3))
    first, last = g.topological_order[1], g.topological_order[-2]
    tasks = [replace(t, colocation="ends") if t.id in (first, last) else t for t in g.tasks]
    p = Problem(diviml.TaskGraph.create(tasks, g.edges, name=g.name), benchmark_platform(3))
    plan = diviml.solve(p, "exact", time_limit=30)
    assert not any(n.startswith("decomposed") for n in plan.notes)
    assert plan.status == "optimal" and plan.placement[first] == plan.placement[last]


def test_a_short_limit_on_many_pieces_is_not_called_optimal_and_keeps_a_valid_bound():
    p = Problem(layered_dag(320, seed=0, device_types=benchmark_device_types(4)), benchmark_platform(4))
    plan = diviml.solve(p, "exact", time_limit=0.3)  # the pieces need about 0.7 s on 2 cores
    full = diviml.solve(p, "exact", time_limit=60)
    assert full.status == "optimal"
    # not proven: "timeout" where the join ran to the limit, "feasible" where its pace had it given up early
    assert plan.status in ("timeout", "feasible") and validate(plan, p).ok
    assert plan.bound <= full.objective * (1 + 1e-6) and plan.objective >= full.objective * (1 - 1e-6)
    assert plan.solve_time_s < 5


def test_the_exact_plan_is_never_worse_than_the_baselines_and_is_validated():
    p = Problem(layered_dag(60, seed=4), diviml.preset("paper-server"))
    plan = diviml.solve(p, "exact", time_limit=10)
    assert validate(plan, p).ok
    for base in ("heft", "best-device"):
        assert plan.objective <= diviml.solve(p, base, time_limit=5).objective
    assert plan.bound <= plan.objective


def test_a_tiny_time_limit_still_returns_a_valid_plan_with_its_status():
    p = Problem(layered_dag(120, seed=1), diviml.preset("paper-server"))
    plan = diviml.solve(p, "exact", time_limit=0.2)
    # "feasible" where the join's pace had it given up early (as above), which a loaded machine can make it
    assert plan.status in ("timeout", "feasible", "optimal") and validate(plan, p).ok
    assert plan.status != "optimal" or plan.gap <= 1e-6
    assert plan.solve_time_s < 10


def test_memory_limits_are_respected_even_where_heft_fails():
    # three 6-byte tasks on two 12-byte devices: HEFT puts a and b side by side then cannot place c
    g = graph({"a": ({"x": 1, "y": 1}, 0), "b": ({"x": 1, "y": 1}, 0), "c": ({"x": 1, "y": 1}, 0),
               "d": ({"x": 1, "y": 1}, 0)}, [("a", "d"), ("b", "d"), ("c", "d")],
              a={"memory_bytes": 6.0}, b={"memory_bytes": 6.0}, c={"memory_bytes": 6.0}, d={"memory_bytes": 6.0})
    plat = two_device_platform()
    plat = replace(plat, devices=tuple(replace(d, memory_bytes=12.0) for d in plat.devices))
    p = Problem(g, plat, Objective())
    for solver in ("exact", "milp"):
        plan = diviml.solve(p, solver, time_limit=10)
        assert validate(plan, p).ok
        assert sorted(plan.placement.values()).count("P1") == 2


def test_infeasible_memory_is_reported():
    g = graph({x: ({"x": 1, "y": 1}, 0) for x in "abc"}, [("a", "b"), ("a", "c")],
              a={"memory_bytes": 7.0, "colocation": "g"}, b={"memory_bytes": 7.0, "colocation": "g"},
              c={"memory_bytes": 1.0})
    plat = two_device_platform()
    plat = replace(plat, devices=tuple(replace(d, memory_bytes=10.0) for d in plat.devices))
    with pytest.raises(InfeasibleError, match="co-location group 'g'"):
        Problem(g, plat, Objective())


@pytest.mark.parametrize("symmetry", ["none", "tasks", "busy"])
def test_symmetry_breaking_keeps_the_optimum(symmetry):
    platform = diviml.Platform.from_dict({"devices": [
        {"name": "cpu", "type": "cpu", "host": True},
        {"name": "gpu", "type": "a100", "count": 3, "memory": 40e9, "link": {"bandwidth": 16e9, "latency": 1e-5}}]})
    p = Problem(layered_dag(12, seed=3, device_types=("cpu", "a100")), platform)
    assert platform.identical_groups == (("gpu0", "gpu1", "gpu2"),)
    ref = diviml.solve(p, "exact", time_limit=30, symmetry="none")
    plan = diviml.solve(p, "exact", time_limit=30, symmetry=symmetry)
    assert plan.status == ref.status == "optimal"
    assert plan.objective == pytest.approx(ref.objective, rel=1e-5)
    milp = diviml.solve(p, "milp", time_limit=60, symmetry=symmetry, engine="highs")
    assert milp.objective == pytest.approx(ref.objective, rel=1e-5)


@pytest.mark.parametrize("symmetry", ["tasks+servers", "busy+servers"])
def test_identical_servers_in_order_keep_the_optimum(symmetry):
    from conftest import two_servers
    platform = two_servers()
    assert len(platform.identical_servers) == 1
    p = Problem(layered_dag(14, seed=5, device_types=("cpu", "a100"), ccr=(0.01, 0.1)), platform)
    ref = diviml.solve(p, "exact", time_limit=60, symmetry="none", decompose=False)
    plan = diviml.solve(p, "exact", time_limit=60, symmetry=symmetry, decompose=False)
    assert plan.status == ref.status == "optimal"
    assert plan.objective == pytest.approx(ref.objective, rel=1e-5)
    weight = {a.task: 1.0 if symmetry.startswith("tasks") else p.time(a.task, a.device) for a in plan.assignments}
    on = {s: sum(weight[a.task] for a in plan.assignments if a.device.startswith(s)) for s in ("s0", "s1")}
    assert on["s0"] >= on["s1"] - 1e-6  # the first of identical servers at least as loaded
    milp = diviml.solve(p, "milp", time_limit=60, symmetry=symmetry, engine="highs")
    assert milp.objective == pytest.approx(ref.objective, rel=1e-5)


def test_batch_plans_split_the_batch_and_beat_the_best_single_device():
    p = Problem(layered_dag(16, seed=2), diviml.preset("paper-server"), Objective("batch", batch_size=16))
    plan = diviml.solve(p, "exact", time_limit=8)
    assert validate(plan, p).ok
    single = diviml.solve(p, "best-device", time_limit=5)
    assert plan.objective <= diviml.solve(p, "heft", time_limit=5).objective
    assert plan.stats["speedup_vs_best_device"] == pytest.approx(single.objective / plan.objective)
    assert plan.bound <= plan.objective


def test_a_batch_split_far_behind_the_best_under_heft_is_not_searched():
    # costs flat in the batch size (launch-bound): splitting the batch only multiplies the work
    g = layered_dag(30, seed=1)
    flat = [replace(t, time_by_batch={dt: {b: t.time[dt] for b in table} for dt, table in t.time_by_batch.items()})
            for t in g.tasks]
    launch_bound = Problem(diviml.TaskGraph.create(flat, g.edges), diviml.preset("paper-server"),
                           Objective("batch", batch_size=8))
    promising = promising_splits(launch_bound)
    assert promising[0] == (8,) and {(4, 4), (3, 3, 2)}.isdisjoint(promising)  # near-equal splits: far behind
    assert len(promising) < len(batch_splits(launch_bound))
    plan = diviml.solve(launch_bound, "exact", time_limit=10)
    searched = "; ".join("/".join(map(str, s)) for s in promising)
    assert any(f"splits searched: {searched};" in n for n in plan.notes) and validate(plan, launch_bound).ok
    # with costs that grow with the batch, every split is close and all are searched, best first
    scaling = Problem(g, diviml.preset("paper-server"), Objective("batch", batch_size=8))
    assert sorted(promising_splits(scaling)) == sorted(batch_splits(scaling))
    from diviml.solvers.baselines.heft import heft_schedule
    from diviml.solvers.engines.jobs import JobGraph
    values = [heft_schedule(JobGraph(scaling, s))[2] for s in promising_splits(scaling)]
    assert values == sorted(values)


def test_the_heft_runs_that_rank_the_batch_splits_keep_to_their_share_of_the_time():
    from diviml.solvers.engines.plans import Stopwatch
    problem = Problem(layered_dag(30, seed=1), diviml.preset("paper-server"), Objective("batch", batch_size=8))
    # no time left: the whole batch alone is ranked (its HEFT is the cheapest), none of the splits after it
    assert promising_splits(problem, Stopwatch(0.0)) == [(8,)]
    assert len(promising_splits(problem, Stopwatch(60.0))) == len(batch_splits(problem))


def test_a_ranking_whose_share_cannot_pay_for_the_whole_batch_s_heft_runs_none(monkeypatch):
    # 3,000 tasks: the whole batch's HEFT alone (about 0.3 s at the baselines' rate per task) is more than a
    # tenth of 0.5 s; ranking it alone would only say "the whole batch", which no ranking says too
    from diviml.generators import random_dag
    from diviml.solvers import search
    from diviml.solvers.engines.plans import Stopwatch

    def unexpected(jobs):
        raise AssertionError("HEFT ran on a split the share could not pay for")
    monkeypatch.setattr(search.heft, "heft_schedule", unexpected)
    problem = Problem(random_dag(3000, seed=20), diviml.preset("paper-server"), Objective("batch", batch_size=4))
    assert promising_splits(problem, Stopwatch(0.5)) == [(4,)]


def test_gurobi_size_limit_is_said_in_one_line_and_highs_solves_instead():
    from diviml.solvers.engines.linear import LinearModel, solve_linear
    m = LinearModel()
    xs = [m.binary(cost=-1.0) for _ in range(2500)]
    m.row([(x, 1.0) for x in xs], upper=3.0)
    r = solve_linear(m, time_limit=20, engine="gurobi")
    assert r.engine == "highs" and "size-limited" in r.note and "\n" not in r.note
    assert r.status == "optimal" and r.objective == pytest.approx(-3.0)


def test_a_task_that_takes_no_time_runs_before_a_long_one_that_starts_with_it():
    # a feeds a long task b and a free task z on P1; z's output (1 s to send) feeds w on P2. CP-SAT starts b
    # and z together; run in that tie's topological order, z waited for b (makespan 12) where the model's
    # schedule sends z's output at once (7), and exact called the slower plan optimal
    x = frozenset({"x"})
    spec = {"a": ({"x": 1.0}, 0.0), "b": ({"x": 5.0}, 0.0), "z": ({"x": 0.0}, 1.0), "w": ({"y": 5.0}, 0.0)}
    g = graph(spec, [("a", "b"), ("a", "z"), ("z", "w")], z={"allowed_types": x})
    problem = Problem(g, two_device_platform(), Objective("latency"))
    for solver in ("exact", "milp"):
        plan = diviml.solve(problem, solver, time_limit=20)
        assert plan.objective == pytest.approx(7.0) and plan.status == "optimal"
