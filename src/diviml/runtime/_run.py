"""Run a plan on the devices it names, check its outputs, and measure it against its prediction."""

from __future__ import annotations

import math
import socket
import statistics
from dataclasses import dataclass, field, replace

from ..errors import InputError, ValidationError
from ..frontends._torch import float32_in_full
from ..plan import Plan
from ._calibrate import Handoff, piece_waits
from ._dist import Comm, init, rank_of_devices
from ._execute import Executor
from ._pieces import cut
from ._rows import job_id, sample_offsets, split_rows
from ._source import ModelSource, model_source

# outputs must match the unsplit module within these (relative, absolute) tolerances, by dtype: the split
# program runs the same kernels, but a kernel may sum in another order on another thread count or device
TOLERANCE = {"float64": (1e-9, 1e-12), "float32": (1e-4, 1e-5), "float16": (1e-2, 1e-3), "bfloat16": (2e-2, 1e-2)}
# where the plan runs tasks on a GPU, the reference (the unsplit module on this CPU) and the split program run
# other kernels (cuDNN or cuBLAS against oneDNN), each rounding in its own order, through every layer; TF32
# is off for the run (frontends._torch.float32_in_full), so float32 stays float32
TOLERANCE_ACROSS_DEVICES = {"float64": (1e-7, 1e-10), "float32": (1e-3, 1e-4), "float16": (2e-2, 2e-3),
                            "bfloat16": (5e-2, 2e-2)}


@dataclass(frozen=True)
class PieceReport:
    device: str
    index: int
    tasks: int
    first_task: str
    measured_start_s: float
    measured_s: float  # median over the timed runs
    predicted_start_s: float | None
    predicted_s: float | None
    lead_s: float = 0.0  # the runtime's own time before the piece when it did not wait for another device


@dataclass(frozen=True)
class RunReport:
    model: str
    batch_size: int
    objective_kind: str
    world_size: int
    devices: dict  # plan device -> "rank R: torch device"
    pieces: int
    predicted_s: float
    measured_s: float  # median wall time of one request (latency) or batch
    measured_min_s: float
    measured_max_s: float
    ratio: float  # measured / predicted
    outputs_match: bool
    max_abs_error: float
    eager_s: float  # the unsplit module, this process, the first CPU device's threads
    repeats: int
    warmup: int
    piece_reports: tuple[PieceReport, ...] = ()
    handoffs: tuple[Handoff, ...] = ()  # what crossing devices added before pieces: receives and sends
    notes: tuple[str, ...] = ()
    samples_s: tuple[float, ...] = field(default=(), repr=False)

    @property
    def throughput(self) -> float:
        return self.batch_size / self.measured_s if self.measured_s > 0 else math.inf

    def to_dict(self) -> dict:
        return {"model": self.model, "batch_size": self.batch_size, "objective_kind": self.objective_kind,
                "world_size": self.world_size, "devices": self.devices, "pieces": self.pieces,
                "predicted_s": self.predicted_s, "measured_s": self.measured_s,
                "measured_min_s": self.measured_min_s, "measured_max_s": self.measured_max_s,
                "ratio": self.ratio, "outputs_match": self.outputs_match, "max_abs_error": self.max_abs_error,
                "eager_s": self.eager_s, "throughput_per_s": self.throughput, "repeats": self.repeats,
                "warmup": self.warmup, "notes": list(self.notes), "samples_s": list(self.samples_s),
                "piece_reports": [p.__dict__ for p in self.piece_reports],
                "handoffs": [h.__dict__ for h in self.handoffs]}


def torch_devices(platform, devices: list[str], rank_of: dict[str, int], rank: int) -> dict:
    """Plan device -> torch device for the devices of this rank; a GPU the machine lacks is an InputError."""
    import torch
    out, gpus = {}, 0
    for name in devices:
        d = platform.by_name[name]
        if rank_of[name] != rank:
            continue
        if d.is_host:
            out[name] = torch.device("cpu")
            continue
        if not torch.cuda.is_available():
            raise InputError(f"the plan runs tasks on {name!r} (type {d.type}), a GPU, but this machine has none "
                             "(torch.cuda.is_available() is False): run it where the GPU is, or schedule for a "
                             "CPU platform such as cpu-workers-2")
        if gpus >= torch.cuda.device_count():
            raise InputError(f"the plan needs more GPUs on this rank than the {torch.cuda.device_count()} here")
        out[name] = torch.device("cuda", gpus)
        gpus += 1
    return out


def _tolerance(platform, used: list[str], torch) -> dict:
    """The outputs' tolerance by dtype for a plan over ``used``; TF32 off where it runs tasks on a GPU."""
    if all(platform.by_name[d].is_host for d in used):
        return TOLERANCE
    float32_in_full(torch)
    return TOLERANCE_ACROSS_DEVICES


def _placed(platform, used: list[str], rank_of: dict[str, int]) -> dict[str, str]:
    """Plan device -> "rank R: torch device", by the rule :func:`torch_devices` applies on every rank."""
    out, gpus = {}, {}
    for name in used:
        r = rank_of[name]
        if platform.by_name[name].is_host:
            out[name] = f"rank {r}: cpu"
        else:
            out[name] = f"rank {r}: cuda:{gpus.get(r, 0)}"
            gpus[r] = gpus.get(r, 0) + 1
    return out


def run(source: ModelSource | str, plan: Plan, platform, *, problem=None, batch: int | None = None,
        repeats: int = 10, warmup: int = 3, rank: int = 0, world: int = 1, progress=None) -> RunReport:
    """Cut the model by ``plan``, run it ``warmup + repeats`` times on ``platform``'s devices, check every
    run's outputs against the unsplit module and report measured beside predicted (``plan.objective``).

    ``problem`` (the plan's problem) gives each piece's predicted time; ``world`` > 1 runs this process as
    rank ``rank`` of a torch.distributed job (see :func:`~diviml.runtime._dist.rank_of_devices`)."""
    import torch

    if isinstance(source, str):
        source = model_source(source)
    batch = _check_request(source, plan, platform, batch, repeats, warmup)
    split, order = any(len(p) > 1 for p in plan.parts.values()), plan.device_order
    rank_of = rank_of_devices(platform, world)
    used = sorted({a.device for a in plan.assignments}, key=list(platform.by_name).index)
    devices = torch_devices(platform, used, rank_of, rank)
    tolerance = _tolerance(platform, used, torch)
    threads = {d.name: d.threads for d in platform.devices}
    cpu_threads = next((d.threads for d in platform.devices if d.is_host and d.threads), None)
    if cpu_threads:
        torch.set_num_threads(cpu_threads)
    if progress:
        progress(f"capturing {source.name} at batch {batch}")
    captured, runnable, program = _program(source, plan, problem, batch, split)
    values = dict(zip([n.name for n in captured.gm.graph.nodes if n.op == "placeholder"], captured.args))
    reference, meta = _reference(captured, runnable, program, torch)
    eager = _time_eager(captured, torch, max(3, repeats // 2))
    comm = None
    if world > 1:
        init(rank, world)
        comm = Comm(program, rank_of, rank, meta)
    local = {d for d in program.pieces if rank_of[d] == rank}
    executor = Executor(program, {**devices, **{d: torch.device("cpu") for d in program.pieces if d not in devices}},
                        threads, {v: values[v] for v in program.state}, {v: values[v] for v in program.inputs},
                        comm=comm, local=local)
    timed = _timed_runs(executor, comm, reference, tolerance, warmup, repeats, progress, torch)
    notes: list[str] = []
    runs, one_host = timed.runs, True
    if comm is not None:
        runs, one_host = _on_one_clock(torch, world, timed.t0s, runs, notes)
    if not timed.match:
        raise ValidationError(f"the split program's outputs differ from the unsplit module's (largest absolute "
                              f"difference {timed.worst:.3g}, beyond the tolerance for their dtype): the plan or the "
                              "runtime is wrong; report it with the plan")
    samples = timed.samples
    measured = statistics.median(samples)
    predicted, spans = _predicted(problem, plan, order, notes)
    lead, handoffs = piece_waits(program, runs, lambda v: _nbytes(meta.get(v)))
    if not one_host:
        handoffs = tuple(h for h in handoffs if rank_of.get(h.src) == rank_of.get(h.dst))
    pieces = _piece_reports(program, runs, spans, lead)
    if source.batch_fixed is None and batch != plan.batch_size:
        notes.append(f"ran at batch {batch}, the plan was made for batch {plan.batch_size}")
    return RunReport(source.name, batch, plan.objective_kind, world,
                     _placed(platform, used, rank_of),
                     sum(len(p) for p in program.pieces.values()), predicted, measured, min(samples), max(samples),
                     measured / predicted if predicted > 0 else math.inf, timed.match, timed.worst, eager, repeats,
                     warmup, pieces, handoffs, tuple(notes), tuple(samples))


def _program(source: ModelSource, plan: Plan, problem, batch: int, split: bool):
    """The model captured at ``batch`` (the same weights on every rank), the program that runs (with a copy of
    each split task per sub-batch: runtime._rows) and its cut into per-device pieces."""
    import torch

    from ..frontends.pytorch import capture_at
    torch.manual_seed(0)  # every rank builds the same weights
    captured = capture_at(source.build(), source.inputs, batch)
    if problem is not None:
        _check_edges(captured, problem.graph)
    order = plan.device_order
    if split:
        jobs = split_rows(captured, plan.parts, order, batch)
        return captured, jobs.captured, cut(jobs.captured, jobs.device_order, jobs.task_of)
    return captured, captured, cut(captured, {d: [t for t, _ in ts] for d, ts in order.items()})


def _check_request(source: ModelSource, plan: Plan, platform, batch: int | None, repeats: int, warmup: int) -> int:
    """The batch to run at, after checking the plan can run here at it (InputError saying why not)."""
    if repeats < 1 or warmup < 0:
        raise InputError(f"--repeats must be >= 1 and --warmup >= 0, got {repeats} and {warmup}")
    unknown = sorted({a.device for a in plan.assignments} - set(platform.by_name))
    if unknown:
        raise InputError(f"the plan uses devices {unknown} that platform {platform.name!r} lacks: give the "
                         "platform it was scheduled for (--platform)")
    if plan.device_order is None:
        raise InputError(f"a {plan.objective_kind} plan has no start times to run in order: run a latency or "
                         "batch plan")
    batch = batch or plan.batch_size
    if any(len(p) > 1 for p in plan.parts.values()) and batch != plan.batch_size:
        raise InputError(f"the plan splits tasks into sub-batches of a batch of {plan.batch_size}: run it at that "
                         f"batch, not {batch}")
    if source.batch_fixed is not None and batch != source.batch_fixed:
        raise InputError(f"the model's factory gives inputs of batch {source.batch_fixed} but the plan is for "
                         f"batch {batch}: profile and schedule at the factory's batch")
    return batch


@dataclass
class _Timed:
    """The timed runs (after warm-up): wall times, per-piece timings and their clock origins, and whether
    every run's outputs matched the reference (the largest difference seen)."""
    samples: list = field(default_factory=list)
    runs: list = field(default_factory=list)
    t0s: list = field(default_factory=list)
    match: bool = True
    worst: float = 0.0


def _timed_runs(executor, comm, reference, tolerance: dict, warmup: int, repeats: int, progress, torch) -> _Timed:
    """``warmup + repeats`` runs, each checked against the reference; the last ``repeats`` kept."""
    timed = _Timed()
    try:
        for i in range(warmup + repeats):
            if comm is not None:
                torch.distributed.barrier()
            results, timings, wall = executor.run()
            ok, err = _compare(results, reference, tolerance, torch)
            timed.match, timed.worst = timed.match and ok, max(timed.worst, err)
            if comm is not None:
                wall, timed.match, timed.worst = _agree(torch, wall, timed.match, timed.worst)
            if i >= warmup:
                timed.samples.append(wall)
                timed.runs.append(timings)
                timed.t0s.append(executor.t0)
            if progress and (i + 1) % max(1, (warmup + repeats) // 5) == 0:
                progress(f"  run {i + 1}/{warmup + repeats}: {wall * 1e3:.3f} ms")
    finally:
        executor.close()
    return timed


def _on_one_clock(torch, world: int, t0s: list, runs: list, notes: list) -> tuple[list, bool]:
    """Every rank's timings on rank 0's clock (one host: one monotonic clock), and whether the ranks share a
    host; ends the process group."""
    gathered = [None] * world
    torch.distributed.all_gather_object(gathered, (socket.gethostname(), t0s, runs))
    one_host = len({host for host, _, _ in gathered}) == 1
    if not one_host:
        notes.append("ranks on several hosts: their timelines are each on their own clock, hand-offs between "
                     "them are not measured")
    runs = [sum((_shifted(g_runs[k], g_t0s[k] - t0s[k] if one_host else 0.0) for _, g_t0s, g_runs in gathered),
                []) for k in range(len(runs))]
    torch.distributed.barrier()
    torch.distributed.destroy_process_group()  # gloo's threads end before the interpreter does
    return runs, one_host


def _predicted(problem, plan: Plan, order: dict, notes: list) -> tuple[float, dict | None]:
    """The predicted time and each job's predicted span: the plan's device order re-timed on the given graph
    (it may be a calibrated one), or the plan's own objective without one."""
    if problem is None:
        return plan.objective, None
    from ..simulate import schedule
    timed = schedule(problem, plan.parts, order)
    part = {(t, off): k for t, p in plan.parts.items() for k, off in enumerate(sample_offsets([b for _, b in p]))}
    spans = {job_id(j.task, part[j.task, j.offset], plan.parts): (j.start, j.finish) for j in timed.jobs}
    if abs(timed.makespan - plan.objective) > 1e-9 * max(plan.objective, 1e-12):
        notes.append(f"predicted on the given graph: {timed.makespan:.6g} s (the plan said {plan.objective:.6g} s)")
    return timed.makespan, spans


def _check_edges(captured, graph) -> None:
    """The captured program's task-level edges must be the graph's: same names wired otherwise is another model."""
    from ..frontends.pytorch import task_of_nodes
    task_of = task_of_nodes(captured)
    edges = {(task_of[a.name], task_of[n.name]) for n in captured.gm.graph.nodes if n.name in task_of
             for a in n.all_input_nodes if a.name in task_of and task_of[a.name] != task_of[n.name]}
    differ = edges ^ set(graph.edges)
    if differ:
        raise InputError(f"the model's captured graph and the given graph have the same tasks but {len(differ)} "
                         f"different edges (e.g. {sorted(differ)[0]}): give the graph profiled from this model")


def _reference(captured, runnable, program, torch):
    """The unsplit module's results (flat, in the program's order) and every tensor value's shape and dtype
    in the program that runs (``runnable``: the captured one, or its rewrite into sub-batch jobs)."""
    meta: dict[str, tuple] = {}

    class Recorder(torch.fx.Interpreter):
        def run_node(self, node):
            value = super().run_node(node)
            if isinstance(value, torch.Tensor):
                meta[node.name] = (tuple(value.shape), value.dtype)
            elif isinstance(value, int):  # a size read off an input (dynamic batch): sent as a one-element tensor
                meta[node.name] = (None, int)
            return value

    with torch.no_grad():
        Recorder(runnable.gm).run(*runnable.args)
        out = captured.gm(*captured.args)
    flat, _ = torch.utils._pytree.tree_flatten(out)
    return dict(zip(program.results, flat)), meta


def _time_eager(captured, torch, repeats: int) -> float:
    import time
    with torch.no_grad():
        captured.gm(*captured.args)
        samples = []
        for _ in range(repeats):
            t0 = time.perf_counter()
            captured.gm(*captured.args)
            samples.append(time.perf_counter() - t0)
    return statistics.median(samples)


def _compare(results: dict, reference: dict, tolerance: dict, torch) -> tuple[bool, float]:
    ok, worst = True, 0.0
    for name, value in results.items():
        ref = reference[name]
        if not isinstance(ref, torch.Tensor):
            ok = ok and value == ref
            continue
        value = value.to(ref.device)
        if ref.dtype.is_floating_point:
            rtol, atol = tolerance.get(str(ref.dtype).removeprefix("torch."), tolerance["float32"])
            diff = (value.double() - ref.double()).abs().max().item() if ref.numel() else 0.0
            worst = max(worst, diff)
            ok = ok and value.shape == ref.shape and torch.allclose(value, ref, rtol=rtol, atol=atol)
        else:
            ok = ok and torch.equal(value, ref)
    return ok, worst


def _agree(torch, wall: float, match: bool, worst: float):
    """Across ranks: the slowest rank's wall time, every rank's match, the largest error."""
    t = torch.tensor([wall, 0.0 if match else 1.0, worst], dtype=torch.float64)
    torch.distributed.all_reduce(t, op=torch.distributed.ReduceOp.MAX)
    return float(t[0]), bool(t[1] == 0.0), float(t[2])


def _shifted(timings, by: float) -> list:
    return [replace(r, start=r.start + by, finish=r.finish + by) for r in timings] if by else list(timings)


def _nbytes(meta) -> int:
    """Bytes of a value from its recorded (shape, dtype); 8 for a size sent as an int."""
    if meta is None:
        return 0
    shape, dtype = meta
    if shape is None:
        return 8
    return math.prod(shape) * dtype.itemsize


def _piece_reports(program, runs, spans: dict | None, lead: dict) -> tuple[PieceReport, ...]:
    out = []
    for device, pieces in program.pieces.items():
        for p in pieces:
            seen = [r for timings in runs for r in timings if r.device == device and r.index == p.index]
            if not seen:
                continue
            pred_start = pred = None
            timed = [spans[t] for t in p.tasks if t in spans] if spans is not None else []  # a join is untimed
            if timed:
                pred_start = min(start for start, _ in timed)
                pred = max(finish for _, finish in timed) - pred_start
            out.append(PieceReport(device, p.index, len(p.tasks), p.tasks[0],
                                   statistics.median(r.start for r in seen),
                                   statistics.median(r.finish - r.start for r in seen), pred_start, pred,
                                   lead.get((device, p.index), 0.0)))
    return tuple(sorted(out, key=lambda r: r.measured_start_s))
