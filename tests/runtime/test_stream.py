"""Running a pipeline plan: a stream of requests through the devices, each device on its own request while the
others are on theirs, every request's outputs checked, its time per request measured in the steady state
beside the plan's largest device load."""

import json
import random
import subprocess
import sys

import pytest

import diviml
from diviml import Assignment, InputError, Objective, Plan, Problem, preset
from diviml.frontends.pytorch import capture_at, profile, profile_zoo
from diviml.runtime import calibrated_graph, cut, model_source, run
from diviml.runtime._pieces import piece_stages
from diviml.runtime._prepare import stream_order
from diviml.simulate import pipeline_loads

CPU2 = preset("cpu-workers-2")


def pipeline_plan(problem: Problem, placement: dict[str, str]) -> Plan:
    """A pipeline plan as the pipeline solvers write one: a device per task, no start times."""
    return Plan("pipeline", tuple(Assignment(t, d) for t, d in placement.items()),
                pipeline_loads(problem, placement).objective, 0.0, "feasible", "hand", batch_size=problem.batch_size)


def random_placement(problem: Problem, seed: int) -> dict[str, str]:
    rng = random.Random(seed)
    return {t.id: rng.choice(["worker0", "worker1"]) for t in problem.graph.tasks}


@pytest.fixture(scope="module")
def gpt():
    return Problem(profile_zoo("gpt-tiny", repeats=1, min_time_s=0.0), CPU2, Objective("pipeline"))


@pytest.fixture(scope="module")
def mlp(tmp_path_factory):
    """A chain of 12 wide layers: a contiguous pipeline cuts it into two stages of real work."""
    path = tmp_path_factory.mktemp("stream") / "mlp.py"
    path.write_text(
        "import torch\n"
        "def make():\n"
        "    torch.manual_seed(0)\n"
        "    layers = [m for _ in range(12) for m in (torch.nn.Linear(384, 384), torch.nn.Tanh())]\n"
        "    return torch.nn.Sequential(*layers), (torch.randn(256, 384),)\n")
    source = model_source(f"{path}:make")
    graph = profile(source.build, source.inputs, name="mlp", batches=[256], repeats=1, min_time_s=0.0)
    return source, Problem(graph, CPU2, Objective("pipeline", contiguous=True))


def program_of(name: str, placement: dict[str, str]):
    m = model_source(name)
    captured = capture_at(m.build(), m.inputs, 1)
    return cut(captured, {d: [t for t, _ in ts] for d, ts in stream_order(captured, placement).items()})


def test_the_pipeline_solvers_plans_stream_with_every_requests_outputs_matching(gpt):
    for plan in (diviml.solve(gpt, "ip", time_limit=30),
                 diviml.solve(Problem(gpt.graph, CPU2, Objective("pipeline", contiguous=True)), "dp", time_limit=30)):
        report = run("gpt-tiny", plan, CPU2, problem=gpt, repeats=2, warmup=1)
        assert report.outputs_match and report.objective_kind == "pipeline"
        assert report.requests >= 16 and report.measured_s > 0
        assert report.predicted_s == pytest.approx(plan.objective)
        # the stream drawn is one whole run: every piece of every request, once
        ran = sorted((r.device, r.index, r.request) for r in report.stream)
        assert ran == sorted((p.device, p.index, r) for p in report.piece_reports for r in range(report.requests))
        # a stream has no one-request timeline to calibrate from
        with pytest.raises(InputError, match="calibration reads one request's timeline"):
            calibrated_graph(report, plan, gpt)


@pytest.mark.parametrize("seed", range(3))
def test_a_value_from_another_device_always_comes_from_an_earlier_slot(gpt, seed):
    program = program_of("gpt-tiny", random_placement(gpt, seed))
    stage = piece_stages(program)
    made_by = {v: (d, p.index) for d, ps in program.pieces.items() for p in ps for v in p.outputs}
    crossings = 0
    for d, ps in program.pieces.items():
        for p in ps:
            for v in p.inputs:
                if v in made_by:
                    source = made_by[v]
                    assert stage[source] < stage[d, p.index] if source[0] != d else stage[source] <= stage[d, p.index]
                    crossings += source[0] != d
    assert crossings > 10  # the random placement sends values back and forth
    # and a device runs one request's pieces in its own order: a value it drops after its last reader there
    # is never read again
    assert all(stage[d, p.index - 1] <= stage[d, p.index] for d, ps in program.pieces.items() for p in ps[1:])


def test_random_back_and_forth_placements_stream_without_waiting_forever_and_match(gpt):
    for seed in range(2):
        plan = pipeline_plan(gpt, random_placement(gpt, seed))
        depth = max(piece_stages(program_of("gpt-tiny", plan.placement)).values())
        report = run("gpt-tiny", plan, CPU2, problem=gpt, repeats=1, warmup=0, requests=depth + 2)
        assert report.outputs_match and report.requests == depth + 2
        # each worker ran its pieces slot by slot: request + stage, then the piece's place in its order
        stage = piece_stages(program_of("gpt-tiny", plan.placement))
        for device in ("worker0", "worker1"):
            ran = [(r.request + stage[device, r.index], r.index) for r in report.stream if r.device == device]
            assert ran == sorted(ran)



def test_a_contiguous_pipeline_works_on_two_requests_at_once(mlp):
    source, problem = mlp
    plan = diviml.solve(problem, "dp", time_limit=30)
    assert set(plan.placement.values()) == {"worker0", "worker1"}
    report = run(source, plan, CPU2, problem=problem, repeats=2, warmup=1, requests=24)
    assert report.outputs_match
    spans = {d: [(r.start, r.finish, r.request) for r in report.stream if r.device == d] for d in ("worker0", "worker1")}
    overlaps = [(r0, r1) for s0, f0, r0 in spans["worker0"] for s1, f1, r1 in spans["worker1"]
                if min(f0, f1) > max(s0, s1)]
    assert overlaps and all(r0 != r1 for r0, r1 in overlaps)  # side by side, each on its own request



def test_a_stream_holds_at_most_depth_plus_two_requests_however_fast_its_first_stage(mlp):
    # a first stage of one layer never waits for the second stage of eleven, yet a request starts only once
    # the one three before it is done (the stages are 0 and 1)
    source, problem = mlp
    tasks = [t.id for t in problem.graph.tasks]
    plan = pipeline_plan(problem, {t: "worker0" if k < 3 else "worker1" for k, t in enumerate(tasks)})
    report = run(source, plan, CPU2, problem=problem, repeats=1, warmup=0, requests=16)
    assert report.outputs_match
    span = {}
    for r in report.stream:
        first, last = span.get(r.request, (r.start, r.finish))
        span[r.request] = (min(first, r.start), max(last, r.finish))
    assert max(sum(s <= start < f for s, f in span.values()) for start, _ in span.values()) <= 3


# -- the command line, as a user runs it ---------------------------------------------------------------
def cli(*args):
    return subprocess.run([sys.executable, "-m", "diviml", *map(str, args)], capture_output=True, text=True,
                          timeout=600)


@pytest.fixture(scope="module")
def gpt_pipeline(tmp_path_factory, gpt):
    d = tmp_path_factory.mktemp("pipeline")
    gpt.graph.save(d / "g.json")
    r = cli("schedule", d / "g.json", "--platform", "cpu-workers-2", "--objective", "pipeline", "--contiguous",
            "--out", d / "plan.json", "--quiet")
    assert r.returncode == 0, r.stderr
    return d


def test_run_streams_a_pipeline_plan_and_draws_the_stream(gpt_pipeline):
    d = gpt_pipeline
    r = cli("run", "gpt-tiny", d / "plan.json", "--platform", "cpu-workers-2", "--graph", d / "g.json",
            "--repeats", "2", "--requests", "20", "--json", "--trace", d / "t.json", "--gantt", d / "s.html", "--quiet")
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout)
    assert out["requests"] == 20 and out["objective_kind"] == "pipeline" and out["outputs_match"] is True
    trace = json.loads((d / "t.json").read_text())
    stream = [e for e in trace["traceEvents"] if e.get("pid") == 3 and e["ph"] == "X"]
    assert {e["args"]["request"] for e in stream} == set(range(20))
    assert "per request in a stream of 20" in (d / "s.html").read_text()
    text = cli("run", "gpt-tiny", d / "plan.json", "--platform", "cpu-workers-2", "--repeats", "1", "--quiet")
    assert text.returncode == 0 and "per request in streams of 16" in text.stdout, text.stderr


@pytest.mark.slow  # over 20 s on 2 cores: the README's test command runs it after the rest
def test_a_stream_over_two_gloo_ranks_hands_each_request_its_own_values(gpt_pipeline, gpt):
    # values go back and forth between the ranks, and the requests alternate two inputs: a value received for
    # the wrong request would give the wrong outputs
    d = gpt_pipeline
    placement = random_placement(gpt, seed=5)
    pipeline_plan(gpt, placement).save(d / "random.json")
    depth = max(piece_stages(program_of("gpt-tiny", placement)).values())
    for plan, requests in (("plan.json", 4), ("random.json", depth + 2)):
        r = cli("run", "gpt-tiny", d / plan, "--platform", "cpu-workers-2", "--nproc", "2", "--repeats", "1",
                "--warmup", "0", "--requests", requests, "--json", "--quiet")
        assert r.returncode == 0, r.stderr
        out = json.loads(r.stdout)
        assert out["outputs_match"] is True and out["world_size"] == 2 and out["requests"] == requests


def test_bad_stream_requests_are_one_line_and_exit_2_with_nothing_written(gpt_pipeline, gpt, tmp_path):
    d = gpt_pipeline
    latency = diviml.solve(Problem(gpt.graph, CPU2, Objective("latency")), "heft", time_limit=10)
    latency.save(tmp_path / "latency.json")
    cases = [(d / "plan.json", ["--requests", "1"], "--requests 1 is too few"),
             (tmp_path / "latency.json", ["--requests", "8"], "leave --requests out"),
             (d / "plan.json", ["--graph", d / "g.json", "--calibrate-out", tmp_path / "c.json"], "calibrat")]
    for plan, extra, message in cases:
        r = cli("run", "gpt-tiny", plan, "--platform", "cpu-workers-2", *extra, "--trace", tmp_path / "t.json",
                "--quiet")
        assert r.returncode == 2, (extra, r.stderr)
        assert message in r.stderr and len(r.stderr.strip().splitlines()) == 1, r.stderr
        assert not (tmp_path / "t.json").exists() and not (tmp_path / "c.json").exists()


def test_a_streams_requests_alternate_two_inputs_and_each_gets_its_own_outputs(mlp):
    import torch

    from diviml.runtime._execute import Executor
    from diviml.runtime._prepare import _varied
    source, problem = mlp
    placement = diviml.solve(problem, "dp", time_limit=30).placement
    captured = capture_at(source.build(), source.inputs, 256)
    order = stream_order(captured, placement)
    program = cut(captured, {d: [t for t, _ in ts] for d, ts in order.items()})
    values = dict(zip([n.name for n in captured.gm.graph.nodes if n.op == "placeholder"], captured.args))
    first = {v: values[v] for v in program.inputs}
    second = _varied(torch, first)
    executor = Executor(program, {d: torch.device("cpu") for d in program.pieces}, {d: 1 for d in program.pieces},
                        {v: values[v] for v in program.state}, [first, second], stages=piece_stages(program))
    try:
        results, _, _ = executor.run(4)
    finally:
        executor.close()
    (out,) = program.results
    with torch.no_grad():
        expected = [source.build()(*[given[v] for v in program.inputs]) for given in (first, second)]
    assert not torch.allclose(expected[0], expected[1])
    for r, got in enumerate(results):
        torch.testing.assert_close(got[out], expected[r % 2])
