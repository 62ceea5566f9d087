"""What the cost model charges is what the hardware does: constants are computed once at load, views run no
kernel and send their storage, and batch tables belong to one graph."""

import pytest
import torch

from diviml.frontends.pytorch import capture, capture_at, measure, profile, profile_zoo, to_task_graph


class ConstantBranch(torch.nn.Module):
    """A mask and a weight transpose that depend on no input, and a chain of views before a kernel."""

    def __init__(self):
        super().__init__()
        self.weight = torch.nn.Parameter(torch.randn(16, 16))
        self.register_buffer("scale", torch.ones(16))

    def forward(self, x):
        mask = torch.triu(torch.ones(16, 16)) * self.scale  # constant: no input reaches it
        w = self.weight.t() * mask                             # constant too
        y = x.view(-1, 4, 4).permute(0, 2, 1).unsqueeze(1)     # views of the input: no kernel
        wide = x.sum(1, keepdim=True).expand(-1, 16)          # stride 0: its storage is one float a row
        return (y.flatten(1) @ w) + wide


def graph_of(module, x, **kw):
    captured = capture(module, (x,), **kw)
    return captured, to_task_graph(captured, measure(captured, repeats=0, warmup=0), name="m", measured_type=None,
                                   analytic_types=("a100",))


def test_a_constant_branch_is_computed_once_and_resident_not_charged_per_request():
    torch.manual_seed(0)
    module, x = ConstantBranch().eval(), torch.randn(8, 16)
    folded, graph = graph_of(module, x)
    _, unfolded = graph_of(module, x, fold_constants=False)
    assert len(graph) < len(unfolded)  # the mask and w = weight.t() * mask are no longer tasks
    inputs = {t.id for t in graph.tasks if t.kind == "input"}
    reached = set(inputs)
    for t in graph.topological_order:  # every task left is reached from the input: per-request work only
        if graph.predecessors[t] and any(p in reached for p in graph.predecessors[t]):
            reached.add(t)
    assert reached == {t.id for t in graph.tasks}
    w_bytes = 16 * 16 * 4
    assert sum(t.memory_bytes for t in graph.tasks) >= w_bytes  # the folded w is resident memory of its reader
    assert torch.allclose(folded.run()[0], module(x))


def test_views_cost_nothing_on_a_gpu_and_a_transfer_moves_the_storage_they_need():
    torch.manual_seed(0)
    _, graph = graph_of(ConstantBranch().eval(), torch.randn(8, 16))
    views = [t for t in graph.tasks if t.kind in ("view", "permute", "unsqueeze", "expand")]
    assert len(views) >= 4 and all(t.time["a100"] == 0 for t in views)
    kernels = [t for t in graph.tasks if t.kind in ("mm", "add")]
    assert kernels and all(t.time["a100"] > 0 for t in kernels)
    expand = next(t for t in graph.tasks if t.kind == "expand")
    assert expand.output_bytes == 8 * 4  # the sums' 8 floats, not the 8 x 16 broadcast view


def test_a_transformers_batch_tables_line_up_although_its_static_graph_changes_with_the_batch():
    from diviml.frontends import zoo
    spec = zoo.get("gpt-tiny")
    model = spec.build().eval()
    one, eight = capture(model, spec.inputs(1)), capture(model, spec.inputs(8))
    static = [n.name for n in one.gm.graph.nodes], [n.name for n in eight.gm.graph.nodes]
    assert static[0] != static[1]  # exported at fixed sizes, batch 1 and 8 are different programs
    dynamic = capture_at(model, spec.inputs, 1)
    assert dynamic.dynamic_batch
    graph = profile_zoo("gpt-tiny", batches=(1, 8), repeats=1, min_time_s=0.0)
    matmuls = [t for t in graph.tasks if t.kind in ("mm", "addmm", "bmm")]
    assert matmuls and all(8 in t.time_by_batch["a100"] for t in matmuls)
    # every operator's batch-8 entry is its own: FLOPs grow with the batch, so does the roofline time
    assert all(t.time_by_batch["a100"][8] >= t.time["a100"] for t in matmuls)


def test_a_table_that_cannot_line_up_is_refused_not_matched_by_name():
    class Shaped(torch.nn.Module):  # takes another path at batch 1: no dynamic export, two static graphs
        def forward(self, x):
            if x.shape[0] == 1:
                return x.relu()
            return x.sigmoid() + 1

    with pytest.raises(Exception, match="changes with the batch size"):
        profile(Shaped, lambda b: (torch.randn(b, 4),), name="shaped", batches=(1, 8), repeats=1, min_time_s=0.0)


def test_vit_b_16_runs_one_graph_at_batch_1_and_8_with_free_views_and_its_own_batch_8_times():
    # the case: exported at fixed sizes, vit_b_16 had 827 operators at batch 1 and 875 at batch 8, and
    # 12 addmm had no batch-8 entry
    graph = profile_zoo("vit_b_16", device=None, batches=(1, 8))
    ops = [t for t in graph.tasks if t.kind != "input"]
    assert all(set(t.time_by_batch["a100"]) == {8} for t in ops)
    addmm = [t for t in ops if t.kind == "addmm"]
    assert len(addmm) >= 12 and all(t.time_by_batch["a100"][8] > t.time["a100"] for t in addmm)
    views = [t for t in ops if t.kind in ("view", "permute", "expand", "unsqueeze", "select")]
    assert len(views) > 100 and all(t.time["a100"] == 0 == t.time_by_batch["a100"][8] for t in views)


def _records(times: dict[str, list[float]]):
    from types import SimpleNamespace

    from diviml.frontends.pytorch._costs import NodeRecord
    records = {n: NodeRecord(n, "op", [], [], 0.0, 0.0, 0.0, times=list(t)) for n, t in times.items()}
    records["x"] = NodeRecord("x", "input", [], [], 0.0, 0.0, 0.0)  # an input: never timed, never charged
    return SimpleNamespace(records=records)


def test_what_the_whole_program_takes_beyond_its_operators_is_shared_among_them():
    from diviml.frontends.pytorch._measure import _add_dispatch
    session = _records({"a": [1.0, 3.0, 2.0], "b": [5.0, 4.0, 6.0]})  # medians 2 and 5
    said: list[str] = []
    _add_dispatch(session, 9.0, said.append)  # 2 more than 2 + 5: 1 each, every sample
    assert session.records["a"].times == [2.0, 4.0, 3.0] and session.records["b"].times == [6.0, 5.0, 7.0]
    assert session.records["x"].times == [] and "1e+06 us added to each of 2 operators" in said[0]


def test_operators_that_add_up_to_more_than_the_program_keep_their_times():
    from diviml.frontends.pytorch._measure import _add_dispatch
    session = _records({"a": [2.0], "b": [5.0]})
    _add_dispatch(session, 6.0, None)  # a GPU's kernels overlapping their launches: nothing taken away
    assert session.records["a"].times == [2.0] and session.records["b"].times == [5.0]


def test_a_profile_adds_up_to_what_its_program_takes_when_run_whole(monkeypatch):
    import statistics

    from diviml.frontends.pytorch import _measure
    from diviml.frontends.zoo import MODELS
    spec = MODELS["randwire-ws-small-s0"]
    captured = capture_at(spec.build(), spec.inputs, 1)
    monkeypatch.setattr(_measure, "_whole_module_s", lambda *args: 0.5)  # the program run whole: 0.5 s
    timed = [r for r in _measure.measure(captured, repeats=3, min_time_s=0.0) if r.times]
    assert len(timed) > 50
    assert sum(statistics.median(r.times) for r in timed) == pytest.approx(0.5, rel=0.05)
