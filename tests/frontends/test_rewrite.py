"""The exported program does the module's work, not more: a weight broadcast over the sequence (the way
torch.export writes nn.MultiheadAttention's in-projection at a dynamic batch) is read once per sample; and its
graph has the module's structure: the batch size an operator needs is read off its own input, not carried
from the model's input past every layer."""

import pytest
import torch

from diviml.frontends import zoo
from diviml.frontends.pytorch import capture_at, profile_zoo, task_of_nodes
from diviml.frontends.pytorch._capture import with_inputs
from diviml.solvers.engines.modules import detect


def _broadcast_reads(captured):
    """For every batched product whose second operand repeats one matrix (stride 0): how many times it is
    repeated and how many rows each repetition serves, at the program's inputs."""
    out = []
    for node in captured.gm.graph.nodes:
        if node.target == torch.ops.aten.bmm.default:
            a, b = (x.meta["val"] for x in node.args)
            if b.stride(0) == 0:
                out.append((int(a.shape[0].node.hint if isinstance(a.shape[0], torch.SymInt) else a.shape[0]),
                            int(a.shape[1].node.hint if isinstance(a.shape[1], torch.SymInt) else a.shape[1])))
    return out


@pytest.mark.parametrize("batch", [1, 3])
def test_attention_in_projection_reads_its_weight_once_per_sample_and_gives_the_modules_output(batch):
    spec = zoo.get("gpt-tiny")  # sequence 32: the export broadcast the weight 32 times, to one row each
    torch.manual_seed(0)
    model = spec.build().eval()
    captured = capture_at(model, spec.inputs, batch)
    assert captured.dynamic_batch  # the outputs matched, else capture_at would have fallen back
    tokens = next(n for n in captured.gm.graph.nodes if n.name in captured.user_inputs).meta["val"]
    assert tokens.shape[0].node.expr.free_symbols  # still one program for every batch size
    assert _broadcast_reads(captured) == []  # no product reads a weight broadcast over the sequence
    assert sum(n.target == torch.ops.aten.matmul.default for n in captured.gm.graph.nodes) == 2  # one per block
    with torch.no_grad():
        assert torch.allclose(captured.run()[0], model(*spec.inputs(batch)), rtol=1e-4, atol=1e-5)


def test_the_profiled_attention_moves_the_weight_bytes_not_the_broadcast():
    graph = profile_zoo("gpt-tiny", device=None)
    hidden, sequence = 128, 32
    in_projection = 3 * hidden * hidden * 4  # bytes of one block's packed q, k, v weight
    products = [t for t in graph.tasks if t.kind == "matmul"]
    assert len(products) == 2  # one in-projection per block: batch 1 x sequence 32 x 3 x hidden
    for t in products:  # the weight read once (was 32 times), the activations in and out; resident here
        assert t.bytes_accessed == in_projection + sequence * hidden * 4 + sequence * 3 * hidden * 4
        assert t.memory_bytes == in_projection and t.flops == 2 * sequence * hidden * 3 * hidden


@pytest.mark.parametrize("name", ["resnet18", "googlenet"])
def test_a_classifiers_flatten_reads_the_batch_size_off_its_own_input(name):
    """torch.export reads the batch size once off the input and hands it to the flatten before the classifier:
    an edge from the input to the end crossing every cut, so the graph had no series point (googlenet's latency
    gap was 23.6% at 30 s; with the size read locally, proven optimal in a second)."""
    spec = zoo.get(name)
    torch.manual_seed(0)
    model = spec.build().eval()
    captured = capture_at(model, spec.inputs, 1)
    assert captured.dynamic_batch
    tasks = task_of_nodes(captured)
    readers = {tasks[n.name] for n in captured.gm.graph.nodes if n.name in tasks
               for a in n.all_input_nodes if tasks.get(a.name) == "x" and tasks[n.name] != "x"}
    assert len(readers) == 1  # the first layer only
    assert detect(profile_zoo(name, device=None)).widest_cut == 1
    x = spec.inputs(3)  # the same function at another batch size
    with torch.no_grad():
        assert torch.allclose(torch.utils._pytree.tree_leaves(with_inputs(captured, x).run())[0], model(*x), atol=1e-5)


@pytest.mark.parametrize("name", ["gpt-tiny", "bert-tiny"])
def test_attention_reshapes_read_their_sequence_by_batch_sizes_off_their_own_inputs(name):
    """Attention's reshapes need sizes computed from the batch (sequence x batch rows, batch x heads): each is
    computed from a dimension of the reshape's own input, so no size is carried from the input past a layer
    and the residual stream is the only tensor between layers."""
    from diviml.frontends.pytorch._rewrite import PART_OF
    spec = zoo.get(name)
    torch.manual_seed(0)
    model = spec.build().eval()
    captured = capture_at(model, spec.inputs, 1)
    tasks = task_of_nodes(captured)
    sizes = [n for n in captured.gm.graph.nodes if isinstance(n.meta.get("val"), torch.SymInt)
             and n.op == "call_function"]
    assert sizes and all(tasks[n.name] != n.name for n in sizes)  # each a part of the operator reading it
    assert any(PART_OF in n.meta and n.target is not torch.ops.aten.sym_size.int for n in sizes)  # arithmetic
    graph = profile_zoo(name, device=None)
    assert not [t for t in graph.tasks if t.kind == "sym_size"]
    assert detect(graph).widest_cut <= 2
    x = spec.inputs(3)
    with torch.no_grad():
        got = torch.utils._pytree.tree_leaves(with_inputs(captured, x).run())[0]
        assert torch.allclose(got, torch.utils._pytree.tree_leaves(model(*x))[0], atol=1e-5)
