"""Your own models of less usual shape on the user's path, profile -> schedule -> run through the CLI: a model
that updates a buffer as it runs, one that returns a weight of its own and its input beside its result, and a
factory whose plan is for another batch than its example's."""

import subprocess
import sys

import pytest

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


def counter():
    return Counter(), (torch.randn(4, 16),)


def gives_weight():
    return GivesWeight(), (torch.randn(4, 16),)
'''


def cli(*args):
    return subprocess.run([sys.executable, "-m", "diviml", *map(str, args)], capture_output=True, text=True,
                          timeout=600)


@pytest.mark.parametrize("factory, objective", [("counter", "latency"), ("gives_weight", "latency"),
                                                ("counter", "batch"), ("gives_weight", "batch")])
def test_the_plan_runs_with_the_models_outputs(tmp_path, factory, objective):
    (tmp_path / "models.py").write_text(MODELS)
    model = f"{tmp_path / 'models.py'}:{factory}"
    r = cli("profile", model, "--platform", "cpu-workers-2", "--min-time", 0.1, "--out", tmp_path / "g.json")
    assert r.returncode == 0, r.stderr
    # batch: a plan for 8 samples, the factory's example holding 4; the run feeds its samples twice over
    how = ["--objective", "batch", "--batch", 8, "--solver", "data-parallel"] if objective == "batch" else []
    r = cli("schedule", tmp_path / "g.json", "--platform", "cpu-workers-2", *how, "--out", tmp_path / "p.json")
    assert r.returncode == 0, r.stderr
    r = cli("run", model, tmp_path / "p.json", "--graph", tmp_path / "g.json", "--platform", "cpu-workers-2",
            "--repeats", 1, "--warmup", 0, "--quiet")
    assert r.returncode == 0, r.stderr
    assert "outputs match the unsplit module" in r.stdout
    if objective == "batch":
        assert "batch 8 on 2 device(s)" in r.stdout
