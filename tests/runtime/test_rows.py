"""Batch plans that split tasks into sub-batches run: each part on its device over its own samples, the parts
joined where the plan's splits differ, the outputs those of the unsplit module."""

import json
import random
import subprocess
import sys

import pytest
import torch

import diviml
from diviml import Assignment, InputError, Objective, Plan, Problem, preset
from diviml.frontends.pytorch import profile_zoo
from diviml.runtime import run
from diviml.simulate import schedule

CPU2 = preset("cpu-workers-2")
BATCH = 4
PATTERNS = ([("worker0", 3), ("worker1", 1)], [("worker1", 2), ("worker0", 2)],
            [("worker0", 1), ("worker1", 1), ("worker0", 2)], [("worker0", 4)], [("worker1", 4)])


def batch_problem(name: str) -> Problem:
    graph = profile_zoo(name, batches=(BATCH,), repeats=1, min_time_s=0.0)
    return Problem(graph, CPU2, Objective("batch", BATCH))


def plan_from_parts(problem: Problem, parts: dict) -> Plan:
    """The plan the simulator times for these parts (a latency or batch problem): each task's parts listed in
    sample order."""
    timed = schedule(problem, parts)
    topo = {t: i for i, t in enumerate(problem.graph.topological_order)}
    jobs = sorted(timed.jobs, key=lambda j: (topo[j.task], j.offset))
    kind = problem.objective.kind
    plan = Plan(kind, tuple(Assignment(j.task, j.device, j.start, j.batch if kind == "batch" else None) for j in jobs),
                timed.makespan, 0.0, "feasible", "hand", batch_size=problem.batch_size)
    assert diviml.validate(plan, problem).ok
    return plan


def test_a_cnn_whose_tasks_are_split_every_which_way_gives_the_unsplit_outputs():
    problem = batch_problem("resnet18")
    rng = random.Random(0)
    parts = {t.id: rng.choice(PATTERNS) for t in problem.graph.tasks}  # 3+1, 2+2, 1+1+2, whole on either
    report = run("resnet18", plan_from_parts(problem, parts), CPU2, problem=problem, repeats=1, warmup=0)
    assert report.outputs_match and report.max_abs_error <= 1e-4
    assert report.batch_size == BATCH and report.predicted_s > 0
    assert any(":" in p.first_task for p in report.piece_reports)  # parts ran as jobs of their own


def test_a_transformer_split_the_same_way_throughout_reads_its_batch_sizes_per_part():
    # attention reshapes with sizes read off the batch (sym_size): each part must see its own sample count
    problem = batch_problem("gpt-tiny")
    parts = {t.id: [("worker0", 3), ("worker1", 1)] for t in problem.graph.tasks}
    report = run("gpt-tiny", plan_from_parts(problem, parts), CPU2, problem=problem, repeats=1, warmup=0)
    assert report.outputs_match and report.max_abs_error <= 1e-4


def test_a_transformer_split_differently_at_every_task_gives_the_unsplit_outputs():
    # attention's rows merge the batch with the heads (batch x heads: a sample's rows together) and with the
    # sequence (sequence x batch: a sample's rows one in every batch): both are cut and joined by sample
    problem = batch_problem("gpt-tiny")
    rng = random.Random(3)
    parts = {t.id: rng.choice(PATTERNS) for t in problem.graph.tasks}
    report = run("gpt-tiny", plan_from_parts(problem, parts), CPU2, problem=problem, repeats=1, warmup=0)
    assert report.outputs_match and report.max_abs_error <= 1e-4


class _Rows(torch.nn.Module):
    """Rows of (sample, position) and of (position, sample); or rows whose samples are not located."""

    def __init__(self, mixed: bool = False):
        super().__init__()
        self.a, self.b, self.mixed = torch.nn.Linear(8, 8), torch.nn.Linear(8, 8), mixed

    def forward(self, x):  # x: batch x 5 x 8
        b, s, h = x.shape
        if self.mixed:  # two copies of the rows stacked: (copy, sample, position) rows, which no operand has
            rows = torch.cat([x.reshape(b * s, h), x.reshape(b * s, h)]) * 2
            return rows.reshape(2, b, s, h).sum(0)
        outer = self.a(x.reshape(b * s, h))
        inner = self.b(x.transpose(0, 1).reshape(s * b, h))
        return outer.reshape(b, s, h) + inner.reshape(s, b, h).transpose(0, 1)


def _rows_program(mixed: bool = False):
    from diviml.frontends.pytorch import capture_at, task_of_nodes
    torch.manual_seed(0)
    model = _Rows(mixed).eval()
    captured = capture_at(model, lambda b: (torch.randn(b, 5, 8),), BATCH)
    return model, captured, sorted(set(task_of_nodes(captured).values()))


@pytest.mark.parametrize("seed", range(12))
def test_rows_that_merge_the_batch_with_another_dimension_are_cut_by_sample_whichever_index_is_outer(seed):
    from diviml.runtime._rows import split_rows
    model, captured, tasks = _rows_program()
    rng = random.Random(seed)
    parts = {t: rng.choice(PATTERNS) for t in tasks}
    (rewritten,) = split_rows(captured, parts, {}, BATCH).captured.run()
    placeholders = [n.name for n in captured.gm.graph.nodes if n.op == "placeholder"]
    assert torch.allclose(rewritten, model(captured.args[placeholders.index("x")]), atol=1e-6)


def test_a_value_whose_samples_cannot_be_located_is_not_cut_and_the_plan_is_refused_naming_the_task():
    from diviml.runtime._rows import split_rows
    _, captured, tasks = _rows_program(mixed=True)
    parts = {t: PATTERNS[k % 2] for k, t in enumerate(tasks)}
    with pytest.raises(InputError, match=r"task '\w+' .*split into (different )?sub-batches"):
        split_rows(captured, parts, {}, BATCH)


@pytest.mark.slow  # over 20 s on 2 cores: the README's test command runs it after the rest
def test_a_batch_plan_from_the_command_line_runs_with_unequal_shares(tmp_path):
    def cli(*args):
        r = subprocess.run([sys.executable, "-m", "diviml", *map(str, args)], capture_output=True, text=True,
                           timeout=600)
        assert r.returncode == 0, r.stderr
        return r.stdout

    cli("profile", "resnet18", "--batch", BATCH, "--platform", "cpu-workers-2", "--out", tmp_path / "g.json",
        "--min-time", "0", "--repeats", "1", "--quiet")
    cli("schedule", tmp_path / "g.json", "--platform", "cpu-workers-2", "--objective", "batch", "--batch", BATCH,
        "--solver", "data-parallel", "--out", tmp_path / "plan.json", "--quiet")
    plan = json.loads((tmp_path / "plan.json").read_text())
    assert len({a["task"] for a in plan["assignments"]}) < len(plan["assignments"])  # tasks are split
    out = json.loads(cli("run", "resnet18", tmp_path / "plan.json", "--platform", "cpu-workers-2", "--graph",
                         tmp_path / "g.json", "--repeats", "1", "--warmup", "0", "--json"))
    assert out["outputs_match"] and out["batch_size"] == BATCH


@pytest.fixture(scope="module")
def transformer_batch():
    """gpt-tiny's graph with batch tables up to 4, and its program captured at a batch of 4."""
    from diviml.frontends.pytorch import capture_at
    from diviml.runtime import model_source
    graph = profile_zoo("gpt-tiny", batches=(1, 2, 3, 4), repeats=1, min_time_s=0.0)
    source = model_source("gpt-tiny")
    return graph, capture_at(source.build(), source.inputs, BATCH)


@pytest.mark.parametrize("platform", ["paper-server", "cpu-workers-2"])
@pytest.mark.parametrize("solver", ["split", "exact", "milp", "data-parallel", "streamed"])
def test_the_batch_solvers_plans_for_a_transformer_can_be_cut_into_sub_batches(solver, platform, transformer_batch):
    """Every batch plan can be cut into its parts: on cpu-workers-2 split, exact and milp split attention's
    rows differently from their producers', which the runtime once refused."""
    from diviml.runtime._rows import split_rows
    graph, captured = transformer_batch
    plan = diviml.solve(Problem(graph, preset(platform), Objective("batch", BATCH)), solver, time_limit=5)
    jobs = split_rows(captured, plan.parts, plan.device_order, BATCH)  # InputError where the runtime refuses
    assert set(jobs.device_order) == {a.device for a in plan.assignments}
