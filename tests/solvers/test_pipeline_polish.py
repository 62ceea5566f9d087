"""The polish: a pipeline split's slowest device relieved one class (or one run of classes) at a time."""

import random

import pytest
from test_pipeline import peer_linked_servers
from test_pipeline_training import problem as training_problem
from test_pipeline_training import random_training_scenario

import diviml
from diviml import Device, Link, Objective, Platform, Problem, Task, TaskGraph
from diviml.generators import layered_dag
from diviml.simulate import pipeline_loads
from diviml.solvers.engines.plans import Stopwatch
from diviml.solvers.pipeline.improve import polished
from diviml.solvers.pipeline.polish import _State, polish
from diviml.validate import validate


def _two_gpus(memory: float = 1e12) -> Platform:
    link = Link(1e9, 0.0)
    return Platform((Device("g0", "gpu", memory, link=link), Device("g1", "gpu", memory, link=link),
                     Device("cpu", "cpu", 1e12, is_host=True)))


def _independent(count: int) -> TaskGraph:
    """``count`` tasks of 1 s on a GPU (10 s on the CPU), 1 GB of weights each, no edges."""
    return TaskGraph.create([Task(f"t{k}", {"gpu": 1.0, "cpu": 10.0}, memory_bytes=1e9) for k in range(count)], [])


def test_it_spreads_a_split_that_puts_everything_on_one_device():
    problem = Problem(_independent(4), _two_gpus(), Objective("pipeline"))
    placement, moves = polish(problem, {f"t{k}": "g0" for k in range(4)}, Stopwatch(10))
    assert moves == 2 and pipeline_loads(problem, placement).objective == pytest.approx(2.0)


def test_it_moves_nothing_into_a_device_without_the_memory_for_it():
    problem = Problem(_independent(4), _two_gpus(memory=1e9), Objective("pipeline"))
    placement, moves = polish(problem, {f"t{k}": "g0" for k in range(4)}, Stopwatch(10))
    assert moves == 1 and pipeline_loads(problem, placement).objective == pytest.approx(3.0)


def test_it_moves_light_work_between_two_weights_off_the_slowest_device_as_one_group():
    """w1 -> a -> b -> c -> w2 on g0, 0.4 s a hop: a, b or c alone saves 0.5 s and costs g0 two hops, and every
    run at an end of g0's holds a weight g1 has no memory for; a, b and c together save 1.5 s for two hops."""
    link = Link(1e9, 0.0)
    platform = Platform((Device("g0", "gpu", 10e9, link=link), Device("g1", "gpu", 0.5e9, link=link),
                         Device("cpu", "cpu", 1e12, is_host=True)))
    weights = {"memory_bytes": 1e9, "output_bytes": 0.4e9}
    tasks = [Task("w1", {"gpu": 1.0, "cpu": 100.0}, **weights), Task("w2", {"gpu": 1.0, "cpu": 100.0}, **weights)]
    tasks += [Task(n, {"gpu": 0.5, "cpu": 100.0}, output_bytes=0.4e9) for n in "abc"]
    problem = Problem(TaskGraph.create(tasks, [("w1", "a"), ("a", "b"), ("b", "c"), ("c", "w2")]), platform,
                      Objective("pipeline"))
    placement, moves = polish(problem, dict.fromkeys("w1 a b c w2".split(), "g0"), Stopwatch(10))
    assert moves == 1 and {placement[t] for t in "abc"} == {"g1"}
    assert pipeline_loads(problem, placement).objective == pytest.approx(2.8)


def test_it_relays_a_tensor_from_another_server_through_the_readers_host_so_the_host_pays_the_network():
    """p on server A's GPU, its view v there, q on server B's GPU: B's GPU pays a hop and the network for v's
    tensor. Moved to B's host CPU, the view takes the network off it and costs no one a hop more."""
    platform = Platform.from_dict({"devices": [
        {"name": f"{s}{kind}", "type": kind, "server": s, **({"host": True} if kind == "cpu" else {"link": {"bandwidth": 10.0}})}
        for s in ("a", "b") for kind in ("cpu", "gpu")], "network": {"bandwidth": 2.0}})
    tasks = [Task("p", {"gpu": 1.0, "cpu": 100.0}, output_bytes=1.0), Task("v", {"gpu": 0.0, "cpu": 0.0}, output_bytes=1.0),
             Task("q", {"gpu": 1.0, "cpu": 100.0})]
    problem = Problem(TaskGraph.create(tasks, [("p", "v"), ("v", "q")]), platform, Objective("pipeline"))
    start = {"p": "agpu", "v": "agpu", "q": "bgpu"}
    assert pipeline_loads(problem, start).total["bgpu"] == pytest.approx(1.6)
    placement, moves = polish(problem, start, Stopwatch(10))
    assert moves == 1 and placement["v"] == "bcpu"
    assert pipeline_loads(problem, placement).total == pytest.approx({"acpu": 0.0, "agpu": 1.1, "bcpu": 0.5, "bgpu": 1.1})


def _random_problem(seed: int, training: bool) -> tuple[Problem, dict[str, str]]:
    """A layered DAG over two servers joined by peer links and a network (or a training graph on one server),
    and a random placement of it."""
    rng = random.Random(seed)
    if training:
        problem = training_problem(random_training_scenario(10, seed, k=3), contiguous=False)
    else:
        graph = layered_dag(16, seed=seed, device_types=("cpu", "gpu"))
        problem = Problem(graph, peer_linked_servers(), Objective("pipeline"))
    units = problem.stage_order.units.values()
    placement = {}
    for members in units:
        device = rng.choice(sorted(set.intersection(*(set(problem.allowed_devices[t]) for t in members))))
        placement.update({t: device for t in members})
    return problem, placement


@pytest.mark.parametrize("training", [False, True])
@pytest.mark.parametrize("seed", range(3))
def test_the_loads_it_keeps_are_the_simulators_after_every_move(seed, training):
    problem, placement = _random_problem(seed, training)
    state = _State(problem, placement)
    before = pipeline_loads(problem, placement).objective
    moves = 0
    while state.relieve(Stopwatch(10)):
        moves += 1
        truth = pipeline_loads(problem, state.placement()).total
        assert all(state.load[d] == pytest.approx(truth[d], rel=1e-9, abs=1e-9) for d in truth)
    assert moves > 0 and pipeline_loads(problem, state.placement()).objective < before


def test_it_leaves_contiguous_splits_and_gpipe_alone():
    contiguous = training_problem(random_training_scenario(6, 0))
    gpipe = Problem(contiguous.graph, contiguous.platform, Objective("pipeline", training="gpipe"))
    for problem in (contiguous, gpipe):
        placement = {t.id: problem.platform.devices[0].name for t in problem.graph.tasks}
        assert polish(problem, placement, Stopwatch(10)) is None


def test_a_polished_plan_keeps_its_solver_and_status_and_says_what_the_polish_did():
    problem = Problem(_independent(6), _two_gpus(), Objective("pipeline"))
    plan = diviml.solve(problem, "best-device", time_limit=10)
    better = polished(problem, plan, Stopwatch(10))
    assert better.objective < plan.objective and better.solver == plan.solver and better.status == plan.status
    assert validate(better, problem).ok
    assert any(note.startswith("polished: ") for note in better.notes)
