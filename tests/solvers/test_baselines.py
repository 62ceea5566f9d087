import pytest

import diviml
from diviml import InfeasibleError, InputError, Objective, Problem
from diviml.generators import layered_dag
from diviml.validate import validate


@pytest.fixture
def platform():
    return diviml.preset("paper-server")


def test_best_device_puts_everything_on_the_fastest_device(platform):
    g = layered_dag(20, seed=2)
    plan = diviml.solve(Problem(g, platform, Objective()), "best-device", time_limit=5)
    totals = {d.name: sum(t.time[d.type] for t in g.tasks) for d in platform.devices}
    assert set(plan.placement.values()) == {min(totals, key=totals.get)}
    assert plan.objective == pytest.approx(min(totals.values()))


@pytest.mark.parametrize("kind", ["latency", "batch", "pipeline"])
@pytest.mark.parametrize("solver", ["best-device", "greedy", "heft"])
def test_every_baseline_returns_a_validated_plan(platform, kind, solver):
    p = Problem(layered_dag(25, seed=5), platform, Objective(kind, batch_size=8))
    if kind not in diviml.solvers.REGISTRY[solver].objectives:
        with pytest.raises(InputError, match="does not handle"):
            diviml.solve(p, solver, time_limit=5)
        return
    plan = diviml.solve(p, solver, time_limit=5)
    assert validate(plan, p).ok
    assert plan.status in ("feasible", "optimal") and plan.solver == solver
    assert plan.status == "feasible" or plan.gap <= 1e-5  # optimal only where the bound proves it


def test_heft_beats_the_best_single_device_on_a_branchy_graph(platform):
    p = Problem(layered_dag(60, seed=7), platform, Objective())
    assert diviml.solve(p, "heft", time_limit=5).objective < diviml.solve(p, "best-device", time_limit=5).objective


def test_greedy_contiguous_pipeline_split_is_valid(data_dir):
    p = diviml.load_problem(data_dir / "throughput-inputs/LayerGraphs/resnet50_inference.json",
                            objective=Objective("pipeline", contiguous=True))
    plan = diviml.solve(p, "greedy", time_limit=10)
    assert validate(plan, p).ok


def test_greedy_is_never_worse_than_one_accelerator_when_transfers_dominate(data_dir):
    # operator graphs pay dearly for every cut: a fill that ignored transfers was 4.5x worse than one device
    p = diviml.load_problem(data_dir / "throughput-inputs/OperatorGraphs/bert_l-3_inference.json",
                            objective=Objective("pipeline"))
    greedy = diviml.solve(p, "greedy", time_limit=10)
    one = diviml.solve(p, "best-device", time_limit=10)
    assert validate(greedy, p).ok
    assert greedy.objective <= one.objective * (1 + 1e-9)


def test_best_device_says_so_when_no_single_device_holds_the_graph():
    g = layered_dag(10, seed=1)
    tiny = diviml.Platform.from_dict({"devices": [
        {"name": "cpu", "type": "cpu", "host": True, "memory": 1.2 * sum(t.memory_bytes for t in g.tasks) / 2},
        {"name": "a100", "type": "a100", "memory": 1.2 * sum(t.memory_bytes for t in g.tasks) / 2,
         "link": {"bandwidth": 1e10}}]})
    p = Problem(g, tiny, Objective())
    with pytest.raises(InfeasibleError, match="no single device"):
        diviml.solve(p, "best-device", time_limit=5)
    assert validate(diviml.solve(p, "heft", time_limit=5), p).ok


def test_the_partitioner_repairs_a_partition_to_an_acyclic_graph_of_parts():
    import random

    import networkx as nx

    from diviml.generators import layered_dag
    from diviml.solvers.baselines.partitioner import acyclic

    p = Problem(layered_dag(60, seed=2), diviml.preset("paper-server"))
    rng = random.Random(0)
    devices = [d.name for d in p.platform.devices]
    placement = acyclic(p, {t: rng.choice(devices) for t in p.graph.topological_order})
    parts = nx.DiGraph((placement[u], placement[v]) for u, v in p.graph.edges if placement[u] != placement[v])
    assert nx.is_directed_acyclic_graph(parts)
    plan = diviml.solve(p, "partitioner", time_limit=10)
    assert validate(plan, p).ok
