"""A model whose result for a sample depends on the batch's other samples, on the user's path: profiled, its
mixing task is marked; scheduled as a batch, that task runs whole and the rest still splits; run, the plan gives
the model's outputs. A plan that cuts the task is refused by the runtime in one line, naming it."""

import json
import subprocess
import sys

import pytest
from conftest import workers_without_handoffs

MODEL = '''
import torch
from torch import nn


class ByLargest(nn.Module):
    """Each sample divided by the batch's largest activation between two MLPs."""

    def __init__(self):
        super().__init__()
        self.a = nn.Sequential(nn.Linear(256, 512), nn.ReLU(), nn.Linear(512, 256))
        self.b = nn.Sequential(nn.Linear(256, 512), nn.ReLU(), nn.Linear(512, 256))

    def forward(self, x):
        h = self.a(x)
        return self.b(h / h.abs().max())


def make():
    return ByLargest().eval(), (torch.randn(16, 256),)
'''


def cli(*args):
    return subprocess.run([sys.executable, "-m", "diviml", *map(str, args)], capture_output=True, text=True,
                          timeout=600)


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    where = tmp_path_factory.mktemp("whole")
    (where / "by_largest.py").write_text(MODEL)
    model = f"{where / 'by_largest.py'}:make"
    r = cli("profile", model, "--platform", "cpu-workers-2", "--out", where / "graph.json")
    assert r.returncode == 0, r.stderr
    assert "1 task(s) mix the samples of a batch" in r.stdout and "max_1" in r.stdout  # the user is told
    return where, model


def test_the_profile_marks_the_task_that_mixes_samples_and_no_other(files):
    where, _ = files
    tasks = json.loads((where / "graph.json").read_text())["tasks"]
    assert [t["id"] for t in tasks if t.get("whole_batch")] == ["max_1"]


def test_a_batch_plan_runs_the_marked_task_whole_and_gives_the_models_outputs(files):
    where, model = files
    workers = workers_without_handoffs(where)
    r = cli("schedule", where / "graph.json", "--platform", workers, "--objective", "batch", "--batch", 16,
            "--solver", "data-parallel", "--out", where / "plan.json")
    assert r.returncode == 0, r.stderr
    parts = {}
    for a in json.loads((where / "plan.json").read_text())["assignments"]:
        parts.setdefault(a["task"], []).append(a["batch"])
    assert parts["max_1"] == [16] and parts["addmm"] == [8, 8]
    r = cli("run", model, where / "plan.json", "--graph", where / "graph.json", "--platform", workers,
            "--repeats", 2, "--warmup", 1, "--quiet")
    assert r.returncode == 0, r.stderr
    assert "outputs match the unsplit module" in r.stdout


def test_a_plan_that_cuts_a_mixing_task_is_refused_in_one_line_naming_it(files):
    where, model = files
    graph = json.loads((where / "graph.json").read_text())
    for t in graph["tasks"]:
        t.pop("whole_batch", None)  # as profiled before diviml marked such tasks
    (where / "unmarked.json").write_text(json.dumps(graph))
    r = cli("schedule", where / "unmarked.json", "--platform", "cpu-workers-2", "--objective", "batch", "--batch",
            16, "--solver", "data-parallel", "--out", where / "cut.json")
    assert r.returncode == 0, r.stderr
    r = cli("run", model, where / "cut.json", "--platform", "cpu-workers-2", "--repeats", 1, "--warmup", 0, "--quiet")
    assert r.returncode == 2 and len(r.stderr.strip().splitlines()) == 1
    assert "cuts 'max_1' into sub-batches" in r.stderr and "diviml profile" in r.stderr

