"""A device type the graph has no times for gets them derived by the roofline rule, or is refused: a
platform device is never silently idle."""

import json
import subprocess
import sys
from pathlib import Path

import pytest

import diviml
from diviml.catalogue import spec
from diviml.errors import InputError
from diviml.frontends.derive import complete_for, derive_times
from diviml.generators import layered_dag
from diviml.graph import Task, TaskGraph
from diviml.platform import Platform

EXAMPLE = Path(__file__).parents[2] / "examples" / "layered40.json"
PLATFORM = {
    "name": "cpu-v100-t4",
    "devices": [{"name": "cpu", "type": "cpu", "host": True},
                {"name": "v100", "type": "v100", "link": {"bandwidth": 15.75e9}},
                {"name": "t4", "type": "t4", "link": {"bandwidth": 15.75e9}}],
}


def test_a_catalogue_type_the_graph_lacks_is_derived_from_the_nearest_gpu_and_used():
    graph = layered_dag(30, seed=4)  # times for cpu, a100, v100; flops on every task
    platform = Platform.from_dict(PLATFORM)
    completed, said = complete_for(graph, platform)
    assert "t4" in completed.device_types and "derived from v100" in said[0]
    for task, new in zip(graph.tasks, completed.tasks):
        expected = spec("t4").launch_overhead + (task.time["v100"] - spec("v100").launch_overhead) * (
            spec("t4").work(task.flops, 0) / spec("v100").work(task.flops, 0))
        assert new.time["t4"] == pytest.approx(expected)
        assert new.time_by_batch["t4"][8] > new.time["t4"]
    problem = diviml.Problem(completed, platform, diviml.Objective("latency"))
    plan = diviml.solve(problem, "exact", time_limit=20)
    assert diviml.validate(plan, problem).ok


def test_a_type_described_in_the_platform_file_is_costed_by_its_peaks_and_kept_in_the_file():
    data = {**PLATFORM, "devices": PLATFORM["devices"][:2] + [
        {"name": "npu", "type": "npu-x", "link": {"bandwidth": 15.75e9}}],
        "device_types": {"npu-x": {"peak_flops": 140e12, "memory_bandwidth": "3e12", "launch_overhead": 0,
                                   "source": "vendor sheet"}}}
    platform = Platform.from_dict(data)
    assert platform.spec_of("npu-x").peak_flops == 140e12
    assert Platform.from_dict(platform.to_dict()).device_specs == platform.device_specs
    graph = TaskGraph.create([Task("mm", {"v100": 1e-3 + spec("v100").launch_overhead}, flops=14e9),
                              Task("view", {"v100": 0.0}, flops=0.0)], [("mm", "view")])
    completed, _ = complete_for(graph, platform)
    assert completed.tasks[0].time["npu-x"] == pytest.approx(1e-3 * 14 / 140)  # compute-bound: peak ratio
    assert completed.tasks[1].time["npu-x"] == 0.0  # no kernel on the reference: none here either


@pytest.mark.parametrize("entry, words", [
    ({"memory_bandwidth": 1e12}, "needs peak_flops"),
    ({"peak_flops": 1e12, "memory_bandwidth": 1e12, "tflops": 3}, "unknown field"),
    ({"peak_flops": -1, "memory_bandwidth": 1e12}, "positive"),
    ({"peak_flops": 1e12, "memory_bandwidth": 1e12, "cores": 0.5}, "whole number"),
    ("fast", "must be a mapping"),
])
def test_a_malformed_device_type_is_one_clear_error(entry, words):
    with pytest.raises(InputError, match=words):
        Platform.from_dict({**PLATFORM, "device_types": {"t4x": entry}})


def test_derived_times_keep_allowed_types_and_batch_tables():
    task = Task("t", {"a100": 2e-3}, time_by_batch={"a100": {4: 5e-3}}, flops=1e9, bytes_accessed=1e6,
                allowed_types=frozenset({"a100"}))
    out = derive_times(TaskGraph.create([task], []), spec("l4"), "a100", spec("a100")).tasks[0]
    assert out.can_run_on("l4") and set(out.time_by_batch["l4"]) == {4}


def run(*args):
    return subprocess.run([sys.executable, "-m", "diviml", *map(str, args)], capture_output=True, text=True)


def test_the_cli_refuses_a_device_type_it_cannot_cost_unless_told_to_leave_it_idle(tmp_path):
    path = tmp_path / "p.json"
    path.write_text(json.dumps({**PLATFORM, "devices": PLATFORM["devices"][:2] + [
        {"name": "mystery", "type": "mystery", "link": {"bandwidth": 15.75e9}}]}))
    r = run("schedule", EXAMPLE, "--platform", path, "--solver", "heft", "--out", tmp_path / "o.json")
    assert r.returncode == 2 and "mystery" in r.stderr and len(r.stderr.strip().splitlines()) == 1
    assert not (tmp_path / "o.json").exists()
    r = run("schedule", EXAMPLE, "--platform", path, "--solver", "heft", "--allow-idle", "--json")
    assert r.returncode == 0 and "warning" in r.stderr and "mystery" not in json.loads(r.stdout)["devices_used"]
