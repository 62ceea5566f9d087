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
