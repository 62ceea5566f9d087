"""Profiles: a captured, measured model as a TaskGraph, at several batch sizes, and how far the roofline is off."""

from __future__ import annotations

import re
import statistics
from dataclasses import dataclass
from typing import Callable, Sequence

from ...catalogue import CATALOGUE, device_type_of, spec
from ...errors import InputError
from ...graph import Task, TaskGraph
from .. import zoo
from .._torch import import_torch
from ..host import HOST_TYPE, HostSpec, measure_host
from ._capture import Captured, batch_first, capture, capture_at, example_batch, inputs_at_batch, with_inputs
from ._costs import NodeRecord, nbytes, stored_bytes, task_times
from ._measure import MIN_TIMING_S, measure
from ._samples import whole_batch_tasks


def to_task_graph(captured: Captured, records: list[NodeRecord], *, name: str,
                  measured_type: str | None = HOST_TYPE, analytic_types: Sequence[str] = ("v100", "a100"),
                  batch_size: int = 1, extra_times: dict | None = None, host: HostSpec | None = None,
                  measured_elsewhere: dict | None = None, whole_batch: Sequence[str] = ()) -> TaskGraph:
    """Tasks from the records: measured medians for ``measured_type``, the rest by :func:`task_times` (``host``
    is measured here when the records come from this CPU and it is not given). ``measured_elsewhere`` (task ->
    device type -> seconds) holds times measured on other devices, which replace those types' estimates;
    ``whole_batch`` names the tasks a batch plan must not cut (:func:`~._samples.whole_batch_tasks`)."""
    if measured_type == HOST_TYPE and host is None:
        host = measure_host()
    gm = captured.gm
    state_bytes = {n.name: 0.0 for n in gm.graph.nodes if n.op == "placeholder"}
    for a, node in zip(captured.args, [n for n in gm.graph.nodes if n.op == "placeholder"]):
        if node.name in captured.state:  # a folded broadcast (stride 0) holds its source's storage, not its view
            state_bytes[node.name] = stored_bytes(a)
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
                memory[n.name] += sum(nbytes(p) for p in modules[n.target].parameters())
    tasks, edges = [], []
    for r in records:
        times = {**task_times(r, measured_type, analytic_types, host), **(measured_elsewhere or {}).get(r.name, {})}
        table = {dt: dict(v) for dt, v in (extra_times or {}).get(r.name, {}).items()}
        tasks.append(Task(id=r.name, kind=r.kind, time=times, time_by_batch=table, flops=r.flops,
                          bytes_accessed=r.bytes_accessed, memory_bytes=memory[r.name], output_bytes=r.output_bytes,
                          module=captured.module_path.get(r.name), whole_batch=r.name in whole_batch))
        edges.extend((p, r.name) for p in r.inputs)
    return TaskGraph.create(tasks, edges, name=name, batch_size=batch_size)


def profile(model_fn: Callable[[], object], inputs_fn: Callable[[int], tuple], *, name: str,
            batches: Sequence[int] = (1,), measured_type: str | None = HOST_TYPE,
            analytic_types: Sequence[str] = ("v100", "a100"), repeats: int = 5, warmup: int = 1,
            threads: int | None = 1, min_time_s: float = MIN_TIMING_S,
            progress: Callable[[str], None] | None = None, device: str = "cpu",
            fold_constants: bool = True, also_on: Sequence[str] = (), also_at: Sequence[int] = ()) -> TaskGraph:
    """Capture and cost a model at each batch size; the first is the graph's own, the others fill the tables.
    ``also_at`` adds sizes to the tables only where the program holds a dynamic batch (one program at every
    size): a size not asked for never makes a model fail.

    ``fold_constants=False`` keeps what depends on no input as per-request work (the cost model before
    constant folding, for comparison).

    ``device`` is the torch device measured on (its times are recorded as ``measured_type``): the model and
    its inputs are put there before capture, so the captured graph runs there as the model would. Measured
    on the CPU (``measured_type`` "host"), this CPU is measured too and catalogue CPUs among
    ``analytic_types`` get times derived from the host's (:mod:`diviml.frontends.host`).

    ``also_on`` names more torch devices ("cuda", "cuda:1") on which the same captured program is measured,
    operator by operator, at every batch size; their times are recorded under each device's type (as
    :func:`measured_device_type` names it), so one graph holds the times of every device a plan may run on
    here, with the task ids of one capture (the ones ``diviml run`` cuts by).

    Tasks whose result for a sample depends on other samples are marked ``whole_batch``, so that a batch plan
    runs them whole (:func:`~._samples.whole_batch_tasks`; checked where the capture holds a dynamic batch)."""
    if not batches:
        raise InputError("give at least one batch size")
    torch = import_torch()
    host = _this_host(threads or torch.get_num_threads(), progress) if measured_type == HOST_TYPE else None
    # analytic only (no measured type): no weights are allocated, shapes come from meta tensors
    model, inputs_fn = _placed_model(torch, model_fn, inputs_fn, "meta" if measured_type is None else device)
    elsewhere = [(d, measured_device_type(d)) for d in also_on]  # a device not here: refused before any work
    per_batch: dict[int, dict[str, NodeRecord]] = {}
    other_times: dict[int, dict[str, dict[str, float]]] = {}  # batch -> task -> device type -> seconds
    base = None
    sizes = list(batches)
    for i, b in enumerate(sizes):
        if progress:
            progress(f"profiling {name} at batch {b} ({i + 1}/{len(sizes)})")
        captured = _program_at(model, inputs_fn, None if base is None else base[0], b, fold_constants)
        if base is None and captured.dynamic_batch:
            sizes += [a for a in also_at if a not in sizes]
        records = measure(captured, repeats=repeats if measured_type else 0, warmup=warmup if measured_type else 0,
                          threads=threads, min_time_s=min_time_s, progress=progress)
        per_batch[b] = {r.name: r for r in records}
        other_times[b] = _measured_elsewhere(captured, elsewhere, progress, repeats=repeats, warmup=warmup,
                                             threads=threads, min_time_s=min_time_s)
        if base is None:
            base = (captured, records)
    captured, records = base
    # which tasks mix samples, on two samples at least (real tensors only: a meta tensor has no values)
    whole = whole_batch_tasks(with_inputs(captured, inputs_fn(max(2, batches[0])))) if measured_type else ()
    for b in sizes[1:]:
        _check_same_graph(name, sizes[0], records, b, list(per_batch[b].values()))
    extra = {r.name: _by_batch({b: {**task_times(per_batch[b][r.name], measured_type, analytic_types, host),
                                    **other_times.get(b, {}).get(r.name, {})} for b in sizes[1:]})
             for r in records}
    return to_task_graph(captured, records, name=name, measured_type=measured_type, analytic_types=analytic_types,
                         batch_size=batches[0], extra_times=extra, host=host,
                         measured_elsewhere=other_times.get(batches[0], {}), whole_batch=whole)


def _program_at(model, inputs_fn: Callable[[int], tuple], base: Captured | None, batch: int,
                fold_constants: bool) -> Captured:
    """The program at ``batch``: captured at the first size (with a dynamic batch where the model exports so),
    then that program fed other inputs where it holds a dynamic batch, else captured again at each size."""
    if base is None:
        return capture_at(model, inputs_fn, batch, fold_constants=fold_constants)
    if base.dynamic_batch:
        return with_inputs(base, inputs_fn(batch))
    return capture(model, inputs_fn(batch), fold_constants=fold_constants)


def _measured_elsewhere(captured: Captured, devices: Sequence[tuple[str, str | None]], progress,
                        **timing) -> dict[str, dict[str, float]]:
    """Task -> device type -> seconds of the captured program measured on each of the torch ``devices`` (each
    with the type its times are recorded under)."""
    out: dict[str, dict[str, float]] = {}
    for other, other_type in devices:
        if progress:
            progress(f"  measuring the same program on {other} ({other_type})")
        for r in measure(on_device(captured, other), progress=progress, **timing):
            out.setdefault(r.name, {}).update(task_times(r, other_type, [], None))
    return out


def _by_batch(times: dict[int, dict[str, float]]) -> dict[str, dict[int, float]]:
    """batch -> device type -> seconds, turned into device type -> batch -> seconds."""
    out: dict[str, dict[int, float]] = {}
    for b, row in times.items():
        for t, value in row.items():
            out.setdefault(t, {})[b] = value
    return out


def _placed_model(torch, model_fn, inputs_fn, device: str):
    """The model built, and its inputs made, on ``device`` (built there directly for "meta")."""
    if device == "meta":
        with torch.device("meta"):
            return model_fn(), _moved(inputs_fn, "meta")
    model = model_fn()
    if torch.device(device).type == "cpu":
        return model, inputs_fn
    return model.to(device), _moved(inputs_fn, device)


def _this_host(threads: int, progress) -> HostSpec:
    host = measure_host(threads)
    if progress:
        progress(f"this CPU: {host.peak_flops_per_thread / 1e9:.0f} GFLOP/s and "
                 f"{host.bandwidth_per_thread / 1e9:.1f} GB/s per thread, {host.dispatch * 1e6:.1f} us "
                 "per operator call")
    return host


def on_device(captured: Captured, device: str) -> Captured:
    """A copy of a captured program with its module and values on torch ``device`` (the original stays)."""
    import copy
    torch = import_torch()
    target = torch.device(device)
    gm = copy.deepcopy(captured.gm).to(target)
    args = [a.to(target) if isinstance(a, torch.Tensor) else a for a in captured.args]
    return Captured(gm, args, captured.state, captured.user_inputs, captured.method, captured.module_path,
                    captured.dynamic_batch)


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
    torch = import_torch()
    if not torch.cuda.is_available():
        raise InputError("no CUDA device here (torch.cuda.is_available() is False): measure on cpu, or use none "
                         "for analytic costs")
    index = torch.device(device).index or 0
    if index >= torch.cuda.device_count():
        raise InputError(f"no {device} here: this machine has {torch.cuda.device_count()} CUDA device(s)")
    return device_type_of(torch.cuda.get_device_name(index))


def profile_module(module, example_inputs, *, name: str = "model", batches: Sequence[int] | None = None,
                   batch_dims: int | Sequence[int] | None = None, device: str | None = "cpu", repeats: int = 5,
                   threads: int | None = 1, min_time_s: float = MIN_TIMING_S,
                   progress: Callable[[str], None] | None = None, fold_constants: bool = True) -> TaskGraph:
    """Profile your own ``torch.nn.Module`` on ``example_inputs`` (a tuple): measured on ``device`` ("cpu": this
    machine's CPU, type 'host', with the catalogue CPU derived from it; "cuda"; None for analytic costs only),
    roofline times for every other device type of the catalogue. Top level as :func:`diviml.profile`.

    ``batches``: the sizes to measure, the first the graph's own; the inputs at another size are the example's
    cut or repeated along their first dimension (:func:`~._capture.inputs_at_batch`). By default the example's
    batch, and batch 1 too where that is larger and the program holds a dynamic batch, so that the sub-batches
    of a batch plan are priced by measured times, not in proportion to the whole batch's. ``batch_dims``: where
    the inputs hold the batch, if not in their first dimension (:func:`~._capture.batch_first`)."""
    example = tuple(example_inputs)
    if batch_dims is not None:
        module, example = batch_first(module, example, batch_dims)
    inputs = inputs_at_batch(example)
    own = example_batch(example)
    measured = measured_device_type(device)
    return profile(lambda: module, inputs, name=name, batches=tuple(batches or (own,)), measured_type=measured,
                   analytic_types=[t for t in CATALOGUE if t != measured], repeats=repeats, threads=threads,
                   min_time_s=min_time_s, progress=progress, device=device or "cpu", fold_constants=fold_constants,
                   also_at=default_table_sizes(own) if batches is None else ())


def default_table_sizes(own: int) -> tuple[int, ...]:
    """The sizes measured beside a model's own batch when none are asked for: batch 1 (a part of one sample is
    the smallest a batch plan cuts), for a model whose own batch is larger."""
    return (1,) if own > 1 else ()


def profile_zoo(name: str, *, batches: Sequence[int] = (1,), device: str | None = "cpu", repeats: int = 5,
                threads: int | None = 1, min_time_s: float = MIN_TIMING_S,
                progress: Callable[[str], None] | None = None, fold_constants: bool = True) -> TaskGraph:
    """Profile a zoo model: measured on ``device`` ("cpu", "cuda", "cuda:N", or None for analytic costs only),
    roofline times for every other device type of the catalogue."""
    model = zoo.get(name)
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
