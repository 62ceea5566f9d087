"""window polish: a latency plan re-placed window by window between series points, never made worse."""

import random
from dataclasses import replace

import pytest

import diviml
from diviml import Objective, Plan, Problem, Task, TaskGraph
from diviml.solvers.baselines import heft, window_polish
from diviml.solvers.engines.plans import Stopwatch, make_plan


def _blocks(n_blocks: int, seed: int, gpu_memory_share: float = 1.0) -> Problem:
    """Blocks of three parallel branches between joins (each join a series point), weights of 1-3 GB, and a
    view after each branch; the GPUs hold ``gpu_memory_share`` of the weights at most."""
    rng = random.Random(seed)
    tasks, edges, previous = [Task("in", {"cpu": 0.0, "v100": 0.0, "a100": 0.0})], [], "in"
    for b in range(n_blocks):
        join = f"join{b}"
        for k in range(3):
            work = rng.uniform(1.0, 3.0)
            branch, view = f"b{b}_{k}", f"b{b}_{k}_view"
            tasks.append(Task(branch, {"cpu": 20 * work, "v100": 2 * work, "a100": work},
                              memory_bytes=rng.choice([1e9, 2e9, 3e9]), output_bytes=rng.uniform(1e8, 1e9)))
            tasks.append(Task(view, {"cpu": 0.0, "v100": 0.0, "a100": 0.0}, output_bytes=tasks[-1].output_bytes))
            edges += [(previous, branch), (branch, view), (view, join)]
        tasks.append(Task(join, {"cpu": 0.05, "v100": 0.01, "a100": 0.01}, output_bytes=1e8))
        previous = join
    platform = diviml.preset("paper-server")
    gpu_memory = sum(t.memory_bytes for t in tasks) * gpu_memory_share / 2
    devices = tuple(d if d.type == "cpu" else replace(d, memory_bytes=gpu_memory) for d in platform.devices)
    return Problem(TaskGraph.create(tasks, edges), replace(platform, devices=devices), Objective("latency"))


def _scattered(problem: Problem, seed: int):
    """A valid plan with every task on a device drawn at random among those with room left."""
    rng = random.Random(seed)
    used = {d.name: 0.0 for d in problem.platform.devices}
    placement = {}
    for t in problem.graph.topological_order:
        task = problem.graph.by_id[t]
        room = [d for d in problem.allowed_devices[t]
                if used[d] + task.memory_bytes <= problem.platform.by_name[d].memory_bytes]
        placement[t] = rng.choice(room)
        used[placement[t]] += task.memory_bytes
    return make_plan(problem, placement=placement, solver="scattered", status="feasible", watch=Stopwatch(10))


@pytest.mark.parametrize("seed", range(4))
def test_a_scattered_plan_is_made_faster_and_stays_valid(seed):
    problem = _blocks(6, seed, gpu_memory_share=0.6)
    start = _scattered(problem, seed)
    plan = window_polish.polish(problem, start, Stopwatch(30))
    assert diviml.validate(plan, problem).ok
    assert plan.objective < 0.9 * start.objective
    assert "polished" in plan.notes[-1]


@pytest.mark.parametrize("seed", range(6))
def test_never_worse_than_the_plan_it_is_given_and_within_memory(seed):
    problem = _blocks(5, 100 + seed, gpu_memory_share=0.4)  # memory binds: weights must go to the CPU too
    for start in (heft.solve(problem, time_limit=10), _scattered(problem, seed)):
        plan = window_polish.polish(problem, start, Stopwatch(30))
        assert diviml.validate(plan, problem).ok and plan.objective <= start.objective


def test_a_plan_it_cannot_improve_comes_back_unchanged():
    # a chain of large tensors, far faster on the A100: every move costs a transfer and a slower device
    tasks = [Task(f"t{i}", {"cpu": 100.0, "v100": 50.0, "a100": 1.0}, output_bytes=1e10) for i in range(4)]
    problem = Problem(TaskGraph.create(tasks, [(f"t{i}", f"t{i + 1}") for i in range(3)]),
                      diviml.preset("paper-server"), Objective("latency"))
    start = make_plan(problem, placement={t.id: "a100" for t in tasks}, solver="one device", status="feasible",
                      watch=Stopwatch(10))
    assert window_polish.polish(problem, start, Stopwatch(30)) is start


def test_a_plan_of_another_objective_is_left_alone():
    problem = _blocks(3, 7)
    batch = Problem(problem.graph, problem.platform, Objective("batch", 2))
    plan = heft.solve(batch, time_limit=10)
    assert window_polish.polish(batch, plan, Stopwatch(10)) is plan


def test_a_polish_cut_short_by_its_time_still_keeps_what_it_found():
    # the windows after the time ran out keep their devices and are still timed, for the devices' order
    problem = _blocks(40, 3, gpu_memory_share=0.6)
    start = _scattered(problem, 3)
    full = window_polish.polish(problem, start, Stopwatch(30))
    calls = {"n": 0}

    class Short(Stopwatch):  # expires after a third of the windows' descents have asked
        @property
        def expired(self):
            calls["n"] += 1
            return calls["n"] > 2000

    cut = window_polish.polish(problem, start, Short(30))
    assert diviml.validate(cut, problem).ok
    assert full.objective <= cut.objective < start.objective


def _attention_like(chain_device: str) -> tuple[Problem, Plan]:
    """A projection that runs on the V100 only, then a chain of weightless tasks passing 100 GB tensors (as
    attention's products and softmax do), then a projection that runs on the A100 only; the chain placed on
    ``chain_device``, and equally fast on both GPUs. Every task is a series point: each is a window of its own."""
    tasks = [Task("in", {"cpu": 0.0}, output_bytes=1e6), Task("p", {"v100": 1.0}, memory_bytes=1e9, output_bytes=1e6)]
    tasks += [Task(f"c{i}", {"v100": 1.0, "a100": 1.0}, output_bytes=1e11) for i in range(3)]
    tasks += [Task("o", {"a100": 1.0}, memory_bytes=1e9, output_bytes=1e6), Task("out", {"cpu": 0.0})]
    ids = [t.id for t in tasks]
    problem = Problem(TaskGraph.create(tasks, list(zip(ids, ids[1:]))), diviml.preset("paper-server"),
                      Objective("latency"))
    placement = {"in": "cpu", "p": "v100", "c0": chain_device, "c1": chain_device, "c2": chain_device, "o": "a100",
                 "out": "cpu"}
    return problem, make_plan(problem, placement=placement, solver="given", status="feasible", watch=Stopwatch(10))


def test_a_run_of_tasks_passing_large_tensors_moves_as_one():
    # moved one at a time, each task of the chain trades one 100 GB transfer for another; moved together to the
    # device of the next weights, the chain sends only the projection's 1 MB output
    problem, start = _attention_like("v100")
    _, best = _attention_like("a100")
    plan = window_polish.polish(problem, start, Stopwatch(30))
    assert diviml.validate(plan, problem).ok
    assert plan.placement["c0"] == plan.placement["c1"] == plan.placement["c2"] == "a100"
    assert plan.objective == pytest.approx(best.objective) and best.objective < 0.5 * start.objective


def _restricted_views(problem: Problem) -> Problem:
    """``problem`` with the first view of each block unable to run on the A100 and the second co-located with
    its block's join."""
    tasks = []
    for t in problem.graph.tasks:
        if t.id.endswith("_0_view"):
            t = replace(t, time={"cpu": 0.0, "v100": 0.0})
        elif t.id.endswith("_1_view") or t.id.startswith("join"):
            t = replace(t, colocation="block" + t.id.split("_")[0].removeprefix("b").removeprefix("join"))
        tasks.append(t)
    return Problem(TaskGraph.create(tasks, problem.graph.edges), problem.platform, problem.objective)


@pytest.mark.parametrize("seed", range(4))
def test_views_go_with_their_producer_only_where_they_may_run_and_their_group_allows(seed):
    # a weightless view follows the task it reads, unless it may not run on that task's devices or a
    # co-location group holds it: moved along, it made the plan invalid (a crash in the polish)
    problem = _restricted_views(_blocks(5, 200 + seed, gpu_memory_share=0.6))
    start = heft.solve(problem, time_limit=10)
    plan = window_polish.polish(problem, start, Stopwatch(30))
    assert diviml.validate(plan, problem).ok and plan.objective <= start.objective
    assert all(plan.placement[f"b{b}_0_view"] != "a100" for b in range(5))
