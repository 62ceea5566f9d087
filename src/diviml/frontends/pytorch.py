"""PyTorch front end: a ``torch.nn.Module`` and example inputs -> a TaskGraph with per-device costs.

Capture: ``torch.export`` (decomposed to core ATen operators) first, ``torch.fx.symbolic_trace`` as a
fallback; if both fail, the error names what broke capture. One task per operator; getitem nodes are
folded into the operator whose tuple they unpack; parameters and buffers are not tasks but resident memory
of the first task that uses them; every task keeps the module path it came from.

Costs: FLOPs (convolutions, matrix products; elementwise, normalisation and pooling count one FLOP per
output element and are memory-bound through their bytes) and bytes moved per task; measured time on the
CPU or a CUDA device (warm-up, repeats, median, a fixed thread count) at several batch sizes; an analytic roofline time for
the devices of :mod:`diviml.catalogue` that are not measured. On a CUDA device the model runs there and
each operator's time is read off CUDA events; the times are recorded under the catalogue's name for that
device (an H100 SXM's as 'h100-sxm'), beside the roofline of every other type.
"""

from __future__ import annotations

import math
import re
import statistics
import time
from dataclasses import dataclass, field
from typing import Callable, Sequence

from ..catalogue import CATALOGUE, device_type_of, spec
from .host import HOST_TYPE, HostSpec, derived_time, measure_host
from ..errors import InputError
from ..graph import Task, TaskGraph


def _torch():
    try:
        import torch
    except ImportError:
        raise InputError("the PyTorch front end needs torch: pip install 'diviml[torch]'") from None
    return torch


@dataclass
class Captured:
    """A captured model: its graph module, the values of all its placeholders, and where they came from."""
    gm: object  # torch.fx.GraphModule
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
        torch = _torch()
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
    torch = _torch()
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
    torch = _torch()
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


def _tensor_outputs(model):
    """``model`` returning only the tensors among its outputs (in pytree order), as a module named ``inner``."""
    torch = _torch()

    class TensorOutputs(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.inner = model

        def forward(self, *args):
            leaves = torch.utils._pytree.tree_leaves(self.inner(*args))
            return tuple(x for x in leaves if isinstance(x, torch.Tensor))

    return TensorOutputs()


def _capture(model, example_inputs: Sequence, dynamic_batch: bool = False) -> Captured:
    torch = _torch()
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
        paths = {}
        prefix = "inner." if type(model).__name__ == "TensorOutputs" else ""
        for node in program.graph_module.graph.nodes:
            stack = node.meta.get("nn_module_stack")
            if stack:
                paths[node.name] = list(stack.values())[-1][0].removeprefix(prefix)
        return Captured(program.graph_module, args, state, users, "export", paths, dynamic_batch)
    try:
        gm = torch.fx.symbolic_trace(model)
    except Exception as exc:  # noqa: BLE001
        raise InputError(f"cannot capture the model: torch.export failed ({export_error}) and torch.fx failed "
                         f"({_first_line(exc)})") from None
    users = [n.name for n in gm.graph.nodes if n.op == "placeholder"]
    return Captured(gm, list(example_inputs), {}, users, "fx",
                    {n.name: str(n.target) for n in gm.graph.nodes if n.op == "call_module"})


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[0] if text else ''}"[:300]


def task_of_nodes(captured: Captured) -> dict[str, str]:
    """fx node name -> the task it belongs to: each operator is a task, a getitem is part of the operator whose
    output it unpacks, each user input is a task; parameters, buffers and the output belong to none. The one
    definition of task ids: profiles name their tasks by it and the runtime cuts plans by it."""
    out = {name: name for name in captured.user_inputs}
    for node in captured.gm.graph.nodes:
        if node.op in ("call_function", "call_method", "call_module"):
            if node.op == "call_function" and getattr(node.target, "__name__", "") == "getitem":
                out[node.name] = out.get(node.args[0].name, node.args[0].name)
            else:
                out[node.name] = node.name
    return out


# -- running and measuring ---------------------------------------------------------------------------
@dataclass
class NodeRecord:
    name: str
    kind: str
    inputs: list  # names of producing task nodes
    state_inputs: list  # placeholder names of parameters / buffers read
    flops: float
    bytes_accessed: float
    output_bytes: float
    times: list = field(default_factory=list)  # measured seconds
    alias: bool = False  # no kernel runs: a view of an input, a shape query, a check
    outputs: float | None = None  # elements of the output (how many cores a CPU spreads the operator over)


def _nbytes(value) -> float:
    torch = _torch()
    if isinstance(value, torch.Tensor):
        return float(value.numel() * value.element_size())
    if isinstance(value, (list, tuple)):
        return sum(_nbytes(v) for v in value)
    return 0.0


# operators that always return a view of their input: no kernel runs, only the tensor's metadata changes
VIEWS = frozenset({"view", "_unsafe_view", "permute", "expand", "unsqueeze", "squeeze", "select", "slice", "t",
                   "transpose", "alias", "as_strided", "detach", "diagonal", "unfold", "split", "split_with_sizes",
                   "unbind", "chunk", "narrow", "view_as", "expand_as", "detach_"})
# operators that return a view when they can and copy otherwise: a view where the output shares its input's storage
MAYBE_VIEWS = frozenset({"reshape", "flatten", "unflatten", "contiguous"})


def _is_view(kind: str, inputs: list, result) -> bool:
    """Whether the operator runs no kernel: a view of an input, or no tensor at all (a shape query such as
    ``sym_size``, a check such as ``_assert_tensor_metadata``)."""
    if kind in VIEWS:
        return True
    torch = _torch()
    if not _holds_tensor(result):
        return True
    if kind not in MAYBE_VIEWS or not isinstance(result, torch.Tensor) or result.device.type == "meta":
        return False
    ptr = result.untyped_storage().data_ptr()
    return any(x.untyped_storage().data_ptr() == ptr for x in inputs)


def _holds_tensor(value) -> bool:
    torch = _torch()
    if isinstance(value, torch.Tensor):
        return True
    return isinstance(value, (list, tuple)) and any(_holds_tensor(v) for v in value)


def analytic_time(device_type: str, record: "NodeRecord") -> float:
    """The catalogue's roofline time of an operator; zero for inputs and for views (no kernel runs)."""
    if record.kind == "input" or record.alias:
        return 0.0
    return spec(device_type).roofline(record.flops, record.bytes_accessed, record.outputs)


def _times(record: "NodeRecord", measured_type: str | None, analytic_types: Sequence[str],
           host: HostSpec | None) -> dict[str, float]:
    """One operator's time per device type: the measured median; a catalogue CPU's derived from the host's
    measurement (:mod:`diviml.frontends.host`); the roofline for the rest. Inputs cost nothing, and views
    nothing but what was measured (a view runs no kernel)."""
    if record.kind == "input":
        return {t: 0.0 for t in ([measured_type] if measured_type else []) + list(analytic_types)}
    measured = statistics.median(record.times) if record.times else None
    if record.alias:  # what the measurement saw (an eager call); no kernel anywhere else
        return {**({measured_type: measured or 0.0} if measured_type else {}), **{t: 0.0 for t in analytic_types}}
    times = {}
    if measured_type == HOST_TYPE:
        times[HOST_TYPE] = measured if measured is not None else host.roofline(
            record.flops, record.bytes_accessed, record.outputs)
    elif measured_type:
        times[measured_type] = measured if measured is not None else analytic_time(measured_type, record)
    for t in analytic_types:
        if spec(t).is_cpu:
            times[t] = derived_time(spec(t), record.flops, record.bytes_accessed, record.outputs,
                                    measured if measured_type == HOST_TYPE else None, host)
        else:
            times[t] = analytic_time(t, record)
    return times


def _stored_bytes(value) -> float:
    """Bytes a transfer of ``value`` moves: each tensor's elements, or its storage where that is smaller (a
    stride-0 expand sends its source, not the broadcast view)."""
    torch = _torch()
    if isinstance(value, torch.Tensor):
        try:
            return float(min(value.numel() * value.element_size(), value.untyped_storage().nbytes()))
        except (RuntimeError, NotImplementedError):  # no storage (some tensor subclasses): its elements
            return _nbytes(value)
    if isinstance(value, (list, tuple)):
        return sum(_stored_bytes(v) for v in value)
    return 0.0


def _numel(value) -> float:
    torch = _torch()
    if isinstance(value, torch.Tensor):
        return float(value.numel())
    if isinstance(value, (list, tuple)):
        return sum(_numel(v) for v in value)
    return 0.0


def count_flops(target, args, out, module=None) -> float:
    """FLOPs of one operator: 2 x multiply-adds for convolutions and matrix products, one per output element
    otherwise (the convention of torch.utils.flop_counter for the former)."""
    torch = _torch()
    name = str(getattr(target, "__name__", target))
    tensors = [a for a in args if isinstance(a, torch.Tensor)]
    if module is not None:
        if isinstance(module, torch.nn.modules.conv._ConvNd):
            w = module.weight
            return 2.0 * _numel(out) * w.shape[1] * math.prod(w.shape[2:])
        if isinstance(module, torch.nn.Linear):
            return 2.0 * _numel(out) * module.in_features
        return _numel(out)
    if name.startswith("convolution"):
        w = args[1]
        return 2.0 * _numel(out) * w.shape[1] * math.prod(w.shape[2:])
    if name.startswith(("mm", "addmm", "bmm", "baddbmm")):
        a = tensors[-2]
        return 2.0 * _numel(out) * a.shape[-1]
    return _numel(out)


class _Clock:
    """Wall-clock timing on the CPU; CUDA-event timing, synchronised first, on a CUDA device."""

    def __init__(self, torch, device):
        self.torch = torch
        self.cuda = device.type == "cuda"
        self.device = device

    def start(self):
        if not self.cuda:
            return time.perf_counter()
        self.torch.cuda.synchronize(self.device)
        event = self.torch.cuda.Event(enable_timing=True)
        event.record()
        return event

    def stop(self, started) -> float:
        if not self.cuda:
            return time.perf_counter() - started
        event = self.torch.cuda.Event(enable_timing=True)
        event.record()
        event.synchronize()
        return started.elapsed_time(event) / 1e3


MIN_SAMPLE_S = 2e-4  # an operator faster than this is timed over several back-to-back calls per sample
# On a GPU a sample is longer and the warm-up runs for a while: an idle GPU drops its clocks (an H100 to a
# sixth), and short samples with gaps between them never bring them back up.
MIN_SAMPLE_S_CUDA = 1e-3
WARMUP_S_CUDA = 1.0
# Timing passes go on until this long has passed (and at least ``repeats`` passes ran, at most MAX_PASSES): on
# a shared machine the host runs faster or slower for seconds at a time, and five passes of a 1 ms model
# fit inside one such stretch. Spread over seconds, the medians of two profiles agree (bert-tiny re-profiled
# 26.6% apart in total with five passes).
MIN_TIMING_S = 2.0
MAX_PASSES = 200


def measure(captured: Captured, *, repeats: int = 5, warmup: int = 1, threads: int | None = 1,
            min_time_s: float = MIN_TIMING_S, progress: Callable[[str], None] | None = None) -> list[NodeRecord]:
    """Run the graph node by node, recording costs and (repeats > 0) the median time of every operator.

    After the warm-up the graph runs at least ``repeats`` times and, when ``repeats`` > 0, until
    ``min_time_s`` seconds of timing have passed (at most MAX_PASSES passes); each pass times every operator's own call once
    (averaged over enough back-to-back calls to reach MIN_SAMPLE_S, or MIN_SAMPLE_S_CUDA). Samples of one operator are thus
    spread over the whole profile, so a burst of noise on a shared machine spoils one sample of many
    operators, not every sample of a few: re-profiling gives steadier medians than timing each operator's
    repeats back to back. On a CUDA device (where the captured model and inputs live) each sample starts
    after a synchronise and is read off CUDA events, so it is the time the operator holds the stream when
    its calls run back to back: kernel time, or launch time where launching is slower."""
    torch = _torch()
    if threads:
        torch.set_num_threads(threads)
    clock = _Clock(torch, captured.device)
    min_sample = MIN_SAMPLE_S_CUDA if clock.cuda else MIN_SAMPLE_S
    gm = captured.gm
    modules = dict(gm.named_modules())
    task_of = task_of_nodes(captured)
    records: dict[str, NodeRecord] = {}
    calls_per_sample: dict[str, int] = {}
    state_names = set(captured.state)
    user = set(captured.user_inputs)
    timing = [False]

    class Recorder(torch.fx.Interpreter):
        def run_node(self, node):
            if node.op == "placeholder":
                result = super().run_node(node)
                if node.name in user and node.name not in records:
                    records[node.name] = NodeRecord(node.name, "input", [], [], 0.0, 0.0, _nbytes(result))
                return result
            if node.op not in ("call_function", "call_method", "call_module"):
                return super().run_node(node)
            if task_of[node.name] != node.name:  # a getitem: part of the task it unpacks
                return super().run_node(node)
            args, kwargs = self.fetch_args_kwargs_from_env(node)
            module = modules[node.target] if node.op == "call_module" else None
            fn = module if module is not None else (
                node.target if node.op == "call_function" else getattr(args[0], node.target))
            call_args = args if node.op != "call_method" else args[1:]
            t0 = clock.start()
            result = fn(*call_args, **kwargs)
            elapsed = clock.stop(t0)
            if node.name not in records:
                records[node.name] = self.record(node, args, result, module)
            if timing[0]:
                k = calls_per_sample.get(node.name)
                if k is None:  # first timed pass: size the sample
                    k = calls_per_sample[node.name] = max(1, min(1000, math.ceil(min_sample / max(elapsed, 1e-7))))
                if k > 1:
                    t0 = clock.start()
                    for _ in range(k):
                        fn(*call_args, **kwargs)
                    elapsed = clock.stop(t0) / k
                records[node.name].times.append(elapsed)
            return result

        def record(self, node, args, result, module) -> NodeRecord:
            producers, reads = [], []
            for a in node.all_input_nodes:
                src = task_of.get(a.name, a.name)
                if a.name in state_names:
                    reads.append(a.name)
                elif src in records and src not in producers:
                    producers.append(src)
            flat = [x for x in args if isinstance(x, torch.Tensor)] + [
                x for a in args if isinstance(a, (list, tuple)) for x in a if isinstance(x, torch.Tensor)]
            in_bytes = sum(_nbytes(x) for x in flat)
            if module is not None:
                in_bytes += sum(_nbytes(p) for p in module.parameters(recurse=False))
            kind = str(getattr(node.target, "__name__", node.target)).split(".")[0]
            return NodeRecord(node.name, kind, producers, reads,
                              count_flops(node.target, args, result, module), in_bytes + _nbytes(result),
                              _stored_bytes(result), alias=_is_view(kind, flat, result), outputs=_numel(result))

    with torch.no_grad():
        started = time.perf_counter()
        for _ in range(warmup):
            gm(*captured.args)
        while clock.cuda and warmup and time.perf_counter() - started < WARMUP_S_CUDA:
            gm(*captured.args)
            torch.cuda.synchronize(clock.device)
        Recorder(gm).run(*captured.args)  # costs and graph structure
        timing[0] = True
        started, passes, shown = time.perf_counter(), 0, 0
        while passes < repeats or (repeats and passes < MAX_PASSES and time.perf_counter() - started < min_time_s):
            Recorder(gm).run(*captured.args)
            passes += 1
            # done when both the passes and the time are: the bar shows the one further from it
            done = min(passes / repeats, (time.perf_counter() - started) / min_time_s if min_time_s > 0 else 1.0)
            filled = int(20 * min(done, 1.0))
            if progress and filled > shown:  # at most 20 lines
                shown = filled
                progress(f"  [{'#' * filled}{'.' * (20 - filled)}] {passes} timing passes in "
                         f"{time.perf_counter() - started:.1f} s")
    return list(records.values())


def to_task_graph(captured: Captured, records: list[NodeRecord], *, name: str,
                  measured_type: str | None = HOST_TYPE, analytic_types: Sequence[str] = ("v100", "a100"),
                  batch_size: int = 1, extra_times: dict | None = None, host: HostSpec | None = None) -> TaskGraph:
    """Tasks from the records: measured medians for ``measured_type``, the rest by :func:`_times` (``host``
    is measured here when the records come from this CPU and it is not given)."""
    if measured_type == HOST_TYPE and host is None:
        host = measure_host()
    gm = captured.gm
    state_bytes = {n.name: 0.0 for n in gm.graph.nodes if n.op == "placeholder"}
    for a, node in zip(captured.args, [n for n in gm.graph.nodes if n.op == "placeholder"]):
        if node.name in captured.state:  # a folded broadcast (stride 0) holds its source's storage, not its view
            state_bytes[node.name] = _stored_bytes(a)
    owner: dict[str, str] = {}
    for r in records:
        for s in r.state_inputs:
            owner.setdefault(s, r.name)
    memory = {r.name: 0.0 for r in records}
    for s, r in owner.items():
        memory[r] += state_bytes.get(s, 0.0)
    if captured.method == "fx":
        modules = dict(gm.named_modules())
        for n in gm.graph.nodes:
            if n.op == "call_module" and n.name in memory:
                memory[n.name] += sum(_nbytes(p) for p in modules[n.target].parameters())
    tasks, edges = [], []
    for r in records:
        times = _times(r, measured_type, analytic_types, host)
        table = {dt: dict(v) for dt, v in (extra_times or {}).get(r.name, {}).items()}
        tasks.append(Task(id=r.name, kind=r.kind, time=times, time_by_batch=table, flops=r.flops,
                          bytes_accessed=r.bytes_accessed, memory_bytes=memory[r.name], output_bytes=r.output_bytes,
                          module=captured.module_path.get(r.name)))
        edges.extend((p, r.name) for p in r.inputs)
    return TaskGraph.create(tasks, edges, name=name, batch_size=batch_size)


def profile(model_fn: Callable[[], object], inputs_fn: Callable[[int], tuple], *, name: str,
            batches: Sequence[int] = (1,), measured_type: str | None = HOST_TYPE,
            analytic_types: Sequence[str] = ("v100", "a100"), repeats: int = 5, warmup: int = 1,
            threads: int | None = 1, min_time_s: float = MIN_TIMING_S,
            progress: Callable[[str], None] | None = None, device: str = "cpu",
            fold_constants: bool = True) -> TaskGraph:
    """Capture and cost a model at each batch size; the first is the graph's own, the others fill the tables.

    ``fold_constants=False`` keeps what depends on no input as per-request work (the cost model before
    constant folding, for comparison).

    ``device`` is the torch device measured on (its times are recorded as ``measured_type``): the model and
    its inputs are put there before capture, so the captured graph runs there as the model would. Measured
    on the CPU (``measured_type`` "host"), this CPU is measured too and catalogue CPUs among
    ``analytic_types`` get times derived from the host's (:mod:`diviml.frontends.host`)."""
    if not batches:
        raise InputError("give at least one batch size")
    torch = _torch()
    host = None
    if measured_type == HOST_TYPE:
        host = measure_host(threads or torch.get_num_threads())
        if progress:
            progress(f"this CPU: {host.peak_flops_per_thread / 1e9:.0f} GFLOP/s and "
                     f"{host.bandwidth_per_thread / 1e9:.1f} GB/s per thread, {host.dispatch * 1e6:.1f} us "
                     "per operator call")
    if measured_type is None:  # analytic only: no weights are allocated, shapes come from meta tensors
        with torch.device("meta"):
            model = model_fn()
        inputs_fn = _moved(inputs_fn, "meta")
    else:
        model = model_fn()
        if torch.device(device).type != "cpu":
            model = model.to(device)
            inputs_fn = _moved(inputs_fn, device)
    per_batch: dict[int, dict[str, NodeRecord]] = {}
    base = None
    for i, b in enumerate(batches):
        if progress:
            progress(f"profiling {name} at batch {b} ({i + 1}/{len(batches)})")
        if base is None:
            captured = capture_at(model, inputs_fn, b, fold_constants=fold_constants)
        elif base[0].dynamic_batch:
            captured = with_inputs(base[0], inputs_fn(b))
        else:
            captured = capture(model, inputs_fn(b), fold_constants=fold_constants)
        records = measure(captured, repeats=repeats if measured_type else 0, warmup=warmup if measured_type else 0,
                          threads=threads, min_time_s=min_time_s, progress=progress)
        per_batch[b] = {r.name: r for r in records}
        if base is None:
            base = (captured, records)
    captured, records = base
    extra: dict[str, dict[str, dict[int, float]]] = {}
    for b in batches[1:]:
        _check_same_graph(name, batches[0], records, b, list(per_batch[b].values()))
        for r in records:
            row = extra.setdefault(r.name, {})
            for t, value in _times(per_batch[b][r.name], measured_type, analytic_types, host).items():
                row.setdefault(t, {})[b] = value
    return to_task_graph(captured, records, name=name, measured_type=measured_type, analytic_types=analytic_types,
                         batch_size=batches[0], extra_times=extra, host=host)


def _check_same_graph(name: str, base: int, records: list, batch: int, others: list) -> None:
    """Batch tables need the same operators, kinds and wiring at every batch size: the exported graph may
    change with the batch (a view folded away at batch 1, a shape-specialised path), and times matched by
    node name would then land on the wrong operators. Refuse rather than mislabel."""
    def shape(rs):
        return [(r.name, r.kind, tuple(r.inputs)) for r in rs]
    a, b = shape(records), shape(others)
    if a == b:
        return
    k = next((i for i, (x, y) in enumerate(zip(a, b)) if x != y), min(len(a), len(b)))
    where = f"operator {k} is {a[k][0]} ({a[k][1]})" if k < len(a) else f"batch {batch} has more operators"
    there = f"{b[k][0]} ({b[k][1]})" if k < len(b) else "nothing"
    raise InputError(f"{name}: the captured graph changes with the batch size ({len(a)} operators at batch {base}, "
                     f"{len(b)} at batch {batch}; {where} at batch {base} but {there} at batch {batch}): batch "
                     "tables cannot be lined up; profile each batch size into its own graph")


def _moved(inputs_fn: Callable[[int], tuple], device: str) -> Callable[[int], tuple]:
    def inputs(batch: int) -> tuple:
        return tuple(x.to(device) if hasattr(x, "to") else x for x in inputs_fn(batch))
    return inputs


def measured_device_type(device: str | None) -> str | None:
    """The device type that times measured on torch device ``device`` are recorded as: 'host', the catalogue
    name of a CUDA device ('h100-sxm', 'a100', ...; 'cuda' when the catalogue has none), None for none.

    A CUDA device that is not present is an InputError that says so."""
    if device is None:
        return None
    if device == "cpu":
        return HOST_TYPE
    if not re.fullmatch(r"cuda(:\d+)?", device):
        raise InputError(f"cannot measure on {device!r}: use cpu, cuda, cuda:N, or none for analytic costs")
    torch = _torch()
    if not torch.cuda.is_available():
        raise InputError("no CUDA device here (torch.cuda.is_available() is False): measure on cpu, or use none "
                         "for analytic costs")
    index = torch.device(device).index or 0
    if index >= torch.cuda.device_count():
        raise InputError(f"no {device} here: this machine has {torch.cuda.device_count()} CUDA device(s)")
    return device_type_of(torch.cuda.get_device_name(index))


def profile_module(module, example_inputs, *, name: str = "model", device: str | None = "cpu", repeats: int = 5,
                   threads: int | None = 1, min_time_s: float = MIN_TIMING_S,
                   progress: Callable[[str], None] | None = None, fold_constants: bool = True) -> TaskGraph:
    """Profile your own ``torch.nn.Module`` on ``example_inputs`` (a tuple), at their batch size: measured on
    ``device`` ("cpu": this machine's CPU, type 'host', with the catalogue CPU derived from it; "cuda";
    None for analytic costs only), roofline times for every other device type of the catalogue.
    Top level as :func:`diviml.profile`."""
    example = tuple(example_inputs)
    batch = next((int(x.shape[0]) for x in example if hasattr(x, "shape") and len(x.shape)), 1)
    measured = measured_device_type(device)
    return profile(lambda: module, lambda _batch: example, name=name, batches=(batch,), measured_type=measured,
                   analytic_types=[t for t in CATALOGUE if t != measured], repeats=repeats, threads=threads,
                   min_time_s=min_time_s, progress=progress, device=device or "cpu", fold_constants=fold_constants)


def profile_zoo(name: str, *, batches: Sequence[int] = (1,), device: str | None = "cpu", repeats: int = 5,
                threads: int | None = 1, min_time_s: float = MIN_TIMING_S,
                progress: Callable[[str], None] | None = None, fold_constants: bool = True) -> TaskGraph:
    """Profile a zoo model: measured on ``device`` ("cpu", "cuda", "cuda:N", or None for analytic costs only),
    roofline times for every other device type of the catalogue."""
    from ..zoo import get
    model = get(name)
    measured = measured_device_type(device)
    analytic = [t for t in CATALOGUE if t != measured]
    return profile(model.build, model.inputs, name=name, batches=batches, measured_type=measured,
                   analytic_types=analytic, repeats=repeats, threads=threads, min_time_s=min_time_s,
                   progress=progress, device=device or "cpu", fold_constants=fold_constants)


@dataclass(frozen=True)
class Calibration:
    device_type: str
    scale: float  # the factor on the roofline that best matches the measurements (median relative error)
    error_before: float  # median |roofline - measured| / measured
    error_after: float  # the same after scaling the roofline by ``scale``
    tasks: int


def calibrate(graph: TaskGraph, device_type: str, spec_name: str | None = None) -> Calibration:
    """How well the catalogue's roofline for ``spec_name`` predicts the times measured on ``device_type``.

    The fitted scale is what a user multiplies analytic times of that device by; the errors say how far the
    model is from the measurements per operator, before and after."""
    model = spec(spec_name or device_type)
    pairs = [(t.time[device_type], model.roofline(t.flops or 0.0, t.bytes_accessed or 0.0))
             for t in graph.tasks if t.kind != "input" and t.time.get(device_type, 0.0) > 0]
    if not pairs:
        raise InputError(f"no measured {device_type} times to calibrate against")
    def error(k: float) -> float:
        return statistics.median(abs(k * r - m) / m for m, r in pairs)

    # the scale with the smallest median error lies at (or next to) one of the per-task ratios; 1 is the model
    candidates = sorted({1.0} | {m / r for m, r in pairs if r > 0})
    step = max(1, len(candidates) // 200)
    scale = min(candidates[::step] + [1.0], key=error)
    return Calibration(device_type, scale, error(1.0), error(scale), len(pairs))
