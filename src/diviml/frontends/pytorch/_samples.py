"""Which tasks mix the samples of a batch: their result for one sample depends on the batch's other samples.

A batch plan may cut a task into sub-batches only where each sample's result depends on that sample alone (a
convolution, a layer norm, attention over one sample's tokens). A task that reduces over the batch (a mean of
every sample, each image's similarity with every text, a division by the batch's largest value) gives each
sub-batch another answer, so the plan would compute something else than the model. Such a task is found by
its definition, run: each task is run again on the inputs the model gave it with every sample but sample 0
changed (floats moved by noise of their own scale, integers by one within their range, booleans flipped). A
task whose output for sample 0 (or, where its output holds no batch, whose output) then differs mixes
samples. Where the batch sits in each value comes from the dynamic-batch export
(:class:`~._layout.BatchLayout`).

A task whose output holds the batch in two dimensions (every sample against every other) mixes samples by
its shape. And where a value passed between two tasks holds the batch in a place its samples cannot be cut
from (a concatenation along the batch), the runtime cannot hand a sub-batch of it on: both tasks are kept
whole too. None of these is found in the model zoo's CNNs and transformers.
"""

from __future__ import annotations

from ...errors import InputError
from .._torch import import_torch
from ._capture import Captured, task_of_nodes
from ._layout import BatchLayout

__all__ = ["whole_batch_tasks"]

RTOL, ATOL = 1e-3, 1e-5  # relative to the largest magnitude of the value compared


def whole_batch_tasks(captured: Captured, seed: int = 0) -> tuple[str, ...]:
    """The tasks of ``captured`` (in program order) that a batch plan must run on the whole batch at once:
    those whose output for one sample depends on other samples, and those on either side of a value whose
    samples cannot be cut apart (see the module).

    ``captured`` must hold a dynamic batch (:func:`~._capture.capture_at`) and inputs of at least two samples;
    otherwise no sample can be told from another, and nothing is returned. A task that gives different outputs
    on the same inputs (random numbers) is not judged by its values."""
    torch = import_torch()
    if not captured.dynamic_batch:
        return ()
    try:
        layout = BatchLayout(captured)
    except InputError:  # no single batch symbol: the runtime cuts no task of it either
        return ()
    nodes = {n.name: n for n in captured.gm.graph.nodes}
    batch = _batch_of(captured, layout, nodes)
    if batch < 2:
        return ()
    task_of = task_of_nodes(captured)
    groups: dict[str, list] = {}
    for name, task in task_of.items():
        if name not in captured.user_inputs:
            groups.setdefault(task, []).append(nodes[name])
    whole = _uncuttable(torch, captured, layout, task_of)
    generator = torch.Generator(device="cpu").manual_seed(seed)
    with torch.no_grad():
        first = _values(torch, captured.gm, captured.args)
        for task, members in groups.items():
            if task not in whole and _mixes(torch, captured.gm, layout, members, first, batch, generator):
                whole.add(task)
    return tuple(t for t in groups if t in whole)


def _uncuttable(torch, captured: Captured, layout: BatchLayout, task_of: dict) -> set[str]:
    """Tasks making a tensor that holds the batch in two dimensions or a size of the batch that the model
    returns, and both ends of a tensor passed between tasks (or out of the program) whose batch cannot be
    located."""
    out = set()
    for node in captured.gm.graph.nodes:
        value = node.meta.get("val")
        if node.name in task_of and isinstance(value, torch.Tensor):
            if len(layout.batch_dims(value)) > 1:
                out.add(task_of[node.name])
        if (node.name in task_of and isinstance(value, (torch.SymInt, torch.SymFloat)) and layout.depends(node)
                and any(u.op == "output" for u in node.users)):
            out.add(task_of[node.name])  # the model returns a size of its batch: a part would give its own
        for a in node.all_input_nodes:
            if a.name not in task_of or task_of[a.name] == task_of.get(node.name) or a.name in captured.user_inputs:
                continue
            if isinstance(a.meta.get("val"), torch.Tensor) and layout.batch_dim(a) == "unknown":
                out.add(task_of[a.name])
                if node.name in task_of:
                    out.add(task_of[node.name])
    return out


def _batch_of(captured: Captured, layout: BatchLayout, nodes: dict) -> int:
    """The samples in the captured inputs (read off the first input that holds the batch)."""
    for name, value in zip((n.name for n in captured.gm.graph.nodes if n.op == "placeholder"), captured.args):
        where = layout.batch_dim(nodes[name]) if name in captured.user_inputs else None
        if isinstance(where, tuple):
            dim, outer, inner = where
            return value.shape[dim] // (outer * inner)
    return 0


def _values(torch, gm, args) -> dict:
    """Every node's value when the program runs on ``args``."""
    interpreter = torch.fx.Interpreter(gm, garbage_collect_values=False)
    interpreter.run(*args)
    return dict(interpreter.env)


def _varied(torch, value, where: tuple[int, int, int], batch: int, generator):
    """``value`` with every sample but sample 0 changed: floats moved by noise of their own scale, integers
    (token ids, masks) moved by one within their range, booleans flipped; in ``value``'s memory layout."""
    if value.dtype == torch.bool:
        other = ~value
    elif value.is_floating_point() or value.is_complex():
        scale = float(value.abs().max()) if value.numel() else 0.0
        noise = torch.randn(value.shape, generator=generator).to(value.device, value.dtype)
        other = value + noise * max(scale, 1.0)
    else:  # within [0, largest] where the values are ids or a mask; past it they may fail, and go unjudged
        top = int(value.max()) + 1 if value.numel() else 0
        other = (value + 1) % top if top > 1 else value + 1
    return _with_first_sample(torch, other, value, where, batch)


def _sample_mask(torch, value, where: tuple[int, int, int], batch: int):
    """True where an element of ``value`` belongs to sample 0 (broadcast along the other dimensions)."""
    dim, outer, inner = where
    index = torch.arange(value.shape[dim], device=value.device)
    mask = (index // inner) % batch == 0
    shape = [1] * value.dim()
    shape[dim] = value.shape[dim]
    return mask.reshape(shape)


def _with_first_sample(torch, other, first, where, batch: int):
    """``other`` with sample 0 taken from ``first``, in ``first``'s memory layout."""
    out = first.clone()
    out.copy_(torch.where(_sample_mask(torch, first, where, batch), first, other))
    return out


def _mixes(torch, gm, layout: BatchLayout, members: list, first: dict, batch: int, generator) -> bool:
    """Whether the task of these nodes, fed the model's inputs to it with every sample but sample 0 changed,
    gives another sample 0 (or another batch-free output) than the model's."""
    inside = set(members)
    given, varied = {}, {}
    for node in members:
        for a in node.all_input_nodes:
            if a in inside or a in given:
                continue
            given[a] = varied[a] = first[a]
            where = layout.batch_dim(a)
            if isinstance(where, tuple) and isinstance(first[a], torch.Tensor):
                varied[a] = _varied(torch, first[a], where, batch, generator)
    try:
        if _same_sample(torch, layout, members, _run_nodes(torch, gm, members, varied), first, batch):
            return False
    except Exception:  # noqa: BLE001 - the changed samples are not valid inputs of the task: nothing to judge by
        return False
    # another sample 0: unless the task gives other outputs on the very same inputs (random numbers)
    return _same_sample(torch, layout, members, _run_nodes(torch, gm, members, given), first, batch)


def _run_nodes(torch, gm, members: list, env: dict) -> dict:
    """The values of ``members`` run in program order from the values in ``env``."""
    interpreter = torch.fx.Interpreter(gm, garbage_collect_values=False)
    interpreter.env = dict(env)
    for node in members:
        interpreter.env[node] = interpreter.run_node(node)
    return interpreter.env


def _same_sample(torch, layout: BatchLayout, members: list, values: dict, first: dict, batch: int) -> bool:
    """Whether each tensor output of ``members`` agrees with the first run on sample 0 (on all of it where it
    holds no batch; not compared where the batch cannot be located in it)."""
    for node in members:
        a, b = values[node], first[node]
        if not (isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor)) or a.shape != b.shape:
            continue
        where = layout.batch_dim(node)
        if where == "unknown":
            continue
        if isinstance(where, tuple):
            mask = _sample_mask(torch, b, where, batch).expand(b.shape)
            a, b = a[mask], b[mask]
        if not _close(torch, a, b):
            return False
    return True


def _close(torch, a, b) -> bool:
    if not (a.is_floating_point() or a.is_complex()):
        return bool(torch.equal(a, b))
    a, b = a.double(), b.double()
    scale = float(b.abs().max()) if b.numel() else 0.0
    return bool(torch.allclose(a, b, rtol=RTOL, atol=ATOL * max(scale, 1e-30), equal_nan=True))
