"""Two plans of one model measured in one process, their runs in turn: what `diviml run --compare` uses, so that
a plan and the best single device's plan are timed under the same process state."""

import threading

import pytest

pytest.importorskip("torch")

import diviml  # noqa: E402
from diviml import Assignment, InputError, Objective, Plan, Problem, preset  # noqa: E402
from diviml.frontends.pytorch import profile_zoo  # noqa: E402
from diviml.runtime import ModelSource, run_beside  # noqa: E402

CPU2 = preset("cpu-workers-2")


@pytest.fixture(scope="module")
def gpt_plans():
    problem = Problem(profile_zoo("gpt-tiny", repeats=1, min_time_s=0.0), CPU2, Objective("latency"))
    return problem, diviml.solve(problem, "heft", time_limit=30), diviml.solve(problem, "best-device", time_limit=30)


def test_the_two_plans_run_in_blocks_a_b_b_a(gpt_plans):
    problem, split, single = gpt_plans
    said: list[str] = []
    first, second = run_beside("gpt-tiny", (split, single), CPU2, problem=problem, repeats=4, warmup=1,
                               progress=said.append)
    order = [line.split()[1].rstrip(":") for line in said if line.lstrip().startswith("plan ")]
    assert order == list("ABBAABBA")
    for report, plan in ((first, split), (second, single)):
        assert report.outputs_match and len(report.samples_s) == 4 and report.repeats == 4
        assert set(report.devices) == {a.device for a in plan.assignments}
        assert report.predicted_s == pytest.approx(plan.objective)


def test_every_timed_run_is_kept_whatever_the_blocks(gpt_plans):
    problem, split, single = gpt_plans
    first, second = run_beside("gpt-tiny", (single, split), CPU2, problem=problem, repeats=9, warmup=0)
    assert len(first.samples_s) == len(second.samples_s) == 9  # blocks of 2: the last block of each holds 1
    assert first.measured_min_s <= first.measured_s <= first.measured_max_s


def test_a_second_plan_that_cannot_run_is_refused_and_the_first_plans_workers_end(gpt_plans):
    problem, split, _ = gpt_plans
    elsewhere = Plan("latency", tuple(Assignment(a.task, "cuda0", a.start) for a in split.assignments),
                     split.objective, 0.0, "feasible", "hand")
    with pytest.raises(InputError, match="lacks"):
        run_beside("gpt-tiny", (split, elsewhere), CPU2, problem=problem, repeats=2, warmup=0)
    assert not [t for t in threading.enumerate() if t.name.startswith("diviml-") and t.is_alive()]


def test_the_model_is_built_and_captured_once_for_both_plans(gpt_plans):
    from diviml.frontends import zoo
    problem, split, single = gpt_plans
    model, builds = zoo.get("gpt-tiny"), []
    source = ModelSource("gpt-tiny", lambda: builds.append(1) or model.build(), model.inputs)
    first, second = run_beside(source, (split, single), CPU2, problem=problem, repeats=2, warmup=0)
    assert first.outputs_match and second.outputs_match
    assert len(builds) == 1  # a capture takes seconds: the second plan cuts the first's program
    assert source.captured(1) is source.captured(1)
