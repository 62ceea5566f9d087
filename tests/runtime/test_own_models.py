"""Your own models of less usual shape on the user's path, profile -> schedule -> run through the CLI: a model
that updates a buffer as it runs, one that returns a weight of its own and its input beside its result, one
that returns its batch size in a dict beside nested tensors, a factory whose plan is for another batch than its example's, and a sequence-first model that says where its
batch is."""

import json
import subprocess
import sys

import pytest
from conftest import workers_without_handoffs

from diviml import Assignment, Objective, Plan, Problem, TaskGraph, preset
from diviml.simulate import schedule

MODELS = '''
import torch


class Counter(torch.nn.Module):
    """Counts the samples it has seen in a buffer (export returns the new count beside the output)."""

    def __init__(self):
        super().__init__()
        self.a, self.b = torch.nn.Linear(16, 16), torch.nn.Linear(16, 16)
        self.register_buffer("seen", torch.zeros(()))

    def forward(self, x):
        self.seen += x.shape[0]
        return self.b(torch.relu(self.a(x)))


class GivesWeight(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.a, self.b = torch.nn.Linear(16, 16), torch.nn.Linear(16, 16)

    def forward(self, x):
        return self.b(self.a(x)) + self.a(x), self.a.weight, x


class SequenceFirst(torch.nn.Module):
    """nn.LSTM and self-attention as PyTorch defaults them: (sequence, batch, features)."""

    def __init__(self):
        super().__init__()
        self.lstm = torch.nn.LSTM(16, 16)
        self.attention = torch.nn.MultiheadAttention(16, 2)
        self.head = torch.nn.Linear(16, 4)

    def forward(self, x):
        h, _ = self.lstm(x)
        return self.head(h + self.attention(h, h, h, need_weights=False)[0])


class Sized(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.a, self.b = torch.nn.Linear(16, 16), torch.nn.Linear(16, 16)

    def forward(self, x):
        return {"a": self.a(x), "pair": (self.b(x), self.a(x) * 2), "n": x.shape[0]}


def counter():
    return Counter(), (torch.randn(4, 16),)


def sized():
    return Sized(), (torch.randn(4, 16),)


def sequence_first():
    return SequenceFirst(), (torch.randn(6, 8, 16),), 1  # the batch (8) in dimension 1


def nowhere():
    return SequenceFirst(), (torch.randn(6, 8, 16),), 3


def gives_weight():
    return GivesWeight(), (torch.randn(4, 16),)
'''


def cli(*args):
    return subprocess.run([sys.executable, "-m", "diviml", *map(str, args)], capture_output=True, text=True,
                          timeout=600)


@pytest.mark.parametrize("objective", ["latency", "batch"])
@pytest.mark.parametrize("factory", ["counter", "gives_weight", "sized"])
def test_the_plan_runs_with_the_models_outputs(tmp_path, factory, objective):
    (tmp_path / "models.py").write_text(MODELS)
    model = f"{tmp_path / 'models.py'}:{factory}"
    r = cli("profile", model, "--platform", "cpu-workers-2", "--min-time", 0.1, "--out", tmp_path / "g.json")
    assert r.returncode == 0, r.stderr
    # batch: a plan for 8 samples, the factory's example holding 4; the run feeds its samples twice over
    # (over two workers whose crossings are free: the preset keeps so small a model on one)
    how = ["--objective", "batch", "--batch", 8, "--solver", "data-parallel"] if objective == "batch" else []
    workers = workers_without_handoffs(tmp_path)
    r = cli("schedule", tmp_path / "g.json", "--platform", workers, *how, "--out", tmp_path / "p.json")
    assert r.returncode == 0, r.stderr
    r = cli("run", model, tmp_path / "p.json", "--graph", tmp_path / "g.json", "--platform", workers,
            "--repeats", 1, "--warmup", 0, "--quiet")
    assert r.returncode == 0, r.stderr
    assert "outputs match the unsplit module" in r.stdout
    if objective == "batch":
        assert "batch 8 on 2 device(s)" in r.stdout


def test_a_sequence_first_model_that_says_where_its_batch_is_gets_batch_plans_over_its_samples(tmp_path):
    (tmp_path / "models.py").write_text(MODELS)
    model = f"{tmp_path / 'models.py'}:sequence_first"
    r = cli("profile", model, "--platform", "cpu-workers-2", "--min-time", 0.1, "--out", tmp_path / "g.json")
    assert r.returncode == 0, r.stderr
    graph = json.loads((tmp_path / "g.json").read_text())
    # its batch is its 8 samples, not its 6 steps, and no task mixes samples (along the sequence, attention does)
    assert graph["batch_size"] == 8 and not any(t.get("whole_batch") for t in graph["tasks"])
    assert not any((t.get("module") or "").startswith("inner") for t in graph["tasks"])  # the user's paths
    # every task cut 4/4 over the two workers (whether a solver cuts so small a model depends on its timings)
    problem = Problem(TaskGraph.load(tmp_path / "g.json"), preset("cpu-workers-2"), Objective("batch", 8))
    timed = schedule(problem, {t.id: [("worker0", 4), ("worker1", 4)] for t in problem.graph.tasks})
    Plan("batch", tuple(Assignment(j.task, j.device, j.start, j.batch) for j in timed.jobs), timed.makespan, 0.0,
         "feasible", "hand", batch_size=8).save(tmp_path / "p.json")
    r = cli("run", model, tmp_path / "p.json", "--graph", tmp_path / "g.json", "--platform", "cpu-workers-2",
            "--repeats", 1, "--warmup", 0, "--quiet")
    assert r.returncode == 0, r.stderr
    assert "outputs match the unsplit module" in r.stdout
    r = cli("profile", f"{tmp_path / 'models.py'}:nowhere", "--quiet")
    assert r.returncode == 2 and len(r.stderr.strip().splitlines()) == 1 and "batch_dims 3" in r.stderr
