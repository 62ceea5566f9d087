"""Your own model on the user's path: diviml.profile at the top level, file.py:factory wherever a zoo name
goes, and zoo names profiled once then read from the cache."""

import json
import subprocess
import sys
from pathlib import Path

import torch

import diviml
from diviml.frontends.models import model_graph

EXAMPLES = Path(__file__).parents[2] / "examples"


def test_diviml_profile_costs_a_users_module_at_its_batch_for_this_cpu_and_the_catalogue():
    model = torch.nn.Sequential(torch.nn.Linear(64, 64), torch.nn.ReLU(), torch.nn.Linear(64, 8))
    graph = diviml.profile(model, (torch.randn(4, 64),), name="mlp", repeats=2, min_time_s=0.05)
    assert graph.name == "mlp" and graph.batch_size == 4
    assert {"host", "cpu", "a100", "t4"} <= graph.device_types
    assert all(t.time["host"] > 0 for t in graph.tasks if t.kind != "input" and t.flops)


def test_a_users_module_is_also_measured_at_one_sample_so_sub_batches_are_not_priced_in_proportion():
    model = torch.nn.Sequential(torch.nn.Linear(64, 64), torch.nn.ReLU(), torch.nn.Linear(64, 8))
    graph = diviml.profile(model, (torch.randn(8, 64),), name="mlp", repeats=2, min_time_s=0.05)
    assert graph.batch_size == 8
    ops = [t for t in graph.tasks if t.flops]
    assert all(set(t.time_by_batch["host"]) == {1} and set(t.time_by_batch["a100"]) == {1} for t in ops)
    # operators this small cost about the same at 1 and 8 samples: a part of one sample is not an eighth
    at_one = sum(graph.time_at(t.id, "host", 1) for t in ops)
    assert at_one > 0.5 * sum(t.time["host"] for t in ops)
    alone = diviml.profile(model, (torch.randn(8, 64),), name="mlp", batches=(8,), repeats=2, min_time_s=0.05)
    assert all(not t.time_by_batch for t in alone.tasks)  # only the sizes asked for


def test_a_module_whose_inputs_hold_the_batch_in_another_dimension_says_which():
    lstm = torch.nn.LSTM(8, 8)  # (sequence, batch, features), as PyTorch defaults it
    graph = diviml.profile(lstm, (torch.randn(5, 3, 8),), name="lstm", batch_dims=1, repeats=1, min_time_s=0.01)
    assert graph.batch_size == 3 and not any(t.whole_batch for t in graph.tasks)
    unsaid = diviml.profile(lstm, (torch.randn(5, 3, 8),), name="lstm", repeats=1, min_time_s=0.01)
    assert unsaid.batch_size == 5  # unsaid, its 5 steps are taken for samples


def test_a_factory_is_profiled_at_the_batch_sizes_asked_for_its_inputs_cut_or_repeated(tmp_path):
    (tmp_path / "net.py").write_text("import torch\n"
                                     "def make():\n"
                                     "    return torch.nn.Linear(16, 4), (torch.randn(8, 16),)\n"
                                     "def uneven():\n"
                                     "    class Two(torch.nn.Module):\n"
                                     "        def forward(self, x, y):\n"
                                     "            return x.sum(0) + y.sum(0)\n"
                                     "    return Two(), (torch.randn(4, 3), torch.randn(5, 3))\n")
    r = subprocess.run([sys.executable, "-m", "diviml", "profile", f"{tmp_path / 'net.py'}:make", "--batch", "2,16",
                        "--min-time", "0.05", "--json", "--out", tmp_path / "g.json"], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    graph = json.loads((tmp_path / "g.json").read_text())
    assert graph["batch_size"] == 2
    assert {"16"} == {b for t in graph["tasks"] for b in t.get("time_by_batch", {}).get("host", {})}
    uneven = f"{tmp_path / 'net.py'}:uneven"  # no common first dimension: its own batch only
    r = subprocess.run([sys.executable, "-m", "diviml", "profile", uneven, "--min-time", "0.05", "--out",
                        tmp_path / "u.json"], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    r = subprocess.run([sys.executable, "-m", "diviml", "profile", uneven, "--batch", "4,2", "--min-time", "0.05"],
                       capture_output=True, text=True)
    assert r.returncode == 2 and len(r.stderr.strip().splitlines()) == 1
    assert "differ in their first dimension" in r.stderr


def test_schedule_takes_a_model_file_and_factory_as_its_input(tmp_path):
    r = subprocess.run([sys.executable, "-m", "diviml", "schedule", f"{EXAMPLES / 'my_model.py'}:make",
                        "--platform", "cpu-workers-2", "--solver", "heft", "--json", "--out", tmp_path / "p.json"],
                       capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)["status"] in ("optimal", "feasible", "timeout")
    r = subprocess.run([sys.executable, "-m", "diviml", "schedule", f"{EXAMPLES / 'my_model.py'}:nothing"],
                       capture_output=True, text=True)
    assert r.returncode == 2 and "no function 'nothing'" in r.stderr


def test_a_zoo_name_is_profiled_once_and_then_read_from_the_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("DIVIML_CACHE", str(tmp_path))
    first = model_graph("gpt-tiny")
    assert len(list((tmp_path / "profiles").glob("gpt-tiny-*.json"))) == 1
    again = model_graph("gpt-tiny")
    assert again.to_dict() == first.to_dict()  # measured times move from run to run; cached ones do not
    (next((tmp_path / "profiles").glob("gpt-tiny-*.json"))).write_text("{broken")
    assert len(model_graph("gpt-tiny")) == len(first)  # a damaged entry is profiled again
