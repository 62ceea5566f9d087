"""Run a plan on the devices it names, check its outputs, and measure it against its prediction."""

from __future__ import annotations

import math
import socket
import statistics
from dataclasses import dataclass, field, replace

from ..errors import ValidationError
from ..plan import Plan
from ._calibrate import Handoff, piece_waits
from ._prepare import _placed, _prepare, _Prepared, gpu_type_notes
from ._rows import job_id, sample_offsets
from ._source import ModelSource


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
    measured_s: float  # median wall time of one request (latency) or batch; a pipeline's time per request
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
    requests: int = 1  # requests each run streamed (a pipeline plan), else 1
    stream: tuple = field(default=(), repr=False)  # a stream's pieces in its median run (PieceRun), else ()

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
                "warmup": self.warmup, "requests": self.requests, "notes": list(self.notes),
                "samples_s": list(self.samples_s),
                "piece_reports": [p.__dict__ for p in self.piece_reports],
                "handoffs": [h.__dict__ for h in self.handoffs]}


def run(source: ModelSource | str, plan: Plan, platform, *, problem=None, batch: int | None = None,
        repeats: int = 10, warmup: int = 3, rank: int = 0, world: int = 1, progress=None,
        requests: int | None = None) -> RunReport:
    """Cut the model by ``plan``, run it ``warmup + repeats`` times on ``platform``'s devices, check every
    run's outputs against the unsplit module and report measured beside predicted (``plan.objective``).

    A pipeline plan's run streams ``requests`` requests (by default 16, or twice its depth + 1 where that is
    more) through its devices, piece p of request r in slot r + stage(p), and measures its time per request in
    the stream's steady state (:func:`stream_period`; its prediction: the largest device load).
    ``problem`` (the plan's problem) gives each piece's predicted time; ``world`` > 1 runs this process as
    rank ``rank`` of a torch.distributed job (see :func:`~diviml.runtime._dist.rank_of_devices`)."""
    prepared = _prepare(source, plan, platform, problem, batch, repeats, warmup, rank, world, progress, requests)
    timed = _Timed()
    try:
        for i in range(warmup + repeats):
            _one_run(prepared, timed, keep=i >= warmup)
            if progress and (i + 1) % max(1, (warmup + repeats) // 5) == 0:
                progress(f"  run {i + 1}/{warmup + repeats}: {timed.last * 1e3:.3f} ms")
    finally:
        prepared.executor.close()
    return _report(prepared, timed, repeats, warmup)


def run_beside(source: ModelSource | str, plans: tuple[Plan, Plan], platform, *, problem=None,
               batch: int | None = None, repeats: int = 10, warmup: int = 3, progress=None,
               requests: int | None = None) -> tuple[RunReport, RunReport]:
    """Two plans of one model run in turn in this process, each ``warmup`` times and then ``repeats`` times in
    blocks (A B B A ...), so that what one process's state does to a run's time (its threads, its device's
    clocks, its place on the cores) falls on both alike: a ratio of their times compares the plans, not two
    processes. On a lent H100 the same one-piece plan measured 8.7 and 5.1 ms in two processes a minute
    apart (benchmarks/results/runtime_fidelity_h100.md)."""
    first = _prepare(source, plans[0], platform, problem, batch, repeats, warmup, 0, 1, progress, requests)
    try:
        second = _prepare(first.source, plans[1], platform, problem, first.batch, repeats, warmup, 0, 1, progress,
                          requests)
    except BaseException:
        first.executor.close()
        raise
    pair, timed = (first, second), (_Timed(), _Timed())
    block = max(1, repeats // 4)
    try:
        for k in (0, 1):
            for _ in range(warmup):
                _one_run(pair[k], timed[k], keep=False)
        done = [0, 0]
        for b in range(2 * math.ceil(repeats / block)):
            k = (b + b // 2) % 2  # blocks in the order A B B A A B B A ...
            for _ in range(min(block, repeats - done[k])):
                _one_run(pair[k], timed[k], keep=True)
                done[k] += 1
            if progress:
                progress(f"  plan {'AB'[k]}: {done[k]}/{repeats} runs, last {timed[k].last * 1e3:.3f} ms")
    finally:
        for prepared in pair:
            prepared.executor.close()
    return _report(first, timed[0], repeats, warmup), _report(second, timed[1], repeats, warmup)


def _report(prepared: _Prepared, timed: "_Timed", repeats: int, warmup: int) -> RunReport:
    """What the timed runs measured beside what the plan predicted (ValidationError where outputs differed)."""
    import torch

    p = prepared
    notes: list[str] = []
    runs, one_host = timed.runs, True
    if p.comm is not None:
        runs, one_host = _on_one_clock(torch, p.world, timed.t0s, runs, notes)
    if not timed.match:
        raise ValidationError(f"the split program's outputs differ from the unsplit module's (largest absolute "
                              f"difference {timed.worst:.3g}, beyond the tolerance for their dtype): the plan or the "
                              "runtime is wrong; report it with the plan")
    samples = timed.samples
    measured = statistics.median(samples)
    predicted, spans = _predicted(p.problem, p.plan, p.order, notes)
    firsts = [[r for r in timings if r.request == 0] for timings in runs]  # a stream's first request
    lead, handoffs = piece_waits(p.program, firsts, lambda v: _nbytes(p.meta.get(v)))
    if not one_host:
        handoffs = tuple(h for h in handoffs if p.rank_of.get(h.src) == p.rank_of.get(h.dst))
    pieces = _piece_reports(p.program, runs, spans, lead)
    notes.extend(gpu_type_notes(p.platform, {d: p.executor.torch_device[d] for d in p.executor.local}))
    if p.batch != p.plan.batch_size:
        notes.append(f"ran at batch {p.batch}, the plan was made for batch {p.plan.batch_size}")
    return RunReport(p.source.name, p.batch, p.plan.objective_kind, p.world, _placed(p.platform, p.used, p.rank_of),
                     sum(len(x) for x in p.program.pieces.values()), predicted, measured, min(samples), max(samples),
                     measured / predicted if predicted > 0 else math.inf, timed.match, timed.worst, p.eager, repeats,
                     warmup, pieces, handoffs, tuple(notes), tuple(samples), p.requests,
                     _median_stream(runs, samples, measured) if p.requests > 1 else ())


@dataclass
class _Timed:
    """The timed runs (after warm-up): wall times, per-piece timings and their clock origins, and whether
    every run's outputs matched the reference (the largest difference seen); ``last``: the latest run's time."""
    samples: list = field(default_factory=list)
    runs: list = field(default_factory=list)
    t0s: list = field(default_factory=list)
    match: bool = True
    worst: float = 0.0
    last: float = 0.0


def _one_run(prepared: _Prepared, timed: _Timed, keep: bool) -> None:
    """Run the prepared plan once and check its outputs; its time and timings kept where ``keep``."""
    import torch

    comm, executor = prepared.comm, prepared.executor
    if comm is not None:
        torch.distributed.barrier()
    results, timings, wall = executor.run(prepared.requests)
    for r, request in enumerate(results):  # a stream's requests alternate the sets of inputs
        ok, err = _compare(request, prepared.references[r % len(prepared.references)], prepared.tolerance, torch)
        timed.match, timed.worst = timed.match and ok, max(timed.worst, err)
    if prepared.requests > 1:
        wall = stream_period(timings, prepared.stages, prepared.requests)
    if comm is not None:
        wall, timed.match, timed.worst = _agree(torch, wall, timed.match, timed.worst)
    timed.last = wall
    if keep:
        timed.samples.append(wall)
        timed.runs.append(timings)
        timed.t0s.append(executor.t0)


def _median_stream(runs: list, samples: list, measured: float) -> tuple:
    """The pieces of the timed run whose time per request is nearest the median: the stream drawn."""
    k = min(range(len(samples)), key=lambda i: abs(samples[i] - measured))
    return tuple(sorted(runs[k], key=lambda r: r.start))


def stream_period(timings, stages: dict, requests: int) -> float:
    """A stream's time per request in its steady state: the time between the ends of its full slots, from
    slot D (the deepest stage: the first in which every piece runs) to slot ``requests - 1`` (the last), over
    the slots between; each full slot completes one request's worth of work on every device, as a pipeline
    plan's objective (its largest device load) predicts. The slots before fill the pipeline and those after
    drain it. On several ranks each rank measures its own pieces; the slowest rank's figure is the run's."""
    depth = max(stages.values(), default=0)
    end: dict[int, float] = {}
    for r in timings:
        slot = r.request + stages.get((r.device, r.index), 0)
        end[slot] = max(end.get(slot, 0.0), r.finish)
    first, last = depth, requests - 1
    if first not in end or last not in end or last <= first:
        return 0.0
    return max(0.0, end[last] - end[first]) / (last - first)


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
    """The predicted time and each job's predicted compute span: the plan's device order re-timed on the given graph
    (it may be a calibrated one), or the plan's own objective without one. A pipeline plan's time is its
    largest device load on that graph; its spans are those of one request alone in the run's order."""
    if problem is None:
        return plan.objective, None
    from ..simulate import pipeline_loads, schedule
    timed = schedule(problem, plan.parts, order)
    part = {(t, off): k for t, p in plan.parts.items() for k, off in enumerate(sample_offsets([b for _, b in p]))}
    # a job's span from when it computes: a piece is timed from its call, after its worker took its inputs over
    # (what a 'receiver' platform has the job spend first; a piece reads other devices' values only at its start)
    spans = {job_id(j.task, part[j.task, j.offset], plan.parts): (j.start + j.receive, j.finish) for j in timed.jobs}
    predicted = pipeline_loads(problem, plan.placement).objective if plan.objective_kind == "pipeline" \
        else timed.makespan
    if abs(predicted - plan.objective) > 1e-9 * max(plan.objective, 1e-12):
        notes.append(f"predicted on the given graph: {predicted:.6g} s (the plan said {plan.objective:.6g} s)")
    return predicted, spans


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
    """Bytes of a value from its recorded shape and dtype; 8 for a size sent as an int."""
    if meta is None:
        return 0
    shape, dtype, _ = meta
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
            firsts = [r for r in seen if r.request == 0]  # where a stream's first request ran it
            pred_start = pred = None
            timed = [spans[t] for t in p.tasks if t in spans] if spans is not None else []  # a join is untimed
            if timed:
                pred_start = min(start for start, _ in timed)
                pred = max(finish for _, finish in timed) - pred_start
            out.append(PieceReport(device, p.index, len(p.tasks), p.tasks[0],
                                   statistics.median(r.start for r in firsts),
                                   statistics.median(r.finish - r.start for r in seen), pred_start, pred,
                                   lead.get((device, p.index), 0.0)))
    return tuple(sorted(out, key=lambda r: r.measured_start_s))
