"""Running a plan on real devices: the split program gives the unsplit module's outputs, runs its devices
concurrently, refuses what it cannot run with one line, and measures what the plan predicted."""

import json
import random
import statistics
import subprocess
import sys
import time
from dataclasses import replace

import pytest
from conftest import workers_without_handoffs

import diviml
from diviml import Assignment, InputError, Objective, Plan, Problem, preset
from diviml.frontends.pytorch import profile_zoo
from diviml.runtime import calibrated_graph, calibrated_platform, cut, model_source, rank_of_devices, run
from diviml.simulate import schedule

CPU2 = preset("cpu-workers-2")


def profiled(name: str) -> Problem:
    return Problem(profile_zoo(name, repeats=1, min_time_s=0.0), CPU2, Objective("latency"))


def plan_from_placement(problem: Problem, placement: dict[str, str], solver: str = "hand") -> Plan:
    """A runnable plan: every task on its device, started as early as the plan's list order allows."""
    parts = {t: [(d, problem.batch_size)] for t, d in placement.items()}
    timed = schedule(problem, parts)
    return Plan("latency", tuple(Assignment(j.task, j.device, j.start) for j in timed.jobs), timed.makespan, 0.0,
                "feasible", solver, batch_size=problem.batch_size)


def random_plan(problem: Problem, seed: int) -> Plan:
    rng = random.Random(seed)
    return plan_from_placement(problem, {t.id: rng.choice(["worker0", "worker1"]) for t in problem.graph.tasks})


@pytest.fixture(scope="module", params=["gpt-tiny", "bert-tiny", "randwire-ws-s0", "resnet18"])
def model(request):
    return request.param, profiled(request.param)


def test_the_solvers_plan_and_a_random_plan_give_the_unsplit_modules_outputs(model):
    name, problem = model
    for plan in (diviml.solve(problem, "heft", time_limit=30), random_plan(problem, seed=1)):
        report = run(name, plan, CPU2, problem=problem, repeats=2, warmup=1)
        assert report.outputs_match and report.max_abs_error <= 1e-4
        assert report.pieces == sum(1 for _ in report.piece_reports)
        assert report.measured_s > 0 and report.ratio == pytest.approx(report.measured_s / report.predicted_s)


def test_a_piece_ends_where_a_value_leaves_its_device_and_starts_where_one_arrives():
    problem = profiled("gpt-tiny")
    plan = random_plan(problem, seed=3)
    from diviml.frontends.pytorch import capture_at
    m = model_source("gpt-tiny")
    program = cut(capture_at(m.build(), m.inputs, 1), {d: [t for t, _ in ts] for d, ts in plan.device_order.items()})
    placement = plan.placement
    graph = problem.graph
    for device, pieces in program.pieces.items():
        inputs = set(program.inputs)  # given, not run: no piece holds them unless a run of tasks starts with one
        assert [t for p in pieces for t in p.tasks if t not in inputs] == [
            t for t, _ in plan.device_order[device] if t not in inputs]
        for p in pieces:
            for t in p.tasks[1:]:  # only a piece's first task may read another device's output
                assert all(placement[u] == device for u in graph.predecessors[t])
            for t in p.tasks[:-1]:  # only its last task's output may leave the device
                assert all(placement[v] == device for v in graph.successors[t])


def test_two_cpu_workers_run_their_pieces_at_the_same_time(tmp_path):
    # two independent matrix-product chains, one per worker: their pieces must overlap in time
    (tmp_path / "branches.py").write_text(
        "import torch\n"
        "class Two(torch.nn.Module):\n"
        "    def __init__(self):\n"
        "        super().__init__()\n"
        "        self.a = torch.nn.Linear(512, 512)\n"
        "        self.b = torch.nn.Linear(512, 512)\n"
        "    def forward(self, x):\n"
        "        u, v = x, x\n"
        "        for _ in range(6):\n"
        "            u, v = torch.tanh(self.a(u)), torch.tanh(self.b(v))\n"
        "        return u + v\n"
        "def make():\n"
        "    torch.manual_seed(0)\n"
        "    return Two(), (torch.randn(256, 512),)\n")
    spec = f"{tmp_path / 'branches.py'}:make"
    source = model_source(spec)
    from diviml.frontends.pytorch import profile
    graph = profile(source.build, source.inputs, name="branches", batches=[256], repeats=1, min_time_s=0.0)
    problem = Problem(graph, CPU2, Objective("latency"))
    plan = diviml.solve(problem, "exact", time_limit=30)
    assert len(set(plan.placement.values())) == 2
    report = run(source, plan, CPU2, problem=problem, repeats=3, warmup=1)
    assert report.outputs_match
    spans = {d: [(p.measured_start_s, p.measured_start_s + p.measured_s) for p in report.piece_reports
                 if p.device == d] for d in ("worker0", "worker1")}
    overlap = max(min(f0, f1) - max(s0, s1) for s0, f0 in spans["worker0"] for s1, f1 in spans["worker1"])
    assert overlap > 0
    # the join waited for the other worker's chain: a hand-off measured, and the platform now charges it
    receives = [h.seconds for h in report.handoffs if h.kind == "receive"]
    sends = [h.seconds for h in report.handoffs if h.kind == "send"] or [0.0]
    assert receives and all(h.seconds >= 0 and h.bytes == 256 * 512 * 4 for h in report.handoffs)
    link = calibrated_platform(report, CPU2).peer_links[frozenset(("worker0", "worker1"))]
    assert link.latency == pytest.approx(statistics.median(receives) + statistics.median(sends), abs=1e-9)


def calibrated_piece_times(problem, plan, report) -> list[tuple[float, float, float]]:
    """Per timed piece: its tasks' calibrated time, its measured cost (run and the runtime's lead), predicted."""
    calibrated = Problem(calibrated_graph(report, plan, problem), CPU2, problem.objective)
    out = []
    for p in report.piece_reports:
        tasks = [t for t, _ in plan.device_order[p.device]]
        first = tasks.index(p.first_task)
        if p.predicted_s:
            out.append((sum(calibrated.time(t, p.device) for t in tasks[first:first + p.tasks]),
                        p.measured_s + p.lead_s, p.predicted_s))
    return out


def test_calibration_makes_each_pieces_tasks_sum_to_what_a_lone_worker_measured():
    problem = profiled("bert-tiny")
    plan = random_plan(problem, seed=2)
    alone = plan_from_placement(problem, {t.id: "worker0" for t in problem.graph.tasks})
    report = run("bert-tiny", alone, CPU2, problem=problem, repeats=2, warmup=1)
    times = calibrated_piece_times(problem, alone, report)
    assert len(times) == 1 and times[0][0] == pytest.approx(times[0][1], rel=1e-9)
    # beside another worker of the process, a piece's slowdown is not its tasks' (it is running side by side,
    # charged to the hand-offs): only a speed-up is taken
    report = run("bert-tiny", plan, CPU2, problem=problem, repeats=2, warmup=1)
    times = calibrated_piece_times(problem, plan, report)
    assert len(times) > 2
    assert all(total == pytest.approx(min(measured, predicted), rel=1e-9) for total, measured, predicted in times)


def test_only_devices_that_share_a_process_are_side_by_side():
    from diviml.runtime._calibrate import side_by_side
    assert side_by_side({"cpu": "rank 0: cpu", "gpu": "rank 0: cuda:0", "far": "rank 1: cpu"}) == {"cpu", "gpu"}
    assert side_by_side({"worker0": "rank 0: cpu", "worker1": "rank 1: cpu"}) == set()


def run_once(program, captured):
    """The cut ``program`` run once on its devices, each a one-thread CPU worker: (results, piece timings, the
    captured module's own output)."""
    import torch

    from diviml.runtime._execute import Executor
    values = dict(zip([n.name for n in captured.gm.graph.nodes if n.op == "placeholder"], captured.args))
    executor = Executor(program, {d: torch.device("cpu") for d in program.pieces}, {d: 1 for d in program.pieces},
                        {v: values[v] for v in program.state}, [{v: values[v] for v in program.inputs}])
    try:
        (results,), timings, _ = executor.run()
    finally:
        executor.close()
    with torch.no_grad():
        return results, timings, captured.gm(*captured.args)


def test_a_piece_per_task_when_asked_and_the_program_still_matches():
    from diviml.frontends.pytorch import capture_at
    problem = profiled("gpt-tiny")
    m = model_source("gpt-tiny")
    order = {"worker0": list(problem.graph.topological_order)}
    captured = capture_at(m.build(), m.inputs, 1)
    program = cut(captured, order, max_tasks=1)
    assert all(len(p.tasks) == 1 for p in program.pieces["worker0"])
    assert len(program.pieces["worker0"]) > len(cut(captured, order).pieces["worker0"]) == 1
    import torch

    results, timings, expected = run_once(program, captured)
    assert len(timings) == len(program.pieces["worker0"])
    assert torch.allclose(results[program.results[0]], torch.utils._pytree.tree_leaves(expected)[0], atol=1e-6)


def test_a_torch_fx_capture_whose_weights_are_attributes_runs_split_over_two_workers():
    """torch.fx (the fallback where torch.export fails) keeps weights in the module: a piece reads them off its
    own module (get_attr, call_module), and no worker waits for them as for another device's value."""
    import torch

    from diviml.frontends.pytorch._capture import task_of_nodes, traced

    class Model(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.offset = torch.nn.Parameter(torch.randn(8))
            self.left, self.right = torch.nn.Linear(8, 8), torch.nn.Linear(8, 8)

        def forward(self, x):
            y = x + self.offset
            return self.left(y) * self.right(y) + self.offset

    torch.manual_seed(0)
    captured = traced(Model(), (torch.randn(2, 8),))
    tasks = list(dict.fromkeys(task_of_nodes(captured).values()))
    order = {"worker0": [t for t in tasks if t != "right"], "worker1": ["right"]}
    program = cut(captured, order)
    results, _, expected = run_once(program, captured)
    assert len(program.pieces["worker0"]) == 3 and torch.allclose(results[program.results[0]], expected)


def test_a_link_is_fitted_from_hand_offs_of_several_sizes_and_a_latency_from_one_size():
    from diviml.runtime import Handoff
    from diviml.runtime._calibrate import NO_COPY_BANDWIDTH, fitted_links
    sizes = [4_000, 1_000_000, 4_000_000, 16_000_000, 64_000_000]
    copying = [Handoff("worker0", "worker1", k, b, 50e-6 + b / 2e9) for k, b in enumerate(sizes)]
    (link, n), = fitted_links(copying, CPU2).values()
    assert n == 5 and link.latency == pytest.approx(50e-6, rel=1e-6) and link.bandwidth == pytest.approx(2e9)
    by_reference = [Handoff("worker1", "worker0", k, 4096, s) for k, s in enumerate([80e-6, 60e-6, 70e-6])]
    (link, n), = fitted_links(by_reference, CPU2).values()  # one size: no bandwidth to see, nothing was copied
    assert link.bandwidth == NO_COPY_BANDWIDTH and link.latency == pytest.approx(70e-6, rel=1e-6)
    ranks = preset("cpu-ranks-2")  # the network's bandwidth is kept, its share taken off the latency
    (link, _), = fitted_links([Handoff("rank0", "rank1", 0, 2_700_000, 1.5e-3)], ranks).values()
    assert link.bandwidth == ranks.network.bandwidth and link.latency == pytest.approx(0.5e-3)
    # the sender's side delays its next piece: the model charges a hand-off as one delay, so it is added there
    both = [Handoff("rank0", "rank1", 0, 2_700_000, 1.5e-3), Handoff("rank0", "rank1", 3, 2_700_000, 0.2e-3, "send")]
    (link, n), = fitted_links(both, ranks).values()
    assert n == 2 and link.latency == pytest.approx(0.7e-3)


def test_the_calibrated_links_make_the_runs_plan_take_what_was_measured():
    from types import SimpleNamespace

    from diviml.runtime import Handoff
    problem = profiled("gpt-tiny")
    plan = random_plan(problem, seed=3)  # crosses between the workers many times
    handoffs = (Handoff("worker0", "worker1", 1, 4096, 50e-6),)
    as_measured = calibrated_platform(SimpleNamespace(model="gpt-tiny", handoffs=handoffs, requests=1), CPU2)
    predicted = schedule(Problem(problem.graph, as_measured), plan.parts, plan.device_order).makespan
    for slower, scaled in ((1.5, True), (0.9, False)):
        report = SimpleNamespace(model="gpt-tiny", handoffs=handoffs, measured_s=predicted * slower, requests=1)
        platform = calibrated_platform(report, CPU2, plan=plan, problem=problem)
        link = platform.peer_links[frozenset(("worker0", "worker1"))]
        retimed = schedule(Problem(problem.graph, platform), plan.parts, plan.device_order).makespan
        if scaled:  # the measured hand-off was too short to explain the run: its latency grows until it does
            assert link.latency > 50e-6 and retimed == pytest.approx(report.measured_s, rel=2e-3)
            assert "so that the run's plan re-timed" in platform.sources["peer worker0-worker1"]
        else:  # the tasks alone take longer than the run did: the measured hand-off is kept
            assert link.latency == pytest.approx(50e-6)


def test_a_plan_for_another_graph_is_refused():
    problem = profiled("gpt-tiny")
    plan = diviml.solve(problem, "heft", time_limit=10)
    with pytest.raises(InputError, match="does not belong to this model's graph"):
        run("resnet18", plan, CPU2, repeats=1, warmup=0)
    # a batch plan that cuts tasks, from a graph one task short (profiled by another diviml): refused by name
    batch = Problem(problem.graph, CPU2, Objective("batch", 4))
    cut_plan = diviml.solve(batch, "data-parallel", time_limit=10)
    first = problem.graph.topological_order[0]
    short = replace(cut_plan, assignments=tuple(a for a in cut_plan.assignments if a.task != first))
    with pytest.raises(InputError, match=rf"1 of the model's tasks are not in the plan \(e\.g\. \['{first}'\]\)"):
        run("gpt-tiny", short, CPU2, repeats=1, warmup=0)


def test_a_graph_with_the_same_task_names_but_other_edges_is_refused(tmp_path):
    from diviml.frontends.pytorch import profile
    for name, wiring in (("parallel", "torch.sigmoid(x)"), ("chained", "torch.sigmoid(a)")):
        (tmp_path / f"{name}.py").write_text(
            "import torch\n"
            "class M(torch.nn.Module):\n"
            "    def forward(self, x):\n"
            f"        a = torch.relu(x)\n        b = {wiring}\n        return a * b\n"
            "def make():\n    return M(), (torch.randn(2, 8),)\n")
    parallel = model_source(f"{tmp_path / 'parallel.py'}:make")
    problem = Problem(profile(parallel.build, parallel.inputs, name="parallel", batches=[2], repeats=1,
                              min_time_s=0.0), CPU2)
    plan = random_plan(problem, seed=0)
    assert run(parallel, plan, CPU2, problem=problem, repeats=1, warmup=0).outputs_match
    with pytest.raises(InputError, match="edges"):
        run(f"{tmp_path / 'chained.py'}:make", plan, CPU2, problem=problem, repeats=1, warmup=0)


def test_a_plan_needing_more_gpus_than_the_machine_has_is_refused():
    import torch
    gpus = torch.cuda.device_count() + 1  # one more than here, on any machine
    platform = diviml.Platform.from_dict({"devices": [{"name": "cpu", "type": "cpu", "host": True}] + [
        {"name": f"gpu{i}", "type": "a100", "link": {"bandwidth": 3e10}} for i in range(gpus)]})
    problem = Problem(profile_zoo("gpt-tiny", repeats=1, min_time_s=0.0), platform, Objective("latency"))
    tasks = list(problem.graph.topological_order)
    placement = {t: f"gpu{k % gpus}" for k, t in enumerate(tasks)}
    with pytest.raises(InputError, match="GPU"):
        run("gpt-tiny", plan_from_placement(problem, placement), platform, repeats=1, warmup=0)


def test_a_world_size_that_matches_neither_servers_nor_devices_is_refused():
    assert rank_of_devices(CPU2, 2) == {"worker0": 0, "worker1": 1}
    assert rank_of_devices(preset("cpu-ranks-2"), 2) == {"rank0": 0, "rank1": 1}
    with pytest.raises(InputError, match="--nproc 1"):
        rank_of_devices(CPU2, 3)


# -- the command line, as a user runs it ---------------------------------------------------------------
def cli(*args, timeout=600):
    return subprocess.run([sys.executable, "-m", "diviml", *map(str, args)], capture_output=True, text=True,
                          timeout=timeout)


@pytest.fixture(scope="module")
def gpt_files(tmp_path_factory):
    d = tmp_path_factory.mktemp("run")
    r = cli("profile", "gpt-tiny", "--platform", "cpu-workers-2", "--out", d / "g.json", "--min-time", "0",
            "--repeats", "1", "--quiet")
    assert r.returncode == 0, r.stderr
    # solved with crossings free, so that the plan uses both workers (the preset keeps a model this small on one)
    r = cli("schedule", d / "g.json", "--platform", workers_without_handoffs(d), "--solver", "heft", "--out",
            d / "plan.json", "--quiet")
    assert r.returncode == 0, r.stderr
    return d


def test_run_prints_the_promised_fields_and_writes_trace_gantt_and_calibrated_graph_and_platform(gpt_files):
    d = gpt_files
    r = cli("run", "gpt-tiny", d / "plan.json", "--platform", "cpu-workers-2", "--graph", d / "g.json", "--json",
            "--repeats", "3", "--trace", d / "t.json", "--gantt", d / "m.html", "--gantt", d / "m.png",
            "--calibrate-out", d / "g2.json", "--calibrate-platform-out", d / "measured.yaml", "--quiet")
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout)
    assert out["outputs_match"] is True and out["world_size"] == 1
    assert {"predicted_s", "measured_s", "ratio", "outputs_match"} <= set(out)
    trace = json.loads((d / "t.json").read_text())
    assert any(e["ph"] == "X" and e["pid"] == 1 for e in trace["traceEvents"])
    assert (d / "m.png").read_bytes()[:4] == b"\x89PNG" and "<svg" in (d / "m.html").read_text()
    again = cli("schedule", d / "g2.json", "--platform", d / "measured.yaml", "--solver", "heft", "--json", "--quiet")
    assert again.returncode == 0, again.stderr


@pytest.mark.slow  # over 20 s on 2 cores: the README's test command runs it after the rest
def test_run_as_two_gloo_ranks_gives_the_same_outputs(gpt_files):
    d = gpt_files
    r = cli("run", "gpt-tiny", d / "plan.json", "--platform", "cpu-workers-2", "--json", "--repeats", "2",
            "--nproc", "2", "--quiet")
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout)
    assert out["outputs_match"] is True and out["world_size"] == 2
    assert set(out["devices"].values()) == {"rank 0: cpu", "rank 1: cpu"}
    # the input on one rank, its readers on the other: it is sent as the request starts
    problem = Problem(diviml.TaskGraph.load(d / "g.json"), CPU2, Objective("latency"))
    readers = set(problem.graph.successors["tokens"])
    placement = {t.id: "worker1" if t.id in readers else random.Random(t.id).choice(["worker0", "worker1"])
                 for t in problem.graph.tasks} | {"tokens": "worker0"}
    plan_from_placement(problem, placement).save(d / "apart.json")
    r = cli("run", "gpt-tiny", d / "apart.json", "--platform", "cpu-workers-2", "--json", "--repeats", "1",
            "--nproc", "2", "--quiet")
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout)
    assert out["outputs_match"] is True
    # both ranks' timelines on one clock: a value sent from one rank reaches the other after it was made
    assert out["handoffs"] and all(h["seconds"] >= 0 for h in out["handoffs"])


def test_bad_runs_are_one_line_and_exit_2_with_nothing_written(gpt_files, tmp_path):
    d = gpt_files
    cases = [("resnet18", d / "plan.json", ["--platform", "cpu-workers-2"], "does not belong"),
             ("gpt-tiny", d / "plan.json", ["--platform", "paper-server"], "lacks"),
             ("gpt-tiny", d / "plan.json", ["--platform", "cpu-workers-2", "--nproc", "3"], "world size 3"),
             ("nosuch.py:make", d / "plan.json", [], "does not exist")]
    for model, plan, extra, message in cases:
        r = cli("run", model, plan, *extra, "--trace", tmp_path / "t.json", "--quiet")
        assert r.returncode == 2, (model, extra, r.stderr)
        assert message in r.stderr and len(r.stderr.strip().splitlines()) == 1, r.stderr
        assert not (tmp_path / "t.json").exists()


def test_a_rank_that_dies_ends_the_run_promptly_naming_it(gpt_files, tmp_path):
    (tmp_path / "dies.py").write_text(
        "import os, torch\n"
        "def make():\n"
        "    if os.environ.get('RANK') == '1':\n"
        "        os._exit(3)\n"
        "    return torch.nn.Linear(4, 4), (torch.randn(1, 4),)\n")
    plan = tmp_path / "p.json"
    from diviml.frontends.pytorch import profile
    source = model_source(f"{tmp_path / 'dies.py'}:make")
    problem = Problem(profile(source.build, source.inputs, name="dies", repeats=1, min_time_s=0.0), CPU2)
    placement = {t.id: ("worker0", "worker1")[k % 2] for k, t in enumerate(problem.graph.tasks)}
    plan_from_placement(problem, placement).save(plan)
    started = time.perf_counter()
    r = cli("run", f"{tmp_path / 'dies.py'}:make", plan, "--platform", "cpu-workers-2", "--nproc", "2", "--quiet")
    assert r.returncode == 2 and "rank 1 of 2 failed (exit status 3)" in r.stderr, r.stderr
    assert time.perf_counter() - started < 60


def test_run_compares_the_plan_with_the_best_single_devices_plan_when_asked(gpt_files):
    d = gpt_files
    r = cli("run", "gpt-tiny", d / "plan.json", "--platform", "cpu-workers-2", "--graph", d / "g.json", "--json",
            "--repeats", "2", "--compare", "--quiet")
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout)
    assert out["single_device"] in ("worker0", "worker1") and out["single_outputs_match"] is True
    assert out["single_measured_s"] > 0 and out["single_predicted_s"] > 0
    assert out["speedup"] == pytest.approx(out["single_measured_s"] / out["measured_s"])
    text = cli("run", "gpt-tiny", d / "plan.json", "--platform", "cpu-workers-2", "--graph", d / "g.json",
               "--repeats", "2", "--compare", "--quiet")
    assert text.returncode == 0 and f"best single device {out['single_device']}: measured" in text.stdout
    # best-device plans on the profiled graph: without it there is nothing to compare with
    bad = cli("run", "gpt-tiny", d / "plan.json", "--platform", "cpu-workers-2", "--compare")
    assert bad.returncode == 2 and bad.stderr.strip().count("\n") == 0 and "--compare needs --graph" in bad.stderr
