"""Capture: a module and example inputs -> a graph module whose nodes are the tasks (torch.export, fx fallback)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Sequence

from ...errors import InputError
from .._torch import import_torch
from ._rewrite import PART_OF, read_sizes_locally, read_weights_once

# raised whenever a change to capture changes the graphs it makes, so that cached profiles are made again
# (2: a weight broadcast over the sequence read once; 3: the batch size read off an operator's own input; 4:
# sizes computed from the batch, such as sequence x batch rows, too; frontends/pytorch/_rewrite.py; 5: tasks that
# mix samples marked whole_batch, frontends/pytorch/_samples.py; 6: a size of the batch the model returns is a
# task of its own, kept whole; 7: the new values of buffers a model updates as it runs left out of its outputs)
CAPTURE_REVISION = 7


@dataclass
class Captured:
    """A captured model: its graph module, the values of all its placeholders, and where they came from."""
    gm: Any  # torch.fx.GraphModule
    args: list  # placeholder values in graph order
    state: dict  # placeholder name -> qualified parameter/buffer name
    user_inputs: list  # placeholder names fed by the caller
    method: str  # "export" or "fx"
    module_path: dict = field(default_factory=dict)  # node name -> module path
    dynamic_batch: bool = False  # exported with a dynamic batch dimension: runs at any batch size

    def run(self):
        return self.gm(*self.args)

    @property
    def device(self):
        """The torch device the captured model's tensors live on (that of its first tensor; CPU if none)."""
        torch = import_torch()
        return next((a.device for a in self.args if isinstance(a, torch.Tensor)), torch.device("cpu"))


def capture(model, example_inputs: Sequence, *, fold_constants: bool = True, dynamic_batch: bool = False) -> Captured:
    """The model as an fx program; with ``fold_constants`` (the default) what depends on no input is computed
    here, once, and read by the program as resident state (see :func:`fold`). With ``dynamic_batch`` the
    first dimension of every input is exported as a symbol (``torch.export.Dim``), and a failure to do so
    is raised instead of falling back."""
    captured = _capture(model, example_inputs, dynamic_batch)
    return fold(captured) if fold_constants else captured


def capture_at(model, inputs_fn: Callable[[int], tuple], batch: int, *, fold_constants: bool = True) -> Captured:
    """One program for every batch size, holding the inputs of ``batch``: exported with a dynamic batch
    dimension from inputs of batch max(2, ``batch``) (export specialises a size of 1), so its operators and
    their names are the same at any batch and batch tables line up by construction; where the model does not
    export that way, the program captured at ``batch`` itself. Profiling and the runtime both capture here,
    so a plan's task ids are the program's."""
    inputs = inputs_fn(batch)
    try:
        captured = with_inputs(capture(model, inputs_fn(max(2, batch)), fold_constants=fold_constants,
                                       dynamic_batch=True), inputs)
    except Exception:  # noqa: BLE001 - dynamic export failed: the static capture (or its clear error) instead
        return capture(model, inputs, fold_constants=fold_constants)
    if not _same_outputs(captured, model, inputs):  # a guard on the batch size the program does not hold at ``batch``
        return capture(model, inputs, fold_constants=fold_constants)
    return captured


def _same_outputs(captured: Captured, model, inputs) -> bool:
    """Does the program give the module's outputs on these inputs (float tolerance of a reordered sum)?"""
    torch = import_torch()
    if any(isinstance(x, torch.Tensor) and x.device.type == "meta" for x in inputs):
        return True  # nothing to compare on meta tensors
    with torch.no_grad():
        ours, theirs = captured.run(), model(*inputs)
    flat_ours = torch.utils._pytree.tree_leaves(ours)
    flat_theirs = [x for x in torch.utils._pytree.tree_leaves(theirs) if isinstance(x, torch.Tensor)]
    flat_ours = [x for x in flat_ours if isinstance(x, torch.Tensor)]
    return len(flat_ours) == len(flat_theirs) and all(
        a.shape == b.shape and torch.allclose(a.float(), b.float(), rtol=1e-3, atol=1e-4)
        for a, b in zip(flat_ours, flat_theirs))


def with_inputs(captured: Captured, inputs: Sequence) -> Captured:
    """The same program fed other user inputs (of another batch size, for a dynamically captured one)."""
    names = [n.name for n in captured.gm.graph.nodes if n.op == "placeholder"]
    feed = dict(zip(captured.user_inputs, inputs))
    args = [feed.get(n, a) for n, a in zip(names, captured.args)]
    return Captured(captured.gm, args, captured.state, captured.user_inputs, captured.method, captured.module_path,
                    captured.dynamic_batch)


def fold(captured: Captured) -> Captured:
    """Constant folding: every operator that depends on no user input (a weight's transpose, an attention mask,
    a randomly wired network's edge weights) is computed once; each such value another operator reads becomes
    a placeholder of the program, like a parameter: resident memory of its readers, not per-request work, as a
    runtime that loads the model computes it once. Impure operators are left alone."""
    torch = import_torch()
    gm = captured.gm
    user = set(captured.user_inputs)
    constant: set[str] = set()
    for node in gm.graph.nodes:
        if node.op == "placeholder":
            if node.name not in user:
                constant.add(node.name)
        elif node.op == "get_attr":
            constant.add(node.name)
        elif node.op in ("call_function", "call_method", "call_module") and not node.is_impure() and all(
                a.name in constant for a in node.all_input_nodes):
            constant.add(node.name)
    computed = [n for n in gm.graph.nodes if n.op in ("call_function", "call_method", "call_module")
                and n.name in constant and any(u.name not in constant for u in n.users)]
    if not computed:
        return captured
    wanted = {n.name for n in computed}
    values: dict[str, object] = {}

    class Keep(torch.fx.Interpreter):
        def run_node(self, node):
            value = super().run_node(node)
            if node.name in wanted:
                values[node.name] = value
            return value

    with torch.no_grad():
        Keep(gm).run(*captured.args)
    placeholders = [n for n in gm.graph.nodes if n.op == "placeholder"]
    by_name = dict(zip([n.name for n in placeholders], captured.args))
    state = dict(captured.state)
    with gm.graph.inserting_after(placeholders[-1]):
        for node in computed:
            holder = gm.graph.placeholder(f"{node.name}_folded")
            node.replace_all_uses_with(holder)
            value = values[node.name]  # detached: a view of a parameter made under no_grad is no autograd node
            by_name[holder.name] = value.detach() if isinstance(value, torch.Tensor) else value
            state[holder.name] = f"folded:{node.name}"
    gm.graph.eliminate_dead_code()
    gm.recompile()
    ordered = [n.name for n in gm.graph.nodes if n.op == "placeholder"]
    return Captured(gm, [by_name[n] for n in ordered], state, captured.user_inputs, captured.method,
                    dict(captured.module_path), captured.dynamic_batch)


def _export(torch, model, example_inputs: tuple, shapes):
    """torch.export, decomposed to core ATen operators; the program as exported where decomposing fails."""
    with torch.no_grad():
        program = torch.export.export(model, example_inputs, dynamic_shapes=shapes)
        try:
            return program.run_decompositions()
        except Exception:  # noqa: BLE001 - e.g. a view of a non-contiguous tensor in a decomposition
            return program


def batch_first(module, example_inputs: Sequence, batch_dims: int | Sequence[int]) -> tuple:
    """(module, inputs) with the batch in the first dimension of every tensor input, as diviml's capture takes
    it, for a model that holds it elsewhere (``nn.LSTM`` and ``nn.Transformer`` without ``batch_first``: the
    batch in dimension 1): each input moved so, and moved back by the module returned before ``module`` reads
    it (a view: no work). ``batch_dims`` gives each tensor input's batch dimension, or one for all.

    >>> import torch
    >>> m, (x,) = batch_first(torch.nn.Identity(), (torch.zeros(7, 3, 5),), 1)
    >>> tuple(x.shape), tuple(m(x).shape)
    ((3, 7, 5), (7, 3, 5))
    """
    torch = import_torch()
    tensors = [i for i, x in enumerate(example_inputs) if isinstance(x, torch.Tensor) and x.dim()]
    dims = [batch_dims] * len(tensors) if isinstance(batch_dims, int) else list(batch_dims)
    if len(dims) != len(tensors) or any(not 0 <= d < example_inputs[i].dim() for i, d in zip(tensors, dims)):
        raise InputError(f"batch_dims {batch_dims!r}: give one dimension for all tensor inputs, or one per tensor "
                         f"input ({len(tensors)}), each within its shape")
    at = dict(zip(tensors, dims))

    class BatchFirst(torch.nn.Module):
        diviml_wrapper = True  # its module path is left out of the tasks'

        def __init__(self):
            super().__init__()
            self.inner = module

        def forward(self, *args):
            return self.inner(*(x.movedim(0, at[i]) if at.get(i) else x for i, x in enumerate(args)))

    # contiguous, so that the inputs at every batch (cut or repeated along the front) have the example's layout
    moved = tuple(x.movedim(at[i], 0).contiguous() if at.get(i) else x for i, x in enumerate(example_inputs))
    return BatchFirst(), moved


def _tensor_outputs(model):
    """``model`` returning only the tensors among its outputs (in pytree order), as a module named ``inner``."""
    torch = import_torch()

    class TensorOutputs(torch.nn.Module):
        diviml_wrapper = True

        def __init__(self):
            super().__init__()
            self.inner = model

        def forward(self, *args):
            leaves = torch.utils._pytree.tree_leaves(self.inner(*args))
            return tuple(x for x in leaves if isinstance(x, torch.Tensor))

    return TensorOutputs()


def _capture(model, example_inputs: Sequence, dynamic_batch: bool = False) -> Captured:
    torch = import_torch()
    model = model.eval()
    example_inputs = tuple(example_inputs)
    shapes = None
    if dynamic_batch:
        batch = torch.export.Dim("batch", min=1, max=1 << 20)
        shapes = tuple({0: batch} if isinstance(x, torch.Tensor) and x.dim() else None for x in example_inputs)
    errors = []
    program = None
    # the module as it is, then (outputs holding objects export cannot flatten, such as HuggingFace's
    # DynamicCache) the module returning only the tensors of its outputs
    for candidate, candidate_shapes in ((model, shapes),
                                        (_tensor_outputs(model), None if shapes is None else (shapes,))):
        try:  # (the wrapper's forward takes *args: its shapes are one tuple for them)
            program = _export(torch, candidate, example_inputs, candidate_shapes)
            break
        except Exception as exc:  # noqa: BLE001 - any export failure: the next way, then the fallback
            errors.append(_first_line(exc))
    if program is None:
        if dynamic_batch:
            raise InputError("dynamic export failed: " + "; without non-tensor outputs: ".join(errors))
        export_error = "; without non-tensor outputs: ".join(dict.fromkeys(errors))
    else:
        model = candidate
    if program is not None:
        sig = program.graph_signature
        _drop_state_updates(program.graph_module, {**sig.buffers_to_mutate, **sig.user_inputs_to_mutate})
        read_weights_once(program.graph_module)
        read_sizes_locally(program.graph_module)
        state = {**sig.inputs_to_parameters, **sig.inputs_to_buffers}
        values = {**dict(model.named_parameters(remove_duplicate=False)),  # tied weights under each name
                  **dict(model.named_buffers(remove_duplicate=False))}
        constants = getattr(program, "constants", {}) or {}
        args, users = [], []
        user_iter = iter(example_inputs)
        for node in program.graph_module.graph.nodes:
            if node.op != "placeholder":
                continue
            if node.name in state:
                args.append(values[state[node.name]])
            elif node.name in getattr(sig, "inputs_to_lifted_tensor_constants", {}):
                args.append(constants[sig.inputs_to_lifted_tensor_constants[node.name]])
            else:
                args.append(next(user_iter))
                users.append(node.name)
        return Captured(program.graph_module, args, state, users, "export",
                        _module_paths(program.graph_module, model), dynamic_batch)
    try:
        return traced(model, example_inputs)
    except Exception as exc:  # noqa: BLE001
        raise InputError(f"cannot capture the model: torch.export failed ({export_error}) and torch.fx failed "
                         f"({_first_line(exc)})") from None


def _drop_state_updates(gm, updates: dict) -> None:
    """Take out of the program's outputs the new values of buffers and inputs that the model updates in place
    (a running count, a cache): export returns them beside the model's outputs, but they are not what it
    returns, and the program never writes them back; what only they read goes too."""
    if not updates:
        return
    output = next(n for n in gm.graph.nodes if n.op == "output")
    output.args = (tuple(a for a in output.args[0] if getattr(a, "name", None) not in updates),)
    gm.graph.eliminate_dead_code()
    gm.recompile()


def _module_paths(gm, model) -> dict[str, str]:
    """Node name -> the path of the user's module it comes from, diviml's own wrappers (``inner``) left out:
    "inner.lstm" -> "lstm", "inner" (a step of the user's own forward) -> ""."""
    levels, wrapped = 0, model
    while getattr(wrapped, "diviml_wrapper", False):
        levels, wrapped = levels + 1, wrapped.inner
    paths = {}
    for node in gm.graph.nodes:
        stack = node.meta.get("nn_module_stack")
        if stack:
            path = list(stack.values())[-1][0]
            for _ in range(levels):
                path = path[len("inner."):] if path.startswith("inner.") else "" if path == "inner" else path
            paths[node.name] = path
    return paths


def traced(model, example_inputs: Sequence) -> Captured:
    """The fallback capture, by torch.fx's symbolic tracing: weights stay in the module's submodules and
    attributes (``call_module`` and ``get_attr`` nodes), not placeholders."""
    torch = import_torch()
    gm = torch.fx.symbolic_trace(model)
    users = [n.name for n in gm.graph.nodes if n.op == "placeholder"]
    return Captured(gm, list(example_inputs), {}, users, "fx",
                    {n.name: str(n.target) for n in gm.graph.nodes if n.op == "call_module"})


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[0] if text else ''}"[:300]


def task_of_nodes(captured: Captured) -> dict[str, str]:
    """fx node name -> the task it belongs to: each operator is a task, a getitem is part of the operator whose
    output it unpacks, a size its one user reads off its own input is part of that user (marked by
    :func:`read_sizes_locally`), each user input is a task; parameters, buffers and the output belong to none.
    The one definition of task ids: profiles name their tasks by it and the runtime cuts plans by it."""
    out = {name: name for name in captured.user_inputs}
    for node in captured.gm.graph.nodes:
        if node.op in ("call_function", "call_method", "call_module"):
            if node.op == "call_function" and getattr(node.target, "__name__", "") == "getitem":
                out[node.name] = out.get(node.args[0].name, node.args[0].name)
            elif PART_OF in node.meta:  # a size its one user reads off its own input
                out[node.name] = node.meta[PART_OF]
            else:
                out[node.name] = node.name
    return out


def example_batch(example: Sequence) -> int:
    """The batch of a model's example inputs: its first tensor's first dimension (1 where no input has one).

    >>> import torch
    >>> example_batch((3.0, torch.zeros(8, 2), torch.zeros(5)))
    8
    """
    return next((int(x.shape[0]) for x in example if hasattr(x, "shape") and len(x.shape)), 1)


def inputs_at_batch(example: tuple) -> Callable[[int], tuple]:
    """The example inputs at any batch size: every tensor input holds the batch in its first dimension (as the
    dynamic export takes it), so each is cut to its first ``b`` samples, or its samples repeated in turn up to
    ``b``; what has no dimension is passed as it is. The example's own batch (its first tensor's first
    dimension) gives the example itself. Where the tensor inputs differ in their first dimension there is no
    batch to resize: InputError for any other size.

    >>> import torch
    >>> at = inputs_at_batch((torch.arange(3).reshape(3, 1), 2.0))
    >>> at(2)[0].flatten().tolist(), at(5)[0].flatten().tolist(), at(5)[1]
    ([0, 1], [0, 1, 2, 0, 1], 2.0)
    """
    torch = import_torch()
    firsts = [x.shape[0] for x in example if isinstance(x, torch.Tensor) and x.dim()]
    own = example_batch(example)

    def resized(x, b: int):
        if not (isinstance(x, torch.Tensor) and x.dim()):
            return x
        if b <= x.shape[0]:
            return x[:b]
        return x.repeat(-(-b // x.shape[0]), *[1] * (x.dim() - 1))[:b]

    def at(b: int) -> tuple:
        if b == own:
            return example
        if len(set(firsts)) > 1:
            raise InputError(f"the factory's tensor inputs differ in their first dimension ({sorted(set(firsts))}), "
                             f"so they hold no batch to resize to {b}: use the factory's own batch, {own}")
        return tuple(resized(x, b) for x in example)
    return at
