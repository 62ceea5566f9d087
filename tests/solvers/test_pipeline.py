"""Pipeline (max-load) partitioning on the NeurIPS 2020 graphs: the DP and IP against the published optima."""

import math
import time
from dataclasses import replace
from itertools import product

import pytest

import diviml
from diviml import Device, InputError, Link, Objective, Platform, Problem, Task, TaskGraph
from diviml.generators import layered_dag
from diviml.simulate import pipeline_loads
from diviml.solvers.pipeline.common import Contracted
from diviml.validate import validate

REFERENCE = {  # optimal contiguous max-load, the authors' DP (shared/data/tarnawski2020/README.md)
    "LayerGraphs/bert24_inference": 17.78990625,
    "LayerGraphs/bert24_training": 41.7458125,
    "LayerGraphs/resnet50_inference": 33.774666015625,
    "LayerGraphs/resnet50_training": 78.63181250000001,
    "OperatorGraphs/bert_l-3_inference": 27.9185676799125,
    "OperatorGraphs/resnet50_inference": 124.34884977404485,
    "OperatorGraphs/bert_l-3_training": 65.30314912208605,  # 51M ideal pairs: seconds with the compiled walk
}
NON_CONTIGUOUS = {"LayerGraphs/bert24_training": 39.7895388794, "OperatorGraphs/bert_l-3_inference": 21.9083761057}


def scenario(data_dir, name, **objective):
    return diviml.load_problem(data_dir / "throughput-inputs" / f"{name}.json",
                               objective=Objective("pipeline", **objective))


@pytest.mark.parametrize("name", sorted(REFERENCE))
def test_the_dp_reproduces_the_published_contiguous_optima(data_dir, name):
    p = scenario(data_dir, name, contiguous=True)
    plan = diviml.solve(p, "dp", time_limit=120)
    assert plan.objective == pytest.approx(REFERENCE[name], rel=1e-9)
    assert plan.status == "optimal" and validate(plan, p).ok


@pytest.mark.parametrize("name", [pytest.param(n, marks=pytest.mark.slow) if "training" in n else n
                                  for n in sorted(NON_CONTIGUOUS)])
def test_the_non_contiguous_ip_reaches_the_known_optima_below_the_contiguous_ones(data_dir, name):
    p = scenario(data_dir, name)
    plan = diviml.solve(p, "ip", time_limit=120, engine="highs")
    assert plan.status == "optimal" and validate(plan, p).ok
    assert plan.objective == pytest.approx(NON_CONTIGUOUS[name], rel=1e-6)
    assert plan.objective <= REFERENCE[name]


@pytest.mark.parametrize("seed", range(3))
def test_the_contiguous_ip_agrees_with_the_dp(seed):
    p = Problem(layered_dag(14, seed=seed), diviml.preset("paper-server"), Objective("pipeline", contiguous=True))
    dp = diviml.solve(p, "dp", time_limit=30)
    ip = diviml.solve(p, "ip", time_limit=30, engine="highs")
    assert ip.status == "optimal" and validate(ip, p).ok
    assert ip.objective == pytest.approx(dp.objective, rel=1e-6)


@pytest.mark.parametrize("solver", ["dp", "ip", "pipedream", "greedy", "local-search", "partitioner"])
def test_a_contiguous_split_runs_its_stages_in_one_order_even_where_two_convex_sets_would_be_faster(solver):
    """x1 and y2 are fast on P1, x2 and y1 on P2: {x1, y2} and {x2, y1} are convex (load 2 each) but pass
    tensors both ways; a split whose stages run in one order puts a slow task on each device ({x1, y1} then
    {x2, y2}: load 11)."""
    fast, slow = {"x": 1.0, "y": 10.0}, {"x": 10.0, "y": 1.0}
    g = TaskGraph.create([Task("x1", fast), Task("x2", slow), Task("y1", slow), Task("y2", fast)],
                         [("x1", "x2"), ("y1", "y2")])
    two = Platform((Device("P1", "x", math.inf, "s", False, Link(1.0, 0.0)),
                    Device("P2", "y", math.inf, "s", False, Link(1.0, 0.0))))
    p = Problem(g, two, Objective("pipeline", contiguous=True))
    plan = diviml.solve(p, solver, time_limit=10, seed=1)
    assert validate(plan, p).ok and plan.objective >= 11.0 * (1 - 1e-9)
    if solver in ("dp", "ip"):
        assert plan.status == "optimal" and plan.objective == pytest.approx(11.0)
    assert diviml.solve(replace(p, objective=Objective("pipeline")), "ip", time_limit=10).objective == pytest.approx(2.0)
    linked = replace(p, platform=replace(p.platform, peer_links={frozenset(("P1", "P2")): Link(1.0, 0.0)}))
    plan = diviml.solve(linked, "ip", time_limit=10, engine="highs")  # the DP does not take a peer link: the IP's rows
    assert plan.status == "optimal" and plan.objective == pytest.approx(11.0) and validate(plan, linked).ok


def brute_force(p: Problem, contiguous: bool) -> float:
    from diviml.validate import contiguity_violations
    devices = [d.name for d in p.platform.devices]
    best = float("inf")
    for combo in product(devices, repeat=len(p.graph)):
        placement = dict(zip(p.graph.topological_order, combo))
        if contiguous and contiguity_violations(p, placement):
            continue
        if any(d not in p.allowed_devices[t] for t, d in placement.items()):
            continue
        best = min(best, pipeline_loads(p, placement).objective)
    return best


@pytest.mark.parametrize("seed", range(3))
def test_dp_and_ip_are_exact_on_small_random_graphs(seed):
    g = layered_dag(7, seed=seed)
    p = Problem(g, diviml.preset("paper-server"), Objective("pipeline", contiguous=True))
    opt = brute_force(p, contiguous=False)
    assert diviml.solve(replace(p, objective=Objective("pipeline")), "ip", time_limit=60,
                        engine="highs").objective == pytest.approx(opt, rel=1e-9)
    dp = diviml.solve(p, "dp", time_limit=60)
    assert opt <= dp.objective * (1 + 1e-12)
    assert dp.objective == pytest.approx(brute_force(p, contiguous=True), rel=1e-9)


@pytest.mark.parametrize("seed", range(3))
def test_the_contiguous_ip_is_exact_where_the_dp_cannot_run(seed):
    """A peer link between the GPUs: the DP (transfers staged through one host) does not take the platform, so
    the IP's own contiguity rows, each set convex and the stages in one order, decide the split."""
    paper = diviml.preset("paper-server")
    linked = replace(paper, peer_links={frozenset(("v100", "a100")): Link(50e9, 2e-6)})
    p = Problem(layered_dag(7, seed=seed), linked, Objective("pipeline", contiguous=True))
    with pytest.raises(InputError, match="one host"):
        diviml.solve(p, "dp", time_limit=10)
    ip = diviml.solve(p, "ip", time_limit=60, engine="highs")
    assert ip.status == "optimal" and validate(ip, p).ok
    assert ip.objective == pytest.approx(brute_force(p, contiguous=True), rel=1e-9)


@pytest.mark.parametrize("seed", range(6))
def test_the_dp_never_places_a_task_where_it_may_not_run(seed):
    # tasks barred from the CPU: the walk's running compute once summed their inf, and a class leaving the set
    # left inf - inf = nan behind, a load that passed every comparison (a barred task landed on the CPU)
    g = layered_dag(7, seed=seed)
    gpus = frozenset(t for t in g.tasks[0].time if t != "cpu")
    barred = TaskGraph.create([replace(t, allowed_types=gpus) if k % 3 == seed % 3 else t
                               for k, t in enumerate(g.tasks)], list(g.edges))
    p = Problem(barred, diviml.preset("paper-server"), Objective("pipeline", contiguous=True))
    dp = diviml.solve(p, "dp", time_limit=60)
    assert validate(dp, p).ok
    assert dp.objective == pytest.approx(brute_force(p, contiguous=True), rel=1e-9)


@pytest.mark.parametrize("seed", range(2))
def test_dangling_zero_cost_nodes_do_not_multiply_the_ideals_nor_change_the_optimum(seed):
    # a chain with free sinks hanging off it, as NeurIPS GNMT has: each sink alone would double the ideals
    from diviml import Task, TaskGraph
    g = layered_dag(6, seed=seed)
    chain = list(g.topological_order)
    sinks = [Task(id=f"free{k}", time={ty: 0.0 for ty in g.tasks[0].time}, output_bytes=0.0)
             for k in range(12)]
    graph = TaskGraph.create(list(g.tasks) + sinks,
                             list(g.edges) + [(chain[k % len(chain)], s.id) for k, s in enumerate(sinks)])
    p = Problem(graph, diviml.preset("paper-server"), Objective("pipeline", contiguous=True))
    dp = diviml.solve(p, "dp", time_limit=60)
    ip = diviml.solve(p, "ip", time_limit=60, engine="highs")
    assert ip.status == "optimal" and dp.objective == pytest.approx(ip.objective, rel=1e-6)
    assert dp.stats["ideals"] <= 2 ** 6


@pytest.mark.parametrize("solver", ["local-search", "pipedream", "partitioner", "greedy", "best-device"])
def test_baselines_give_valid_plans_no_better_than_the_exact_optimum(data_dir, solver):
    p = scenario(data_dir, "LayerGraphs/bert24_inference")
    plan = diviml.solve(p, solver, time_limit=5, seed=1)
    assert validate(plan, p).ok
    assert plan.objective >= NON_CONTIGUOUS.get("LayerGraphs/bert24_inference", 17.7) * (1 - 1e-9)


def test_pipedream_chain_split_is_contiguous_and_no_better_than_the_dp(data_dir):
    p = scenario(data_dir, "LayerGraphs/resnet50_inference", contiguous=True)
    chain = diviml.solve(p, "pipedream", time_limit=30)
    assert validate(chain, p).ok
    assert chain.objective >= REFERENCE["LayerGraphs/resnet50_inference"] * (1 - 1e-9)


def test_pipedream_splits_a_wide_graph_in_seconds_and_past_its_time_gives_the_greedy_plan_saying_so():
    """Segment loads kept up to date as a segment grows: inception_v3's 314 classes took 10 s to price one
    segment at a time and the baseline gave no plan at all; where the DP still does not finish, the greedy
    contiguous plan comes back, status timeout, within the limit."""
    wide = Problem(layered_dag(300, seed=4), diviml.preset("paper-server"), Objective("pipeline", contiguous=True))
    plan = diviml.solve(wide, "pipedream", time_limit=20)
    assert plan.status == "feasible" and validate(plan, wide).ok
    large = Problem(layered_dag(3000, seed=1), diviml.preset("paper-server"), Objective("pipeline"))
    started = time.perf_counter()
    plan = diviml.solve(large, "pipedream", time_limit=2)
    assert time.perf_counter() - started < 2 + 1.5
    assert plan.status == "timeout" and "greedy contiguous plan" in plan.notes[0] and validate(plan, large).ok


def test_gpipe_training_objective_is_solved_by_the_ip_and_refused_by_the_dp(data_dir):
    p = scenario(data_dir, "LayerGraphs/bert24_training", training="gpipe")
    with pytest.raises(InputError, match="GPipe"):
        diviml.solve(p, "dp", time_limit=10)
    plan = diviml.solve(p, "ip", time_limit=10, engine="highs")
    loads = pipeline_loads(p, plan.placement)
    assert plan.objective == pytest.approx(max(loads.forward.values()) + max(loads.backward.values()))


def test_a_dp_past_its_budget_or_its_time_returns_the_greedy_contiguous_plan_and_says_why(data_dir):
    p = scenario(data_dir, "OperatorGraphs/bert_l-3_inference", contiguous=True)
    plan = diviml.solve(p, "dp", time_limit=60, max_ideals=100)
    assert plan.status == "feasible" and any("more than 100 ideals" in n for n in plan.notes)
    assert diviml.validate(plan, p).ok
    plan = diviml.solve(p, "dp", time_limit=0.001)
    assert plan.status == "timeout" and any("ran out" in n for n in plan.notes)
    assert diviml.validate(plan, p).ok


def test_ideals_and_their_transitions_are_every_down_set_and_every_class_that_can_join_it():
    import random

    from diviml.solvers.engines.plans import Stopwatch
    from diviml.solvers.pipeline.dp import enumerate_ideals

    for seed in range(20):
        rng = random.Random(seed)
        num = rng.randint(1, 10)
        edges = {(a, b) for a in range(num) for b in range(a + 1, num) if rng.random() < 0.3}
        masks, transitions = enumerate_ideals(num, edges, list(range(num)), 10_000, Stopwatch(60))
        down_sets = [m for m in range(1 << num) if all(m >> b & 1 == 0 or m >> a & 1 for a, b in edges)]
        assert sorted(masks) == down_sets and len(masks) == len(set(masks))
        assert [bin(m).count("1") for m in masks] == sorted(bin(m).count("1") for m in masks)  # by size
        for mask, out in zip(masks, transitions):
            joinable = [c for c in range(num) if not mask >> c & 1 and mask | 1 << c in down_sets]
            assert [(c, masks[child]) for _, c, child in out] == [(c, mask | 1 << c) for c in joinable]


def _model_of_layers(layers: int, memory: float):
    """An embedding, ``layers`` blocks of two operators (weights on the first) and a head; free transfers."""
    import random
    rng = random.Random(layers)
    ids = ["embed"] + [f"b{i}_{j}" for i in range(layers) for j in range(2)] + ["head"]
    tasks = []
    for t in ids:
        work = rng.uniform(1, 3)
        tasks.append(diviml.Task(t, {"cpu": 4 * work, "v100": 1.5 * work, "a100": work}, output_bytes=0.0,
                                 memory_bytes=memory if t.endswith("_0") else 0.0,
                                 module=None if t in ("embed", "head") else f"blocks.{t[1:].split('_')[0]}.op"))
    return diviml.TaskGraph.create(tasks, list(zip(ids, ids[1:])))


@pytest.mark.parametrize("memory", [1e9, 12e9])
def test_the_layer_program_finds_the_best_split_of_whole_layers_into_consecutive_runs(memory):
    # three devices: every order is tried, so nothing beats it among splits of whole layers into runs
    from diviml.solvers.engines.layers import layers_of
    from diviml.solvers.engines.plans import Stopwatch
    from diviml.solvers.pipeline.layers import split_layers
    problem = Problem(_model_of_layers(6, memory), diviml.preset("paper-server"), Objective("pipeline"))
    plan = split_layers(problem, Stopwatch(10))
    layers, devices = layers_of(problem), [d.name for d in problem.platform.devices]
    best = math.inf
    for owner in product(range(3), repeat=len(layers)):  # every run of layers on each device, in any order
        runs = [k for k in range(1, len(owner)) if owner[k] != owner[k - 1]]
        if len(runs) + 1 > len({*owner}):
            continue  # a device holding two runs: not consecutive
        placement = {t: devices[owner[k]] for k, layer in enumerate(layers) for t in layer}
        used = {d: sum(problem.graph.by_id[t].memory_bytes for t, e in placement.items() if e == d) for d in devices}
        if all(used[d] <= problem.platform.by_name[d].memory_bytes for d in devices):
            best = min(best, pipeline_loads(problem, placement).objective)
    assert plan is not None and plan.objective == pytest.approx(best)
    assert validate(plan, problem).ok


def test_the_pipeline_ip_starts_from_the_layer_program_on_a_model_of_layers():
    from diviml.solvers.engines.plans import Stopwatch
    from diviml.solvers.pipeline.layers import split_layers
    problem = Problem(_model_of_layers(8, 12e9), diviml.preset("paper-server"), Objective("pipeline"))
    assert diviml.solve(problem, "ip", time_limit=10).objective <= split_layers(problem, Stopwatch(10)).objective
    assert split_layers(Problem(layered_dag(20, seed=0), diviml.preset("paper-server"), Objective("pipeline")),
                        Stopwatch(10)) is None  # no numbered blocks: no layers to split


def test_ip_keeps_its_warm_start_polished_and_says_why_when_building_the_ip_would_take_most_of_the_time_left():
    problem = diviml.Problem(layered_dag(1500, seed=0), diviml.preset("a100-ib-2x8"), diviml.Objective("pipeline"))
    plan = diviml.solve(problem, "ip", time_limit=2.0)
    assert validate(plan, problem).ok and plan.status in ("timeout", "feasible")
    assert any("polished in the time left" in note and "to build" in note and "--time-limit" in note
               for note in plan.notes)


def test_the_ip_stops_at_a_warm_start_that_meets_the_lower_bound_and_calls_it_optimal():
    tasks = [diviml.Task(name, {"gpu": 1.0}) for name in "abcd"]  # independent: two per device is the bound
    link = diviml.Link(16e9, 1e-5)
    gpus = diviml.Platform((diviml.Device("g0", "gpu", 16e9, link=link), diviml.Device("g1", "gpu", 16e9, link=link)))
    problem = Problem(TaskGraph.create(tasks, []), gpus, Objective("pipeline"))
    plan = diviml.solve(problem, "ip", time_limit=30)
    assert plan.status == "optimal" and plan.objective == pytest.approx(2.0) and plan.solve_time_s < 10
    assert any("meets the lower bound" in note for note in plan.notes)
    assert validate(plan, problem).ok


@pytest.mark.parametrize("symmetry", ["tasks+servers", "busy+servers"])
def test_the_ip_with_identical_servers_in_order_keeps_the_optimum(symmetry):
    from conftest import two_servers
    problem = Problem(layered_dag(16, seed=4, device_types=("cpu", "a100")), two_servers(), Objective("pipeline"))
    ref = diviml.solve(problem, "ip", time_limit=60, symmetry="none", engine="highs")
    plan = diviml.solve(problem, "ip", time_limit=60, symmetry=symmetry, engine="highs")
    assert ref.status == plan.status == "optimal" and validate(plan, problem).ok
    assert plan.objective == pytest.approx(ref.objective, rel=1e-5)


def peer_linked_servers() -> diviml.Platform:
    """Two servers of a host CPU and two GPUs joined by NVLink, the servers by a network."""
    devices, links = [], []
    for s in ("s0", "s1"):
        devices += [{"name": f"{s}cpu", "type": "cpu", "server": s, "host": True},
                    {"name": f"{s}gpu", "type": "gpu", "server": s, "count": 2, "link": {"bandwidth": 2.0}}]
        links.append({"among": [f"{s}gpu0", f"{s}gpu1"], "bandwidth": 8.0})
    return diviml.Platform.from_dict({"devices": devices, "peer_links": links, "network": {"bandwidth": 1.0}})


@pytest.mark.parametrize("seed", range(4))
def test_the_ip_charges_peer_links_and_the_network_as_the_simulator_does_so_its_optimum_is_the_true_one(seed):
    import random
    from itertools import product as placements

    from diviml import Task, TaskGraph
    rng = random.Random(seed)
    tasks = [Task(f"t{i}", {"cpu": rng.uniform(2, 6), "gpu": rng.uniform(0.5, 2)}, output_bytes=rng.uniform(0.5, 3))
             for i in range(5)]
    edges = sorted({(f"t{i}", f"t{j}") for i in range(5) for j in range(i + 1, 5) if rng.random() < 0.5}
                   | {(f"t{i}", f"t{i + 1}") for i in range(4)})
    problem = Problem(TaskGraph.create(tasks, edges), peer_linked_servers(), Objective("pipeline"))
    names = [d.name for d in problem.platform.devices]
    best = min(pipeline_loads(problem, dict(zip([t.id for t in tasks], combo))).objective
               for combo in placements(names, repeat=len(tasks)))
    plan = diviml.solve(problem, "ip", time_limit=60, engine="highs")
    assert plan.status == "optimal" and plan.objective == pytest.approx(best, rel=1e-6)
    assert plan.bound == pytest.approx(best, rel=1e-6)


def test_the_layer_program_prices_a_run_after_a_layer_its_device_may_not_run():
    # four layers of 10 units: the GPU (1 s a layer) holds two, the CPU (3 s) may not run the first. Best:
    # layers 0-1 on the GPU, 2-3 on the CPU (6 s). A running sum through the barred layer made every later
    # CPU run inf - inf = nan, which the program took for free: it chose layer 0 alone on the GPU (9 s)
    from diviml import Device, Link, Platform, Task, TaskGraph
    from diviml.solvers.engines.plans import Stopwatch
    from diviml.solvers.pipeline.layers import split_layers
    ids = [f"l{k}_{half}" for k in range(4) for half in (0, 1)]
    tasks = [Task(t, {"gpu": 0.5, "cpu": 1.5}, memory_bytes=10.0 if t.endswith("_0") else 0.0,
                  module=f"blocks.{t[1]}.op", allowed_types=frozenset({"gpu"}) if t.startswith("l0") else None)
             for t in ids]
    platform = Platform((Device("cpu", "cpu", 1e6, is_host=True), Device("gpu", "gpu", 20.0, link=Link(1e12, 0.0))))
    problem = Problem(TaskGraph.create(tasks, list(zip(ids, ids[1:]))), platform, Objective("pipeline"))
    assert split_layers(problem, Stopwatch(10)).objective == pytest.approx(6.0, rel=1e-6)


def test_units_on_a_cycle_of_the_stage_order_are_one_class_only_for_contiguous_splits():
    t = {"cpu": 1.0, "v100": 1.0, "a100": 1.0}
    g = TaskGraph.create([Task("a", t, colocation="G"), Task("b", t), Task("c", t, colocation="G")],
                         [("a", "b"), ("b", "c")])
    problem = Problem(g, diviml.preset("paper-server"), Objective("pipeline"))
    assert sorted(map(sorted, Contracted(problem).members)) == [["a", "b", "c"]]
    assert sorted(map(sorted, Contracted(problem, fuse_cycles=False).members)) == [["a", "c"], ["b"]]
