"""The PyTorch front end: capture keeps the model's meaning, costs are right, graphs are plain diviml JSON."""

import json
import subprocess
import sys

import pytest
import torch
from torch.utils.flop_counter import FlopCounterMode

import diviml
from diviml import InputError, zoo
from diviml.frontends.pytorch import capture, measure, profile_zoo, to_task_graph

SMALL = ["resnet18", "mobilenet_v3_large", "googlenet", "gpt-tiny", "bert-tiny", "randwire-ws-s0",
         "randwire-er-s0", "randwire-ba-s0"]
LARGE = ["resnet50", "inception_v3", "vgg16", "densenet121"]


def _captured(name):
    spec = zoo.get(name)
    model = spec.build().eval()
    inputs = spec.inputs(1)
    return model, inputs, capture(model, inputs)


@pytest.mark.parametrize("name", SMALL + LARGE)
def test_running_the_captured_graph_gives_the_modules_output(name):
    model, inputs, captured = _captured(name)
    with torch.no_grad():
        expected = model(*inputs)
        got = captured.run()
    got = got[0] if isinstance(got, (tuple, list)) else got
    assert captured.method == "export"
    assert torch.allclose(expected, got, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("name", ["resnet18", "gpt-tiny", "randwire-ba-s0"])
def test_convolution_and_matmul_flops_agree_with_torch_flop_counter(name):
    model, inputs, captured = _captured(name)
    records = measure(captured, repeats=0, warmup=0)
    ours = sum(r.flops for r in records if r.kind.startswith(("convolution", "mm", "addmm", "bmm", "baddbmm")))
    with FlopCounterMode(display=False) as counter, torch.no_grad():
        captured.run()  # the same ATen operators (the module's own eager path may take fused kernels)
    assert ours == pytest.approx(counter.get_total_flops(), rel=1e-3)
    if name == "resnet18":
        with FlopCounterMode(display=False) as eager, torch.no_grad():
            model(*inputs)
        assert ours == pytest.approx(eager.get_total_flops(), rel=1e-3)


def test_parameters_are_resident_memory_not_tasks_and_tasks_keep_their_module_path():
    model, inputs, captured = _captured("resnet18")
    graph = to_task_graph(captured, measure(captured, repeats=0, warmup=0), name="r18")
    weights = sum(p.numel() * p.element_size() for p in model.parameters())
    # buffers no operator reads (BatchNorm's num_batches_tracked in eval) are resident nowhere
    buffers = sum(b.numel() * b.element_size() for n, b in model.named_buffers() if "num_batches" not in n)
    assert sum(t.memory_bytes for t in graph.tasks) == weights + buffers
    assert not any("weight" in t.id for t in graph.tasks)
    conv = next(t for t in graph.tasks if t.kind == "convolution")
    assert conv.module == "conv1" and conv.output_bytes == 64 * 112 * 112 * 4


def test_elementwise_operators_cost_memory_traffic_not_zero():
    _, _, captured = _captured("resnet18")
    relu = next(r for r in measure(captured, repeats=0, warmup=0) if r.kind == "relu")
    assert relu.flops > 0 and relu.bytes_accessed >= 2 * relu.output_bytes


def test_a_data_dependent_branch_is_named_in_the_error():
    class Branchy(torch.nn.Module):
        def forward(self, x):
            if x.sum() > 0:
                return x * 2
            return x - 1

    with pytest.raises(InputError, match="control flow"):
        capture(Branchy(), (torch.randn(4),))


def test_profiled_graphs_measure_the_cpu_model_other_devices_and_tables_by_batch(tmp_path):
    graph = profile_zoo("bert-tiny", batches=(1, 4), repeats=3)
    assert graph.batch_size == 1
    assert all(set(t.time) >= {"cpu", "v100", "a100", "h100", "l4"} for t in graph.tasks)
    matmul = next(t for t in graph.tasks if t.kind in ("addmm", "mm"))
    assert set(matmul.time_by_batch["cpu"]) == {4} and matmul.time["cpu"] > 0
    graph.save(tmp_path / "g.json")
    again = diviml.TaskGraph.load(tmp_path / "g.json")
    assert again == graph
    plan = diviml.solve(diviml.Problem(again, diviml.preset("paper-server")), "heft", time_limit=10)
    assert plan.objective > 0


def test_analytic_profiling_allocates_no_weights():
    graph = profile_zoo("gpt2-small", device=None)
    assert "cpu" in graph.device_types and sum(t.memory_bytes for t in graph.tasks) > 400e6  # 124M fp32 params
    assert all(t.time["a100"] > 0 for t in graph.tasks if t.kind != "input")


def test_cli_profiles_and_schedules_a_zoo_model(tmp_path):
    out = tmp_path / "g.json"
    r = subprocess.run([sys.executable, "-m", "diviml", "profile", "gpt-tiny", "--batch", "1,2", "--repeats", "2",
                        "--out", str(out), "--json", "--quiet"], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)["tasks"] == len(diviml.TaskGraph.load(out))
    r = subprocess.run([sys.executable, "-m", "diviml", "schedule", "bert-tiny", "--json", "--quiet"],
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr and json.loads(r.stdout)["objective"] > 0
    r = subprocess.run([sys.executable, "-m", "diviml", "profile", "no-such-model"], capture_output=True, text=True)
    assert r.returncode == 2 and "unknown model" in r.stderr


def test_calibration_reports_how_far_the_roofline_is_from_measurements():
    from diviml.frontends.pytorch import calibrate
    graph = profile_zoo("resnet18", repeats=2)
    c = calibrate(graph, "cpu")
    assert c.tasks == len(graph) - 1 and c.scale > 0
    assert c.error_after <= c.error_before
