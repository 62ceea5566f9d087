"""Which tasks a batch plan must run on the whole batch: found from the model's own definition, by running it."""

import random

import pytest
import torch
from torch import nn

from diviml.frontends.pytorch import capture, capture_at, task_of_nodes, with_inputs
from diviml.frontends.pytorch._samples import whole_batch_tasks
from diviml.runtime._rows import split_rows


def _found(model, inputs_fn, batch=4):
    return whole_batch_tasks(capture_at(model.eval(), inputs_fn, batch))


def _kinds(model, inputs_fn, batch=4) -> set[str]:
    """The operators of the tasks found, without their numbering ("max_1" -> "max")."""
    return {t.rstrip("_0123456789") for t in _found(model, inputs_fn, batch)}


class ByLargest(nn.Module):
    """Each sample divided by the batch's largest activation."""

    def __init__(self):
        super().__init__()
        self.a, self.b = nn.Linear(16, 16), nn.Linear(16, 4)

    def forward(self, x):
        h = self.a(x)
        return self.b(h / h.abs().max())


class PerSample(nn.Module):
    """Every operator works sample by sample: a layer norm, a softmax over features, attention over one
    sample's tokens, a cumulative sum along the sequence, a mean over the tokens."""

    def __init__(self):
        super().__init__()
        self.embed = nn.Embedding(50, 16)
        self.attention = nn.MultiheadAttention(16, 2, batch_first=True)
        self.norm = nn.LayerNorm(16)

    def forward(self, ids):
        h = self.embed(ids)
        h = self.norm(h + self.attention(h, h, h, need_weights=False)[0])
        return torch.softmax(h.cumsum(1), dim=-1).mean(1)


class Contrastive(nn.Module):
    """CLIP's logits: every image's similarity with every text of the batch, then a loss over them."""

    def __init__(self):
        super().__init__()
        self.image, self.text = nn.Linear(12, 8), nn.Embedding(30, 8)

    def forward(self, images, ids):
        a = nn.functional.normalize(self.image(images), dim=-1)
        b = nn.functional.normalize(self.text(ids).mean(1), dim=-1)
        return a @ b.t()


def test_a_division_by_the_batchs_largest_value_is_found_and_nothing_else():
    assert _kinds(ByLargest(), lambda b: (torch.randn(b, 16),)) == {"max"}


def test_operators_that_work_sample_by_sample_are_not_found():
    assert _found(PerSample(), lambda b: (torch.randint(0, 50, (b, 6)),)) == ()


def test_an_operator_along_the_batch_dimension_is_found_and_the_same_along_features_is_not():
    class Along(nn.Module):
        def __init__(self, dim):
            super().__init__()
            self.dim = dim

        def forward(self, x):
            return torch.softmax(x * 2, dim=self.dim) + 1

    assert _kinds(Along(0), lambda b: (torch.randn(b, 5),)) == {"_softmax"}
    assert _found(Along(1), lambda b: (torch.randn(b, 5),)) == ()


def test_every_sample_against_every_other_is_found_by_its_shape():
    found = _found(Contrastive(), lambda b: (torch.randn(b, 12), torch.randint(0, 30, (b, 5))))
    assert [t.rstrip("_0123456789") for t in found] == ["mm"]


def test_a_concatenation_along_the_batch_keeps_both_ends_of_it_whole():
    class Views(nn.Module):
        def __init__(self):
            super().__init__()
            self.encode = nn.Linear(8, 8)

        def forward(self, x, y):
            return self.encode(torch.cat([x, y], 0)).relu()

    found = _kinds(Views(), lambda b: (torch.randn(b, 8), torch.randn(b, 8)))
    assert {"cat", "addmm"} <= found


def test_random_numbers_drawn_inside_the_model_are_not_taken_for_mixing():
    class Noisy(nn.Module):
        def forward(self, x):
            return x + torch.rand_like(x)

    assert _found(Noisy(), lambda b: (torch.randn(b, 5),)) == ()


class ReturnsItsBatch(nn.Module):
    """Returns the size of its batch beside a tensor: a sub-batch would give its own size."""

    def __init__(self):
        super().__init__()
        self.a = nn.Linear(8, 8)

    def forward(self, x):
        return {"y": self.a(x), "n": x.shape[0]}


def test_a_size_of_the_batch_the_model_returns_is_its_own_task_and_kept_whole():
    captured = capture_at(ReturnsItsBatch().eval(), lambda b: (torch.randn(b, 8),), 4)
    size = next(n.name for n in captured.gm.graph.nodes if n.name.startswith("sym_size"))
    assert task_of_nodes(captured)[size] == size  # a task of the graph, not part of the output
    assert whole_batch_tasks(captured) == (size,)


def test_a_program_without_a_dynamic_batch_or_with_one_sample_is_not_judged():
    model = ByLargest().eval()
    assert whole_batch_tasks(capture(model, (torch.randn(4, 16),))) == ()  # exported at a fixed batch
    assert whole_batch_tasks(with_inputs(capture_at(model, lambda b: (torch.randn(b, 16),), 4),
                                         (torch.randn(1, 16),))) == ()


@pytest.mark.parametrize("seed", range(6))
def test_on_random_models_the_tasks_not_found_can_be_cut_into_sub_batches_and_give_the_models_outputs(seed):
    """The definition the check serves: every task it leaves out, cut into sub-batches by the runtime, gives
    the unsplit model's outputs; every mixing operator put into the model is found."""
    rng = random.Random(seed)
    sample_wise = [lambda h: h.relu(), lambda h: torch.softmax(h, -1), lambda h: h - h.mean(-1, keepdim=True),
                   lambda h: h.cumsum(-1) / 8]
    mixing = [lambda h: h / h.abs().max(), lambda h: h - h.mean(0, keepdim=True), lambda h: torch.softmax(h, 0)]
    steps = [rng.choice(sample_wise + mixing) for _ in range(6)]
    mixers = sum(step in mixing for step in steps)

    class Random(nn.Module):
        def __init__(self):
            super().__init__()
            self.layers = nn.ModuleList(nn.Linear(8, 8) for _ in steps)

        def forward(self, x):
            for layer, step in zip(self.layers, steps):
                x = step(layer(x))
            return x

    model = Random().eval()
    captured = capture_at(model, lambda b: (torch.randn(b, 8),), 4)
    found = set(whole_batch_tasks(captured))
    assert len(found) == mixers  # each mixing step is one operator
    tasks = set(task_of_nodes(captured).values())
    parts = {t: [("d", 4)] if t in found or t in captured.user_inputs else [("d", 1), ("d", 3)] for t in tasks}
    order = {"d": [(t, k) for t in _topological(captured, tasks) for k in range(len(parts[t]))]}
    split = split_rows(captured, parts, order, 4).captured
    with torch.no_grad():
        whole, cut = (torch.utils._pytree.tree_leaves(p.run()) for p in (captured, split))
    assert len(whole) == len(cut) == 1 and torch.allclose(whole[0], cut[0], rtol=1e-4, atol=1e-5)


def _topological(captured, tasks) -> list[str]:
    seen = []
    for name, task in task_of_nodes(captured).items():
        if task in tasks and task not in seen:
            seen.append(task)
    return seen


def test_integer_inputs_of_any_range_are_varied_and_a_lookup_by_them_is_judged():
    class Lookup(nn.Module):
        def __init__(self):
            super().__init__()
            self.table = nn.Embedding(10, 4)

        def forward(self, ids, offsets):
            picked = self.table(ids + 5)
            return picked * (offsets - offsets.min()).unsqueeze(-1)  # the batch's least offset: mixes

    found = _kinds(Lookup(), lambda b: (torch.randint(-5, 5, (b,)), torch.full((b,), -1) - torch.arange(b)))  # largest -1
    assert found == {"min"}
