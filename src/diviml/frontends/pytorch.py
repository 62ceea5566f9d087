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

    def run(self):
        return self.gm(*self.args)

    @property
    def device(self):
        """The torch device the captured model's tensors live on (that of its first tensor; CPU if none)."""
        torch = _torch()
        return next((a.device for a in self.args if isinstance(a, torch.Tensor)), torch.device("cpu"))


def capture(model, example_inputs: Sequence) -> Captured:
    torch = _torch()
    model = model.eval()
    example_inputs = tuple(example_inputs)
    try:
        with torch.no_grad():
            program = torch.export.export(model, example_inputs).run_decompositions()
    except Exception as exc:  # noqa: BLE001 - any export failure sends us to the fallback
        export_error = _first_line(exc)
    else:
        sig = program.graph_signature
        state = {**sig.inputs_to_parameters, **sig.inputs_to_buffers}
        values = {**dict(model.named_parameters()), **dict(model.named_buffers(remove_duplicate=False))}
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
        for node in program.graph_module.graph.nodes:
            stack = node.meta.get("nn_module_stack")
            if stack:
                paths[node.name] = list(stack.values())[-1][0]
        return Captured(program.graph_module, args, state, users, "export", paths)
    try:
        gm = torch.fx.symbolic_trace(model)
    except Exception as exc:  # noqa: BLE001
        raise InputError(f"cannot capture the model: torch.export failed ({export_error}) and torch.fx failed "
                         f"({_first_line(exc)}); data-dependent control flow is the usual cause: make it "
                         "traceable or wrap it in torch.cond") from None
    users = [n.name for n in gm.graph.nodes if n.op == "placeholder"]
    return Captured(gm, list(example_inputs), {}, users, "fx",
                    {n.name: str(n.target) for n in gm.graph.nodes if n.op == "call_module"})


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[0] if text else ''}"[:300]


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


def _nbytes(value) -> float:
    torch = _torch()
    if isinstance(value, torch.Tensor):
        return float(value.numel() * value.element_size())
    if isinstance(value, (list, tuple)):
        return sum(_nbytes(v) for v in value)
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
    alias: dict[str, str] = {}
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
            if node.op == "call_function" and getattr(node.target, "__name__", "") == "getitem":
                alias[node.name] = alias.get(node.args[0].name, node.args[0].name)
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
                src = alias.get(a.name, a.name)
                if a.name in state_names:
                    reads.append(a.name)
                elif src in records and src not in producers:
                    producers.append(src)
            flat = [x for x in args if isinstance(x, torch.Tensor)] + [
                x for a in args if isinstance(a, (list, tuple)) for x in a if isinstance(x, torch.Tensor)]
            in_bytes = sum(_nbytes(x) for x in flat)
            if module is not None:
                in_bytes += sum(_nbytes(p) for p in module.parameters(recurse=False))
            kind = str(getattr(node.target, "__name__", node.target))
            return NodeRecord(node.name, kind.split(".")[0], producers, reads,
                              count_flops(node.target, args, result, module), in_bytes + _nbytes(result),
                              _nbytes(result))

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


def to_task_graph(captured: Captured, records: list[NodeRecord], *, name: str, measured_type: str | None = "cpu",
                  analytic_types: Sequence[str] = ("v100", "a100"), batch_size: int = 1,
                  extra_times: dict | None = None) -> TaskGraph:
    """Tasks from the records: measured medians for ``measured_type``, roofline times for ``analytic_types``."""
    gm = captured.gm
    state_bytes = {n.name: 0.0 for n in gm.graph.nodes if n.op == "placeholder"}
    for a, node in zip(captured.args, [n for n in gm.graph.nodes if n.op == "placeholder"]):
        if node.name in captured.state:
            state_bytes[node.name] = _nbytes(a)
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
        times = {}
        if measured_type and r.times:
            times[measured_type] = statistics.median(r.times)
        elif measured_type:
            times[measured_type] = spec(measured_type).roofline(r.flops, r.bytes_accessed)
        for t in analytic_types:
            times[t] = spec(t).roofline(r.flops, r.bytes_accessed) if r.kind != "input" else 0.0
        if r.kind == "input":
            times = {k: 0.0 for k in times}
        table = {dt: dict(v) for dt, v in (extra_times or {}).get(r.name, {}).items()}
        tasks.append(Task(id=r.name, kind=r.kind, time=times, time_by_batch=table, flops=r.flops,
                          bytes_accessed=r.bytes_accessed, memory_bytes=memory[r.name], output_bytes=r.output_bytes,
                          module=captured.module_path.get(r.name)))
        edges.extend((p, r.name) for p in r.inputs)
    return TaskGraph.create(tasks, edges, name=name, batch_size=batch_size)


def profile(model_fn: Callable[[], object], inputs_fn: Callable[[int], tuple], *, name: str,
            batches: Sequence[int] = (1,), measured_type: str | None = "cpu",
            analytic_types: Sequence[str] = ("v100", "a100"), repeats: int = 5, warmup: int = 1,
            threads: int | None = 1, min_time_s: float = MIN_TIMING_S,
            progress: Callable[[str], None] | None = None, device: str = "cpu") -> TaskGraph:
    """Capture and cost a model at each batch size; the first is the graph's own, the others fill the tables.

    ``device`` is the torch device measured on (its times are recorded as ``measured_type``): the model and
    its inputs are put there before capture, so the captured graph runs there as the model would."""
    if not batches:
        raise InputError("give at least one batch size")
    torch = _torch()
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
        captured = capture(model, inputs_fn(b))
        records = measure(captured, repeats=repeats if measured_type else 0, warmup=warmup if measured_type else 0,
                          threads=threads, min_time_s=min_time_s, progress=progress)
        per_batch[b] = {r.name: r for r in records}
        if base is None:
            base = (captured, records)
    captured, records = base
    extra: dict[str, dict[str, dict[int, float]]] = {}
    for b in batches[1:]:
        for r in records:
            other = per_batch[b].get(r.name)
            if other is None or other.kind != r.kind:
                continue
            row = extra.setdefault(r.name, {})
            if measured_type and other.times:
                row.setdefault(measured_type, {})[b] = statistics.median(other.times)
            for t in analytic_types:
                row.setdefault(t, {})[b] = spec(t).roofline(other.flops, other.bytes_accessed) if r.kind != "input" else 0.0
    return to_task_graph(captured, records, name=name, measured_type=measured_type, analytic_types=analytic_types,
                         batch_size=batches[0], extra_times=extra)


def _moved(inputs_fn: Callable[[int], tuple], device: str) -> Callable[[int], tuple]:
    def inputs(batch: int) -> tuple:
        return tuple(x.to(device) if hasattr(x, "to") else x for x in inputs_fn(batch))
    return inputs


def measured_device_type(device: str | None) -> str | None:
    """The device type that times measured on torch device ``device`` are recorded as: 'cpu', the catalogue
    name of a CUDA device ('h100-sxm', 'a100', ...; 'cuda' when the catalogue has none), None for none.

    A CUDA device that is not present is an InputError that says so."""
    if device is None or device == "cpu":
        return device
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


def profile_zoo(name: str, *, batches: Sequence[int] = (1,), device: str | None = "cpu", repeats: int = 5,
                threads: int | None = 1, min_time_s: float = MIN_TIMING_S,
                progress: Callable[[str], None] | None = None) -> TaskGraph:
    """Profile a zoo model: measured on ``device`` ("cpu", "cuda", "cuda:N", or None for analytic costs only),
    roofline times for every other device type of the catalogue."""
    from ..zoo import get
    model = get(name)
    measured = measured_device_type(device)
    analytic = [t for t in CATALOGUE if t != measured]
    return profile(model.build, model.inputs, name=name, batches=batches, measured_type=measured,
                   analytic_types=analytic, repeats=repeats, threads=threads, min_time_s=min_time_s,
                   progress=progress, device=device or "cpu")


@dataclass(frozen=True)
class Calibration:
    device_type: str
    scale: float  # the factor on the roofline that best matches the measurements (median relative error)
    error_before: float  # median |roofline - measured| / measured
    error_after: float  # the same after scaling the roofline by ``scale``
    tasks: int


def calibrate(graph: TaskGraph, device_type: str = "cpu", spec_name: str | None = None) -> Calibration:
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
