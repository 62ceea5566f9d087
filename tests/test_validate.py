from dataclasses import replace

import pytest
from conftest import graph, receiving, two_device_platform

import diviml
from diviml import Assignment, Objective, Problem, ValidationError
from diviml.validate import check, validate


def _problem(kind="latency", **obj):
    g = graph({"a": ({"x": 2, "y": 3}, 1), "b": ({"x": 3, "y": 2}, 2), "c": ({"x": 4, "y": 4}, 1),
               "d": ({"x": 2, "y": 3}, 0)}, [("a", "b"), ("a", "c"), ("b", "d"), ("c", "d")])
    return Problem(g, two_device_platform(), Objective(kind, **obj))


def _good_plan(p):
    return diviml.solve(p, "heft", time_limit=5)


def test_a_solver_plan_is_valid_and_its_objective_recomputed():
    p = _problem()
    plan = _good_plan(p)
    report = validate(plan, p)
    assert report.ok and report.objective == plan.objective == 9


def _with(plan, task, **changes):
    return replace(plan, assignments=tuple(replace(a, **changes) if a.task == task else a for a in plan.assignments))


def test_starting_before_an_input_arrives_is_caught():
    p = _problem()
    plan = _good_plan(p)
    bad = _with(plan, "d", start=6.5)
    assert any("before its input" in v for v in validate(bad, p).violations)


def test_overlap_on_a_device_is_caught():
    p = _problem()
    plan = _good_plan(p)
    bad = _with(plan, "c", start=1.0)
    assert any("overlap" in v for v in validate(bad, p).violations)


def test_a_wrong_claimed_objective_or_a_bound_above_it_is_caught():
    p = _problem()
    plan = _good_plan(p)
    assert any("claims objective" in v for v in validate(replace(plan, objective=8.0), p).violations)
    assert any("bound" in v for v in validate(replace(plan, bound=10.0), p).violations)


def test_memory_overflow_is_caught():
    g = graph({"a": ({"x": 1, "y": 1}, 0), "b": ({"x": 1, "y": 1}, 0)}, [("a", "b")],
              a={"memory_bytes": 6.0}, b={"memory_bytes": 6.0})
    plat = two_device_platform()
    plat = replace(plat, devices=tuple(replace(d, memory_bytes=10.0) for d in plat.devices))
    p = Problem(g, plat, Objective())
    plan = diviml.Plan("latency", (Assignment("a", "P1", 0.0), Assignment("b", "P1", 1.0)), 2.0, 0.0,
                       "feasible", "hand")
    assert any("more than its" in v for v in validate(plan, p).violations)


def test_a_split_colocation_group_is_caught():
    g = graph({"a": ({"x": 1, "y": 1}, 0), "b": ({"x": 1, "y": 1}, 0)}, [("a", "b")],
              a={"colocation": "g"}, b={"colocation": "g"})
    p = Problem(g, two_device_platform(), Objective("pipeline"))
    plan = diviml.Plan("pipeline", (Assignment("a", "P1"), Assignment("b", "P2")), 2.0, 0.0, "feasible", "hand")
    assert any("co-location group 'g'" in v for v in validate(plan, p).violations)


def test_a_non_contiguous_split_is_caught_when_contiguity_is_asked():
    g = graph({"a": ({"x": 1, "y": 1}, 0), "b": ({"x": 1, "y": 1}, 0), "c": ({"x": 1, "y": 1}, 0)},
              [("a", "b"), ("b", "c")])
    p = Problem(g, two_device_platform(), Objective("pipeline", contiguous=True))
    placement = {"a": "P1", "b": "P2", "c": "P1"}
    plan = diviml.Plan("pipeline", tuple(Assignment(t, d) for t, d in placement.items()),
                       diviml.pipeline_loads(p, placement).objective, 0.0, "feasible", "hand")
    assert any("non-contiguous" in v for v in validate(plan, p).violations)
    with pytest.raises(ValidationError, match="non-contiguous"):
        check(plan, p)


def test_two_convex_stages_that_pass_tensors_both_ways_are_not_a_contiguous_split():
    """x1 -> x2 and y1 -> y2 with x1, y2 on P1 and x2, y1 on P2: each set is convex, but neither stage can
    run first (found by fuzzing: the IP, which kept each set convex only, beat the DP's "optimal")."""
    g = graph({t: ({"x": 1, "y": 1}, 0) for t in ("x1", "x2", "y1", "y2")}, [("x1", "x2"), ("y1", "y2")])
    p = Problem(g, two_device_platform(), Objective("pipeline", contiguous=True))
    placement = {"x1": "P1", "y2": "P1", "x2": "P2", "y1": "P2"}
    plan = diviml.Plan("pipeline", tuple(Assignment(t, d) for t, d in placement.items()),
                       diviml.pipeline_loads(p, placement).objective, 0.0, "feasible", "hand")
    assert list(validate(plan, p).violations) == [
        "the stages on devices 'P1' -> 'P2' -> 'P1' pass tensors round a cycle ('x1' -> 'x2', 'y1' -> 'y2'): "
        "no order of the stages runs every tensor forward"]


def test_a_task_on_a_forbidden_device_type_is_caught():
    g = graph({"a": ({"x": 1}, 0)}, [])
    p = Problem(g, two_device_platform(), Objective())
    plan = diviml.Plan("latency", (Assignment("a", "P2", 0.0),), 1.0, 0.0, "feasible", "hand")
    assert any("may not run on 'P2'" in v for v in validate(plan, p).violations)


def test_a_part_deep_in_a_streamed_batch_that_starts_before_its_input_is_caught():
    """64 parts a task: the part of sample 40 of d moved before its input's part of sample 40 arrives."""
    p = _problem("batch", batch_size=64)
    plan = diviml.solve(p, "streamed", time_limit=5)
    parts_of_d = [i for i, a in enumerate(plan.assignments) if a.task == "d"]
    assert len(parts_of_d) == 64 and validate(plan, p).ok
    moved = list(plan.assignments)
    moved[parts_of_d[40]] = replace(moved[parts_of_d[40]], start=plan.assignments[parts_of_d[39]].start)
    violations = validate(replace(plan, assignments=tuple(moved)), p).violations
    assert any("task 'd'" in v and "before its input" in v for v in violations)


def test_a_task_that_must_run_on_the_whole_batch_cut_into_sub_batches_is_caught():
    p = _problem("batch", batch_size=4)
    plan = diviml.solve(p, "data-parallel", time_limit=5)
    assert len(plan.parts["b"]) == 2 and validate(plan, p).ok  # cut over both devices
    marked = [replace(t, whole_batch=t.id == "b") for t in p.graph.tasks]
    whole = Problem(diviml.TaskGraph.create(marked, p.graph.edges), p.platform, p.objective)
    assert any("'b' must run on the whole batch" in v for v in validate(plan, whole).violations)


def test_on_a_receiver_platform_a_job_spends_its_receives_and_waits_only_for_its_producers():
    from diviml.solvers.engines.plans import Stopwatch, make_plan
    p = receiving(_problem())
    plan = make_plan(p, placement={"a": "P1", "b": "P2", "c": "P1", "d": "P1"}, solver="hand", status="feasible",
                     watch=Stopwatch(1))
    assert validate(plan, p).ok and plan.objective == 10  # b over [2, 5] after 1 s receiving, d over [6, 10]
    # the overlapped model's starts (b at 3, d at 7) are a valid plan there and end at 9; here d ends at 11
    overlapped = make_plan(_problem(), placement={"a": "P1", "b": "P2", "c": "P1", "d": "P1"}, solver="hand",
                           status="feasible", watch=Stopwatch(1))
    report = validate(overlapped, p)
    assert not report.ok and report.objective == 11
    # starting d before b's receive ends (P1 is free at 6; b ends at 5, b's 2 bytes then take 2 s) is caught
    assert not validate(_with(plan, "d", start=4.0), p).ok


@pytest.mark.parametrize("seed", range(12))
def test_the_validator_times_a_receiver_plan_as_the_simulator_does(seed):
    import random

    from diviml.generators import layered_dag
    from diviml.solvers.engines.plans import Stopwatch, make_plan
    rng = random.Random(seed)
    problem = receiving(Problem(layered_dag(12, seed=seed), diviml.preset("paper-server"),
                                 Objective("batch", batch_size=4) if seed % 2 else Objective("latency")))
    n = problem.batch_size
    parts = {}
    for t in problem.graph.tasks:
        devices = sorted(problem.allowed_devices[t.id])
        cut = rng.randint(1, n - 1) if n > 1 and rng.random() < 0.5 else n
        parts[t.id] = [(rng.choice(devices), cut)] + ([(rng.choice(devices), n - cut)] if cut < n else [])
    plan = make_plan(problem, parts, solver="random", status="feasible", watch=Stopwatch(1))  # validates it
    assert validate(plan, problem).objective == pytest.approx(plan.objective, rel=1e-12)
