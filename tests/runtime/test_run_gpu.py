"""Running a plan over this machine's CPU and a GPU: profiled on both from one capture, cut between them, the
unsplit module's outputs, and the timings of both devices. These need a CUDA device; on a machine without
one they are skipped (benchmarks/gpu_session.sh runs them on a lent GPU machine)."""

import json
import random
import subprocess
import sys

import pytest

torch = pytest.importorskip("torch")

import diviml  # noqa: E402
from diviml import Assignment, Objective, Plan, Problem  # noqa: E402
from diviml.catalogue import spec  # noqa: E402
from diviml.frontends.pytorch import measured_device_type, profile_zoo  # noqa: E402
from diviml.frontends.pytorch._profile import profile  # noqa: E402
from diviml.runtime import model_source, run  # noqa: E402
from diviml.simulate import schedule  # noqa: E402

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device (none on this machine)")


def cpu_and_gpu() -> diviml.Platform:
    """This machine's CPU (4 threads) and its first GPU, under the type its times are recorded as."""
    return diviml.Platform.from_dict({"name": "cpu-and-gpu", "devices": [
        {"name": "cpu", "type": "host", "host": True, "threads": 4},
        {"name": "gpu", "type": measured_device_type("cuda"), "link": {"bandwidth": 2e10, "latency": 2e-5}}]})


def profiled_on_both(name: str, batches=(1,)) -> diviml.TaskGraph:
    m = model_source(name)
    from diviml.catalogue import CATALOGUE
    gpu = measured_device_type("cuda")
    return profile(m.build, m.inputs, name=name, batches=batches, measured_type="host",
                   analytic_types=[t for t in CATALOGUE if t != gpu], repeats=2, threads=4, min_time_s=0.0,
                   also_on=["cuda"])


def placed(problem: Problem, placement: dict[str, str]) -> Plan:
    parts = {t: [(d, problem.batch_size)] for t, d in placement.items()}
    timed = schedule(problem, parts)
    return Plan("latency", tuple(Assignment(j.task, j.device, j.start) for j in timed.jobs), timed.makespan, 0.0,
                "feasible", "hand", batch_size=problem.batch_size)


@pytest.mark.parametrize("name", ["gpt-tiny", "resnet18"])
def test_one_capture_is_measured_on_the_cpu_and_on_the_gpu(name):
    graph = profiled_on_both(name)
    gpu = measured_device_type("cuda")
    cpu_only = profile_zoo(name, repeats=1, min_time_s=0.0, threads=4)
    assert [t.id for t in graph.tasks] == [t.id for t in cpu_only.tasks] and graph.edges == cpu_only.edges
    ops = [t for t in graph.tasks if t.kind != "input" and t.flops]
    assert all(t.time["host"] > 0 and t.time[gpu] > 0 for t in ops)
    # the GPU's times are measured there, not the catalogue's roofline for it, and are not the CPU's
    roofline = {t.id: spec(gpu).roofline(t.flops, t.bytes_accessed or 0.0) for t in ops}
    # (a launch-bound operator may come within 5% of the roofline's launch overhead, or of the CPU's few
    # microseconds, by chance: most do not, and a copy of either side's times would make them all)
    assert sum(abs(t.time[gpu] - roofline[t.id]) > 0.05 * roofline[t.id] for t in ops) > 0.5 * len(ops)
    assert sum(abs(t.time[gpu] - t.time["host"]) > 0.05 * t.time["host"] for t in ops) > 0.5 * len(ops)


@pytest.mark.parametrize("name", ["gpt-tiny", "resnet18", "randwire-ws-s0"])
def test_a_plan_over_the_cpu_and_the_gpu_gives_the_unsplit_modules_outputs(name):
    platform = cpu_and_gpu()
    problem = Problem(profiled_on_both(name), platform, Objective("latency"))
    rng = random.Random(1)
    for plan in (diviml.solve(problem, "heft", time_limit=20),
                 placed(problem, {t.id: rng.choice(["cpu", "gpu"]) for t in problem.graph.tasks})):
        report = run(name, plan, platform, problem=problem, repeats=3, warmup=1)
        assert report.outputs_match
        used = {a.device for a in plan.assignments}
        assert set(report.devices) == used and all(report.devices[d] == "rank 0: cuda:0" for d in used if d == "gpu")
        assert {p.device for p in report.piece_reports} == used
        assert report.measured_s > 0 and report.predicted_s > 0


def test_a_batch_split_between_the_cpu_and_the_gpu_joins_its_rows():
    platform = cpu_and_gpu()
    problem = Problem(profiled_on_both("resnet18", batches=(4,)), platform, Objective("batch", batch_size=4))
    topo = {t: i for i, t in enumerate(problem.graph.topological_order)}
    parts = {t: ([("cpu", 1), ("gpu", 3)] if k % 3 == 0 else [("gpu", 4)]) for t, k in topo.items()}
    timed = schedule(problem, parts)
    jobs = sorted(timed.jobs, key=lambda j: (topo[j.task], j.offset))
    plan = Plan("batch", tuple(Assignment(j.task, j.device, j.start, j.batch) for j in jobs), timed.makespan,
                0.0, "feasible", "hand", batch_size=4)
    assert diviml.validate(plan, problem).ok
    report = run("resnet18", plan, platform, problem=problem, repeats=2, warmup=1)
    assert report.outputs_match and report.batch_size == 4


def test_the_command_line_profiles_on_both_schedules_and_runs_over_them(tmp_path):
    def cli(*args):
        r = subprocess.run([sys.executable, "-m", "diviml", *map(str, args), "--quiet"], capture_output=True,
                           text=True, timeout=600)
        assert r.returncode == 0, r.stderr
        return r.stdout
    (tmp_path / "p.json").write_text(json.dumps(cpu_and_gpu().to_dict()))
    cli("profile", "gpt-tiny", "--platform", tmp_path / "p.json", "--device", "cpu,cuda", "--out", tmp_path / "g.json",
        "--min-time", "0", "--repeats", "2")
    cli("schedule", tmp_path / "g.json", "--platform", tmp_path / "p.json", "--solver", "split", "--time-limit", "10",
        "--out", tmp_path / "plan.json")
    out = json.loads(cli("run", "gpt-tiny", tmp_path / "plan.json", "--graph", tmp_path / "g.json", "--platform",
                         tmp_path / "p.json", "--repeats", "3", "--json", "--calibrate-platform-out",
                         tmp_path / "measured.yaml"))
    assert out["outputs_match"] and out["predicted_s"] > 0 and out["measured_s"] > 0
    assert (tmp_path / "measured.yaml").exists()


def test_a_plan_over_the_cpu_and_the_gpu_as_two_ranks_gives_the_unsplit_modules_outputs(tmp_path):
    """A rank per device: the CPU's pieces in one process, the GPU's in another, values sent through gloo on
    the host (a GPU value staged through host memory both ways)."""
    platform = cpu_and_gpu()
    problem = Problem(profiled_on_both("gpt-tiny"), platform, Objective("latency"))
    rng = random.Random(2)
    placed(problem, {t.id: rng.choice(["cpu", "gpu"]) for t in problem.graph.tasks}).save(tmp_path / "plan.json")
    (tmp_path / "p.json").write_text(json.dumps(platform.to_dict()))
    r = subprocess.run([sys.executable, "-m", "diviml", "run", "gpt-tiny", tmp_path / "plan.json", "--platform",
                        tmp_path / "p.json", "--nproc", "2", "--repeats", "2", "--json", "--quiet"],
                       capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout)
    assert out["outputs_match"] is True and out["world_size"] == 2
    assert out["devices"] == {"cpu": "rank 0: cpu", "gpu": "rank 1: cuda:0"}
    assert out["handoffs"] and all(h["seconds"] >= 0 for h in out["handoffs"])


def test_a_plan_gpu_of_another_type_than_the_gpu_it_runs_on_is_noted():
    here = measured_device_type("cuda")
    other = "v100" if here != "v100" else "a100"
    platform = diviml.Platform.from_dict({"name": "cpu-and-another-gpu", "devices": [
        {"name": "cpu", "type": "host", "host": True, "threads": 4},
        {"name": "gpu", "type": other, "link": {"bandwidth": 2e10, "latency": 2e-5}}]})
    problem = Problem(profiled_on_both("gpt-tiny"), platform, Objective("latency"))
    plan = placed(problem, {t.id: "gpu" for t in problem.graph.tasks})
    report = run("gpt-tiny", plan, platform, problem=problem, repeats=1, warmup=1)
    assert report.outputs_match
    assert any(f"gpu is a {other} in the platform" in n and f"type {here}" in n for n in report.notes)
